/*
 * trainer.c: the pipeline executor (see trainer.h for the design).  It
 * does no arithmetic itself: every stage op goes through the trainer's
 * backend (backend.h), whose host mirrors it keeps in step with the device
 * (mirror_get / mirrors_push) and whose activation fences it records at
 * each hand-over of a buffer (act_get / act_put / tr_send / tr_recv).
 *
 * Life of one step:
 *
 *   main thread   draw m micro-batches, zero every stage's grads, start one
 *                 worker per device, join them, average the losses
 *   worker d      run lane d's ops in order; F/B receive their input from
 *                 the channel and send their output on; W adds the weight
 *                 gradient in micro-batch order (out-of-order W results wait
 *                 in a per-micro-batch scratch); then the optimizer step of
 *                 each of its stages with post-validation
 *
 * trainer_backward runs the workers with only their ops (PHASE_OPS) and
 * trainer_apply runs a second set with only the optimizer step
 * (PHASE_STEP); trainer_step runs both phases in one set of workers.  The
 * post-validation reads the gradient buffers when it runs, so after a
 * caller averaged them between the halves, the norm, clip and rollback
 * decisions are those of the averaged gradient.
 *
 * trainer_steps runs PHASE_BATCH: each worker loops over the batch's
 * steps (run_batch), with no barrier between them; the only shared state a
 * step changes (the learning rate) is written by stage 0's device after
 * stage 0's validation, which every stage update of the step precedes and
 * every one of the next step follows.  Speculation (the next step's
 * leading stage-0 forwards, between stage 0's optimistic step and its
 * validation) is in post_validated_step, see trainer.h.
 *
 * Post-validation in detail (per stage s, devices handle their stages in
 * increasing order on the way up and decreasing order on the way down, which
 * cannot deadlock because the chain follows the total stage order):
 *
 *   up     partial = partial(s-1) + Σ per-tensor squared norms of s, added
 *          one tensor at a time (the same additions the single-device run
 *          makes, so the full sum is bit-identical for every split);
 *          if partial is finite and does not yet require clipping, snapshot
 *          (params, m, v, t) and step unclipped; otherwise skip.
 *   down   the full sum arrives from s+1 (stage S-1 has it already).  The
 *          right action is: skip (not finite), clipped step (the clip scale
 *          is below 1) or unclipped step.  If the optimistic action differs,
 *          restore the snapshot when one was taken and do the right one.
 *
 * Rollback restores a copy instead of inverting AdamW arithmetically as the
 * paper's Algorithm 1 does: p - lr*u followed by + lr*u is not exact in
 * floating point, and the executor promises bit-identical results with the
 * synchronous clip.  The copy costs 3 buffers per stage and one memcpy per
 * step, small next to a step's compute.
 */
#include "runtime/trainer.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/team.h"
#include "runtime/backend.h"
#include "runtime/transport.h"
#include "runtime/checkpoint.h"
#include "runtime/rng.h"
#include "runtime/split.h"
#include "runtime/vocab_exec.h"
#include "src/validate.h"

/* Everything one virtual stage owns. */
typedef struct stage_rt {
    llama_stage layout;    /* layers, tensors and their offsets */
    llama_stage norm_layout; /* vocabulary parallelism, last stage: layout
                            * without the LM head (LLAMA_HEAD_NORM_ONLY), whose
                            * tensors are layout's minus the head at the end */
    const llama_stage *kern; /* what F, B, W run: &layout, or &norm_layout */
    int device;            /* device (worker thread) that runs it */
    size_t n_params;       /* floats per buffer of the stage */
    zb_bstage *bs;         /* params, grads, AdamW m and v on the backend (backend.h) */
    unsigned dev_newer;    /* bits 1 << zb_bbuf: the device holds writes its host mirror lacks */
    unsigned host_newer;   /* bits: the host mirror may hold writes the device lacks */
    int64_t adam_t;        /* AdamW steps taken by this stage (1-based in the update) */
    int64_t snap_t;        /* post-validation snapshot of adam_t (the backend keeps
                            * the snapshot of params, m and v) */
    double *tensor_sq;     /* [layout.n_tensors] squared norm of each grad tensor */
    zb_bsaved **saved;     /* [m] per micro-batch saved state (F -> B -> W) */
    zb_bgrads **w_scratch; /* [m] weight gradients of W ops run ahead of order */
    zb_bgrads **w_free;    /* [m] spare scratch buffers for w_scratch (reused) */
    int n_w_free;          /* buffers in w_free */
    int next_w;            /* next micro-batch whose W is added into grads */
    int stepped;           /* post-validation: 1 when the optimistic step ran */
    int recompute;         /* LLAMA_RC_* level of this stage's saved states (opts.recompute_stages) */
    const int32_t *x;      /* [m][B*T] input tokens of the step this stage runs (stage 0) */
    const int32_t *y;      /* [m][B*T] its target tokens (stage S-1) */
} stage_rt;

/* What a worker thread runs: the lane's ops, the post-validated optimizer
 * step, or both back to back (trainer_step, so that a device starts its
 * step as soon as its own ops are done, without a barrier). */
enum {
    PHASE_OPS = 1,  /* the lane's F, B, W ops (trainer_backward) */
    PHASE_STEP = 2, /* the post-validated optimizer step (trainer_apply) */
    PHASE_BATCH = 4, /* trainer_steps: b_n steps back to back, no barrier */
};

/* One worker's identity and outcome.  Workers live as long as the
 * trainer (started by the first step) and wait between jobs. */
typedef struct worker {
    struct trainer *t; /* the trainer */
    int dev;           /* device index = lane */
    int failed;        /* 1 when this worker stopped on an error (last job) */
    zb_err err;        /* its message */
} worker;

struct trainer {
    sched_t *sched;        /* owned copy of the schedule */
    zb_model model;        /* effective model (data vocab, batch size) */
    const zb_data *data;   /* borrowed loader */
    trainer_opts opts;     /* options as given */
    int n_stages;          /* S */
    int n_micro;           /* m */
    int n_devices;         /* p */
    int batch;             /* B, sequences per micro-batch */
    int seq;               /* T */
    size_t act_floats;     /* B*T*d: one activation or gradient message */
    stage_rt *st;          /* [S] */
    zb_backend *be;        /* the device's arithmetic and memory (backend.h), owned */
    int mirrored;          /* 1 when the backend's host mirrors are copies (a GPU) */
    int be_failed;         /* 1 after a backend failure outside a worker (sticky) */
    zb_err be_err;         /* its message */
    zb_transport *tr;      /* transport between workers (transport.h) */
    zb_rng rng;            /* data window generator (checkpointed) */
    int32_t *x;            /* [m][B*T] input tokens of the step */
    int32_t *y;            /* [m][B*T] target tokens of the step */
    float *mb_loss;        /* [m] loss of each micro-batch */
    double step_lr;        /* learning rate of the running step */
    struct timespec t0;    /* start of the running step */
    double **op_start;     /* [p][n_ops] ms since t0, last step (record_times) */
    double **op_end;       /* [p][n_ops] */
    double **op_mid;       /* [p][n_ops] end of the B half of BW ops */
    int have_times;        /* 1 once a step recorded its times */
    double *act_peak;      /* [p] most saved-activation bytes held at once, last step (record_times) */
    double full_sq;        /* full squared gradient norm of the last step */
    int pending;           /* 1 between trainer_backward and trainer_apply */
    double pending_loss;   /* mean loss of the pending step's backward */
    long rollbacks_step;   /* rollbacks in the running step (workers add under lock) */
    pthread_mutex_t mu;    /* guards rollbacks_step and the activation pool */
    float **act_pool;      /* [act_pool_cap] spare activation/gradient buffers */
    int act_pool_n;        /* buffers in act_pool */
    int act_pool_cap;      /* its capacity */
    int threads;           /* kernel threads per device (team size) */
    kern_team **team;      /* [p] each device's team, NULL until the first step */
    worker *w;             /* [p] the persistent workers */
    pthread_t *tid;        /* [p] their threads */
    int n_started;         /* workers running (0 until the first step) */
    pthread_mutex_t wmu;   /* guards the job fields below */
    pthread_cond_t wgo;    /* broadcast when a job is posted or on stop */
    pthread_cond_t wdone;  /* signalled when the last worker finishes a job */
    unsigned long wgen;    /* job generation */
    int wphases;           /* PHASE_* bits of the current job */
    int wpending;          /* workers still running the current job */
    int wstop;             /* 1: workers exit */
    trainer_stats stats;   /* progress */
    vocab_exec *ve;        /* S/T passes and barriers (vocab_exec.h), or NULL
                            * when the schedule has no vocabulary parallelism */
    /* trainer_steps (a batch of steps without a barrier between them): */
    int32_t *bx, *by;      /* [b_cap][m][B*T] tokens of every step of the batch */
    int b_cap;             /* steps bx and by have room for */
    int b_n;               /* steps in the running batch */
    long b_step0;          /* stats.step when the batch began */
    int spec_len;          /* leading F ops of stage 0 in its device's lane: the
                            * ops that need no message, run speculatively */
    double *b_loss;        /* [b_cap] mean loss of each step (stage S-1's worker) */
    double *b_full_sq;     /* [b_cap] full squared norm of each step (stage S-1's worker) */
    double *b_end;         /* [b_cap][p] ms since t0 when each device finished each step */
};

void trainer_opts_default(trainer_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->data_stream = 0;
    o->batch_size = 0;
    adamw_config_default(&o->adamw);
    o->sync_optimizer = 0;
    o->eval_windows = 16;
    o->record_times = 0;
    o->layers_per_stage = NULL;
    o->recompute_stages = NULL;
    o->threads = 0;
    o->transport = 0; /* ZB_TRANSPORT_SLOTS */
}

int trainer_default_threads(int n_devices)
{
    int cores = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cores = CPU_COUNT(&set);
#endif
    if (cores <= 0)
        cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int n = n_devices > 0 ? cores / n_devices : cores;
    return n < 1 ? 1 : n;
}

static double ms_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) * 1e3 + (double)(now.tv_nsec - t0->tv_nsec) * 1e-6;
}

/* ---- creation ---------------------------------------------------------- */

static void stage_free(zb_backend *be, stage_rt *r, int n_micro)
{
    if (be) {
        if (r->saved)
            for (int j = 0; j < n_micro; j++)
                be->ops->saved_free(be, r->saved[j]);
        if (r->w_scratch)
            for (int j = 0; j < n_micro; j++)
                be->ops->grads_free(be, r->w_scratch[j]);
        if (r->w_free)
            for (int j = 0; j < r->n_w_free; j++)
                be->ops->grads_free(be, r->w_free[j]);
        be->ops->stage_free(be, r->bs);
    }
    free(r->w_free);
    free(r->saved);
    free(r->w_scratch);
    free(r->tensor_sq);
    llama_stage_free(&r->layout);
    llama_stage_free(&r->norm_layout);
}

