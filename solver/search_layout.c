/*
 * search_layout.c: the layouts a search considers and which engine runs
 * which (search.h, "layouts"; docs/search.md "Layouts").
 *
 * A layout is the part of a plan beyond the pipeline's schedule: tensor
 * parallel t (with sequence parallelism), context parallel c, how far the
 * data-parallel replicas shard their state, and the fraction of saved
 * activations offloaded to the host (src/layout.h).  The search runs its
 * pipeline x data-parallel search once per layout over the N / (t c)
 * GPU groups that remain, so the list here is what multiplies its work:
 * it holds only what the target can run and what the model's shape and a
 * node allow, and search.c skips a layout whose work bound already loses.
 *
 * What each engine runs (search_layout_runs in search_target.c, which
 * holds every target's rules; ../shared/reference/engines.md):
 *   zbsched, torch  pipeline x data parallel with ZeRO-1, no offload: the
 *                   runtime and examples/pytorch run plain layers.
 *   torchtitan      TP (always with sequence parallelism on the norms),
 *                   CP, FSDP over the replicas (data_parallel_shard_degree;
 *                   priced as ZeRO-1 or ZeRO-3); no activation offload.
 *   megatron        TP with or without --sequence-parallel, CP, ZeRO-1
 *                   (--use-distributed-optimizer); activation offload
 *                   (--cpu-offloading) only without a pipeline, as its
 *                   offloading requires; no ZeRO-2/3.
 */
#include "solver/search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *search_layout_family(const zb_layout *l)
{
    if (l->cp > 1)
        return "with CP";
    if (l->zero >= LAYOUT_ZERO3)
        return "FSDP";
    if (l->tp > 1)
        return "TP x PP x DP";
    if (l->offload > 0)
        return "offload";
    return "PP x DP";
}

int search_layout_same(const zb_layout *a, const zb_layout *b)
{
    return a->tp == b->tp && a->sp == b->sp && a->cp == b->cp && a->zero == b->zero && a->offload == b->offload;
}

/* The values of one dimension: the fixed one, or those searched. */
static int values(int fixed, const int *searched, int n_searched, int *out)
{
    if (fixed > 0) {
        out[0] = fixed;
        return 1;
    }
    for (int i = 0; i < n_searched; i++)
        out[i] = searched[i];
    return n_searched;
}

int search_layouts(const search_options *o, zb_layout *out, int cap, zb_err *err)
{
    static const int tp_all[] = { 1, 2, 4, 8 }, cp_all[] = { 1, 2 }, zero_all[] = { 1, 3 };
    static const double off_all[] = { 0, 0.5 };
    int tps[4], cps[2], zeros[3];
    int n_tp = values(o->tp, tp_all, 4, tps), n_cp = values(o->cp, cp_all, 2, cps);
    int n_zero = values(o->zero, zero_all, 2, zeros);
    double offs[2];
    int n_off = 0;
    if (o->offload >= 0)
        offs[n_off++] = o->offload;
    else
        for (int i = 0; i < 2; i++)
            offs[n_off++] = off_all[i];
    int per_node = o->nodes > 0 ? o->n_gpus / o->nodes : gpu_per_node(&o->gpu);
    int n = 0;
    char why[600] = "", why_target[600] = "";
    for (int a = 0; a < n_tp; a++)
        for (int b = 0; b < n_cp; b++)
            for (int z = 0; z < n_zero; z++)
                for (int f = 0; f < n_off; f++) {
                    zb_layout l;
                    layout_default(&l);
                    l.tp = tps[a];
                    l.sp = l.tp > 1 && o->sp;
                    l.cp = cps[b];
                    l.zero = zeros[z];
                    l.offload = offs[f];
                    zb_err e2 = { { 0 } };
                    if (layout_check(&l, &o->model, per_node, &e2) < 0) {
                        snprintf(why, sizeof why, "%s", e2.msg);
                        continue;
                    }
                    if (o->n_gpus % (l.tp * l.cp) != 0) {
                        snprintf(why, sizeof why, "tp %d x cp %d does not divide %d GPUs", l.tp, l.cp,
                                 o->n_gpus);
                        continue;
                    }
                    if (!search_layout_runs(&l, NULL, o->target, why_target, sizeof why_target))
                        continue;
                    if (n < cap)
                        out[n++] = l;
                }
    if (n == 0)
        return zb_fail(err, "no layout is left to search: %s", why_target[0] ? why_target
                       : why[0] ? why : "nothing was asked for");
    /* The plain layout first: it is the baseline's and today's answer. */
    for (int i = 1; i < n; i++)
        if (!layout_is_extended(&out[i])) {
            zb_layout t = out[0];
            out[0] = out[i];
            out[i] = t;
        }
    return n;
}

void search_layouts_searched(search_options *o)
{
    o->tp = o->cp = o->zero = 0;
    o->offload = -1;
}

int search_layout_flag(search_options *o, const char *flag, const char *arg, zb_err *err)
{
    int automatic = arg && !strcmp(arg, "auto");
    char *end = NULL;
    if (!strcmp(flag, "--no-sp")) {
        o->sp = 0;
        return 0;
    }
    if (!strcmp(flag, "--no-tp-overlap")) {
        o->tp_comm_overlap = 0;
        return 0;
    }
    if (!arg)
        return zb_fail(err, "%s needs a value", flag);
    if (!strcmp(flag, "--zero")) {
        int z = automatic ? 0 : layout_parse_zero(arg);
        if (z < 0)
            return zb_fail(err, "--zero: '%s' is not 1, 2, 3, fsdp or auto", arg);
        o->zero = z;
        return 0;
    }
    if (!strcmp(flag, "--offload")) {
        double f = automatic ? -1 : strtod(arg, &end);
        if (!automatic && (end == arg || *end || !(f >= 0 && f <= 1)))
            return zb_fail(err, "--offload: '%s' is not a fraction in [0, 1] or auto", arg);
        o->offload = f;
        return 0;
    }
    if (!strcmp(flag, "--tp") || !strcmp(flag, "--cp")) {
        long v = automatic ? 0 : strtol(arg, &end, 10);
        if (!automatic && (end == arg || *end || v < 1 || v > 64 || (v & (v - 1))))
            return zb_fail(err, "%s: '%s' is not a power of two from 1 to 64 or auto", flag, arg);
        *(!strcmp(flag, "--tp") ? &o->tp : &o->cp) = (int)v;
        return 0;
    }
    return zb_fail(err, "%s is not a layout flag", flag);
}
