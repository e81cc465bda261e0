/*
 * run_record.c: the settings a resume must agree on, as a JSON record
 * (run_record.h).
 */
#include "runtime/run_record.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t run_data_hash(const zb_data *d)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < d->n_tokens; i++) {
        h ^= d->chars[d->tokens[i]];
        h *= 1099511628211ULL;
    }
    return h;
}

cJSON *run_record_to_json(const run_identity *id)
{
    char seed[32], hash[32], bytes[32];
    snprintf(seed, sizeof seed, "%ld", id->seed);
    snprintf(hash, sizeof hash, "%" PRIu64, id->data_hash);
    snprintf(bytes, sizeof bytes, "%" PRIu64, id->data_bytes);
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddNumberToObject(o, "rope_theta", id->rope_theta) ||
        !cJSON_AddNumberToObject(o, "batch_size", (double)id->batch_size) ||
        !cJSON_AddNumberToObject(o, "micro_batches", (double)id->micro_batches) ||
        !cJSON_AddStringToObject(o, "seed", seed) || !cJSON_AddStringToObject(o, "data_hash", hash) ||
        !cJSON_AddStringToObject(o, "data_bytes", bytes)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Reads the number or digit string `key` of o into *num or *u; -1 when
 * absent or malformed. */
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

int run_record_check(const cJSON *o, const char *where, const run_identity *now, char *note,
                     size_t cap, zb_err *err)
{
    double theta = 0, batch = 0, micro = 0, unused = 0;
    uint64_t seed = 0, hash = 0, bytes = 0, unused_u = 0;
    if (!cJSON_IsObject(o) || get_field(o, "rope_theta", &theta, &unused_u) ||
        get_field(o, "batch_size", &batch, &unused_u) ||
        get_field(o, "micro_batches", &micro, &unused_u) || get_field(o, "seed", &unused, &seed) ||
        get_field(o, "data_hash", &unused, &hash) || get_field(o, "data_bytes", &unused, &bytes))
        return zb_fail(err, "%s: not a run description written by zbsched run", where);
    const char *fresh = "resume only the same run, or start afresh with another --checkpoint DIR";
    if (theta != now->rope_theta)
        return zb_fail(err, "%s: the checkpoint was trained with rope_theta %g, this run has %g; %s",
                       where, theta, now->rope_theta, fresh);
    if ((long)batch != now->batch_size)
        return zb_fail(err, "%s: the checkpoint was trained with batch size %ld, this run has %ld; "
                       "%s", where, (long)batch, now->batch_size, fresh);
    if ((long)micro != now->micro_batches)
        return zb_fail(err, "%s: the checkpoint was trained with %ld micro-batches per step, this "
                       "schedule has %ld; %s", where, (long)micro, now->micro_batches, fresh);
    if (hash != now->data_hash || bytes != now->data_bytes)
        return zb_fail(err, "%s: the checkpoint was trained on another text (%" PRIu64 " bytes, "
                       "this --data has %" PRIu64 "); %s", where, bytes, now->data_bytes, fresh);
    if ((long)seed != now->seed) {
        snprintf(note, cap, "resuming: --seed %ld differs from the checkpoint's %ld and is not used "
                 "(parameters and data order come from the checkpoint)", now->seed, (long)seed);
        return 1;
    }
    return 0;
}
