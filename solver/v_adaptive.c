/*
 * v_adaptive.c: the zero-bubble authors' adaptive V-ZB scheduler, ported
 * to C so that zbsched reproduces the ZB-V column of the zero-bubble
 * paper's Table 8 (arXiv version) from its per-chunk profiles.
 *
 * The original is PipelineGraph.try_v_schedule / get_v_schedule in
 * megatron/core/pipeline_parallel/v_schedule.py of
 * sail-sg/zero-bubble-pipeline-parallelism; the arxiv branch's
 * efficiency.py (arxiv_bubble_rates) calls it with the per-chunk T_F, T_B,
 * T_W, T_comm, memory deltas dF = 34h + 5as, dW = -32h, dB = -(dF + dW)
 * and its default limit of 2p dF per device, and prints
 * max_bubble / (2m(T_F + T_B + T_W) + max_bubble).  This file follows the
 * same construction step by step (same order of placements, same ties) so
 * that the schedule, not just its rate, is the authors' one (checked op
 * for op against their code on Table 8 and small cases; docs/solver.md):
 *
 *   1. Warm-up: one first-chunk F per device; then, from the last device
 *      up, more first-chunk F's on devices 0..i while device i would
 *      otherwise wait for its first second-chunk F (and memory allows,
 *      keeping room for 2i + 2 more F's), then device i's first
 *      second-chunk F; then the devices below catch up with F's of
 *      alternating chunks until each has as many as the one above.
 *   2. 2m rounds.  In each, every device places one B: first the devices
 *      whose next B is a first-chunk one, last device first, then those
 *      whose next B is a second-chunk one ("B chunk 0" in the authors'
 *      numbering: the first B of the backward pass), device 0 first.
 *      A device's next B is first-chunk when its second-chunk B's are
 *      ahead and either it is the last device, the gradient from device
 *      i+1 has been computed, or its second-chunk B's are all done.
 *      Then every device places at
 *      most one F (second chunk when its input is there, else the first
 *      chunk when its input is there).  Before each B or F a device runs
 *      pending W's while the W ends before the op's input arrives
 *      ("fills the bubble"), and one more when its idle would exceed its
 *      bubble allowance (knobs fill_b / fill_f: whether that extra W is
 *      allowed before a first-chunk B / before an F); before an F it also
 *      runs W's until the F fits in memory.
 *   3. The remaining W's.
 *
 * The allowance: a device's accumulated bubble may grow up to the larger
 * of the largest bubble of all devices so far and, on a rerun, how much
 * less bubble it had than the worst device in the previous run (its
 * "approved" bubble).  A
 * run is repeated with the previous run's per-device bubbles while that
 * strictly lowers the largest bubble, and the best run of the chain is
 * kept (the authors' recursion, unrolled).  get_v_schedule tries the four
 * (fill_b, fill_f) settings and keeps the first with the smallest largest
 * bubble; so does v_adaptive_sched.
 *
 * Times are computed as the authors do: an op ends at
 * max(device free + cost, input end + T_comm + cost), i.e. the ASAP
 * timing of the per-device lists, so solver_eval of the result gives the
 * same largest span, and (largest span - busy) / largest span is the
 * printed rate.  Where the Python reads end_time[fa_id] with fa_id = -1
 * (an op whose input is on its own device) it reads the last element of
 * its table (the last W of the last device's first chunk, -1 until placed);
 * the port keeps that quirk, though it changes nothing on Table 8.
 *
 * Where the authors' code would stop on an assertion (an op placed before
 * its input, memory over the limit with no W pending, more ops than
 * micro-batches; it happens for small m or tight limits) the run fails:
 * a failed rerun ends the chain, a failed first run drops that knob
 * setting, and -1 is returned only when all four fail.  Generalisations:
 * the limit may differ per device (the Python has one), and costs must be
 * the same on every stage (as in the Python).
 *
 * Workload: p up to 32, m up to 256 (Table 8's largest, 49,152 ops): four
 * settings times a chain of reruns (two on Table 8), each O(ops * p)
 * because the allowance scans all devices' bubbles: about 60 ms for all
 * eight runs at p=32, m=256 on the 2-core VM.
 */
