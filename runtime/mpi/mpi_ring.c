/*
 * mpi_ring.c: the int8 ring and the fp32 all-reduce between ranks (see
 * mpi_ring.h).
 *
 * The chunk bounds and the order of quantizer calls copy outer_ring.c; a
 * change to either file must change both (tests/mpi/ compares them bit for
 * bit).  One send and one receive buffer of the largest message, plus the
 * owners' encodings of every chunk (n bytes + K tables) for forwarding.
 */
#include "runtime/mpi/mpi_ring.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/outer/outer_quant.h"

#define LUT_BYTES (OUTER_QUANT_BINS * sizeof(float))

/* Chunk c of k over n elements starts here (outer_ring.c's bounds). */
static size_t chunk_lo(size_t n, int k, int c)
{
    return (size_t)((unsigned __int128)n * (unsigned)c / (unsigned)k);
}

static int mod(int a, int k)
{
    int r = a % k;
    return r < 0 ? r + k : r;
}

static int mpi_failed(zb_err *err, int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return zb_fail(err, "all-reduce: %s: %s", what, text);
}

static void count(outer_ring_stats *stats, size_t bytes)
{
    if (stats && bytes) {
        stats->bytes_sent += bytes;
        stats->messages++;
    }
}

/* fp32: MPI_Allreduce, then the division outer_ring.c's owner does. */
static int allreduce_fp32(float *buf, size_t n, int k, int r, float divisor, MPI_Comm comm,
                          outer_ring_stats *stats, zb_err *err)
{
    for (size_t done = 0; done < n;) {
        size_t part = n - done > (size_t)INT_MAX ? (size_t)INT_MAX : n - done;
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + done, (int)part, MPI_FLOAT, MPI_SUM, comm);
        if (rc != MPI_SUCCESS)
            return mpi_failed(err, rc, "MPI_Allreduce");
        done += part;
    }
    if (divisor != 1.0f)
        for (size_t j = 0; j < n; j++)
            buf[j] /= divisor;
    /* what a ring all-reduce sends from rank r: chunks r-t, then r+1-t */
    for (int t = 0; t < k - 1; t++) {
        int a = mod(r - t, k), b = mod(r + 1 - t, k);
        count(stats, (chunk_lo(n, k, a + 1) - chunk_lo(n, k, a)) * sizeof(float));
        count(stats, (chunk_lo(n, k, b + 1) - chunk_lo(n, k, b)) * sizeof(float));
    }
    return 0;
}

