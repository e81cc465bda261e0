/*
 * trainer_ckpt.c: the trainer's checkpoint files (trainer.h): what a
 * resumed run needs, as the parts of one checkpoint.h file: the model's
 * shape and split (meta), the progress counters and the data generator,
 * then per stage its parameters, AdamW moments and step count.  Loads read
 * every part into fresh buffers and check it against this trainer before
 * anything changes, so that a refused file leaves the trainer as it was.
 */
#include "runtime/trainer_impl.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/checkpoint.h"

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
    if (trainer_zero1_whole_state(t, "save", err) != 0)
        return -1;
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
        parts[2 + 4 * s] = (ckpt_part){ mine ? trainer_mirror_get(t, s, ZB_BUF_PARAMS, 0) : NULL, bytes };
        parts[3 + 4 * s] = (ckpt_part){ mine ? trainer_zero1_ckpt_buffer(t, s, ZB_BUF_ADAM_M, 0) : NULL, bytes };
        parts[4 + 4 * s] = (ckpt_part){ mine ? trainer_zero1_ckpt_buffer(t, s, ZB_BUF_ADAM_V, 0) : NULL, bytes };
        parts[5 + 4 * s] = (ckpt_part){ &r->adam_t, mine ? sizeof r->adam_t : 0 };
    }
    int rc = trainer_be_check(t, err) != 0 ? -1 : ckpt_write(path, parts, n, err);
    free(parts);
    return rc;
}

int trainer_load(trainer *t, const char *path, zb_err *err)
{
    if (trainer_zero1_whole_state(t, "load", err) != 0)
        return -1;
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
                float *dst = trainer_zero1_ckpt_buffer(t, s, which[k], 1);
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
    if (trainer_zero1_whole_state(t, "load", err) != 0)
        return -1;
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
                float *dst = trainer_zero1_ckpt_buffer(t, s, which[k], 1);
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
