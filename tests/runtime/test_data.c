/*
 * test_data.c: the runtime's building blocks that need no model: the seeded
 * generator, the character loader (vocabulary, 90/10 split, seeded and
 * fixed windows), the layer split, profile costs applied to a schedule,
 * the channel and the checkpoint container
 * (round trip, corrupt and truncated files rejected without side effects).
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/channel.h"
#include "runtime/checkpoint.h"
#include "runtime/data.h"
#include "runtime/profiler.h"
#include "runtime/rng.h"
#include "runtime/split.h"

/* ---- rng ---- */

START_TEST(rng_is_seeded_and_streams_differ)
{
    zb_rng a, b, c;
    rng_seed(&a, 42, 0);
    rng_seed(&b, 42, 0);
    rng_seed(&c, 42, 1);
    int same_c = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rng_next(&a), y = rng_next(&b), z = rng_next(&c);
        ck_assert_uint_eq(x, y);
        same_c += x == z;
    }
    ck_assert_int_lt(same_c, 2);
    /* rng_below stays in range and hits every value of a small range. */
    int hits[7] = { 0 };
    for (int i = 0; i < 7000; i++) {
        uint64_t v = rng_below(&a, 7);
        ck_assert_uint_lt(v, 7);
        hits[v]++;
    }
    for (int k = 0; k < 7; k++)
        ck_assert_int_gt(hits[k], 800);
    double sum = 0, sq = 0;
    for (int i = 0; i < 20000; i++) {
        double u = rng_uniform(&a);
        ck_assert(u >= 0 && u < 1);
        double n = rng_normal(&a);
        sum += n;
        sq += n * n;
    }
    ck_assert_double_eq_tol(sum / 20000, 0, 0.05);
    ck_assert_double_eq_tol(sq / 20000, 1, 0.05);
}
END_TEST

/* ---- data ---- */

static const char *shakespeare_path(char *buf, size_t len)
{
    const char *root = getenv("ZB_SOURCE_ROOT");
    snprintf(buf, len, "%s/../shared/data/tinyshakespeare.txt", root ? root : ".");
    return buf;
}

