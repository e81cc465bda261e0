/*
 * trainer_trace.c: the measured trace of the last step (trainer.h,
 * trainer_trace): the schedule with every op's recorded start and end, its
 * costs replaced by the measured mean F, B, W (and S, T) times, and each
 * device's activation peak in the file's meta.
 */
#include "runtime/trainer_impl.h"

#include "kernels/cpu/buf_pool.h"
#include "runtime/footprint.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

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

int trainer_memory_ledger(const trainer *t, trainer_mem_device *out, zb_err *err)
{
    mem_ledger *l = t->be->ops->ledger ? t->be->ops->ledger(t->be) : NULL;
    if (!l)
        return zb_fail(err, "the %s backend keeps no memory ledger", t->be->ops->name);
    int S = t->n_stages, P = t->n_devices;
    int *layers = malloc(sizeof *layers * (size_t)S), *rc = malloc(sizeof *rc * (size_t)S);
    footprint_device *fp = calloc((size_t)P, sizeof *fp);
    int ret = layers && rc && fp ? 0 : zb_fail(err, "out of memory");
    for (int i = 0; i < S && ret == 0; i++) {
        layers[i] = t->st[i].layout.l1 - t->st[i].layout.l0;
        rc[i] = t->st[i].recompute;
    }
    if (ret == 0)
        ret = footprint_devices(t->sched, &t->model, layers, rc,
                                t->spec_len > 0 && trainer_may_speculate(t), fp, err);
    /* ZeRO-1 (trainer_zero1.c): a sharded stage holds m and v for its
     * shard only.  (The CPU backend allocates the whole moments when it
     * makes the stage and frees all but the shard when the islands shard
     * it, before the first step: that start-up moment shows in the
     * optimizer class's own peak, below the device's total peak.) */
    for (int i = 0; i < S && ret == 0; i++) {
        const stage_rt *r = &t->st[i];
        if (!r->opt_floats)
            continue;
        double gone = 8.0 * ((double)r->n_params - (double)r->opt_floats);
        fp[r->device].bytes[MEM_OPTIMIZER] -= gone;
        fp[r->device].total -= gone;
    }
    for (int d = 0; d < P && ret == 0; d++) {
        assert(d < mem_ledger_devices(l));
        for (int c = 0; c < MEM_CLASSES; c++) {
            out[d].predicted[c] = fp[d].bytes[c];
            out[d].measured[c] = (double)mem_ledger_peak(l, d, (mem_class)c);
            out[d].live[c] = (double)mem_ledger_live(l, d, (mem_class)c);
        }
        out[d].predicted_total = fp[d].total;
        out[d].measured_total = (double)mem_ledger_total_peak(l, d);
        out[d].pool_bytes = (double)mem_ledger_live(l, d, MEM_ACTIVATIONS);
    }
    for (int i = 0; i < S && ret == 0; i++) {
        /* each pool once: a device's stages share one (llama_stage_share_pool) */
        struct buf_pool *pool = t->st[i].kern->pool;
        int seen = !pool;
        for (int j = 0; j < i && !seen; j++)
            seen = t->st[j].kern->pool == pool;
        if (!seen)
            out[t->st[i].device].pool_bytes += (double)buf_pool_idle_bytes(pool);
    }
    free(layers);
    free(rc);
    free(fp);
    return ret;
}
