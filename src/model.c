/*
 * model.c: model and GPU presets, and their JSON form (model.h).
 *
 * Presets are a static table; a JSON file uses the struct's field names and
 * may start from a preset ("base"), so that "llama3-8b with seq_len 4096"
 * is a three-line file.  Unknown keys are refused because a misspelt field
 * would otherwise silently keep its default.  Every figure in the tables is
 * sourced in docs/cost-model.md.  Workload: one or two loads per command.
 */
#include "src/model.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "src/input.h"
#include "src/sched_io.h"

/* Megatron pads GPT-2's 50257 tokens to a multiple of 128 (tensor parallel
 * size 1): 50304. */
#define GPT_VOCAB_PADDED 50304
#define LLAMA3_VOCAB 128256

static const zb_model model_presets[] = {
    /* Zero-bubble paper, Table 3: GPT-style 4h FFN, learned positions
     * (rope_theta 0), Megatron's default tied embedding, seq 1024, the
     * paper's micro-batch sizes. */
    { "1.5B", 22, 2304, 24, 24, 4 * 2304, GPT_VOCAB_PADDED, 1024, 6, 0, 1, 0, ZB_BF16, { 0 } },
    { "6.2B", 30, 4096, 32, 32, 4 * 4096, GPT_VOCAB_PADDED, 1024, 3, 0, 1, 0, ZB_BF16, { 0 } },
    { "14.6B", 46, 5120, 40, 40, 4 * 5120, GPT_VOCAB_PADDED, 1024, 1, 0, 1, 0, ZB_BF16, { 0 } },
    { "28.3B", 62, 6144, 48, 48, 4 * 6144, GPT_VOCAB_PADDED, 1024, 1, 0, 1, 0, ZB_BF16, { 0 } },
    /* Meta Llama 3 (config.json of Meta-Llama-3-8B / -70B). */
    { "llama3-8b", 32, 4096, 32, 8, 14336, LLAMA3_VOCAB, 8192, 1, 1, 0, 500000, ZB_BF16, { 0 } },
    { "llama3-70b", 80, 8192, 64, 8, 28672, LLAMA3_VOCAB, 8192, 1, 1, 0, 500000, ZB_BF16, { 0 } },
    /* Llama 3.1 405B (config.json of Meta-Llama-3.1-405B: 126 layers,
     * hidden 16384, 128 heads, 8 KV heads, intermediate 53248); seq 8192
     * as Meta's pre-training (the 128k context came later). */
    { "llama3-405b", 126, 16384, 128, 8, 53248, LLAMA3_VOCAB, 8192, 1, 1, 0, 500000, ZB_BF16, { 0 } },
    /* INTELLECT-1 (PrimeIntellect-ai/prime: llama3_configs["10B"],
     * configs/10B/H100_intellect1.toml): Llama-3 shape with 42 layers;
     * FFN 4096*8/3*1.3 rounded up to a multiple of 1024 = 14336. */
    { "intellect-1-10b", 42, 4096, 32, 8, 14336, LLAMA3_VOCAB, 8192, 1, 1, 0, 500000, ZB_BF16, { 0 } },
    /* The runtime's own small Llama-style models on tinyshakespeare
     * (65 characters).  SwiGLU with d_ff = 4*d_model, untied head so that
     * the embedding and the head live on different pipeline stages. */
    { "tiny", 4, 64, 4, 4, 256, 65, 64, 4, 1, 0, 10000, ZB_FP32, { 0 } },
    { "shakespeare-char", 6, 384, 6, 6, 1536, 65, 256, 16, 1, 0, 10000, ZB_BF16, { 0 } },
    /* tiny with a product-key memory layer in place of layer 2's FFN:
     * 64² = 4096 slots of 64 floats, 2 heads of k_dim 32, top-8
     * (docs/memory-layers.md). */
    { "tiny-mem", 4, 64, 4, 4, 256, 65, 64, 4, 1, 0, 10000, ZB_FP32,
      { 1, { 2 }, 64, 8, 2, 32, 64, 0 } },
};

