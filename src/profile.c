/*
 * profile.c: reading and writing measured profiles (profile.h).
 *
 * Strict on input (every required field present, finite, non-negative;
 * unknown top-level keys refused so that a misspelt field is not silently
 * ignored), exact on output (cJSON prints doubles so that they read back
 * bit for bit).
 */
#include "src/profile.h"
#include "src/input.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "src/sched_io.h"

void profile_init(zb_profile *p)
{
    memset(p, 0, sizeof *p);
    p->micro_batch = 1;
    p->seq_len = 1;
    p->t_comm = -1;
    p->static_bytes_per_layer = -1;
    p->reserve_bytes = -1;
}

static int get_number(const cJSON *obj, const char *where, const char *key, int required,
                      double *out, zb_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) {
        if (required)
            return zb_fail(err, "%s\"%s\" is missing", where, key);
        return 0;
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < 0)
        return zb_fail(err, "%s\"%s\" must be a finite number >= 0", where, key);
    *out = it->valuedouble;
    return 0;
}

static int get_part(const cJSON *root, const char *key, profile_part *part, zb_err *err)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsObject(o))
        return zb_fail(err, "\"%s\" must be an object with t_f, t_b, t_w, m_b, m_w", key);
    char where[48];
    snprintf(where, sizeof where, "%s: ", key);
    if (get_number(o, where, "t_f", 1, &part->t_f, err) < 0 ||
        get_number(o, where, "t_b", 1, &part->t_b, err) < 0 ||
        get_number(o, where, "t_w", 1, &part->t_w, err) < 0 ||
        get_number(o, where, "m_b", 1, &part->m_b, err) < 0 ||
        get_number(o, where, "m_w", 1, &part->m_w, err) < 0)
        return -1;
    return 0;
}

static int get_string(const cJSON *root, const char *key, char *dst, size_t cap, zb_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it)
        return 0;
    if (!cJSON_IsString(it) || strlen(it->valuestring) >= cap)
        return zb_fail(err, "\"%s\" must be a string shorter than %zu", key, cap);
    strcpy(dst, it->valuestring);
    return 0;
}

static int get_positive_int(const cJSON *root, const char *key, int *out, zb_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
        it->valuedouble < 1 || it->valuedouble > 1e9)
        return zb_fail(err, "\"%s\" must be a positive whole number", key);
    *out = (int)it->valuedouble;
    return 0;
}

static int parse_root(const cJSON *root, zb_profile *p, zb_err *err)
{
    static const char *const keys[] = {
        "format", "version", "model", "hardware", "micro_batch", "seq_len", "recompute",
        "layer", "embedding", "head", "t_comm", "static_bytes_per_layer", "reserve_bytes", NULL
    };
    if (!cJSON_IsObject(root))
        return zb_fail(err, "a profile must be a JSON object");
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        int ok = 0;
        for (int i = 0; keys[i]; i++)
            ok |= it->string && !strcmp(it->string, keys[i]);
        if (!ok)
            return zb_fail(err, "unknown field \"%s\"", it->string ? it->string : "?");
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, PROFILE_FORMAT_NAME))
        return zb_fail(err, "not a profile file (\"format\" must be \"%s\")", PROFILE_FORMAT_NAME);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != PROFILE_FORMAT_VERSION)
        return zb_fail(err, "unsupported profile version (this build reads version %d)", PROFILE_FORMAT_VERSION);
    profile_init(p);
    if (get_string(root, "model", p->model, sizeof p->model, err) < 0 ||
        get_string(root, "hardware", p->hardware, sizeof p->hardware, err) < 0 ||
        get_positive_int(root, "micro_batch", &p->micro_batch, err) < 0 ||
        get_positive_int(root, "seq_len", &p->seq_len, err) < 0)
        return -1;
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(root, "recompute");
    if (rc) {
        if (!cJSON_IsBool(rc))
            return zb_fail(err, "\"recompute\" must be true or false");
        p->recompute = cJSON_IsTrue(rc);
    }
    if (get_part(root, "layer", &p->layer, err) < 0 ||
        get_part(root, "embedding", &p->embedding, err) < 0 ||
        get_part(root, "head", &p->head, err) < 0 ||
        get_number(root, "", "t_comm", 0, &p->t_comm, err) < 0 ||
        get_number(root, "", "static_bytes_per_layer", 0, &p->static_bytes_per_layer, err) < 0 ||
        get_number(root, "", "reserve_bytes", 0, &p->reserve_bytes, err) < 0)
        return -1;
    if (!(p->layer.t_f > 0))
        return zb_fail(err, "layer: \"t_f\" must be positive");
    return 0;
}