static void workers_stop(trainer *t);
static void *pool_get(void *ctx);
static void pool_put(void *ctx, void *buf);

void trainer_free(trainer *t)
{
    if (!t)
        return;
    workers_stop(t);
    if (t->team)
        for (int d = 0; d < t->n_devices; d++)
            kern_team_free(t->team[d]);
    free(t->team);
    free(t->w);
    free(t->tid);
    /* the transport first: its reset hands undelivered buffers back */
    transport_free(t->tr);
    for (int i = 0; i < t->act_pool_n && t->be; i++)
        t->be->ops->act_free(t->be, t->act_pool[i]);
    free(t->act_pool);
    if (t->st)
        for (int s = 0; s < t->n_stages; s++)
            stage_free(t->be, &t->st[s], t->n_micro);
    free(t->st);
    vocab_exec_free(t->ve);
    backend_free(t->be);
    if (t->op_start)
        for (int d = 0; d < t->n_devices; d++) {
            free(t->op_start[d]);
            free(t->op_end[d]);
            free(t->op_mid[d]);
        }
    free(t->op_start);
    free(t->op_end);
    free(t->op_mid);
    free(t->act_peak);
    free(t->x);
    free(t->y);
    free(t->bx);
    free(t->by);
    free(t->b_loss);
    free(t->b_full_sq);
    free(t->b_end);
    free(t->mb_loss);
    sched_free(t->sched);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->wmu);
    pthread_cond_destroy(&t->wgo);
    pthread_cond_destroy(&t->wdone);
    free(t);
}

/* A plan's split (layers per stage) as first[0..S]; -1 unless it covers
 * the model exactly and every middle stage holds a layer. */
static int plan_split(const int *per_stage, int n_layers, int n_stages, int *first, zb_err *err)
{
    first[0] = 0;
    for (int i = 0; i < n_stages; i++) {
        if (per_stage[i] < 0 || per_stage[i] > n_layers)
            return zb_fail(err, "the plan's split gives stage %d %d layers", i, per_stage[i]);
        if (per_stage[i] == 0 && i > 0 && i < n_stages - 1)
            return zb_fail(err, "the plan's split leaves middle stage %d without layers", i);
        first[i + 1] = first[i] + per_stage[i];
    }
    if (first[n_stages] != n_layers)
        return zb_fail(err, "the plan's split covers %d layers but the model has %d",
                       first[n_stages], n_layers);
    return 0;
}

int trainer_create(const sched_t *s, const zb_model *m, const zb_data *d,
                   const trainer_opts *opts, trainer **out, zb_err *err)
{
    /* A schedule that is incomplete or deadlocks would hang the workers:
     * refuse it here, whoever the caller is. */
    if (sched_validate(s, err) != 0)
        return zb_wrap(err, "schedule: ");
    if (sched_has_vocab(s) && opts->one_device)
        return zb_fail(err, "schedule: vocabulary-parallel passes (S, T) run in one process only, "
                       "not as pipeline ranks; generate the schedule with --vocab plain");
    if (d->ctx != m->seq_len)
        return zb_fail(err, "the data windows have context %d but the model's is %d", d->ctx, m->seq_len);
    if (opts->eval_windows <= 0)
        return zb_fail(err, "eval windows must be positive, got %d", opts->eval_windows);
    int *first = malloc(sizeof *first * (size_t)(s->n_stages + 1));
    if (!first)
        return zb_fail(err, "out of memory");
    if (opts->layers_per_stage ? plan_split(opts->layers_per_stage, m->n_layers, s->n_stages, first, err) != 0
                               : split_layers(m->n_layers, s->n_stages, first, err) != 0) {
        free(first);
        return -1;
    }
    trainer *t = calloc(1, sizeof *t);
    if (!t) {
        free(first);
        return zb_fail(err, "out of memory");
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->wmu, NULL);
    pthread_cond_init(&t->wgo, NULL);
    pthread_cond_init(&t->wdone, NULL);
    t->model = *m;
    t->model.vocab = d->vocab;
    if (opts->batch_size > 0)
        t->model.micro_batch = opts->batch_size;
    t->data = d;
    t->opts = *opts;
    t->opts.layers_per_stage = NULL; /* borrowed for the split only */
    t->opts.recompute_stages = NULL; /* copied into each stage_rt below */
    t->n_stages = s->n_stages;
    t->n_micro = s->n_micro;
    t->n_devices = s->n_devices;
    t->batch = t->model.micro_batch;
    t->seq = t->model.seq_len;
    if (t->batch <= 0) {
        free(first);
        trainer_free(t);
        return zb_fail(err, "the batch size must be positive, got %d", t->batch);
    }
    t->act_floats = (size_t)t->batch * (size_t)t->seq * (size_t)t->model.d_model;
    t->sched = sched_clone(s);
    t->st = calloc((size_t)t->n_stages, sizeof *t->st);
    size_t tok = (size_t)t->batch * (size_t)t->seq;
    t->x = malloc(sizeof *t->x * tok * (size_t)t->n_micro);
    t->y = malloc(sizeof *t->y * tok * (size_t)t->n_micro);
    t->mb_loss = calloc((size_t)t->n_micro, sizeof *t->mb_loss);
    t->op_start = calloc((size_t)t->n_devices, sizeof *t->op_start);
    t->op_end = calloc((size_t)t->n_devices, sizeof *t->op_end);
    t->op_mid = calloc((size_t)t->n_devices, sizeof *t->op_mid);
    t->act_peak = calloc((size_t)t->n_devices, sizeof *t->act_peak);
    t->threads = opts->threads > 0 ? opts->threads : trainer_default_threads(t->n_devices);
    t->team = calloc((size_t)t->n_devices, sizeof *t->team);
    t->w = calloc((size_t)t->n_devices, sizeof *t->w);
    t->tid = calloc((size_t)t->n_devices, sizeof *t->tid);
    t->act_pool_cap = 2 * t->n_stages * t->n_micro + 4;
    t->act_pool = calloc((size_t)t->act_pool_cap, sizeof *t->act_pool);
    int oom = !t->act_peak || !t->team || !t->w || !t->tid || !t->act_pool;
    oom = oom || !t->sched || !t->st || !t->x || !t->y || !t->mb_loss || !t->op_start || !t->op_end
              || !t->op_mid;
    for (int dv = 0; dv < t->n_devices && !oom; dv++) {
        size_t n = (size_t)(s->dev[dv].n_ops ? s->dev[dv].n_ops : 1);
        t->op_start[dv] = calloc(n, sizeof(double));
        t->op_end[dv] = calloc(n, sizeof(double));
        t->op_mid[dv] = calloc(n, sizeof(double));
        oom = !t->op_start[dv] || !t->op_end[dv] || !t->op_mid[dv];
    }
    if (oom) {
        free(first);
        trainer_free(t);
        return zb_fail(err, "out of memory");
    }
    if ((opts->make_backend ? opts->make_backend(opts->make_backend_ctx, s->n_devices, &t->be, err)
                            : backend_cpu_create(s->n_devices, &t->be, err))
        != 0) {
        t->be = NULL;
        free(first);
        trainer_free(t);
        return -1;
    }
    t->mirrored = t->be->ops->download != NULL;
    if (sched_has_vocab(s) && t->mirrored) {
        /* the passes read and write the last stage's host buffers */
        zb_fail(err, "schedule: vocabulary-parallel passes run on the CPU backend only (the %s "
                "backend keeps its buffers apart from the host); generate the schedule with "
                "--vocab plain", t->be->ops->name);
        free(first);
        trainer_free(t);
        return -1;
    }
    zb_transport_pool pool = { pool_get, pool_put, t };
    if (opts->one_device && (opts->device < 0 || opts->device >= s->n_devices)) {
        free(first);
        trainer_free(t);
        return zb_fail(err, "device %d is not one of the schedule's %d", opts->device,
                       s->n_devices);
    }
    if ((opts->make_transport
             ? opts->make_transport(opts->make_transport_ctx, s, !opts->sync_optimizer, &pool,
                                    &t->tr, err)
             : transport_create(opts->transport, s, !opts->sync_optimizer, &pool, &t->tr, err))
        != 0) {
        free(first);
        trainer_free(t);
        return -1;
    }
    kernels_init_threads(1);
    for (int i = 0; i < t->n_stages; i++) {
        stage_rt *r = &t->st[i];
        if (llama_stage_init(&r->layout, &t->model, first[i], first[i + 1], i == 0,
                             i == t->n_stages - 1, err) != 0) {
            free(first);
            trainer_free(t);
            return zb_wrap(err, "stage %d: ", i);
        }
        r->kern = &r->layout;
        if (sched_has_vocab(s) && i == t->n_stages - 1) {
            if (llama_stage_init(&r->norm_layout, &t->model, first[i], first[i + 1], i == 0,
                                 LLAMA_HEAD_NORM_ONLY, err) != 0) {
                free(first);
                trainer_free(t);
                return zb_wrap(err, "stage %d: ", i);
            }
            r->kern = &r->norm_layout;
        }
        r->device = s->stage_device[i];
        r->recompute = opts->recompute_stages ? opts->recompute_stages[i] : LLAMA_RC_NONE;
        if (r->recompute < LLAMA_RC_NONE || r->recompute > LLAMA_RC_MLP) {
            free(first);
            trainer_free(t);
            return zb_fail(err, "stage %d: recompute level %d is not 0 (none), 1 (full) or 2 (mlp)",
                           i, opts->recompute_stages[i]);
        }
        r->n_params = llama_stage_num_params(&r->layout);
        r->tensor_sq = calloc((size_t)r->layout.n_tensors + 1, sizeof(double));
        r->saved = calloc((size_t)t->n_micro, sizeof *r->saved);
        r->w_scratch = calloc((size_t)t->n_micro, sizeof *r->w_scratch);
        r->w_free = calloc((size_t)t->n_micro, sizeof *r->w_free);
        oom = !r->w_free || !r->tensor_sq || !r->saved || !r->w_scratch;
        if (oom) {
            free(first);
            trainer_free(t);
            return zb_fail(err, "out of memory for stage %d", i);
        }
        zb_backend *be = t->be;
        int brc = be->ops->stage_new(be, &r->layout, r->kern != &r->layout ? r->kern : NULL,
                                     r->device, &r->bs, err);
        for (int j = 0; j < t->n_micro && brc == 0; j++)
            brc = be->ops->saved_new(be, r->bs, t->batch, r->recompute, &r->saved[j], err);
        if (brc == 0) {
            /* the same initial weights on every backend: drawn on the host */
            llama_stage_init_params(&r->layout, be->ops->host(be, r->bs, ZB_BUF_PARAMS),
                                    opts->seed);
            if (be->ops->upload)
                brc = be->ops->upload(be, r->bs, ZB_BUF_PARAMS, err);
        }
        if (brc != 0) {
            free(first);
            trainer_free(t);
            return zb_wrap(err, "stage %d on %s: ", i, be->ops->name);
        }
    }
    free(first);
    if (sched_has_vocab(s) && vocab_exec_create(s, &t->model, t->batch, &t->ve, err) != 0) {
        trainer_free(t);
        return -1;
    }
    const sched_lane *lane0 = &t->sched->dev[t->st[0].device];
    while (t->spec_len < lane0->n_ops && lane0->ops[t->spec_len].kind == OP_F
           && lane0->ops[t->spec_len].stage == 0)
        t->spec_len++;
    rng_seed(&t->rng, opts->seed, 0x5eed0000ULL + opts->data_stream);
    t->stats.tokens_per_step = (long)t->n_micro * (long)tok;
    *out = t;
    return 0;
}

