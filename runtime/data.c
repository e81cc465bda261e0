/*
 * data.c: character vocabulary, 90/10 split and window sampling (data.h).
 */
#include "runtime/data.h"
#include "src/input.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int data_from_text(const char *text, size_t len, int ctx, zb_data **out, zb_err *err)
{
    if (ctx <= 0)
        return zb_fail(err, "context length must be positive, got %d", ctx);
    if (len == 0)
        return zb_fail(err, "the text is empty");
    /* 90/10 split; each side needs one full window of ctx+1 tokens. */
    size_t n_train = len - len / 10;
    size_t n_val = len - n_train;
    if (n_val < (size_t)ctx + 1 || n_train < (size_t)ctx + 1)
        return zb_fail(err, "the text is too short: %zu characters give %zu for validation, "
                       "and each split needs at least context+1 = %d", len, n_val, ctx + 1);
    zb_data *d = calloc(1, sizeof *d);
    if (!d)
        return zb_fail(err, "out of memory");
    d->tokens = malloc(sizeof *d->tokens * len);
    if (!d->tokens) {
        free(d);
        return zb_fail(err, "out of memory for %zu tokens", len);
    }
    int seen[256] = { 0 };
    for (size_t i = 0; i < len; i++)
        seen[(unsigned char)text[i]] = 1;
    for (int c = 0; c < 256; c++) {
        d->id_of[c] = -1;
        if (seen[c]) {
            d->id_of[c] = (int16_t)d->vocab;
            d->chars[d->vocab++] = (unsigned char)c;
        }
    }
    for (size_t i = 0; i < len; i++)
        d->tokens[i] = d->id_of[(unsigned char)text[i]];
    d->n_tokens = len;
    d->n_train = n_train;
    d->ctx = ctx;
    *out = d;
    return 0;
}

int data_load_file(const char *path, int ctx, zb_data **out, zb_err *err)
{
    char *text = NULL;
    size_t len = 0;
    /* The input cap (src/input.h) keeps /dev/zero or a FIFO from being
     * read without end; `run --max-input` raises it for a large text. */
    if (zb_read_capped(path, zb_input_max(), &text, &len, err) != 0)
        return -1;
    int rc = data_from_text(text, len, ctx, out, err);
    free(text);
    if (rc != 0)
        return zb_wrap(err, "%s: ", path);
    return 0;
}

void data_free(zb_data *d)
{
    if (!d)
        return;
    free(d->tokens);
    free(d);
}

size_t data_train_windows(const zb_data *d)
{
    return d->n_train - (size_t)d->ctx;
}

static void copy_window(const zb_data *d, size_t start, int32_t *x, int32_t *y)
{
    memcpy(x, d->tokens + start, sizeof *x * (size_t)d->ctx);
    memcpy(y, d->tokens + start + 1, sizeof *y * (size_t)d->ctx);
}

void data_train_batch(const zb_data *d, zb_rng *r, int batch, int32_t *x, int32_t *y)
{
    size_t n = data_train_windows(d);
    for (int b = 0; b < batch; b++) {
        size_t start = (size_t)rng_below(r, n);
        assert(start + (size_t)d->ctx < d->n_train);
        copy_window(d, start, x + (size_t)b * d->ctx, y + (size_t)b * d->ctx);
    }
}

void data_val_batch(const zb_data *d, int first, int batch, int n_total, int32_t *x, int32_t *y)
{
    assert(n_total > 0 && first >= 0 && first + batch <= n_total);
    /* Start positions range over [n_train, n_tokens - ctx - 1]. */
    size_t span = d->n_tokens - d->n_train - (size_t)d->ctx;
    for (int b = 0; b < batch; b++) {
        size_t k = (size_t)(first + b);
        size_t start = d->n_train + (size_t)((double)k * (double)span / (double)n_total);
        assert(start + (size_t)d->ctx < d->n_tokens);
        copy_window(d, start, x + (size_t)b * d->ctx, y + (size_t)b * d->ctx);
    }
}
