/*
 * ckpt_set.c: the checkpoint directory as one committed unit: parts, the
 * manifest that commits them with the model and run records, the lock,
 * and the readers of the older layouts (ckpt_set.h).
 *
 * The manifest is a small cJSON document written with zb_write_atomic
 * (src/outfile.h underneath); the parts are trainer checkpoints
 * (runtime/checkpoint.h), each checksummed on its own.
 */
#include "runtime/ckpt_set.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/checkpoint.h"
#include "src/outfile.h"
#include "src/sched_io.h"

#define MANIFEST_FORMAT "zbsched checkpoint parts"

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

void ckptset_new_tag(char tag[CKPTSET_TAG_LEN + 1])
{
    uint64_t x = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &x, sizeof x) != (ssize_t)sizeof x) {
        struct timespec ts; /* no /dev/urandom: time and pid, still distinct per save */
        clock_gettime(CLOCK_REALTIME, &ts);
        x = ((uint64_t)ts.tv_sec * 1000000007ULL) ^ (uint64_t)ts.tv_nsec ^
            ((uint64_t)getpid() << 40);
    }
    if (fd >= 0)
        close(fd);
    snprintf(tag, CKPTSET_TAG_LEN + 1, "%016llx", (unsigned long long)x);
}

int ckptset_part_path(const char *dir, const char *tag, int rank, char *buf, size_t cap,
                      zb_err *err)
{
    int n = snprintf(buf, cap, "%s/checkpoint.%s.rank-%d.bin", dir, tag, rank);
    if (n < 0 || (size_t)n >= cap)
        return zb_fail(err, "%s: the checkpoint directory's path is too long", dir);
    return 0;
}

/* 1 when name is "checkpoint.TAG.rank-R.bin", with *tag_at pointing at
 * its tag and *rank set. */
static int part_name(const char *name, const char **tag_at, int *rank)
{
    static const char prefix[] = "checkpoint.";
    size_t pl = sizeof prefix - 1;
    if (strncmp(name, prefix, pl) != 0 || strlen(name) < pl + CKPTSET_TAG_LEN)
        return 0;
    const char *tag = name + pl;
    if (strspn(tag, "0123456789abcdef") != CKPTSET_TAG_LEN)
        return 0;
    const char *rest = tag + CKPTSET_TAG_LEN;
    if (strncmp(rest, ".rank-", 6) != 0 || strspn(rest + 6, "0123456789") == 0)
        return 0;
    char *end;
    long r = strtol(rest + 6, &end, 10);
    if (strcmp(end, ".bin") != 0 || r < 0 || r > 65536)
        return 0;
    *tag_at = tag;
    *rank = (int)r;
    return 1;
}

int ckptset_owns_name(const char *name)
{
    static const char *const fixed[] = { CKPTSET_MANIFEST, CKPTSET_SINGLE, CKPTSET_MODEL,
                                         CKPTSET_RUN, CKPTSET_LOCK, CKPTSET_ISLANDS_MANIFEST };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (strcmp(name, fixed[i]) == 0)
            return 1;
    /* the islands' parts (runtime/outer/islands.h): islands.TAG.WHAT.bin */
    size_t n = strlen(name);
    if (strncmp(name, "islands.", 8) == 0 && n > 12 && strcmp(name + n - 4, ".bin") == 0)
        return 1;
    const char *tag;
    int rank;
    return part_name(name, &tag, &rank);
}

/* ---- the model record --------------------------------------------------- */

cJSON *ckptset_model_record(const zb_model *m, const unsigned char *chars, int vocab)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *mj = model_to_json(m);
    cJSON *cs = cJSON_CreateArray();
    int ok = root && mj && cs;
    for (int i = 0; ok && i < vocab; i++) {
        cJSON *x = cJSON_CreateNumber(chars[i]);
        ok = x != NULL;
        if (x)
            cJSON_AddItemToArray(cs, x);
    }
    if (!ok) {
        cJSON_Delete(root);
        cJSON_Delete(mj);
        cJSON_Delete(cs);
        return NULL;
    }
    cJSON_AddItemToObject(root, "model", mj);
    cJSON_AddItemToObject(root, "chars", cs);
    return root;
}

