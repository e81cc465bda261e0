/*
 * channel.c: one-message-per-key mailbox between device threads (channel.h).
 */
#include "runtime/channel.h"

#include <assert.h>
#include <stdlib.h>

static chan_slot *slot_of(zb_chan *ch, chan_kind kind, int stage, int mb)
{
    assert(kind >= 0 && kind < CHAN_KIND_COUNT);
    assert(stage >= 0 && stage < ch->n_stages);
    assert(mb >= 0 && mb < ch->n_micro);
    return &ch->slots[((size_t)kind * (size_t)ch->n_stages + (size_t)stage) * (size_t)ch->n_micro
                      + (size_t)mb];
}

int chan_init(zb_chan *ch, int n_stages, int n_micro)
{
    ch->n_stages = n_stages;
    ch->n_micro = n_micro;
    ch->aborted = 0;
    ch->slots = calloc((size_t)CHAN_KIND_COUNT * (size_t)n_stages * (size_t)n_micro,
                       sizeof *ch->slots);
    if (!ch->slots)
        return -1;
    pthread_mutex_init(&ch->mu, NULL);
    pthread_cond_init(&ch->cv, NULL);
    return 0;
}

void chan_reset(zb_chan *ch)
{
    size_t n = (size_t)CHAN_KIND_COUNT * (size_t)ch->n_stages * (size_t)ch->n_micro;
    for (size_t i = 0; i < n; i++) {
        free(ch->slots[i].ptr);
        ch->slots[i] = (chan_slot){ 0 };
    }
    ch->aborted = 0;
}

void chan_destroy(zb_chan *ch)
{
    if (!ch->slots)
        return;
    chan_reset(ch);
    free(ch->slots);
    ch->slots = NULL;
    pthread_mutex_destroy(&ch->mu);
    pthread_cond_destroy(&ch->cv);
}

void chan_send(zb_chan *ch, chan_kind kind, int stage, int mb, void *ptr, double val)
{
    pthread_mutex_lock(&ch->mu);
    chan_slot *s = slot_of(ch, kind, stage, mb);
    assert(!s->full && "two messages for one key in one step");
    s->ptr = ptr;
    s->val = val;
    s->full = 1;
    pthread_cond_broadcast(&ch->cv);
    pthread_mutex_unlock(&ch->mu);
}

int chan_recv(zb_chan *ch, chan_kind kind, int stage, int mb, void **ptr, double *val)
{
    pthread_mutex_lock(&ch->mu);
    chan_slot *s = slot_of(ch, kind, stage, mb);
    while (!s->full && !ch->aborted)
        pthread_cond_wait(&ch->cv, &ch->mu);
    int rc = -1;
    if (s->full) {
        /* A delivered message is taken even after an abort so that its
         * buffer is owned by someone who frees it. */
        if (ptr)
            *ptr = s->ptr;
        else
            free(s->ptr);
        if (val)
            *val = s->val;
        *s = (chan_slot){ 0 };
        rc = ch->aborted ? -1 : 0;
        if (rc != 0 && ptr) {
            free(*ptr);
            *ptr = NULL;
        }
    }
    pthread_mutex_unlock(&ch->mu);
    return rc;
}

void chan_abort(zb_chan *ch)
{
    pthread_mutex_lock(&ch->mu);
    ch->aborted = 1;
    pthread_cond_broadcast(&ch->cv);
    pthread_mutex_unlock(&ch->mu);
}
