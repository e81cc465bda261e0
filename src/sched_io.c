/*
 * sched_io.c: the versioned JSON schedule file (sched_io.h), specified in
 * docs/schedule-format.md.
 *
 * Loading parses the whole document with cJSON, then walks the top-level
 * fields once.  Op tokens ("F3", "BW3@5") are parsed by hand, not with
 * sscanf, because a p=64, m=1024 schedule has ~200,000 of them; the cost of
 * loading is dominated by cJSON's tree (one node and one string per op).
 * Every structural problem is reported with the field, and for ops with the
 * device and position, e.g. "device 2, op 17: bad op token 'X3'".
 *
 * Writing does not build a cJSON tree: it appends to a growing buffer, one
 * device's op list per line so that a diff of two schedules is readable.
 * Doubles are printed in the shortest form that reads back to the same
 * value (%.15g, else %.16g, else %.17g), so files round-trip exactly.
 * Unknown top-level fields (the solver's, the model's, the runtime's
 * "predicted" figures, ...) are kept in sched_t.meta and written back as
 * they came.
 *
 * Files are written through src/outfile.h (atomic replacement of regular
 * files, write-through to FIFOs and character devices), so that a failed or
 * interrupted command never leaves a half file.
 */
#include "src/sched_io.h"
#include "src/outfile.h"
#include "src/parse_uint.h"
#include "src/input.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Upper bounds on the header's counts.  They keep a hostile or mistyped
 * header from asking for absurd allocations; real pipelines are far below. */
#define SCHED_MAX_DEVICES 65536
#define SCHED_MAX_STAGES (1 << 20)
#define SCHED_MAX_MICRO (1 << 24)

/* ---------------------------------------------------------------- loading */

/* Line and column (1-based) of byte offset `at` in text, for parse errors. */
static void text_position(const char *text, size_t len, size_t at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at && i < len; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Whether a document that failed to parse looks cut short: it ends inside
 * a string or with objects/arrays still open.  Only run on the error path,
 * to tell "truncated" from "malformed at line L, column C". */
static int looks_truncated(const char *text, size_t len)
{
    long depth = 0;
    int in_string = 0, escape = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (escape)
                escape = 0;
            else if (c == '\\')
                escape = 1;
            else if (c == '"')
                in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return in_string || depth > 0;
}

/* Number of the last line of text (1-based). */
static int text_position_lines(const char *text, size_t len)
{
    int line, col;
    text_position(text, len, len, &line, &col);
    return line;
}

/* Reads a whole number in [min, max] from a JSON number item. */
static int get_int(const cJSON *it, const char *what, long min, long max, long *out, zb_err *err)
{
    if (!cJSON_IsNumber(it))
        return zb_fail(err, "%s must be a number", what);
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v))
        return zb_fail(err, "%s must be a whole number", what);
    if (v < (double)min || v > (double)max)
        return zb_fail(err, "%s is %.17g, not in %ld..%ld", what, v, min, max);
    *out = (long)v;
    return 0;
}

static int get_double(const cJSON *it, const char *what, int nonneg, double *out, zb_err *err)
{
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
        return zb_fail(err, "%s must be a finite number", what);
    if (nonneg && it->valuedouble < 0)
        return zb_fail(err, "%s must not be negative", what);
    *out = it->valuedouble;
    return 0;
}

/* Copies a JSON string into dst[cap], rejecting longer ones. */
static int get_string(const cJSON *it, const char *what, char *dst, size_t cap, zb_err *err)
{
    if (!cJSON_IsString(it) || !it->valuestring)
        return zb_fail(err, "%s must be a string", what);
    size_t n = strlen(it->valuestring);
    if (n >= cap)
        return zb_fail(err, "%s is longer than %zu characters", what, cap - 1);
    memcpy(dst, it->valuestring, n + 1);
    return 0;
}

/* A per-stage field: one number for every stage, or an array of S numbers.
 * `off` is the field's offset inside stage_cost. */
