/*
 * test_checkpoint_cli.c: `zbsched checkpoint init|export|import` as a user
 * runs them.
 *
 *   - init writes the state `run` starts from: `run --resume` from it
 *     gives the losses of a fresh run, bit for bit;
 *   - a trained checkpoint exported to Hugging Face's layout and imported
 *     back generates the same greedy text as the original, with the
 *     tensors and config transformers expects (names, shapes, no tied
 *     head, no BOS/EOS), and the import split for another schedule trains
 *     on with `run --resume`;
 *   - refusals are one line and leave no checkpoint: a directory without
 *     one, a memory-layer model, an existing checkpoint as the target, and
 *     Hugging Face directories that are not zbsched's Llama (tied head,
 *     another eps, RoPE scaling, a missing, extra or misshapen tensor, a
 *     tokenizer out of byte order, sharded weights);
 *   - bad flags exit 2.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "runtime/safetensors.h"
#include "tests/common/cli_run.h"

static char dir[128];
static char out[1 << 16], err[1 << 14];

#define DATA "--data \"$ZB_SOURCE_ROOT/../shared/data/tinyshakespeare.txt\""

static int zb(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int zb(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return cli_run(dir, NULL, cmd, out, sizeof out, err, sizeof err);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[2048], full[2300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "cd '%s' && %s", dir, cmd);
    return system(full);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/zb_ckcli_%d", (int)getpid());
    ck_assert_int_eq(mkdir(dir, 0777), 0);
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o s.json"), 0);
}

static void teardown(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static cJSON *losses_of(const char *text)
{
    cJSON *o = cJSON_Parse(text);
    ck_assert_ptr_nonnull(o);
    cJSON *l = cJSON_DetachItemFromObject(o, "losses");
    cJSON_Delete(o);
    ck_assert(cJSON_IsArray(l));
    return l;
}

START_TEST(init_is_where_run_starts)
{
    ck_assert_msg(zb("checkpoint init s.json -o ck0 --seed 3 " DATA) == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(err, "step 0"));
    ck_assert_int_eq(zb("run s.json --steps 4 --seed 3 --batch-size 2 --json -q " DATA), 0);
    cJSON *fresh = losses_of(out);
    ck_assert_msg(zb("run s.json --steps 4 --batch-size 2 --checkpoint ck0 --resume --json -q "
                     DATA) == 0, "%s", err);
    cJSON *resumed = losses_of(out);
    ck_assert_int_eq(cJSON_GetArraySize(fresh), 4);
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq(cJSON_GetArrayItem(fresh, i)->valuedouble,
                            cJSON_GetArrayItem(resumed, i)->valuedouble);
    cJSON_Delete(fresh);
    cJSON_Delete(resumed);
    /* the directory now holds a run's checkpoint: init refuses to overwrite it */
    ck_assert_int_eq(zb("checkpoint init s.json -o ck0 " DATA), 1);
    cli_assert_one_line(err, "already holds a checkpoint");
}
END_TEST

static void greedy(const char *ck, char *text, size_t cap)
{
    ck_assert_msg(zb("generate --checkpoint %s --prompt ROMEO: --tokens 30 --temperature 0 -q",
                     ck) == 0, "%s", err);
    ck_assert_uint_eq(strlen(out), 36);
    ck_assert_uint_lt(strlen(out), cap);
    memcpy(text, out, strlen(out) + 1);
}