/* ---- the worker: one device's ops ------------------------------------- */

/* An activation- or gradient-sized buffer (act_floats elements of the
 * backend's type) from the trainer's pool, made by the backend only while
 * the pool has not yet reached the step's high-water mark; NULL when
 * memory runs out.  dev >= 0: the device that will write it, whose stream
 * then waits for the buffer's last use (backend.h's fences); -1 for the
 * transport, which only passes buffers on. */
static void *act_get(trainer *t, int dev)
{
    void *p = NULL;
    pthread_mutex_lock(&t->mu);
    if (t->act_pool_n > 0)
        p = t->act_pool[--t->act_pool_n];
    pthread_mutex_unlock(&t->mu);
    if (!p)
        return t->be->ops->act_new(t->be, t->act_floats);
    if (dev >= 0 && t->be->ops->act_wait) {
        zb_err ignored;
        if (t->be->ops->act_wait(t->be, dev, p, &ignored) != 0) {
            t->be->ops->act_free(t->be, p);
            return NULL;
        }
    }
    return p;
}

/* Returns a buffer of act_get to the pool (NULL is fine) after device dev
 * (-1: none) issued its last use; frees it when the pool is full. */
static void act_put(trainer *t, int dev, void *p)
{
    if (!p)
        return;
    if (dev >= 0 && t->be->ops->act_issued) {
        zb_err ignored; /* a failed record leaves an older fence: the next
                         * user waits on that one, and the step fails anyway */
        t->be->ops->act_issued(t->be, dev, p, &ignored);
    }
    pthread_mutex_lock(&t->mu);
    if (t->act_pool_n < t->act_pool_cap) {
        t->act_pool[t->act_pool_n++] = p;
        p = NULL;
    }
    pthread_mutex_unlock(&t->mu);
    if (p)
        t->be->ops->act_free(t->be, p);
}

/* The pool as the transport sees it (transport.h). */
static void *pool_get(void *ctx)
{
    return act_get(ctx, -1);
}

static void pool_put(void *ctx, void *buf)
{
    act_put(ctx, -1, buf);
}

/* Sends key (kind, stage, mb) through the trainer's transport; dev >= 0
 * with a buffer: the sending device, whose use of buf is marked issued. */
static int tr_send(trainer *t, int dev, int kind, int stage, int mb, void *buf, double val,
                   zb_err *err)
{
    if (buf && dev >= 0 && t->be->ops->act_issued
        && t->be->ops->act_issued(t->be, dev, buf, err) != 0) {
        act_put(t, -1, buf);
        return -1;
    }
    return t->tr->ops->send(t->tr, (zb_msg_key){ kind, stage, mb }, buf, val, err);
}

/* Receives key (kind, stage, mb); buf may be NULL for the norms.  dev >= 0
 * with a buffer: the receiving device, which waits for the sender's use. */
static int tr_recv(trainer *t, int dev, int kind, int stage, int mb, void **buf, double *val,
                   zb_err *err)
{
    if (t->tr->ops->recv(t->tr, (zb_msg_key){ kind, stage, mb }, buf, val, err) != 0)
        return -1;
    if (buf && *buf && dev >= 0 && t->be->ops->act_wait
        && t->be->ops->act_wait(t->be, dev, *buf, err) != 0) {
        act_put(t, -1, *buf);
        *buf = NULL;
        return -1;
    }
    return 0;
}

/* A zeroed weight-gradient scratch of stage r (only its device's worker,
 * or the main thread between steps, touches r's spares); NULL on failure. */
static zb_bgrads *w_scratch_get(trainer *t, stage_rt *r)
{
    if (r->n_w_free == 0)
        return t->be->ops->grads_new(t->be, r->bs);
    zb_bgrads *p = r->w_free[--r->n_w_free];
    zb_err ignored;
    if (t->be->ops->grads_zero(t->be, r->bs, p, &ignored) != 0) {
        t->be->ops->grads_free(t->be, p);
        return NULL;
    }
    return p;
}

/* Keeps a scratch of w_scratch_get for the next W that runs ahead. */
static void w_scratch_put(trainer *t, stage_rt *r, zb_bgrads *p)
{
    if (!p)
        return;
    if (r->n_w_free < t->n_micro)
        r->w_free[r->n_w_free++] = p;
    else
        t->be->ops->grads_free(t->be, p);
}

/* Each op function receives its input first and then stamps *start (when
 * not NULL), so that a measured op starts when its compute starts, as in
 * the simulator, and time blocked in a receive shows up as a bubble; it
 * stamps *end before it sends its output, so that a consumer never appears
 * to start before its producer ended.  On a GPU backend the stamps are
 * when the op was issued, not when it ran. */
static void stamp(const trainer *t, double *start)
{
    if (start)
        *start = ms_since(&t->t0);
}

static int op_forward(trainer *t, int s, int j, double *start, double *end, zb_err *err)
{
    stage_rt *r = &t->st[s];
    zb_backend *be = t->be;
    size_t tok = (size_t)t->batch * (size_t)t->seq;
    int last = s == t->n_stages - 1 && !t->ve; /* with vocab_exec the head runs in S/T */
    void *in = NULL; /* the forward copies its input into the saved state */
    if (s > 0 && tr_recv(t, r->device, CHAN_ACT, s, j, &in, NULL, err) != 0)
        return -1;
    stamp(t, start);
    void *out = NULL;
    if (!last && !(out = act_get(t, r->device))) {
        act_put(t, r->device, in);
        return zb_fail(err, "out of memory for an activation");
    }
    /* the loss lands in mb_loss[j] by the time the lane syncs its stages */
    int rc = be->ops->forward(be, r->bs, r->saved[j], s == 0 ? r->x + tok * (size_t)j : NULL, in,
                              last ? r->y + tok * (size_t)j : NULL, out,
                              last ? &t->mb_loss[j] : NULL, err);
    act_put(t, r->device, in);
    if (rc != 0) {
        act_put(t, r->device, out);
        return zb_wrap(err, "F of stage %d, micro-batch %d: ", s, j);
    }
    stamp(t, end);
    if (t->ve && s == t->n_stages - 1) {
        vocab_exec_put_x(t->ve, j, out); /* the head input's broadcast */
        act_put(t, r->device, out);
    } else if (!last && tr_send(t, r->device, CHAN_ACT, s + 1, j, out, 0, err) != 0)
        return -1;
    return 0;
}

/* B of (s, j).  With held != NULL (the B half of a fused BW) the input
 * gradient is handed back in *held instead of sent, so that the caller
 * sends it after W: a fused op's outputs exist only when it ends. */
static int op_backward_b(trainer *t, int s, int j, double *start, double *end, void **held,
                         zb_err *err)
{
    stage_rt *r = &t->st[s];
    zb_backend *be = t->be;
    void *dy = NULL;
    if (s < t->n_stages - 1) {
        if (tr_recv(t, r->device, CHAN_GRAD, s, j, &dy, NULL, err) != 0)
            return -1;
    } else if (t->ve) { /* the head input's gradient, after barrier C0 or C1 */
        if (!(dy = act_get(t, r->device)))
            return zb_fail(err, "out of memory for a gradient");
        if (vocab_exec_take_dx(t->ve, j, 1.0f / (float)t->n_micro, dy, &t->mb_loss[j], err) != 0) {
            act_put(t, r->device, dy);
            return -1;
        }
    }
    stamp(t, start);
    void *dx = NULL;
    if (s > 0 && !(dx = act_get(t, r->device))) {
        act_put(t, r->device, dy);
        return zb_fail(err, "out of memory for a gradient");
    }
    int rc = be->ops->backward_b(be, r->bs, r->saved[j], 1.0f / (float)t->n_micro, dy, dx, err);
    act_put(t, r->device, dy);
    if (rc != 0) {
        act_put(t, r->device, dx);
        return zb_wrap(err, "B of stage %d, micro-batch %d: ", s, j);
    }
    stamp(t, end);
    if (held)
        *held = dx;
    else if (s > 0 && tr_send(t, r->device, CHAN_GRAD, s - 1, j, dx, 0, err) != 0)
        return -1;
    return 0;
}

/* W adds into grads only in micro-batch order (kernels/cpu/llama.h's
 * determinism contract); a W that runs ahead writes into a zeroed scratch
 * that is added when its turn comes. */
static int op_backward_w(trainer *t, int s, int j, zb_err *err)
{
    stage_rt *r = &t->st[s];
    zb_backend *be = t->be;
    if (j == r->next_w) {
        if (be->ops->backward_w(be, r->bs, r->saved[j], NULL, err) != 0)
            return zb_wrap(err, "W of stage %d, micro-batch %d: ", s, j);
        r->next_w++;
        while (r->next_w < t->n_micro && r->w_scratch[r->next_w]) {
            if (be->ops->grads_add(be, r->bs, r->w_scratch[r->next_w], err) != 0)
                return zb_wrap(err, "W of stage %d, micro-batch %d: ", s, r->next_w);
            w_scratch_put(t, r, r->w_scratch[r->next_w]);
            r->w_scratch[r->next_w] = NULL;
            r->next_w++;
        }
    } else {
        assert(j > r->next_w);
        zb_bgrads *scratch = w_scratch_get(t, r);
        if (!scratch)
            return zb_fail(err, "out of memory for a weight-gradient scratch");
        if (be->ops->backward_w(be, r->bs, r->saved[j], scratch, err) != 0) {
            w_scratch_put(t, r, scratch);
            return zb_wrap(err, "W of stage %d, micro-batch %d: ", s, j);
        }
        r->w_scratch[j] = scratch;
    }
    return 0;
}