/* Peak dense bf16 FLOP/s and memory from the vendors' datasheets, memory as
 * nvidia-smi (rocm-smi for AMD) reports it (MiB * 2^20); link = bandwidth
 * per direction between two GPUs of one node (A100: bandwidth and latency
 * fitted to the zero-bubble paper's measured T_comm, Table 9); F/B and W
 * efficiency for A100 and H100-80G fitted as below, the others assumed; HBM
 * bandwidth from the datasheets; GPUs per NVLink domain and inter-node
 * bandwidth per GPU (docs/cost-model.md has each source).
 * The last two figures price layouts (docs/cost-model.md, "Layouts"): the
 * collective bus bandwidth inside the NVLink domain for tensor and context
 * parallelism (assumed: about three quarters of NVLink's 300 GB/s each way
 * on A100 and 450 on Hopper, what NCCL's ring all-reduce is commonly
 * reported to reach; 0 where there is no NVLink domain: link_bw), and the
 * host link each way for activation offload (PCIe Gen4 x16 on A100 and
 * L40S, Gen5 on Hopper and MI300X, at about 0.8 of the 32 and 64 GB/s
 * peaks; assumed).
 *
 * Calibration against Megatron-LM's measured runs (issue 27,
 * bench/bench_calibration.c on bench/calibration/megatron_runs.csv:
 * Korthikanti et al. 2022 Table 3, Narayanan et al. 2021 Table 1; and on
 * bench/calibration/megatron_h100_runs.csv; layouts fixed).  The presets
 * keep the efficiencies as fitted (tests/solver/test_calibration.c checks
 * that they equal a fresh fit).  What is fitted and what is datasheet:
 * - A100 F/B efficiency 0.672: FITTED (golden-section search over the
 *   summed squared log error) on five of Narayanan's rows; the other nine
 *   rows are held out and every row is within 7.1%.  It prices the GEMMs
 *   alone: the memory-bound kernels between them (norms, residual joins,
 *   GeLU, softmax and dropout) are timed at hbm_bw (src/cost_parts.c),
 *   which the earlier 0.55 had absorbed.
 * - A100 W efficiency 0.78: measured on the zero-bubble paper's Table 9
 *   T_W (W has no memory-bound term, so the new term leaves it as it was).
 * - hbm_bw of every preset: DATASHEET (A100 80 GB 2.039 TB/s, 40 GB 1.555,
 *   H100 SXM 3.35, ...); the memory-bound term has no fitted constant.
 * - H100-80G F/B efficiency 0.445: FITTED (the same golden-section
 *   search) on two rows of the Megatron-LM README's Megatron-Core r0.8.0
 *   H100 weak-scaling table (bench/calibration/megatron_h100_runs.csv:
 *   7.1B tp2 and 32B tp8, pp 1); the held-out 16B row is within 5.5%.
 *   The table's pp > 1 rows are reported, not scored (their interleaving
 *   is unpublished), as is 1.7B at tp 1 (bench/README.md has why).
 *   W 0.517: F/B times A100's measured W over F/B (0.78/0.672), since no
 *   Hopper measurement splits W from F and B.  Both price the runs'
 *   GEMMs as they ran, sharing SMs with --tp-comm-overlap's collectives,
 *   on parts assumed 700 W SXM; that may be why they sit below what a
 *   lone bf16 GEMM reaches on an H100 (not measured here).  The other
 *   presets that take H100's efficiencies (H100-94G, H200, H20, L40S,
 *   MI300X) take these, ASSUMED for them.
 * A100-40G keeps A100-80G's efficiencies (same chip). */
static const zb_gpu gpu_presets[] = {
    { "A100-80G", 312e12, 81920.0 * 1048576.0, 80e9, 250e-6, 0.672, 0.78, 2.039e12, 8, 25e9, 0, 0, 230e9, 25e9 },
    /* A100 SXM4 40GB datasheet: 312 TFLOP/s bf16 dense, 1,555 GB/s HBM2,
     * NVLink 3 600 GB/s (300 each way); nvidia-smi: 40960 MiB.  Same chip
     * and NVLink as A100-80G, so its calibrated link, latency and
     * efficiencies are kept; 8 per HGX node, 200 Gb/s HDR per GPU. */
    { "A100-40G", 312e12, 40960.0 * 1048576.0, 80e9, 250e-6, 0.672, 0.78, 1.555e12, 8, 25e9, 0, 0, 230e9, 25e9 },
    { "H100-80G", 989e12, 81559.0 * 1048576.0, 450e9, 10e-6, 0.445, 0.517, 3.35e12, 8, 50e9, 0, 0, 370e9, 50e9 },
    /* H100 NVL (PCIe card, 94 GB) datasheet: bf16 1,671 TFLOP/s with
     * sparsity = 835.5 dense, 3.9 TB/s HBM3, NVLink bridge 600 GB/s (300
     * each way) between the 2 GPUs of a bridged pair; nvidia-smi:
     * 95830 MiB.  The NVLink domain is the pair (gpus_per_node 2); beyond
     * it PCIe Gen5 x16 (64 GB/s each way) or a 400 Gb/s NIC per GPU
     * (50 GB/s), the lower taken.  Efficiencies as H100-80G (assumed). */
    { "H100-94G", 835.5e12, 95830.0 * 1048576.0, 300e9, 10e-6, 0.445, 0.517, 3.9e12, 2, 50e9, 0, 0, 0, 50e9 },
    { "H200-141G", 989e12, 143771.0 * 1048576.0, 450e9, 10e-6, 0.445, 0.517, 4.8e12, 8, 50e9, 0, 0, 370e9, 50e9 },
    /* H20 (HGX H20, NVIDIA's product brief as partners publish it): bf16
     * 148 TFLOP/s dense, 96 GB HBM3 at 4.0 TB/s, NVLink 4 900 GB/s (450
     * each way), 8 per HGX board; nvidia-smi: 97871 MiB.  Efficiencies
     * and 400 Gb/s per GPU between nodes as H100-80G (assumed). */
    { "H20", 148e12, 97871.0 * 1048576.0, 450e9, 10e-6, 0.445, 0.517, 4.0e12, 8, 50e9, 0, 0, 370e9, 50e9 },
    /* L40S datasheet: bf16 362.05 TFLOP/s dense (733 with sparsity), 48 GB
     * GDDR6 at 864 GB/s, no NVLink: PCIe Gen4 x16, 64 GB/s (32 each way);
     * nvidia-smi: 46068 MiB.  8 per PCIe server; 200 Gb/s per GPU between
     * nodes and H100-80G's efficiencies (the nearest preset: fourth-
     * generation tensor cores, as Hopper's), both assumed. */
    { "L40S", 362.05e12, 46068.0 * 1048576.0, 32e9, 10e-6, 0.445, 0.517, 0.864e12, 8, 25e9, 0, 0, 0, 25e9 },
    /* AMD Instinct MI300X datasheet: bf16 1,307.4 TFLOP/s dense, 192 GB
     * HBM3 at 5.3 TB/s, 7 Infinity Fabric links of 128 GB/s (64 each way)
     * on an 8-GPU fully connected platform: one link joins two GPUs, so
     * 64 GB/s between pipeline neighbours; rocm-smi: 206141652992 bytes.
     * 400 Gb/s per GPU between nodes and H100-80G's efficiencies and
     * latency (assumed). */
    { "MI300X", 1307.4e12, 206141652992.0, 64e9, 10e-6, 0.445, 0.517, 5.3e12, 8, 50e9, 0, 0, 0, 50e9 },
};