int ckptset_model_from_record(const cJSON *rec, const char *where, zb_model *m,
                              unsigned char chars[256], int *vocab, zb_err *err)
{
    const cJSON *mj = cJSON_GetObjectItemCaseSensitive(rec, "model");
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(rec, "chars");
    if (!cJSON_IsObject(mj) || !cJSON_IsArray(cs))
        return zb_fail(err, "%s: not a model record (needs \"model\" and \"chars\")", where);
    if (model_from_json(mj, m, err) != 0)
        return zb_wrap(err, "%s: ", where);
    int n = cJSON_GetArraySize(cs);
    if (n < 1 || n > 256 || n != m->vocab)
        return zb_fail(err, "%s: \"chars\" has %d entries, the model's vocab is %d", where, n,
                       m->vocab);
    unsigned char seen[256] = { 0 };
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(cs, i);
        if (!cJSON_IsNumber(c) || c->valuedouble < 0 || c->valuedouble > 255 ||
            c->valuedouble != floor(c->valuedouble) || seen[(int)c->valuedouble])
            return zb_fail(err, "%s: \"chars\" must hold distinct bytes 0..255", where);
        chars[i] = (unsigned char)c->valuedouble;
        seen[chars[i]] = 1;
    }
    *vocab = n;
    return 0;
}

/* "tiny (4 layers, d=64, 4 heads, ...)" for messages. */
static void describe(const zb_model *m, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s: %d layers, d=%d, %d/%d heads, d_ff=%d, vocab %d, context %d%s", m->name,
             m->n_layers, m->d_model, m->n_heads, m->n_kv_heads, m->d_ff, m->vocab, m->seq_len,
             m->memory.n_layers ? ", memory layers" : "");
}

int ckptset_check_model(const ckptset_view *v, const zb_model *m, const unsigned char *chars,
                        int vocab, zb_err *err)
{
    if (!v->model)
        return 0;
    zb_model was;
    unsigned char was_chars[256];
    int was_vocab = 0;
    if (ckptset_model_from_record(v->model, v->what, &was, was_chars, &was_vocab, err) != 0)
        return -1;
    int same = was.n_layers == m->n_layers && was.d_model == m->d_model &&
               was.n_heads == m->n_heads && was.n_kv_heads == m->n_kv_heads &&
               was.d_ff == m->d_ff && was.vocab == m->vocab && was.seq_len == m->seq_len &&
               was.swiglu == m->swiglu && was.tied_embedding == m->tied_embedding &&
               was.rope_theta == m->rope_theta &&
               memcmp(&was.memory, &m->memory, sizeof was.memory) == 0;
    if (!same) {
        char a[160], b[160];
        describe(&was, a, sizeof a);
        describe(m, b, sizeof b);
        return zb_fail(err, "%s: the checkpoint is of model %s; this run trains %s; resume with the "
                       "checkpoint's model, or start afresh with another --checkpoint DIR",
                       v->dir, a, b);
    }
    if (was_vocab != vocab || memcmp(was_chars, chars, (size_t)vocab) != 0)
        return zb_fail(err, "%s: the checkpoint's character vocabulary differs from this --data's "
                       "(another text); resume only the same run, or start afresh with another "
                       "--checkpoint DIR", v->dir);
    return 0;
}

/* ---- reading ------------------------------------------------------------ */

void ckptset_view_free(ckptset_view *v)
{
    for (int r = 0; v->parts && r < v->ranks; r++)
        free(v->parts[r]);
    free(v->parts);
    free(v->what);
    free(v->dir);
    free(v->layers);
    cJSON_Delete(v->model);
    cJSON_Delete(v->run);
    memset(v, 0, sizeof *v);
}

/* Reads a JSON file: 1 with *out, 0 when it does not exist, -1 with err. */
static int read_json(const char *path, cJSON **out, zb_err *err)
{
    *out = NULL;
    if (access(path, F_OK) != 0 && errno == ENOENT)
        return 0;
    char *text = NULL;
    size_t len = 0;
    if (zb_read_file(path, &text, &len, err) != 0)
        return -1;
    *out = cJSON_ParseWithLength(text, len);
    free(text);
    if (!*out)
        return zb_fail(err, "%s: not valid JSON", path);
    return 1;
}

