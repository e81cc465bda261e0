/*
 * test_generate.c: training the tiny-mem preset (a product-key memory
 * layer in place of one FFN) across schedules, and generating text from
 * the checkpoints it writes (runtime/generate.h).
 *
 *   - tiny-mem trains with bit-identical losses and parameters under 1f1b
 *     (p=2), zb-h2 (p=2) and zb-v (p=2, four stages), and its parameter
 *     count includes the memory tables (a 4096×64 value table, the keys,
 *     the query, gate and output projections);
 *   - the checkpoints of two different splits load for generation and give
 *     the same text;
 *   - cached logits agree with the training forward on the prefix;
 *     greedy text with the cache equals the uncached text exactly;
 *   - exactly N new tokens, the same text for the same seed, another for
 *     another seed; prompts outside the vocabulary, and with max_context
 *     requests beyond the context, are refused with nothing emitted; a
 *     model file that does not match the checkpoint is refused;
 *   - past the context the conditioning is the last seq_len tokens, as in
 *     nanoGPT: prompts that differ only before that window continue alike.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/generate.h"
#include "schedules/gen.h"
#include "src/sched_io.h"
#include "src/validate.h"
#include "tests/common/trainer_fixture.h"

#define STEPS 3
#define M 4

static char dirs[3][64]; /* checkpoint directories of the three schedules */
static const char *const kinds[3] = { "1f1b", "zb-h2", "zb-v" };

static void emit_count(void *ctx, const char *bytes, size_t n)
{
    (void)bytes;
    *(size_t *)ctx += n;
}

typedef struct sink {
    char text[512];
    size_t len;
} sink;

static void emit_sink(void *ctx, const char *bytes, size_t n)
{
    sink *s = ctx;
    ck_assert(s->len + n < sizeof s->text);
    memcpy(s->text + s->len, bytes, n);
    s->len += n;
    s->text[s->len] = 0;
}

/* Trains tiny-mem under kind for STEPS steps, saves a checkpoint directory
 * (checkpoint.bin + model.json) into dirs[i]; returns the losses and
 * concatenated parameters. */
static fixture_run train_kind(int i, const zb_data *d)
{
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = 2;
    gp.microbatches = M;
    gp.chunks = strcmp(kinds[i], "zb-v") == 0 ? 2 : 1;
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(gen_lookup(kinds[i])(&gp, &s, &err) == 0, "%s", err.msg);
    zb_model m;
    ck_assert_int_eq(model_preset("tiny-mem", &m, &err), 0);
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 7;
    o.eval_windows = 2;
    o.adamw.warmup_steps = 1;
    trainer *t = NULL;
    ck_assert_msg(trainer_create(s, &m, d, &o, &t, &err) == 0, "%s: %s", kinds[i], err.msg);
    fixture_run r;
    memset(&r, 0, sizeof r);
    r.steps = STEPS;
    for (int k = 0; k < STEPS; k++)
        ck_assert_msg(trainer_step(t, &r.loss[k], &err) == 0, "%s", err.msg);
    ck_assert_int_eq(trainer_eval(t, &r.val_loss, &err), 0);
    r.n_params = trainer_param_count(t);
    r.params = malloc(sizeof(float) * r.n_params);
    size_t off = 0;
    for (int st = 0; st < trainer_stage_count(t); st++) {
        size_t n;
        float *p = trainer_stage_params(t, st, &n);
        memcpy(r.params + off, p, sizeof(float) * n);
        off += n;
    }
    snprintf(dirs[i], sizeof dirs[i], "/tmp/zb_gen_test_%d_%d", (int)getpid(), i);
    ck_assert_int_eq(mkdir(dirs[i], 0700) == 0 || access(dirs[i], F_OK) == 0, 1);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dirs[i], GEN_CKPT_FILE);
    ck_assert_msg(trainer_save(t, path, &err) == 0, "%s", err.msg);
    ck_assert_msg(gen_write_model_file(dirs[i], trainer_model(t), d->chars, d->vocab, &err) == 0,
                  "%s", err.msg);
    trainer_free(t);
    sched_free(s);
    return r;
}

static void remove_dir(const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, GEN_CKPT_FILE);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s", dir, GEN_MODEL_FILE);
    unlink(path);
    rmdir(dir);
}

static fixture_run runs[3];

static void setup(void)
{
    zb_data *d = fixture_data(64);
    for (int i = 0; i < 3; i++)
        runs[i] = train_kind(i, d);
    data_free(d);
}

static void teardown(void)
{
    for (int i = 0; i < 3; i++) {
        free(runs[i].params);
        remove_dir(dirs[i]);
    }
}

START_TEST(tiny_mem_bit_identical_across_schedules)
{
    for (int i = 1; i < 3; i++)
        fixture_assert_same(&runs[0], &runs[i], kinds[i]);
    ck_assert(runs[0].loss[STEPS - 1] < runs[0].loss[0]); /* it learns */
    /* 4096x64 values + keys 2*2*64*16 + query, gate, out 3 * 64*64, in place
     * of the FFN's 3 * 64*256; tiny has 271040 */
    ck_assert_uint_eq(runs[0].n_params, 271040 - 3 * 64 * 256 + 4096 * 64 + 4096 + 3 * 4096);
}
END_TEST

