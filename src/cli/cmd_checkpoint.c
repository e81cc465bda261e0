/*
 * cmd_checkpoint.c: `zbsched checkpoint init|export|import`, weights in
 * and out of zbsched.
 *
 *   init FILE -o DIR       the state `zbsched run FILE` starts from (step 0,
 *                          its seed's weights and data order), as a
 *                          checkpoint directory: to hand the same initial
 *                          weights to another framework, or to resume from
 *   export DIR -o OUT      a checkpoint directory as Hugging Face's
 *                          LlamaForCausalLM (runtime/hf_weights.h)
 *   import HF -o DIR       the other way, for `run --resume` and `generate`
 *
 * The command parses flags and calls the library; the model and split of
 * `init` are resolved as `run` resolves them (run_plan.h).
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data.h"
#include "runtime/hf_weights.h"
#include "runtime/trainer.h"
#include "src/cli/data_path.h"
#include "src/cli/run_plan.h"
#include "src/plan.h"
#include "src/sched_io.h"

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched checkpoint init FILE -o DIR [--model M] [--batch-size B] [--data PATH]\n"
        "                                [--seed S]\n"
        "       zbsched checkpoint export DIR -o OUT [--format hf] [--dtype f32|bf16]\n"
        "       zbsched checkpoint import HF -o DIR [--schedule FILE] [--seed S]\n"
        "\n"
        "init    writes the state `zbsched run FILE` starts from (step 0: the seed's\n"
        "        weights and data order) as a checkpoint directory; `run FILE --checkpoint\n"
        "        DIR --resume` then trains exactly as `run FILE` would\n"
        "export  writes the newest checkpoint of DIR (`run --checkpoint`) as a Hugging Face\n"
        "        directory: config.json (LlamaForCausalLM), model.safetensors, tokenizer.json,\n"
        "        tokenizer_config.json (the character vocabulary)\n"
        "import  reads such a directory into a new checkpoint directory at step 0, split\n"
        "        for --schedule FILE (default: one stage), for `run FILE --resume` and\n"
        "        `generate`\n"
        "\n"
        "  -o, --output PATH      the directory to write (created if missing)\n"
        "      --model M          init: as for run (default: the plan's, else tiny)\n"
        "      --batch-size B     init: as for run\n"
        "      --data PATH        init: the training text (its characters are the vocabulary;\n"
        "                         default as for run)\n"
        "      --seed S           init, import: the seed of the weights (init) and of the data\n"
        "                         order saved with them (default 1, as run)\n"
        "  -f, --format hf        export: the layout (only hf)\n"
        "      --dtype f32|bf16   export: the weights' type (default f32)\n"
        "      --schedule FILE    import: the schedule whose split the checkpoint takes\n"
        "  -h, --help             this text\n");
}

enum { O_MODEL = 256, O_BATCH, O_DATA, O_SEED, O_DTYPE, O_SCHED };

/* Everything the command line sets. */
typedef struct ckpt_args {
    const char *verb;     /* init, export, import */
    const char *in;       /* FILE, DIR or HF */
    const char *out;      /* -o */
    const char *model;    /* --model or NULL */
    long batch;           /* --batch-size or 0 */
    const char *data;     /* --data */
    long seed;            /* --seed */
    st_dtype dtype;       /* --dtype */
    const char *schedule; /* --schedule or NULL */
} ckpt_args;