/* 1 when x is a JSON number holding an integer in [lo, hi]. */
static int whole(const cJSON *x, double lo, double hi)
{
    return cJSON_IsNumber(x) && x->valuedouble >= lo && x->valuedouble <= hi &&
           x->valuedouble == floor(x->valuedouble);
}

/* Parses a manifest of either version into v (step, ranks, tag, parts,
 * and for version 2 the shape and the records). */
static int parse_manifest(cJSON *j, ckptset_view *v, zb_err *err)
{
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(j, "ranks");
    const cJSON *tag = cJSON_GetObjectItemCaseSensitive(j, "tag");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "version");
    if (!whole(step, 0, 1e15) || !whole(ranks, 1, 65536) || !cJSON_IsString(tag) ||
        strlen(tag->valuestring) != CKPTSET_TAG_LEN ||
        strspn(tag->valuestring, "0123456789abcdef") != CKPTSET_TAG_LEN)
        return zb_fail(err, "%s: not a checkpoint manifest (step, ranks and tag expected)", v->what);
    v->version = whole(ver, 1, 1000) ? (int)ver->valuedouble : 1;
    if (v->version > CKPTSET_VERSION)
        return zb_fail(err, "%s: a checkpoint of manifest version %d, newer than this zbsched "
                       "reads (%d)", v->what, v->version, CKPTSET_VERSION);
    v->step = (long)step->valuedouble;
    v->ranks = (int)ranks->valuedouble;
    memcpy(v->tag, tag->valuestring, CKPTSET_TAG_LEN + 1);
    if (v->version < 2)
        return 0;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(j, "stages");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(j, "layers_per_stage");
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(j, "parts");
    cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (!whole(params, 1, 1e15) || !whole(stages, 1, 65536) || !cJSON_IsArray(layers) ||
        cJSON_GetArraySize(layers) != (int)stages->valuedouble || !cJSON_IsObject(model) ||
        !cJSON_IsArray(parts) || cJSON_GetArraySize(parts) != v->ranks)
        return zb_fail(err, "%s: a version-2 checkpoint manifest needs parameters, stages, "
                       "layers_per_stage, parts (one per rank) and model", v->what);
    v->parameters = (long)params->valuedouble;
    v->stages = (int)stages->valuedouble;
    if (!(v->layers = malloc((size_t)v->stages * sizeof *v->layers)))
        return zb_fail(err, "out of memory");
    for (int s = 0; s < v->stages; s++) {
        const cJSON *x = cJSON_GetArrayItem(layers, s);
        if (!whole(x, 0, 1e6))
            return zb_fail(err, "%s: layers_per_stage[%d] is not a layer count", v->what, s);
        v->layers[s] = (int)x->valuedouble;
    }
    /* the names must be the ones the tag and ranks imply: a manifest
     * edited by hand must not point at another set's files */
    for (int r = 0; r < v->ranks; r++) {
        const cJSON *x = cJSON_GetArrayItem(parts, r);
        char want[64];
        snprintf(want, sizeof want, "checkpoint.%s.rank-%d.bin", v->tag, r);
        if (!cJSON_IsString(x) || strcmp(x->valuestring, want) != 0)
            return zb_fail(err, "%s: part %d should be %s", v->what, r, want);
    }
    v->model = cJSON_DetachItemViaPointer(j, model);
    cJSON *run = cJSON_GetObjectItemCaseSensitive(j, "run");
    if (run && !cJSON_IsNull(run)) {
        if (!cJSON_IsObject(run))
            return zb_fail(err, "%s: \"run\" is not a run record", v->what);
        v->run = cJSON_DetachItemViaPointer(j, run);
    }
    return 0;
}

/* The step of a whole, intact trainer checkpoint file (its progress
 * record, part 1, starts with the int64 step).  0 or -1 with err. */
static int file_step(const char *path, long *step, zb_err *err)
{
    ckpt_part *parts = NULL;
    int n = 0;
    if (ckpt_read_any(path, &parts, &n, err) != 0)
        return -1;
    int64_t s = -1;
    if (n > 1 && parts[1].bytes >= sizeof s)
        memcpy(&s, parts[1].data, sizeof s);
    ckpt_parts_free(parts, n);
    if (s < 0)
        return zb_fail(err, "%s: not a trainer checkpoint (no progress record)", path);
    *step = (long)s;
    return 0;
}