#define N_MODEL_PRESETS (int)(sizeof model_presets / sizeof model_presets[0])
#define N_GPU_PRESETS (int)(sizeof gpu_presets / sizeof gpu_presets[0])

int zb_dtype_bytes(zb_dtype d)
{
    return d == ZB_FP32 ? 4 : 2;
}

const char *zb_dtype_name(zb_dtype d)
{
    switch (d) {
    case ZB_FP32: return "fp32";
    case ZB_BF16: return "bf16";
    case ZB_FP16: return "fp16";
    }
    return "?";
}

int zb_dtype_parse(const char *name)
{
    if (!strcasecmp(name, "fp32") || !strcasecmp(name, "float32"))
        return ZB_FP32;
    if (!strcasecmp(name, "bf16") || !strcasecmp(name, "bfloat16"))
        return ZB_BF16;
    if (!strcasecmp(name, "fp16") || !strcasecmp(name, "float16"))
        return ZB_FP16;
    return -1;
}

void model_preset_names(char *buf, int len)
{
    int off = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_MODEL_PRESETS && off < len; i++)
        off += snprintf(buf + off, (size_t)(len - off), "%s%s", i ? ", " : "", model_presets[i].name);
}

void gpu_preset_names(char *buf, int len)
{
    int off = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_GPU_PRESETS && off < len; i++)
        off += snprintf(buf + off, (size_t)(len - off), "%s%s", i ? ", " : "", gpu_presets[i].name);
}

int model_preset(const char *name, zb_model *m, zb_err *err)
{
    for (int i = 0; i < N_MODEL_PRESETS; i++)
        if (!strcasecmp(name, model_presets[i].name)) {
            *m = model_presets[i];
            return 0;
        }
    char names[256], quoted[48 * 4 + 1];
    model_preset_names(names, sizeof names);
    size_t n = strlen(name);
    zb_escape_bytes(quoted, sizeof quoted, name, n > 48 ? 48 : n);
    return zb_fail(err, "unknown model '%s' (presets: %s; or a JSON file)", quoted, names);
}

int gpu_preset(const char *name, zb_gpu *g, zb_err *err)
{
    for (int i = 0; i < N_GPU_PRESETS; i++)
        if (!strcasecmp(name, gpu_presets[i].name)) {
            *g = gpu_presets[i];
            return 0;
        }
    char names[256], quoted[48 * 4 + 1];
    gpu_preset_names(names, sizeof names);
    size_t n = strlen(name);
    zb_escape_bytes(quoted, sizeof quoted, name, n > 48 ? 48 : n);
    return zb_fail(err, "unknown GPU '%s' (presets: %s; or a JSON file)", quoted, names);
}

