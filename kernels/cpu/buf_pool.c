/*
 * buf_pool.c: buffers reused by exact size (buf_pool.h).
 */
#include "kernels/cpu/buf_pool.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>

#include "src/mem_ledger.h"

/* Distinct sizes a pool keeps; a stage's saved state has fewer than ten
 * (N·d, N·ff, N·q_dim, N·kv_dim, N, N·heads, N·vocab, ...), an evaluation
 * at another batch size as many again. */
enum { BUF_POOL_CLASSES = 32 };

/* The idle buffers of one size. */
typedef struct buf_class {
    size_t bytes; /* size of every buffer here (0: class unused) */
    void **idle;  /* [cap] stack of idle buffers, top at n-1 */
    int n;        /* idle buffers */
    int cap;      /* capacity of idle */
} buf_class;

struct buf_pool {
    pthread_mutex_t mu;                 /* guards everything below */
    buf_class cls[BUF_POOL_CLASSES];    /* by first use of each size */
    size_t idle_bytes;                  /* sum over the idle buffers */
    long mallocs;                       /* buffers buf_pool_get malloc'd */
    mem_ledger *ledger;                 /* charged with the buffers out (NULL: none) */
    int ledger_dev;                     /* the device they are charged to */
};

buf_pool *buf_pool_new(void)
{
    buf_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

void buf_pool_free(buf_pool *p)
{
    if (!p)
        return;
    for (int c = 0; c < BUF_POOL_CLASSES; c++) {
        for (int i = 0; i < p->cls[c].n; i++)
            free(p->cls[c].idle[i]);
        free(p->cls[c].idle);
    }
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* The class of `bytes`, creating it when `create` and a slot is free; NULL
 * when there is none.  Called with p->mu held. */
static buf_class *class_of(buf_pool *p, size_t bytes, int create)
{
    for (int c = 0; c < BUF_POOL_CLASSES; c++) {
        if (p->cls[c].bytes == bytes)
            return &p->cls[c];
        if (p->cls[c].bytes == 0) {
            if (!create)
                return NULL;
            p->cls[c].bytes = bytes;
            return &p->cls[c];
        }
    }
    return NULL;
}

void *buf_pool_get(buf_pool *p, size_t bytes)
{
    assert(bytes > 0);
    void *buf = NULL;
    pthread_mutex_lock(&p->mu);
    buf_class *k = class_of(p, bytes, 0);
    if (k && k->n > 0) {
        buf = k->idle[--k->n];
        p->idle_bytes -= bytes;
    } else
        p->mallocs++;
    mem_ledger *l = p->ledger;
    int dev = p->ledger_dev;
    pthread_mutex_unlock(&p->mu);
    if (!buf)
        buf = malloc(bytes);
    if (buf)
        mem_ledger_charge(l, dev, MEM_ACTIVATIONS, bytes);
    return buf;
}

void buf_pool_put(buf_pool *p, void *buf, size_t bytes)
{
    if (!buf)
        return;
    pthread_mutex_lock(&p->mu);
    mem_ledger_release(p->ledger, p->ledger_dev, MEM_ACTIVATIONS, bytes);
    buf_class *k = class_of(p, bytes, 1);
    if (k && k->n == k->cap) {
        int cap = k->cap ? 2 * k->cap : 16;
        void **grown = realloc(k->idle, sizeof *grown * (size_t)cap);
        if (grown) {
            k->idle = grown;
            k->cap = cap;
        }
    }
    if (k && k->n < k->cap) {
        k->idle[k->n++] = buf;
        p->idle_bytes += bytes;
        buf = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    free(buf); /* no room to keep it */
}

void buf_pool_set_ledger(buf_pool *p, mem_ledger *l, int dev)
{
    pthread_mutex_lock(&p->mu);
    p->ledger = l;
    p->ledger_dev = dev;
    pthread_mutex_unlock(&p->mu);
}

size_t buf_pool_idle_bytes(buf_pool *p)
{
    pthread_mutex_lock(&p->mu);
    size_t v = p->idle_bytes;
    pthread_mutex_unlock(&p->mu);
    return v;
}

long buf_pool_mallocs(buf_pool *p)
{
    pthread_mutex_lock(&p->mu);
    long v = p->mallocs;
    pthread_mutex_unlock(&p->mu);
    return v;
}
