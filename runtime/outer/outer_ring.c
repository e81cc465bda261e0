/*
 * outer_ring.c: the simulated ring all-reduce (see outer_ring.h).
 *
 * Messages of one step live in a scratch area sized for the largest chunk
 * times K; the int8 all-gather keeps the owner's encoding of every chunk
 * (n bytes + K tables) because it is forwarded unchanged K-1 times.
 */
#include "runtime/outer/outer_ring.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/outer/outer_quant.h"

const char *outer_wire_name(outer_wire w)
{
    return w == OUTER_WIRE_INT8 ? "int8" : "fp32";
}

int outer_wire_parse(const char *text)
{
    if (!strcmp(text, "fp32"))
        return OUTER_WIRE_FP32;
    if (!strcmp(text, "int8"))
        return OUTER_WIRE_INT8;
    return -1;
}

/* Chunk c of K over n elements: [lo, hi). */
static size_t chunk_lo(size_t n, int k, int c)
{
    return (size_t)((unsigned __int128)n * (unsigned)c / (unsigned)k);
}

static int mod(int a, int k)
{
    int r = a % k;
    return r < 0 ? r + k : r;
}

static uint64_t message_bytes(outer_wire wire, size_t len)
{
    if (len == 0)
        return 0;
    return wire == OUTER_WIRE_INT8 ? (uint64_t)outer_quant_wire_bytes(len)
                                   : (uint64_t)len * sizeof(float);
}

uint64_t outer_allreduce_bytes(outer_wire wire, int k, size_t n)
{
    if (k < 2)
        return 0;
    uint64_t per_pass = 0;
    for (int c = 0; c < k; c++)
        per_pass += message_bytes(wire, chunk_lo(n, k, c + 1) - chunk_lo(n, k, c));
    return 2 * (uint64_t)(k - 1) * per_pass;
}

void outer_ring_count_allgather(outer_ring_stats *stats, int k, size_t count)
{
    if (!stats || k < 2)
        return;
    stats->bytes_sent += (uint64_t)k * (uint64_t)(k - 1) * count * sizeof(float);
    stats->messages += (uint64_t)k * (uint64_t)(k - 1);
}

static void count_message(outer_ring_stats *stats, outer_wire wire, size_t len)
{
    if (!stats || len == 0)
        return;
    stats->bytes_sent += message_bytes(wire, len);
    stats->messages++;
}

int outer_allreduce(outer_wire wire, float *const *bufs, int k, size_t n,
                    float divisor, outer_ring_stats *stats, zb_err *err)
{
    if (k < 1)
        return zb_fail(err, "all-reduce: %d replicas (need at least 1)", k);
    if (!(divisor > 0.0f))
        return zb_fail(err, "all-reduce: divisor %g is not positive", (double)divisor);
    if (stats)
        stats->reductions++;
    if (k == 1) {
        if (divisor != 1.0f)
            for (size_t j = 0; j < n; j++)
                bufs[0][j] /= divisor;
        return 0;
    }

    size_t max_chunk = 0;
    for (int c = 0; c < k; c++) {
        size_t len = chunk_lo(n, k, c + 1) - chunk_lo(n, k, c);
        if (len > max_chunk)
            max_chunk = len;
    }
    /* One message slot per sender for the reduce-scatter (fp32 floats or
     * int8 bytes + table), plus the owners' int8 encodings for all-gather. */
    float *msg_f = NULL;
    uint8_t *msg_q = NULL, *own_q = NULL;
    float *msg_lut = NULL, *own_lut = NULL;
    if (wire == OUTER_WIRE_FP32) {
        msg_f = malloc((size_t)k * (max_chunk ? max_chunk : 1) * sizeof(float));
        if (!msg_f)
            return zb_fail(err, "all-reduce: out of memory for %zu floats", (size_t)k * max_chunk);
    } else {
        msg_q = malloc((size_t)k * (max_chunk ? max_chunk : 1));
        msg_lut = malloc((size_t)k * OUTER_QUANT_BINS * sizeof(float));
        own_q = malloc(n ? n : 1);
        own_lut = malloc((size_t)k * OUTER_QUANT_BINS * sizeof(float));
        if (!msg_q || !msg_lut || !own_q || !own_lut) {
            free(msg_q);
            free(msg_lut);
            free(own_q);
            free(own_lut);
            return zb_fail(err, "all-reduce: out of memory for %zu elements", n);
        }
    }

    /* Reduce-scatter: build all K messages, then deliver them. */
    for (int t = 0; t < k - 1; t++) {
        for (int r = 0; r < k; r++) {
            int c = mod(r - t, k);
            size_t lo = chunk_lo(n, k, c), len = chunk_lo(n, k, c + 1) - lo;
            if (wire == OUTER_WIRE_FP32)
                memcpy(msg_f + (size_t)r * max_chunk, bufs[r] + lo, len * sizeof(float));
            else
                outer_quant_encode(bufs[r] + lo, len, msg_q + (size_t)r * max_chunk,
                                   msg_lut + (size_t)r * OUTER_QUANT_BINS);
            count_message(stats, wire, len);
        }
        for (int r = 0; r < k; r++) {
            int dst = mod(r + 1, k), c = mod(r - t, k);
            size_t lo = chunk_lo(n, k, c), len = chunk_lo(n, k, c + 1) - lo;
            float *acc = bufs[dst] + lo;
            if (wire == OUTER_WIRE_FP32) {
                const float *m = msg_f + (size_t)r * max_chunk;
                for (size_t j = 0; j < len; j++)
                    acc[j] += m[j];
            } else {
                outer_quant_decode_add(msg_q + (size_t)r * max_chunk,
                                       msg_lut + (size_t)r * OUTER_QUANT_BINS, len, acc);
            }
        }
    }

    /* Owners finish their chunk: average, and in int8 encode it once and
     * keep the decoded values so the owner matches what others receive. */
    for (int c = 0; c < k; c++) {
        int owner = mod(c - 1, k);
        size_t lo = chunk_lo(n, k, c), len = chunk_lo(n, k, c + 1) - lo;
        float *x = bufs[owner] + lo;
        if (divisor != 1.0f)
            for (size_t j = 0; j < len; j++)
                x[j] /= divisor;
        if (wire == OUTER_WIRE_INT8) {
            outer_quant_encode(x, len, own_q + lo, own_lut + (size_t)c * OUTER_QUANT_BINS);
            outer_quant_decode(own_q + lo, own_lut + (size_t)c * OUTER_QUANT_BINS, len, x);
        }
    }

    /* All-gather: forward chunks unchanged around the ring.  Rank r sends
     * chunk (r + 1 - t) at step t; the source of every copy is the owner's
     * final chunk, so fp32 copies straight from it, and int8 decodes the
     * owner's encoding (identical bytes to what each hop forwards). */
    for (int t = 0; t < k - 1; t++) {
        for (int r = 0; r < k; r++) {
            int dst = mod(r + 1, k), c = mod(r + 1 - t, k);
            size_t lo = chunk_lo(n, k, c), len = chunk_lo(n, k, c + 1) - lo;
            if (wire == OUTER_WIRE_FP32)
                memcpy(bufs[dst] + lo, bufs[r] + lo, len * sizeof(float));
            else
                outer_quant_decode(own_q + lo, own_lut + (size_t)c * OUTER_QUANT_BINS, len,
                                   bufs[dst] + lo);
            count_message(stats, wire, len);
        }
    }

    free(msg_f);
    free(msg_q);
    free(msg_lut);
    free(own_q);
    free(own_lut);
    return 0;
}