static int get_stage_field(sched_t *s, const cJSON *parent, const char *obj, const char *key,
                           size_t off, int nonneg, int required, zb_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(parent, key);
    char what[64];
    snprintf(what, sizeof what, "%s.%s", obj, key);
    if (!it) {
        if (required)
            return zb_fail(err, "%s is missing", what);
        return 0;
    }
    if (cJSON_IsArray(it)) {
        if (cJSON_GetArraySize(it) != s->n_stages)
            return zb_fail(err, "%s has %d entries, expected one per stage (%d)",
                           what, cJSON_GetArraySize(it), s->n_stages);
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, it) {
            char ew[80];
            snprintf(ew, sizeof ew, "%s[%d]", what, i);
            if (get_double(e, ew, nonneg, (double *)((char *)&s->cost[i] + off), err))
                return -1;
            i++;
        }
        return 0;
    }
    double v = 0;
    if (get_double(it, what, nonneg, &v, err))
        return -1;
    for (int i = 0; i < s->n_stages; i++)
        *(double *)((char *)&s->cost[i] + off) = v;
    return 0;
}

/* A per-device array (memory.limit, memory.static): one number for every
 * device or an array of p numbers.  Allocates *dst. */
static int get_device_array(const sched_t *s, const cJSON *it, const char *what, double **dst, zb_err *err)
{
    double *a = malloc(sizeof *a * (size_t)s->n_devices);
    if (!a)
        return zb_fail(err, "out of memory");
    if (cJSON_IsArray(it)) {
        if (cJSON_GetArraySize(it) != s->n_devices) {
            free(a);
            return zb_fail(err, "%s has %d entries, expected one per device (%d)",
                           what, cJSON_GetArraySize(it), s->n_devices);
        }
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, it) {
            char ew[80];
            snprintf(ew, sizeof ew, "%s[%d]", what, i);
            if (get_double(e, ew, 1, &a[i], err)) {
                free(a);
                return -1;
            }
            i++;
        }
    } else {
        double v = 0;
        if (get_double(it, what, 1, &v, err)) {
            free(a);
            return -1;
        }
        for (int i = 0; i < s->n_devices; i++)
            a[i] = v;
    }
    *dst = a;
    return 0;
}

/* Parses an op token: KIND MB [@STAGE], KIND one of F, B, W, BW.  *stage is
 * -1 when the token names none.  Returns 0 or -1 when malformed. */
static int parse_op_token(const char *tok, int *kind, int *mb, int *stage)
{
    const char *p = tok;
    switch (*p) {
    case 'F': *kind = OP_F; p++; break;
    case 'W': *kind = OP_W; p++; break;
    case 'S': *kind = OP_S; p++; break; /* vocabulary passes (version 2) */
    case 'T': *kind = OP_T; p++; break;
    case 'B':
        p++;
        if (*p == 'W') {
            *kind = OP_BW;
            p++;
        } else {
            *kind = OP_B;
        }
        break;
    default:
        return -1;
    }
    if (zb_parse_uint(&p, NULL, mb))
        return -1;
    *stage = -1;
    if (*p == '@') {
        p++;
        if (zb_parse_uint(&p, NULL, stage))
            return -1;
    }
    return *p == '\0' ? 0 : -1;
}

/* A vocabulary pass token (S3, T3) is only meaningful in a version-2 file
 * with a "vocab" object, and names no stage: its shard is its device. */
static int vocab_op_check(const sched_t *s, int d, int i, const char *tok, int stage, zb_err *err)
{
    if (!sched_has_vocab(s))
        return zb_fail(err, "device %d, op %d (%s): vocabulary passes S and T need version 2 "
                       "and a \"vocab\" object", d, i, tok);
    if (stage >= 0)
        return zb_fail(err, "device %d, op %d (%s): S and T name no stage (their shard is the "
                       "device)", d, i, tok);
    return 0;
}

