/*
 * run_local.c: `zbsched run` in one process (run_ways.h): one trainer on
 * the CPU or one GPU, or --replicas K islands, each driven by the job
 * loop (runtime/job.h), which applies the rules; this file builds the
 * way, prints the header and the summary.
 */
#include "src/cli/run_ways.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "runtime/ckpt_set.h"
#include "runtime/cuda_module.h"
#include "runtime/job_trainer.h"
#include "runtime/outer/islands.h"
#include "src/cli/cli.h"
#include "src/cli/run_report.h"
#include "src/sched_io.h"

/* "memory": each device's predicted and measured peak, whole and by class
 * (trainer_memory_ledger), when the backend keeps a ledger. */
static void json_memory(cJSON *o, const trainer *t, int n_devices)
{
    trainer_mem_device *md = calloc((size_t)n_devices, sizeof *md);
    zb_err err = { { 0 } };
    if (!md || trainer_memory_ledger(t, md, &err) != 0) {
        free(md);
        return;
    }
    cJSON *arr = cJSON_AddArrayToObject(o, "memory");
    for (int d = 0; arr && d < n_devices; d++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "device", d);
        cJSON_AddNumberToObject(e, "predicted_bytes", md[d].predicted_total);
        cJSON_AddNumberToObject(e, "measured_bytes", md[d].measured_total);
        cJSON_AddNumberToObject(e, "activation_pool_bytes", md[d].pool_bytes);
        cJSON *cl = cJSON_AddObjectToObject(e, "classes");
        for (int c = 0; cl && c < MEM_CLASSES; c++) {
            cJSON *k = cJSON_AddObjectToObject(cl, mem_class_name((mem_class)c));
            cJSON_AddNumberToObject(k, "predicted", md[d].predicted[c]);
            cJSON_AddNumberToObject(k, "measured", md[d].measured[c]);
        }
        cJSON_AddItemToArray(arr, e);
    }
    free(md);
}

static void print_summary(const run_args *a, const sched_t *s, trainer *t, const job_result *r)
{
    const trainer_stats *st = trainer_get_stats(t);
    double tps = run_tokens_per_s(r);
    double last = r->n_losses ? r->losses[r->n_losses - 1] : NAN;
    if (!a->json) {
        printf("%s: %s, %d devices, %d stages, m=%d%s; %ld steps, final loss %.4f, val loss %.4f, "
               "%.0f tokens/s, " RUN_ROLLBACK_STEPS_WORDS "\n", a->file, s->name[0] ? s->name : "schedule",
               s->n_devices, s->n_stages, s->n_micro, a->cuda ? " on cuda (one GPU)" : "",
               st->step, last, r->val_loss, tps, st->rollback_steps, (long)r->n_losses,
               st->rollbacks);
        return;
    }
    const zb_model *em = trainer_model(t);
    cJSON *o = cJSON_CreateObject();
    run_json_head(o, s, em->name, em->micro_batch, (double)trainer_param_count(t));
    cJSON *split = cJSON_AddArrayToObject(o, "layers_per_stage"); /* the split trained */
    for (int i = 0; i < trainer_stage_count(t); i++)
        cJSON_AddItemToArray(split, cJSON_CreateNumber(trainer_stage_layout(t, i)->l1 -
                                                       trainer_stage_layout(t, i)->l0));
    run_json_losses(o, r);
    cJSON_AddNumberToObject(o, "threads", trainer_threads(t));
    cJSON_AddStringToObject(o, "device", trainer_backend_name(t));
    size_t static_bytes = 0, peak_bytes = 0;
    zb_err merr = { { 0 } };
    if (a->cuda && trainer_memory(t, &static_bytes, &peak_bytes, &merr) == 0) {
        cJSON_AddNumberToObject(o, "gpu_static_bytes", (double)static_bytes);
        cJSON_AddNumberToObject(o, "gpu_peak_activation_bytes", (double)peak_bytes);
    }
    json_memory(o, t, s->n_devices);
    cJSON_AddNumberToObject(o, "train_seconds", r->train_s);
    cJSON_AddNumberToObject(o, "rollbacks", (double)st->rollbacks);
    cJSON_AddNumberToObject(o, "rollback_steps", (double)st->rollback_steps);
    cJSON_AddNumberToObject(o, "skipped_steps", (double)st->skipped_steps);
    run_json_print(o);
}