int model_check(const zb_model *m, zb_err *err)
{
    if (m->n_layers <= 0)
        return zb_fail(err, "model '%s': n_layers must be positive", m->name);
    if (m->d_model <= 0)
        return zb_fail(err, "model '%s': d_model must be positive", m->name);
    if (m->n_heads <= 0 || m->d_model % m->n_heads != 0)
        return zb_fail(err, "model '%s': n_heads must be positive and divide d_model (%d)", m->name, m->d_model);
    if (m->n_kv_heads <= 0 || m->n_heads % m->n_kv_heads != 0)
        return zb_fail(err, "model '%s': n_kv_heads must be positive and divide n_heads (%d)", m->name, m->n_heads);
    if (m->d_ff <= 0)
        return zb_fail(err, "model '%s': d_ff must be positive", m->name);
    if (m->vocab <= 0)
        return zb_fail(err, "model '%s': vocab must be positive", m->name);
    if (m->seq_len <= 0)
        return zb_fail(err, "model '%s': seq_len must be positive", m->name);
    if (m->micro_batch <= 0)
        return zb_fail(err, "model '%s': micro_batch must be positive", m->name);
    if (m->swiglu != 0 && m->swiglu != 1)
        return zb_fail(err, "model '%s': swiglu must be 0 or 1", m->name);
    if (m->tied_embedding != 0 && m->tied_embedding != 1)
        return zb_fail(err, "model '%s': tied_embedding must be 0 or 1", m->name);
    if (!(m->rope_theta >= 0) || !isfinite(m->rope_theta))
        return zb_fail(err, "model '%s': rope_theta must be >= 0 (0 = learned positions)", m->name);
    if (m->dtype != ZB_FP32 && m->dtype != ZB_BF16 && m->dtype != ZB_FP16)
        return zb_fail(err, "model '%s': unknown dtype", m->name);
    if (model_memory_check(m, err) < 0)
        return -1;
    /* Products used by the cost model must stay far from overflow. */
    double tokens = (double)m->seq_len * m->micro_batch;
    if ((double)m->d_model * m->d_ff > 1e12 || (double)m->vocab * m->d_model > 1e13 || tokens > 1e9)
        return zb_fail(err, "model '%s': sizes are implausibly large", m->name);
    return 0;
}

/* Plausible ranges of a GPU's figures, each named in its own message.
 * They are wide (a laptop GPU to a future rack-scale part) but keep a
 * typo such as efficiency 1e-300 from turning into a 300-digit time. */
static const struct gpu_range {
    const char *field; /* JSON key */
    size_t off;        /* offset in zb_gpu */
    double min, max;   /* closed range */
    int zero_ok;       /* 0 is also accepted (the field's derived default) */
    const char *unit;  /* for the message */
} gpu_ranges[] = {
    { "peak_flops", offsetof(zb_gpu, peak_flops), 1e9, 1e18, 0, "FLOP/s" },
    { "mem_bytes", offsetof(zb_gpu, mem_bytes), 1e6, 1e15, 0, "bytes" },
    { "link_bw", offsetof(zb_gpu, link_bw), 1e6, 1e14, 0, "bytes/s" },
    { "link_latency", offsetof(zb_gpu, link_latency), 0, 1, 0, "s" },
    { "efficiency", offsetof(zb_gpu, efficiency), 0.01, 1, 0, "of peak" },
    { "w_efficiency", offsetof(zb_gpu, w_efficiency), 0.01, 1, 1, "of peak" },
    { "hbm_bw", offsetof(zb_gpu, hbm_bw), 1e6, 1e15, 1, "bytes/s" },
    { "inter_node_bw", offsetof(zb_gpu, inter_node_bw), 1e6, 1e14, 1, "bytes/s" },
    { "inter_node_latency", offsetof(zb_gpu, inter_node_latency), 0, 1, 1, "s" },
    { "tp_bw", offsetof(zb_gpu, tp_bw), 1e6, 1e14, 1, "bytes/s" },
    { "pcie_bw", offsetof(zb_gpu, pcie_bw), 1e6, 1e14, 1, "bytes/s" },
};

int gpu_check(const zb_gpu *g, zb_err *err)
{
    for (size_t i = 0; i < sizeof gpu_ranges / sizeof gpu_ranges[0]; i++) {
        const struct gpu_range *r = &gpu_ranges[i];
        double v = *(const double *)((const char *)g + r->off);
        if (!(v >= r->min && v <= r->max) && !(r->zero_ok && v == 0))
            return zb_fail(err, "\"%s\" is %g, not in %g..%g %s%s", r->field, v, r->min, r->max, r->unit,
                           r->zero_ok ? " (or 0 for the default)" : "");
    }
    return 0;
}

/* --- JSON ---------------------------------------------------------------- */

/* Reads an integer field when present: whole, within [min, max]. */
static int json_int(const cJSON *obj, const char *key, int min, int max, int *out, int *seen, zb_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it)
        return 0;
    if (cJSON_IsBool(it)) {
        /* true/false only for the 0/1 switches (swiglu, tied_embedding):
         * "n_layers": true is a mistake, not 1. */
        if (min != 0 || max != 1)
            return zb_fail(err, "\"%s\" must be a whole number, not true/false", key);
        *out = cJSON_IsTrue(it);
    } else {
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble))
            return zb_fail(err, "\"%s\" must be a whole number", key);
        if (it->valuedouble < min || it->valuedouble > max)
            return zb_fail(err, "\"%s\" is out of range (%d..%d)", key, min, max);
        *out = (int)it->valuedouble;
    }
    if (seen)
        (*seen)++;
    return 0;
}