static int parse(int argc, char **argv, ckpt_args *a)
{
    static const struct option opts[] = {
        { "output", required_argument, NULL, 'o' }, { "format", required_argument, NULL, 'f' },
        { "model", required_argument, NULL, O_MODEL }, { "batch-size", required_argument, NULL, O_BATCH },
        { "data", required_argument, NULL, O_DATA }, { "seed", required_argument, NULL, O_SEED },
        { "dtype", required_argument, NULL, O_DTYPE }, { "schedule", required_argument, NULL, O_SCHED },
        { "help", no_argument, NULL, 'h' }, { 0 },
    };
    *a = (ckpt_args){ .data = cli_default_data(), .seed = 1, .dtype = ST_F32 };
    zb_err err = { { 0 } };
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:f:h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'o': a->out = optarg; break;
        case 'f':
            if (strcmp(optarg, "hf"))
                return cli_usage("checkpoint", "unknown format '%s' (supported: hf)", optarg);
            break;
        case O_MODEL: a->model = optarg; break;
        case O_BATCH: bad = cli_parse_int("--batch-size", optarg, 1, 65536, &a->batch, &err); break;
        case O_DATA: a->data = optarg; break;
        case O_SEED: bad = cli_parse_int("--seed", optarg, 0, 0x7fffffffL, &a->seed, &err); break;
        case O_DTYPE:
            if (!strcmp(optarg, "f32"))
                a->dtype = ST_F32;
            else if (!strcmp(optarg, "bf16"))
                a->dtype = ST_BF16;
            else
                return cli_usage("checkpoint", "--dtype is f32 or bf16, not '%s'", optarg);
            break;
        case O_SCHED: a->schedule = optarg; break;
        case 'h': usage(stdout); return -1;
        case ':': return cli_usage("checkpoint", "%s needs a value (see --help)", argv[optind - 1]);
        default: return cli_usage("checkpoint", "unknown option '%s' (see --help)", argv[optind - 1]);
        }
        if (bad) {
            cli_fail(&err);
            return 2;
        }
    }
    if (optind >= argc)
        return cli_usage("checkpoint", "missing init, export or import (see --help)");
    a->verb = argv[optind];
    if (strcmp(a->verb, "init") && strcmp(a->verb, "export") && strcmp(a->verb, "import"))
        return cli_usage("checkpoint", "unknown verb '%s' (init, export or import)", a->verb);
    if (optind + 1 >= argc)
        return cli_usage("checkpoint", "%s: missing %s", a->verb,
                         !strcmp(a->verb, "init") ? "FILE" : !strcmp(a->verb, "export") ? "DIR" : "HF");
    if (optind + 2 < argc)
        return cli_usage("checkpoint", "unexpected argument '%s'", argv[optind + 2]);
    a->in = argv[optind + 1];
    if (!a->out)
        return cli_usage("checkpoint", "%s: missing -o DIR", a->verb);
    int init = !strcmp(a->verb, "init"), import = !strcmp(a->verb, "import");
    if ((a->model || a->batch) && !init)
        return cli_usage("checkpoint", "--model and --batch-size are for init");
    if (a->schedule && !import)
        return cli_usage("checkpoint", "--schedule is for import");
    if (!strcmp(a->in, a->out))
        return cli_usage("checkpoint", "%s: the output is the input", a->verb);
    return 0;
}

static int do_init(const ckpt_args *a)
{
    zb_err err = { { 0 } };
    sched_t *s = NULL;
    if (sched_load_file(a->in, &s, &err) != 0)
        return cli_fail(&err);
    run_setup setup;
    int rc = run_plan_resolve(a->in, s, a->model, a->batch, &setup);
    if (rc != 0) {
        sched_free(s);
        return rc;
    }
    zb_data *d = NULL;
    trainer *t = NULL;
    rc = 1;
    if (run_plan_fits(a->in, s, &setup) != 0)
        goto out;
    if (data_load_file(a->data, setup.model.seq_len, &d, &err) != 0) {
        cli_fail(&err);
        goto out;
    }
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = (uint64_t)a->seed;
    o.batch_size = setup.batch;
    o.layers_per_stage = setup.layers_per_stage;
    o.recompute_stages = setup.recompute_stages;
    o.threads = 1;
    if (trainer_create(s, &setup.model, d, &o, &t, &err) != 0 ||
        hf_save_checkpoint_dir(t, d->chars, d->vocab, a->out, &err) != 0) {
        cli_fail(&err);
        goto out;
    }
    fprintf(stderr, "checkpoint: %s holds step 0 of `zbsched run %s --seed %ld` (model %s, %zu "
            "parameters)\n", a->out, a->in, a->seed, trainer_model(t)->name, trainer_param_count(t));
    rc = 0;
out:
    trainer_free(t);
    data_free(d);
    run_setup_free(&setup);
    sched_free(s);
    return rc;
}

static int do_import(const ckpt_args *a)
{
    zb_err err = { { 0 } };
    sched_t *s = NULL;
    zb_plan plan;
    int has = 0;
    hf_import_opts o = { .seed = (uint64_t)a->seed };
    if (a->schedule) {
        if (sched_load_file(a->schedule, &s, &err) != 0)
            return cli_fail(&err);
        if ((has = plan_read(s, &plan, &err)) < 0) {
            sched_free(s);
            return cli_error("%s: %s", a->schedule, err.msg);
        }
        o.sched = s;
        o.layers_per_stage = has ? plan.layers : NULL;
    }
    int rc = hf_import(a->in, a->out, &o, &err) != 0 ? cli_fail(&err) : 0;
    if (rc == 0)
        fprintf(stderr, "checkpoint: %s holds %s at step 0%s%s\n", a->out, a->in,
                a->schedule ? ", split for " : "", a->schedule ? a->schedule : "");
    if (has > 0)
        plan_free(&plan);
    sched_free(s);
    return rc;
}

int cmd_checkpoint(int argc, char **argv)
{
    ckpt_args a;
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!strcmp(a.verb, "init"))
        return do_init(&a);
    if (!strcmp(a.verb, "import"))
        return do_import(&a);
    zb_err err = { { 0 } };
    if (hf_export(a.in, a.out, a.dtype, &err) != 0)
        return cli_fail(&err);
    fprintf(stderr, "checkpoint: wrote %s/config.json, model.safetensors (%s), tokenizer.json "
            "and tokenizer_config.json\n", a.out, st_dtype_name(a.dtype));
    return 0;
}