#include "solver/solver.h"
#include "solver/solver_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Op categories and chunk numbering as in the authors' code: cat 0 = F,
 * 1 = B, 2 = W; for F chunk 0 is the first chunk (virtual stage d on
 * device d), for B and W chunk 0 is the second chunk (virtual stage
 * 2p-1-d), whose B comes first. */
enum { VZ_F = 0, VZ_B = 1, VZ_W = 2 };

/* Most runs in one chain of reruns (see the recursion in the file comment). */
#define VZ_MAX_RERUNS 64

/* Working state of one try_v_schedule run. */
typedef struct vz_run {
    int n;                  /* devices (the authors' stages) */
    int m;                  /* micro-batches */
    double cost[3];         /* F, B, W time of one chunk op */
    double memd[3];         /* F, B, W activation delta of one chunk op */
    double c;               /* T_comm between neighbouring devices */
    const double *max_mem;  /* [n] activation limit per device */
    const double *approved; /* [n] previous run's bubbles, or NULL (first run) */
    double max_approved;    /* largest of approved, -1 on the first run */
    int fill_f, fill_b;     /* knobs: extra W before an F / a first-chunk B */
    double *end_time;       /* [6nm] end of each op by vz_id, -1 until placed */
    int *count;             /* [n][6] ops placed per (cat, chunk) */
    double *cur_time;       /* [n] time each device is free */
    double *mem;            /* [n] activation memory held */
    double *bubble;         /* [n] idle time since the device's first F */
    unsigned char *wq;      /* [n][2m] chunks of pending W's, FIFO */
    int *wq_head, *wq_tail; /* [n] FIFO bounds into wq */
    sched_t *out;           /* lists being built (a clone of the template) */
} vz_run;

/* The authors' get_id: index of op (cat, chunk, device, micro-batch). */
static long vz_id(const vz_run *r, int cat, int chunk, int dev, int mb)
{
    return (long)cat * 2 * r->n * r->m + (long)chunk * r->n * r->m + (long)dev * r->m + mb;
}

/* end_time[id], reading the last element for id -1 as Python does. */
static double vz_end(const vz_run *r, long id)
{
    return r->end_time[id >= 0 ? id : 6L * r->n * r->m - 1];
}

/* need <= limit, with the rounding slack the other V candidates allow. */
static int vz_fits(double need, double limit)
{
    return need <= limit + 1e-9 * fmax(1, fabs(limit));
}

/* get_max_stage_bubble(dev): the bubble a device may reach; dev < 0: the
 * largest bubble. */
static double vz_max_bubble(const vz_run *r, int dev)
{
    double mx = 0;
    for (int i = 0; i < r->n; i++)
        mx = fmax(mx, r->bubble[i]);
    if (dev >= 0)
        mx = fmax(mx, r->max_approved - (r->approved ? r->approved[dev] : -1));
    return mx;
}

/* Places the next op (cat, chunk) of device dev; 0, or -1 where the
 * authors' code asserts (see the file comment) or out of memory. */
static int vz_put(vz_run *r, int cat, int chunk, int dev)
{
    int *cnt = &r->count[dev * 6 + cat * 2 + chunk];
    int j = *cnt;
    double no_bubble = r->cur_time[dev] + r->cost[cat], t = no_bubble;
    if (j >= r->m || !vz_fits(r->mem[dev] + r->memd[cat], r->max_mem[dev]))
        return -1;
    /* The op before it on the same device must be placed. */
    if (cat > 0 || chunk > 0) {
        int last = cat * 2 + chunk - 1;
        long id = cat < 2 ? vz_id(r, last / 2, last % 2, dev, j) : vz_id(r, VZ_B, chunk, dev, j);
        if (r->end_time[id] < 0)
            return -1;
    }
    /* Its input from the neighbouring device: chunk 1 flows up from
     * dev + 1, chunk 0 down from dev - 1. */
    if (cat < 2) {
        int from = chunk == 1 ? dev + 1 : dev - 1;
        if (from >= 0 && from < r->n) {
            double e = r->end_time[vz_id(r, cat, chunk, from, j)];
            if (e < 0)
                return -1;
            t = fmax(t, e + r->c + r->cost[cat]);
        }
    }
    if (r->count[dev * 6] > 0)
        r->bubble[dev] += t - no_bubble;
    r->end_time[vz_id(r, cat, chunk, dev, j)] = t;
    r->cur_time[dev] = t;
    r->mem[dev] += r->memd[cat];
    /* Virtual stage: F chunk 0 and B/W chunk 1 are the first chunk. */
    int first_chunk = cat == VZ_F ? chunk == 0 : chunk == 1;
    int stage = first_chunk ? dev : 2 * r->n - 1 - dev;
    static const op_kind kinds[3] = { OP_F, OP_B, OP_W };
    if (sched_push(r->out, dev, kinds[cat], stage, j) != 0)
        return -1;
    if (cat == VZ_B)
        r->wq[(long)dev * 2 * r->m + r->wq_tail[dev]++] = (unsigned char)chunk;
    (*cnt)++;
    return 0;
}

