/*
 * checkpoint.c: atomic write and verified read of checkpoints (checkpoint.h).
 */
#include "runtime/checkpoint.h"
#include "src/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ckpt_header {
    char magic[8];          /* CKPT_MAGIC */
    uint32_t version;       /* CKPT_VERSION */
    uint32_t n_parts;       /* entries in the size table */
    uint64_t payload_bytes; /* sum of the part sizes */
    uint64_t checksum;      /* FNV-1a 64 over the size table then the payload */
} ckpt_header;

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

int ckpt_write(const char *path, const ckpt_part *parts, int n_parts, zb_err *err)
{
    uint64_t *table = malloc(sizeof *table * (size_t)(n_parts > 0 ? n_parts : 1));
    if (!table)
        return zb_fail(err, "%s: out of memory", path);
    ckpt_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CKPT_MAGIC, sizeof h.magic);
    h.version = CKPT_VERSION;
    h.n_parts = (uint32_t)n_parts;
    for (int i = 0; i < n_parts; i++) {
        table[i] = parts[i].bytes;
        h.payload_bytes += parts[i].bytes;
    }
    h.checksum = fnv1a(FNV_OFFSET, table, sizeof *table * (size_t)n_parts);
    for (int i = 0; i < n_parts; i++)
        h.checksum = fnv1a(h.checksum, parts[i].data, parts[i].bytes);

    /* outfile (src/outfile.h) does the temporary, fsync, rename and the
     * directory's fsync; the parts stream through it without a copy. */
    outfile o;
    if (outfile_open(&o, path, err) != 0)
        goto fail;
    int bad = outfile_write(&o, &h, sizeof h, err) != 0
              || outfile_write(&o, table, sizeof *table * (size_t)n_parts, err) != 0;
    for (int i = 0; i < n_parts && !bad; i++)
        bad = outfile_write(&o, parts[i].data, parts[i].bytes, err) != 0;
    if (bad) {
        outfile_abort(&o);
        goto fail;
    }
    if (outfile_commit(&o, err) != 0)
        goto fail;
    free(table);
    return 0;
fail:
    free(table);
    return zb_wrap(err, "checkpoint: ");
}

/* Opens path and reads a whole, intact checkpoint: magic, version, sizes
 * against the file length, checksum.  On success *h, *table (n_parts
 * sizes) and *payload (payload_bytes) are the caller's to free. */
static int read_verified(const char *path, ckpt_header *hp, uint64_t **table_out,
                         char **payload_out, zb_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return zb_fail(err, "%s: cannot open checkpoint: %s", path, strerror(errno));
    ckpt_header h;
    uint64_t *table = NULL;
    char *payload = NULL;
    int rc = -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        zb_fail(err, "%s: not a regular file", path);
        goto out;
    }
    if (fread(&h, 1, sizeof h, f) != sizeof h) {
        zb_fail(err, "%s: truncated checkpoint (no complete header)", path);
        goto out;
    }
    if (memcmp(h.magic, CKPT_MAGIC, sizeof h.magic) != 0) {
        zb_fail(err, "%s: not a zbsched checkpoint (bad magic)", path);
        goto out;
    }
    if (h.version != CKPT_VERSION) {
        zb_fail(err, "%s: checkpoint version %u, this build reads %d", path, h.version, CKPT_VERSION);
        goto out;
    }
    /* The header's sizes decide how much to read, so check them against
     * the real file length before allocating anything they imply. */
    uint64_t file_len = (uint64_t)st.st_size;
    uint64_t need = sizeof h + (uint64_t)h.n_parts * sizeof *table;
    if (h.n_parts > 1u << 20 || h.payload_bytes > file_len || need + h.payload_bytes > file_len) {
        zb_fail(err, "%s: truncated checkpoint (%llu bytes, the header promises more)", path,
                (unsigned long long)file_len);
        goto out;
    }
    if (need + h.payload_bytes < file_len) {
        zb_fail(err, "%s: corrupt checkpoint (trailing bytes)", path);
        goto out;
    }
    table = malloc(sizeof *table * (size_t)(h.n_parts ? h.n_parts : 1));
    payload = malloc(h.payload_bytes ? (size_t)h.payload_bytes : 1);
    if (!table || !payload) {
        zb_fail(err, "%s: out of memory", path);
        goto out;
    }
    if (fread(table, sizeof *table, h.n_parts, f) != h.n_parts
        || fread(payload, 1, (size_t)h.payload_bytes, f) != h.payload_bytes) {
        zb_fail(err, "%s: truncated checkpoint", path);
        goto out;
    }
    uint64_t sum = fnv1a(fnv1a(FNV_OFFSET, table, sizeof *table * h.n_parts), payload,
                         (size_t)h.payload_bytes);
    if (sum != h.checksum) {
        zb_fail(err, "%s: corrupt checkpoint (checksum mismatch)", path);
        goto out;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < h.n_parts; i++)
        total += table[i];
    if (total != h.payload_bytes) {
        zb_fail(err, "%s: corrupt checkpoint (part sizes do not add up)", path);
        goto out;
    }
    *hp = h;
    *table_out = table;
    *payload_out = payload;
    table = NULL;
    payload = NULL;
    rc = 0;