/* Sum of squares of the stage's gradient added tensor by tensor onto
 * *partial, so that the running total is the same sequence of additions
 * however the model is split.  0 or -1 (backend failure). */
static int add_stage_norm(trainer *t, stage_rt *r, double *partial, zb_err *err)
{
    if (t->be->ops->grad_sumsq(t->be, r->bs, r->tensor_sq, err) != 0)
        return -1;
    for (int i = 0; i < r->layout.n_tensors; i++)
        *partial += r->tensor_sq[i];
    return 0;
}

/* 1 when a squared norm calls for clipping (the same test the synchronous
 * path applies through adamw_clip_scale). */
static int needs_clip(const trainer *t, double sq)
{
    return t->opts.adamw.grad_clip > 0 && adamw_clip_scale(sq, t->opts.adamw.grad_clip) < 1.0f;
}

static int stage_update(trainer *t, stage_rt *r, float scale, zb_err *err)
{
    r->adam_t++;
    return t->be->ops->adamw(t->be, r->bs, &t->opts.adamw, (int)r->adam_t, (float)t->step_lr,
                             scale, err);
}

static int snapshot_take(trainer *t, stage_rt *r, zb_err *err)
{
    r->snap_t = r->adam_t;
    return t->be->ops->snapshot(t->be, r->bs, err);
}

static int snapshot_restore(trainer *t, stage_rt *r, zb_err *err)
{
    r->adam_t = r->snap_t;
    return t->be->ops->restore(t->be, r->bs, err);
}

static int run_ops(worker *w, int from, int to);

/* 1 when batch step i (trainer_steps; -1: a single step) is followed by
 * another whose leading stage-0 forwards may run speculatively. */
static int batch_spec(const trainer *t, int i)
{
    return i >= 0 && i + 1 < t->b_n && t->spec_len > 0;
}

/* Offset of batch step i's tokens in bx and by. */
static size_t batch_tokens(const trainer *t, int i)
{
    return (size_t)i * (size_t)t->n_micro * (size_t)t->batch * (size_t)t->seq;
}

/* The optimizer step of every stage of worker w's device, with
 * post-validation.  i is the step's index in a trainer_steps batch, or -1
 * for a single step.  In a batch, the device of stage 0 runs the next
 * step's leading stage-0 forwards right after stage 0's optimistic step
 * (*spec_ran = 1), and redoes them if the full norm rolls stage 0 back;
 * the device of stage 1 then drops the activations they sent before it
 * passes the norm down, so the redone ones find their keys free. */
static int post_validated_step(trainer *t, worker *w, int i, int *spec_ran)
{
    int dev = w->dev;
    zb_err *err = &w->err;
    int S = t->n_stages;
    int spec_in = 0; /* stage 1 here, and stage 0 speculated (same test as its device's) */
    if (spec_ran)
        *spec_ran = 0;
    for (int s = 0; s < S; s++) {
        stage_rt *r = &t->st[s];
        if (r->device != dev)
            continue;
        double partial = 0;
        if (s > 0 && tr_recv(t, -1, CHAN_NORM_UP, s, 0, NULL, &partial, err) != 0)
            return -1;
        if (s == 1) /* stage 0's partial: it stepped, and so speculated, iff this passes */
            spec_in = batch_spec(t, i) && isfinite(partial) && !needs_clip(t, partial);
        if (add_stage_norm(t, r, &partial, err) != 0)
            return -1;
        r->stepped = isfinite(partial) && !needs_clip(t, partial);
        if (r->stepped && (snapshot_take(t, r, err) != 0 || stage_update(t, r, 1.0f, err) != 0))
            return -1;
        if (s < S - 1) {
            if (tr_send(t, -1, CHAN_NORM_UP, s + 1, 0, NULL, partial, err) != 0)
                return -1;
        } else {
            t->full_sq = partial;
            if (i >= 0)
                t->b_full_sq[i] = partial;
        }
        if (s == 0 && r->stepped && batch_spec(t, i)) {
            /* Speculate: the next step's forwards that need no message,
             * on the optimistic parameters. */
            r->x = t->bx + batch_tokens(t, i + 1);
            r->y = t->by + batch_tokens(t, i + 1);
            if (t->opts.record_times)
                t->act_peak[dev] = 0;
            if (run_ops(w, 0, t->spec_len) != 0)
                return -1;
            *spec_ran = 1;
        }
    }
    const sched_lane *lane0 = &t->sched->dev[t->st[0].device];
    for (int s = S - 1; s >= 0; s--) {
        stage_rt *r = &t->st[s];
        if (r->device != dev)
            continue;
        double full = 0;
        if (s == S - 1)
            full = t->full_sq; /* written by this same worker on the way up */
        else if (tr_recv(t, -1, CHAN_NORM_DOWN, s, 0, NULL, &full, err) != 0)
            return -1;
        int finite = isfinite(full), clip = finite && needs_clip(t, full);
        if (!(r->stepped && finite && !clip)) {
            /* The optimistic action was wrong: undo it and do the right one. */
            if (r->stepped) {
                if (snapshot_restore(t, r, err) != 0)
                    return -1;
                pthread_mutex_lock(&t->mu);
                t->rollbacks_step++;
                pthread_mutex_unlock(&t->mu);
            }
            if (finite
                && stage_update(t, r, adamw_clip_scale(full, t->opts.adamw.grad_clip), err) != 0)
                return -1;
        }
        int spec_wrong = !(finite && !clip); /* stage 0's speculation was on wrong parameters */
        if (s == 1 && spec_in && spec_wrong)
            for (int k = 0; k < t->spec_len; k++) {
                void *buf = NULL;
                if (tr_recv(t, dev, CHAN_ACT, 1, lane0->ops[k].mb, &buf, NULL, err) != 0)
                    return -1;
                act_put(t, dev, buf);
            }
        if (s == 0 && spec_ran && *spec_ran && spec_wrong) {
            zb_backend *be = t->be;
            for (int k = 0; k < t->spec_len; k++) {
                int j = lane0->ops[k].mb;
                be->ops->saved_free(be, r->saved[j]);
                r->saved[j] = NULL;
                if (be->ops->saved_new(be, r->bs, t->batch, r->recompute, &r->saved[j], err) != 0)
                    return -1;
            }
            if (run_ops(w, 0, t->spec_len) != 0)
                return -1;
        }
        if (s > 0 && tr_send(t, -1, CHAN_NORM_DOWN, s - 1, 0, NULL, full, err) != 0)
            return -1;
    }
    return 0;
}
/* Updates device dev's activation peak with what its stages hold now.
 * Only dev's worker touches its stages' saved state, so no lock.  O(S m)
 * per op, negligible next to the op itself. */
static void note_activations(trainer *t, int dev)
{
    double held = 0;
    for (int s = 0; s < t->n_stages; s++)
        if (t->st[s].device == dev)
            for (int j = 0; j < t->n_micro; j++)
                held += (double)t->be->ops->saved_bytes(t->be, t->st[s].saved[j]);
    if (t->ve)
        held += vocab_exec_held_bytes(t->ve, dev);
    if (held > t->act_peak[dev])
        t->act_peak[dev] = held;
}


/* Ops [from, to) of worker w's lane.  0, or -1 with w->err set. */
static int run_ops(worker *w, int from, int to)
{
    trainer *t = w->t;
    const sched_lane *lane = &t->sched->dev[w->dev];
    int rc = 0;
    for (int k = from; k < to && rc == 0; k++) {
        sched_op op = lane->ops[k];
        double *start = t->opts.record_times ? &t->op_start[w->dev][k] : NULL;
        double *end = t->opts.record_times ? &t->op_end[w->dev][k] : NULL;
        switch ((op_kind)op.kind) {
        case OP_F:
            rc = op_forward(t, op.stage, op.mb, start, end, &w->err);
            break;
        case OP_B:
            rc = op_backward_b(t, op.stage, op.mb, start, end, NULL, &w->err);
            break;
        case OP_W:
            stamp(t, start);
            rc = op_backward_w(t, op.stage, op.mb, &w->err);
            stamp(t, end);
            break;
        case OP_BW: {
            void *dx = NULL;
            double *mid = t->opts.record_times ? &t->op_mid[w->dev][k] : NULL;
            rc = op_backward_b(t, op.stage, op.mb, start, mid, &dx, &w->err);
            if (rc == 0)
                rc = op_backward_w(t, op.stage, op.mb, &w->err);
            stamp(t, end);
            if (rc == 0 && op.stage > 0)
                rc = tr_send(t, w->dev, CHAN_GRAD, op.stage - 1, op.mb, dx, 0, &w->err);
            else
                act_put(t, w->dev, dx);
            break;
        }
        case OP_S:
            rc = vocab_exec_s(t->ve, op.stage, op.mb, start, end, &w->err);
            break;
        case OP_T:
            rc = vocab_exec_t(t->ve, op.stage, op.mb, start, end, &w->err);
            break;
        }
        if (t->opts.record_times)
            note_activations(t, w->dev);
    }
    return rc;
}

/* The lane's deferred results (the losses of its F ops) before anyone
 * reads them; a no-op on the CPU.  0, or -1 with w->err set. */
static int lane_sync(worker *w)
{
    trainer *t = w->t;
    for (int s = 0; s < t->n_stages; s++)
        if (t->st[s].device == w->dev && t->be->ops->sync(t->be, t->st[s].bs, &w->err) != 0)
            return -1;
    return 0;
}

/* Mean loss of the step's micro-batches, summed in micro-batch order. */
static double step_loss(const trainer *t);

/* Worker w's part of a trainer_steps batch: for each step, the rest of
 * its lane (the speculative forwards may have run already), the step's
 * loss where stage S-1 is, the post-validated optimizer step, then its
 * stages made ready for the next step.  No barrier: the device goes on
 * at once, its next step waiting only on its own messages.  Keys cannot
 * collide across steps: a device begins step i+1 after its own step i is
 * over, by which time every step-i message it sends has been taken (each
 * was needed for an op of step i that its own lane waited on). */
