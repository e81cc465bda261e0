/*
 * generate_json.c: the one JSON object `zbsched generate --json` prints.
 *
 * A character model's tokens are bytes, and it can emit any byte of its
 * vocabulary: half of a UTF-8 sequence, NUL, control bytes.  The object
 * stays valid JSON (UTF-8, no raw control bytes) for all of them and loses
 * nothing: "text" is the bytes as a JSON string, exact wherever they are
 * valid UTF-8 (NUL and control bytes as JSON escapes) and with U+FFFD for
 * each byte that is not, "text_base64" the exact bytes (RFC 4648 base64),
 * and "utf8" says whether "text" is exact.  cJSON builds the object but
 * cannot write those two strings (it stops at a NUL and copies other bytes
 * as they are), so they are written here and go in as raw JSON values.
 */
#include "runtime/generate_json.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

void gen_emit_text(void *ctx, const char *bytes, size_t n)
{
    gen_text *b = ctx;
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 256) + n;
        char *p = realloc(b->data, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, n);
    b->len += n;
    b->data[b->len] = '\0';
}

/* The UTF-8 sequence at p (n > 0 bytes left): returns how many bytes it
 * takes and sets *valid.  A valid sequence is taken whole.  Otherwise the
 * "maximal subpart" is taken (Unicode's recommended practice for U+FFFD,
 * as Python's errors="replace", WHATWG's TextDecoder and ICU do): the
 * longest start of a valid sequence, or the one byte when it starts none.
 * Overlong forms, surrogates (U+D800..DFFF) and code points past U+10FFFF
 * are invalid (RFC 3629). */
static size_t utf8_scan(const unsigned char *p, size_t n, int *valid)
{
    unsigned c = p[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xbf; /* range of the second byte */
    *valid = 0;
    if (c < 0x80) {
        *valid = 1;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        if (c == 0xf4)
            hi = 0x8f; /* past U+10FFFF */
    } else {
        return 1; /* a continuation byte, C0, C1 or F5..FF: starts nothing */
    }
    size_t i = 1;
    if (i < n && p[i] >= lo && p[i] <= hi)
        for (i = 2; i < len && i < n && p[i] >= 0x80 && p[i] <= 0xbf; i++)
            ;
    *valid = i == len;
    return i;
}

/* bytes[0..n) as a quoted JSON string into a new malloc'd buffer: valid
 * UTF-8 copied, '"', '\\' and the control bytes 0x00..0x1f and 0x7f
 * escaped, each maximal invalid subpart written as one U+FFFD (so the
 * string equals Python's bytes.decode("utf-8", "replace")).  Sets *exact
 * to whether nothing was replaced.  NULL when memory runs out. */
static char *json_text(const char *bytes, size_t n, int *exact)
{
    /* worst case: 6 bytes per input byte ("\u001f", or U+FFFD's 3), quotes */
    char *out = malloc(6 * n + 3), *o = out;
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)bytes;
    *exact = 1;
    *o++ = '"';
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        int valid;
        size_t len = utf8_scan(p + i, n - i, &valid);
        if (!valid) {
            memcpy(o, "\xef\xbf\xbd", 3); /* U+FFFD REPLACEMENT CHARACTER */
            o += 3;
            *exact = 0;
            i += len;
        } else if (len > 1) {
            memcpy(o, p + i, len);
            o += len;
            i += len;
        } else {
            static const char hex[] = "0123456789abcdef";
            if (c == '"' || c == '\\') {
                *o++ = '\\';
                *o++ = (char)c;
            } else if (c == '\n') {
                memcpy(o, "\\n", 2);
                o += 2;
            } else if (c == '\t') {
                memcpy(o, "\\t", 2);
                o += 2;
            } else if (c == '\r') {
                memcpy(o, "\\r", 2);
                o += 2;
            } else if (c < 0x20 || c == 0x7f) {
                memcpy(o, "\\u00", 4);
                o[4] = hex[c >> 4];
                o[5] = hex[c & 15];
                o += 6;
            } else {
                *o++ = (char)c;
            }
            i++;
        }
    }
    *o++ = '"';
    *o = '\0';
    return out;
}

/* bytes[0..n) in standard base64 with padding (RFC 4648, section 4), as a
 * quoted JSON string in a new malloc'd buffer; NULL when memory runs out. */
static char *json_base64(const char *bytes, size_t n)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 3), *o = out;
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)bytes;
    *o++ = '"';
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        *o++ = alphabet[v >> 18 & 63];
        *o++ = alphabet[v >> 12 & 63];
        *o++ = i + 1 < n ? alphabet[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? alphabet[v & 63] : '=';
    }
    *o++ = '"';
    *o = '\0';
    return out;
}

/* Built with cJSON except the two strings above,
 * which cJSON cannot write (it stops at a NUL and copies other bytes
 * as they are): they go in as raw, already valid JSON values. */
char *gen_result_json(const gen_text *buf, size_t prompt_bytes, const gen_result *res,
                      const gen_opts *o, int seq_len)
{
    int exact = 1;
    char *text = json_text(buf->data ? buf->data : "", buf->len, &exact);
    char *b64 = json_base64(buf->data ? buf->data : "", buf->len);
    cJSON *out = cJSON_CreateObject();
    char *s = NULL;
    if (text && b64 && out && cJSON_AddRawToObject(out, "text", text) &&
        cJSON_AddRawToObject(out, "text_base64", b64) &&
        cJSON_AddBoolToObject(out, "utf8", exact) &&
        cJSON_AddNumberToObject(out, "bytes", (double)buf->len) &&
        cJSON_AddNumberToObject(out, "prompt_bytes", (double)prompt_bytes) &&
        cJSON_AddNumberToObject(out, "tokens", res->n_new) &&
        cJSON_AddNumberToObject(out, "cropped_tokens", res->n_cropped) &&
        cJSON_AddNumberToObject(out, "context", seq_len) &&
        cJSON_AddNumberToObject(out, "tokens_per_s", res->tokens_per_s) &&
        cJSON_AddNumberToObject(out, "seconds", res->seconds) &&
        cJSON_AddBoolToObject(out, "cache", o->use_cache) &&
        cJSON_AddNumberToObject(out, "seed", (double)o->seed) &&
        cJSON_AddNumberToObject(out, "temperature", o->temperature))
        s = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    free(text);
    free(b64);
    return s;
}