static int load_ops(sched_t *s, const cJSON *ops, zb_err *err)
{
    if (!cJSON_IsArray(ops))
        return zb_fail(err, "ops must be an array with one list per device");
    if (cJSON_GetArraySize(ops) != s->n_devices)
        return zb_fail(err, "ops has %d lists, expected one per device (%d)",
                       cJSON_GetArraySize(ops), s->n_devices);
    /* The stage a token without "@" means: the device's only stage. */
    int *only = malloc(sizeof *only * (size_t)s->n_devices);
    if (!only)
        return zb_fail(err, "out of memory");
    for (int d = 0; d < s->n_devices; d++)
        only[d] = -1;
    for (int st = 0; st < s->n_stages; st++) {
        int d = s->stage_device[st];
        only[d] = only[d] == -1 ? st : -2;
    }
    int d = 0, rc = 0;
    const cJSON *lane;
    cJSON_ArrayForEach(lane, ops) {
        if (!cJSON_IsArray(lane)) {
            rc = zb_fail(err, "device %d: ops must be an array of op tokens", d);
            break;
        }
        int i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, lane) {
            int kind, mb, stage;
            if (!cJSON_IsString(t) || !t->valuestring) {
                rc = zb_fail(err, "device %d, op %d: op must be a string like \"F3\" or \"B3@5\"", d, i);
                break;
            }
            if (parse_op_token(t->valuestring, &kind, &mb, &stage)) {
                char quoted[40 * 4 + 1];
                size_t n = strlen(t->valuestring);
                zb_escape_bytes(quoted, sizeof quoted, t->valuestring, n > 40 ? 40 : n);
                rc = zb_fail(err, "device %d, op %d: bad op token '%s' (expected F, B, W, BW, S or T, "
                             "a micro-batch, optionally @stage: F3, BW3@5)", d, i, quoted);
                break;
            }
            if (mb >= s->n_micro) {
                rc = zb_fail(err, "device %d, op %d (%s): micro-batch %d out of range 0..%d",
                             d, i, t->valuestring, mb, s->n_micro - 1);
                break;
            }
            if (OP_IS_VOCAB(kind)) {
                if ((rc = vocab_op_check(s, d, i, t->valuestring, stage, err)))
                    break;
                stage = d; /* shard d lives on device d */
            } else if (stage < 0) {
                if (only[d] < 0) {
                    rc = zb_fail(err, "device %d, op %d (%s): the device holds %s stage, so the op "
                                 "must name one (%s@STAGE)", d, i, t->valuestring,
                                 only[d] == -1 ? "no" : "more than one", t->valuestring);
                    break;
                }
                stage = only[d];
            } else if (stage >= s->n_stages) {
                rc = zb_fail(err, "device %d, op %d (%s): stage %d out of range 0..%d",
                             d, i, t->valuestring, stage, s->n_stages - 1);
                break;
            }
            if (sched_push(s, d, (op_kind)kind, stage, mb)) {
                rc = zb_fail(err, "out of memory loading ops");
                break;
            }
            i++;
        }
        if (rc)
            break;
        d++;
    }
    free(only);
    return rc;
}

static int load_times(sched_t *s, const cJSON *times, zb_err *err)
{
    if (!cJSON_IsArray(times) || cJSON_GetArraySize(times) != s->n_devices)
        return zb_fail(err, "times must be an array with one entry per device (%d)", s->n_devices);
    int d = 0;
    const cJSON *lane;
    cJSON_ArrayForEach(lane, times) {
        if (cJSON_IsNull(lane)) {
            d++;
            continue;
        }
        if (!cJSON_IsArray(lane))
            return zb_fail(err, "device %d: times must be null or an array of [start, end]", d);
        if (cJSON_GetArraySize(lane) != s->dev[d].n_ops)
            return zb_fail(err, "device %d: times has %d entries for %d ops",
                           d, cJSON_GetArraySize(lane), s->dev[d].n_ops);
        if (sched_lane_alloc_times(s, d))
            return zb_fail(err, "out of memory loading times");
        int i = 0;
        const cJSON *pair;
        cJSON_ArrayForEach(pair, lane) {
            const cJSON *a = cJSON_GetArrayItem(pair, 0), *b = cJSON_GetArrayItem(pair, 1);
            if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 ||
                !cJSON_IsNumber(a) || !cJSON_IsNumber(b) ||
                !isfinite(a->valuedouble) || !isfinite(b->valuedouble))
                return zb_fail(err, "device %d, op %d: times entry must be [start, end] numbers", d, i);
            if (b->valuedouble < a->valuedouble)
                return zb_fail(err, "device %d, op %d: measured end is before its start", d, i);
            s->dev[d].start[i] = a->valuedouble;
            s->dev[d].end[i] = b->valuedouble;
            i++;
        }
        d++;
    }
    return 0;
}

static int load_costs(sched_t *s, const cJSON *costs, zb_err *err)
{
    if (!cJSON_IsObject(costs))
        return zb_fail(err, "costs must be an object with F, B, W and comm");
    if (get_stage_field(s, costs, "costs", "F", offsetof(stage_cost, t_f), 1, 1, err) ||
        get_stage_field(s, costs, "costs", "B", offsetof(stage_cost, t_b), 1, 1, err) ||
        get_stage_field(s, costs, "costs", "W", offsetof(stage_cost, t_w), 1, 1, err))
        return -1;
    const cJSON *comm = cJSON_GetObjectItemCaseSensitive(costs, "comm");
    s->t_comm = 0;
    if (comm && get_double(comm, "costs.comm", 1, &s->t_comm, err))
        return -1;
    return 0;
}

