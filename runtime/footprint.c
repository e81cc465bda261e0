/*
 * footprint.c: the runtime's memory estimate (footprint.h).  Each part is
 * asked of the code that allocates it: param_stage for the parameters,
 * llama_saved_plan for a stage's saved state, backend_cpu_vocab_bytes for
 * the vocabulary passes.  Everything is computed in doubles so that absurd
 * sizes read from a file cannot overflow.
 *
 * footprint_devices is the prediction the memory ledger checks, class by
 * class and device by device, so its vocabulary part replays what
 * kernels/cpu/backend_cpu_vocab.c charges rather than bounding it: the
 * buffers kept for the run (vocab_static) and a walk of each lane that
 * adds and removes a cell's logits, a partial, an ahead dW and a head
 * input where the backend takes and gives them back.  Two releases come
 * from another thread in one process (a partial at the last stage's dx, a
 * head input at the last T of its micro-batch); the walk puts them where
 * the schedule's dependencies and order place them (activation_walk says
 * where), and bench/README.md has how far the measured peaks move.
 */
#include "runtime/footprint.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "kernels/cpu/backend_cpu_vocab.h"
#include "kernels/cpu/vocab_shard.h"
#include "kernels/cpu/llama.h"
#include "runtime/split.h"
#include "src/param_count.h"

/* The trainer's split as first[0..S] (trainer_create's rule: a plan's
 * split must cover the model and give every middle stage a layer).  0 or
 * -1 with err. */
static int stage_starts(const zb_model *m, int n_stages, const int *layers_per_stage, int *first,
                        zb_err *err)
{
    if (n_stages <= 0)
        return zb_fail(err, "cannot split a model into %d stages", n_stages);
    if (!layers_per_stage)
        return split_layers(m->n_layers, n_stages, first, err);
    first[0] = 0;
    for (int i = 0; i < n_stages; i++) {
        if (layers_per_stage[i] < 0)
            return zb_fail(err, "the split gives stage %d %d layers", i, layers_per_stage[i]);
        first[i + 1] = first[i] + layers_per_stage[i];
    }
    if (first[n_stages] != m->n_layers)
        return zb_fail(err, "the split covers %d layers but model %s has %d", first[n_stages],
                       m->name, m->n_layers);
    return 0;
}

int trainer_footprint(const zb_model *m, int n_stages, const int *layers_per_stage,
                      double *params, double *bytes, zb_err *err)
{
    int *first = malloc(sizeof *first * (size_t)(n_stages > 0 ? n_stages + 1 : 1));
    if (!first)
        return zb_fail(err, "out of memory");
    if (stage_starts(m, n_stages, layers_per_stage, first, err) != 0) {
        free(first);
        return -1;
    }
    double total = 0, stage0 = 0;
    for (int i = 0; i < n_stages; i++) {
        /* the kernels' checks of the model and the split (a tensor table,
         * no weights), and the count they lay out, which is param_count.h's */
        llama_stage st;
        int head = i == n_stages - 1 ? LLAMA_HEAD_FULL : LLAMA_HEAD_NONE;
        if (llama_stage_init(&st, m, first[i], first[i + 1], i == 0, head, err) != 0) {
            free(first);
            return zb_wrap(err, "stage %d: ", i);
        }
        double n = param_stage(m, first[i], first[i + 1], i == 0, head);
        assert(n == (double)llama_stage_num_params(&st));
        llama_stage_free(&st);
        total += n;
        stage0 = i == 0 ? n : stage0;
    }
    free(first);
    *params = total;
    /* and post-validation's copy of stage 0's parameters (trainer_ops.c),
     * which a trainer that never speculates does not hold */
    *bytes = (total * TRAINER_PARAM_COPIES + stage0) * sizeof(float);
    return 0;
}

/* Rows of one micro-batch, B·T. */
#define N_ROWS(m) ((double)(m)->micro_batch * (m)->seq_len)

/* The shape of s's vocabulary passes for model m (sched_has_vocab). */
static zb_vocab_shape vocab_shape(const sched_t *s, const zb_model *m)
{
    zb_vocab_shape v = { .variant = s->vocab.variant, .shards = s->n_devices,
                         .micro = s->n_micro, .batch = m->micro_batch, .seq = m->seq_len,
                         .d = m->d_model, .vocab = m->vocab, .local = -1 };
    return v;
}