void outer_ring_chunk(size_t n, int k, int c, size_t *lo, size_t *len)
{
    *lo = chunk_lo(n, k, c);
    *len = chunk_lo(n, k, c + 1) - *lo;
}

int outer_ring_owner(int k, int c)
{
    return mod(c - 1, k);
}

/* The loops of outer_allreduce's fp32 path, split at the owners' division:
 * the same messages in the same order, so the same sums. */
int outer_reduce_scatter(float *const *bufs, int k, size_t n, float divisor,
                         outer_ring_stats *stats, zb_err *err)
{
    if (k < 1)
        return zb_fail(err, "reduce-scatter: %d replicas (need at least 1)", k);
    if (!(divisor > 0.0f))
        return zb_fail(err, "reduce-scatter: divisor %g is not positive", (double)divisor);
    if (stats)
        stats->reductions++;
    size_t max_chunk = 0;
    for (int c = 0; c < k; c++) {
        size_t len = chunk_lo(n, k, c + 1) - chunk_lo(n, k, c);
        if (len > max_chunk)
            max_chunk = len;
    }
    float *msg = NULL;
    if (k > 1 && !(msg = malloc((size_t)k * (max_chunk ? max_chunk : 1) * sizeof(float))))
        return zb_fail(err, "reduce-scatter: out of memory for %zu floats", (size_t)k * max_chunk);
    for (int t = 0; t < k - 1; t++) {
        for (int r = 0; r < k; r++) {
            int c = mod(r - t, k);
            size_t lo = chunk_lo(n, k, c), len = chunk_lo(n, k, c + 1) - lo;
            memcpy(msg + (size_t)r * max_chunk, bufs[r] + lo, len * sizeof(float));
            count_message(stats, OUTER_WIRE_FP32, len);
        }
        for (int r = 0; r < k; r++) {
            int dst = mod(r + 1, k), c = mod(r - t, k);
            size_t lo = chunk_lo(n, k, c), len = chunk_lo(n, k, c + 1) - lo;
            float *acc = bufs[dst] + lo;
            const float *m = msg + (size_t)r * max_chunk;
            for (size_t j = 0; j < len; j++)
                acc[j] += m[j];
        }
    }
    free(msg);
    for (int c = 0; c < k; c++) {
        size_t lo = chunk_lo(n, k, c), len = chunk_lo(n, k, c + 1) - lo;
        float *x = bufs[mod(c - 1, k)] + lo;
        if (divisor != 1.0f)
            for (size_t j = 0; j < len; j++)
                x[j] /= divisor;
    }
    return 0;
}

void outer_allgather(float *const *bufs, int k, size_t n, outer_ring_stats *stats)
{
    for (int t = 0; t < k - 1; t++)
        for (int r = 0; r < k; r++) {
            int dst = mod(r + 1, k), c = mod(r + 1 - t, k);
            size_t lo = chunk_lo(n, k, c), len = chunk_lo(n, k, c + 1) - lo;
            memcpy(bufs[dst] + lo, bufs[r] + lo, len * sizeof(float));
            count_message(stats, OUTER_WIRE_FP32, len);
        }
}