/* put_w: the oldest pending W of dev. */
static int vz_put_w(vz_run *r, int dev)
{
    if (r->wq_head[dev] >= r->wq_tail[dev])
        return -1;
    int chunk = r->wq[(long)dev * 2 * r->m + r->wq_head[dev]++];
    return vz_put(r, VZ_W, chunk, dev);
}

static int vz_pending(const vz_run *r, int dev)
{
    return r->wq_head[dev] < r->wq_tail[dev];
}

/* Before placing an op whose input comes from op fa_id (-1: none on
 * another device), on dev: W's that end before the input arrives, then
 * one more when the idle would exceed dev's allowance and `extra`. */
static int vz_fill(vz_run *r, int dev, long fa_id, int extra)
{
    while (vz_pending(r, dev) && fa_id >= 0
           && r->end_time[fa_id] + r->c >= r->cur_time[dev] + r->cost[VZ_W])
        if (vz_put_w(r, dev) != 0)
            return -1;
    if (vz_pending(r, dev)
        && vz_end(r, fa_id) + r->c - r->cur_time[dev] > vz_max_bubble(r, dev) - r->bubble[dev] && extra)
        return vz_put_w(r, dev);
    return 0;
}

/* Warm-up (step 1 of the file comment). */
static int vz_warmup(vz_run *r)
{
    int n = r->n, m = r->m;
    for (int i = 0; i < n; i++)
        if (vz_put(r, VZ_F, 0, i) != 0)
            return -1;
    for (int i = n - 1; i >= 0; i--) {
        if (i < n - 1) {
            double tmp = r->end_time[vz_id(r, VZ_F, 1, i + 1, 0)] + r->c;
            while (vz_fits(r->mem[i] + r->memd[VZ_F] * (2 + i * 2), r->max_mem[i])
                   && r->cur_time[i] + r->cost[VZ_F] <= tmp && r->count[i * 6] < m - i)
                for (int j = 0; j <= i; j++)
                    if (vz_put(r, VZ_F, 0, j) != 0)
                        return -1;
        }
        if (vz_put(r, VZ_F, 1, i) != 0)
            return -1;
    }
    int chunk = 0;
    for (int i = 1; i < n; i++) {
        const int *c = &r->count[i * 6], *up = &r->count[(i - 1) * 6];
        while (c[0] + c[1] < up[0] + up[1] || (c[1] <= up[1] && up[1] < m)) {
            for (int j = n - 1; j >= i; j--)
                if (r->count[j * 6 + chunk] < m && vz_put(r, VZ_F, chunk, j) != 0)
                    return -1;
            chunk = 1 - chunk;
        }
    }
    return 0;
}