/* What the ledger's walk (vocab_ledger_walk) finds on one device: the
 * peaks of the classes that come and go during a step, and of their sum
 * with the saved activations. */
typedef struct ledger_peaks {
    double vocab;   /* vocab_cells: logits, partials and ahead dWs in use */
    double comm;    /* comm_buffers: head inputs X held */
    double dynamic; /* activations + both of the above, at the same moment */
} ledger_peaks;

/* The vocabulary passes' buffers a CPU trainer holds on device `dev` for
 * the whole run, by class (backend_cpu_vocab.c's charges, from the first
 * step on): each shard's copy of the head's columns and its dW, and every
 * cell's statistics (vocab_cells); Vocab-1's local softmax and each T's
 * lse, and on the last stage's device dx's lse and rescale weights
 * (workspace). */
static void vocab_static(const sched_t *s, const zb_vocab_shape *vs, int dev, double *vocab,
                         double *workspace)
{
    const double f = sizeof(float), N = (double)vs->batch * vs->seq;
    double v = vshard_begin(dev + 1, vs->shards, vs->vocab) - vshard_begin(dev, vs->shards, vs->vocab);
    *vocab = 2 * vs->d * v * f + vs->micro * N * (2 * f + sizeof(double));
    *workspace = (vs->variant == SCHED_VOCAB_1 ? N * v * f : 0) + N * f;
    if (dev == s->stage_device[s->n_stages - 1])
        *workspace += N * (f + vs->shards * sizeof(double));
}

/* footprint_activation_peaks, with the vocabulary cells (S to T) counted
 * when with_cells; with `ledger` (a vocabulary plan; [n_devices]) also the
 * ledger's dynamic classes as backend_cpu_vocab.c charges them in one
 * process, walked in the same lane order:
 *
 *   logits of shard d   + at S(d, j), − at T(d, j);
 *   partial (d, j)      + at S(d, j) (Vocab-1) or T(d, j) (Vocab-2),
 *                       − at dx(j), the start of the last stage's B of j:
 *                       on the last stage's device its own B; on another
 *                       device at its first B of j, which needs that dx
 *                       (the latest the release can come; it comes sooner
 *                       when dx runs before, which the ledger then shows
 *                       as a lower peak);
 *   ahead dW of shard d + at a T(d, j) out of micro-batch order, − when
 *                       its turn comes (cpu_vocab_t's rule);
 *   head input X(j)     on the last stage's device, + at the end of its F
 *                       of j, − at the end of its own T(·, j), which in
 *                       the generated plans is the last of j (another
 *                       shard's T of j running later holds X longer: the
 *                       ledger then shows more), at the latest at the
 *                       start of its B of j under Vocab-2 (dx waits for
 *                       every T of j).
 */
