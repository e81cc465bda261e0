/*
 * gpu_transport.c: the stage-to-stage transports of gpu_transport.h: CUDA
 * events between streams of one GPU, NCCL point-to-point between GPUs, and
 * the bootstrap of the NCCL communicator (NCCL_COMM_ID, or rank 0 handing
 * its unique id to the others over one TCP port).
 *
 * The TCP bootstrap is deliberately small: rank 0 listens on
 * ZB_MASTER_PORT, accepts world-1 connections and writes the 128-byte
 * ncclUniqueId to each; the others retry connect() until timeout_s passes
 * (rank 0 may start later) and read it.  It carries nothing else.
 */
#include "kernels/cuda/gpu_transport.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#ifdef ZB_HAVE_NCCL
#include <nccl.h>
#endif

struct gpu_fence {
    cudaEvent_t ev; /* created with cudaEventDisableTiming: ordering only */
};

static int cuda_ok(cudaError_t st, const char *what, zb_err *err)
{
    if (st == cudaSuccess)
        return 0;
    return zb_fail(err, "%s: CUDA error %d (%s)", what, (int)st, cudaGetErrorString(st));
}

int gpu_fence_new(gpu_fence **f, zb_err *err)
{
    gpu_fence *g = calloc(1, sizeof *g);
    if (!g)
        return zb_fail(err, "out of memory for a fence");
    if (cuda_ok(cudaEventCreateWithFlags(&g->ev, cudaEventDisableTiming), "cudaEventCreate",
                err) != 0) {
        free(g);
        return -1;
    }
    *f = g;
    return 0;
}

void gpu_fence_free(gpu_fence *f)
{
    if (!f)
        return;
    cudaEventDestroy(f->ev);
    free(f);
}

int gpu_fence_signal(gpu_fence *f, zb_cuda *from, zb_err *err)
{
    return cuda_ok(cudaEventRecord(f->ev, (cudaStream_t)zb_cuda_stream(from)), "cudaEventRecord",
                   err);
}

int gpu_fence_wait(gpu_fence *f, zb_cuda *to, zb_err *err)
{
    return cuda_ok(cudaStreamWaitEvent((cudaStream_t)zb_cuda_stream(to), f->ev, 0),
                   "cudaStreamWaitEvent", err);
}

int gpu_fence_done(gpu_fence *f, zb_err *err)
{
    cudaError_t st = cudaEventQuery(f->ev);
    if (st == cudaErrorNotReady) {
        cudaGetLastError(); /* not an error: clear it */
        return 0;
    }
    return cuda_ok(st, "cudaEventQuery", err) == 0 ? 1 : -1;
}

int gpu_local_send(zb_cuda *from, zb_cuda *to, gpu_fence *f, void *dst, const void *src,
                   size_t bytes, zb_err *err)
{
    if (gpu_fence_signal(f, from, err) != 0 || gpu_fence_wait(f, to, err) != 0)
        return -1;
    return zb_cuda_copy(to, dst, src, bytes, err);
}

/* ---- NCCL --------------------------------------------------------------- */

#ifdef ZB_HAVE_NCCL

struct gpu_comm {
    ncclComm_t comm;  /* this rank's communicator */
    gpu_rank_info me; /* where it sits */
};

int gpu_nccl_available(void) { return 1; }

static int nccl_ok(ncclResult_t st, const char *what, zb_err *err)
{
    if (st == ncclSuccess)
        return 0;
    return zb_fail(err, "%s: NCCL error %d (%s)", what, (int)st, ncclGetErrorString(st));
}