/* One round of step 2: a B on every device, then at most one F each. */
static int vz_round(vz_run *r, int *order)
{
    int n = r->n, m = r->m;
    for (int i = 0; i < n; i++)
        while (!vz_fits(r->mem[i] + r->memd[VZ_B], r->max_mem[i]))
            if (vz_put_w(r, i) != 0)
                return -1;
    /* Which chunk's B each device places: order[] collects the devices
     * whose next B is a first-chunk one ("b1", the authors' B chunk 1),
     * placed first and last device first; b0[] the others (second-chunk
     * B's), placed after them, device 0 first. */
    int n_b1 = 0, n_b0 = 0;
    int *b0 = order + n; /* scratch: [n] */
    for (int i = 0; i < n; i++) {
        const int *c = &r->count[i * 6];
        int b1;
        if (c[3] >= c[2])
            b1 = 0;
        else if (i == n - 1)
            b1 = 1;
        else
            b1 = r->end_time[vz_id(r, VZ_B, 1, i + 1, c[3])] >= 0 || c[2] >= m;
        if (b1)
            order[n_b1++] = i;
        else
            b0[n_b0++] = i;
    }
    for (int x = n_b1 - 1; x >= 0; x--) {
        int i = order[x];
        long fa = i < n - 1 ? vz_id(r, VZ_B, 1, i + 1, r->count[i * 6 + 3]) : -1;
        if (vz_fill(r, i, fa, 1) != 0 || vz_put(r, VZ_B, 1, i) != 0)
            return -1;
    }
    for (int x = 0; x < n_b0; x++) {
        int i = b0[x];
        long fa = i > 0 ? vz_id(r, VZ_B, 0, i - 1, r->count[i * 6 + 2]) : -1;
        if (vz_fill(r, i, fa, r->fill_b) != 0 || vz_put(r, VZ_B, 0, i) != 0)
            return -1;
    }
    for (int i = 0; i < n; i++) {
        const int *c = &r->count[i * 6];
        if (c[1] >= m)
            continue;
        int item = -1;
        if (c[1] >= c[0])
            item = 0;
        else if (i == n - 1)
            item = 1;
        else if (r->end_time[vz_id(r, VZ_F, 1, i + 1, c[1])] >= 0)
            item = 1;
        else if (c[0] < m && (i == 0 || r->end_time[vz_id(r, VZ_F, 0, i - 1, c[0])] >= 0))
            item = 0;
        if (item < 0)
            continue;
        while (!vz_fits(r->mem[i] + r->memd[VZ_F], r->max_mem[i]))
            if (vz_put_w(r, i) != 0)
                return -1;
        long fa = -1;
        if (item == 0 && i > 0)
            fa = vz_id(r, VZ_F, 0, i - 1, c[0]);
        if (item == 1 && i < n - 1)
            fa = vz_id(r, VZ_F, 1, i + 1, c[1]);
        if (vz_fill(r, i, fa, r->fill_f) != 0 || vz_put(r, VZ_F, item, i) != 0)
            return -1;
    }
    return 0;
}

/* try_v_schedule without its recursion: fills r->out and r->bubble.
 * 0, or -1 where the authors' code would assert. */
static int vz_try(vz_run *r, int *order)
{
    int n = r->n, m = r->m;
    for (long i = 0; i < 6L * n * m; i++)
        r->end_time[i] = -1;
    memset(r->count, 0, sizeof(int) * 6 * (size_t)n);
    memset(r->cur_time, 0, sizeof(double) * (size_t)n);
    memset(r->mem, 0, sizeof(double) * (size_t)n);
    memset(r->bubble, 0, sizeof(double) * (size_t)n);
    memset(r->wq_head, 0, sizeof(int) * (size_t)n);
    memset(r->wq_tail, 0, sizeof(int) * (size_t)n);
    for (int d = 0; d < n; d++)
        r->out->dev[d].n_ops = 0;
    if (vz_warmup(r) != 0)
        return -1;
    for (int k = 0; k < 2 * m; k++)
        if (vz_round(r, order) != 0)
            return -1;
    for (int i = 0; i < n; i++) {
        while (vz_pending(r, i))
            if (vz_put_w(r, i) != 0)
                return -1;
        for (int x = 0; x < 6; x++)
            if (r->count[i * 6 + x] != m)
                return -1;
    }
    return 0;
}

