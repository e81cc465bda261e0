/*
 * profiler.c: per-op timings and memory of a device (profiler.h), through
 * the backend interface (backend.h): every stage, saved state, activation
 * and op is the backend's, so the CPU's kernels and the CUDA module's are
 * measured by the same code the same way.  The ops are timed on the host
 * clock around the op and the stage's sync (a no-op on the CPU, where an
 * op has finished when it returns; on a GPU the wait for its stream), the
 * way the executor sees them.
 */
#include "runtime/profiler.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/backend_cpu.h"
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

/* One part under test on one device of the backend. */
typedef struct bench_stage {
    zb_backend *be;       /* the backend (borrowed) */
    int dev;              /* its device this part runs on */
    llama_stage st;       /* the part's layout */
    zb_bstage *bs;        /* its buffers on the backend */
    zb_bsaved *sv[PROFILE_IN_FLIGHT]; /* saved states, used in rotation */
    int32_t *tokens;      /* [B*T] host inputs (embedding) */
    int32_t *targets;     /* [B*T] host targets (head) */
    void *act;            /* [B*T*d] input activation */
    void *out;            /* [B*T*d] F's output (scratch) */
    void *dy;             /* [B*T*d] incoming gradient */
    void *dx;             /* [B*T*d] outgoing gradient */
} bench_stage;

static void bench_free(bench_stage *b)
{
    zb_backend *be = b->be;
    for (int q = 0; q < PROFILE_IN_FLIGHT; q++)
        if (b->sv[q])
            be->ops->saved_free(be, b->sv[q]);
    void *acts[4] = { b->act, b->out, b->dy, b->dx };
    for (int k = 0; k < 4; k++)
        if (acts[k])
            be->ops->act_free(be, acts[k]);
    if (b->bs)
        be->ops->stage_free(be, b->bs);
    free(b->tokens);
    free(b->targets);
    llama_stage_free(&b->st);
}

/* Deterministic parameters for timing: gains 1, every matrix entry
 * uniform with std 0.02 (xorshift64*).  Timing does not depend on the
 * values, and llama_stage_init_params' Box-Muller takes tens of seconds
 * for Llama-3's 128k x 4096 embedding and head. */