/* Fills v->parts for v->ranks parts of v->tag, each of which must exist. */
static int find_parts(const char *dir, ckptset_view *v, zb_err *err)
{
    v->parts = calloc((size_t)v->ranks, sizeof *v->parts);
    if (!v->parts)
        return zb_fail(err, "out of memory");
    size_t cap = strlen(dir) + 64;
    for (int r = 0; r < v->ranks; r++) {
        if (!(v->parts[r] = malloc(cap)))
            return zb_fail(err, "out of memory");
        if (ckptset_part_path(dir, v->tag, r, v->parts[r], cap, err) != 0)
            return -1;
        if (access(v->parts[r], F_OK) != 0)
            return zb_fail(err, "%s: a part of the checkpoint %s names is missing (%s); the "
                           "checkpoint is incomplete", v->parts[r], v->what, strerror(errno));
    }
    return 0;
}

/* Version 1: the records of DIR/model.json and DIR/run.json, if any. */
static int read_loose_records(const char *dir, ckptset_view *v, zb_err *err)
{
    char *mp = join(dir, CKPTSET_MODEL), *rp = join(dir, CKPTSET_RUN);
    int rc = mp && rp ? 0 : zb_fail(err, "out of memory");
    if (rc == 0 && read_json(mp, &v->model, err) < 0)
        rc = -1;
    if (rc == 0 && read_json(rp, &v->run, err) < 0)
        rc = -1;
    free(mp);
    free(rp);
    return rc;
}

/* One attempt at ckptset_open. */
static int open_once(const char *dir, ckptset_view *v, zb_err *err)
{
    memset(v, 0, sizeof *v);
    v->parameters = -1;
    v->stages = -1;
    v->step = -1;
    if (!(v->dir = strdup(dir)) || !(v->what = join(dir, CKPTSET_MANIFEST)))
        return zb_fail(err, "out of memory");
    cJSON *j = NULL;
    int have_set = read_json(v->what, &j, err);
    if (have_set < 0)
        return -1;
    if (have_set) {
        int rc = parse_manifest(j, v, err);
        cJSON_Delete(j);
        if (rc != 0)
            return -1;
    }
    char *single = join(dir, CKPTSET_SINGLE);
    if (!single)
        return zb_fail(err, "out of memory");
    int have_single = access(single, F_OK) == 0;
    if (have_set && v->version >= 2) {
        /* a committed version-2 manifest is the checkpoint: a
         * checkpoint.bin beside it is older (the commit prunes it) */
        free(single);
        return find_parts(dir, v, err) == 0 ? 1 : -1;
    }
    if (!have_set && !have_single) {
        free(single);
        return 0;
    }
    if (have_set && have_single) {
        /* version 1 after a crash between a save and its clean-up: the
         * later step is the checkpoint; one that cannot be read could be
         * the later, so the directory is refused rather than guessed */
        long single_step = -1;
        zb_err e = { { 0 } };
        if (file_step(single, &single_step, &e) != 0) {
            zb_fail(err, "%s holds both %s and %s, and the first cannot be read (%s); move one "
                    "away to choose", dir, CKPTSET_SINGLE, CKPTSET_MANIFEST, e.msg);
            free(single);
            return -1;
        }
        if (single_step >= v->step)
            have_set = 0;
        else
            have_single = 0;
        v->step = single_step >= v->step ? single_step : v->step;
    }
    int rc;
    if (have_single) {
        /* checkpoint.bin of one process: one part holding every stage */
        long step = v->step;
        free(v->what);
        v->what = single;
        v->version = 0;
        v->ranks = 1;
        v->tag[0] = '\0';
        v->step = step;
        v->parts = calloc(1, sizeof *v->parts);
        rc = v->parts && (v->parts[0] = strdup(single)) ? 0 : zb_fail(err, "out of memory");
    } else {
        free(single);
        rc = find_parts(dir, v, err);
    }
    if (rc == 0)
        rc = read_loose_records(dir, v, err);
    return rc == 0 ? 1 : -1;
}

