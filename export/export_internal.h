/*
 * export_internal.h: what the exporters of export/ share.
 *
 * export.c decides whether a format can express a plan and which files
 * it writes; each export_<engine>.c turns an accepted plan into that
 * engine's text.  The text is built in an open_memstream buffer: stdio
 * formatting without size arithmetic, one check for running out of memory
 * at the end (text_take).
 */
#ifndef ZB_EXPORT_INTERNAL_H
#define ZB_EXPORT_INTERNAL_H

#include <stdio.h>

#include "export/export.h"

/* How the virtual stages sit on the devices. */
typedef enum export_placement {
    EXPORT_PLACE_LOOPED = 0, /* stage s on device s mod p (one stage each, or interleaved) */
    EXPORT_PLACE_V = 1,      /* 2p stages, s and 2p-1-s on device s (the V shape) */
    EXPORT_PLACE_OTHER = 2,  /* anything else */
} export_placement;

export_placement export_placement_of(const sched_t *s);

/* A text being built. */
typedef struct export_text_buf {
    FILE *f;     /* open_memstream stream, NULL when it could not be opened */
    char *data;  /* the stream's buffer (valid after fclose) */
    size_t len;  /* its length */
} export_text_buf;

/* Opens b; on failure b->f is NULL and text_take reports it. */
void text_open(export_text_buf *b);

/* Closes b and returns its text (caller frees), or NULL with err set when
 * memory ran out while writing. */
char *text_take(export_text_buf *b, zb_err *err);

/* The main output of each multi-line format (export_text dispatches). */
char *export_torchtitan_text(const sched_t *s, const zb_plan *p, const char *source,
                             const char *csv_ref, zb_err *err);
char *export_megatron_text(const sched_t *s, const zb_plan *p, const char *source, zb_err *err);
char *export_pytorch_text(const sched_t *s, const zb_plan *p, const char *source,
                          const char *csv_ref, zb_err *err);

/* The torchtitan llama3 flavor with p's model's shape, or NULL. */
const char *export_torchtitan_flavor(const zb_model *m);

#endif
