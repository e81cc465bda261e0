/*
 * profile.h: measured per-op times and memory, the bridge from the runtime
 * (`zbsched profile` writes one) to the cost model (`zbsched search
 * --profile FILE` reads one instead of estimating from FLOPs).
 *
 * A profile holds averages for one micro-batch through one transformer
 * layer, through the embedding and through the LM head + loss, at the
 * micro-batch size and sequence length it was measured at.  Times are
 * seconds, memory is bytes.  The file (docs/cost-model.md, "Profile files"):
 *
 *   { "format": "zbsched-profile", "version": 1,
 *     "model": "tiny", "hardware": "H200-141G",
 *     "micro_batch": 4, "seq_len": 64, "recompute": false,
 *     "layer":     { "t_f": 1.2e-4, "t_b": 1.3e-4, "t_w": 9e-5,
 *                    "m_b": 1048576, "m_w": 786432 },
 *     "embedding": { ... same five fields ... },
 *     "head":      { ... },
 *     "t_comm": 2e-5,                      (optional)
 *     "static_bytes_per_layer": 1.2e6,     (optional)
 *     "reserve_bytes": 8e8 }               (optional)
 *
 * m_b is the activation memory one F leaves allocated (kept until B), m_w
 * what is still allocated after B (kept until W), as in the zero-bubble
 * paper's M_B and M_W.  Workload: a few files per run; tiny.
 */
#ifndef ZB_PROFILE_H
#define ZB_PROFILE_H

#include <stddef.h>

#include "src/err.h"

#define PROFILE_FORMAT_NAME "zbsched-profile"
#define PROFILE_FORMAT_VERSION 1

typedef struct profile_part {
    double t_f, t_b, t_w; /* seconds per micro-batch: forward, input grad, weight grad */
    double m_b;           /* bytes left allocated by F until B */
    double m_w;           /* bytes left allocated by B until W */
} profile_part;

typedef struct zb_profile {
    char model[48];          /* model name it was measured on (informative) */
    char hardware[32];       /* device name it was measured on (informative) */
    int micro_batch;         /* sequences per micro-batch during measurement */
    int seq_len;             /* tokens per sequence during measurement */
    int recompute;           /* 1 when measured with activation recompute */
    profile_part layer;      /* one transformer block */
    profile_part embedding;  /* token embedding (first stage) */
    profile_part head;       /* final norm + LM head + loss (last stage) */
    double t_comm;           /* seconds per stage-to-stage transfer, < 0 when not measured */
    double static_bytes_per_layer; /* weights+grads+optimizer per layer, < 0 when not measured */
    double reserve_bytes;    /* runtime overhead (context, workspace), < 0 when not measured */
} zb_profile;

/* Fills p with an empty profile: zero times, t_comm/static/reserve = -1. */
void profile_init(zb_profile *p);

/* Parses a profile document of len bytes.  Returns 0 and fills *p, or -1
 * with err naming the field (times and memory must be finite and >= 0,
 * micro_batch and seq_len positive). */
int profile_parse(const char *text, size_t len, zb_profile *p, zb_err *err);

/* Reads and parses path; errors are prefixed with the path. */
int profile_load(const char *path, zb_profile *p, zb_err *err);

/* Returns the document as a malloc'd string (caller frees), or NULL when
 * memory runs out.  profile_parse reads it back exactly. */
char *profile_to_string(const zb_profile *p);

/* Writes the document to path atomically (zb_write_atomic); the runtime's
 * `zbsched profile` calls this.  Returns 0 or -1 with err set. */
int profile_save(const zb_profile *p, const char *path, zb_err *err);

#endif
