/*
 * safetensors.h: reading and writing Hugging Face's safetensors files.
 *
 * The format (huggingface/safetensors, docs "Format"):
 *
 *   u64 N          little-endian length of the header
 *   N bytes        a JSON object: tensor name -> {"dtype": "F32",
 *                  "shape": [rows, cols], "data_offsets": [begin, end]},
 *                  and optionally "__metadata__": {string: string}; padded
 *                  with spaces
 *   the data       the tensors' bytes, little-endian, row-major; offsets
 *                  are relative to the start of the data, and together the
 *                  tensors cover it exactly, without holes or overlaps
 *
 * The reader takes the header whole and validates it before any tensor
 * is read: a file that is truncated, whose header is not such an object,
 * whose offsets lie (past the end, not matching the shape and dtype,
 * overlapping, leaving holes) or whose dtype is not one zbsched reads is
 * refused in one line naming the tensor.  Tensors are then read one at a
 * time with pread, so a file is never held in memory whole.  zbsched reads
 * F32 and BF16 (widened to fp32 exactly) and writes either, BF16 rounded
 * to nearest even.
 *
 * Workload: one file of up to a few gigabytes and a few hundred tensors per
 * export or import.
 */
#ifndef ZB_RUNTIME_SAFETENSORS_H
#define ZB_RUNTIME_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "src/err.h"

/* Largest header accepted (safetensors' own reader caps it at 100 MB). */
#define ST_MAX_HEADER (100u << 20)
/* Most dimensions of a tensor. */
#define ST_MAX_DIMS 8

typedef enum st_dtype {
    ST_F32 = 0,  /* IEEE binary32 */
    ST_BF16 = 1, /* bfloat16: the top half of a binary32 */
} st_dtype;

/* One tensor of a file's header. */
typedef struct st_tensor {
    char *name;                /* its key, owned */
    st_dtype dtype;            /* element type */
    int n_dims;                /* dimensions, 0..ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS]; /* sizes */
    uint64_t count;            /* elements: the product of shape */
    uint64_t begin, end;       /* byte range within the data */
} st_tensor;

/* An open file for reading. */
typedef struct st_file {
    int fd;            /* open descriptor, -1 when closed */
    char *path;        /* for messages, owned */
    uint64_t data_at;  /* file offset of the data: 8 + header length */
    uint64_t data_len; /* bytes of data */
    st_tensor *t;      /* [n] in header order, owned */
    int n;             /* tensors */
} st_file;

/* "F32", "BF16". */
const char *st_dtype_name(st_dtype d);

/* Opens path and validates its header and offsets (see above).  Returns 0
 * with *f ready, or -1 with err naming the path and what is wrong (*f
 * then closed). */
int st_open(const char *path, st_file *f, zb_err *err);

/* Parses and validates a header (the bytes after the length) for a data
 * section of data_len bytes into f's tensors; st_open's core, exposed so
 * that tests can hand it any header.  Returns 0 or -1 with err set. */
int st_parse_header(const char *json, size_t len, uint64_t data_len, st_file *f, zb_err *err);

/* The tensor named name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);

/* Reads tensor t into dst[t->count] as fp32.  Returns 0, or -1 with err
 * set (a read error, or the file shrank since st_open). */
int st_read_f32(const st_file *f, const st_tensor *t, float *dst, zb_err *err);

/* Closes f; a zeroed or closed f is fine. */
void st_close(st_file *f);

/* A tensor to write: rows x cols fp32 values, row-major (rows 1 for a
 * vector, which is written with one dimension). */
typedef struct st_entry {
    const char *name;  /* key */
    int rows, cols;    /* shape; rows == 0 means a vector of cols */
    const float *data; /* [max(rows,1) * cols] */
} st_entry;

/* Writes entries e[0..n) in order to path atomically (src/outfile.h) as
 * dtype, with "__metadata__": {"format": "pt"} (what transformers checks).
 * Names must be distinct.  Returns 0 or -1 with err set. */
int st_write(const char *path, const st_entry *e, int n, st_dtype dtype, zb_err *err);

#endif