static int read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = read(fd, p, n);
        if (k <= 0) {
            if (k < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k <= 0) {
            if (k < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Rank 0 side of the TCP bootstrap: serve id to world-1 peers. */
static int serve_id(const char *port, int world, const ncclUniqueId *id, int timeout_s,
                    zb_err *err)
{
    struct addrinfo hints = { 0 }, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(NULL, port, &hints, &res);
    if (rc != 0)
        return zb_fail(err, "bootstrap: port %s: %s", port, gai_strerror(rc));
    int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, world) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return zb_fail(err, "bootstrap: cannot listen on port %s: %s", port, strerror(e));
    }
    freeaddrinfo(res);
    struct timeval tv = { timeout_s, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (int served = 1; served < world; served++) {
        int c = accept(fd, NULL, NULL);
        if (c < 0) {
            close(fd);
            return zb_fail(err, "bootstrap: only %d of %d ranks connected within %d s", served,
                           world, timeout_s);
        }
        int bad = write_full(c, id, sizeof *id);
        close(c);
        if (bad) {
            close(fd);
            return zb_fail(err, "bootstrap: sending the NCCL id failed");
        }
    }
    close(fd);
    return 0;
}

/* Other ranks: connect to addr:port (retrying until timeout_s) and read. */
static int fetch_id(const char *addr, const char *port, ncclUniqueId *id, int timeout_s,
                    zb_err *err)
{
    time_t until = time(NULL) + timeout_s;
    for (;;) {
        struct addrinfo hints = { 0 }, *res = NULL;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        int rc = getaddrinfo(addr, port, &hints, &res);
        if (rc != 0)
            return zb_fail(err, "bootstrap: %s:%s: %s", addr, port, gai_strerror(rc));
        int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
        int ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0;
        freeaddrinfo(res);
        if (ok) {
            int bad = read_full(fd, id, sizeof *id);
            close(fd);
            if (bad)
                return zb_fail(err, "bootstrap: reading the NCCL id from %s:%s failed", addr,
                               port);
            return 0;
        }
        if (fd >= 0)
            close(fd);
        if (time(NULL) >= until)
            return zb_fail(err, "bootstrap: rank 0 at %s:%s did not answer within %d s", addr,
                           port, timeout_s);
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

/* ncclCommInitRank of rank r from id, wrapped in a gpu_comm. */
static int comm_init(const gpu_rank_info *r, const ncclUniqueId *id, gpu_comm **out, zb_err *err)
{
    gpu_comm *c = calloc(1, sizeof *c);
    if (!c)
        return zb_fail(err, "out of memory for a communicator");
    c->me = *r;
    if (nccl_ok(ncclCommInitRank(&c->comm, r->world, *id, r->rank), "ncclCommInitRank", err) != 0) {
        free(c);
        return zb_wrap(err, "rank %d of %d: ", r->rank, r->world);
    }
    *out = c;
    return 0;
}

int gpu_comm_create(const gpu_rank_info *r, int timeout_s, gpu_comm **out, zb_err *err)
{
    if (cuda_ok(cudaSetDevice(r->local_rank), "cudaSetDevice", err) != 0)
        return zb_wrap(err, "rank %d: ", r->rank);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (getenv("NCCL_COMM_ID")) {
        /* NCCL derives the id from the address; rank 0 serves it itself */
        if (nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId", err) != 0)
            return -1;
    } else {
        const char *addr = getenv("ZB_MASTER_ADDR"), *port = getenv("ZB_MASTER_PORT");
        if (!addr || !*addr)
            addr = "127.0.0.1";
        if (!port || !*port)
            port = "29533";
        if (r->rank == 0) {
            if (nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId", err) != 0 ||
                serve_id(port, r->world, &id, timeout_s, err) != 0)
                return -1;
        } else if (fetch_id(addr, port, &id, timeout_s, err) != 0) {
            return -1;
        }
    }
    return comm_init(r, &id, out, err);
}

int gpu_nccl_unique_id(unsigned char id[GPU_NCCL_ID_BYTES], zb_err *err)
{
    ncclUniqueId u;
    _Static_assert(sizeof u == GPU_NCCL_ID_BYTES, "NCCL's unique id is 128 bytes");
    if (nccl_ok(ncclGetUniqueId(&u), "ncclGetUniqueId", err) != 0)
        return -1;
    memcpy(id, &u, sizeof u);
    return 0;
}

int gpu_comm_create_from_id(const gpu_rank_info *r, const unsigned char id[GPU_NCCL_ID_BYTES],
                            gpu_comm **out, zb_err *err)
{
    if (cuda_ok(cudaSetDevice(r->local_rank), "cudaSetDevice", err) != 0)
        return zb_wrap(err, "rank %d: ", r->rank);
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    return comm_init(r, &u, out, err);
}

void gpu_comm_free(gpu_comm *c)
{
    if (!c)
        return;
    ncclCommDestroy(c->comm);
    free(c);
}

int gpu_comm_exchange(gpu_comm *c, zb_cuda *s, const gpu_msg *sends, int n_sends,
                      const gpu_msg *recvs, int n_recvs, zb_err *err)
{
    cudaStream_t st = (cudaStream_t)zb_cuda_stream(s);
    if (nccl_ok(ncclGroupStart(), "ncclGroupStart", err) != 0)
        return -1;
    int rc = 0;
    for (int i = 0; i < n_sends && rc == 0; i++)
        rc = nccl_ok(ncclSend(sends[i].buf, sends[i].bytes, ncclChar, sends[i].peer, c->comm, st),
                     "ncclSend", err);
    for (int i = 0; i < n_recvs && rc == 0; i++)
        rc = nccl_ok(ncclRecv(recvs[i].buf, recvs[i].bytes, ncclChar, recvs[i].peer, c->comm, st),
                     "ncclRecv", err);
    /* the group must be closed even after a failed post */
    ncclResult_t end = ncclGroupEnd();
    if (rc != 0)
        return -1;
    return nccl_ok(end, "ncclGroupEnd", err);
}

int gpu_comm_allreduce_sum(gpu_comm *c, zb_cuda *s, float *buf, size_t n, zb_err *err)
{
    return nccl_ok(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->comm,
                                 (cudaStream_t)zb_cuda_stream(s)),
                   "ncclAllReduce", err);
}

int gpu_comm_allreduce_sum_f64(gpu_comm *c, zb_cuda *s, double *buf, size_t n, zb_err *err)
{
    return nccl_ok(ncclAllReduce(buf, buf, n, ncclDouble, ncclSum, c->comm,
                                 (cudaStream_t)zb_cuda_stream(s)),
                   "ncclAllReduce", err);
}

int gpu_comm_rank(const gpu_comm *c) { return c->me.rank; }
int gpu_comm_size(const gpu_comm *c) { return c->me.world; }

void *gpu_comm_nccl(gpu_comm *c) { return c->comm; }

/* One collective of the host's: buf (bytes) staged through the device on
 * a stream of its own, op 0 a broadcast from root, 1 an int minimum. */
static int host_collective(gpu_comm *c, void *buf, size_t bytes, int root, int op, zb_err *err)
{
    void *dev = NULL;
    cudaStream_t st = NULL;
    int rc = cuda_ok(cudaSetDevice(c->me.local_rank), "cudaSetDevice", err);
    if (rc == 0)
        rc = cuda_ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate",
                     err);
    if (rc == 0)
        rc = cuda_ok(cudaMalloc(&dev, bytes ? bytes : 1), "cudaMalloc", err);
    if (rc == 0)
        rc = cuda_ok(cudaMemcpyAsync(dev, buf, bytes, cudaMemcpyHostToDevice, st), "cudaMemcpy",
                     err);
    if (rc == 0)
        rc = op == 0 ? nccl_ok(ncclBroadcast(dev, dev, bytes, ncclChar, root, c->comm, st),
                               "ncclBroadcast", err)
                     : nccl_ok(ncclAllReduce(dev, dev, 1, ncclInt32, ncclMin, c->comm, st),
                               "ncclAllReduce", err);
    if (rc == 0)
        rc = cuda_ok(cudaMemcpyAsync(buf, dev, bytes, cudaMemcpyDeviceToHost, st), "cudaMemcpy",
                     err);
    if (rc == 0)
        rc = cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize", err);
    if (dev)
        cudaFree(dev);
    if (st)
        cudaStreamDestroy(st);
    return rc;
}

int gpu_comm_bcast_host(gpu_comm *c, void *buf, size_t bytes, int root, zb_err *err)
{
    return host_collective(c, buf, bytes, root, 0, err);
}

int gpu_comm_min_int(gpu_comm *c, int *v, zb_err *err)
{
    _Static_assert(sizeof(int) == 4, "ncclInt32 is an int");
    return host_collective(c, v, sizeof *v, 0, 1, err);
}

#else /* no NCCL in this build */

struct gpu_comm {
    int unused; /* never created */
};

int gpu_nccl_available(void) { return 0; }

int gpu_comm_create(const gpu_rank_info *r, int timeout_s, gpu_comm **out, zb_err *err)
{
    (void)r;
    (void)timeout_s;
    (void)out;
    return zb_fail(err, "multi-GPU transport: built without NCCL (set -Dnccl_dir)");
}

int gpu_nccl_unique_id(unsigned char id[GPU_NCCL_ID_BYTES], zb_err *err)
{
    (void)id;
    return zb_fail(err, "multi-GPU transport: built without NCCL (set -Dnccl_dir)");
}

int gpu_comm_create_from_id(const gpu_rank_info *r, const unsigned char id[GPU_NCCL_ID_BYTES],
                            gpu_comm **out, zb_err *err)
{
    (void)r;
    (void)id;
    (void)out;
    return zb_fail(err, "multi-GPU transport: built without NCCL (set -Dnccl_dir)");
}

void gpu_comm_free(gpu_comm *c) { free(c); }

int gpu_comm_exchange(gpu_comm *c, zb_cuda *s, const gpu_msg *sends, int n_sends,
                      const gpu_msg *recvs, int n_recvs, zb_err *err)
{
    (void)c; (void)s; (void)sends; (void)n_sends; (void)recvs; (void)n_recvs;
    return zb_fail(err, "multi-GPU transport: built without NCCL");
}

int gpu_comm_allreduce_sum(gpu_comm *c, zb_cuda *s, float *buf, size_t n, zb_err *err)
{
    (void)c; (void)s; (void)buf; (void)n;
    return zb_fail(err, "multi-GPU transport: built without NCCL");
}

int gpu_comm_allreduce_sum_f64(gpu_comm *c, zb_cuda *s, double *buf, size_t n, zb_err *err)
{
    (void)c; (void)s; (void)buf; (void)n;
    return zb_fail(err, "multi-GPU transport: built without NCCL");
}

int gpu_comm_rank(const gpu_comm *c) { (void)c; return 0; }
int gpu_comm_size(const gpu_comm *c) { (void)c; return 1; }

void *gpu_comm_nccl(gpu_comm *c) { (void)c; return NULL; }

int gpu_comm_bcast_host(gpu_comm *c, void *buf, size_t bytes, int root, zb_err *err)
{
    (void)c; (void)buf; (void)bytes; (void)root;
    return zb_fail(err, "multi-GPU transport: built without NCCL");
}

int gpu_comm_min_int(gpu_comm *c, int *v, zb_err *err)
{
    (void)c; (void)v;
    return zb_fail(err, "multi-GPU transport: built without NCCL");
}

#endif