out:
    free(table);
    free(payload);
    fclose(f);
    return rc;
}

int ckpt_read(const char *path, ckpt_part *parts, int n_parts, zb_err *err)
{
    ckpt_header h;
    uint64_t *table = NULL;
    char *payload = NULL;
    if (read_verified(path, &h, &table, &payload, err) != 0)
        return -1;
    int rc = -1;
    /* Intact: now is it the checkpoint the caller expects? */
    if (h.n_parts != (uint32_t)n_parts) {
        zb_fail(err, "%s: the checkpoint has %u parts, expected %d (another model or split?)",
                path, h.n_parts, n_parts);
        goto out;
    }
    for (int i = 0; i < n_parts; i++) {
        if (table[i] != parts[i].bytes) {
            zb_fail(err, "%s: checkpoint part %d holds %llu bytes, expected %zu "
                    "(another model or split?)", path, i, (unsigned long long)table[i], parts[i].bytes);
            goto out;
        }
    }
    size_t off = 0;
    for (int i = 0; i < n_parts; i++) {
        memcpy(parts[i].data, payload + off, parts[i].bytes);
        off += parts[i].bytes;
    }
    rc = 0;
out:
    free(table);
    free(payload);
    return rc;
}

int ckpt_read_any(const char *path, ckpt_part **parts_out, int *n_parts, zb_err *err)
{
    ckpt_header h;
    uint64_t *table = NULL;
    char *payload = NULL;
    if (read_verified(path, &h, &table, &payload, err) != 0)
        return -1;
    ckpt_part *parts = calloc(h.n_parts ? h.n_parts : 1, sizeof *parts);
    int rc = parts ? 0 : zb_fail(err, "%s: out of memory", path);
    size_t off = 0;
    for (uint32_t i = 0; rc == 0 && i < h.n_parts; i++) {
        parts[i].bytes = (size_t)table[i];
        parts[i].data = malloc(parts[i].bytes ? parts[i].bytes : 1);
        if (!parts[i].data) {
            rc = zb_fail(err, "%s: out of memory", path);
            break;
        }
        memcpy(parts[i].data, payload + off, parts[i].bytes);
        off += parts[i].bytes;
    }
    if (rc != 0) {
        ckpt_parts_free(parts, (int)h.n_parts);
    } else {
        *parts_out = parts;
        *n_parts = (int)h.n_parts;
    }
    free(table);
    free(payload);
    return rc;
}

void ckpt_parts_free(ckpt_part *parts, int n_parts)
{
    for (int i = 0; parts && i < n_parts; i++)
        free(parts[i].data);
    free(parts);
}
