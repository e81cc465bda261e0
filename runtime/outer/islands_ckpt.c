/*
 * islands_ckpt.c: checkpoints of the islands (islands.h): every replica's
 * trainer, the outer optimizer and the islands' counters, committed as one
 * unit, and the resume that makes an interrupted DiLoCo or EDiT run give
 * the uninterrupted run's losses, bit for bit.
 *
 * Why its own files beside ckpt_set.h's: a checkpoint of one trainer is
 * one part per rank of the same model; the islands hold K trainers of the
 * same layout that differ in their state (each its own data stream and
 * AdamW moments), plus state no trainer has (the outer optimizer's global
 * copy and momentum).  The commit protocol is ckpt_set.h's: fresh TAG,
 * atomic parts, one manifest replaced atomically as the commit point,
 * then the other tags' parts deleted.
 *
 * What is checked on resume, before anything is loaded: the manifest's
 * format and version, its replicas (the ids present) and outer settings
 * (kind, all-reduce, H, learning rate, momentum) against this run's, the
 * run record (seed, data, batch: run_record.h) against this run's.  The
 * trainers' files then check their own shape (trainer_load), and the
 * outer state its layout (outer_state_load).  A failure part-way leaves
 * the islands half-loaded, which is why the caller ends the run then.
 */
#include "runtime/outer/islands.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/checkpoint.h"
#include "runtime/ckpt_set.h"
#include "runtime/outer/zero1.h"
#include "src/outfile.h"
#include "src/sched_io.h"

#define ISLANDS_MANIFEST CKPTSET_ISLANDS_MANIFEST
#define ISLANDS_FORMAT "zbsched-islands"
#define ISLANDS_VERSION 1
#define ISLANDS_PREFIX "islands."

/* DIR/islands.TAG.WHAT.bin into buf[cap]; 0 or -1 with err. */
static int part_path(const char *dir, const char *tag, const char *what, char *buf, size_t cap,
                     zb_err *err)
{
    int n = snprintf(buf, cap, "%s/" ISLANDS_PREFIX "%s.%s.bin", dir, tag, what);
    if (n < 0 || (size_t)n >= cap)
        return zb_fail(err, "checkpoint path too long: %s", dir);
    return 0;
}

/* The present replica ids of x in id order into ids (room for the
 * outer's slots); returns their count. */
static int present_ids(islands *x, int *ids)
{
    return outer_replicas(islands_outer(x), ids);
}

/* Deletes dir's islands parts: with keep set, those whose tag is not tag
 * (after a commit: the manifest names tag), else those whose tag is tag
 * (a save that failed before its commit).  Best effort: either way they
 * are only clutter. */
static void prune(const char *dir, const char *tag, int keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    size_t pre = strlen(ISLANDS_PREFIX);
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        size_t len = strlen(n);
        if (strncmp(n, ISLANDS_PREFIX, pre) != 0 || len < 4 || strcmp(n + len - 4, ".bin") != 0)
            continue;
        int of_tag = len > pre + CKPTSET_TAG_LEN && !strncmp(n + pre, tag, CKPTSET_TAG_LEN) &&
                     n[pre + CKPTSET_TAG_LEN] == '.';
        if (of_tag == keep)
            continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, n) < (int)sizeof path)
            unlink(path);
    }
    closedir(d);
}

