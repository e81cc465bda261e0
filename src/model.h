/*
 * model.h: model and hardware descriptions, shared by the cost model
 * (search) and the runtime (which trains the small models for real).
 *
 * Presets are compiled in; `--model FILE` / `--gpu`-style JSON files use the
 * same field names as the struct (documented in docs/cost-model.md).
 */
#ifndef ZB_MODEL_H
#define ZB_MODEL_H

#include <cjson/cJSON.h>

#include "src/err.h"

typedef enum zb_dtype {
    ZB_FP32 = 0,
    ZB_BF16 = 1,
    ZB_FP16 = 2,
} zb_dtype;

/* Most memory layers a model may have (zb_memory.layers is a fixed array so
 * that zb_model stays a plain value that is copied freely). */
#define ZB_MEMORY_MAX_LAYERS 16

/* Product-key memory layers (Berges et al., "Memory Layers at Scale",
 * 2024): each listed layer replaces its feed-forward block by a lookup in a
 * table of slots = n_keys² values (docs/memory-layers.md).  n_layers == 0:
 * a plain model, every other field 0. */
typedef struct zb_memory {
    int n_layers;                     /* memory layers, 0..ZB_MEMORY_MAX_LAYERS */
    int layers[ZB_MEMORY_MAX_LAYERS]; /* their global layer indices, ascending */
    int n_keys;                       /* half-keys per table (√slots) */
    int topk;                         /* slots read per head, <= n_keys */
    int heads;                        /* memory read heads */
    int k_dim;                        /* query / key dimension per head, even */
    int value_dim;                    /* width of a value row */
    int shared_values;                /* 1: one value table for every memory layer */
} zb_memory;

typedef struct zb_model {
    char name[48];      /* preset name or the file's "name" */
    int n_layers;       /* transformer blocks */
    int d_model;        /* hidden size h */
    int n_heads;        /* attention heads a */
    int n_kv_heads;     /* key/value heads (== n_heads without GQA) */
    int d_ff;           /* SwiGLU inner size (GPT-style 4h models: 4*d_model) */
    int vocab;          /* vocabulary size V (char models: from the text) */
    int seq_len;        /* sequence length s */
    int micro_batch;    /* micro-batch size b (sequences) */
    int swiglu;         /* 1: SwiGLU MLP (3 matrices); 0: GPT-style 2-matrix MLP */
    int tied_embedding; /* 1 when the LM head shares the embedding matrix */
    double rope_theta;  /* rotary base (10000 for small models, 500000 for Llama 3) */
    zb_dtype dtype;     /* training dtype of weights and activations */
    zb_memory memory;   /* product-key memory layers (n_layers 0: none) */
} zb_model;

typedef struct zb_gpu {
    char name[32];         /* "H100-80G" */
    double peak_flops;     /* dense bf16 FLOP/s */
    double mem_bytes;      /* device memory, bytes */
    double link_bw;        /* bytes/s between pipeline neighbours */
    double link_latency;   /* seconds per transfer */
    double efficiency;     /* achieved fraction of peak for matmuls */
    /* --- link topology and calibration (docs/cost-model.md); 0 = derived default --- */
    double w_efficiency;   /* achieved fraction of peak for W's weight-gradient matmuls (0: efficiency) */
    double hbm_bw;         /* device memory bandwidth, bytes/s, for memory-bound ops (loss) */
    int gpus_per_node;     /* GPUs sharing the fast link (NVLink domain); 0: 8 */
    double inter_node_bw;  /* bytes/s per GPU between nodes (e.g. 50e9 for 400 Gb/s IB); 0: 50e9 */
    double inter_node_latency; /* seconds per transfer between nodes; 0: link_latency */
    int cpu;               /* 1: a CPU core or socket ("kind": "cpu" in a GPU file): called a
                            * device, and no CUDA runtime reserve is priced on it */
    double tp_bw;          /* bus bandwidth of a collective (all-reduce, reduce-scatter,
                            * all-gather) within the NVLink domain, bytes/s, for tensor and
                            * context parallelism; 0: link_bw */
    double pcie_bw;        /* host <-> device bytes/s each way, for activation offload; 0: 25e9 */
} zb_gpu;