static int load_memory(sched_t *s, const cJSON *mem, zb_err *err)
{
    if (!cJSON_IsObject(mem))
        return zb_fail(err, "memory must be an object with F, B and W");
    if (get_stage_field(s, mem, "memory", "F", offsetof(stage_cost, d_f), 0, 1, err) ||
        get_stage_field(s, mem, "memory", "B", offsetof(stage_cost, d_b), 0, 1, err) ||
        get_stage_field(s, mem, "memory", "W", offsetof(stage_cost, d_w), 0, 1, err))
        return -1;
    const cJSON *it;
    if ((it = cJSON_GetObjectItemCaseSensitive(mem, "unit")) &&
        get_string(it, "memory.unit", s->mem_unit, sizeof s->mem_unit, err))
        return -1;
    if ((it = cJSON_GetObjectItemCaseSensitive(mem, "limit")) &&
        get_device_array(s, it, "memory.limit", &s->mem_limit, err))
        return -1;
    if ((it = cJSON_GetObjectItemCaseSensitive(mem, "static")) &&
        get_device_array(s, it, "memory.static", &s->mem_static, err))
        return -1;
    return 0;
}

/* Version 2's "vocab" object: {"variant": 1|2, "S": t, "T": t, "C0": t,
 * "C1": t, "memory": {"S": d, "T": d}}.  Times are not negative; C1 is
 * required by Vocab-2 only and memory defaults to 0 (docs/schedule-format.md). */