START_TEST(export_import_generate_round_trip)
{
    ck_assert_msg(zb("run s.json --steps 30 --batch-size 4 --checkpoint ck -q " DATA) == 0, "%s",
                  err);
    ck_assert_msg(zb("checkpoint export ck -o hf") == 0, "%s", err);
    /* what transformers reads */
    ck_assert_int_eq(sh("grep -Eq '\"architectures\":[[:space:]]*\\[\"LlamaForCausalLM\"\\]' "
                        "hf/config.json"), 0);
    ck_assert_int_eq(sh("grep -Eq '\"tie_word_embeddings\":[[:space:]]*false' hf/config.json"), 0);
    ck_assert_int_eq(sh("grep -Eq '\"eos_token_id\":[[:space:]]*null' hf/config.json"), 0);
    ck_assert_int_eq(sh("grep -Eq '\"tokenizer_class\":[[:space:]]*\"PreTrainedTokenizerFast\"' "
                        "hf/tokenizer_config.json"), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/hf/model.safetensors", dir);
    st_file f;
    zb_err e = { { 0 } };
    ck_assert_msg(st_open(p, &f, &e) == 0, "%s", e.msg);
    /* tiny: embedding, 4 layers of 9 tensors, final norm, head */
    ck_assert_int_eq(f.n, 1 + 4 * 9 + 2);
    const st_tensor *q = st_find(&f, "model.layers.3.self_attn.q_proj.weight");
    const st_tensor *h = st_find(&f, "lm_head.weight");
    const st_tensor *g = st_find(&f, "model.layers.0.mlp.gate_proj.weight");
    ck_assert_ptr_nonnull(q);
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(h->shape[0], 65); /* [vocab, d]: torch's [out, in] */
    ck_assert_int_eq(h->shape[1], 64);
    ck_assert_int_eq(g->shape[0], 256);
    ck_assert_int_eq(g->shape[1], 64);
    ck_assert_ptr_nonnull(st_find(&f, "model.layers.2.post_attention_layernorm.weight"));
    st_close(&f);

    char before[64], after[64];
    greedy("ck", before, sizeof before);
    ck_assert_msg(zb("checkpoint import hf -o back") == 0, "%s", err);
    greedy("back", after, sizeof after);
    ck_assert_str_eq(before, after);
    /* split for a two-stage schedule, trained on with run --resume */
    ck_assert_msg(zb("checkpoint import hf -o back2 --schedule s.json") == 0, "%s", err);
    greedy("back2", after, sizeof after);
    ck_assert_str_eq(before, after);
    ck_assert_msg(zb("run s.json --steps 2 --batch-size 4 --checkpoint back2 --resume -q " DATA) == 0,
                  "%s", err);
    ck_assert_ptr_nonnull(strstr(out, "2 steps"));
    /* the one-stage import does not fit the two-stage schedule's split */
    ck_assert_int_eq(zb("run s.json --steps 2 --batch-size 4 --checkpoint back --resume -q " DATA), 1);
    /* bf16 weights import too (rounded) */
    ck_assert_msg(zb("checkpoint export ck -o hfb --dtype bf16") == 0, "%s", err);
    ck_assert_int_eq(sh("grep -Eq '\"torch_dtype\":[[:space:]]*\"bfloat16\"' hfb/config.json"), 0);
    ck_assert_msg(zb("checkpoint import hfb -o backb") == 0, "%s", err);
}
END_TEST

/* Expects `checkpoint import bad -o x` to fail with one line holding frag
 * and to leave no checkpoint; then restores bad from hf. */
static void expect_import_refused(const char *frag)
{
    ck_assert_int_eq(zb("checkpoint import bad -o x"), 1);
    cli_assert_one_line(err, frag);
    char p[512];
    snprintf(p, sizeof p, "%s/x/checkpoint.parts.json", dir);
    cli_assert_no_file(p);
    ck_assert_int_eq(sh("rm -rf bad x && cp -r hf bad"), 0);
}

/* Rewrites bad/model.safetensors from hf's without tensor drop (NULL:
 * none), with extra added when set, and tensor reshape given shape
 * [rows, cols] reinterpreted. */
static void rewrite_weights(const char *drop, int extra, const char *reshape)
{
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/hf/model.safetensors", dir);
    snprintf(dst, sizeof dst, "%s/bad/model.safetensors", dir);
    st_file f;
    zb_err e = { { 0 } };
    ck_assert_int_eq(st_open(src, &f, &e), 0);
    st_entry *es = calloc((size_t)f.n + 1, sizeof *es);
    float **bufs = calloc((size_t)f.n + 1, sizeof *bufs);
    int n = 0;
    for (int i = 0; i < f.n; i++) {
        if (drop && !strcmp(f.t[i].name, drop))
            continue;
        bufs[n] = malloc(sizeof(float) * (size_t)f.t[i].count);
        ck_assert_int_eq(st_read_f32(&f, &f.t[i], bufs[n], &e), 0);
        es[n].name = f.t[i].name;
        es[n].data = bufs[n];
        es[n].rows = f.t[i].n_dims == 2 ? (int)f.t[i].shape[0] : 0;
        es[n].cols = (int)f.t[i].shape[f.t[i].n_dims - 1];
        if (reshape && !strcmp(f.t[i].name, reshape)) {
            es[n].rows = es[n].rows * 2;
            es[n].cols = es[n].cols / 2;
        }
        n++;
    }
    static const float one[4] = { 1, 2, 3, 4 };
    if (extra)
        es[n++] = (st_entry){ "model.layers.0.self_attn.q_proj.bias", 0, 4, one };
    ck_assert_msg(st_write(dst, es, n, ST_F32, &e) == 0, "%s", e.msg);
    for (int i = 0; i < n; i++)
        if (!(extra && i == n - 1))
            free(bufs[i]);
    free(bufs);
    free(es);
    st_close(&f);
}

START_TEST(refusals)
{
    ck_assert_int_eq(zb("checkpoint export nothing -o hf"), 1);
    cli_assert_one_line(err, "nothing");
    ck_assert_int_eq(zb("run s.json --model tiny-mem --steps 1 --batch-size 2 --eval-windows 2 "
                        "--checkpoint ckm -q " DATA), 0);
    ck_assert_int_eq(zb("checkpoint export ckm -o hfm"), 1);
    cli_assert_one_line(err, "product-key memory layers");
    ck_assert_int_eq(zb("run s.json --steps 1 --batch-size 2 --eval-windows 2 --checkpoint ck -q "
                        DATA), 0);
    ck_assert_msg(zb("checkpoint export ck -o hf") == 0, "%s", err);
    ck_assert_int_eq(zb("checkpoint import hf -o ck"), 1);
    cli_assert_one_line(err, "ck already holds a checkpoint (checkpoint.parts.json)");

    ck_assert_int_eq(sh("cp -r hf bad"), 0);
    ck_assert_int_eq(sh("sed -Ei 's/(\"tie_word_embeddings\":[[:space:]]*)false/\\1true/' "
                        "bad/config.json"), 0);
    expect_import_refused("config.json sets tie_word_embeddings");
    ck_assert_int_eq(sh("sed -Ei 's/(\"rms_norm_eps\":[[:space:]]*)1e-05/\\11e-06/' "
                        "bad/config.json"), 0);
    expect_import_refused("rms_norm_eps is not 1e-5");
    ck_assert_int_eq(sh("sed -Ei 's/(\"rope_scaling\":[[:space:]]*)null/\\1{\"rope_type\": "
                        "\"llama3\", \"factor\": 8}/' bad/config.json"), 0);
    expect_import_refused("scales RoPE");
    ck_assert_int_eq(sh("sed -Ei 's/(\"model_type\":[[:space:]]*)\"llama\"/\\1\"gpt2\"/' "
                        "bad/config.json"), 0);
    expect_import_refused("model_type is not \"llama\"");
    /* ids 0 and 1 swapped: "\n" and " " */
    ck_assert_int_eq(sh("sed -Ei 's/(\"\\\\n\":[[:space:]]*)0/\\11/; s/(\" \":[[:space:]]*)1/\\10/' "
                        "bad/tokenizer.json"), 0);
    expect_import_refused("not in byte order");
    rewrite_weights("model.layers.2.mlp.up_proj.weight", 0, NULL);
    expect_import_refused("model.safetensors has no tensor 'model.layers.2.mlp.up_proj.weight'");
    rewrite_weights(NULL, 1, NULL);
    expect_import_refused("has tensor 'model.layers.0.self_attn.q_proj.bias'");
    rewrite_weights(NULL, 0, "model.layers.1.self_attn.o_proj.weight");
    expect_import_refused("tensor 'model.layers.1.self_attn.o_proj.weight' has shape [128, 32], "
                          "the config needs [64, 64]");
    ck_assert_int_eq(sh("mv bad/model.safetensors bad/model-00001-of-00002.safetensors && "
                        "echo '{}' > bad/model.safetensors.index.json"), 0);
    expect_import_refused("sharded weights");
    ck_assert_int_eq(sh("head -c 100 hf/model.safetensors > bad/model.safetensors"), 0);
    expect_import_refused("model.safetensors: truncated");
}
END_TEST

START_TEST(bad_flags)
{
    ck_assert_int_eq(zb("checkpoint"), 2);
    cli_assert_one_line(err, "missing init, export or import");
    ck_assert_int_eq(zb("checkpoint frobnicate x -o y"), 2);
    cli_assert_one_line(err, "unknown verb 'frobnicate'");
    ck_assert_int_eq(zb("checkpoint export ck"), 2);
    cli_assert_one_line(err, "missing -o DIR");
    ck_assert_int_eq(zb("checkpoint export ck -o hf --format gguf"), 2);
    cli_assert_one_line(err, "unknown format 'gguf'");
    ck_assert_int_eq(zb("checkpoint export ck -o hf --dtype f16"), 2);
    cli_assert_one_line(err, "--dtype is f32 or bf16");
    ck_assert_int_eq(zb("checkpoint export ck -o hf --model tiny"), 2);
    cli_assert_one_line(err, "--model and --batch-size are for init");
    ck_assert_int_eq(zb("checkpoint export ck -o ck"), 2);
    cli_assert_one_line(err, "the output is the input");
    ck_assert_int_eq(zb("checkpoint --help"), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: zbsched checkpoint init"));
}
END_TEST

int main(void)
{
    Suite *su = suite_create("checkpoint_cli");
    TCase *tc = tcase_create("checkpoint_cli");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, init_is_where_run_starts);
    tcase_add_test(tc, export_import_generate_round_trip);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, bad_flags);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