int profile_parse(const char *text, size_t len, zb_profile *p, zb_err *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root)
        return zb_fail(err, "not valid JSON (near byte %ld)", end ? (long)(end - text) : -1L);
    if (zb_json_check_strings(text, len, err) || zb_json_check_duplicates(root, err)) {
        cJSON_Delete(root);
        return -1;
    }
    zb_profile tmp;
    int rc = parse_root(root, &tmp, err);
    cJSON_Delete(root);
    if (rc == 0)
        *p = tmp;
    return rc;
}

int profile_load(const char *path, zb_profile *p, zb_err *err)
{
    char *text;
    size_t len;
    if (zb_read_file(path, &text, &len, err) < 0)
        return -1;
    int rc = profile_parse(text, len, p, err);
    free(text);
    return rc < 0 ? zb_wrap(err, "%s: ", path) : 0;
}

static cJSON *part_to_json(const profile_part *part)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    if (!cJSON_AddNumberToObject(o, "t_f", part->t_f) || !cJSON_AddNumberToObject(o, "t_b", part->t_b) ||
        !cJSON_AddNumberToObject(o, "t_w", part->t_w) || !cJSON_AddNumberToObject(o, "m_b", part->m_b) ||
        !cJSON_AddNumberToObject(o, "m_w", part->m_w)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

char *profile_to_string(const zb_profile *p)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = cJSON_AddStringToObject(o, "format", PROFILE_FORMAT_NAME) &&
             cJSON_AddNumberToObject(o, "version", PROFILE_FORMAT_VERSION) &&
             cJSON_AddStringToObject(o, "model", p->model) &&
             cJSON_AddStringToObject(o, "hardware", p->hardware) &&
             cJSON_AddNumberToObject(o, "micro_batch", p->micro_batch) &&
             cJSON_AddNumberToObject(o, "seq_len", p->seq_len) &&
             cJSON_AddBoolToObject(o, "recompute", p->recompute);
    const profile_part *parts[3] = { &p->layer, &p->embedding, &p->head };
    const char *names[3] = { "layer", "embedding", "head" };
    for (int i = 0; ok && i < 3; i++) {
        cJSON *j = part_to_json(parts[i]);
        ok = j != NULL;
        if (j)
            cJSON_AddItemToObject(o, names[i], j);
    }
    if (ok && p->t_comm >= 0)
        ok = cJSON_AddNumberToObject(o, "t_comm", p->t_comm) != NULL;
    if (ok && p->static_bytes_per_layer >= 0)
        ok = cJSON_AddNumberToObject(o, "static_bytes_per_layer", p->static_bytes_per_layer) != NULL;
    if (ok && p->reserve_bytes >= 0)
        ok = cJSON_AddNumberToObject(o, "reserve_bytes", p->reserve_bytes) != NULL;
    char *s = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    return s;
}

int profile_save(const zb_profile *p, const char *path, zb_err *err)
{
    char *s = profile_to_string(p);
    if (!s)
        return zb_fail(err, "out of memory writing the profile");
    size_t n = strlen(s);
    /* Files end with a newline like every other text file. */
    char *t = realloc(s, n + 2);
    if (!t) {
        free(s);
        return zb_fail(err, "out of memory writing the profile");
    }
    t[n] = '\n';
    t[n + 1] = '\0';
    int rc = zb_write_atomic(path, t, n + 1, err);
    free(t);
    return rc;
}
