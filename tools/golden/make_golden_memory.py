#!/usr/bin/env python3
"""make_golden_memory.py: golden tensors for models with product-key memory
layers (kernels/cpu/memory_layer.h), from an independent JAX implementation.

Run (needs `pip install jax numpy`; the build and the tests do not):

    python3 tools/golden/make_golden_memory.py tests/kernels/golden

Same file format and records as make_golden.py (whose model code this
imports: RMSNorm, RoPE, attention, head), plus one record

    memory   [n_memory_layers, layer..., slots, topk, heads, k_dim,
              value_dim, shared]

The memory block is written from the paper's description (Berges et al.,
"Memory Layers at Scale", 2024, and facebookresearch/memory's HashingMemory
with swilu_projection, no biases):

    q = n2 @ mem_query, per head halves q1, q2
    s1 = q1 . K1,  s2 = q2 . K2               jax.lax.top_k(k) of each
    k^2 sums s1[a] + s2[b]                    jax.lax.top_k(k) again
    w = softmax(selected sums)
    e = sum w * values[a * n_keys + b]        (a gather, differentiated by JAX)
    out = (silu(n2 @ mem_swilu) * e) @ mem_out

computed in float64 from float32-rounded parameters; jax.grad gives the
gradients (through the selected scores; the selection itself is constant).
"""
import os
import sys

import numpy as np
import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402

jax.config.update("jax_enable_x64", True)

CONFIGS = [
    # name, n_layers, d, heads, kv_heads, d_ff, vocab, T, B, theta, seed,
    # memory (layers, n_keys, topk, heads, k_dim, value_dim, shared)
    ("mem_l2_d16", 2, 16, 2, 2, 32, 17, 8, 2, 10000.0, 11,
     ([1], 8, 4, 2, 8, 12, 0)),
    ("memshared_l3_d16", 3, 16, 2, 1, 24, 13, 6, 2, 10000.0, 12,
     ([0, 2], 6, 3, 3, 6, 16, 1)),
]