static int allreduce_int8(float *buf, size_t n, int k, int r, float divisor, MPI_Comm comm,
                          outer_ring_stats *stats, zb_err *err)
{
    size_t max_chunk = 0;
    for (int c = 0; c < k; c++) {
        size_t len = chunk_lo(n, k, c + 1) - chunk_lo(n, k, c);
        if (len > max_chunk)
            max_chunk = len;
    }
    if (max_chunk + LUT_BYTES > (size_t)INT_MAX)
        return zb_fail(err, "all-reduce: a chunk of %zu elements is too large for one message",
                       max_chunk);
    uint8_t *out = malloc(LUT_BYTES + max_chunk);
    uint8_t *in = malloc(LUT_BYTES + max_chunk);
    uint8_t *own_q = malloc(n ? n : 1);
    float *own_lut = malloc((size_t)k * LUT_BYTES);
    int rc = 0;
    if (!out || !in || !own_q || !own_lut) {
        rc = zb_fail(err, "all-reduce: out of memory for %zu elements", n);
        goto done;
    }
    int next = mod(r + 1, k), prev = mod(r - 1, k);

    /* Reduce-scatter: encode the outgoing partial sum before the incoming
     * one is added (they are different chunks), as the simulation does. */
    for (int t = 0; t < k - 1 && rc == 0; t++) {
        int cs = mod(r - t, k), cr = mod(r - 1 - t, k);
        size_t slo = chunk_lo(n, k, cs), slen = chunk_lo(n, k, cs + 1) - slo;
        size_t rlo = chunk_lo(n, k, cr), rlen = chunk_lo(n, k, cr + 1) - rlo;
        if (slen)
            outer_quant_encode(buf + slo, slen, out + LUT_BYTES, (float *)(void *)out);
        int ms = slen ? (int)(LUT_BYTES + slen) : 0, mr = rlen ? (int)(LUT_BYTES + rlen) : 0;
        int e = MPI_Sendrecv(out, ms, MPI_BYTE, next, 0, in, mr, MPI_BYTE, prev, 0, comm,
                             MPI_STATUS_IGNORE);
        if (e != MPI_SUCCESS) {
            rc = mpi_failed(err, e, "MPI_Sendrecv");
            break;
        }
        count(stats, (size_t)ms);
        if (rlen)
            outer_quant_decode_add(in + LUT_BYTES, (const float *)(const void *)in, rlen, buf + rlo);
    }
    if (rc)
        goto done;

    /* This rank owns chunk r+1: average, encode once, keep the decoding. */
    int own = next;
    size_t olo = chunk_lo(n, k, own), olen = chunk_lo(n, k, own + 1) - olo;
    float *x = buf + olo;
    if (divisor != 1.0f)
        for (size_t j = 0; j < olen; j++)
            x[j] /= divisor;
    outer_quant_encode(x, olen, own_q + olo, own_lut + (size_t)own * OUTER_QUANT_BINS);
    outer_quant_decode(own_q + olo, own_lut + (size_t)own * OUTER_QUANT_BINS, olen, x);

    /* All-gather: forward chunk r+1-t (owned here at t = 0, received at
     * t-1 otherwise) unchanged; receive chunk r-t and decode it. */
    for (int t = 0; t < k - 1; t++) {
        int cs = mod(r + 1 - t, k), cr = mod(r - t, k);
        size_t slo = chunk_lo(n, k, cs), slen = chunk_lo(n, k, cs + 1) - slo;
        size_t rlo = chunk_lo(n, k, cr), rlen = chunk_lo(n, k, cr + 1) - rlo;
        if (slen) {
            memcpy(out, own_lut + (size_t)cs * OUTER_QUANT_BINS, LUT_BYTES);
            memcpy(out + LUT_BYTES, own_q + slo, slen);
        }
        int ms = slen ? (int)(LUT_BYTES + slen) : 0, mr = rlen ? (int)(LUT_BYTES + rlen) : 0;
        int e = MPI_Sendrecv(out, ms, MPI_BYTE, next, 1, in, mr, MPI_BYTE, prev, 1, comm,
                             MPI_STATUS_IGNORE);
        if (e != MPI_SUCCESS) {
            rc = mpi_failed(err, e, "MPI_Sendrecv");
            break;
        }
        count(stats, (size_t)ms);
        if (rlen) {
            memcpy(own_lut + (size_t)cr * OUTER_QUANT_BINS, in, LUT_BYTES);
            memcpy(own_q + rlo, in + LUT_BYTES, rlen);
            outer_quant_decode(own_q + rlo, own_lut + (size_t)cr * OUTER_QUANT_BINS, rlen,
                               buf + rlo);
        }
    }
done:
    free(out);
    free(in);
    free(own_q);
    free(own_lut);
    return rc;
}

int mpi_allreduce_mean(outer_wire wire, float *buf, size_t n, float divisor, MPI_Comm comm,
                       outer_ring_stats *stats, zb_err *err)
{
    if (!(divisor > 0.0f))
        return zb_fail(err, "all-reduce: divisor %g is not positive", (double)divisor);
    int k, r;
    MPI_Comm_size(comm, &k);
    MPI_Comm_rank(comm, &r);
    if (stats)
        stats->reductions++;
    if (k == 1) {
        if (divisor != 1.0f)
            for (size_t j = 0; j < n; j++)
                buf[j] /= divisor;
        return 0;
    }
    return wire == OUTER_WIRE_INT8 ? allreduce_int8(buf, n, k, r, divisor, comm, stats, err)
                                   : allreduce_fp32(buf, n, k, r, divisor, comm, stats, err);
}

