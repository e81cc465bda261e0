/*
 * input.c: the input size cap and the shared JSON string check (input.h).
 *
 * The cap is one process-wide number because the CLI is one process per
 * command and every reader needs the same answer; the library never reads
 * the environment itself (the CLI does, in main.c, and calls the setter).
 *
 * Reading: a regular file's size is known before reading, so it is refused
 * without a single read; anything else (stdin, a FIFO, a character device
 * such as /dev/zero) is read in growing chunks and refused as soon as it
 * passes the cap, so the most memory ever held is about twice the cap.
 */
#include "src/input.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "src/size.h"

static uint64_t input_max = ZB_INPUT_MAX_DEFAULT;

uint64_t zb_input_max(void)
{
    return input_max;
}

void zb_input_set_max(uint64_t bytes)
{
    if (bytes > 0)
        input_max = bytes;
}

static int too_large(const char *path, uint64_t max, zb_err *err)
{
    char lim[32];
    zb_size_format((double)max, lim, sizeof lim);
    return zb_fail(err, "'%s' is larger than the input limit of %s (ZBSCHED_MAX_INPUT=SIZE or run --max-input SIZE raises it)",
                   path, lim);
}

int zb_read_capped(const char *path, uint64_t max, char **data, size_t *len, zb_err *err)
{
    int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f)
        return zb_fail(err, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    char *buf = NULL;
    size_t cap = 1 << 16, n = 0;
    if (fstat(fileno(f), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            rc = zb_fail(err, "cannot read '%s': it is a directory", path);
            goto out;
        }
        if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > max) {
            rc = too_large(path, max, err);
            goto out;
        }
    }
    buf = malloc(cap);
    if (!buf) {
        rc = zb_fail(err, "out of memory reading '%s'", path);
        goto out;
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = zb_fail(err, "out of memory reading '%s'", path);
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if ((uint64_t)n > max) {
            rc = too_large(path, max, err);
            goto out;
        }
        if (got == 0) {
            if (ferror(f))
                rc = zb_fail(err, "cannot read '%s': %s", path, strerror(errno));
            break;
        }
    }
out:
    if (!is_stdin)
        fclose(f);
    if (rc) {
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

int zb_json_check_strings(const char *text, size_t len, zb_err *err)
{
    int in_string = 0, line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        int nul = 0;
        if (c == '\n') {
            line++;
            line_start = i + 1;
        }
        if (!in_string) {
            in_string = c == '"';
            continue;
        }
        if (c == '"') {
            in_string = 0;
        } else if (c == '\0') {
            nul = 1;
        } else if (c == '\\' && i + 1 < len) {
            if (i + 5 < len && text[i + 1] == 'u' && !memcmp(text + i + 2, "0000", 4))
                nul = 1;
            i++; /* the escaped character cannot end the string */
        }
        if (nul)
            return zb_fail(err, "a string holds a NUL character (line %d, column %zu); "
                           "JSON strings here must not contain \\u0000", line, i - line_start + 1);
    }
    return 0;
}

/* Walks item; path[len] is the dotted path so far (for the message). */
static int check_dups(const cJSON *item, char *path, size_t len, size_t cap, zb_err *err)
{
    if (!cJSON_IsObject(item) && !cJSON_IsArray(item))
        return 0;
    int is_obj = cJSON_IsObject(item);
    for (const cJSON *it = item->child; it; it = it->next) {
        if (is_obj && it->string) {
            for (const cJSON *prev = item->child; prev != it; prev = prev->next)
                if (prev->string && !strcmp(prev->string, it->string)) {
                    char key[64 * 4 + 1];
                    size_t n = strlen(it->string);
                    zb_escape_bytes(key, sizeof key, it->string, n > 64 ? 64 : n);
                    return zb_fail(err, "field '%s%s%s' appears twice", path, len ? "." : "", key);
                }
        }
        if (!cJSON_IsObject(it) && !cJSON_IsArray(it))
            continue;
        size_t nl = len;
        if (is_obj && it->string) {
            int w = snprintf(path + len, cap - len, "%s%s", len ? "." : "", it->string);
            nl = w < 0 || (size_t)w >= cap - len ? cap - 1 : len + (size_t)w;
        }
        if (check_dups(it, path, nl, cap, err))
            return -1;
        path[len] = '\0';
    }
    return 0;
}

int zb_json_check_duplicates(const cJSON *item, zb_err *err)
{
    char path[256] = "";
    return check_dups(item, path, 0, sizeof path, err);
}

char *zb_escape_bytes(char *dst, size_t cap, const char *src, size_t n)
{
    size_t o = 0;
    if (cap == 0)
        return dst;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        char tmp[5];
        size_t k;
        if (c >= 0x20 && c < 0x7f) {
            tmp[0] = (char)c;
            k = 1;
        } else {
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
            k = 4;
        }
        if (o + k >= cap)
            break;
        memcpy(dst + o, tmp, k);
        o += k;
    }
    dst[o] = '\0';
    return dst;
}
