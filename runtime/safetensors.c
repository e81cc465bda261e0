/*
 * safetensors.c: the safetensors reader and writer (safetensors.h).
 *
 * Reading validates everything the header claims against the file before
 * a single tensor byte is read, so that a lie in the header is one line,
 * never a read past the end or a tensor filled from its neighbour's bytes.
 * Byte order is explicit (the format is little-endian whatever the host),
 * so the same file reads the same on any machine.
 */
#include "runtime/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "src/input.h"
#include "src/outfile.h"

static const char *const dtype_names[] = { [ST_F32] = "F32", [ST_BF16] = "BF16" };
static const int dtype_bytes[] = { [ST_F32] = 4, [ST_BF16] = 2 };

/* The other dtypes of the format, recognised only to say which one a file
 * holds when it is not one zbsched reads. */
static const char *const other_dtypes[] = { "F64", "F16", "I64", "I32", "I16", "I8", "U64", "U32",
                                            "U16", "U8", "BOOL", "F8_E4M3", "F8_E5M2", "C64" };

const char *st_dtype_name(st_dtype d)
{
    return d == ST_F32 || d == ST_BF16 ? dtype_names[d] : "?";
}

void st_close(st_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    for (int i = 0; i < f->n; i++)
        free(f->t[i].name);
    free(f->t);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

/* A whole number in [0, 2^53] (what a double holds exactly). */
static int whole(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > 9007199254740992.0 || v->valuedouble != floor(v->valuedouble))
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

/* Fills *t from one header entry; -1 with err naming it. */
static int parse_entry(const cJSON *e, st_tensor *t, zb_err *err)
{
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return zb_fail(err, "tensor '%.80s' is not an object", name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return zb_fail(err, "tensor '%.80s' has no dtype", name);
    if (!strcmp(dt->valuestring, "F32"))
        t->dtype = ST_F32;
    else if (!strcmp(dt->valuestring, "BF16"))
        t->dtype = ST_BF16;
    else {
        int known = 0;
        for (size_t i = 0; i < sizeof other_dtypes / sizeof other_dtypes[0]; i++)
            known |= !strcmp(dt->valuestring, other_dtypes[i]);
        return zb_fail(err, "tensor '%.80s' has %s dtype %.20s; zbsched reads F32 and BF16", name,
                       known ? "the" : "an unknown", dt->valuestring);
    }
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > ST_MAX_DIMS)
        return zb_fail(err, "tensor '%.80s' has no shape of at most %d dimensions", name,
                       ST_MAX_DIMS);
    t->n_dims = 0;
    t->count = 1;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        uint64_t v;
        if (whole(d, &v) != 0)
            return zb_fail(err, "tensor '%.80s': a shape entry is not a whole number", name);
        if (v && t->count > UINT64_MAX / 8 / v)
            return zb_fail(err, "tensor '%.80s': its shape is too large", name);
        t->shape[t->n_dims++] = (int64_t)v;
        t->count *= v;
    }
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        whole(cJSON_GetArrayItem(off, 0), &t->begin) != 0 ||
        whole(cJSON_GetArrayItem(off, 1), &t->end) != 0 || t->begin > t->end)
        return zb_fail(err, "tensor '%.80s' has no data_offsets [begin, end] with begin <= end",
                       name);
    uint64_t need = t->count * (uint64_t)dtype_bytes[t->dtype];
    if (t->end - t->begin != need)
        return zb_fail(err, "tensor '%.80s': %llu %s values need %llu bytes, its data_offsets "
                       "[%llu, %llu] span %llu", name, (unsigned long long)t->count,
                       dtype_names[t->dtype], (unsigned long long)need,
                       (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)(t->end - t->begin));
    if (!(t->name = strdup(name)))
        return zb_fail(err, "out of memory");
    return 0;
}

static const st_file *sort_file; /* qsort has no context argument; one sort at a time */