/* The manifest of a save at tag with the present ids[n]; NULL on memory. */
static cJSON *manifest(islands *x, const char *tag, const int *ids, int n,
                       const cJSON *model_rec, const cJSON *run_rec)
{
    const outer_config *c = &islands_options(x)->outer;
    islands_progress pr;
    islands_get_progress(x, &pr);
    cJSON *m = cJSON_CreateObject(), *reps = cJSON_CreateArray();
    if (!m || !reps) {
        cJSON_Delete(m);
        cJSON_Delete(reps);
        return NULL;
    }
    cJSON_AddItemToObject(m, "format", cJSON_CreateString(ISLANDS_FORMAT));
    cJSON_AddNumberToObject(m, "version", ISLANDS_VERSION);
    cJSON_AddNumberToObject(m, "step", (double)pr.step);
    cJSON_AddStringToObject(m, "tag", tag);
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(reps, cJSON_CreateNumber(ids[i]));
    cJSON_AddItemToObject(m, "replicas", reps);
    cJSON_AddStringToObject(m, "outer", outer_kind_name(c->kind));
    cJSON_AddStringToObject(m, "allreduce", outer_wire_name(c->wire));
    cJSON_AddNumberToObject(m, "inner_steps", c->inner_steps);
    cJSON_AddNumberToObject(m, "outer_lr", c->outer_lr);
    cJSON_AddNumberToObject(m, "outer_momentum", c->outer_momentum);
    cJSON_AddItemToObject(m, "model", cJSON_Duplicate(model_rec, 1));
    if (run_rec)
        cJSON_AddItemToObject(m, "run", cJSON_Duplicate(run_rec, 1));
    return m;
}

int islands_save(islands *x, const char *dir, const cJSON *model_rec, const cJSON *run_rec,
                 zb_err *err)
{
    outer_t *o = islands_outer(x);
    int n = outer_replicas(o, NULL);
    int *ids = malloc((size_t)n * sizeof *ids);
    if (!ids)
        return zb_fail(err, "out of memory");
    present_ids(x, ids);
    char tag[CKPTSET_TAG_LEN + 1], path[4096], what[32];
    ckptset_new_tag(tag);
    /* 1. every replica's trainer, and the outer state, each atomically;
     * under ZeRO-1 each replica writes the whole AdamW state, gathered from
     * the shards, so the file is the one an unsharded run writes */
    zero1_ckpt whole;
    int rc = islands_checkpoint_begin(x, &whole, err) != 0;
    for (int i = 0; i < n && rc == 0; i++) {
        snprintf(what, sizeof what, "replica-%d", ids[i]);
        rc = part_path(dir, tag, what, path, sizeof path, err) != 0 ||
             trainer_save(islands_replica(x, ids[i]), path, err) != 0;
    }
    islands_checkpoint_end(x, &whole, 0);
    void *state = NULL;
    size_t state_len = 0;
    if (rc == 0)
        rc = outer_state_save(o, &state, &state_len, err) != 0;
    if (rc == 0) {
        islands_progress pr;
        islands_get_progress(x, &pr);
        int64_t counters[5] = { pr.step, pr.ev, (int64_t)pr.next_stream, pr.eliminated,
                                pr.skipped_segments };
        ckpt_part parts[2] = { { counters, sizeof counters }, { state, state_len } };
        rc = part_path(dir, tag, "outer", path, sizeof path, err) != 0 ||
             ckpt_write(path, parts, 2, err) != 0;
    }
    free(state);
    /* 2. the manifest: the commit point */
    if (rc == 0) {
        cJSON *m = manifest(x, tag, ids, n, model_rec, run_rec);
        char *text = m ? cJSON_Print(m) : NULL;
        cJSON_Delete(m);
        if (!text)
            rc = zb_fail(err, "out of memory") != 0;
        int len = snprintf(path, sizeof path, "%s/" ISLANDS_MANIFEST, dir);
        if (rc == 0 && (len < 0 || (size_t)len >= sizeof path))
            rc = zb_fail(err, "checkpoint path too long: %s", dir) != 0;
        if (rc == 0) {
            size_t tl = strlen(text);
            text[tl] = '\n'; /* the NUL's place: one newline at the end */
            rc = outfile_write_all(path, text, tl + 1, err) != 0;
        }
        free(text);
    }
    /* 3. what the manifest does not name: the older tags' parts, or after
     * a failure this tag's */
    prune(dir, tag, rc == 0);
    free(ids);
    return rc ? -1 : 0;
}