int ckptset_open(const char *dir, ckptset_view *v, zb_err *err)
{
    /* A writer may commit a newer manifest and prune the parts of the old
     * one between our reading the manifest and looking for its parts:
     * then the manifest has changed, and reading it again finds the new,
     * complete set.  A part missing under an unchanged manifest is an
     * incomplete checkpoint. */
    for (int attempt = 0;; attempt++) {
        int rc = open_once(dir, v, err);
        int retry = 0;
        if (rc < 0 && attempt < 3 && v->version >= 1) {
            ckptset_view again;
            zb_err e = { { 0 } };
            int rc2 = open_once(dir, &again, &e);
            retry = rc2 > 0 && strcmp(again.tag, v->tag) != 0;
            ckptset_view_free(&again);
        }
        if (rc <= 0)
            ckptset_view_free(v);
        if (!retry)
            return rc;
    }
}

int ckptset_load(trainer *t, const ckptset_view *v, int rank, int world, long *rollbacks_adjust,
                 zb_err *err)
{
    if (v->stages >= 0) {
        int same = v->stages == trainer_stage_count(t);
        for (int s = 0; same && s < v->stages; s++) {
            const llama_stage *ly = trainer_stage_layout(t, s);
            same = v->layers[s] == ly->l1 - ly->l0;
        }
        if (!same)
            return zb_fail(err, "%s: the checkpoint is of another stage split (%d stages); this "
                           "run's schedule and split must match the one that wrote it", v->what,
                           v->stages);
        if ((size_t)v->parameters != trainer_param_count(t))
            return zb_fail(err, "%s: the checkpoint has %ld parameters, this run's model %zu",
                           v->what, v->parameters, trainer_param_count(t));
    }
    int own = v->ranks == world && world > 1;
    const char *mine[1];
    const char *const *paths = (const char *const *)v->parts;
    int n = v->ranks;
    if (own) {
        mine[0] = v->parts[rank];
        paths = mine;
        n = 1;
    }
    if (trainer_load_parts(t, paths, n, !own, err) != 0)
        return -1;
    if (v->step >= 0 && trainer_get_stats(t)->step != v->step)
        return zb_fail(err, "%s: a part of step %ld, but %s says step %ld", paths[0],
                       trainer_get_stats(t)->step, v->what, v->step);
    /* a part read by every rank holds every stage's rollbacks: count them
     * once, on rank 0 */
    if (rollbacks_adjust)
        *rollbacks_adjust = !own && rank != 0 ? -trainer_get_stats(t)->rollbacks : 0;
    return 0;
}

/* ---- writing ------------------------------------------------------------ */

/* Deletes dir's part files of rank (any rank when rank < 0), and of every
 * rank from `above` on (none when above < 0), whose tag is not keep_tag
 * (NULL: none kept). */
static void remove_parts(const char *dir, int rank, int above, const char *keep_tag)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        const char *tag;
        int r;
        if (!part_name(e->d_name, &tag, &r) || (rank >= 0 && r != rank && !(above >= 0 && r >= above)) ||
            (keep_tag && strncmp(tag, keep_tag, CKPTSET_TAG_LEN) == 0))
            continue;
        char *p = join(dir, e->d_name);
        if (p)
            unlink(p);
        free(p);
    }
    closedir(dp);
}

void ckptset_prune(const char *dir, int rank, int world, const char *keep_tag, int legacy)
{
    /* rank 0 also takes the parts of ranks a larger job of before had */
    remove_parts(dir, rank, rank == 0 ? world : -1, keep_tag);
    if (!legacy)
        return;
    static const char *const old[] = { CKPTSET_SINGLE, CKPTSET_MODEL, CKPTSET_RUN };
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
        char *p = join(dir, old[i]);
        if (p)
            unlink(p);
        free(p);
    }
}

