/*
 * vocab_link_mpi.c: the vocabulary passes' messages as MPI point-to-point
 * (see vocab_link_mpi.h).
 *
 * State: the duplicated communicator and the sends in flight, each a
 * request and the copy of its bytes.  Sizes above INT_MAX bytes go as
 * several messages of one tag, in order (MPI keeps a pair's order).
 */
#include "runtime/mpi/vocab_link_mpi.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A send MPI has not finished with. */
typedef struct vl_flight {
    MPI_Request req; /* the MPI_Isend of one piece */
    void *copy;      /* the bytes (freed with the last piece), or NULL for others */
} vl_flight;

typedef struct vl_impl {
    MPI_Comm comm;            /* a duplicate of the pipeline's */
    vocab_link_mpi_cfg *cfg;  /* tags' m, counters (borrowed) */
    vl_flight *fly;           /* [n_fly] in flight */
    int n_fly, cap_fly;       /* used, allocated */
} vl_impl;

/* The largest piece one MPI call moves. */
#define VL_PIECE ((size_t)INT_MAX & ~(size_t)7)

static int vl_failed(zb_err *err, int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return zb_fail(err, "vocabulary passes: %s: %s", what, text);
}

static int vl_tag(const vl_impl *im, vocab_msg kind, int mb)
{
    return (int)kind * im->cfg->n_micro + mb;
}

/* Frees the copies of finished sends (waiting for all when wait is set). */
static void reap(vl_impl *im, int wait)
{
    int kept = 0;
    for (int i = 0; i < im->n_fly; i++) {
        vl_flight *f = &im->fly[i];
        int done = 0;
        if (wait) {
            MPI_Wait(&f->req, MPI_STATUS_IGNORE);
            done = 1;
        } else {
            MPI_Test(&f->req, &done, MPI_STATUS_IGNORE);
        }
        if (done)
            free(f->copy);
        else
            im->fly[kept++] = *f;
    }
    im->n_fly = kept;
}

static int vl_send(zb_vocab_link *l, int to, vocab_msg kind, int mb, const void *buf, size_t n,
                   zb_err *err)
{
    vl_impl *im = l->impl;
    reap(im, 0);
    size_t pieces = n == 0 ? 1 : (n + VL_PIECE - 1) / VL_PIECE;
    if ((size_t)im->n_fly + pieces > (size_t)im->cap_fly) {
        size_t cap = ((size_t)im->cap_fly + pieces) * 2;
        vl_flight *f = realloc(im->fly, cap * sizeof *f);
        if (!f)
            return zb_fail(err, "vocabulary passes: out of memory for a send");
        im->fly = f;
        im->cap_fly = (int)cap;
    }
    char *copy = malloc(n ? n : 1);
    if (!copy)
        return zb_fail(err, "vocabulary passes: out of memory for a send of %zu bytes", n);
    memcpy(copy, buf, n);
    for (size_t i = 0, off = 0; i < pieces; i++) {
        size_t part = n - off < VL_PIECE ? n - off : VL_PIECE;
        vl_flight *f = &im->fly[im->n_fly];
        int rc = MPI_Isend(copy + off, (int)part, MPI_BYTE, to, vl_tag(im, kind, mb), im->comm,
                           &f->req);
        if (rc != MPI_SUCCESS) {
            if (i == 0)
                free(copy); /* later pieces' failure: the earlier ones own it */
            return vl_failed(err, rc, "MPI_Isend");
        }
        f->copy = i + 1 == pieces ? copy : NULL; /* the last piece frees it */
        im->n_fly++;
        off += part;
    }
    im->cfg->bytes_sent += n;
    im->cfg->messages++;
    return 0;
}

static int vl_recv(zb_vocab_link *l, int from, vocab_msg kind, int mb, void *buf, size_t n,
                   zb_err *err)
{
    vl_impl *im = l->impl;
    reap(im, 0);
    size_t pieces = n == 0 ? 1 : (n + VL_PIECE - 1) / VL_PIECE;
    for (size_t i = 0, off = 0; i < pieces; i++) {
        size_t part = n - off < VL_PIECE ? n - off : VL_PIECE;
        MPI_Status st;
        int rc = MPI_Recv((char *)buf + off, (int)part, MPI_BYTE, from, vl_tag(im, kind, mb),
                          im->comm, &st);
        if (rc != MPI_SUCCESS)
            return vl_failed(err, rc, "MPI_Recv");
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t)got != part)
            return zb_fail(err, "vocabulary passes: a message of %d bytes from rank %d where "
                           "%zu were expected", got, from, part);
        off += part;
    }
    return 0;
}

static int vl_bcast(zb_vocab_link *l, int root, float *buf, size_t n, zb_err *err)
{
    vl_impl *im = l->impl;
    size_t piece = VL_PIECE / sizeof(float);
    for (size_t off = 0; off < n;) {
        size_t part = n - off < piece ? n - off : piece;
        int rc = MPI_Bcast(buf + off, (int)part, MPI_FLOAT, root, im->comm);
        if (rc != MPI_SUCCESS)
            return vl_failed(err, rc, "MPI_Bcast of the head");
        off += part;
    }
    return 0;
}

static void vl_destroy(zb_vocab_link *l)
{
    vl_impl *im = l->impl;
    if (!im)
        return;
    reap(im, 1);
    free(im->fly);
    MPI_Comm_free(&im->comm);
    free(im);
}

static const zb_vocab_link_ops vl_ops = {
    .send = vl_send,
    .recv = vl_recv,
    .bcast = vl_bcast,
    .destroy = vl_destroy,
};

int vocab_link_mpi_make(void *ctx, int device, zb_vocab_link **out, zb_err *err)
{
    vocab_link_mpi_cfg *cfg = ctx;
    int me = -1;
    MPI_Comm_rank(cfg->comm, &me);
    if (device != me)
        return zb_fail(err, "vocabulary passes: device %d asked of rank %d", device, me);
    if (cfg->n_micro < 1 || (long)VOCAB_MSG_KINDS * cfg->n_micro > 32767)
        return zb_fail(err, "vocabulary passes over MPI: %d micro-batches is more than the "
                       "tags allow (at most %d)", cfg->n_micro, 32767 / VOCAB_MSG_KINDS);
    zb_vocab_link *l = calloc(1, sizeof *l);
    vl_impl *im = calloc(1, sizeof *im);
    if (!l || !im) {
        free(l);
        free(im);
        return zb_fail(err, "out of memory");
    }
    int rc = MPI_Comm_dup(cfg->comm, &im->comm);
    if (rc != MPI_SUCCESS) {
        free(l);
        free(im);
        return vl_failed(err, rc, "MPI_Comm_dup");
    }
    im->cfg = cfg;
    l->ops = &vl_ops;
    l->impl = im;
    l->me = me;
    *out = l;
    return 0;
}
