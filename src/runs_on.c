/*
 * runs_on.c: the one table of which execution path runs which plan
 * feature (runs_on.h).
 *
 * Why a table and not a function per path: the paths learn features one
 * at a time (the CUDA backend learnt recompute, vocabulary passes and
 * memory layers in issue 25; mpirun the vocabulary passes),
 * and each time the plan file's "runs_on", the search's note and every
 * refusal must change together.  With one cell per (path, feature) that
 * is one edit, and nothing else in the program says what a path supports.
 *
 * What the cells say (keep them true: a 1 is a path whose runtime accepts
 * the feature and has a test of it; cuda's tests need a GPU, so its cells
 * stand on code that compiles everywhere and runs its op tests wherever
 * bench/gpu/run.sh is given one; docs/gpu.md says which have run):
 *   cpu   everything (kernels/cpu: llama.c recompute levels,
 *         memory_layer.c, backend_cpu_vocab.c).
 *   cuda  recompute full and mlp (gpu_stage.cu; op test
 *         tests/cuda/test_cuda_recompute.c), the vocabulary passes
 *         (backend_cuda_vocab.c; tests/cuda/test_cuda_vocab_backend.c),
 *         memory layers on the GPU stage (gpu_stage.cu over
 *         memory_layer.cu; tests/cuda/test_cuda_memory_stage.c).
 *   mpi   recompute and memory layers (each rank is the CPU backend), and
 *         the vocabulary passes (their messages over
 *         runtime/mpi/vocab_link_mpi.c; tests/mpi/test_mpi_vocab.sh).
 */
#include "src/runs_on.h"

#include <stdio.h>
#include <string.h>

#include "src/cost_model.h"

/* One path's row: its name and, per feature, 1 when it runs it. */
typedef struct runs_on_row {
    const char *name;                   /* as the plan file spells it */
    unsigned char runs[ZB_FEAT_COUNT]; /* [feature] 1: supported */
} runs_on_row;

/*                                          vocab-1 vocab-2 rc-full rc-mlp memory */
static const runs_on_row runs_on_table[ZB_PATH_COUNT] = {
    [ZB_PATH_CPU] = { "cpu", { 1, 1, 1, 1, 1 } },
    [ZB_PATH_CUDA] = { "cuda", { 1, 1, 1, 1, 1 } },
    [ZB_PATH_MPI] = { "mpi", { 1, 1, 1, 1, 1 } },
};

static const char *const feature_names[ZB_FEAT_COUNT] = {
    [ZB_FEAT_VOCAB_1] = "Vocab-1 vocabulary passes",
    [ZB_FEAT_VOCAB_2] = "Vocab-2 vocabulary passes",
    [ZB_FEAT_RC_FULL] = "full recompute",
    [ZB_FEAT_RC_MLP] = "mlp-level recompute",
    [ZB_FEAT_MEMORY] = "memory layers",
};

const char *runs_on_path_name(zb_path p)
{
    return p >= 0 && p < ZB_PATH_COUNT ? runs_on_table[p].name : "?";
}

const char *runs_on_feature_name(zb_feature f)
{
    return f >= 0 && f < ZB_FEAT_COUNT ? feature_names[f] : "?";
}

unsigned runs_on_uses(int vocab, const int *rc, int S, const zb_model *m)
{
    unsigned uses = 0;
    if (vocab == SCHED_VOCAB_1)
        uses |= 1u << ZB_FEAT_VOCAB_1;
    else if (vocab == SCHED_VOCAB_2)
        uses |= 1u << ZB_FEAT_VOCAB_2;
    for (int i = 0; rc && i < S; i++) {
        if (rc[i] == COST_RC_FULL)
            uses |= 1u << ZB_FEAT_RC_FULL;
        else if (rc[i] == COST_RC_MLP)
            uses |= 1u << ZB_FEAT_RC_MLP;
    }
    if (m && m->memory.n_layers > 0)
        uses |= 1u << ZB_FEAT_MEMORY;
    return uses;
}

unsigned runs_on_uses_of_file(const sched_t *s, const zb_plan *p)
{
    return runs_on_uses(s->vocab.variant, p ? p->recompute : NULL, p ? p->n_stages : 0,
                        p ? &p->model : NULL);
}

int runs_on_can(unsigned uses, zb_path p, char *buf, size_t len)
{
    if (p < 0 || p >= ZB_PATH_COUNT) {
        if (buf && len)
            snprintf(buf, len, "no path %d", (int)p);
        return 0;
    }
    size_t at = 0;
    int ok = 1;
    if (buf && len)
        at = (size_t)snprintf(buf, len, "%s does not run ", runs_on_table[p].name);
    for (int f = 0; f < ZB_FEAT_COUNT; f++) {
        if (!(uses >> f & 1) || runs_on_table[p].runs[f])
            continue;
        if (buf && at < len)
            at += (size_t)snprintf(buf + at, len - at, "%s%s", ok ? "" : ", ", feature_names[f]);
        ok = 0;
    }
    if (ok && buf && len)
        buf[0] = '\0';
    return ok;
}

unsigned runs_on_mask(unsigned uses)
{
    unsigned mask = 0;
    for (int p = 0; p < ZB_PATH_COUNT; p++)
        if (runs_on_can(uses, (zb_path)p, NULL, 0))
            mask |= 1u << p;
    return mask;
}