static int json_double(const cJSON *obj, const char *key, double min, double *out, zb_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it)
        return 0;
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < min)
        return zb_fail(err, "\"%s\" must be a number >= %g", key, min);
    *out = it->valuedouble;
    return 0;
}

/* Refuses unknown keys and keys given twice (cJSON keeps both; a lookup
 * would silently use the first). */
static int json_known_keys(const cJSON *obj, const char *const *keys, zb_err *err)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        int ok = 0;
        for (int i = 0; keys[i]; i++)
            if (it->string && !strcmp(it->string, keys[i]))
                ok = 1;
        if (!ok) {
            char quoted[60 * 4 + 1];
            const char *k = it->string ? it->string : "?";
            size_t n = strlen(k);
            return zb_fail(err, "unknown field \"%s\"", zb_escape_bytes(quoted, sizeof quoted, k, n > 60 ? 60 : n));
        }
        for (const cJSON *prev = obj->child; prev != it; prev = prev->next)
            if (!strcmp(prev->string, it->string))
                return zb_fail(err, "field \"%s\" appears twice", it->string);
    }
    return 0;
}

static int json_name(const cJSON *obj, char *dst, size_t cap, zb_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, "name");
    if (!it)
        return 0;
    if (!cJSON_IsString(it) || strlen(it->valuestring) >= cap || !it->valuestring[0])
        return zb_fail(err, "\"name\" must be a string of 1..%zu characters", cap - 1);
    strcpy(dst, it->valuestring);
    return 0;
}

int model_from_json(const cJSON *obj, zb_model *m, zb_err *err)
{
    static const char *const keys[] = {
        "base", "name", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab", "seq_len",
        "micro_batch", "swiglu", "tied_embedding", "rope_theta", "dtype", "memory", NULL
    };
    if (!cJSON_IsObject(obj))
        return zb_fail(err, "a model must be a JSON object");
    if (json_known_keys(obj, keys, err) < 0)
        return -1;
    zb_model r;
    memset(&r, 0, sizeof r);
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(obj, "base");
    if (base) {
        if (!cJSON_IsString(base))
            return zb_fail(err, "\"base\" must be a preset name");
        if (model_preset(base->valuestring, &r, err) < 0)
            return -1;
    } else {
        strcpy(r.name, "custom");
        r.n_kv_heads = -1; /* = n_heads unless given */
        r.d_ff = -1;       /* = 4*d_model unless given */
        r.micro_batch = 1;
        r.swiglu = 1;
        r.rope_theta = 10000;
        r.dtype = ZB_BF16;
    }
    int required = 0;
    if (json_name(obj, r.name, sizeof r.name, err) < 0 ||
        json_int(obj, "n_layers", 1, 100000, &r.n_layers, &required, err) < 0 ||
        json_int(obj, "d_model", 1, 1 << 20, &r.d_model, &required, err) < 0 ||
        json_int(obj, "n_heads", 1, 1 << 16, &r.n_heads, &required, err) < 0 ||
        json_int(obj, "vocab", 1, 1 << 26, &r.vocab, &required, err) < 0 ||
        json_int(obj, "seq_len", 1, 1 << 24, &r.seq_len, &required, err) < 0 ||
        json_int(obj, "n_kv_heads", 1, 1 << 16, &r.n_kv_heads, NULL, err) < 0 ||
        json_int(obj, "d_ff", 1, 1 << 22, &r.d_ff, NULL, err) < 0 ||
        json_int(obj, "micro_batch", 1, 1 << 20, &r.micro_batch, NULL, err) < 0 ||
        json_int(obj, "swiglu", 0, 1, &r.swiglu, NULL, err) < 0 ||
        json_int(obj, "tied_embedding", 0, 1, &r.tied_embedding, NULL, err) < 0 ||
        json_double(obj, "rope_theta", 0, &r.rope_theta, err) < 0)
        return -1;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(obj, "dtype");
    if (dt) {
        int d = cJSON_IsString(dt) ? zb_dtype_parse(dt->valuestring) : -1;
        if (d < 0)
            return zb_fail(err, "\"dtype\" must be \"fp32\", \"bf16\" or \"fp16\"");
        r.dtype = (zb_dtype)d;
    }
    if (!base && required < 5)
        return zb_fail(err, "a model without \"base\" needs n_layers, d_model, n_heads, vocab and seq_len");
    if (r.n_kv_heads < 0)
        r.n_kv_heads = r.n_heads;
    if (r.d_ff < 0)
        r.d_ff = 4 * r.d_model;
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(obj, "memory");
    if (mem && model_memory_from_json(mem, &r, &r.memory, err) < 0)
        return zb_wrap(err, "\"memory\": ");
    if (model_check(&r, err) < 0)
        return -1;
    *m = r;
    return 0;
}