int run_local(const run_args *a, const sched_t *s, const zb_model *m, const zb_data *d,
              trainer_opts *o, const run_identity *id)
{
    zb_err err = { { 0 } };
    int lock = -1, rc = 1;
    if (run_ckpt_begin(a, NULL, &lock) != 0)
        return 1;
    trainer *t = NULL;
    job_trainer jt = { 0 };
    job_result r = { 0 };
    cJSON *model_rec = NULL, *run_rec = NULL;
    if (trainer_create(s, m, d, o, &t, &err) != 0) {
        zb_wrap(&err, "%s with model %s: ", a->file, m->name);
        cli_fail(&err);
        goto out;
    }
    model_rec = ckptset_model_record(trainer_model(t), d->chars, d->vocab);
    run_rec = run_record_to_json(id);
    ckptset_records rec = { model_rec, run_rec };
    if (!model_rec || !run_rec || job_trainer_init(&jt, t, s, NULL, &rec, 1, &err) != 0) {
        cli_error("out of memory");
        goto out;
    }
    if (run_ckpt_resume(a, &jt, id, d) != 0)
        goto out;
    if (!a->quiet) {
        const zb_model *em = trainer_model(t);
        fprintf(stderr, "zbsched run: %s (%d devices, %d stages, m=%d), model %s: %d layers, d=%d, "
                "vocab %d, %zu parameters, batch %d x %d tokens, %d thread%s per device%s\n",
                s->name[0] ? s->name : a->file, s->n_devices, s->n_stages, s->n_micro, em->name,
                em->n_layers, em->d_model, em->vocab, trainer_param_count(t), em->micro_batch,
                em->seq_len, trainer_threads(t), trainer_threads(t) == 1 ? "" : "s",
                a->resume ? ", resumed" : "");
    }
    job_way w;
    job_trainer_way(&jt, &w);
    job_opts jo;
    run_job_opts(a, "try a lower --lr", &jo);
    job_status st = job_run(&w, &jo, &r, &err);
    if (st != JOB_DONE) {
        rc = run_job_exit(a, st, &r, &err, 1, NULL);
        goto out;
    }
    if (a->trace) {
        sched_t *tr = NULL;
        if (trainer_trace(t, &tr, &err) != 0 || sched_save_file(tr, a->trace, &err) != 0) {
            sched_free(tr);
            cli_fail(&err);
            goto out;
        }
        sched_free(tr);
    }
    print_summary(a, s, t, &r);
    rc = 0;
out:
    job_result_free(&r);
    job_trainer_free(&jt);
    cJSON_Delete(model_rec);
    cJSON_Delete(run_rec);
    trainer_free(t);
    ckptset_unlock(lock);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_islands(const run_args *a, const sched_t *s, const zb_model *m,
                          const job_result *r, const islands_result *tot, double wall_s,
                          const trainer *first)
{
    const islands_opts *isl = &a->isl;
    if (!a->json) {
        printf("%s: %d replicas, outer %s, all-reduce %s; %ld steps, final loss %.4f, val loss %.4f, "
               "%ld outer steps, %llu bytes sent, %.1f s\n", a->file, isl->replicas,
               outer_kind_name(isl->outer.kind), outer_wire_name(isl->outer.wire), r->n_losses,
               r->losses[r->n_losses - 1], r->val_loss, tot->outer_steps,
               (unsigned long long)tot->bytes_sent, wall_s);
        return;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schedule", s->name);
    cJSON_AddStringToObject(j, "model", m->name);
    cJSON_AddNumberToObject(j, "replicas", isl->replicas);
    cJSON_AddStringToObject(j, "outer", outer_kind_name(isl->outer.kind));
    cJSON_AddStringToObject(j, "allreduce", outer_wire_name(isl->outer.wire));
    cJSON_AddNumberToObject(j, "inner_steps", isl->outer.inner_steps);
    cJSON_AddNumberToObject(j, "steps", (double)r->n_losses);
    cJSON *l = cJSON_AddArrayToObject(j, "losses");
    for (long i = 0; i < r->n_losses; i++)
        cJSON_AddItemToArray(l, cJSON_CreateNumber(r->losses[i]));
    cJSON *ev = cJSON_AddArrayToObject(j, "evals");
    for (int i = 0; i < r->n_evals; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "step", (double)r->eval_step[i]);
        cJSON_AddNumberToObject(e, "val_loss", r->eval_loss[i]);
        cJSON_AddItemToArray(ev, e);
    }
    cJSON_AddNumberToObject(j, "val_loss", r->val_loss);
    cJSON_AddNumberToObject(j, "bytes_sent", (double)tot->bytes_sent);
    cJSON_AddNumberToObject(j, "outer_steps", (double)tot->outer_steps);
    cJSON_AddNumberToObject(j, "final_replicas", tot->final_replicas);
    cJSON_AddBoolToObject(j, "zero1", isl->zero1);
    cJSON_AddNumberToObject(j, "optimizer_bytes_per_replica", (double)tot->optimizer_bytes);
    if (first) /* every replica holds alike: the first one's devices */
        json_memory(j, first, s->n_devices);
    cJSON_AddNumberToObject(j, "tokens", (double)r->tokens);
    cJSON_AddNumberToObject(j, "train_seconds", wall_s);
    run_json_print(j);
}

int run_islands(run_args *a, const sched_t *s, const zb_model *m, const zb_data *d,
                const trainer_opts *o, const run_identity *id)
{
    zb_err err = { { 0 } };
    a->isl.steps = a->steps;
    a->isl.eval_every = (int)a->eval_every;
    int lock = -1, rc = 1;
    if (run_ckpt_begin(a, NULL, &lock) != 0)
        return 1;
    if (!a->quiet)
        fprintf(stderr, "zbsched run: %d replicas of %s, outer %s%s, all-reduce %s, H=%d, %ld steps%s\n",
                a->isl.replicas, s->name[0] ? s->name : a->file, outer_kind_name(a->isl.outer.kind),
                a->isl.zero1 ? " (ZeRO-1)" : "", outer_wire_name(a->isl.outer.wire),
                a->isl.outer.inner_steps, a->steps, a->resume ? ", resumed" : "");
    double t0 = now_s();
    islands *x = NULL;
    cJSON *model_rec = NULL, *run_rec = NULL;
    islands_records rec = { NULL, NULL };
    job_result r = { 0 };
    if (islands_create(s, m, d, o, &a->isl, &x, &err) != 0) {
        zb_wrap(&err, "%s: ", a->file);
        cli_fail(&err);
        goto out;
    }
    if (a->ckpt_dir) {
        model_rec = ckptset_model_record(trainer_model(islands_replica(x, 0)), d->chars, d->vocab);
        run_rec = run_record_to_json(id);
        if (!model_rec || !run_rec) {
            cli_error("out of memory");
            goto out;
        }
        rec = (islands_records){ model_rec, run_rec };
        islands_checkpoint(x, &rec);
    }
    if (a->resume) {
        char note[256];
        int same = islands_resume(x, a->ckpt_dir, id, note, sizeof note, &err);
        if (same < 0) {
            cli_fail(&err);
            goto out;
        }
        if (same == 1 && !a->quiet)
            fprintf(stderr, "zbsched run: %s\n", note);
    }
    job_way w;
    islands_way(x, &w);
    job_opts jo;
    run_job_opts(a, "try a lower --lr or --outer-lr", &jo);
    job_status st = job_run(&w, &jo, &r, &err);
    rc = run_job_exit(a, st, &r, &err, 1, a->file);
    if (st == JOB_DONE) {
        islands_result tot = { 0 };
        islands_totals(x, &tot);
        trainer *first = NULL;
        for (int k = 0; k < a->isl.replicas && !first; k++)
            first = islands_replica(x, k);
        print_islands(a, s, m, &r, &tot, now_s() - t0, first);
    }
out:
    job_result_free(&r);
    islands_free(x);
    cJSON_Delete(model_rec);
    cJSON_Delete(run_rec);
    ckptset_unlock(lock);
    return rc;
}

/* The CUDA module and the GPU a one-process `--device cuda` run trains on. */
typedef struct cuda_backend_ctx {
    const zb_cuda_api *cu; /* the loaded module's table */
    int gpu;               /* CUDA device index (--gpu, default 0) */
} cuda_backend_ctx;

/* trainer_opts.make_backend for --device cuda: every schedule device a
 * stream on ctx's GPU (kernels/cuda/backend_cuda.h, inside the module). */
static int make_cuda_backend(void *ctx, int n_devices, zb_backend **out, zb_err *err)
{
    const cuda_backend_ctx *c = ctx;
    return c->cu->backend_create(c->gpu, n_devices, out, err);
}

int run_cuda_backend(const run_args *a, trainer_opts *o)
{
    static cuda_backend_ctx c; /* the trainer keeps the pointer for its life */
    zb_err err = { { 0 } };
    if (cuda_module_load(&c.cu, &err) != 0)
        return cli_fail(&err);
    c.gpu = a->gpu >= 0 ? (int)a->gpu : 0;
    int visible = c.cu->device_count();
    if (visible == 0)
        return cli_error("%s: no CUDA device", a->file);
    if (c.gpu >= visible)
        return cli_error("%s: CUDA device %d does not exist (%d visible)", a->file, c.gpu,
                         visible);
    o->make_backend = make_cuda_backend;
    o->make_backend_ctx = &c;
    o->threads = 1; /* the host threads only issue work to the GPU */
    return 0;
}