/* The largest chunk of n over k, checked against MPI's int counts. */
static int chunk_room(size_t n, int k, size_t *max_chunk, zb_err *err)
{
    *max_chunk = 0;
    for (int c = 0; c < k; c++) {
        size_t len = chunk_lo(n, k, c + 1) - chunk_lo(n, k, c);
        if (len > *max_chunk)
            *max_chunk = len;
    }
    if (*max_chunk > (size_t)INT_MAX)
        return zb_fail(err, "ZeRO-1: a chunk of %zu floats is too large for one message", *max_chunk);
    return 0;
}

int mpi_reduce_scatter_mean(float *buf, size_t n, float divisor, MPI_Comm comm,
                            outer_ring_stats *stats, zb_err *err)
{
    if (!(divisor > 0.0f))
        return zb_fail(err, "reduce-scatter: divisor %g is not positive", (double)divisor);
    int k, r;
    MPI_Comm_size(comm, &k);
    MPI_Comm_rank(comm, &r);
    if (stats)
        stats->reductions++;
    size_t max_chunk;
    if (chunk_room(n, k, &max_chunk, err) != 0)
        return -1;
    float *in = malloc((max_chunk ? max_chunk : 1) * sizeof *in);
    if (!in)
        return zb_fail(err, "reduce-scatter: out of memory for %zu floats", max_chunk);
    int next = mod(r + 1, k), prev = mod(r - 1, k), rc = 0;
    for (int t = 0; t < k - 1; t++) {
        int cs = mod(r - t, k), cr = mod(r - 1 - t, k);
        size_t slo = chunk_lo(n, k, cs), slen = chunk_lo(n, k, cs + 1) - slo;
        size_t rlo = chunk_lo(n, k, cr), rlen = chunk_lo(n, k, cr + 1) - rlo;
        /* the outgoing chunk is not the one being added into: no copy */
        int e = MPI_Sendrecv(buf + slo, (int)slen, MPI_FLOAT, next, 2, in, (int)rlen, MPI_FLOAT,
                             prev, 2, comm, MPI_STATUS_IGNORE);
        if (e != MPI_SUCCESS) {
            rc = mpi_failed(err, e, "MPI_Sendrecv");
            break;
        }
        count(stats, slen * sizeof(float));
        float *acc = buf + rlo;
        for (size_t j = 0; j < rlen; j++)
            acc[j] += in[j];
    }
    free(in);
    if (rc == 0 && divisor != 1.0f) {
        int own = next;
        size_t olo = chunk_lo(n, k, own), olen = chunk_lo(n, k, own + 1) - olo;
        for (size_t j = 0; j < olen; j++)
            buf[olo + j] /= divisor;
    }
    return rc;
}

int mpi_allgather_chunks(float *buf, size_t n, MPI_Comm comm, outer_ring_stats *stats,
                         zb_err *err)
{
    int k, r;
    MPI_Comm_size(comm, &k);
    MPI_Comm_rank(comm, &r);
    size_t max_chunk;
    if (chunk_room(n, k, &max_chunk, err) != 0)
        return -1;
    int next = mod(r + 1, k), prev = mod(r - 1, k);
    for (int t = 0; t < k - 1; t++) {
        int cs = mod(r + 1 - t, k), cr = mod(r - t, k);
        size_t slo = chunk_lo(n, k, cs), slen = chunk_lo(n, k, cs + 1) - slo;
        size_t rlo = chunk_lo(n, k, cr), rlen = chunk_lo(n, k, cr + 1) - rlo;
        int e = MPI_Sendrecv(buf + slo, (int)slen, MPI_FLOAT, next, 3, buf + rlo, (int)rlen,
                             MPI_FLOAT, prev, 3, comm, MPI_STATUS_IGNORE);
        if (e != MPI_SUCCESS)
            return mpi_failed(err, e, "MPI_Sendrecv");
        count(stats, slen * sizeof(float));
    }
    return 0;
}