/* Writes the version-2 manifest of t's checkpoint (the commit point). */
static int write_manifest(const trainer *t, const char *dir, const char *tag, int ranks,
                          const ckptset_records *rec, zb_err *err)
{
    char *path = join(dir, CKPTSET_MANIFEST);
    cJSON *j = cJSON_CreateObject();
    cJSON *parts = cJSON_CreateArray(), *layers = cJSON_CreateArray();
    cJSON *model = rec->model ? cJSON_Duplicate(rec->model, 1) : NULL;
    cJSON *run = rec->run ? cJSON_Duplicate(rec->run, 1) : cJSON_CreateNull();
    char *text = NULL;
    int rc = -1;
    if (!path || !j || !parts || !layers || !model || !run) {
        cJSON_Delete(parts);
        cJSON_Delete(layers);
        cJSON_Delete(model);
        cJSON_Delete(run);
        zb_fail(err, rec->model ? "out of memory" : "internal error: a checkpoint without a model record");
        goto out;
    }
    cJSON_AddStringToObject(j, "format", MANIFEST_FORMAT);
    cJSON_AddNumberToObject(j, "version", CKPTSET_VERSION);
    cJSON_AddNumberToObject(j, "step", (double)trainer_get_stats(t)->step);
    cJSON_AddNumberToObject(j, "ranks", ranks);
    cJSON_AddStringToObject(j, "tag", tag);
    for (int r = 0; r < ranks; r++) {
        char name[64];
        snprintf(name, sizeof name, "checkpoint.%s.rank-%d.bin", tag, r);
        cJSON_AddItemToArray(parts, cJSON_CreateString(name));
    }
    cJSON_AddItemToObject(j, "parts", parts);
    cJSON_AddNumberToObject(j, "parameters", (double)trainer_param_count(t));
    cJSON_AddNumberToObject(j, "stages", trainer_stage_count(t));
    for (int s = 0; s < trainer_stage_count(t); s++) {
        const llama_stage *ly = trainer_stage_layout(t, s);
        cJSON_AddItemToArray(layers, cJSON_CreateNumber(ly->l1 - ly->l0));
    }
    cJSON_AddItemToObject(j, "layers_per_stage", layers);
    cJSON_AddItemToObject(j, "model", model);
    cJSON_AddItemToObject(j, "run", run);
    text = cJSON_Print(j);
    if (!text) {
        zb_fail(err, "out of memory");
        goto out;
    }
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print's NUL becomes the last line's end */
    rc = zb_write_atomic(path, text, len + 1, err);
out:
    free(text);
    cJSON_Delete(j);
    free(path);
    return rc;
}

int ckptset_save(const trainer *t, const char *dir, const ckptset_records *rec,
                 const job_comm *comm, const unsigned char *own, zb_err *err)
{
    int rank = job_comm_rank(comm), world = job_comm_world(comm);
    /* 1. a fresh tag from rank 0, so no part the manifest names is
     * overwritten; each rank writes its own stages, atomically */
    char tag[CKPTSET_TAG_LEN + 1] = { 0 };
    if (rank == 0)
        ckptset_new_tag(tag);
    if (comm && comm->bcast(comm->ctx, tag, sizeof tag, 0, err) != 0)
        return -1;
    tag[CKPTSET_TAG_LEN] = '\0';
    char path[4096];
    int fail = ckptset_part_path(dir, tag, rank, path, sizeof path, err) != 0 ||
               trainer_save_stages(t, path, comm ? own : NULL, err) != 0;
    /* 2. every part is durable (outfile fsyncs file and directory) */
    if (job_comm_agree(comm, fail, err) != 0)
        return -1;
    /* 3. the commit point: the manifest with the records, by rank 0 */
    fail = rank == 0 && write_manifest(t, dir, tag, world, rec, err) != 0;
    if (job_comm_agree(comm, fail, err) != 0)
        return -1;
    /* 4. what the new manifest no longer names */
    ckptset_prune(dir, rank, world, tag, rank == 0);
    return 0;
}

/* ---- before the run ----------------------------------------------------- */