static int run_batch(worker *w)
{
    trainer *t = w->t;
    int dev = w->dev, S = t->n_stages;
    const sched_lane *lane = &t->sched->dev[dev];
    int done = 0; /* ops of the current step already run speculatively */
    for (int i = 0; i < t->b_n; i++) {
        if (done == 0 && t->opts.record_times)
            t->act_peak[dev] = 0;
        for (int s = 0; s < S; s++)
            if (t->st[s].device == dev) {
                t->st[s].x = t->bx + batch_tokens(t, i);
                t->st[s].y = t->by + batch_tokens(t, i);
            }
        if (run_ops(w, done, lane->n_ops) != 0 || lane_sync(w) != 0)
            return -1;
        if (t->st[S - 1].device == dev)
            t->b_loss[i] = step_loss(t);
        int spec = 0;
        if (post_validated_step(t, w, i, &spec) != 0)
            return -1;
        for (int s = 0; s < S; s++)
            if (t->st[s].device == dev) {
                if (t->be->ops->grads_zero(t->be, t->st[s].bs, NULL, &w->err) != 0)
                    return -1;
                t->st[s].next_w = 0;
                t->st[s].stepped = 0;
            }
        /* Stage 0's validation is the last of the step's down pass, so
         * every stage update of step i is behind us, and every one of step
         * i+1 comes after the up pass this device starts next. */
        if (t->st[0].device == dev)
            t->step_lr = adamw_lr(&t->opts.adamw, (int)(t->b_step0 + i + 1));
        t->b_end[(size_t)i * (size_t)t->n_devices + (size_t)dev] = ms_since(&t->t0);
        done = spec ? t->spec_len : 0;
    }
    return 0;
}

/* One job of worker w: its lane's ops and/or its optimizer step. */
static void run_job(worker *w, int phases)
{
    trainer *t = w->t;
    if (t->opts.one_device && w->dev != t->opts.device)
        return; /* another process runs this device */
    int rc = 0;
    if (t->be->ops->bind)
        rc = t->be->ops->bind(t->be, w->dev, &w->err);
    if (rc == 0 && (phases & PHASE_BATCH))
        rc = run_batch(w);
    if (rc == 0 && (phases & PHASE_OPS)) {
        rc = run_ops(w, 0, t->sched->dev[w->dev].n_ops);
        if (rc == 0)
            rc = lane_sync(w);
    }
    /* the head's gradient is complete once every device's T has run
     * (trainer_steps does not overlap steps with vocabulary passes) */
    if (rc == 0 && (phases & PHASE_STEP) && !t->opts.sync_optimizer && t->ve
        && t->st[t->n_stages - 1].device == w->dev)
        rc = vocab_exec_wait_done(t->ve, &w->err);
    if (rc == 0 && (phases & PHASE_STEP) && !t->opts.sync_optimizer)
        rc = post_validated_step(t, w, -1, NULL);
    if (rc != 0) {
        w->failed = 1;
        t->tr->ops->abort(t->tr);
        if (t->ve)
            vocab_exec_abort(t->ve);
    }
}

/* A persistent worker: binds its device's team, then runs one job per
 * generation until told to stop. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    trainer *t = w->t;
    kern_team_bind(t->team[w->dev]);
    unsigned long seen = 0;
    pthread_mutex_lock(&t->wmu);
    for (;;) {
        while (!t->wstop && t->wgen == seen)
            pthread_cond_wait(&t->wgo, &t->wmu);
        if (t->wstop)
            break;
        seen = t->wgen;
        int phases = t->wphases;
        pthread_mutex_unlock(&t->wmu);
        w->failed = 0;
        w->err.msg[0] = '\0';
        run_job(w, phases);
        pthread_mutex_lock(&t->wmu);
        if (--t->wpending == 0)
            pthread_cond_signal(&t->wdone);
    }
    pthread_mutex_unlock(&t->wmu);
    kern_team_bind(NULL);
    return NULL;
}

/* Starts the teams and the workers (first step only).  0, or -1 with err
 * set, leaving none running. */
static int workers_start(trainer *t, zb_err *err)
{
    if (t->n_started == t->n_devices)
        return 0;
    for (int d = 0; d < t->n_devices; d++)
        if (!t->team[d] && kern_team_create(t->threads, &t->team[d]) != 0)
            return zb_fail(err, "cannot start %d kernel threads for device %d", t->threads, d);
    for (int d = 0; d < t->n_devices; d++) {
        t->w[d].t = t;
        t->w[d].dev = d;
        if (pthread_create(&t->tid[d], NULL, worker_main, &t->w[d]) != 0) {
            workers_stop(t);
            return zb_fail(err, "cannot start the worker thread of device %d", d);
        }
        t->n_started++;
    }
    return 0;
}

/* Stops and joins the workers that run; idempotent. */
static void workers_stop(trainer *t)
{
    if (t->n_started == 0)
        return;
    pthread_mutex_lock(&t->wmu);
    t->wstop = 1;
    pthread_cond_broadcast(&t->wgo);
    pthread_mutex_unlock(&t->wmu);
    for (int d = 0; d < t->n_started; d++)
        pthread_join(t->tid[d], NULL);
    t->n_started = 0;
    t->wstop = 0;
}

/* Records a backend failure of the calling thread (outside the workers),
 * reported by the next be_check. */
static void be_fail(trainer *t, const zb_err *e)
{
    if (!t->be_failed) {
        t->be_failed = 1;
        t->be_err = *e;
    }
}

/* 0, or -1 with err naming the backend failure be_fail recorded. */
static int be_check(const trainer *t, zb_err *err)
{
    if (t->be_failed)
        return zb_fail(err, "%s backend: %s", t->be->ops->name, t->be_err.msg);
    return 0;
}

/* The reference path: the full norm first, then every stage steps. */
static void synchronous_step(trainer *t)
{
    double full = 0;
    zb_err e;
    for (int s = 0; s < t->n_stages; s++)
        if (add_stage_norm(t, &t->st[s], &full, &e) != 0) {
            be_fail(t, &e);
            return;
        }
    t->full_sq = full;
    if (!isfinite(full))
        return;
    float scale = adamw_clip_scale(full, t->opts.adamw.grad_clip);
    for (int s = 0; s < t->n_stages; s++)
        if (stage_update(t, &t->st[s], scale, &e) != 0) {
            be_fail(t, &e);
            return;
        }
}

/* Host mirrors (backend.h).  After a step the device holds the newest
 * params, m and v (and grads after a backward); an accessor downloads a
 * stale mirror and, since its caller may write it, marks it newer than the
 * device; the next step or evaluation uploads it.  Nothing to do when the
 * mirror is the buffer (the CPU). */
static void mirrors_device_wrote(trainer *t, unsigned bits)
{
    if (!t->mirrored)
        return;
    for (int s = 0; s < t->n_stages; s++)
        t->st[s].dev_newer |= bits;
}

/* Stage s's mirror of `which`, downloaded when stale; a failed download
 * is recorded for be_check and the stale mirror returned. */
static float *mirror_get(trainer *t, int s, zb_bbuf which, int for_write)
{
    stage_rt *r = &t->st[s];
    unsigned bit = 1u << which;
    if (t->mirrored && (r->dev_newer & bit)) {
        zb_err e;
        if (t->be->ops->download(t->be, r->bs, which, &e) != 0)
            be_fail(t, &e);
        else
            r->dev_newer &= ~bit;
    }
    if (t->mirrored && for_write)
        r->host_newer |= bit;
    return t->be->ops->host(t->be, r->bs, which);
}

/* Uploads every mirror written since the last step.  0 or -1 with err. */
static int mirrors_push(trainer *t, zb_err *err)
{
    if (be_check(t, err) != 0)
        return -1;
    if (!t->mirrored)
        return 0;
    for (int s = 0; s < t->n_stages; s++) {
        stage_rt *r = &t->st[s];
        for (int k = 0; k < ZB_BUF_COUNT; k++)
            if (r->host_newer & (1u << k)) {
                if (t->be->ops->upload(t->be, r->bs, (zb_bbuf)k, err) != 0)
                    return zb_wrap(err, "%s backend, stage %d: ", t->be->ops->name, s);
                r->host_newer &= ~(1u << k);
            }
    }
    return 0;
}

/* Returns every per-micro-batch buffer to its empty state after a failed
 * step so the trainer can be freed (or stepped again) cleanly. */
static void reset_step_state(trainer *t)
{
    t->tr->ops->reset(t->tr);
    if (t->ve)
        vocab_exec_reset(t->ve);
    for (int s = 0; s < t->n_stages; s++) {
        stage_rt *r = &t->st[s];
        for (int j = 0; j < t->n_micro; j++) {
            w_scratch_put(t, r, r->w_scratch[j]);
            r->w_scratch[j] = NULL;
            zb_backend *be = t->be;
            if (be->ops->saved_bytes(be, r->saved[j]) > 0) {
                zb_err e;
                be->ops->saved_free(be, r->saved[j]);
                r->saved[j] = NULL;
                if (be->ops->saved_new(be, r->bs, t->batch, r->recompute, &r->saved[j], &e) != 0)
                    be_fail(t, &e);
            }
        }
    }
}

/* Starts a step: the micro-batches (drawn from the generator when x is
 * NULL, else copied from the caller's [m][B*T] tokens), zeroed gradients,
 * the step's learning rate and its clock. */
