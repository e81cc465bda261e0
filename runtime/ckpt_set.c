/*
 * ckpt_set.c: per-rank checkpoint parts, their manifest, and finding the
 * newest complete checkpoint of a directory (ckpt_set.h).
 *
 * The manifest is a small cJSON document written with zb_write_atomic
 * (src/outfile.h underneath); the parts are trainer checkpoints
 * (runtime/checkpoint.h), each checksummed on its own.
 */
#include "runtime/ckpt_set.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "src/sched_io.h"

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

int ckptset_manifest_write(const char *dir, const ckptset_manifest *m, zb_err *err)
{
    char *path = join(dir, CKPTSET_MANIFEST);
    cJSON *j = cJSON_CreateObject();
    cJSON *parts = cJSON_CreateArray();
    char *text = NULL;
    int rc = -1;
    if (!path || !j || !parts) {
        cJSON_Delete(parts);
        zb_fail(err, "out of memory");
        goto out;
    }
    cJSON_AddStringToObject(j, "format", "zbsched checkpoint parts");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddNumberToObject(j, "step", (double)m->step);
    cJSON_AddNumberToObject(j, "ranks", m->ranks);
    cJSON_AddStringToObject(j, "tag", m->tag);
    for (int r = 0; r < m->ranks; r++) {
        char name[64];
        snprintf(name, sizeof name, "checkpoint.%s.rank-%d.bin", m->tag, r);
        cJSON_AddItemToArray(parts, cJSON_CreateString(name));
    }
    cJSON_AddItemToObject(j, "parts", parts);
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

int ckptset_manifest_read(const char *dir, ckptset_manifest *m, zb_err *err)
{
    char *path = join(dir, CKPTSET_MANIFEST);
    if (!path)
        return zb_fail(err, "out of memory");
    if (access(path, F_OK) != 0 && errno == ENOENT) {
        free(path);
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    if (zb_read_file(path, &text, &len, err) != 0) {
        free(path);
        return -1;
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(j, "ranks");
    const cJSON *tag = cJSON_GetObjectItemCaseSensitive(j, "tag");
    int ok = cJSON_IsNumber(step) && cJSON_IsNumber(ranks) && cJSON_IsString(tag) &&
             step->valuedouble >= 0 && step->valuedouble < 1e15 && ranks->valuedouble >= 1 &&
             ranks->valuedouble <= 65536 && step->valuedouble == (double)(long)step->valuedouble &&
             ranks->valuedouble == (double)(int)ranks->valuedouble &&
             strlen(tag->valuestring) == CKPTSET_TAG_LEN &&
             strspn(tag->valuestring, "0123456789abcdef") == CKPTSET_TAG_LEN;
    if (ok) {
        m->step = (long)step->valuedouble;
        m->ranks = (int)ranks->valuedouble;
        memcpy(m->tag, tag->valuestring, CKPTSET_TAG_LEN + 1);
    }
    cJSON_Delete(j);
    int rc = ok ? 1 : zb_fail(err, "%s: not a checkpoint manifest (step, ranks and tag expected)",
                              path);
    free(path);
    return rc;
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

/* Deletes dir's part files of rank (any rank when rank < 0) whose tag is
 * not keep_tag (NULL: none kept). */
static void remove_parts(const char *dir, int rank, const char *keep_tag)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        const char *tag;
        int r;
        if (!part_name(e->d_name, &tag, &r) || (rank >= 0 && r != rank) ||
            (keep_tag && strncmp(tag, keep_tag, CKPTSET_TAG_LEN) == 0))
            continue;
        char *p = join(dir, e->d_name);
        if (p)
            unlink(p);
        free(p);
    }
    closedir(dp);
}

void ckptset_prune(const char *dir, int rank, const char *keep_tag, int drop_single)
{
    remove_parts(dir, rank, keep_tag);
    if (drop_single) {
        char *p = join(dir, CKPTSET_SINGLE);
        if (p)
            unlink(p);
        free(p);
    }
}

int ckptset_save_single(const trainer *t, const char *dir, zb_err *err)
{
    char *path = join(dir, CKPTSET_SINGLE);
    char *man = join(dir, CKPTSET_MANIFEST);
    int rc = path && man ? trainer_save(t, path, err) : zb_fail(err, "out of memory");
    /* checkpoint.bin is the newest now: the set is clutter */
    if (rc == 0 && unlink(man) == 0)
        remove_parts(dir, -1, NULL);
    free(path);
    free(man);
    return rc;
}

/* Loads the set m of dir: this rank's own part (rank >= 0, same world),
 * else every part. */
static int load_set(trainer *t, const char *dir, const ckptset_manifest *m, int rank, int world,
                    zb_err *err)
{
    int own = rank >= 0 && world == m->ranks;
    int n = own ? 1 : m->ranks;
    char **paths = calloc((size_t)n, sizeof *paths);
    int rc = paths ? 0 : zb_fail(err, "out of memory");
    size_t cap = strlen(dir) + 64;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!(paths[i] = malloc(cap)))
            rc = zb_fail(err, "out of memory");
        else
            rc = ckptset_part_path(dir, m->tag, own ? rank : i, paths[i], cap, err);
    }
    if (rc == 0)
        rc = trainer_load_parts(t, (const char *const *)paths, n, !own, err);
    if (rc == 0 && trainer_get_stats(t)->step != m->step)
        rc = zb_fail(err, "%s: a part of step %ld, but %s/%s says step %ld", paths[0],
                     trainer_get_stats(t)->step, dir, CKPTSET_MANIFEST, m->step);
    for (int i = 0; paths && i < n; i++)
        free(paths[i]);
    free(paths);
    return rc;
}

int ckptset_load(trainer *t, const char *dir, int rank, int world, const char **what,
                 zb_err *err)
{
    ckptset_manifest m;
    int have_set = ckptset_manifest_read(dir, &m, err);
    if (have_set < 0)
        return -1;
    char *single = join(dir, CKPTSET_SINGLE);
    if (!single)
        return zb_fail(err, "out of memory");
    int rc;
    if (!have_set) {
        rc = trainer_load(t, single, err);
        if (what)
            *what = CKPTSET_SINGLE;
    } else {
        /* Both only after a crash between a save and its clean-up: the
         * newer step wins, and a damaged checkpoint.bin is no reason to
         * refuse a complete set. */
        zb_err ignored = { { 0 } };
        rc = access(single, F_OK) == 0 && trainer_load(t, single, &ignored) == 0 &&
                     trainer_get_stats(t)->step >= m.step
                 ? 0
                 : 1;
        if (what)
            *what = rc == 0 ? CKPTSET_SINGLE : CKPTSET_MANIFEST;
        if (rc == 1)
            rc = load_set(t, dir, &m, rank, world, err);
    }
    free(single);
    return rc;
}