static int load_vocab(sched_t *s, const cJSON *v, zb_err *err)
{
    if (!cJSON_IsObject(v))
        return zb_fail(err, "vocab must be an object with variant, S, T and C0");
    long variant;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(v, "variant");
    if (!it)
        return zb_fail(err, "vocab.variant is missing (1 or 2)");
    if (get_int(it, "vocab.variant", 1, 2, &variant, err))
        return -1;
    static const char *const time_keys[4] = { "S", "T", "C0", "C1" };
    double t[4] = { 0, 0, 0, 0 }, mem[2] = { 0, 0 };
    for (int k = 0; k < 4; k++) {
        char what[32];
        snprintf(what, sizeof what, "vocab.%s", time_keys[k]);
        it = cJSON_GetObjectItemCaseSensitive(v, time_keys[k]);
        if (!it) {
            if (k < 3 || variant == 2)
                return zb_fail(err, "%s is missing", what);
            continue;
        }
        if (get_double(it, what, 1, &t[k], err))
            return -1;
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(v, "memory");
    if (m) {
        if (!cJSON_IsObject(m))
            return zb_fail(err, "vocab.memory must be an object with S and T");
        if ((it = cJSON_GetObjectItemCaseSensitive(m, "S")) &&
            get_double(it, "vocab.memory.S", 0, &mem[0], err))
            return -1;
        if ((it = cJSON_GetObjectItemCaseSensitive(m, "T")) &&
            get_double(it, "vocab.memory.T", 0, &mem[1], err))
            return -1;
    }
    sched_set_vocab(s, (sched_vocab_variant)variant, t[0], t[1], mem[0], mem[1], t[2], t[3]);
    return 0;
}

/* The top-level fields the format defines; anything else goes to meta. */
enum {
    K_FORMAT, K_VERSION, K_NAME, K_DEVICES, K_MICRO, K_STAGES, K_PLACEMENT,
    K_COSTS, K_MEMORY, K_TIME_UNIT, K_OPS, K_TIMES, K_COUNT
};
static const char *const known_keys[K_COUNT] = {
    "format", "version", "name", "devices", "microbatches", "stages", "placement",
    "costs", "memory", "time_unit", "ops", "times",
};

static int load_doc(const cJSON *root, sched_t **out, zb_err *err)
{
    if (!cJSON_IsObject(root))
        return zb_fail(err, "the document must be a JSON object");
    const cJSON *f[K_COUNT] = { 0 };
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        int k = 0;
        while (k < K_COUNT && strcmp(it->string, known_keys[k]))
            k++;
        if (k < K_COUNT) {
            if (f[k])
                return zb_fail(err, "field '%s' appears twice", known_keys[k]);
            f[k] = it;
        }
    }
    if (!f[K_FORMAT] || !cJSON_IsString(f[K_FORMAT]) ||
        strcmp(f[K_FORMAT]->valuestring, SCHED_FORMAT_NAME))
        return zb_fail(err, "not a schedule file (\"format\" must be \"%s\")", SCHED_FORMAT_NAME);
    long version, p, m, S;
    if (!f[K_VERSION])
        return zb_fail(err, "version is missing");
    if (get_int(f[K_VERSION], "version", LONG_MIN, LONG_MAX, &version, err))
        return -1;
    if (version != SCHED_FORMAT_VERSION && version != SCHED_FORMAT_VERSION_VOCAB)
        return zb_fail(err, "unsupported version %ld (this build reads versions %d and %d)",
                       version, SCHED_FORMAT_VERSION, SCHED_FORMAT_VERSION_VOCAB);
    /* Version 2 adds "vocab" (vocabulary parallelism); in a version-1 file
     * a "vocab" field is nobody's and stays in meta, as it always did. */
    const cJSON *vocab = NULL;
    if (version == SCHED_FORMAT_VERSION_VOCAB) {
        int n_vocab = 0;
        cJSON_ArrayForEach(it, root)
            if (!strcmp(it->string, "vocab")) {
                vocab = it;
                n_vocab++;
            }
        if (n_vocab > 1)
            return zb_fail(err, "field 'vocab' appears twice");
        if (!vocab)
            return zb_fail(err, "version 2 needs a \"vocab\" object (vocabulary parallelism)");
    }
    if (!f[K_DEVICES] || !f[K_MICRO] || !f[K_STAGES] || !f[K_PLACEMENT] || !f[K_COSTS] || !f[K_OPS])
        return zb_fail(err, "missing field '%s'",
                       !f[K_DEVICES] ? "devices" : !f[K_MICRO] ? "microbatches" :
                       !f[K_STAGES] ? "stages" : !f[K_PLACEMENT] ? "placement" :
                       !f[K_COSTS] ? "costs" : "ops");
    if (get_int(f[K_DEVICES], "devices", 1, SCHED_MAX_DEVICES, &p, err) ||
        get_int(f[K_MICRO], "microbatches", 1, SCHED_MAX_MICRO, &m, err) ||
        get_int(f[K_STAGES], "stages", 1, SCHED_MAX_STAGES, &S, err))
        return -1;
    const cJSON *pl = f[K_PLACEMENT];
    if (!cJSON_IsArray(pl) || cJSON_GetArraySize(pl) != S)
        return zb_fail(err, "placement must be an array with the device of each of the %ld stages", S);
    /* Sizes are checked against the document before allocating anything
     * proportional to them. */
    if (!cJSON_IsArray(f[K_OPS]) || cJSON_GetArraySize(f[K_OPS]) != p)
        return zb_fail(err, "ops must be an array with one list per device (%ld)", p);

    sched_t *s = sched_new((int)p, (int)m, (int)S);
    if (!s)
        return zb_fail(err, "out of memory");
    int i = 0;
    cJSON_ArrayForEach(it, pl) {
        long d;
        char what[48];
        snprintf(what, sizeof what, "placement[%d]", i);
        if (get_int(it, what, 0, p - 1, &d, err))
            goto fail;
        s->stage_device[i++] = (int)d;
    }
    if (f[K_NAME] && get_string(f[K_NAME], "name", s->name, sizeof s->name, err))
        goto fail;
    if (f[K_TIME_UNIT] && get_string(f[K_TIME_UNIT], "time_unit", s->time_unit, sizeof s->time_unit, err))
        goto fail;
    if (load_costs(s, f[K_COSTS], err))
        goto fail;
    if (f[K_MEMORY] && load_memory(s, f[K_MEMORY], err))
        goto fail;
    if (vocab && load_vocab(s, vocab, err))
        goto fail;
    if (load_ops(s, f[K_OPS], err))
        goto fail;
    if (f[K_TIMES] && load_times(s, f[K_TIMES], err))
        goto fail;
    cJSON_ArrayForEach(it, root) {
        int k = 0;
        while (k < K_COUNT && strcmp(it->string, known_keys[k]))
            k++;
        if (k < K_COUNT || it == vocab)
            continue;
        if (!s->meta && !(s->meta = cJSON_CreateObject()))
            goto oom;
        cJSON *copy = cJSON_Duplicate(it, 1);
        if (!copy)
            goto oom;
        cJSON_AddItemToObject(s->meta, it->string, copy);
    }
    *out = s;
    return 0;
oom:
    zb_fail(err, "out of memory");
fail:
    sched_free(s);
    return -1;
}