/* The saver islands_checkpoint installs (ctx: the islands_records). */
static int save_with_records(islands *x, const char *dir, void *ctx, zb_err *err)
{
    const islands_records *rec = ctx;
    return islands_save(x, dir, rec->model, rec->run, err);
}

void islands_checkpoint(islands *x, const islands_records *rec)
{
    islands_set_saver(x, save_with_records, (void *)rec);
}

int islands_ckpt_exists(const char *dir, zb_err *err)
{
    char path[4096];
    int len = snprintf(path, sizeof path, "%s/" ISLANDS_MANIFEST, dir);
    if (len < 0 || (size_t)len >= sizeof path)
        return zb_fail(err, "checkpoint path too long: %s", dir);
    struct stat st;
    if (stat(path, &st) == 0)
        return 1;
    if (errno == ENOENT)
        return 0;
    return zb_fail(err, "cannot read '%s': %s", path, strerror(errno));
}

/* Checks manifest m (read from where) against x: format, replicas and
 * outer settings.  0 or -1 with err naming the first difference. */
static int check_manifest(islands *x, const cJSON *m, const char *where, zb_err *err)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, "format");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "version");
    if (!cJSON_IsString(f) || strcmp(f->valuestring, ISLANDS_FORMAT) != 0 || !cJSON_IsNumber(v))
        return zb_fail(err, "%s is not an islands checkpoint manifest", where);
    if (v->valuedouble != ISLANDS_VERSION)
        return zb_fail(err, "%s is version %g; this zbsched reads version %d", where,
                       v->valuedouble, ISLANDS_VERSION);
    const outer_config *c = &islands_options(x)->outer;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(m, "outer");
    const cJSON *wire = cJSON_GetObjectItemCaseSensitive(m, "allreduce");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(m, "inner_steps");
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(m, "outer_lr");
    const cJSON *mu = cJSON_GetObjectItemCaseSensitive(m, "outer_momentum");
    if (!cJSON_IsString(kind) || !cJSON_IsString(wire) || !cJSON_IsNumber(h) ||
        !cJSON_IsNumber(lr) || !cJSON_IsNumber(mu))
        return zb_fail(err, "%s lacks the outer optimizer's settings", where);
    if (strcmp(kind->valuestring, outer_kind_name(c->kind)) != 0 ||
        strcmp(wire->valuestring, outer_wire_name(c->wire)) != 0 ||
        h->valuedouble != c->inner_steps || (float)lr->valuedouble != c->outer_lr ||
        (float)mu->valuedouble != c->outer_momentum)
        return zb_fail(err, "%s was written with --outer %s --allreduce %s --inner-steps %g "
                       "--outer-lr %g --outer-momentum %g; this run has %s %s %d %g %g", where,
                       kind->valuestring, wire->valuestring, h->valuedouble, lr->valuedouble,
                       mu->valuedouble, outer_kind_name(c->kind), outer_wire_name(c->wire),
                       c->inner_steps, (double)c->outer_lr, (double)c->outer_momentum);
    const cJSON *reps = cJSON_GetObjectItemCaseSensitive(m, "replicas");
    int n = outer_replicas(islands_outer(x), NULL);
    int ids[n > 0 ? n : 1];
    present_ids(x, ids);
    int same = cJSON_IsArray(reps) && cJSON_GetArraySize(reps) == n;
    for (int i = 0; same && i < n; i++) {
        const cJSON *r = cJSON_GetArrayItem(reps, i);
        same = cJSON_IsNumber(r) && r->valuedouble == ids[i];
    }
    if (!same)
        return zb_fail(err, "%s holds %d replicas; this run has --replicas %d", where,
                       cJSON_IsArray(reps) ? cJSON_GetArraySize(reps) : 0, n);
    return 0;
}