int v_adaptive_sched(const sched_t *tmpl, const double *limit, sched_t **out, double *cost, zb_err *err)
{
    int n = tmpl->n_devices, m = tmpl->n_micro;
    if (tmpl->n_stages != 2 * n)
        return zb_fail(err, "adaptive V-ZB needs a V placement (2 stages per device)");
    const stage_cost *c0 = &tmpl->cost[0];
    for (int s = 0; s < 2 * n; s++) {
        const stage_cost *c = &tmpl->cost[s];
        if (c->t_f != c0->t_f || c->t_b != c0->t_b || c->t_w != c0->t_w || c->d_f != c0->d_f
            || c->d_b != c0->d_b || c->d_w != c0->d_w)
            return zb_fail(err, "adaptive V-ZB needs the same costs on every stage");
    }
    vz_run r = { .n = n, .m = m, .cost = { c0->t_f, c0->t_b, c0->t_w },
                 .memd = { c0->d_f, c0->d_b, c0->d_w }, .c = tmpl->t_comm, .max_mem = limit };
    long cells = 6L * n * m;
    r.end_time = malloc(sizeof(double) * (size_t)cells);
    r.count = malloc(sizeof(int) * 6 * (size_t)n);
    r.cur_time = malloc(sizeof(double) * (size_t)n);
    r.mem = malloc(sizeof(double) * (size_t)n);
    r.bubble = malloc(sizeof(double) * (size_t)n);
    r.wq = malloc((size_t)n * 2 * (size_t)m);
    r.wq_head = malloc(sizeof(int) * (size_t)n);
    r.wq_tail = malloc(sizeof(int) * (size_t)n);
    int *order = malloc(sizeof(int) * 2 * (size_t)n);
    double *approved = malloc(sizeof(double) * (size_t)n);
    sched_t *best = NULL;
    double best_bubble = INFINITY;
    int rc = -1;
    if (!r.end_time || !r.count || !r.cur_time || !r.mem || !r.bubble || !r.wq || !r.wq_head
        || !r.wq_tail || !order || !approved) {
        zb_fail(err, "out of memory in the adaptive V-ZB scheduler");
        goto out;
    }
    /* get_v_schedule's order: fill_b True, False; inside, fill_f True, False. */
    for (int knob = 0; knob < 4; knob++) {
        r.fill_b = knob < 2;
        r.fill_f = knob % 2 == 0;
        r.approved = NULL;
        r.max_approved = -1;
        sched_t *chain_best = NULL;
        double chain_bubble = INFINITY;
        /* The recursion: rerun with this run's bubbles approved while the
         * largest bubble strictly drops; keep the smallest of the chain.
         * Capped (the Python would hit its recursion limit near 1000); on
         * Table 8 the rerun never improves: two runs per setting. */
        for (int rerun = 0; rerun < VZ_MAX_RERUNS; rerun++) {
            r.out = sched_clone(tmpl);
            if (!r.out) {
                sched_free(chain_best);
                zb_fail(err, "out of memory in the adaptive V-ZB scheduler");
                goto out;
            }
            if (vz_try(&r, order) != 0) {
                sched_free(r.out);
                break;
            }
            double mb = vz_max_bubble(&r, -1);
            int improved = mb < chain_bubble;
            if (improved) {
                sched_free(chain_best);
                chain_best = r.out;
                chain_bubble = mb;
            } else {
                sched_free(r.out);
            }
            r.out = NULL;
            /* A rerun happens after the first run, then while improving. */
            if (r.approved && !(mb < r.max_approved))
                break;
            memcpy(approved, r.bubble, sizeof(double) * (size_t)n);
            r.approved = approved;
            r.max_approved = mb;
        }
        if (chain_best && chain_bubble < best_bubble) {
            sched_free(best);
            best = chain_best;
            best_bubble = chain_bubble;
        } else {
            sched_free(chain_best);
        }
    }
    if (!best) {
        zb_fail(err, "adaptive V-ZB: no setting completes under the memory limit (p=%d, m=%d)", n, m);
        goto out;
    }
    solver_eval_result ev;
    if (solver_eval(best, &ev, NULL, err) != 0)
        goto out;
    *out = best;
    *cost = ev.cost;
    best = NULL;
    rc = 0;
out:
    sched_free(best);
    free(r.end_time);
    free(r.count);
    free(r.cur_time);
    free(r.mem);
    free(r.bubble);
    free(r.wq);
    free(r.wq_head);
    free(r.wq_tail);
    free(order);
    free(approved);
    return rc;
}