static int by_offset(const void *a, const void *b)
{
    const st_tensor *x = &sort_file->t[*(const int *)a], *y = &sort_file->t[*(const int *)b];
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* The tensors tile [0, data_len) exactly: sorted by offset, each starts
 * where the one before ended. */
static int check_layout(st_file *f, uint64_t data_len, zb_err *err)
{
    for (int i = 0; i < f->n; i++)
        if (f->t[i].end > data_len)
            return zb_fail(err, "tensor '%.80s' ends at byte %llu of the data, which has %llu "
                           "bytes (truncated?)", f->t[i].name, (unsigned long long)f->t[i].end,
                           (unsigned long long)data_len);
    int *order = malloc(sizeof *order * (f->n > 0 ? (size_t)f->n : 1));
    if (!order)
        return zb_fail(err, "out of memory");
    for (int i = 0; i < f->n; i++)
        order[i] = i;
    sort_file = f;
    qsort(order, (size_t)f->n, sizeof *order, by_offset);
    sort_file = NULL;
    uint64_t at = 0;
    const st_tensor *prev = NULL;
    int rc = 0;
    for (int k = 0; k < f->n && rc == 0; k++) {
        const st_tensor *t = &f->t[order[k]];
        if (t->begin < at)
            rc = zb_fail(err, "tensors '%.80s' and '%.80s' overlap (bytes %llu..%llu)",
                         prev->name, t->name, (unsigned long long)t->begin,
                         (unsigned long long)at);
        else if (t->begin > at)
            rc = zb_fail(err, "bytes %llu..%llu of the data belong to no tensor",
                         (unsigned long long)at, (unsigned long long)t->begin);
        if (t->end > at || !prev) {
            at = t->end;
            prev = t;
        }
    }
    if (rc == 0 && at != data_len)
        rc = zb_fail(err, "bytes %llu..%llu of the data belong to no tensor",
                     (unsigned long long)at, (unsigned long long)data_len);
    free(order);
    return rc;
}

int st_parse_header(const char *json, size_t len, uint64_t data_len, st_file *f, zb_err *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root)
        return zb_fail(err, "the header is not JSON");
    for (const char *c = end; c && c < json + len; c++)
        if (*c != ' ' && *c != '\0') {
            cJSON_Delete(root);
            return zb_fail(err, "the header has bytes after its JSON object (only space padding "
                           "may follow)");
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return zb_fail(err, "the header is not a JSON object");
    }
    if (zb_json_check_duplicates(root, err) != 0) {
        cJSON_Delete(root);
        return zb_wrap(err, "the header: ");
    }
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root)
        n += strcmp(e->string, "__metadata__") != 0;
    f->t = calloc((size_t)(n ? n : 1), sizeof *f->t);
    if (!f->t) {
        cJSON_Delete(root);
        return zb_fail(err, "out of memory");
    }
    int rc = 0;
    cJSON_ArrayForEach(e, root) {
        if (!strcmp(e->string, "__metadata__")) {
            const cJSON *m;
            if (!cJSON_IsObject(e))
                rc = zb_fail(err, "__metadata__ is not an object");
            cJSON_ArrayForEach(m, e)
                if (rc == 0 && !cJSON_IsString(m))
                    rc = zb_fail(err, "__metadata__ '%.80s' is not a string", m->string);
            if (rc)
                break;
            continue;
        }
        if ((rc = parse_entry(e, &f->t[f->n], err)) != 0)
            break;
        f->n++;
    }
    cJSON_Delete(root);
    if (rc == 0)
        rc = check_layout(f, data_len, err);
    f->data_len = data_len;
    return rc;
}

static uint64_t le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* pread of exactly n bytes, or -1. */
static int read_at(int fd, void *buf, size_t n, uint64_t at)
{
    char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
        at += (uint64_t)r;
    }
    return 0;
}

int st_open(const char *path, st_file *f, zb_err *err)
{
    memset(f, 0, sizeof *f);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return zb_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    char *hdr = NULL;
    if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st_close(f);
        return zb_fail(err, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    unsigned char lenb[8];
    if (size < 8 || read_at(f->fd, lenb, 8, 0) != 0) {
        st_close(f);
        return zb_fail(err, "%s: truncated (%llu bytes; a safetensors file starts with its "
                       "8-byte header length)", path, (unsigned long long)size);
    }
    uint64_t n = le64(lenb);
    if (n < 2 || n > ST_MAX_HEADER) {
        st_close(f);
        return zb_fail(err, "%s: header length %llu is out of range (2..%u): not a safetensors "
                       "file", path, (unsigned long long)n, ST_MAX_HEADER);
    }
    if (n > size - 8) {
        st_close(f);
        return zb_fail(err, "%s: truncated: the header claims %llu bytes and %llu follow the "
                       "length", path, (unsigned long long)n, (unsigned long long)(size - 8));
    }
    if (!(hdr = malloc(n)) || read_at(f->fd, hdr, n, 8) != 0) {
        free(hdr);
        st_close(f);
        return zb_fail(err, "%s: cannot read the header", path);
    }
    int rc = st_parse_header(hdr, n, size - 8 - n, f, err);
    free(hdr);
    if (rc == 0 && !(f->path = strdup(path)))
        rc = zb_fail(err, "out of memory");
    if (rc != 0) {
        st_close(f);
        return zb_wrap(err, "%s: ", path);
    }
    f->data_at = 8 + n;
    return 0;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name))
            return &f->t[i];
    return NULL;
}