cJSON *model_to_json(const zb_model *m)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = cJSON_AddStringToObject(o, "name", m->name) &&
             cJSON_AddNumberToObject(o, "n_layers", m->n_layers) &&
             cJSON_AddNumberToObject(o, "d_model", m->d_model) &&
             cJSON_AddNumberToObject(o, "n_heads", m->n_heads) &&
             cJSON_AddNumberToObject(o, "n_kv_heads", m->n_kv_heads) &&
             cJSON_AddNumberToObject(o, "d_ff", m->d_ff) &&
             cJSON_AddNumberToObject(o, "vocab", m->vocab) &&
             cJSON_AddNumberToObject(o, "seq_len", m->seq_len) &&
             cJSON_AddNumberToObject(o, "micro_batch", m->micro_batch) &&
             cJSON_AddNumberToObject(o, "swiglu", m->swiglu) &&
             cJSON_AddNumberToObject(o, "tied_embedding", m->tied_embedding) &&
             cJSON_AddNumberToObject(o, "rope_theta", m->rope_theta) &&
             cJSON_AddStringToObject(o, "dtype", zb_dtype_name(m->dtype));
    if (ok && m->memory.n_layers > 0) {
        const zb_memory *mm = &m->memory;
        cJSON *mo = cJSON_AddObjectToObject(o, "memory");
        cJSON *ls = mo ? cJSON_AddArrayToObject(mo, "layers") : NULL;
        ok = ls != NULL;
        for (int i = 0; ok && i < mm->n_layers; i++) {
            cJSON *x = cJSON_CreateNumber(mm->layers[i]);
            ok = x != NULL;
            if (x)
                cJSON_AddItemToArray(ls, x);
        }
        ok = ok && cJSON_AddNumberToObject(mo, "keys", (double)mm->n_keys * mm->n_keys) &&
             cJSON_AddNumberToObject(mo, "topk", mm->topk) &&
             cJSON_AddNumberToObject(mo, "heads", mm->heads) &&
             cJSON_AddNumberToObject(mo, "k_dim", mm->k_dim) &&
             cJSON_AddNumberToObject(mo, "value_dim", mm->value_dim) &&
             cJSON_AddBoolToObject(mo, "shared", mm->shared_values);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* --- memory layers ------------------------------------------------------- */

int model_is_memory_layer(const zb_model *m, int layer)
{
    for (int i = 0; i < m->memory.n_layers; i++)
        if (m->memory.layers[i] == layer)
            return 1;
    return 0;
}

int model_memory_check(const zb_model *m, zb_err *err)
{
    const zb_memory *mm = &m->memory;
    if (mm->n_layers == 0)
        return 0;
    if (mm->n_layers < 0 || mm->n_layers > ZB_MEMORY_MAX_LAYERS)
        return zb_fail(err, "model '%s': 1..%d memory layers", m->name, ZB_MEMORY_MAX_LAYERS);
    for (int i = 0; i < mm->n_layers; i++) {
        if (mm->layers[i] < 0 || mm->layers[i] >= m->n_layers)
            return zb_fail(err, "model '%s': memory layer %d is outside the model's %d layers",
                           m->name, mm->layers[i], m->n_layers);
        if (i > 0 && mm->layers[i] <= mm->layers[i - 1])
            return zb_fail(err, "model '%s': memory layers must be distinct and ascending", m->name);
    }
    if (mm->n_keys < 1 || mm->n_keys > 65536)
        return zb_fail(err, "model '%s': memory keys must be a square of 1..65536", m->name);
    if (mm->topk < 1 || mm->topk > mm->n_keys)
        return zb_fail(err, "model '%s': memory topk must be 1..%d (the square root of keys)",
                       m->name, mm->n_keys);
    if (mm->heads < 1 || mm->heads > 64)
        return zb_fail(err, "model '%s': memory heads must be 1..64", m->name);
    if (mm->k_dim < 2 || mm->k_dim % 2 != 0 || mm->k_dim > 1 << 16)
        return zb_fail(err, "model '%s': memory k_dim must be even and 2..65536", m->name);
    if (mm->value_dim < 1 || mm->value_dim > 1 << 20)
        return zb_fail(err, "model '%s': memory value_dim must be 1..%d", m->name, 1 << 20);
    if ((double)mm->n_keys * mm->n_keys * mm->value_dim > 4e12)
        return zb_fail(err, "model '%s': the memory value table is implausibly large", m->name);
    if (mm->shared_values != 0 && mm->shared_values != 1)
        return zb_fail(err, "model '%s': memory shared must be true or false", m->name);
    return 0;
}

int model_memory_from_json(const cJSON *obj, const zb_model *m, zb_memory *mem, zb_err *err)
{
    static const char *const keys[] = {
        "layers", "keys", "topk", "heads", "k_dim", "value_dim", "shared", NULL
    };
    if (cJSON_IsNull(obj)) {
        memset(mem, 0, sizeof *mem); /* "memory": null drops a base's memory */
        return 0;
    }
    if (!cJSON_IsObject(obj))
        return zb_fail(err, "must be an object");
    if (json_known_keys(obj, keys, err) < 0)
        return -1;
    zb_memory r = m->memory;
    if (r.n_layers == 0) {
        r.heads = 2;
        r.k_dim = (m->d_model / 2) & ~1;
        if (r.k_dim < 2)
            r.k_dim = 2;
        r.value_dim = m->d_model;
        r.topk = 8;
        r.n_keys = 0;
    }
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(obj, "layers");
    if (ls) {
        if (!cJSON_IsArray(ls) || cJSON_GetArraySize(ls) < 1 ||
            cJSON_GetArraySize(ls) > ZB_MEMORY_MAX_LAYERS)
            return zb_fail(err, "\"layers\" must be an array of 1..%d layer indices",
                           ZB_MEMORY_MAX_LAYERS);
        r.n_layers = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, ls) {
            if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
                it->valuedouble < 0 || it->valuedouble > 1e6)
                return zb_fail(err, "\"layers\" must hold whole layer indices >= 0");
            r.layers[r.n_layers++] = (int)it->valuedouble;
        }
    }
    if (r.n_layers == 0)
        return zb_fail(err, "\"layers\" is required");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(obj, "keys");
    if (k) {
        if (!cJSON_IsNumber(k) || k->valuedouble != floor(k->valuedouble) ||
            k->valuedouble < 1 || k->valuedouble > 65536.0 * 65536.0)
            return zb_fail(err, "\"keys\" must be a whole number of slots, a square");
        double root = floor(sqrt(k->valuedouble) + 0.5);
        if (root * root != k->valuedouble)
            return zb_fail(err, "\"keys\" must be a perfect square (product keys: n² slots), "
                           "not %.0f", k->valuedouble);
        r.n_keys = (int)root;
    }
    if (r.n_keys == 0)
        return zb_fail(err, "\"keys\" is required");
    int shared = r.shared_values;
    if (json_int(obj, "topk", 1, 65536, &r.topk, NULL, err) < 0 ||
        json_int(obj, "heads", 1, 64, &r.heads, NULL, err) < 0 ||
        json_int(obj, "k_dim", 2, 1 << 16, &r.k_dim, NULL, err) < 0 ||
        json_int(obj, "value_dim", 1, 1 << 20, &r.value_dim, NULL, err) < 0 ||
        json_int(obj, "shared", 0, 1, &shared, NULL, err) < 0)
        return -1;
    r.shared_values = shared;
    *mem = r;
    return 0;
}