START_TEST(checkpoints_of_any_split_generate_the_same)
{
    gen_opts o;
    gen_opts_default(&o);
    o.n_tokens = 30;
    o.seed = 11;
    sink a = { { 0 }, 0 }, b = { { 0 }, 0 };
    gen_result r;
    zb_err err = { { 0 } };
    for (int i = 0; i < 3; i += 2) { /* 1f1b: 2 stages; zb-v: 4 stages */
        gen_model *g = NULL;
        ck_assert_msg(gen_load(dirs[i], &g, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(gen_param_count(g), runs[i].n_params);
        ck_assert_int_eq(gen_run(g, "KING:", 5, &o, emit_sink, i ? &b : &a, &r, &err), 0);
        gen_free(g);
    }
    ck_assert_uint_eq(a.len, 30);
    ck_assert_str_eq(a.text, b.text);
}
END_TEST

START_TEST(cache_matches_training_forward)
{
    gen_model *g = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(gen_load(dirs[1], &g, &err) == 0, "%s", err.msg);
    int V = gen_model_config(g)->vocab, T = gen_model_config(g)->seq_len;
    int32_t ids[64];
    const char *text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\n"
                       "Speak, speak.\n";
    ck_assert_int_eq(T, 64);
    ck_assert_int_ge((int)strlen(text), T);
    ck_assert_int_eq(gen_encode(g, text, (size_t)T, ids, &err), 0);
    float *lc = malloc(sizeof(float) * V), *lu = malloc(sizeof(float) * V);
    int lens[4] = { 1, 7, 33, T };
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(gen_logits(g, ids, lens[k], 1, lc, &err), 0);
        ck_assert_int_eq(gen_logits(g, ids, lens[k], 0, lu, &err), 0);
        double big = 0, diff = 0;
        for (int v = 0; v < V; v++) {
            big = fmax(big, fabs(lu[v]));
            diff = fmax(diff, fabs(lc[v] - lu[v]));
        }
        ck_assert_msg(diff <= 1e-4 * big, "prefix %d: cached vs forward %.3g of %.3g", lens[k],
                      diff, big);
    }
    ck_assert_int_eq(gen_logits(g, ids, T + 1, 1, lc, &err), -1);
    ck_assert_int_eq(gen_logits(g, ids, 0, 1, lc, &err), -1);
    free(lc);
    free(lu);
    gen_free(g);
}
END_TEST

START_TEST(greedy_cached_equals_uncached)
{
    gen_model *g = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(gen_load(dirs[0], &g, &err) == 0, "%s", err.msg);
    gen_opts o;
    gen_opts_default(&o);
    o.temperature = 0;
    o.n_tokens = 50;
    sink a = { { 0 }, 0 }, b = { { 0 }, 0 };
    gen_result ra, rb;
    ck_assert_int_eq(gen_run(g, "ROMEO:\n", 7, &o, emit_sink, &a, &ra, &err), 0);
    o.use_cache = 0;
    ck_assert_int_eq(gen_run(g, "ROMEO:\n", 7, &o, emit_sink, &b, &rb, &err), 0);
    ck_assert_int_eq(ra.n_new, 50);
    ck_assert_int_eq(rb.n_new, 50);
    ck_assert_str_eq(a.text, b.text);
    gen_free(g);
}
END_TEST

START_TEST(exact_count_and_seeds)
{
    gen_model *g = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(gen_load(dirs[0], &g, &err) == 0, "%s", err.msg);
    gen_opts o;
    gen_opts_default(&o);
    o.n_tokens = 40;
    o.top_k = 20;
    o.top_p = 0.95;
    gen_result r;
    sink s1 = { { 0 }, 0 }, s2 = { { 0 }, 0 }, s3 = { { 0 }, 0 };
    ck_assert_int_eq(gen_run(g, "", 0, &o, emit_sink, &s1, &r, &err), 0);
    ck_assert_int_eq(r.n_new, 40);
    ck_assert_uint_eq(s1.len, 40);
    ck_assert(r.tokens_per_s > 0);
    ck_assert_int_eq(gen_run(g, "", 0, &o, emit_sink, &s2, &r, &err), 0);
    ck_assert_str_eq(s1.text, s2.text);
    o.seed = 2;
    ck_assert_int_eq(gen_run(g, "", 0, &o, emit_sink, &s3, &r, &err), 0);
    ck_assert_str_ne(s1.text, s3.text);
    /* zero tokens: nothing */
    size_t count = 0;
    o.n_tokens = 0;
    ck_assert_int_eq(gen_run(g, "ab", 2, &o, emit_count, &count, &r, &err), 0);
    ck_assert_uint_eq(count, 0);
    gen_free(g);
}
END_TEST

START_TEST(refusals)
{
    gen_model *g = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(gen_load(dirs[0], &g, &err) == 0, "%s", err.msg);
    gen_opts o;
    gen_opts_default(&o);
    gen_result r;
    size_t count = 0;
    o.n_tokens = 60; /* 5 + 60 > 64: refused only with max_context */
    o.max_context = 1;
    ck_assert_int_eq(gen_run(g, "KING:", 5, &o, emit_count, &count, &r, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "context of 64"));
    ck_assert_ptr_nonnull(strstr(err.msg, "at most 59"));
    ck_assert_uint_eq(count, 0);
    o.n_tokens = 59; /* exactly fits */
    ck_assert_int_eq(gen_run(g, "KING:", 5, &o, emit_count, &count, &r, &err), 0);
    ck_assert_uint_eq(count, 59);
    ck_assert_int_eq(r.n_cropped, 0);
    o.max_context = 0;
    count = 0;
    o.n_tokens = 5;
    ck_assert_int_eq(gen_run(g, "caf\xc3\xa9", 5, &o, emit_count, &count, &r, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "vocabulary"));
    ck_assert_int_eq(gen_run(g, "K~", 2, &o, emit_count, &count, &r, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "'~'"));
    ck_assert_uint_eq(count, 0);
    gen_free(g);
    /* a model file that does not describe the checkpoint */
    FILE *f;
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dirs[2], GEN_MODEL_FILE);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fprintf(f, "{\"model\": {\"base\": \"tiny\", \"vocab\": 65}, \"chars\": [");
    for (int i = 0; i < 65; i++)
        fprintf(f, "%s%d", i ? "," : "", 40 + i);
    fprintf(f, "]}");
    fclose(f);
    ck_assert_int_eq(gen_load(dirs[2], &g, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "another model"));
    ck_assert_int_eq(gen_load("/nonexistent-dir", &g, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "model description"));
}
END_TEST