int ckptset_prepare(const char *dir, const char *const *inputs, int n_inputs, zb_err *err)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT)
            return zb_fail(err, "%s: %s", dir, strerror(errno));
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return zb_fail(err, "%s: cannot create the checkpoint directory: %s", dir,
                           strerror(errno));
        if (stat(dir, &st) != 0)
            return zb_fail(err, "%s: %s", dir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return zb_fail(err, "%s: not a directory", dir);
    for (int i = 0; i < n_inputs; i++) {
        struct stat in;
        if (inputs[i] && stat(inputs[i], &in) == 0 && in.st_dev == st.st_dev &&
            in.st_ino == st.st_ino)
            return zb_fail(err, "%s: the checkpoint directory is an input of this run (%s)", dir,
                           inputs[i]);
    }
    /* the manifest must be writable where it is; the other names the run
     * writes or deletes must be files (or absent), not something a
     * rename or unlink would fail on late, after the training */
    static const char *const names[] = { CKPTSET_MANIFEST, CKPTSET_SINGLE, CKPTSET_MODEL,
                                         CKPTSET_RUN, CKPTSET_LOCK };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char *p = join(dir, names[k]);
        if (!p)
            return zb_fail(err, "out of memory");
        int rc = 0;
        outfile_kind kind;
        struct stat ps;
        if (k == 0)
            rc = outfile_check(p, &kind, NULL, err);
        else if (lstat(p, &ps) == 0 && !S_ISREG(ps.st_mode))
            rc = zb_fail(err, "%s: not a regular file; this directory is not one `zbsched run "
                         "--checkpoint` wrote", p);
        for (int i = 0; rc == 0 && i < n_inputs; i++)
            rc = outfile_check_distinct(p, inputs[i], err);
        free(p);
        if (rc != 0)
            return -1;
    }
    return 0;
}

int ckptset_lock(const char *dir, zb_err *err)
{
    char *p = join(dir, CKPTSET_LOCK);
    if (!p)
        return zb_fail(err, "out of memory");
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        zb_fail(err, "%s: cannot create the checkpoint directory's lock: %s", p, strerror(errno));
        free(p);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int busy = errno == EWOULDBLOCK;
        char owner[32] = "";
        ssize_t n = busy ? pread(fd, owner, sizeof owner - 1, 0) : -1;
        owner[n > 0 ? n : 0] = '\0';
        owner[strcspn(owner, "\n")] = '\0';
        if (busy)
            zb_fail(err, "%s is in use by another run (%s%s holds %s); one checkpoint directory "
                    "takes one run at a time", dir, owner[0] ? "pid " : "a process",
                    owner[0] ? owner : "", p);
        else
            zb_fail(err, "%s: cannot lock: %s", p, strerror(errno));
        close(fd);
        free(p);
        return -1;
    }
    free(p);
    /* who holds it, for the message of the next one to try */
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) != n) {
        /* only the message of a second run would lack the pid */
    }
    return fd;
}

void ckptset_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* closing the last descriptor releases the flock */
}

/* 1 when path's own directory is dir (ds) and its name one the
 * checkpoint owns. */
static int owned_by_name(const struct stat *ds, const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char parent[4096];
    if (slash) {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof parent)
            return 0;
        memcpy(parent, path, n);
        parent[n] = '\0';
        if (n == 0)
            strcpy(parent, "/");
    } else {
        strcpy(parent, ".");
    }
    struct stat pp;
    return ckptset_owns_name(base) && stat(parent, &pp) == 0 && pp.st_dev == ds->st_dev &&
           pp.st_ino == ds->st_ino;
}

int ckptset_check_foreign(const char *dir, const char *path, const char *role, zb_err *err)
{
    if (!path || strcmp(path, "-") == 0)
        return 0;
    struct stat ds, ps;
    if (stat(dir, &ds) != 0)
        return 0; /* no directory yet: nothing of it to collide with */
    /* by name: the path, or where its symlinks lead (what a write of it
     * would replace), is in dir under a name the run owns */
    char *target = NULL;
    outfile_kind kind;
    zb_err ignored = { { 0 } };
    int owned = owned_by_name(&ds, path);
    if (!owned && outfile_check(path, &kind, &target, &ignored) == 0 && target)
        owned = owned_by_name(&ds, target);
    free(target);
    if (owned)
        return zb_fail(err, "%s: the %s is a file of the checkpoint directory %s, which the run "
                       "writes or deletes; keep it elsewhere", path, role, dir);
    /* by identity: the same file as one of dir's, through a link */
    if (stat(path, &ps) != 0 || !S_ISREG(ps.st_mode))
        return 0;
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(dp)) != NULL) {
        if (!ckptset_owns_name(e->d_name))
            continue;
        char *p = join(dir, e->d_name);
        struct stat fs;
        if (p && stat(p, &fs) == 0 && fs.st_dev == ps.st_dev && fs.st_ino == ps.st_ino)
            rc = zb_fail(err, "%s: the %s is the checkpoint directory's %s (another name for it), "
                         "which the run writes or deletes; keep it elsewhere", path, role, p);
        free(p);
    }
    closedir(dp);
    return rc;
}
