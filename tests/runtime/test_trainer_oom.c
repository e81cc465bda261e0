/*
 * test_trainer_oom.c: every allocation that can fail in trainer_create
 * (the trainer's arrays, the backend's stages and saved states, the
 * transport, the vocabulary passes' buffers) and in the first step (the
 * kernel teams, the activation pool, weight-gradient spares) fails cleanly:
 * -1 with a message, and nothing left allocated, under the sanitizers as
 * without them.
 *
 * The test is linked with -Wl,--wrap=malloc,calloc,realloc,free
 * (tests/runtime/meson.build), so that every call from the project's own
 * code (this executable and the static libraries it links) goes through
 * the wrappers below; under ASan they call ASan's allocator, which still
 * sees every block.  A countdown makes the k-th allocation fail; the test
 * walks k = 1, 2, ... until the call under test no longer reaches the
 * countdown, and after each failure checks that every block allocated
 * during the call has been freed (a set of live pointers), so that a leak
 * fails the test in the plain build too, not only under LeakSanitizer.
 * Some failures are absorbed by design (kernels/cpu/buf_pool.c keeps a
 * buffer it cannot index by freeing it): then the call succeeds, and must
 * still leave nothing behind once the trainer is freed.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/llama.h"
#include "runtime/transport_factory.h"
#include "schedules/gen.h"
#include "tests/common/trainer_fixture.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

/* The wrappers' state: armed between oom_arm and oom_disarm. */
static int armed;          /* 1: count allocations and track blocks */
static long countdown;     /* the allocation that fails (1 = the next); 0: none */
static long allocations;   /* allocations seen since armed */
#define LIVE_CAP (1 << 16)
static void *live[LIVE_CAP]; /* open-addressing set of blocks allocated while armed */
static long n_live;        /* blocks in it */
/* The workers allocate concurrently during a step. */
static pthread_mutex_t oom_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(const void *p)
{
    uintptr_t h = (uintptr_t)p;
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 40) & (LIVE_CAP - 1);
}

static void live_add(void *p)
{
    size_t i = slot_of(p);
    while (live[i] && live[i] != (void *)1)
        i = (i + 1) & (LIVE_CAP - 1);
    live[i] = p;
    n_live++;
}

static void live_remove(void *p)
{
    size_t i = slot_of(p);
    while (live[i]) {
        if (live[i] == p) {
            live[i] = (void *)1; /* tombstone */
            n_live--;
            return;
        }
        i = (i + 1) & (LIVE_CAP - 1);
    }
}

/* 1 when this allocation is the one that fails. */
static int fail_now(void)
{
    if (!armed)
        return 0;
    allocations++;
    return countdown > 0 && allocations == countdown;
}

/* Counts one allocation; 1 when it is the one that fails. */
static int begin_alloc(void)
{
    pthread_mutex_lock(&oom_mu);
    int fail = fail_now();
    pthread_mutex_unlock(&oom_mu);
    return fail;
}

/* Records that old (NULL: none) became p (NULL: none). */
static void track(void *old, void *p)
{
    pthread_mutex_lock(&oom_mu);
    if (armed) {
        if (old)
            live_remove(old);
        if (p)
            live_add(p);
    }
    pthread_mutex_unlock(&oom_mu);
}

void *__wrap_malloc(size_t n)
{
    if (begin_alloc())
        return NULL;
    void *p = __real_malloc(n);
    track(NULL, p);
    return p;
}

void *__wrap_calloc(size_t k, size_t n)
{
    if (begin_alloc())
        return NULL;
    void *p = __real_calloc(k, n);
    track(NULL, p);
    return p;
}

void *__wrap_realloc(void *old, size_t n)
{
    if (begin_alloc())
        return NULL; /* old untouched, as realloc promises */
    void *p = __real_realloc(old, n);
    if (p || n == 0)
        track(old, p);
    return p;
}

void __wrap_free(void *p)
{
    track(p, NULL);
    __real_free(p);
}

static void oom_arm(long k)
{
    pthread_mutex_lock(&oom_mu);
    memset(live, 0, sizeof live);
    n_live = 0;
    allocations = 0;
    countdown = k;
    armed = 1;
    pthread_mutex_unlock(&oom_mu);
}

static void oom_disarm(void)
{
    pthread_mutex_lock(&oom_mu);
    armed = 0;
    pthread_mutex_unlock(&oom_mu);
}

/* Fails the allocation `after` allocations from now (0: none). */
static void oom_fail_after(long after)
{
    pthread_mutex_lock(&oom_mu);
    countdown = after > 0 ? allocations + after : 0;
    pthread_mutex_unlock(&oom_mu);
}

/* What one walk creates. */
typedef struct oom_case {
    const char *name;    /* for messages */
    sched_t *s;          /* the schedule (owned) */
    zb_model m;          /* the model */
    trainer_opts o;      /* the options */
} oom_case;