static int activation_walk(const sched_t *s, const zb_model *m, const int *layers_per_stage,
                           const int *recompute_stages, int with_cells, double *after_op,
                           double *in_op, int *in_flight, ledger_peaks *ledger, zb_err *err)
{
    int S = s->n_stages, vocab = sched_has_vocab(s);
    int *first = malloc(sizeof *first * (size_t)(S + 1));
    llama_saved_sizes *sz = calloc((size_t)S, sizeof *sz);
    int rc = first && sz ? 0 : zb_fail(err, "out of memory");
    if (rc == 0)
        rc = stage_starts(m, S, layers_per_stage, first, err);
    /* each stage's saved state as the trainer makes it: the last stage of
     * a vocabulary plan keeps only the final norm's slots */
    for (int i = 0; i < S && rc == 0; i++) {
        int head = i < S - 1 ? LLAMA_HEAD_NONE : vocab ? LLAMA_HEAD_NORM_ONLY : LLAMA_HEAD_FULL;
        llama_stage st;
        if ((rc = llama_stage_init(&st, m, first[i], first[i + 1], i == 0, head, err)) != 0) {
            zb_wrap(err, "stage %d: ", i);
            break;
        }
        int level = recompute_stages ? recompute_stages[i] : LLAMA_RC_NONE;
        if (llama_saved_plan(&st, m->micro_batch, level, &sz[i]) != 0)
            rc = zb_fail(err, "out of memory");
        llama_stage_free(&st);
    }
    zb_vocab_shape vs = vocab_shape(s, m);
    int most = 0, M = s->n_micro;
    /* the ledger's walk: per micro-batch what this device holds of it */
    char *has_partial = calloc((size_t)M, 1), *has_x = calloc((size_t)M, 1);
    char *ahead = calloc((size_t)M + 1, 1);
    if (rc == 0 && (!has_partial || !has_x || !ahead))
        rc = zb_fail(err, "out of memory");
    for (int dev = 0; dev < s->n_devices && rc == 0; dev++) {
        const sched_lane *l = &s->dev[dev];
        double now = 0, after = 0, inside = 0;
        double cell = vocab && with_cells ? backend_cpu_vocab_cell_bytes(&vs, dev) : 0;
        /* the last stage's device keeps its own partial from its S
         * (Vocab-1) or T (Vocab-2) to that stage's B (vocab_exec.h); a
         * vocabulary buffer, so counted with the cells */
        int keeps = vocab && with_cells && dev == s->stage_device[S - 1];
        double partial = (double)m->micro_batch * m->seq_len * m->d_model * sizeof(float);
        int v1 = s->vocab.variant == SCHED_VOCAB_1;
        int count = 0;
        /* the ledger's walk (ledger != NULL): vocab_cells and comm_buffers
         * in use now, their peaks, and the peak of their sum with the
         * activations (act, without the cells) */
        int is_last = dev == s->stage_device[S - 1], next_t = 0;
        double logits = vocab ? N_ROWS(m) * (vshard_begin(dev + 1, vs.shards, vs.vocab)
                                             - vshard_begin(dev, vs.shards, vs.vocab))
                                    * sizeof(float) : 0;
        double cols = vocab ? logits / N_ROWS(m) * m->d_model : 0;
        double act = 0, voc = 0, com = 0;
        ledger_peaks lp = { 0, 0, 0 };
        if (ledger) {
            memset(has_partial, 0, (size_t)M);
            memset(has_x, 0, (size_t)M);
            memset(ahead, 0, (size_t)M + 1);
        }
#define SAMPLE(a_) \
    do { \
        lp.vocab = voc > lp.vocab ? voc : lp.vocab; \
        lp.comm = com > lp.comm ? com : lp.comm; \
        lp.dynamic = (a_) + voc + com > lp.dynamic ? (a_) + voc + com : lp.dynamic; \
    } while (0)
        for (int k = 0; k < l->n_ops; k++) {
            sched_op op = l->ops[k];
            const llama_saved_sizes *z = op.kind == OP_S || op.kind == OP_T ? NULL : &sz[op.stage];
            switch ((op_kind)op.kind) {
            case OP_F:
                /* F holds every forward slot before the recompute level
                 * drops what it does not keep */
                inside = now + (double)z->in_f > inside ? now + (double)z->in_f : inside;
                now += (double)z->after_f;
                count++;
                SAMPLE(act + (double)z->in_f);
                act += (double)z->after_f;
                if (ledger && vocab && op.stage == S - 1) { /* put_x after the forward */
                    com += partial;
                    has_x[op.mb] = 1;
                }
                SAMPLE(act);
                break;
            case OP_B:
            case OP_BW:
                if (keeps && op.stage == S - 1)
                    now -= partial; /* dx sums the partials before B runs */
                if (ledger && vocab && has_partial[op.mb]) {
                    voc -= partial; /* dx(j) has summed it, by the start of this B */
                    has_partial[op.mb] = 0;
                }
                if (ledger && vocab && is_last && op.stage == S - 1 && !v1 && has_x[op.mb]) {
                    com -= partial; /* Vocab-2's dx waits for every T of j */
                    has_x[op.mb] = 0;
                }
                SAMPLE(act - (double)z->after_f + (double)z->in_b);
                act += (double)z->after_b - (double)z->after_f;
                if (op.kind == OP_BW)
                    act -= (double)z->after_b;
                inside = now - (double)z->after_f + (double)z->in_b > inside
                             ? now - (double)z->after_f + (double)z->in_b : inside;
                now += (double)z->after_b - (double)z->after_f;
                if (op.kind == OP_BW) {
                    now -= (double)z->after_b;
                    count--;
                }
                break;
            case OP_W:
                now -= (double)z->after_b;
                act -= (double)z->after_b;
                count--;
                break;
            case OP_S:
                now += cell + (keeps && v1 ? partial : 0);
                if (ledger) {
                    voc += logits + (v1 ? partial : 0);
                    has_partial[op.mb] = (char)v1;
                }
                break;
            case OP_T:
                now += (keeps && !v1 ? partial : 0) - cell;
                if (ledger) {
                    /* inside T: its partial (Vocab-2) and an ahead dW
                     * are taken while its logits are still held */
                    voc += (v1 ? 0 : partial) + (op.mb != next_t ? cols : 0);
                    has_partial[op.mb] = has_partial[op.mb] || !v1;
                    SAMPLE(act);
                    if (op.mb != next_t) {
                        ahead[op.mb] = 1;
                    } else {
                        for (next_t++; next_t < M && ahead[next_t]; next_t++) {
                            ahead[next_t] = 0;
                            voc -= cols;
                        }
                    }
                    voc -= logits;
                    if (is_last && has_x[op.mb]) {
                        com -= partial;
                        has_x[op.mb] = 0;
                    }
                }
                break;
            }
            if (ledger)
                SAMPLE(act);
            after = now > after ? now : after;
            most = count > most ? count : most;
        }
#undef SAMPLE
        if (ledger)
            ledger[dev] = lp;
        if (after_op)
            after_op[dev] = after;
        if (in_op)
            in_op[dev] = inside > after ? inside : after;
    }
    if (rc == 0 && in_flight)
        *in_flight = most;
    free(has_partial);
    free(has_x);
    free(ahead);
    free(first);
    free(sz);
    return rc;
}