int st_read_f32(const st_file *f, const st_tensor *t, float *dst, zb_err *err)
{
    size_t bytes = (size_t)(t->end - t->begin);
    unsigned char *raw = t->dtype == ST_F32 ? (unsigned char *)dst : malloc(bytes ? bytes : 1);
    if (!raw)
        return zb_fail(err, "out of memory reading tensor '%.80s'", t->name);
    if (bytes && read_at(f->fd, raw, bytes, f->data_at + t->begin) != 0) {
        if (raw != (unsigned char *)dst)
            free(raw);
        return zb_fail(err, "%s: truncated while reading tensor '%.80s'", f->path, t->name);
    }
    /* Backwards for F32 in place: each value's bytes become the word. */
    for (uint64_t i = 0; i < t->count; i++) {
        uint32_t w;
        if (t->dtype == ST_F32) {
            const unsigned char *b = raw + 4 * i;
            w = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        } else {
            const unsigned char *b = raw + 2 * i;
            w = ((uint32_t)b[0] | (uint32_t)b[1] << 8) << 16;
        }
        memcpy(&dst[i], &w, 4);
    }
    if (raw != (unsigned char *)dst)
        free(raw);
    return 0;
}

/* bf16 of x, rounded to nearest even; NaN stays a quiet NaN. */
static uint16_t to_bf16(float x)
{
    uint32_t w;
    memcpy(&w, &x, 4);
    if ((w & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((w >> 16) | 0x40);
    w += 0x7fffu + ((w >> 16) & 1);
    return (uint16_t)(w >> 16);
}

/* The header JSON (unpadded) for e[0..n) as dtype; NULL when out of memory. */
static char *make_header(const st_entry *e, int n, st_dtype dtype)
{
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject();
    int bad = !root || !meta || !cJSON_AddStringToObject(meta, "format", "pt");
    if (!bad)
        cJSON_AddItemToObject(root, "__metadata__", meta);
    else
        cJSON_Delete(meta);
    uint64_t at = 0;
    for (int i = 0; i < n && !bad; i++) {
        uint64_t count = (uint64_t)(e[i].rows ? e[i].rows : 1) * (uint64_t)e[i].cols;
        uint64_t bytes = count * (uint64_t)dtype_bytes[dtype];
        cJSON *t = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *off = cJSON_CreateArray();
        bad = !t || !sh || !off || !cJSON_AddStringToObject(t, "dtype", dtype_names[dtype]);
        if (!bad && e[i].rows)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber(e[i].rows));
        if (!bad) {
            cJSON_AddItemToArray(sh, cJSON_CreateNumber(e[i].cols));
            cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
            cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(at + bytes)));
            cJSON_AddItemToObject(t, "shape", sh);
            cJSON_AddItemToObject(t, "data_offsets", off);
            cJSON_AddItemToObject(root, e[i].name, t);
        } else {
            cJSON_Delete(t);
            cJSON_Delete(sh);
            cJSON_Delete(off);
        }
        at += bytes;
    }
    char *text = bad ? NULL : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

int st_write(const char *path, const st_entry *e, int n, st_dtype dtype, zb_err *err)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(e[i].name, e[j].name))
                return zb_fail(err, "tensor '%.80s' given twice", e[i].name);
    char *hdr = make_header(e, n, dtype);
    if (!hdr)
        return zb_fail(err, "out of memory");
    size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;
    unsigned char *buf = malloc(padded > 65536 ? padded : 65536);
    if (!buf) {
        free(hdr);
        return zb_fail(err, "out of memory");
    }
    outfile o;
    if (outfile_open(&o, path, err) != 0) {
        free(hdr);
        free(buf);
        return -1;
    }
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf, hdr, hlen);
    memset(buf + hlen, ' ', padded - hlen);
    free(hdr);
    int bad = outfile_write(&o, lenb, 8, err) != 0 || outfile_write(&o, buf, padded, err) != 0;
    int per = dtype_bytes[dtype];
    for (int i = 0; i < n && !bad; i++) {
        size_t count = (size_t)(e[i].rows ? e[i].rows : 1) * (size_t)e[i].cols;
        for (size_t at = 0; at < count && !bad;) {
            size_t k = count - at < 65536 / 4 ? count - at : 65536 / 4;
            for (size_t j = 0; j < k; j++) {
                float x = e[i].data[at + j];
                if (dtype == ST_F32) {
                    uint32_t w;
                    memcpy(&w, &x, 4);
                    for (int b = 0; b < 4; b++)
                        buf[4 * j + (size_t)b] = (unsigned char)(w >> (8 * b));
                } else {
                    uint16_t h = to_bf16(x);
                    buf[2 * j] = (unsigned char)h;
                    buf[2 * j + 1] = (unsigned char)(h >> 8);
                }
            }
            bad = outfile_write(&o, buf, k * (size_t)per, err) != 0;
            at += k;
        }
    }
    free(buf);
    if (bad) {
        outfile_abort(&o);
        return -1;
    }
    return outfile_commit(&o, err);
}