def tensor_specs(L, d, nh, nkv, ff, V, mem):
    layers, nk, k, H, kd, v, shared = mem
    hd = d // nh
    specs = [("embedding", (V, d))]
    for l in range(L):
        specs += [
            (f"layers.{l}.attn_norm", (d,)),
            (f"layers.{l}.wq", (d, nh * hd)),
            (f"layers.{l}.wk", (d, nkv * hd)),
            (f"layers.{l}.wv", (d, nkv * hd)),
            (f"layers.{l}.wo", (nh * hd, d)),
            (f"layers.{l}.mlp_norm", (d,)),
        ]
        if l in layers:
            specs += [(f"layers.{l}.mem_query", (d, H * kd)),
                      (f"layers.{l}.mem_keys", (H * 2 * nk, kd // 2))]
            if not shared or l == layers[0]:
                specs += [(f"layers.{l}.mem_values", (nk * nk, v))]
            specs += [(f"layers.{l}.mem_swilu", (d, v)),
                      (f"layers.{l}.mem_out", (v, d))]
        else:
            specs += [
                (f"layers.{l}.w1", (d, ff)),
                (f"layers.{l}.w3", (d, ff)),
                (f"layers.{l}.w2", (ff, d)),
            ]
    specs += [("final_norm", (d,)), ("lm_head", (d, V))]
    return specs


def memory_block(p, l, n2, mem):
    layers, nk, k, H, kd, v, shared = mem
    N = n2.shape[0]
    half = kd // 2
    P = lambda name: p[f"layers.{l}.{name}"]
    values = p[f"layers.{layers[0]}.mem_values"] if shared else P("mem_values")
    q = (n2 @ P("mem_query")).reshape(N, H, kd)
    keys = P("mem_keys").reshape(H, 2, nk, half)
    s1 = jnp.einsum("nhc,hkc->nhk", q[..., :half], keys[:, 0])
    s2 = jnp.einsum("nhc,hkc->nhk", q[..., half:], keys[:, 1])
    t1, a = jax.lax.top_k(s1, k)
    t2, b = jax.lax.top_k(s2, k)
    sums = (t1[..., :, None] + t2[..., None, :]).reshape(N, H, k * k)
    best, c = jax.lax.top_k(sums, k)
    slot = (jnp.take_along_axis(a, c // k, axis=-1) * nk +
            jnp.take_along_axis(b, c % k, axis=-1))
    w = jax.nn.softmax(best, axis=-1)
    e = jnp.einsum("nhk,nhkv->nv", w, values[slot])
    u = jax.nn.silu(n2 @ P("mem_swilu")) * e
    return u @ P("mem_out"), slot


def layer(p, l, x, cfg, mem):
    """make_golden.layer with the FFN swapped for the memory block."""
    if l not in mem[0]:
        return mg.layer(p, l, x, cfg[:11])
    _, L, d, nh, nkv, ff, V, T, B, theta, _ = cfg[:11]
    hd = d // nh
    P = lambda k: p[f"layers.{l}.{k}"]
    n1 = mg.rmsnorm(x, P("attn_norm"))
    q = (n1 @ P("wq")).reshape(B, T, nh, hd)
    k = (n1 @ P("wk")).reshape(B, T, nkv, hd)
    v = (n1 @ P("wv")).reshape(B, T, nkv, hd)
    q, k = mg.rope(q, theta), mg.rope(k, theta)
    rep = nh // nkv
    k = jnp.repeat(k, rep, axis=2)
    v = jnp.repeat(v, rep, axis=2)
    s = jnp.einsum("bihc,bjhc->bhij", q, k) / jnp.sqrt(float(hd))
    mask = jnp.tril(jnp.ones((T, T), dtype=bool))
    s = jnp.where(mask[None, None], s, -jnp.inf)
    a = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhij,bjhc->bihc", a, v).reshape(B * T, nh * hd)
    h = x + o @ P("wo")
    n2 = mg.rmsnorm(h, P("mlp_norm"))
    out, _ = memory_block(p, l, n2, mem)
    return h + out


def make(cfg, outdir):
    name, L, d, nh, nkv, ff, V, T, B, theta, seed, mem = cfg
    rng = np.random.default_rng(seed)
    specs = tensor_specs(L, d, nh, nkv, ff, V, mem)
    parts = []
    for tname, shape in specs:
        if len(shape) == 1:
            parts.append(1.0 + 0.2 * rng.standard_normal(shape))
        else:
            parts.append(rng.standard_normal(shape) / np.sqrt(shape[0]))
    flat = np.concatenate([a.ravel() for a in parts]).astype(np.float32)
    flat64 = jnp.asarray(flat.astype(np.float64))
    tokens = rng.integers(0, V, size=B * T)
    targets = rng.integers(0, V, size=B * T)
    tok = jnp.asarray(tokens)
    tgt = jnp.asarray(targets)

    def stream(flatp):
        p = mg.unflatten(flatp, specs)
        xs = [p["embedding"][tok]]
        for l in range(L):
            xs.append(layer(p, l, xs[-1], cfg, mem))
        return p, xs

    def loss_fn(flatp):
        p, xs = stream(flatp)
        return mg.head_loss(p, xs[-1], tgt)

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(flat64)
    p, xs = stream(flat64)
    dacts = []
    for l in range(L + 1):
        def tail(x, l=l):
            for j in range(l, L):
                x = layer(p, j, x, cfg, mem)
            return mg.head_loss(p, x, tgt)[0]
        dacts.append(jax.grad(tail)(xs[l]))

    layers, nk, k, H, kd, v, shared = mem
    records = [
        ("config", [L, d, nh, nkv, ff, V, T, B, theta]),
        ("memory", [len(layers)] + list(layers) + [nk * nk, k, H, kd, v, shared]),
        ("tokens", tokens), ("targets", targets), ("params", flat),
        ("logits", logits), ("loss", [loss]), ("grads", grads),
        ("acts", jnp.stack(xs)), ("dacts", jnp.stack(dacts)),
    ]
    path = os.path.join(outdir, name + ".bin")
    mg.write_golden(path, records)
    print(f"{path}: {flat.size} params, loss {float(loss):.6f}, "
          f"{os.path.getsize(path)} bytes")


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/kernels/golden"
    os.makedirs(outdir, exist_ok=True)
    for cfg in CONFIGS:
        make(cfg, outdir)


if __name__ == "__main__":
    main()