/*
 * Past the context (issue 29.7): nanoGPT's generate conditions every token
 * on idx[:, -block_size:], the last T tokens, and so must gen_run.  Three
 * prompts that end in the same 64 characters W (tiny-mem's context),
 * one of them W alone and two with 10 different characters before it,
 * must continue identically, token for token, far past the context: the
 * bytes before the window can make no difference.  With the cache and
 * without, since the crop runs the window afresh either way.  And the
 * second new token must be the argmax of the training forward on its
 * window, W without its first byte plus the first new token, built here
 * by hand and run through gen_logits.
 */
START_TEST(crops_the_context_as_nanogpt)
{
    gen_model *g = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(gen_load(dirs[0], &g, &err) == 0, "%s", err.msg);
    int T = gen_model_config(g)->seq_len;
    ck_assert_int_eq(T, 64);
    static const char w[] = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll";
    ck_assert_uint_eq(strlen(w), 64);
    char a[128], b[128];
    snprintf(a, sizeof a, "ABCDEFGHIJ%s", w);
    snprintf(b, sizeof b, "abcdefghij%s", w);
    gen_opts o;
    gen_opts_default(&o);
    o.temperature = 0;
    o.n_tokens = 150;
    gen_result r;
    sink sw = { { 0 }, 0 }, sa = { { 0 }, 0 }, sb = { { 0 }, 0 }, su = { { 0 }, 0 };
    ck_assert_msg(gen_run(g, w, 64, &o, emit_sink, &sw, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.n_new, 150);
    ck_assert_int_eq(r.n_cropped, 149); /* all but the first, drawn from exactly W */
    ck_assert_int_eq(gen_run(g, a, 74, &o, emit_sink, &sa, &r, &err), 0);
    ck_assert_int_eq(r.n_cropped, 150);
    ck_assert_int_eq(gen_run(g, b, 74, &o, emit_sink, &sb, &r, &err), 0);
    o.use_cache = 0;
    ck_assert_int_eq(gen_run(g, a, 74, &o, emit_sink, &su, &r, &err), 0);
    ck_assert_str_eq(sa.text, sw.text);
    ck_assert_str_eq(sb.text, sw.text);
    ck_assert_str_eq(su.text, sw.text);

    /* The token after W + its first new one, from the window that drops
     * W's first byte: the training forward's argmax on that window. */
    int32_t ids[64];
    char win[65];
    memcpy(win, w + 1, 63);
    win[63] = sw.text[0];
    ck_assert_int_eq(gen_encode(g, win, 64, ids, &err), 0);
    float logits[256];
    ck_assert_int_eq(gen_logits(g, ids, 64, 0, logits, &err), 0);
    int best = 0;
    for (int i = 1; i < gen_model_config(g)->vocab; i++)
        if (logits[i] > logits[best])
            best = i;
    ck_assert_int_eq(gen_decode(g, best), sw.text[1]);
    gen_free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runtime_generate");
    TCase *tc = tcase_create("generate");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, tiny_mem_bit_identical_across_schedules);
    tcase_add_test(tc, checkpoints_of_any_split_generate_the_same);
    tcase_add_test(tc, crops_the_context_as_nanogpt);
    tcase_add_test(tc, cache_matches_training_forward);
    tcase_add_test(tc, greedy_cached_equals_uncached);
    tcase_add_test(tc, exact_count_and_seeds);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