/* Finds a model preset by name ("1.5B", "6.2B", "14.6B", "28.3B",
 * "llama3-8b", "llama3-70b", "llama3-405b", "intellect-1-10b", "tiny",
 * "shakespeare-char", "tiny-mem").
 * Returns 0 and fills *m, or -1 with err listing the presets. */
int model_preset(const char *name, zb_model *m, zb_err *err);

/* Loads a model from a preset name or, when arg names a readable file, from
 * its JSON.  Returns 0 or -1 with err set. */
int model_load(const char *arg, zb_model *m, zb_err *err);

/* Checks a model's fields (positive sizes, heads divide d_model, kv heads
 * divide heads).  Returns 0 or -1 with err naming the field. */
int model_check(const zb_model *m, zb_err *err);

/* Derived link figures of g with its defaults applied: W efficiency,
 * GPUs per node, inter-node bandwidth and latency (docs/cost-model.md). */
double gpu_w_efficiency(const zb_gpu *g);
int gpu_per_node(const zb_gpu *g);
double gpu_inter_node_bw(const zb_gpu *g);
double gpu_inter_node_latency(const zb_gpu *g);
double gpu_tp_bw(const zb_gpu *g);
double gpu_pcie_bw(const zb_gpu *g);

/* Checks a GPU's figures against plausible ranges (peak_flops 1e9..1e18,
 * mem_bytes 1e6..1e15, link_bw 1e6..1e14, link_latency 0..1 s, efficiency
 * 0.01..1; w_efficiency, hbm_bw and inter_node_bw 0 (the default) or in
 * their range, inter_node_latency 0..1 s).  Returns 0 or -1 with err
 * naming the field and its range. */
int gpu_check(const zb_gpu *g, zb_err *err);

/* Finds a GPU preset ("A100-80G", "A100-40G", "H100-80G", "H100-94G",
 * "H200-141G", "H20", "L40S", "MI300X"). */
int gpu_preset(const char *name, zb_gpu *g, zb_err *err);

/* Lists preset names, comma separated, into buf. */
void model_preset_names(char *buf, int len);
void gpu_preset_names(char *buf, int len);

/* --- Additions by the search engineer (additive; see docs/cost-model.md). --- */

/* Bytes per element of a dtype (4, 2, 2) and its name ("fp32", "bf16",
 * "fp16"); zb_dtype_parse returns the dtype or -1. */
int zb_dtype_bytes(zb_dtype d);
const char *zb_dtype_name(zb_dtype d);
int zb_dtype_parse(const char *name);

/* Fills *m from a JSON object with the struct's field names.  "base" names
 * a preset to start from; without it n_layers, d_model, n_heads, vocab and
 * seq_len are required and the rest default (n_kv_heads = n_heads,
 * d_ff = 4*d_model, micro_batch 1, swiglu 1, tied_embedding 0,
 * rope_theta 10000, dtype "bf16").  Unknown keys are refused (typos).
 * Returns 0 or -1 with err naming the field. */
int model_from_json(const cJSON *obj, zb_model *m, zb_err *err);

/* Returns a new JSON object with every field of m (caller owns it), or
 * NULL when memory runs out.  model_from_json reads it back exactly. */
cJSON *model_to_json(const zb_model *m);

/* Loads a GPU from a preset name or a JSON file with the struct's field
 * names ("base" preset optional, as for models).  Returns 0 or -1. */
int gpu_load(const char *arg, zb_gpu *g, zb_err *err);
int gpu_from_json(const cJSON *obj, zb_gpu *g, zb_err *err);
cJSON *gpu_to_json(const zb_gpu *g);

/* --- Memory layers (docs/memory-layers.md). --- */

/* 1 when global layer `layer` of m is a memory layer, else 0. */
int model_is_memory_layer(const zb_model *m, int layer);

/* Reads a model file's "memory" object into *mem ({"layers": [..],
 * "keys": slots (a perfect square), "topk", "heads", "k_dim", "value_dim",
 * "shared"}); defaults: heads 2, k_dim d_model/2 rounded to even,
 * value_dim d_model, topk 8, shared false.  Returns 0 or -1 with err. */
int model_memory_from_json(const cJSON *obj, const zb_model *m, zb_memory *mem, zb_err *err);

/* Checks m->memory against m (layers ascending and inside the model,
 * sizes positive, topk <= n_keys, k_dim even).  Returns 0 or -1. */
int model_memory_check(const zb_model *m, zb_err *err);

#endif
