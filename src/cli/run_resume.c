/*
 * run_resume.c: DIR/run.json, the settings a resume must agree on
 * (run_resume.h).  A small cJSON document; numbers that must compare
 * exactly (the 64-bit hash, lengths) are stored as strings of digits
 * because JSON numbers are doubles.
 */
#include "src/cli/run_resume.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "src/sched_io.h"

uint64_t run_data_hash(const zb_data *d)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < d->n_tokens; i++) {
        h ^= d->chars[d->tokens[i]];
        h *= 1099511628211ULL;
    }
    return h;
}

static char *identity_path(const char *dir)
{
    size_t n = strlen(dir) + sizeof RUN_IDENTITY_NAME + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, RUN_IDENTITY_NAME);
    return p;
}

int run_identity_save(const char *dir, const run_identity *id, zb_err *err)
{
    char *path = identity_path(dir);
    char *text = NULL;
    if (!path || (text = malloc(512)) == NULL) {
        free(path);
        return zb_fail(err, "out of memory");
    }
    int n = snprintf(text, 512,
                     "{\"rope_theta\": %.17g, \"batch_size\": %ld, \"micro_batches\": %ld, \"seed\": \"%ld\", "
                     "\"data_hash\": \"%" PRIu64 "\", \"data_bytes\": \"%" PRIu64 "\"}\n",
                     id->rope_theta, id->batch_size, id->micro_batches, id->seed, id->data_hash,
                     id->data_bytes);
    int rc = zb_write_atomic(path, text, (size_t)n, err);
    free(text);
    free(path);
    return rc;
}

/* Reads the number or digit string `key` of o into *out; -1 when absent. */
static int get_field(const cJSON *o, const char *key, double *num, uint64_t *u)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(it)) {
        *num = it->valuedouble;
        return 0;
    }
    if (cJSON_IsString(it) && it->valuestring[0]) {
        char *end;
        errno = 0;
        *u = strtoull(it->valuestring, &end, 10);
        return *end || errno ? -1 : 0;
    }
    return -1;
}

int run_identity_check(const char *dir, const run_identity *now, char *note, size_t cap, zb_err *err)
{
    char *path = identity_path(dir);
    if (!path)
        return zb_fail(err, "out of memory");
    if (access(path, F_OK) != 0) {
        free(path);
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    if (zb_read_file(path, &text, &len, err) != 0) {
        free(path);
        return -1;
    }
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    double theta = 0, batch = 0, micro = 0, unused = 0;
    uint64_t seed = 0, hash = 0, bytes = 0, unused_u = 0;
    if (!cJSON_IsObject(o) || get_field(o, "rope_theta", &theta, &unused_u) ||
        get_field(o, "batch_size", &batch, &unused_u) || get_field(o, "micro_batches", &micro, &unused_u) ||
        get_field(o, "seed", &unused, &seed) || get_field(o, "data_hash", &unused, &hash) ||
        get_field(o, "data_bytes", &unused, &bytes)) {
        cJSON_Delete(o);
        int rc = zb_fail(err, "%s: not a run description written by zbsched run", path);
        free(path);
        return rc;
    }
    cJSON_Delete(o);
    int rc = 0;
    const char *fresh = "resume only the same run, or start afresh with another --checkpoint DIR";
    if (theta != now->rope_theta)
        rc = zb_fail(err, "%s: the checkpoint was trained with rope_theta %g, this run has %g; %s",
                     dir, theta, now->rope_theta, fresh);
    else if ((long)batch != now->batch_size)
        rc = zb_fail(err, "%s: the checkpoint was trained with batch size %ld, this run has %ld; %s",
                     dir, (long)batch, now->batch_size, fresh);
    else if ((long)micro != now->micro_batches)
        rc = zb_fail(err, "%s: the checkpoint was trained with %ld micro-batches per step, this "
                     "schedule has %ld; %s", dir, (long)micro, now->micro_batches, fresh);
    else if (hash != now->data_hash || bytes != now->data_bytes)
        rc = zb_fail(err, "%s: the checkpoint was trained on another text (%" PRIu64 " bytes, this "
                     "--data has %" PRIu64 "); %s", dir, bytes, now->data_bytes, fresh);
    else if ((long)seed != now->seed) {
        snprintf(note, cap, "resuming: --seed %ld differs from the checkpoint's %ld and is not used "
                 "(parameters and data order come from the checkpoint)", now->seed, (long)seed);
        rc = 1;
    }
    free(path);
    return rc;
}