/* Walks every allocation of trainer_create for c, then of its first
 * trainer_step, failing each in turn: the call must return -1 with a
 * message and leave nothing allocated (after trainer_free for the step).
 * Returns the failure points walked. */
static long walk(const oom_case *c, const zb_data *d)
{
    long points = 0;
    zb_err err;
    /* creation */
    for (long k = 1;; k++) {
        trainer *t = NULL;
        memset(&err, 0, sizeof err);
        oom_arm(k);
        int rc = trainer_create(c->s, &c->m, d, &c->o, &t, &err);
        long seen = allocations;
        if (rc == 0) {
            /* the countdown not reached: every point walked; reached, a
             * failure the code absorbed (a cache that did not grow) */
            trainer_free(t);
            long left = n_live;
            oom_disarm();
            ck_assert_msg(left == 0, "%s: %ld blocks left after trainer_free", c->name, left);
            if (seen < k)
                break;
            continue;
        }
        long left = n_live;
        oom_disarm();
        ck_assert_msg(err.msg[0] != '\0', "%s: allocation %ld: -1 without a message", c->name, k);
        ck_assert_msg(left == 0, "%s: allocation %ld failed (%s): %ld blocks left allocated",
                      c->name, k, err.msg, left);
        points++;
    }
    /* the first step: teams, pool, spares; trainer_free after a failure */
    for (long k = 1;; k++) {
        trainer *t = NULL;
        memset(&err, 0, sizeof err);
        oom_arm(0);
        ck_assert_msg(trainer_create(c->s, &c->m, d, &c->o, &t, &err) == 0, "%s", err.msg);
        long base = allocations;
        oom_fail_after(k);
        double loss;
        int rc = trainer_step(t, &loss, &err);
        long seen = allocations - base;
        oom_fail_after(0);
        trainer_free(t);
        long left = n_live;
        oom_disarm();
        if (rc == 0) {
            ck_assert_msg(left == 0, "%s: %ld blocks left after a step and trainer_free", c->name,
                          left);
            if (seen < k)
                break; /* every point walked */
            continue;  /* a failure the kernels absorbed (buf_pool keeps fewer spares) */
        }
        ck_assert_msg(err.msg[0] != '\0', "%s: step allocation %ld: -1 without a message", c->name,
                      k);
        ck_assert_msg(left == 0, "%s: step allocation %ld failed (%s): %ld blocks left after "
                      "trainer_free", c->name, k, err.msg, left);
        points++;
    }
    return points;
}

static sched_t *make(gen_fn fn, int p, int m)
{
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.microbatches = m;
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(fn(&gp, &s, &err) == 0, "%s", err.msg);
    return s;
}

static trainer_opts opts(void)
{
    trainer_opts o;
    trainer_opts_default(&o);
    o.threads = 1;
    o.eval_windows = 2;
    return o;
}

START_TEST(plain_pipeline)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    oom_case c = { "zb-h1", make(gen_zb_h1, 2, 4), fixture_model(), opts() };
    long points = walk(&c, d);
    ck_assert_int_ge(points, 30);
    sched_free(c.s);
    data_free(d);
}
END_TEST

START_TEST(vocabulary_fifo_recompute)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    sched_t *base = make(gen_1f1b, 2, 4);
    sched_vocab v = { .variant = SCHED_VOCAB_1, .t_s = 0.5, .t_t = 0.5, .t_c0 = 0.1 };
    oom_case c = { "1f1b+vocab-1, fifo, recompute", NULL, fixture_model(), opts() };
    zb_err err = { { 0 } };
    ck_assert_msg(gen_vocab_insert(base, &v, &c.s, &err) == 0, "%s", err.msg);
    const int split[2] = { 3, 1 }, rc[2] = { LLAMA_RC_FULL, LLAMA_RC_MLP };
    c.o.transport = ZB_TRANSPORT_FIFO;
    c.o.layers_per_stage = split;
    c.o.recompute_stages = rc;
    ck_assert_int_ge(walk(&c, d), 30);
    sched_free(c.s);
    sched_free(base);
    data_free(d);
}
END_TEST

START_TEST(memory_layers)
{
    zb_data *d = fixture_data(64);
    zb_model m;
    zb_err err = { { 0 } };
    ck_assert_int_eq(model_preset("tiny-mem", &m, &err), 0);
    m.micro_batch = 1;
    oom_case c = { "tiny-mem", make(gen_1f1b, 2, 2), m, opts() };
    ck_assert_int_ge(walk(&c, d), 20);
    sched_free(c.s);
    data_free(d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trainer_oom");
    TCase *tc = tcase_create("walk");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, plain_pipeline);
    tcase_add_test(tc, vocabulary_fifo_recompute);
    tcase_add_test(tc, memory_layers);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