int sched_load_string(const char *text, size_t len, sched_t **out, zb_err *err)
{
    const char *end = NULL;
    size_t lead = 0;
    while (lead < len && (text[lead] == ' ' || text[lead] == '\t' || text[lead] == '\n' || text[lead] == '\r'))
        lead++;
    if (lead == len)
        return zb_fail(err, "empty document");
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        int line, col;
        size_t at = end ? (size_t)(end - text) : len;
        text_position(text, len, at, &line, &col);
        if (at + 1 >= len || looks_truncated(text, len))
            return zb_fail(err, "malformed JSON: the document ends early (truncated?) "
                           "after line %d", text_position_lines(text, len));
        return zb_fail(err, "malformed JSON at line %d, column %d", line, col);
    }
    size_t at = (size_t)(end - text);
    while (at < len && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' ||
                        text[at] == '\r' || text[at] == '\0'))
        at++;
    if (at < len) {
        int line, col;
        text_position(text, len, at, &line, &col);
        cJSON_Delete(root);
        return zb_fail(err, "malformed JSON: unexpected text after the document at line %d, column %d",
                       line, col);
    }
    /* After the parse, so that malformed JSON gets the parser's message. */
    if (zb_json_check_strings(text, len, err) || zb_json_check_duplicates(root, err)) {
        cJSON_Delete(root);
        return -1;
    }
    int rc = load_doc(root, out, err);
    cJSON_Delete(root);
    return rc;
}

int sched_load_file(const char *path, sched_t **out, zb_err *err)
{
    char *text;
    size_t len;
    if (zb_read_file(path, &text, &len, err))
        return -1;
    int rc = sched_load_string(text, len, out, err);
    free(text);
    if (rc)
        return zb_wrap(err, "%s: ", path);
    return 0;
}

/* ---------------------------------------------------------------- writing */

/* A growing output buffer; `failed` latches the first allocation failure so
 * that callers check once at the end. */
typedef struct strbuf {
    char *data;  /* NUL-terminated contents */
    size_t len;  /* bytes used, excluding the NUL */
    size_t cap;  /* bytes allocated */
    int failed;  /* an allocation failed; contents are incomplete */
} strbuf;

static void sb_reserve(strbuf *b, size_t extra)
{
    if (b->failed || b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = 1;
        return;
    }
    b->data = d;
    b->cap = cap;
}

static inline void sb_put(strbuf *b, const char *str, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        sb_reserve(b, n);
        if (b->failed)
            return;
    }
    memcpy(b->data + b->len, str, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *str)
{
    sb_put(b, str, strlen(str));
}

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    sb_reserve(b, (size_t)n);
    if (b->failed)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Writes the decimal digits of v (what "%lld" writes) at p, without stdio,
 * and returns the end: a schedule file has one or two numbers per op, and
 * snprintf's format interpretation was most of `gen`'s CPU (bench/
 * README.md, "issue 28").  p needs 21 bytes. */
static char *fmt_int(char *p, long long v)
{
    char tmp[24], *end = tmp + sizeof tmp, *q = end;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        *--q = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *p++ = '-';
    memcpy(p, q, (size_t)(end - q));
    return p + (end - q);
}

/* 1 when v is a whole number below 1e15 in magnitude (not -0): "%.15g"
 * writes its digits, and they read back exactly. */
static int is_plain_int(double v)
{
    return v > -1e15 && v < 1e15 && v == (double)(long long)v && !(v == 0 && signbit(v));
}

static void sb_int(strbuf *b, long long v)
{
    char tmp[24];
    sb_put(b, tmp, (size_t)(fmt_int(tmp, v) - tmp));
}

/* Shortest %g form that reads back as exactly v. */
static void sb_double(strbuf *b, double v)
{
    if (is_plain_int(v)) { /* the common case of unit costs */
        sb_int(b, (long long)v);
        return;
    }
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (prec == 17 || strtod(tmp, NULL) == v)
            break;
    }
    sb_puts(b, tmp);
}