static void timing_params(const llama_stage *st, float *p)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int t = 0; t < st->n_tensors; t++) {
        const llama_tensor *ten = &st->tensors[t];
        for (size_t i = 0; i < ten->count; i++) {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            float u = (float)((s * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
            p[ten->offset + i] = ten->rows == 1 ? 1.0f : 0.0346f * (2.0f * u - 1.0f);
        }
    }
}

/* An activation of n elements on device dev, from host values (NULL:
 * left as it is); NULL on failure. */
static void *bench_act(zb_backend *be, int dev, size_t n, const float *host, zb_err *err)
{
    void *a = be->ops->act_new(be, n);
    if (!a) {
        zb_fail(err, "out of memory while profiling");
        return NULL;
    }
    int rc = 0;
    if (host && be->ops->act_upload)
        rc = be->ops->act_upload(be, a, host, n, err);
    if (rc == 0 && be->ops->act_wait)
        rc = be->ops->act_wait(be, dev, a, err);
    if (rc != 0) {
        be->ops->act_free(be, a);
        return NULL;
    }
    return a;
}

/* Sets up part b (layers [0, n_layers), with or without embedding and
 * head) on device dev: its stage with timing parameters, its saved
 * states, random inputs.  0 or -1 with err. */
static int bench_init(bench_stage *b, zb_backend *be, int dev, const zb_model *m, int batch,
                      int n_layers, int emb, int head, zb_err *err)
{
    memset(b, 0, sizeof *b);
    b->be = be;
    b->dev = dev;
    if (be->ops->bind && be->ops->bind(be, dev, err) != 0)
        return -1;
    if (llama_stage_init(&b->st, m, 0, n_layers, emb, head, err) != 0)
        return -1;
    if (be->ops->stage_new(be, &b->st, NULL, dev, &b->bs, err) != 0) {
        b->bs = NULL;
        return -1;
    }
    timing_params(&b->st, be->ops->host(be, b->bs, ZB_BUF_PARAMS));
    if (be->ops->upload && be->ops->upload(be, b->bs, ZB_BUF_PARAMS, err) != 0)
        return -1;
    for (int q = 0; q < PROFILE_IN_FLIGHT; q++)
        if (be->ops->saved_new(be, b->bs, batch, 0, &b->sv[q], err) != 0) {
            b->sv[q] = NULL;
            return -1;
        }
    size_t tok = (size_t)batch * (size_t)m->seq_len, act = tok * (size_t)m->d_model;
    b->tokens = malloc(sizeof(int32_t) * tok);
    b->targets = malloc(sizeof(int32_t) * tok);
    float *host = malloc(sizeof(float) * act * 2);
    if (!b->tokens || !b->targets || !host) {
        free(host);
        return zb_fail(err, "out of memory while profiling");
    }
    zb_rng r;
    rng_seed(&r, 7, 0);
    for (size_t i = 0; i < tok; i++) {
        b->tokens[i] = (int32_t)rng_below(&r, (uint64_t)m->vocab);
        b->targets[i] = (int32_t)rng_below(&r, (uint64_t)m->vocab);
    }
    for (size_t i = 0; i < act; i++) {
        host[i] = (float)rng_normal(&r);
        host[act + i] = (float)(rng_normal(&r) * 1e-3);
    }
    b->act = bench_act(be, dev, act, host, err);
    b->dy = b->act ? bench_act(be, dev, act, host + act, err) : NULL;
    b->out = b->dy ? bench_act(be, dev, act, NULL, err) : NULL;
    b->dx = b->out ? bench_act(be, dev, act, NULL, err) : NULL;
    free(host);
    return b->dx ? 0 : -1;
}

/* Measures one part on device dev of be: a stage of layers [0, n_layers)
 * with or without embedding and head, PROFILE_IN_FLIGHT micro-batches in
 * flight: op i is F of micro-batch i, then B and W of micro-batch i -
 * (K-1), K = PROFILE_IN_FLIGHT, each micro-batch on saved state i mod K.
 * The first K micro-batches warm up; the next `reps` are timed.  Times and
 * bytes are per layer when n_layers > 0 (divided by n_layers). */
static int measure_part(zb_backend *be, int dev, const zb_model *m, int batch, int reps,
                        int n_layers, int emb, int head, gate *start, profile_part *out,
                        zb_err *err)
{
    enum { K = PROFILE_IN_FLIGHT };
    bench_stage b;
    int rc = bench_init(&b, be, dev, m, batch, n_layers, emb, head, err);
    double *tf = rc == 0 ? malloc(sizeof(double) * (size_t)reps * 3) : NULL;
    if (rc == 0 && !tf)
        rc = zb_fail(err, "out of memory while profiling");
    if (start) /* every thread gets here, set up or not, so none waits forever */
        gate_wait(start);
    const zb_backend_ops *o = be->ops;
    double *tb = tf ? tf + reps : NULL, *tw = tf ? tb + reps : NULL;
    int total = K + reps; /* micro-batches: K warm-up, then reps timed */
    for (int i = 0; i < total + K - 1 && rc == 0; i++) {
        int jf = i, jb = i - (K - 1); /* F of jf, then B and W of jb */
        if (jf < total) {
            float loss;
            zb_bsaved *sv = b.sv[jf % K];
            double t0 = now_s();
            rc = o->forward(be, b.bs, sv, emb ? b.tokens : NULL, emb ? NULL : b.act,
                            head ? b.targets : NULL, head ? NULL : b.out, head ? &loss : NULL,
                            err);
            if (rc == 0)
                rc = o->sync(be, b.bs, err);
            double t1 = now_s();
            if (jf >= K) {
                tf[jf - K] = t1 - t0;
                out->m_b = (double)o->saved_bytes(be, sv);
            }
        }
        if (rc == 0 && jb >= 0 && jb < total) {
            zb_bsaved *sv = b.sv[jb % K];
            double t1 = now_s();
            rc = o->backward_b(be, b.bs, sv, 1.0f, head ? NULL : b.dy, emb ? NULL : b.dx, err);
            if (rc == 0)
                rc = o->sync(be, b.bs, err);
            double t2 = now_s();
            size_t after_b = o->saved_bytes(be, sv);
            if (rc == 0)
                rc = o->backward_w(be, b.bs, sv, NULL, err);
            if (rc == 0)
                rc = o->sync(be, b.bs, err);
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
    zb_backend *be;             /* the backend (shared by the threads) */
    int dev;                    /* this thread's device of it */
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
    j->rc = measure_part(j->be, j->dev, j->m, j->batch, j->reps, j->n_layers, j->emb, j->head,
                         j->start, &j->out, &j->err);
    return NULL;
}

int profiler_cpu_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > PROFILE_MAX_THREADS ? PROFILE_MAX_THREADS : (int)n;
}

/* Times a part on `n` threads at once, thread i on device i of be, each
 * with its own stage and buffers, as a pipeline's devices compute at once;
 * each figure is the largest of the threads' medians, because a pipeline
 * step waits for its slowest device (profiler.h, "which core").  n = 1
 * measures on the calling thread.  Measures with fewer threads when one
 * cannot start. */
static int measure_concurrent(zb_backend *be, const zb_model *m, int batch, int reps,
                              int n_layers, int emb, int head, int n, profile_part *out,
                              zb_err *err)
{
    if (n <= 1)
        return measure_part(be, 0, m, batch, reps, n_layers, emb, head, NULL, out, err);
    part_job jobs[PROFILE_MAX_THREADS];
    pthread_t tid[PROFILE_MAX_THREADS];
    gate start = { .arrived = 0, .expected = 0 };
    if (pthread_mutex_init(&start.mu, NULL) != 0)
        return measure_part(be, 0, m, batch, reps, n_layers, emb, head, NULL, out, err);
    if (pthread_cond_init(&start.cv, NULL) != 0) {
        pthread_mutex_destroy(&start.mu);
        return measure_part(be, 0, m, batch, reps, n_layers, emb, head, NULL, out, err);
    }
    int started = 1; /* this thread is job 0 */
    for (int i = 0; i < n; i++) {
        jobs[i] = (part_job){ .be = be, .dev = i, .m = m, .batch = batch, .reps = reps,
                              .n_layers = n_layers, .emb = emb, .head = head, .start = &start };
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

/* Ping-pong between devices 0 and 1 through a channel: what the
 * in-process transport does with a message (its pointer handed over, the
 * receiver's stream waiting for the sender's last use). */
typedef struct ponger {
    zb_backend *be; /* the backend */
    zb_chan *ch;    /* shared channel */
    int rounds;     /* messages to bounce */
    int rc;         /* 0, or -1 after a failed fence */
    zb_err err;     /* its message */
} ponger;

static void *pong_main(void *arg)
{
    ponger *p = arg;
    zb_backend *be = p->be;
    if (be->ops->bind && be->ops->bind(be, 1, &p->err) != 0) {
        p->rc = -1;
        chan_abort(p->ch);
        return NULL;
    }
    for (int k = 0; k < p->rounds; k++) {
        void *msg;
        if (chan_recv(p->ch, CHAN_ACT, 1, k, &msg, NULL) != 0)
            return NULL;
        if ((be->ops->act_wait && be->ops->act_wait(be, 1, msg, &p->err) != 0)
            || (be->ops->act_issued && be->ops->act_issued(be, 1, msg, &p->err) != 0)) {
            p->rc = -1;
            chan_abort(p->ch);
            return NULL;
        }
        chan_send(p->ch, CHAN_GRAD, 0, k, msg, 0);
    }
    return NULL;
}

/* Half the round trip of an activation of `elems` elements between
 * devices 0 and 1 of be, into *t_comm.  0 or -1 with err. */
static int measure_comm(zb_backend *be, size_t elems, double *t_comm, zb_err *err)
{
    enum { ROUNDS = 64 };
    zb_chan ch;
    void *msg = bench_act(be, 0, elems, NULL, err);
    if (!msg)
        return -1;
    if (chan_init(&ch, 2, ROUNDS) != 0) {
        be->ops->act_free(be, msg);
        return zb_fail(err, "out of memory while profiling");
    }
    ponger p = { .be = be, .ch = &ch, .rounds = ROUNDS };
    pthread_t tid;
    if (pthread_create(&tid, NULL, pong_main, &p) != 0) {
        chan_destroy(&ch);
        be->ops->act_free(be, msg);
        return zb_fail(err, "cannot start the profiling thread");
    }
    double t0 = now_s();
    int rc = 0;
    for (int k = 0; k < ROUNDS && rc == 0; k++) {
        if (be->ops->act_issued && be->ops->act_issued(be, 0, msg, err) != 0) {
            chan_abort(&ch);
            rc = -1;
            break;
        }
        chan_send(&ch, CHAN_ACT, 1, k, msg, 0);
        if (chan_recv(&ch, CHAN_GRAD, 0, k, &msg, NULL) != 0)
            rc = p.rc != 0 ? -1 : zb_fail(err, "channel aborted while profiling");
        else if (be->ops->act_wait && be->ops->act_wait(be, 0, msg, err) != 0)
            rc = -1;
    }
    double dt = now_s() - t0;
    pthread_join(tid, NULL);
    chan_destroy(&ch);
    be->ops->act_free(be, msg);
    if (rc != 0 && p.rc != 0)
        *err = p.err;
    *t_comm = dt / (2.0 * ROUNDS);
    return rc;
}

/* The bytes the runtime keeps per layer for a stage's state: a one-layer
 * stage's buffers, as the backend counts them (backend.h's memory op).
 * Post-validation's copy is not a per-layer cost: only stage 0 keeps one
 * (trainer_ops.c; docs/cost-model.md, "Buffer classes").  0 or -1 with
 * err. */
static int measure_static(zb_backend *be, const zb_model *m, double *per_layer, zb_err *err)
{
    llama_stage one;
    if (llama_stage_init(&one, m, 0, 1, 0, 0, err) != 0)
        return -1;
    size_t before = 0, after = 0, peak = 0;
    zb_bstage *bs = NULL;
    int rc = be->ops->memory(be, &before, &peak, err);
    if (rc == 0 && (rc = be->ops->stage_new(be, &one, NULL, 0, &bs, err)) != 0)
        bs = NULL;
    if (rc == 0)
        rc = be->ops->memory(be, &after, &peak, err);
    if (bs)
        be->ops->stage_free(be, bs);
    llama_stage_free(&one);
    if (rc == 0)
        *per_layer = (double)(after - before);
    return rc;
}

int profiler_measure_on(zb_backend_make make, void *make_ctx, int devices, const zb_model *m,
                        int batch, int reps, zb_profile *p, zb_err *err)
{
    if (batch <= 0)
        batch = m->micro_batch;
    if (batch <= 0 || reps < 1 || devices < 1)
        return zb_fail(err, "profiling needs a positive batch size, repetition count and "
                       "device count");
    zb_backend *be = NULL;
    /* two devices at least: the transfer goes from one to another */
    if (make(make_ctx, devices > 2 ? devices : 2, &be, err) != 0)
        return -1;
    profile_init(p);
    snprintf(p->model, sizeof p->model, "%s", m->name);
    snprintf(p->hardware, sizeof p->hardware, "%s", be->ops->name);
    p->micro_batch = batch;
    p->seq_len = m->seq_len;
    p->recompute = 0;
    int rc = 0;
    if (measure_concurrent(be, m, batch, reps, stack_layers(m), 0, 0, devices, &p->layer, err) != 0)
        rc = zb_wrap(err, "profiling a layer: ");
    else if (measure_concurrent(be, m, batch, reps, 0, 1, 0, devices, &p->embedding, err) != 0)
        rc = zb_wrap(err, "profiling the embedding: ");
    else if (measure_concurrent(be, m, batch, reps, 0, 0, 1, devices, &p->head, err) != 0)
        rc = zb_wrap(err, "profiling the head: ");
    else if (measure_comm(be, (size_t)batch * (size_t)m->seq_len * (size_t)m->d_model, &p->t_comm,
                          err) != 0)
        rc = -1;
    else
        rc = measure_static(be, m, &p->static_bytes_per_layer, err);
    backend_free(be);
    return rc;
}

/* zb_backend_make of the CPU backend. */
static int make_cpu(void *ctx, int n_devices, zb_backend **out, zb_err *err)
{
    (void)ctx;
    return backend_cpu_create(n_devices, out, err);
}

int profiler_measure(const zb_model *m, int batch, int reps, zb_profile *p, zb_err *err)
{
    kernels_init_threads(1);
    return profiler_measure_on(make_cpu, NULL, profiler_cpu_threads(), m, batch, reps, p, err);
}

int profiler_footprint(const zb_model *m, int batch, int devices, double *stage_bytes,
                       double *activation_bytes, zb_err *err)
{
    if (batch <= 0)
        batch = m->micro_batch;
    /* the three parts, one after another, each on `devices` threads: a
     * stage's four buffers, PROFILE_IN_FLIGHT saved states (one inside B
     * at worst, the others after F) and four activations per thread */
    struct { int n, emb, head; } part[3] = { { stack_layers(m), 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } };
    double worst_stage = 0, worst_act = 0, worst = -1;
    for (int k = 0; k < 3; k++) {
        llama_stage st;
        llama_saved_sizes z;
        if (llama_stage_init(&st, m, 0, part[k].n, part[k].emb, part[k].head, err) != 0)
            return -1;
        double stage = 4.0 * sizeof(float) * (double)llama_stage_num_params(&st);
        int rc = llama_saved_plan(&st, batch, LLAMA_RC_NONE, &z);
        llama_stage_free(&st);
        if (rc != 0)
            return zb_fail(err, "out of memory");
        double act = (double)z.in_b + (PROFILE_IN_FLIGHT - 1) * (double)z.after_f
                     + 4.0 * sizeof(float) * batch * (double)m->seq_len * m->d_model;
        if (devices * (stage + act) > worst) {
            worst = devices * (stage + act);
            worst_stage = devices * stage;
            worst_act = devices * act;
        }
    }
    *stage_bytes = worst_stage;
    *activation_bytes = worst_act;
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