int footprint_activation_peaks(const sched_t *s, const zb_model *m, const int *layers_per_stage,
                               const int *recompute_stages, double *after_op, double *in_op,
                               int *in_flight, zb_err *err)
{
    return activation_walk(s, m, layers_per_stage, recompute_stages, 1, after_op, in_op,
                           in_flight, NULL, err);
}

/* The most spare weight-gradient buffers stage `stage` holds at once: a
 * W that runs ahead of micro-batch order writes into a spare, which is
 * added and kept for reuse when its turn comes (trainer_ops.c's
 * op_backward_w, whose rule this replays over the stage's ops in its
 * device's lane order).  -1 when out of memory. */
static int spare_grads_peak(const sched_t *s, int stage)
{
    const sched_lane *l = &s->dev[s->stage_device[stage]];
    char *held = calloc((size_t)s->n_micro + 1, 1);
    if (!held)
        return -1;
    int next = 0, now = 0, most = 0;
    for (int k = 0; k < l->n_ops; k++) {
        sched_op op = l->ops[k];
        if (op.stage != stage || (op.kind != OP_W && op.kind != OP_BW))
            continue;
        if (op.mb == next) {
            next++;
            while (next < s->n_micro && held[next]) {
                held[next++] = 0;
                now--;
            }
        } else {
            held[op.mb] = 1;
            now++;
            most = now > most ? now : most;
        }
    }
    free(held);
    return most;
}

