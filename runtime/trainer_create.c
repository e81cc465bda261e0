/*
 * trainer_create.c: making and freeing a trainer (trainer.h), and the
 * accessors that only read its fixed shape.
 *
 * trainer_create checks everything a caller can get wrong before it
 * allocates (the schedule, the data's context, the split, the recompute
 * levels), then builds in one order: the trainer's own arrays, the backend
 * (opts.make_backend or the CPU's), the transport over the activation pool
 * (trainer_ops.c), each stage's layout, backend buffers and saved states
 * with the initial weights drawn on the host, and the vocabulary executor.
 * Any failure frees what exists through trainer_free, which accepts a
 * trainer in every partly built state: each pointer it frees is either
 * NULL (calloc) or complete, and the backend's objects are freed before
 * the backend.
 */
#include "runtime/trainer_impl.h"

#include <assert.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/buf_pool.h"
#include "kernels/cpu/kernels.h"
#include "runtime/split.h"
#include "runtime/transport_factory.h"
#include "src/validate.h"

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

void trainer_free(trainer *t)
{
    if (!t)
        return;
    trainer_workers_stop(t);
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
    /* after the stages: their saved states gave their buffers back */
    if (t->dev_pool)
        for (int d = 0; d < t->n_devices; d++)
            buf_pool_free(t->dev_pool[d]);
    free(t->dev_pool);
    free(t->st);
    vocab_exec_free(t->ve);
    backend_free(t->be);
    /* each of the three may be missing when creation ran out of memory */
    double **times[3] = { t->op_start, t->op_end, t->op_mid };
    for (int k = 0; k < 3; k++)
        for (int d = 0; times[k] && d < t->n_devices; d++)
            free(times[k][d]);
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
    free(t->b_rolled);
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

/* Builds stage i of t (layers [first[i], first[i+1])): its layouts, its
 * arrays, its buffers and saved states on the backend and its initial
 * weights.  0, or -1 with err; what was built is freed with the trainer. */
static int stage_build(trainer *t, const sched_t *s, int i, const int *first,
                       const trainer_opts *opts, zb_err *err)
{
    stage_rt *r = &t->st[i];
    if (llama_stage_init(&r->layout, &t->model, first[i], first[i + 1], i == 0,
                         i == t->n_stages - 1, err) != 0)
        return zb_wrap(err, "stage %d: ", i);
    r->kern = &r->layout;
    if (sched_has_vocab(s) && i == t->n_stages - 1) {
        if (llama_stage_init(&r->norm_layout, &t->model, first[i], first[i + 1], i == 0,
                             LLAMA_HEAD_NORM_ONLY, err) != 0)
            return zb_wrap(err, "stage %d: ", i);
        r->kern = &r->norm_layout;
    }
    r->device = s->stage_device[i];
    /* one pool of saved-state buffers per device, whatever its stages */
    llama_stage_share_pool(r->kern == &r->layout ? &r->layout : &r->norm_layout,
                           t->dev_pool[r->device]);
    r->recompute = opts->recompute_stages ? opts->recompute_stages[i] : LLAMA_RC_NONE;
    r->n_params = llama_stage_num_params(&r->layout);
    r->tensor_sq = calloc((size_t)r->layout.n_tensors + 1, sizeof(double));
    r->saved = calloc((size_t)t->n_micro, sizeof *r->saved);
    r->w_scratch = calloc((size_t)t->n_micro, sizeof *r->w_scratch);
    r->w_free = calloc((size_t)t->n_micro, sizeof *r->w_free);
    if (!r->w_free || !r->tensor_sq || !r->saved || !r->w_scratch)
        return zb_fail(err, "out of memory for stage %d", i);
    zb_backend *be = t->be;
    int brc = be->ops->stage_new(be, &r->layout, r->kern != &r->layout ? r->kern : NULL,
                                 r->device, &r->bs, err);
    if (brc != 0)
        r->bs = NULL;
    for (int j = 0; j < t->n_micro && brc == 0; j++)
        if ((brc = be->ops->saved_new(be, r->bs, t->batch, r->recompute, &r->saved[j], err)) != 0)
            r->saved[j] = NULL;
    if (brc == 0) {
        /* the same initial weights on every backend: drawn on the host */
        llama_stage_init_params(&r->layout, be->ops->host(be, r->bs, ZB_BUF_PARAMS), opts->seed);
        if (be->ops->upload)
            brc = be->ops->upload(be, r->bs, ZB_BUF_PARAMS, err);
    }
    return brc != 0 ? zb_wrap(err, "stage %d on %s: ", i, be->ops->name) : 0;
}

/* Allocates stage 0's post-validation copy now rather than at its first
 * speculative step, so that a run that cannot hold it fails here and the
 * memory it holds does not depend on when the first speculation comes
 * (the ledger checks it against footprint_devices).  On a backend with the
 * split update this is a step of learning rate 0, undone: the backend
 * copies the parameters and puts the same bits back.  0 or -1 with err. */
static int reserve_rollback(trainer *t, zb_err *err)
{
    zb_backend *be = t->be;
    stage_rt *r = &t->st[0];
    if (!be->ops->adamw_params)
        return be->ops->snapshot(be, r->bs, err);
    if (be->ops->adamw_params(be, r->bs, &t->opts.adamw, 1, 0.0f, 1.0f, err) != 0)
        return -1;
    return be->ops->adamw_undo(be, r->bs, err);
}

int trainer_create(const sched_t *s, const zb_model *m, const zb_data *d,
                   const trainer_opts *opts, trainer **out, zb_err *err)
{
    /* A schedule that is incomplete or deadlocks would hang the workers:
     * refuse it here, whoever the caller is. */
    if (sched_validate(s, err) != 0)
        return zb_wrap(err, "schedule: ");
    if (sched_has_vocab(s) && opts->one_device && !opts->make_vocab_link)
        return zb_fail(err, "schedule: vocabulary-parallel passes (S, T) run in one process, or "
                       "across processes with a carrier for their messages (mpirun), which "
                       "this caller does not give; generate the schedule with --vocab plain");
    if (d->ctx != m->seq_len)
        return zb_fail(err, "the data windows have context %d but the model's is %d", d->ctx, m->seq_len);
    if (opts->eval_windows <= 0)
        return zb_fail(err, "eval windows must be positive, got %d", opts->eval_windows);
    if (opts->one_device && (opts->device < 0 || opts->device >= s->n_devices))
        return zb_fail(err, "device %d is not one of the schedule's %d", opts->device,
                       s->n_devices);
    int batch = opts->batch_size > 0 ? opts->batch_size : m->micro_batch;
    if (batch <= 0)
        return zb_fail(err, "the batch size must be positive, got %d", batch);
    for (int i = 0; opts->recompute_stages && i < s->n_stages; i++)
        if (opts->recompute_stages[i] < LLAMA_RC_NONE || opts->recompute_stages[i] > LLAMA_RC_MLP)
            return zb_fail(err, "stage %d: recompute level %d is not 0 (none), 1 (full) or 2 (mlp)",
                           i, opts->recompute_stages[i]);
    /* From here every failure goes to `fail`, which frees the partly built
     * trainer (trainer_free accepts every state) after err is written. */
    trainer *t = NULL;
    int *first = malloc(sizeof *first * (size_t)(s->n_stages + 1));
    if (!first)
        return zb_fail(err, "out of memory");
    if (opts->layers_per_stage ? plan_split(opts->layers_per_stage, m->n_layers, s->n_stages, first, err) != 0
                               : split_layers(m->n_layers, s->n_stages, first, err) != 0)
        goto fail;
    if (!(t = calloc(1, sizeof *t))) {
        zb_fail(err, "out of memory");
        goto fail;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->wmu, NULL);
    pthread_cond_init(&t->wgo, NULL);
    pthread_cond_init(&t->wdone, NULL);
    t->model = *m;
    t->model.vocab = d->vocab;
    t->model.micro_batch = batch;
    t->data = d;
    t->opts = *opts;
    t->opts.layers_per_stage = NULL; /* borrowed for the split only */
    t->opts.recompute_stages = NULL; /* copied into each stage_rt below */
    t->n_stages = s->n_stages;
    t->n_micro = s->n_micro;
    t->n_devices = s->n_devices;
    t->batch = batch;
    t->seq = t->model.seq_len;
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
    t->dev_pool = calloc((size_t)t->n_devices, sizeof *t->dev_pool);
    int pools = t->dev_pool != NULL;
    for (int dv = 0; pools && dv < t->n_devices; dv++)
        pools = (t->dev_pool[dv] = buf_pool_new()) != NULL;
    t->w = calloc((size_t)t->n_devices, sizeof *t->w);
    t->tid = calloc((size_t)t->n_devices, sizeof *t->tid);
    t->act_pool_cap = 2 * t->n_stages * t->n_micro + 4;
    t->act_pool = calloc((size_t)t->act_pool_cap, sizeof *t->act_pool);
    int oom = !t->act_peak || !t->team || !t->w || !t->tid || !t->act_pool || !pools;
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
        zb_fail(err, "out of memory");
        goto fail;
    }
    if ((opts->make_backend ? opts->make_backend(opts->make_backend_ctx, s->n_devices, &t->be, err)
                            : backend_cpu_create(s->n_devices, &t->be, err))
        != 0) {
        t->be = NULL;
        goto fail;
    }
    t->mirrored = t->be->ops->download != NULL;
    zb_transport_pool pool = { trainer_pool_get, trainer_pool_put, t };
    if ((opts->make_transport
             ? opts->make_transport(opts->make_transport_ctx, s, !opts->sync_optimizer, &pool,
                                    &t->tr, err)
             : transport_create(opts->transport, s, !opts->sync_optimizer, &pool, &t->tr, err))
        != 0) {
        t->tr = NULL;
        goto fail;
    }
    kernels_init_threads(1);
    for (int i = 0; i < t->n_stages; i++)
        if (stage_build(t, s, i, first, opts, err) != 0)
            goto fail;
    free(first);
    first = NULL;
    if (sched_has_vocab(s)) {
        zb_vocab_link *link = NULL;
        if (opts->one_device
            && opts->make_vocab_link(opts->make_vocab_link_ctx, opts->device, &link, err) != 0)
            goto fail;
        /* vocab_exec_create owns link from here, failing or not */
        if (vocab_exec_create(s, &t->model, t->batch, t->be, link, &t->ve, err) != 0) {
            t->ve = NULL;
            goto fail;
        }
    }
    const sched_lane *lane0 = &t->sched->dev[t->st[0].device];
    while (t->spec_len < lane0->n_ops && lane0->ops[t->spec_len].kind == OP_F
           && lane0->ops[t->spec_len].stage == 0)
        t->spec_len++;
    if (t->spec_len > 0 && trainer_may_speculate(t) && reserve_rollback(t, err) != 0)
        goto fail;
    rng_seed(&t->rng, opts->seed, 0x5eed0000ULL + opts->data_stream);
    t->stats.tokens_per_step = (long)t->n_micro * (long)tok;
    *out = t;
    return 0;
fail:
    free(first);
    trainer_free(t);
    return -1;
}

int trainer_threads(const trainer *t)
{
    return t->threads;
}

int trainer_stage_count(const trainer *t)
{
    return t->n_stages;
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

const char *trainer_backend_name(const trainer *t)
{
    return t->be->ops->name;
}

int trainer_memory(const trainer *t, size_t *static_bytes, size_t *peak_activation_bytes,
                   zb_err *err)
{
    return t->be->ops->memory(t->be, static_bytes, peak_activation_bytes, err);
}