static void step_begin(trainer *t, const int32_t *x, const int32_t *y)
{
    size_t tok = (size_t)t->batch * (size_t)t->seq;
    if (x) {
        memcpy(t->x, x, sizeof *t->x * tok * (size_t)t->n_micro);
        memcpy(t->y, y, sizeof *t->y * tok * (size_t)t->n_micro);
    } else {
        for (int j = 0; j < t->n_micro; j++)
            data_train_batch(t->data, &t->rng, t->batch, t->x + tok * (size_t)j,
                             t->y + tok * (size_t)j);
    }
    for (int s = 0; s < t->n_stages; s++) {
        zb_err e;
        if (t->be->ops->grads_zero(t->be, t->st[s].bs, NULL, &e) != 0)
            be_fail(t, &e);
        t->st[s].next_w = 0;
        t->st[s].stepped = 0;
        t->st[s].x = t->x;
        t->st[s].y = t->y;
    }
    t->step_lr = adamw_lr(&t->opts.adamw, (int)t->stats.step);
    t->rollbacks_step = 0;
    t->full_sq = 0;
    for (int d = 0; d < t->n_devices; d++)
        t->act_peak[d] = 0;
    if (t->ve) {
        stage_rt *r = &t->st[t->n_stages - 1];
        size_t head = r->norm_layout.n_params; /* the head follows the norm-only layout */
        /* the passes read and write the host buffers: trainer_create
         * refuses vocabulary parallelism on a mirrored backend */
        vocab_exec_begin(t->ve, t->be->ops->host(t->be, r->bs, ZB_BUF_PARAMS) + head,
                         t->be->ops->host(t->be, r->bs, ZB_BUF_GRADS) + head, t->y, &t->t0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t->t0);
}

/* Runs one job of every device's worker with the given PHASE_* bits and
 * waits for all of them.  Returns 0, or -1 with err set (the first-hand
 * failure) after resetting the per-step buffers. */
static int run_workers(trainer *t, int phases, zb_err *err)
{
    if (workers_start(t, err) != 0) {
        reset_step_state(t);
        return -1;
    }
    pthread_mutex_lock(&t->wmu);
    t->wphases = phases;
    t->wpending = t->n_devices;
    t->wgen++;
    pthread_cond_broadcast(&t->wgo);
    while (t->wpending > 0)
        pthread_cond_wait(&t->wdone, &t->wmu);
    pthread_mutex_unlock(&t->wmu);
    /* Report the worker that failed first-hand, not the ones that only saw
     * the channel abort it caused. */
    worker *w = t->w;
    int failed = 0;
    for (int d = 0; d < t->n_devices && !failed; d++) {
        if (w[d].failed && strcmp(w[d].err.msg, "aborted") != 0) {
            zb_fail(err, "device %d: %s", d, w[d].err.msg);
            failed = 1;
        }
    }
    if (!failed)
        for (int d = 0; d < t->n_devices; d++)
            if (w[d].failed) {
                zb_fail(err, "device %d: %s", d, w[d].err.msg);
                failed = 1;
                break;
            }
    if (failed) {
        reset_step_state(t);
        return -1;
    }
    return 0;
}

/* Mean loss of the step's micro-batches, summed in micro-batch order. */
static double step_loss(const trainer *t)
{
    double sum = 0;
    for (int j = 0; j < t->n_micro; j++)
        sum += t->mb_loss[j];
    return sum / t->n_micro;
}

/* Ends a step whose optimizer work ran (or runs here, synchronous path):
 * counters and times. */
static void step_end(trainer *t, double loss)
{
    if (t->opts.sync_optimizer)
        synchronous_step(t);
    t->tr->ops->reset(t->tr);
    t->stats.step++;
    t->stats.last_loss = loss;
    t->stats.last_grad_norm = sqrt(t->full_sq);
    t->stats.last_step_s = ms_since(&t->t0) * 1e-3;
    t->stats.last_lr = t->step_lr;
    t->stats.rollbacks += t->rollbacks_step;
    if (!isfinite(t->full_sq))
        t->stats.skipped_steps++;
    t->have_times = t->opts.record_times;
}

int trainer_step(trainer *t, double *loss, zb_err *err)
{
    if (t->pending)
        return zb_fail(err, "trainer_step: a backward is pending its trainer_apply");
    if (mirrors_push(t, err) != 0)
        return -1;
    step_begin(t, NULL, NULL);
    /* Ops and optimizer step in one set of workers: each device steps as
     * soon as its lane is done, the post-validation overlap of the paper.
     * The arithmetic is that of trainer_backward + trainer_apply. */
    if (run_workers(t, PHASE_OPS | PHASE_STEP, err) != 0)
        return -1;
    *loss = step_loss(t);
    step_end(t, *loss);
    mirrors_device_wrote(t, (1u << ZB_BUF_COUNT) - 1);
    return be_check(t, err);
}

/* Room in the batch buffers for n steps.  0, or -1 (memory; the old
 * buffers are kept). */
static int batch_reserve(trainer *t, int n)
{
    if (n <= t->b_cap)
        return 0;
    size_t tok = batch_tokens(t, n);
    int32_t *bx = realloc(t->bx, sizeof *bx * tok);
    if (bx)
        t->bx = bx;
    int32_t *by = realloc(t->by, sizeof *by * tok);
    if (by)
        t->by = by;
    double *bl = realloc(t->b_loss, sizeof *bl * (size_t)n);
    if (bl)
        t->b_loss = bl;
    double *bf = realloc(t->b_full_sq, sizeof *bf * (size_t)n);
    if (bf)
        t->b_full_sq = bf;
    double *be = realloc(t->b_end, sizeof *be * (size_t)n * (size_t)t->n_devices);
    if (be)
        t->b_end = be;
    if (!bx || !by || !bl || !bf || !be)
        return -1;
    t->b_cap = n;
    return 0;
}

/* Shifts the recorded op times (the batch's last step) so that they count
 * from that step's earliest op start, as trainer_trace promises. */
static void batch_trace_times(trainer *t)
{
    double first = INFINITY;
    for (int d = 0; d < t->n_devices; d++)
        for (int k = 0; k < t->sched->dev[d].n_ops; k++)
            first = fmin(first, t->op_start[d][k]);
    if (!isfinite(first))
        return;
    for (int d = 0; d < t->n_devices; d++)
        for (int k = 0; k < t->sched->dev[d].n_ops; k++) {
            t->op_start[d][k] -= first;
            t->op_end[d][k] -= first;
            t->op_mid[d][k] -= first;
        }
}

int trainer_steps(trainer *t, int n, trainer_step_info *info, zb_err *err)
{
    if (t->pending)
        return zb_fail(err, "trainer_steps: a backward is pending its trainer_apply");
    if (n < 1)
        return zb_fail(err, "trainer_steps: %d steps", n);
    int overlap = n > 1 && !t->ve && !t->opts.sync_optimizer && !t->opts.one_device
                  && !t->opts.make_transport && t->opts.transport == ZB_TRANSPORT_SLOTS;
    if (!overlap) {
        /* Ordered links (FIFO, MPI) number a step's messages per link, the
         * synchronous clip has a barrier by definition, and the vocabulary
         * passes' barriers and head copy are per step: step by step. */
        for (int i = 0; i < n; i++) {
            double loss;
            if (trainer_step(t, &loss, err) != 0)
                return -1;
            if (info)
                info[i] = (trainer_step_info){ loss, t->stats.last_grad_norm, t->stats.last_lr,
                                               t->stats.last_step_s, !isfinite(t->full_sq) };
        }
        return 0;
    }
    if (batch_reserve(t, n) != 0)
        return zb_fail(err, "out of memory for %d steps' micro-batches", n);
    if (mirrors_push(t, err) != 0)
        return -1;
    size_t tok = (size_t)t->batch * (size_t)t->seq;
    for (int i = 0; i < n; i++) /* the draws of n single steps, in the same order */
        for (int j = 0; j < t->n_micro; j++) {
            size_t off = batch_tokens(t, i) + tok * (size_t)j;
            data_train_batch(t->data, &t->rng, t->batch, t->bx + off, t->by + off);
        }
    for (int s = 0; s < t->n_stages; s++) {
        zb_err e;
        if (t->be->ops->grads_zero(t->be, t->st[s].bs, NULL, &e) != 0)
            be_fail(t, &e);
        t->st[s].next_w = 0;
        t->st[s].stepped = 0;
    }
    if (be_check(t, err) != 0)
        return -1;
    t->b_n = n;
    t->b_step0 = t->stats.step;
    t->step_lr = adamw_lr(&t->opts.adamw, (int)t->stats.step);
    t->rollbacks_step = 0;
    t->full_sq = 0;
    for (int d = 0; d < t->n_devices; d++)
        t->act_peak[d] = 0;
    clock_gettime(CLOCK_MONOTONIC, &t->t0);
    int rc = run_workers(t, PHASE_BATCH, err);
    t->b_n = 0;
    if (rc != 0)
        return -1;
    t->tr->ops->reset(t->tr);
    double prev = 0;
    for (int i = 0; i < n; i++) {
        double end = 0;
        for (int d = 0; d < t->n_devices; d++)
            end = fmax(end, t->b_end[(size_t)i * (size_t)t->n_devices + (size_t)d]);
        trainer_step_info r = { t->b_loss[i], sqrt(t->b_full_sq[i]),
                                adamw_lr(&t->opts.adamw, (int)(t->b_step0 + i)),
                                (end - prev) * 1e-3, !isfinite(t->b_full_sq[i]) };
        prev = end;
        if (info)
            info[i] = r;
        t->stats.step++;
        t->stats.last_loss = r.loss;
        t->stats.last_grad_norm = r.grad_norm;
        t->stats.last_step_s = r.seconds;
        t->stats.last_lr = r.lr;
        t->stats.skipped_steps += r.skipped;
    }
    t->full_sq = t->b_full_sq[n - 1];
    t->stats.rollbacks += t->rollbacks_step;
    if (t->opts.record_times)
        batch_trace_times(t);
    t->have_times = t->opts.record_times;
    mirrors_device_wrote(t, (1u << ZB_BUF_COUNT) - 1);
    return be_check(t, err);
}

static int backward(trainer *t, const int32_t *x, const int32_t *y, double *loss, zb_err *err)
{
    if (t->pending)
        return zb_fail(err, "trainer_backward: the previous backward was not applied");
    if (mirrors_push(t, err) != 0)
        return -1;
    step_begin(t, x, y);
    if (run_workers(t, PHASE_OPS, err) != 0)
        return -1;
    mirrors_device_wrote(t, 1u << ZB_BUF_GRADS);
    if (be_check(t, err) != 0)
        return -1;
    t->pending_loss = step_loss(t);
    t->pending = 1;
    *loss = t->pending_loss;
    return 0;
}

int trainer_backward(trainer *t, double *loss, zb_err *err)
{
    return backward(t, NULL, NULL, loss, err);
}

int trainer_backward_on(trainer *t, const int32_t *x, const int32_t *y, double *loss,
                        zb_err *err)
{
    return backward(t, x, y, loss, err);
}

int trainer_apply(trainer *t, zb_err *err)
{
    if (!t->pending)
        return zb_fail(err, "trainer_apply: no backward to apply");
    t->pending = 0;
    /* the caller may have replaced the gradients (an average of replicas) */
    if (mirrors_push(t, err) != 0)
        return -1;
    if (!t->opts.sync_optimizer && run_workers(t, PHASE_STEP, err) != 0)
        return -1;
    step_end(t, t->pending_loss);
    mirrors_device_wrote(t, (1u << ZB_BUF_COUNT) - 1);
    return be_check(t, err);
}

int trainer_pending(const trainer *t)
{
    return t->pending;
}

/* ---- evaluation --------------------------------------------------------- */

int trainer_eval(trainer *t, double *val_loss, zb_err *err)
{
    /* The workers are idle between steps: the calling thread borrows
     * device 0's team for the forward passes. */
    if (workers_start(t, err) != 0 || mirrors_push(t, err) != 0)
        return -1;
    kern_team *prev = kern_team_current();
    kern_team_bind(t->team[0]);
    zb_backend *be = t->be;
    int B = t->batch;
    int n_batches = (t->opts.eval_windows + B - 1) / B;
    int n_total = n_batches * B;
    size_t tok = (size_t)B * (size_t)t->seq;
    int32_t *x = malloc(sizeof *x * tok), *y = malloc(sizeof *y * tok);
    void *a = be->ops->act_new(be, t->act_floats), *b = be->ops->act_new(be, t->act_floats);
    int rc = 0;
    if (!x || !y || !a || !b)
        rc = zb_fail(err, "out of memory");
    /* A stage's forward runs on its own device (stream); the activation
     * passes between devices with the fences of backend.h. */
    for (int dv = 0; dv < t->n_devices && rc == 0 && be->ops->bind; dv++)
        rc = be->ops->bind(be, dv, err);
    double sum = 0;
    for (int k = 0; k < n_batches && rc == 0; k++) {
        data_val_batch(t->data, k * B, B, n_total, x, y);
        for (int s = 0; s < t->n_stages && rc == 0; s++) {
            stage_rt *r = &t->st[s];
            int last = s == t->n_stages - 1 && !t->ve; /* with vocab_exec: the head below */
            zb_bsaved *sv = NULL;
            float loss = 0;
            if ((rc = be->ops->saved_new(be, r->bs, B, 0, &sv, err)) != 0)
                break;
            if (be->ops->act_wait && ((s > 0 && be->ops->act_wait(be, r->device, a, err) != 0)
                                      || (!last && be->ops->act_wait(be, r->device, b, err) != 0)))
                rc = -1;
            if (rc == 0)
                rc = be->ops->forward(be, r->bs, sv, s == 0 ? x : NULL, s == 0 ? NULL : a,
                                      last ? y : NULL, last ? NULL : b, last ? &loss : NULL, err);
            /* both buffers' last use is now this stage's (the next stage
             * writes into the one read here) */
            if (rc == 0 && be->ops->act_issued
                && ((s > 0 && be->ops->act_issued(be, r->device, a, err) != 0)
                    || (!last && be->ops->act_issued(be, r->device, b, err) != 0)))
                rc = -1;
            /* the loss (and x, y before the next batch overwrites them) */
            if (rc == 0)
                rc = be->ops->sync(be, r->bs, err);
            be->ops->saved_free(be, sv);
            if (rc == 0 && t->ve && s == t->n_stages - 1) {
                /* the head over its shards (CPU only: the host mirror is the buffer) */
                const float *params = be->ops->host(be, r->bs, ZB_BUF_PARAMS);
                double vl = 0;
                rc = vocab_exec_eval(t->ve, params + r->norm_layout.n_params, b, y, B, &vl, err);
                loss = (float)vl;
                last = 1;
            }
            if (rc != 0) {
                zb_wrap(err, "evaluation, stage %d: ", s);
                break;
            }
            if (last)
                sum += loss;
            void *tmp = a;
            a = b;
            b = tmp;
        }
    }
    free(x);
    free(y);
    be->ops->act_free(be, a);
    be->ops->act_free(be, b);
    kern_team_bind(prev);
    if (rc != 0)
        return -1;
    *val_loss = sum / n_batches;
    return 0;
}

/* ---- accessors ---------------------------------------------------------- */

int trainer_threads(const trainer *t)
{
    return t->threads;
}

int trainer_stage_count(const trainer *t)
{
    return t->n_stages;
}

float *trainer_stage_params(trainer *t, int stage, size_t *n)
{
    assert(stage >= 0 && stage < t->n_stages);
    *n = t->st[stage].n_params;
    return mirror_get(t, stage, ZB_BUF_PARAMS, 1);
}

float *trainer_stage_grads(trainer *t, int stage, size_t *n)
{
    assert(stage >= 0 && stage < t->n_stages);
    *n = t->st[stage].n_params;
    return mirror_get(t, stage, ZB_BUF_GRADS, 1);
}

float *trainer_stage_adam_m(trainer *t, int stage, size_t *n)
{
    assert(stage >= 0 && stage < t->n_stages);
    *n = t->st[stage].n_params;
    return mirror_get(t, stage, ZB_BUF_ADAM_M, 1);
}

float *trainer_stage_adam_v(trainer *t, int stage, size_t *n)
{
    assert(stage >= 0 && stage < t->n_stages);
    *n = t->st[stage].n_params;
    return mirror_get(t, stage, ZB_BUF_ADAM_V, 1);
}

int64_t *trainer_stage_adam_t(trainer *t, int stage)
{
    assert(stage >= 0 && stage < t->n_stages);
    return &t->st[stage].adam_t;
}

const llama_stage *trainer_stage_layout(const trainer *t, int stage)
{
    assert(stage >= 0 && stage < t->n_stages);
    return &t->st[stage].layout;
}

size_t trainer_param_count(const trainer *t)
{
    size_t n = 0;
    for (int s = 0; s < t->n_stages; s++)
        n += t->st[s].n_params;
    return n;
}

const zb_model *trainer_model(const trainer *t)
{
    return &t->model;
}

const trainer_stats *trainer_get_stats(const trainer *t)
{
    return &t->stats;
}

/* ---- checkpoints -------------------------------------------------------- */

/* What a checkpoint must agree on with the trainer that loads it. */
typedef struct ckpt_meta {
    int32_t n_stages, n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab, seq_len, swiglu;
    int32_t first_layer[64]; /* layer ranges of the first 64 stages (0 beyond) */
} ckpt_meta;

typedef struct ckpt_progress {
    int64_t step;           /* optimizer steps taken */
    int64_t rollbacks;      /* counters carried over so a resumed run reports totals */
    int64_t skipped_steps;
    uint64_t rng[4];        /* data generator state */
} ckpt_progress;

static void fill_meta(const trainer *t, ckpt_meta *m)
{
    memset(m, 0, sizeof *m);
    m->n_stages = t->n_stages;
    m->n_layers = t->model.n_layers;
    m->d_model = t->model.d_model;
    m->n_heads = t->model.n_heads;
    m->n_kv_heads = t->model.n_kv_heads;
    m->d_ff = t->model.d_ff;
    m->vocab = t->model.vocab;
    m->seq_len = t->model.seq_len;
    m->swiglu = t->model.swiglu;
    for (int s = 0; s < t->n_stages && s < 64; s++)
        m->first_layer[s] = t->st[s].layout.l0;
}

/* Parts: meta, progress, then per stage params, m, v, adam_t. */
static int ckpt_part_count(const trainer *t)
{
    return 2 + 4 * t->n_stages;
}

int trainer_save(const trainer *t_in, const char *path, zb_err *err)
{
    return trainer_save_stages(t_in, path, NULL, err);
}

int trainer_save_stages(const trainer *t_in, const char *path, const unsigned char *own,
                        zb_err *err)
{
    /* Logically const: only the host mirrors (a cache of the device's
     * buffers) are refreshed. */
    trainer *t = (trainer *)t_in;
    /* Mid-step the generator has moved past batches the parameters have
     * not learnt from: a resume would skip them. */
    if (t->pending)
        return zb_fail(err, "cannot checkpoint between trainer_backward and trainer_apply");
    int n = ckpt_part_count(t);
    ckpt_part *parts = calloc((size_t)n, sizeof *parts);
    if (!parts)
        return zb_fail(err, "out of memory");
    ckpt_meta meta;
    fill_meta(t, &meta);
    ckpt_progress prog = { .step = t->stats.step, .rollbacks = t->stats.rollbacks,
                           .skipped_steps = t->stats.skipped_steps };
    memcpy(prog.rng, t->rng.s, sizeof prog.rng);
    parts[0] = (ckpt_part){ &meta, sizeof meta };
    parts[1] = (ckpt_part){ &prog, sizeof prog };
    for (int s = 0; s < t->n_stages; s++) {
        stage_rt *r = &t->st[s];
        int mine = !own || own[s];
        size_t bytes = mine ? sizeof(float) * r->n_params : 0; /* empty: another part's */
        parts[2 + 4 * s] = (ckpt_part){ mine ? mirror_get(t, s, ZB_BUF_PARAMS, 0) : NULL, bytes };
        parts[3 + 4 * s] = (ckpt_part){ mine ? mirror_get(t, s, ZB_BUF_ADAM_M, 0) : NULL, bytes };
        parts[4 + 4 * s] = (ckpt_part){ mine ? mirror_get(t, s, ZB_BUF_ADAM_V, 0) : NULL, bytes };
        parts[5 + 4 * s] = (ckpt_part){ &r->adam_t, mine ? sizeof r->adam_t : 0 };
    }
    int rc = be_check(t, err) != 0 ? -1 : ckpt_write(path, parts, n, err);
    free(parts);
    return rc;
}

int trainer_load(trainer *t, const char *path, zb_err *err)
{
    if (t->pending)
        return zb_fail(err, "cannot load a checkpoint between trainer_backward and trainer_apply");
    /* Read into fresh buffers and commit only when everything matches, so
     * that a failure leaves the trainer as it was. */
    int n = ckpt_part_count(t);
    ckpt_part *parts = calloc((size_t)n, sizeof *parts);
    ckpt_meta meta, mine;
    ckpt_progress prog;
    int64_t *adam_t = calloc((size_t)t->n_stages, sizeof *adam_t);
    int rc = 0;
    if (!parts || !adam_t)
        rc = zb_fail(err, "out of memory");
    if (rc == 0) {
        parts[0] = (ckpt_part){ &meta, sizeof meta };
        parts[1] = (ckpt_part){ &prog, sizeof prog };
        for (int s = 0; s < t->n_stages && rc == 0; s++) {
            size_t bytes = sizeof(float) * t->st[s].n_params;
            for (int k = 0; k < 3; k++) {
                parts[2 + 4 * s + k] = (ckpt_part){ malloc(bytes ? bytes : 1), bytes };
                if (!parts[2 + 4 * s + k].data)
                    rc = zb_fail(err, "out of memory");
            }
            parts[5 + 4 * s] = (ckpt_part){ &adam_t[s], sizeof adam_t[s] };
        }
    }
    if (rc == 0)
        rc = ckpt_read(path, parts, n, err);
    if (rc == 0) {
        fill_meta(t, &mine);
        if (memcmp(&meta, &mine, sizeof meta) != 0)
            rc = zb_fail(err, "%s: the checkpoint is of another model or stage split", path);
    }
    if (rc == 0) {
        /* into the host mirrors (on the CPU, the buffers themselves); the
         * next step or evaluation uploads them to a device */
        static const zb_bbuf which[3] = { ZB_BUF_PARAMS, ZB_BUF_ADAM_M, ZB_BUF_ADAM_V };
        for (int s = 0; s < t->n_stages; s++) {
            stage_rt *r = &t->st[s];
            for (int k = 0; k < 3; k++) {
                float *dst = t->be->ops->host(t->be, r->bs, which[k]);
                memcpy(dst, parts[2 + 4 * s + k].data, sizeof(float) * r->n_params);
                if (t->mirrored) {
                    r->dev_newer &= ~(1u << which[k]);
                    r->host_newer |= 1u << which[k];
                }
            }
            r->adam_t = adam_t[s];
        }
        t->stats.step = prog.step;
        t->stats.rollbacks = prog.rollbacks;
        t->stats.skipped_steps = prog.skipped_steps;
        memcpy(t->rng.s, prog.rng, sizeof prog.rng);
    }
    if (parts)
        for (int s = 0; s < t->n_stages; s++)
            for (int k = 0; k < 3; k++)
                free(parts[2 + 4 * s + k].data);
    free(parts);
    free(adam_t);
    return rc;
}

int trainer_load_parts(trainer *t, const char *const *paths, int n_paths, int need_all,
                       zb_err *err)
{
    if (t->pending)
        return zb_fail(err, "cannot load a checkpoint between trainer_backward and trainer_apply");
    if (n_paths < 1)
        return zb_fail(err, "no checkpoint parts to load");
    /* Every file is read and checked whole before the trainer changes. */
    int n = ckpt_part_count(t);
    ckpt_part **files = calloc((size_t)n_paths, sizeof *files);
    int *owner = malloc((size_t)t->n_stages * sizeof *owner);
    ckpt_meta mine;
    ckpt_progress first;
    memset(&first, 0, sizeof first);
    int64_t rollbacks = 0;
    int rc = files && owner ? 0 : zb_fail(err, "out of memory");
    fill_meta(t, &mine);
    for (int s = 0; s < t->n_stages && rc == 0; s++)
        owner[s] = -1;
    for (int f = 0; f < n_paths && rc == 0; f++) {
        int got = 0;
        if ((rc = ckpt_read_any(paths[f], &files[f], &got, err)) != 0)
            break;
        const ckpt_part *pt = files[f];
        if (got != n || pt[0].bytes != sizeof mine || pt[1].bytes != sizeof first ||
            memcmp(pt[0].data, &mine, sizeof mine) != 0) {
            ckpt_parts_free(files[f], got);
            files[f] = NULL;
            rc = zb_fail(err, "%s: the checkpoint is of another model or stage split", paths[f]);
            break;
        }
        ckpt_progress prog;
        memcpy(&prog, pt[1].data, sizeof prog);
        if (f == 0)
            first = prog;
        else if (prog.step != first.step) {
            rc = zb_fail(err, "%s: a part of step %lld, but %s is of step %lld (parts of two "
                         "checkpoints)", paths[f], (long long)prog.step, paths[0],
                         (long long)first.step);
            break;
        }
        rollbacks += prog.rollbacks; /* each part counts its own stages' */
        for (int s = 0; s < t->n_stages && rc == 0; s++) {
            size_t bytes = sizeof(float) * t->st[s].n_params;
            int has = pt[5 + 4 * s].bytes == sizeof(int64_t);
            int sizes_ok = has ? pt[2 + 4 * s].bytes == bytes && pt[3 + 4 * s].bytes == bytes &&
                                     pt[4 + 4 * s].bytes == bytes
                               : pt[2 + 4 * s].bytes == 0 && pt[3 + 4 * s].bytes == 0 &&
                                     pt[4 + 4 * s].bytes == 0 && pt[5 + 4 * s].bytes == 0;
            if (!sizes_ok)
                rc = zb_fail(err, "%s: stage %d has parts of the wrong size (another model or "
                             "split?)", paths[f], s);
            else if (has && owner[s] >= 0)
                rc = zb_fail(err, "%s: stage %d is also in %s", paths[f], s, paths[owner[s]]);
            else if (has)
                owner[s] = f;
        }
    }
    for (int s = 0; s < t->n_stages && rc == 0 && need_all; s++)
        if (owner[s] < 0)
            rc = zb_fail(err, "%s: stage %d is in none of the %d checkpoint parts", paths[0], s,
                         n_paths);
    if (rc == 0) {
        for (int s = 0; s < t->n_stages; s++) {
            if (owner[s] < 0)
                continue;
            stage_rt *r = &t->st[s];
            ckpt_part *pt = files[owner[s]];
            /* into the host mirrors, as trainer_load does */
            static const zb_bbuf which[3] = { ZB_BUF_PARAMS, ZB_BUF_ADAM_M, ZB_BUF_ADAM_V };
            for (int k = 0; k < 3; k++) {
                float *dst = t->be->ops->host(t->be, r->bs, which[k]);
                memcpy(dst, pt[2 + 4 * s + k].data, pt[2 + 4 * s + k].bytes);
                if (t->mirrored) {
                    r->dev_newer &= ~(1u << which[k]);
                    r->host_newer |= 1u << which[k];
                }
            }
            memcpy(&r->adam_t, pt[5 + 4 * s].data, sizeof r->adam_t);
        }
        t->stats.step = first.step;
        t->stats.rollbacks = rollbacks;
        t->stats.skipped_steps = first.skipped_steps;
        memcpy(t->rng.s, first.rng, sizeof first.rng);
    }
    for (int f = 0; files && f < n_paths; f++)
        ckpt_parts_free(files[f], n);
    free(files);
    free(owner);
    return rc;
}

/* ---- trace -------------------------------------------------------------- */

/* Adds meta.measured.device_peak_activation_bytes[p] to the trace c
 * (replacing one the schedule file may have carried).  0 or -1 (memory). */
static int trace_add_measured(sched_t *c, const double *act_peak)
{
    if (!c->meta && !(c->meta = cJSON_CreateObject()))
        return -1;
    cJSON *mo = cJSON_CreateObject();
    cJSON *a = cJSON_CreateDoubleArray(act_peak, c->n_devices);
    if (!mo || !a) {
        cJSON_Delete(mo);
        cJSON_Delete(a);
        return -1;
    }
    cJSON_AddItemToObject(mo, "device_peak_activation_bytes", a);
    cJSON_DeleteItemFromObjectCaseSensitive(c->meta, "measured");
    cJSON_AddItemToObject(c->meta, "measured", mo);
    return 0;
}

int trainer_trace(const trainer *t, sched_t **out, zb_err *err)
{
    if (!t->have_times)
        return zb_fail(err, "no measured step to trace (enable record_times and run a step)");
    sched_t *c = sched_clone(t->sched);
    if (!c)
        return zb_fail(err, "out of memory");
    /* Per stage: summed durations and counts of F, B, W (BW ops split at
     * the end of their B half), for the costs of the traced file. */
    double *sum = calloc((size_t)c->n_stages * 6, sizeof *sum);
    double vocab_sum[4] = { 0 }; /* S, T durations then counts */
    if (!sum) {
        sched_free(c);
        return zb_fail(err, "out of memory");
    }
    for (int d = 0; d < c->n_devices; d++) {
        if (sched_lane_alloc_times(c, d) != 0) {
            free(sum);
            sched_free(c);
            return zb_fail(err, "out of memory");
        }
        for (int k = 0; k < c->dev[d].n_ops; k++) {
            double st = t->op_start[d][k], en = t->op_end[d][k];
            c->dev[d].start[k] = st;
            c->dev[d].end[k] = en;
            sched_op op = c->dev[d].ops[k];
            double *acc = sum + 6 * op.stage; /* F, B, W durations then counts */
            switch ((op_kind)op.kind) {
            case OP_F: acc[0] += en - st; acc[3]++; break;
            case OP_B: acc[1] += en - st; acc[4]++; break;
            case OP_W: acc[2] += en - st; acc[5]++; break;
            case OP_BW: {
                double mid = t->op_mid[d][k];
                acc[1] += mid - st;
                acc[4]++;
                acc[2] += en - mid;
                acc[5]++;
                break;
            }
            case OP_S: vocab_sum[0] += en - st; vocab_sum[2]++; break;
            case OP_T: vocab_sum[1] += en - st; vocab_sum[3]++; break;
            }
        }
    }
    /* The file's costs become the measured mean of each op kind per stage,
     * so that `zbsched simulate` on the trace predicts from what this run
     * really spent per op and shows only the scheduling difference. */
    for (int i = 0; i < c->n_stages; i++) {
        double *acc = sum + 6 * i;
        c->cost[i].t_f = acc[3] > 0 ? acc[0] / acc[3] : 0;
        c->cost[i].t_b = acc[4] > 0 ? acc[1] / acc[4] : 0;
        c->cost[i].t_w = acc[5] > 0 ? acc[2] / acc[5] : 0;
    }
    c->t_comm = 0;
    if (sched_has_vocab(c)) { /* measured passes; barriers are waits inside them */
        c->vocab.t_s = vocab_sum[2] > 0 ? vocab_sum[0] / vocab_sum[2] : 0;
        c->vocab.t_t = vocab_sum[3] > 0 ? vocab_sum[1] / vocab_sum[3] : 0;
        c->vocab.t_c0 = c->vocab.t_c1 = 0;
    }
    free(sum);
    strcpy(c->time_unit, "ms");
    if (trace_add_measured(c, t->act_peak) != 0) {
        sched_free(c);
        return zb_fail(err, "out of memory");
    }
    *out = c;
    return 0;
}

/* ---- backend ------------------------------------------------------------ */

/* trainer.h's bits are the backend's buffer bits. */
_Static_assert(TRAINER_BUF_PARAMS == 1u << ZB_BUF_PARAMS && TRAINER_BUF_GRADS == 1u << ZB_BUF_GRADS
                   && TRAINER_BUF_ADAM_M == 1u << ZB_BUF_ADAM_M
                   && TRAINER_BUF_ADAM_V == 1u << ZB_BUF_ADAM_V,
               "TRAINER_BUF_* must match 1 << zb_bbuf");

int trainer_host_sync(trainer *t, unsigned bufs, zb_err *err)
{
    if (!t->mirrored)
        return 0;
    for (int s = 0; s < t->n_stages; s++)
        for (int k = 0; k < ZB_BUF_COUNT; k++)
            if (bufs & (1u << k))
                mirror_get(t, s, (zb_bbuf)k, 1);
    return be_check(t, err);
}

const char *trainer_backend_name(const trainer *t)
{
    return t->be->ops->name;
}

int trainer_memory(const trainer *t, size_t *static_bytes, size_t *peak_activation_bytes,
                   zb_err *err)
{
    return t->be->ops->memory(t->be, static_bytes, peak_activation_bytes, err);
}
