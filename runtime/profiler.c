/*
 * profiler.c: per-op timings and memory of the CPU kernels (profiler.h).
 */
#include "runtime/profiler.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "runtime/channel.h"
#include "runtime/rng.h"
#include "runtime/split.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Layers profiled together as one stack (at most; fewer when the model has
 * fewer leading plain layers).  See profiler.h: a lone layer's weights,
 * gradients and saved state fit the 1 MiB L2 of the development VM, a
 * stage's do not. */
#define PROFILE_STACK 4

/* Saved states in flight while profiling: each B and W reads a state that
 * another F wrote after it, as in a pipeline. */
#define PROFILE_IN_FLIGHT 2

/* A start line for the threads of measure_concurrent: each arrives when
 * its buffers are ready, and all go once `expected` have arrived, so that
 * their timed loops overlap.  `expected` is set once the threads have been
 * created (fewer when one could not start). */
typedef struct gate {
    pthread_mutex_t mu;  /* guards the fields below */
    pthread_cond_t cv;   /* broadcast when the gate opens */
    int arrived;         /* threads waiting or gone through */
    int expected;        /* threads to wait for; 0 until known */
} gate;

/* Arrives at g and waits until everyone expected has arrived. */
static void gate_wait(gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->arrived++;
    if (g->expected > 0 && g->arrived >= g->expected)
        pthread_cond_broadcast(&g->cv);
    while (g->expected == 0 || g->arrived < g->expected)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

/* Sets how many threads g waits for, opening it if they are all there. */
static void gate_expect(gate *g, int n)
{
    pthread_mutex_lock(&g->mu);
    g->expected = n;
    if (g->arrived >= n)
        pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Buffers for timing one stage. */
typedef struct bench_stage {
    llama_stage st;       /* the part under test */
    float *params;        /* [n_params] */
    float *grads;         /* [n_params] */
    llama_saved *sv[PROFILE_IN_FLIGHT]; /* saved states, used in rotation */
    int32_t *tokens;      /* [B*T] inputs (embedding) */
    int32_t *targets;     /* [B*T] targets (head) */
    float *act;           /* [B*T*d] input activation */
    float *out;           /* [B*T*d] F's output (scratch) */
    float *dy;            /* [B*T*d] incoming gradient */
    float *dx;            /* [B*T*d] outgoing gradient */
} bench_stage;

static void bench_free(bench_stage *b)
{
    for (int q = 0; q < PROFILE_IN_FLIGHT; q++)
        llama_saved_free(b->sv[q]);
    free(b->params);
    free(b->grads);
    free(b->tokens);
    free(b->targets);
    free(b->act);
    free(b->out);
    free(b->dy);
    free(b->dx);
    llama_stage_free(&b->st);
}

/* Measures one part: a stage of layers [0, n_layers) with or without
 * embedding and head, PROFILE_IN_FLIGHT micro-batches in flight: op i is
 * F of micro-batch i, then B and W of micro-batch i - (K-1), K =
 * PROFILE_IN_FLIGHT, each micro-batch on saved state i mod K.  The first
 * K micro-batches warm up; the next `reps` are timed.  Times and bytes are
 * per layer when n_layers > 0 (divided by n_layers). */
static int measure_part(const zb_model *m, int batch, int reps, int n_layers, int emb, int head,
                        gate *start, profile_part *out, zb_err *err)
{
    enum { K = PROFILE_IN_FLIGHT };
    bench_stage b;
    memset(&b, 0, sizeof b);
    if (llama_stage_init(&b.st, m, 0, n_layers, emb, head, err) != 0) {
        if (start)
            gate_wait(start);
        return -1;
    }
    size_t np = llama_stage_num_params(&b.st);
    size_t tok = (size_t)batch * (size_t)m->seq_len, act = tok * (size_t)m->d_model;
    b.params = malloc(sizeof(float) * (np ? np : 1));
    b.grads = calloc(np ? np : 1, sizeof(float));
    int sv_ok = 1;
    for (int q = 0; q < K; q++)
        sv_ok = (b.sv[q] = llama_saved_new(&b.st, batch)) != NULL && sv_ok;
    b.tokens = malloc(sizeof(int32_t) * tok);
    b.targets = malloc(sizeof(int32_t) * tok);
    b.act = malloc(sizeof(float) * act);
    b.out = malloc(sizeof(float) * act);
    b.dy = malloc(sizeof(float) * act);
    b.dx = malloc(sizeof(float) * act);
    double *tf = malloc(sizeof(double) * (size_t)reps * 3);
    int ok = b.params && b.grads && sv_ok && b.tokens && b.targets && b.act && b.out && b.dy && b.dx
             && tf;
    if (start) /* every thread gets here, set up or not, so none waits forever */
        gate_wait(start);
    if (!ok) {
        free(tf);
        bench_free(&b);
        return zb_fail(err, "out of memory while profiling");
    }
    llama_stage_init_params(&b.st, b.params, 1);
    zb_rng r;
    rng_seed(&r, 7, 0);
    for (size_t i = 0; i < tok; i++) {
        b.tokens[i] = (int32_t)rng_below(&r, (uint64_t)m->vocab);
        b.targets[i] = (int32_t)rng_below(&r, (uint64_t)m->vocab);
    }
    for (size_t i = 0; i < act; i++) {
        b.act[i] = (float)rng_normal(&r);
        b.dy[i] = (float)(rng_normal(&r) * 1e-3);
    }
    double *tb = tf + reps, *tw = tb + reps;
    int total = K + reps; /* micro-batches: K warm-up, then reps timed */
    int rc = 0;
    for (int i = 0; i < total + K - 1 && rc == 0; i++) {
        int jf = i, jb = i - (K - 1); /* F of jf, then B and W of jb */
        if (jf < total) {
            float loss;
            llama_saved *sv = b.sv[jf % K];
            double t0 = now_s();
            rc = llama_stage_forward(&b.st, b.params, emb ? b.tokens : NULL, emb ? NULL : b.act,
                                     head ? b.targets : NULL, sv, head ? NULL : b.out, &loss,
                                     NULL, err);
            double t1 = now_s();
            if (jf >= K) {
                tf[jf - K] = t1 - t0;
                out->m_b = (double)llama_saved_bytes(sv);
            }
        }
        if (rc == 0 && jb >= 0 && jb < total) {
            llama_saved *sv = b.sv[jb % K];
            double t1 = now_s();
            rc = llama_stage_backward_b(&b.st, b.params, sv, 1.0f, head ? NULL : b.dy,
                                        emb ? NULL : b.dx, err);
            double t2 = now_s();
            size_t after_b = llama_saved_bytes(sv);
            if (rc == 0)
                rc = llama_stage_backward_w(&b.st, sv, b.grads, err);
            double t3 = now_s();
            if (jb >= K) {
                tb[jb - K] = t2 - t1;
                tw[jb - K] = t3 - t2;
                out->m_w = (double)after_b;
            }
        }
    }
    if (rc == 0) {
        double per = n_layers > 0 ? (double)n_layers : 1.0;
        out->t_f = median(tf, reps) / per;
        out->t_b = median(tb, reps) / per;
        out->t_w = median(tw, reps) / per;
        out->m_b /= per;
        out->m_w /= per;
    }
    free(tf);
    bench_free(&b);
    return rc;
}

/* Most threads that time a part at once (see measure_concurrent). */
#define PROFILE_MAX_THREADS 8

/* One thread's share of measure_concurrent. */
typedef struct part_job {
    const zb_model *m;          /* the model */
    int batch, reps;            /* micro-batch size, timed repetitions */
    int n_layers, emb, head;    /* the part (measure_part's arguments) */
    gate *start;                /* opened when every thread is set up */
    profile_part out;           /* this thread's medians */
    int rc;                     /* measure_part's result */
    zb_err err;                 /* its message */
} part_job;

static void *part_main(void *arg)
{
    part_job *j = arg;
    j->rc = measure_part(j->m, j->batch, j->reps, j->n_layers, j->emb, j->head, j->start, &j->out,
                         &j->err);
    return NULL;
}

/* Threads that time ops at once: one per online CPU, at most
 * PROFILE_MAX_THREADS. */
static int profile_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > PROFILE_MAX_THREADS ? PROFILE_MAX_THREADS : (int)n;
}

/* Times a part on `n` threads at once, each with its own stage and
 * buffers, as a pipeline's devices compute at once; each figure is the
 * largest of the threads' medians, because a pipeline step waits for its
 * slowest device (profiler.h, "which core").  n = 1 measures on the
 * calling thread.  Measures with fewer threads when one cannot start. */
static int measure_concurrent(const zb_model *m, int batch, int reps, int n_layers, int emb,
                              int head, int n, profile_part *out, zb_err *err)
{
    if (n <= 1)
        return measure_part(m, batch, reps, n_layers, emb, head, NULL, out, err);
    part_job jobs[PROFILE_MAX_THREADS];
    pthread_t tid[PROFILE_MAX_THREADS];
    gate start = { .arrived = 0, .expected = 0 };
    if (pthread_mutex_init(&start.mu, NULL) != 0)
        return measure_part(m, batch, reps, n_layers, emb, head, NULL, out, err);
    if (pthread_cond_init(&start.cv, NULL) != 0) {
        pthread_mutex_destroy(&start.mu);
        return measure_part(m, batch, reps, n_layers, emb, head, NULL, out, err);
    }
    int started = 1; /* this thread is job 0 */
    for (int i = 0; i < n; i++) {
        jobs[i] = (part_job){ .m = m, .batch = batch, .reps = reps, .n_layers = n_layers,
                              .emb = emb, .head = head, .start = &start };
        if (i > 0) {
            if (pthread_create(&tid[i], NULL, part_main, &jobs[i]) != 0)
                break; /* measure with the threads that did start */
            started++;
        }
    }
    n = started;
    gate_expect(&start, n);
    part_main(&jobs[0]);
    for (int i = 1; i < n; i++)
        pthread_join(tid[i], NULL);
    pthread_cond_destroy(&start.cv);
    pthread_mutex_destroy(&start.mu);
    for (int i = 0; i < n; i++)
        if (jobs[i].rc != 0) {
            *err = jobs[i].err;
            return -1;
        }
    *out = jobs[0].out;
    for (int i = 1; i < n; i++) {
        out->t_f = jobs[i].out.t_f > out->t_f ? jobs[i].out.t_f : out->t_f;
        out->t_b = jobs[i].out.t_b > out->t_b ? jobs[i].out.t_b : out->t_b;
        out->t_w = jobs[i].out.t_w > out->t_w ? jobs[i].out.t_w : out->t_w;
    }
    return 0;
}

/* Layers in the profiled stack: up to PROFILE_STACK leading layers that
 * are not memory layers (their cost differs; a model whose layer 0 is one
 * profiles that one layer alone, as before). */
static int stack_layers(const zb_model *m)
{
    int n = 1;
    while (n < PROFILE_STACK && n < m->n_layers && !model_is_memory_layer(m, 0)
           && !model_is_memory_layer(m, n))
        n++;
    return n;
}

/* Ping-pong through a channel between two threads. */
typedef struct ponger {
    zb_chan *ch;   /* shared channel */
    int rounds;    /* messages to bounce */
} ponger;

static void *pong_main(void *arg)
{
    ponger *p = arg;
    for (int k = 0; k < p->rounds; k++) {
        void *msg;
        if (chan_recv(p->ch, CHAN_ACT, 1, k, &msg, NULL) != 0)
            return NULL;
        chan_send(p->ch, CHAN_GRAD, 0, k, msg, 0);
    }
    return NULL;
}

static int measure_comm(size_t bytes, double *t_comm, zb_err *err)
{
    enum { ROUNDS = 64 };
    zb_chan ch;
    if (chan_init(&ch, 2, ROUNDS) != 0)
        return zb_fail(err, "out of memory while profiling");
    ponger p = { &ch, ROUNDS };
    pthread_t tid;
    if (pthread_create(&tid, NULL, pong_main, &p) != 0) {
        chan_destroy(&ch);
        return zb_fail(err, "cannot start the profiling thread");
    }
    double t0 = now_s();
    int rc = 0;
    for (int k = 0; k < ROUNDS && rc == 0; k++) {
        void *msg = malloc(bytes ? bytes : 1);
        if (!msg) {
            chan_abort(&ch);
            rc = zb_fail(err, "out of memory while profiling");
            break;
        }
        chan_send(&ch, CHAN_ACT, 1, k, msg, 0);
        if (chan_recv(&ch, CHAN_GRAD, 0, k, &msg, NULL) != 0)
            rc = zb_fail(err, "channel aborted while profiling");
        free(msg);
    }
    double dt = now_s() - t0;
    pthread_join(tid, NULL);
    chan_destroy(&ch);
    *t_comm = dt / (2.0 * ROUNDS);
    return rc;
}

int profiler_measure(const zb_model *m, int batch, int reps, zb_profile *p, zb_err *err)
{
    if (batch <= 0)
        batch = m->micro_batch;
    if (batch <= 0 || reps < 1)
        return zb_fail(err, "profiling needs a positive batch size and repetition count");
    kernels_init_threads(1);
    profile_init(p);
    snprintf(p->model, sizeof p->model, "%s", m->name);
    snprintf(p->hardware, sizeof p->hardware, "cpu");
    p->micro_batch = batch;
    p->seq_len = m->seq_len;
    p->recompute = 0;
    int n = profile_threads();
    if (measure_concurrent(m, batch, reps, stack_layers(m), 0, 0, n, &p->layer, err) != 0)
        return zb_wrap(err, "profiling a layer: ");
    if (measure_concurrent(m, batch, reps, 0, 1, 0, n, &p->embedding, err) != 0)
        return zb_wrap(err, "profiling the embedding: ");
    if (measure_concurrent(m, batch, reps, 0, 0, 1, n, &p->head, err) != 0)
        return zb_wrap(err, "profiling the head: ");
    size_t act_bytes = sizeof(float) * (size_t)batch * (size_t)m->seq_len * (size_t)m->d_model;
    if (measure_comm(act_bytes, &p->t_comm, err) != 0)
        return -1;
    /* Per layer the runtime keeps weights, grads, AdamW m and v, and the
     * post-validation snapshot of weights, m and v: 7 fp32 buffers. */
    llama_stage one;
    if (llama_stage_init(&one, m, 0, 1, 0, 0, err) != 0)
        return -1;
    p->static_bytes_per_layer = 7.0 * sizeof(float) * (double)llama_stage_num_params(&one);
    llama_stage_free(&one);
    return 0;
}

int profiler_apply(const zb_profile *p, const zb_model *m, sched_t *s, zb_err *err)
{
    int *first = malloc(sizeof *first * (size_t)(s->n_stages + 1));
    if (!first)
        return zb_fail(err, "out of memory");
    if (split_layers(m->n_layers, s->n_stages, first, err) != 0) {
        free(first);
        return -1;
    }
    for (int i = 0; i < s->n_stages; i++) {
        double n = first[i + 1] - first[i];
        stage_cost c = {
            .t_f = n * p->layer.t_f, .t_b = n * p->layer.t_b, .t_w = n * p->layer.t_w,
            .d_f = n * p->layer.m_b, .d_b = n * (p->layer.m_w - p->layer.m_b), .d_w = -n * p->layer.m_w,
        };
        const profile_part *extra[2] = { i == 0 ? &p->embedding : NULL,
                                         i == s->n_stages - 1 ? &p->head : NULL };
        for (int k = 0; k < 2; k++) {
            if (!extra[k])
                continue;
            c.t_f += extra[k]->t_f;
            c.t_b += extra[k]->t_b;
            c.t_w += extra[k]->t_w;
            c.d_f += extra[k]->m_b;
            c.d_b += extra[k]->m_w - extra[k]->m_b;
            c.d_w -= extra[k]->m_w;
        }
        /* Seconds to milliseconds, the unit of measured traces. */
        c.t_f *= 1e3;
        c.t_b *= 1e3;
        c.t_w *= 1e3;
        s->cost[i] = c;
    }
    s->t_comm = p->t_comm > 0 ? p->t_comm * 1e3 : 0;
    strcpy(s->time_unit, "ms");
    strcpy(s->mem_unit, "bytes");
    free(first);
    return 0;
}