int islands_resume(islands *x, const char *dir, const run_identity *id, char *note, size_t cap,
                   zb_err *err)
{
    note[0] = '\0';
    char where[4096], path[4096], what[32];
    int len = snprintf(where, sizeof where, "%s/" ISLANDS_MANIFEST, dir);
    if (len < 0 || (size_t)len >= sizeof where)
        return zb_fail(err, "checkpoint path too long: %s", dir);
    int found = islands_ckpt_exists(dir, err);
    if (found < 0)
        return -1;
    if (found == 0)
        return zb_fail(err, "%s holds no islands checkpoint to resume from (no %s)", dir,
                       ISLANDS_MANIFEST);
    char *text = NULL;
    size_t text_len = 0;
    if (zb_read_file(where, &text, &text_len, err) != 0)
        return -1;
    cJSON *m = cJSON_ParseWithLength(text, text_len);
    free(text);
    if (!m)
        return zb_fail(err, "%s is not valid JSON", where);
    int same = 0, rc = check_manifest(x, m, where, err);
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(m, "run");
    if (rc == 0 && run && (same = run_record_check(run, where, id, note, cap, err)) < 0)
        rc = -1;
    const cJSON *tag = cJSON_GetObjectItemCaseSensitive(m, "tag");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(m, "step");
    if (rc == 0 && (!cJSON_IsString(tag) || strlen(tag->valuestring) != CKPTSET_TAG_LEN ||
                    strspn(tag->valuestring, "0123456789abcdef") != CKPTSET_TAG_LEN ||
                    !cJSON_IsNumber(step)))
        rc = zb_fail(err, "%s has no valid \"tag\" and \"step\"", where);
    int n = outer_replicas(islands_outer(x), NULL);
    int ids[n > 0 ? n : 1];
    present_ids(x, ids);
    /* every replica's trainer: each file checks its own shape; under ZeRO-1
     * the whole AdamW state is read, then split back into the shards */
    zero1_ckpt whole;
    int began = rc == 0 && islands_checkpoint_begin(x, &whole, err) == 0;
    if (rc == 0 && !began)
        rc = -1;
    for (int i = 0; rc == 0 && i < n; i++) {
        snprintf(what, sizeof what, "replica-%d", ids[i]);
        trainer *t = islands_replica(x, ids[i]);
        if (part_path(dir, tag->valuestring, what, path, sizeof path, err) != 0 ||
            trainer_load(t, path, err) != 0)
            rc = -1;
        else if (trainer_get_stats(t)->step != (long)step->valuedouble)
            rc = zb_fail(err, "%s: step %ld, but the manifest says %g", path,
                         trainer_get_stats(t)->step, step->valuedouble);
    }
    if (began)
        islands_checkpoint_end(x, &whole, rc == 0);
    /* the islands' counters and the outer state */
    ckpt_part *parts = NULL;
    int n_parts = 0;
    if (rc == 0 && (part_path(dir, tag->valuestring, "outer", path, sizeof path, err) != 0 ||
                    ckpt_read_any(path, &parts, &n_parts, err) != 0))
        rc = -1;
    if (rc == 0 && (n_parts != 2 || parts[0].bytes != 5 * sizeof(int64_t)))
        rc = zb_fail(err, "%s is not an islands outer state", path);
    if (rc == 0 && outer_state_load(islands_outer(x), parts[1].data, parts[1].bytes, err) != 0)
        rc = -1;
    if (rc == 0) {
        int64_t c[5];
        memcpy(c, parts[0].data, sizeof c);
        if (c[0] != (int64_t)step->valuedouble)
            rc = zb_fail(err, "%s: step %lld, but the manifest says %g", path, (long long)c[0],
                         step->valuedouble);
        islands_progress pr = { c[0], (int)c[1], (uint64_t)c[2], c[3], c[4] };
        if (rc == 0)
            islands_set_progress(x, &pr);
    }
    ckpt_parts_free(parts, n_parts);
    cJSON_Delete(m);
    return rc != 0 ? -1 : same;
}