int gpu_from_json(const cJSON *obj, zb_gpu *g, zb_err *err)
{
    static const char *const keys[] = {
        "base", "name", "peak_flops", "mem_bytes", "link_bw", "link_latency", "efficiency",
        "w_efficiency", "hbm_bw", "gpus_per_node", "inter_node_bw", "inter_node_latency", "kind", "tp_bw",
        "pcie_bw", NULL
    };
    if (!cJSON_IsObject(obj))
        return zb_fail(err, "a GPU must be a JSON object");
    if (json_known_keys(obj, keys, err) < 0)
        return -1;
    zb_gpu r;
    memset(&r, 0, sizeof r);
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(obj, "base");
    if (base) {
        if (!cJSON_IsString(base))
            return zb_fail(err, "\"base\" must be a preset name");
        if (gpu_preset(base->valuestring, &r, err) < 0)
            return -1;
    } else {
        strcpy(r.name, "custom");
        r.efficiency = 0.5;
    }
    if (json_name(obj, r.name, sizeof r.name, err) < 0 ||
        json_double(obj, "peak_flops", 0, &r.peak_flops, err) < 0 ||
        json_double(obj, "mem_bytes", 0, &r.mem_bytes, err) < 0 ||
        json_double(obj, "link_bw", 0, &r.link_bw, err) < 0 ||
        json_double(obj, "link_latency", 0, &r.link_latency, err) < 0 ||
        json_double(obj, "efficiency", 0, &r.efficiency, err) < 0 ||
        json_double(obj, "w_efficiency", 0, &r.w_efficiency, err) < 0 ||
        json_double(obj, "hbm_bw", 0, &r.hbm_bw, err) < 0 ||
        json_int(obj, "gpus_per_node", 0, 1 << 16, &r.gpus_per_node, NULL, err) < 0 ||
        json_double(obj, "inter_node_bw", 0, &r.inter_node_bw, err) < 0 ||
        json_double(obj, "inter_node_latency", 0, &r.inter_node_latency, err) < 0 ||
        json_double(obj, "tp_bw", 0, &r.tp_bw, err) < 0 ||
        json_double(obj, "pcie_bw", 0, &r.pcie_bw, err) < 0)
        return -1;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(obj, "kind");
    if (kind) {
        if (!cJSON_IsString(kind) || (strcmp(kind->valuestring, "gpu") && strcmp(kind->valuestring, "cpu")))
            return zb_fail(err, "\"kind\" must be \"gpu\" or \"cpu\"");
        r.cpu = !strcmp(kind->valuestring, "cpu");
    }
    if (gpu_check(&r, err) < 0)
        return -1;
    *g = r;
    return 0;
}