int footprint_devices(const sched_t *s, const zb_model *m, const int *layers_per_stage,
                      const int *recompute_stages, int speculate, footprint_device *out,
                      zb_err *err)
{
    int S = s->n_stages, P = s->n_devices;
    memset(out, 0, sizeof *out * (size_t)P);
    int vocab = sched_has_vocab(s);
    int *first = malloc(sizeof *first * (size_t)(S + 1));
    double *in_op = calloc((size_t)P, sizeof *in_op);
    ledger_peaks *lp = vocab ? calloc((size_t)P, sizeof *lp) : NULL;
    int rc = first && in_op && (lp || !vocab) ? 0 : zb_fail(err, "out of memory");
    if (rc == 0)
        rc = stage_starts(m, S, layers_per_stage, first, err);
    if (rc == 0)
        rc = activation_walk(s, m, layers_per_stage, recompute_stages, 0, NULL, in_op, NULL, lp,
                             err);
    const double f = sizeof(float);
    for (int i = 0; i < S && rc == 0; i++) {
        /* the stage's layout owns the head even when the vocabulary
         * passes run it (trainer_create's stage_build) */
        int head = i == S - 1 ? LLAMA_HEAD_FULL : LLAMA_HEAD_NONE;
        double n = param_stage(m, first[i], first[i + 1], i == 0, head);
        int spares = spare_grads_peak(s, i);
        if (spares < 0) {
            rc = zb_fail(err, "out of memory");
            break;
        }
        footprint_device *o = &out[s->stage_device[i]];
        o->bytes[MEM_PARAMETERS] += n * f;
        o->bytes[MEM_GRADIENTS] += (1.0 + spares) * n * f;
        o->bytes[MEM_OPTIMIZER] += 2.0 * n * f;
        /* post-validation's one copy: stage 0's parameters, under the
         * step it runs speculatively (trainer_ops.c) */
        if (i == 0 && speculate)
            o->bytes[MEM_ROLLBACK] += n * f;
    }
    zb_vocab_shape vs = vocab_shape(s, m);
    for (int d = 0; d < P && rc == 0; d++) {
        footprint_device *o = &out[d];
        o->bytes[MEM_ACTIVATIONS] = in_op[d];
        /* the static classes are held throughout, the activations peak
         * on top of them */
        for (int c = 0; c < MEM_CLASSES; c++)
            o->total += o->bytes[c];
        if (!vocab)
            continue;
        /* a vocabulary plan: the passes' buffers held for the run come on
         * top too, but its cells, partials and head inputs come and go
         * with the activations, so the device's peak is the walk's peak
         * of their sum, not the sum of their peaks */
        double keep_vocab, keep_ws;
        vocab_static(s, &vs, d, &keep_vocab, &keep_ws);
        o->bytes[MEM_VOCAB] = keep_vocab + lp[d].vocab;
        o->bytes[MEM_COMM] = lp[d].comm;
        o->bytes[MEM_WORKSPACE] = keep_ws;
        o->total += keep_vocab + keep_ws + lp[d].dynamic - in_op[d];
    }
    if (rc != 0)
        memset(out, 0, sizeof *out * (size_t)P);
    free(first);
    free(in_op);
    free(lp);
    return rc;
}

int footprint_estimate(const sched_t *s, const zb_model *m, const int *layers_per_stage,
                       const int *recompute_stages, size_t n_tokens, int replicas,
                       footprint *out, zb_err *err)
{
    memset(out, 0, sizeof *out);
    double *in_op = calloc((size_t)s->n_devices, sizeof *in_op);
    if (!in_op)
        return zb_fail(err, "out of memory");
    int rc = trainer_footprint(m, s->n_stages, layers_per_stage, &out->params, &out->param_bytes,
                               err);
    if (rc == 0)
        rc = footprint_activation_peaks(s, m, layers_per_stage, recompute_stages, NULL, in_op,
                                        &out->in_flight, err);
    if (rc != 0) {
        free(in_op);
        memset(out, 0, sizeof *out);
        return -1;
    }
    const double f = sizeof(float);
    double N = (double)m->micro_batch * m->seq_len; /* tokens per micro-batch */
    double d = m->d_model, q = (double)(m->d_model / m->n_heads) * m->n_heads, ff = m->d_ff;
    for (int dev = 0; dev < s->n_devices; dev++)
        /* the kernels' per-op scratch (normed input, attention, MLP) */
        out->activations += in_op[dev] + N * (d + q + ff) * f;
    free(in_op);
    if (sched_has_vocab(s)) {
        zb_vocab_shape vs = vocab_shape(s, m);
        out->activations += backend_cpu_vocab_bytes(&vs);
    }
    out->messages = 2.0 * s->n_micro * (s->n_stages - 1) * N * d * f;
    out->data = (double)n_tokens * (1 + sizeof(int32_t)) + 2.0 * s->n_micro * N * sizeof(int32_t);
    out->total = FOOTPRINT_SLACK
                 * ((out->param_bytes + out->activations + out->messages) * (replicas > 0 ? replicas : 1)
                    + out->data);
    return 0;
}

double host_available_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                fclose(f);
                return (double)kb * 1024.0;
            }
        }
        fclose(f);
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}

double footprint_thread_address_space(void)
{
    const double blas_buffer = 128.0 * 1024 * 1024 + 4096, arena = 64.0 * 1024 * 1024;
    double stack = 32.0 * 1024 * 1024; /* glibc's default when RLIMIT_STACK is unlimited */
    struct rlimit rl;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        stack = (double)rl.rlim_cur;
    return blas_buffer + arena + stack;
}

double host_address_space_left(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return -1;
    double used = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "VmSize: %llu kB", &kb) == 1) {
                used = (double)kb * 1024.0;
                break;
            }
        fclose(f);
    }
    double left = (double)rl.rlim_cur - used;
    return left > 0 ? left : 0;
}