/* A JSON string literal with the escapes JSON requires. */
static void sb_string(strbuf *b, const char *str)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = { '\\', (char)*p };
            sb_put(b, e, 2);
        } else if (*p < 0x20) {
            sb_printf(b, "\\u%04x", *p);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* Writes a per-stage field: one number when all stages agree, else an
 * array of S numbers. */
static void sb_stage_field(strbuf *b, const sched_t *s, size_t off)
{
    double v0 = *(const double *)((const char *)&s->cost[0] + off);
    int same = 1;
    for (int i = 1; i < s->n_stages && same; i++)
        same = *(const double *)((const char *)&s->cost[i] + off) == v0;
    if (same) {
        sb_double(b, v0);
        return;
    }
    sb_put(b, "[", 1);
    for (int i = 0; i < s->n_stages; i++) {
        if (i)
            sb_put(b, ", ", 2);
        sb_double(b, *(const double *)((const char *)&s->cost[i] + off));
    }
    sb_put(b, "]", 1);
}

static void sb_device_array(strbuf *b, const double *a, int n)
{
    sb_put(b, "[", 1);
    for (int i = 0; i < n; i++) {
        if (i)
            sb_put(b, ", ", 2);
        sb_double(b, a[i]);
    }
    sb_put(b, "]", 1);
}

/* The version-2 "vocab" line. */
static void sb_vocab(strbuf *b, const sched_vocab *v)
{
    sb_printf(b, "  \"vocab\": {\"variant\": %d, \"S\": ", v->variant);
    sb_double(b, v->t_s);
    sb_puts(b, ", \"T\": ");
    sb_double(b, v->t_t);
    sb_puts(b, ", \"C0\": ");
    sb_double(b, v->t_c0);
    if (v->variant == SCHED_VOCAB_2) {
        sb_puts(b, ", \"C1\": ");
        sb_double(b, v->t_c1);
    }
    sb_puts(b, ", \"memory\": {\"S\": ");
    sb_double(b, v->d_s);
    sb_puts(b, ", \"T\": ");
    sb_double(b, v->d_t);
    sb_puts(b, "}},\n");
}

/* One op token, after ", " unless it is the lane's first: composed in a
 * local buffer and appended at once. */
static void sb_op(strbuf *b, int first, int dev_stages, sched_op op)
{
    char tmp[64], *p = tmp;
    if (!first) {
        *p++ = ',';
        *p++ = ' ';
    }
    *p++ = '"';
    const char *name = op_kind_name((op_kind)op.kind);
    size_t n = strlen(name);
    assert(n <= 16); /* kind names are one or two letters: tmp has room */
    memcpy(p, name, n);
    p = fmt_int(p + n, (int)op.mb);
    /* S3, T3: the shard is the device; one stage per device: no "@s" */
    if (!OP_IS_VOCAB(op.kind) && dev_stages != 1) {
        *p++ = '@';
        p = fmt_int(p, (int)op.stage);
    }
    *p++ = '"';
    sb_put(b, tmp, (size_t)(p - tmp));
}

/* One op's [start, end] pair, after ", " unless first; whole numbers
 * without stdio, the others through sb_double. */
static void sb_times(strbuf *b, int first, double start, double end)
{
    if (is_plain_int(start) && is_plain_int(end)) {
        char tmp[64], *p = tmp;
        if (!first) {
            *p++ = ',';
            *p++ = ' ';
        }
        *p++ = '[';
        p = fmt_int(p, (long long)start);
        *p++ = ',';
        *p++ = ' ';
        p = fmt_int(p, (long long)end);
        *p++ = ']';
        sb_put(b, tmp, (size_t)(p - tmp));
        return;
    }
    sb_puts(b, first ? "[" : ", [");
    sb_double(b, start);
    sb_put(b, ", ", 2);
    sb_double(b, end);
    sb_put(b, "]", 1);
}

char *sched_to_string(const sched_t *s)
{
    strbuf b = { 0 };
    int vocab = sched_has_vocab(s); /* version 2 only when it is needed */
    sb_printf(&b, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"name\": ",
              SCHED_FORMAT_NAME, vocab ? SCHED_FORMAT_VERSION_VOCAB : SCHED_FORMAT_VERSION);
    sb_string(&b, s->name);
    sb_printf(&b, ",\n  \"devices\": %d,\n  \"microbatches\": %d,\n  \"stages\": %d,\n  \"placement\": [",
              s->n_devices, s->n_micro, s->n_stages);
    for (int i = 0; i < s->n_stages; i++)
        sb_printf(&b, i ? ", %d" : "%d", s->stage_device[i]);
    sb_puts(&b, "],\n  \"time_unit\": ");
    sb_string(&b, s->time_unit);
    sb_puts(&b, ",\n  \"costs\": {\"F\": ");
    sb_stage_field(&b, s, offsetof(stage_cost, t_f));
    sb_puts(&b, ", \"B\": ");
    sb_stage_field(&b, s, offsetof(stage_cost, t_b));
    sb_puts(&b, ", \"W\": ");
    sb_stage_field(&b, s, offsetof(stage_cost, t_w));
    sb_puts(&b, ", \"comm\": ");
    sb_double(&b, s->t_comm);
    sb_puts(&b, "},\n  \"memory\": {\"unit\": ");
    sb_string(&b, s->mem_unit);
    sb_puts(&b, ", \"F\": ");
    sb_stage_field(&b, s, offsetof(stage_cost, d_f));
    sb_puts(&b, ", \"B\": ");
    sb_stage_field(&b, s, offsetof(stage_cost, d_b));
    sb_puts(&b, ", \"W\": ");
    sb_stage_field(&b, s, offsetof(stage_cost, d_w));
    if (s->mem_limit) {
        sb_puts(&b, ", \"limit\": ");
        sb_device_array(&b, s->mem_limit, s->n_devices);
    }
    if (s->mem_static) {
        sb_puts(&b, ", \"static\": ");
        sb_device_array(&b, s->mem_static, s->n_devices);
    }
    sb_puts(&b, "},\n");
    if (vocab)
        sb_vocab(&b, &s->vocab);
    sb_puts(&b, "  \"ops\": [\n");
    int any_times = 0;
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *l = &s->dev[d];
        int dev_stages = sched_device_stage_count(s, d);
        sb_puts(&b, "    [");
        for (int i = 0; i < l->n_ops; i++)
            sb_op(&b, i == 0, dev_stages, l->ops[i]);
        sb_puts(&b, d + 1 < s->n_devices ? "],\n" : "]\n");
        any_times |= l->start != NULL;
    }
    sb_puts(&b, "  ]");
    if (any_times) {
        sb_puts(&b, ",\n  \"times\": [\n");
        for (int d = 0; d < s->n_devices; d++) {
            const sched_lane *l = &s->dev[d];
            if (!l->start) {
                sb_puts(&b, "    null");
            } else {
                sb_puts(&b, "    [");
                for (int i = 0; i < l->n_ops; i++)
                    sb_times(&b, i == 0, l->start[i], l->end[i]);
                sb_put(&b, "]", 1);
            }
            sb_puts(&b, d + 1 < s->n_devices ? ",\n" : "\n");
        }
        sb_puts(&b, "  ]");
    }
    if (s->meta) {
        const cJSON *it;
        cJSON_ArrayForEach(it, s->meta) {
            if (!it->string)
                continue;
            int k = 0;
            while (k < K_COUNT && strcmp(it->string, known_keys[k]))
                k++;
            if (k < K_COUNT || (vocab && !strcmp(it->string, "vocab")))
                continue; /* never let meta shadow a field of the format */
            char *json = cJSON_PrintUnformatted(it);
            if (!json) {
                b.failed = 1;
                break;
            }
            sb_puts(&b, ",\n  ");
            sb_string(&b, it->string);
            sb_puts(&b, ": ");
            sb_puts(&b, json);
            free(json);
        }
    }
    sb_puts(&b, "\n}\n");
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    return b.data;
}

int sched_save_file(const sched_t *s, const char *path, zb_err *err)
{
    char *text = sched_to_string(s);
    if (!text)
        return zb_fail(err, "out of memory writing the schedule");
    int rc = zb_write_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

/* ------------------------------------------------------------ plain files */

int zb_write_atomic(const char *path, const char *data, size_t len, zb_err *err)
{
    /* The rules for what a path may be live in one place (outfile.h). */
    return outfile_write_all(path, data, len, err);
}

int zb_read_file(const char *path, char **data, size_t *len, zb_err *err)
{
    return zb_read_capped(path, zb_input_max(), data, len, err);
}