cJSON *gpu_to_json(const zb_gpu *g)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = cJSON_AddStringToObject(o, "name", g->name) &&
             cJSON_AddNumberToObject(o, "peak_flops", g->peak_flops) &&
             cJSON_AddNumberToObject(o, "mem_bytes", g->mem_bytes) &&
             cJSON_AddNumberToObject(o, "link_bw", g->link_bw) &&
             cJSON_AddNumberToObject(o, "link_latency", g->link_latency) &&
             cJSON_AddNumberToObject(o, "efficiency", g->efficiency) &&
             cJSON_AddNumberToObject(o, "w_efficiency", g->w_efficiency) &&
             cJSON_AddNumberToObject(o, "hbm_bw", g->hbm_bw) &&
             cJSON_AddNumberToObject(o, "gpus_per_node", g->gpus_per_node) &&
             cJSON_AddNumberToObject(o, "inter_node_bw", g->inter_node_bw) &&
             cJSON_AddNumberToObject(o, "inter_node_latency", g->inter_node_latency) &&
             (!g->cpu || cJSON_AddStringToObject(o, "kind", "cpu")) && /* GPU files stay as they were */
             (g->tp_bw == 0 || cJSON_AddNumberToObject(o, "tp_bw", g->tp_bw)) &&
             (g->pcie_bw == 0 || cJSON_AddNumberToObject(o, "pcie_bw", g->pcie_bw));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Reads arg as a JSON file and hands the parsed object to fill. */
static int load_json_file(const char *arg, cJSON **out, zb_err *err)
{
    char *text;
    size_t len;
    if (zb_read_file(arg, &text, &len, err) < 0)
        return -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        long at = end ? (long)(end - text) : -1;
        free(text);
        return zb_fail(err, "%s: not valid JSON (near byte %ld)", arg, at);
    }
    int bad = zb_json_check_strings(text, len, err) || zb_json_check_duplicates(root, err);
    free(text);
    if (bad) {
        cJSON_Delete(root);
        return zb_wrap(err, "%s: ", arg);
    }
    *out = root;
    return 0;
}

/* A preset name is tried first; anything that exists as a file is a file. */
int model_load(const char *arg, zb_model *m, zb_err *err)
{
    if (model_preset(arg, m, NULL) == 0)
        return 0;
    if (access(arg, F_OK) != 0)
        return model_preset(arg, m, err); /* the preset list is the helpful message */
    cJSON *root;
    if (load_json_file(arg, &root, err) < 0)
        return -1;
    int rc = model_from_json(root, m, err);
    cJSON_Delete(root);
    return rc < 0 ? zb_wrap(err, "%s: ", arg) : 0;
}

/* A GPU file without "name" is called by its file's base name less a
 * ".json" suffix ("cluster/h100-ib.json" -> "h100-ib"), not by its base
 * preset's: a plan made with edited figures must not print as the preset
 * it started from.  Bytes other than letters, digits and "-_.+" become
 * '_' (a name is printed and written into schedule files); truncated to
 * fit; an empty result keeps the name gpu_from_json gave. */
static void gpu_name_from_path(const char *path, char *dst, size_t cap)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcasecmp(base + n - 5, ".json"))
        n -= 5;
    if (n == 0)
        return;
    if (n >= cap)
        n = cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)base[i];
        int ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 c == '-' || c == '_' || c == '.' || c == '+';
        dst[i] = ok ? (char)c : '_';
    }
    dst[n] = '\0';
}

int gpu_load(const char *arg, zb_gpu *g, zb_err *err)
{
    if (gpu_preset(arg, g, NULL) == 0)
        return 0;
    if (access(arg, F_OK) != 0)
        return gpu_preset(arg, g, err);
    cJSON *root;
    if (load_json_file(arg, &root, err) < 0)
        return -1;
    int rc = gpu_from_json(root, g, err);
    int named = cJSON_GetObjectItemCaseSensitive(root, "name") != NULL;
    cJSON_Delete(root);
    if (rc < 0)
        return zb_wrap(err, "%s: ", arg);
    if (!named)
        gpu_name_from_path(arg, g->name, sizeof g->name);
    return 0;
}

double gpu_w_efficiency(const zb_gpu *g)
{
    return g->w_efficiency > 0 ? g->w_efficiency : g->efficiency;
}

int gpu_per_node(const zb_gpu *g)
{
    return g->gpus_per_node > 0 ? g->gpus_per_node : 8;
}

double gpu_inter_node_bw(const zb_gpu *g)
{
    return g->inter_node_bw > 0 ? g->inter_node_bw : 50e9;
}

double gpu_inter_node_latency(const zb_gpu *g)
{
    return g->inter_node_latency > 0 ? g->inter_node_latency : g->link_latency;
}

double gpu_tp_bw(const zb_gpu *g)
{
    return g->tp_bw > 0 ? g->tp_bw : g->link_bw;
}

double gpu_pcie_bw(const zb_gpu *g)
{
    return g->pcie_bw > 0 ? g->pcie_bw : 25e9;
}