START_TEST(data_vocab_and_split_of_tinyshakespeare)
{
    char path[4096];
    zb_data *d = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(data_load_file(shakespeare_path(path, sizeof path), 256, &d, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(d->vocab, 65); /* nanoGPT's shakespeare_char vocabulary */
    ck_assert_uint_eq(d->n_tokens, 1115394);
    ck_assert_uint_eq(d->n_train, 1003855); /* len - len/10; nanoGPT's int(n*0.9) = 1003854 */
    for (int i = 1; i < d->vocab; i++)
        ck_assert_int_lt(d->chars[i - 1], d->chars[i]);
    ck_assert_int_eq(d->chars[0], '\n');
    ck_assert_int_eq(d->id_of['a'], 39); /* nanoGPT's stoi['a'] */
    ck_assert_int_eq(d->id_of['\t'], -1);
    data_free(d);
}
END_TEST

START_TEST(data_windows_are_seeded_and_split)
{
    /* A text whose token id equals its position mod 50: windows must be
     * consecutive runs, and training windows must stay in the first 90%. */
    size_t len = 5000;
    char *text = malloc(len);
    for (size_t i = 0; i < len; i++)
        text[i] = (char)('0' + i % 50);
    zb_data *d = NULL;
    zb_err err = { { 0 } };
    ck_assert_int_eq(data_from_text(text, len, 16, &d, &err), 0);
    ck_assert_int_eq(d->vocab, 50);
    ck_assert_uint_eq(d->n_train, 4500);
    int32_t x1[4 * 16], y1[4 * 16], x2[4 * 16], y2[4 * 16];
    zb_rng r1, r2;
    rng_seed(&r1, 7, 0);
    rng_seed(&r2, 7, 0);
    for (int rep = 0; rep < 50; rep++) {
        data_train_batch(d, &r1, 4, x1, y1);
        data_train_batch(d, &r2, 4, x2, y2);
        ck_assert_mem_eq(x1, x2, sizeof x1);
        ck_assert_mem_eq(y1, y2, sizeof y1);
        for (int b = 0; b < 4; b++)
            for (int k = 0; k < 16; k++) {
                ck_assert_int_eq(y1[b * 16 + k], (x1[b * 16 + k] + 1) % 50);
                if (k > 0)
                    ck_assert_int_eq(x1[b * 16 + k], (x1[b * 16 + k - 1] + 1) % 50);
            }
    }
    /* Validation windows: fixed, inside the last 10%. */
    data_val_batch(d, 0, 4, 8, x1, y1);
    data_val_batch(d, 0, 4, 8, x2, y2);
    ck_assert_mem_eq(x1, x2, sizeof x1);
    ck_assert_int_eq(x1[0], (int)(4500 % 50)); /* window 0 starts at the split */
    data_val_batch(d, 4, 4, 8, x1, y1);
    ck_assert_int_eq(y1[3 * 16 + 15], y1[3 * 16 + 14] + 1 == 50 ? 0 : y1[3 * 16 + 14] + 1);
    data_free(d);
    free(text);
}
END_TEST

START_TEST(data_rejects_empty_and_tiny_text)
{
    zb_data *d = NULL;
    zb_err err = { { 0 } };
    ck_assert_int_eq(data_from_text("", 0, 8, &d, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "empty"));
    ck_assert_int_eq(data_from_text("hello world, this is short", 26, 8, &d, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "too short"));
    ck_assert_ptr_null(d);
    ck_assert_int_eq(data_load_file("/nonexistent/file.txt", 8, &d, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/file.txt"));
}
END_TEST

/* ---- split ---- */

START_TEST(split_is_contiguous_and_even)
{
    int first[9];
    zb_err err;
    ck_assert_int_eq(split_layers(6, 4, first, &err), 0);
    int want[] = { 0, 2, 4, 5, 6 };
    for (int i = 0; i <= 4; i++)
        ck_assert_int_eq(first[i], want[i]);
    ck_assert_int_eq(split_layers(4, 4, first, &err), 0);
    for (int i = 0; i <= 4; i++)
        ck_assert_int_eq(first[i], i);
    ck_assert_int_eq(split_layers(4, 8, first, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "8 virtual stages"));
}
END_TEST

/* ---- profile costs onto a schedule ---- */

START_TEST(profile_costs_follow_the_split)
{
    zb_profile p;
    profile_init(&p);
    p.layer = (profile_part){ .t_f = 0.010, .t_b = 0.020, .t_w = 0.005, .m_b = 100, .m_w = 40 };
    p.embedding = (profile_part){ .t_f = 0.001, .t_b = 0, .t_w = 0.002, .m_b = 1, .m_w = 2 };
    p.head = (profile_part){ .t_f = 0.003, .t_b = 0.004, .t_w = 0.001, .m_b = 10, .m_w = 5 };
    p.t_comm = 0.0005;
    zb_model m;
    memset(&m, 0, sizeof m);
    m.n_layers = 6;
    sched_t *s = sched_new(2, 4, 4);
    zb_err err;
    ck_assert_int_eq(profiler_apply(&p, &m, s, &err), 0);
    /* Layers 2, 2, 1, 1; embedding on stage 0, head on stage 3; ms. */
    ck_assert_double_eq_tol(s->cost[0].t_f, 21.0, 1e-9);
    ck_assert_double_eq_tol(s->cost[0].t_w, 12.0, 1e-9);
    ck_assert_double_eq_tol(s->cost[1].t_b, 40.0, 1e-9);
    ck_assert_double_eq_tol(s->cost[2].t_f, 10.0, 1e-9);
    ck_assert_double_eq_tol(s->cost[3].t_f, 13.0, 1e-9);
    ck_assert_double_eq_tol(s->cost[3].t_b, 24.0, 1e-9);
    ck_assert_double_eq_tol(s->t_comm, 0.5, 1e-12);
    /* Memory: F keeps M_B, B leaves M_W, W frees the rest: sums to zero. */
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq_tol(s->cost[i].d_f + s->cost[i].d_b + s->cost[i].d_w, 0, 1e-9);
    ck_assert_double_eq_tol(s->cost[1].d_f, 200, 1e-9);
    ck_assert_str_eq(s->time_unit, "ms");
    sched_free(s);
    s = sched_new(2, 4, 8);
    ck_assert_int_eq(profiler_apply(&p, &m, s, &err), -1);
    sched_free(s);
}
END_TEST

/* ---- channel ---- */

typedef struct pinger {
    zb_chan *ch; /* shared channel */
    int n;       /* messages to send */
} pinger;

static void *pinger_main(void *arg)
{
    pinger *p = arg;
    for (int j = 0; j < p->n; j++) {
        int *v = malloc(sizeof *v);
        *v = j * 10;
        chan_send(p->ch, CHAN_ACT, 1, j, v, j + 0.5);
    }
    return NULL;
}

START_TEST(channel_delivers_across_threads_and_aborts)
{
    zb_chan ch;
    ck_assert_int_eq(chan_init(&ch, 2, 8), 0);
    pinger p = { &ch, 8 };
    pthread_t tid;
    pthread_create(&tid, NULL, pinger_main, &p);
    for (int j = 7; j >= 0; j--) { /* receive out of send order: keys, not FIFO */
        void *ptr;
        double val;
        ck_assert_int_eq(chan_recv(&ch, CHAN_ACT, 1, j, &ptr, &val), 0);
        ck_assert_int_eq(*(int *)ptr, j * 10);
        ck_assert_double_eq(val, j + 0.5);
        free(ptr);
    }
    pthread_join(tid, NULL);
    /* An abort fails receives; an undelivered message is freed by reset. */
    chan_send(&ch, CHAN_GRAD, 0, 3, malloc(16), 0);
    chan_send(&ch, CHAN_GRAD, 0, 4, malloc(16), 0);
    chan_abort(&ch);
    void *ptr = NULL;
    ck_assert_int_eq(chan_recv(&ch, CHAN_GRAD, 0, 2, &ptr, NULL), -1);
    /* Even a message that was delivered before the abort fails to arrive:
     * the receiver gets nothing (the channel frees the buffer), so a worker
     * never computes on after another one failed. */
    ptr = &ch;
    ck_assert_int_eq(chan_recv(&ch, CHAN_GRAD, 0, 3, &ptr, NULL), -1);
    ck_assert_ptr_null(ptr);
    chan_reset(&ch);
    chan_send(&ch, CHAN_NORM_UP, 1, 0, NULL, 3.0);
    double v = 0;
    ck_assert_int_eq(chan_recv(&ch, CHAN_NORM_UP, 1, 0, NULL, &v), 0);
    ck_assert_double_eq(v, 3.0);
    chan_destroy(&ch);
}
END_TEST

/* ---- checkpoint container ---- */

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zb_test_ckpt_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(checkpoint_round_trip_and_rejections)
{
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/c.bin", tmpdir);
    float a[100];
    int64_t b = 12345;
    for (int i = 0; i < 100; i++)
        a[i] = (float)i * 0.25f;
    ckpt_part parts[2] = { { a, sizeof a }, { &b, sizeof b } };
    zb_err err;
    ck_assert_int_eq(ckpt_write(path, parts, 2, &err), 0);

    float a2[100] = { 0 };
    int64_t b2 = 0;
    ckpt_part in[2] = { { a2, sizeof a2 }, { &b2, sizeof b2 } };
    ck_assert_int_eq(ckpt_read(path, in, 2, &err), 0);
    ck_assert_mem_eq(a, a2, sizeof a);
    ck_assert_int_eq(b2, 12345);

    /* Wrong shape. */
    ckpt_part small[2] = { { a2, 40 }, { &b2, sizeof b2 } };
    ck_assert_int_eq(ckpt_read(path, small, 2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "expected"));
    ck_assert_int_eq(ckpt_read(path, in, 1, &err), -1);

    /* Flip one payload byte: checksum. Buffers must stay untouched. */
    FILE *f = fopen(path, "r+b");
    fseek(f, -20, SEEK_END);
    int c = fgetc(f);
    fseek(f, -20, SEEK_END);
    fputc(c ^ 0x40, f);
    fclose(f);
    memset(a2, 0, sizeof a2);
    b2 = 7;
    ck_assert_int_eq(ckpt_read(path, in, 2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "checksum"));
    ck_assert_int_eq(b2, 7);
    ck_assert_float_eq(a2[50], 0);

    /* Truncation. */
    ck_assert_int_eq(ckpt_write(path, parts, 2, &err), 0);
    ck_assert_int_eq(truncate(path, 300), 0);
    ck_assert_int_eq(ckpt_read(path, in, 2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "truncated"));
    ck_assert_int_eq(truncate(path, 10), 0);
    ck_assert_int_eq(ckpt_read(path, in, 2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "truncated"));

    /* Not a checkpoint at all. */
    f = fopen(path, "wb");
    fputs("this is a text file, long enough to hold a header but not a checkpoint\n", f);
    fclose(f);
    ck_assert_int_eq(ckpt_read(path, in, 2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "magic"));

    /* No temporary files left behind; an unwritable target fails cleanly. */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) -eq 1", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(ckpt_write("/nonexistent-dir/c.bin", parts, 2, &err), -1);
    remove_tmpdir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runtime-data");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, rng_is_seeded_and_streams_differ);
    tcase_add_test(tc, data_vocab_and_split_of_tinyshakespeare);
    tcase_add_test(tc, data_windows_are_seeded_and_split);
    tcase_add_test(tc, data_rejects_empty_and_tiny_text);
    tcase_add_test(tc, split_is_contiguous_and_even);
    tcase_add_test(tc, profile_costs_follow_the_split);
    tcase_add_test(tc, channel_delivers_across_threads_and_aborts);
    tcase_add_test(tc, checkpoint_round_trip_and_rejections);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
