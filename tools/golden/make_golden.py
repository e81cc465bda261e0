#!/usr/bin/env python3
"""make_golden.py: golden tensors for the CPU kernels, from an independent
JAX implementation of the same Llama-style decoder.

Run (needs `pip install jax numpy`; the build and the tests do not):

    python3 tools/golden/make_golden.py tests/kernels/golden

For each configuration in CONFIGS it draws parameters and a batch of tokens
with numpy, rounds the parameters to float32, and computes in float64
(jax_enable_x64) with plain jax.numpy code and jax.grad / jax.vjp:

    tokens, targets            int  [B*T]        (stored as float32)
    params                     f32  [P]          whole-model layout of llama.h
    logits                     f32  [B*T, V]
    loss                       f32  [1]          mean cross-entropy
    grads                      f32  [P]          d loss / d params
    acts                       f32  [L+1, B*T, d] residual stream entering layer l
                                                 (index L: entering the final norm)
    dacts                      f32  [L+1, B*T, d] d loss / d acts[l]

The layout conventions are those documented in kernels/cpu/llama.h (weights
[in, out] so a linear layer is x @ W; RoPE on interleaved pairs; GQA query
head h reads KV head h // (n_heads // n_kv_heads); RMSNorm eps 1e-5 inside
the square root); everything else is written from the math, not from the C.

File format (little-endian): the 8 bytes "ZBGOLD01", then records of
  name      32 bytes, NUL-padded ASCII
  count     uint32
  data      count float32
The configuration is stored as a record "config" holding
  [n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab, seq_len, batch,
   rope_theta].
"""
import os
import struct
import sys

import numpy as np
import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

CONFIGS = [
    # name, n_layers, d, heads, kv_heads, d_ff, vocab, T, B, theta, seed
    ("mha_l2_d16", 2, 16, 2, 2, 32, 17, 8, 2, 10000.0, 1),
    ("gqa_l2_d32", 2, 32, 4, 2, 48, 17, 8, 2, 500000.0, 2),
    ("mqa_l1_d24", 1, 24, 3, 1, 40, 19, 6, 3, 10000.0, 3),
]

EPS = 1e-5


def tensor_specs(L, d, nh, nkv, ff, V):
    """(name, shape) in the llama.h whole-model layout."""
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
            (f"layers.{l}.w1", (d, ff)),
            (f"layers.{l}.w3", (d, ff)),
            (f"layers.{l}.w2", (ff, d)),
        ]
    specs += [("final_norm", (d,)), ("lm_head", (d, V))]
    return specs


def unflatten(flat, specs):
    out, off = {}, 0
    for name, shape in specs:
        n = int(np.prod(shape))
        out[name] = flat[off:off + n].reshape(shape)
        off += n
    return out


def rmsnorm(x, g):
    return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * g


def rope(x, theta):
    """x [B, T, heads, hd]: rotate pairs (2i, 2i+1) by t * theta^(-2i/hd)."""
    B, T, H, hd = x.shape
    pairs = x.reshape(B, T, H, hd // 2, 2)
    z = pairs[..., 0] + 1j * pairs[..., 1]
    inv = theta ** (-jnp.arange(0, hd, 2, dtype=jnp.float64) / hd)
    ang = jnp.arange(T, dtype=jnp.float64)[:, None] * inv[None, :]
    rot = jnp.exp(1j * ang)[None, :, None, :]
    z = z * rot
    return jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1).reshape(B, T, H, hd)


def layer(p, l, x, cfg):
    _, L, d, nh, nkv, ff, V, T, B, theta, _ = cfg
    hd = d // nh
    P = lambda k: p[f"layers.{l}.{k}"]
    n1 = rmsnorm(x, P("attn_norm"))
    q = (n1 @ P("wq")).reshape(B, T, nh, hd)
    k = (n1 @ P("wk")).reshape(B, T, nkv, hd)
    v = (n1 @ P("wv")).reshape(B, T, nkv, hd)
    q, k = rope(q, theta), rope(k, theta)
    rep = nh // nkv
    k = jnp.repeat(k, rep, axis=2)
    v = jnp.repeat(v, rep, axis=2)
    s = jnp.einsum("bihc,bjhc->bhij", q, k) / jnp.sqrt(float(hd))
    mask = jnp.tril(jnp.ones((T, T), dtype=bool))
    s = jnp.where(mask[None, None], s, -jnp.inf)
    a = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhij,bjhc->bihc", a, v).reshape(B * T, nh * hd)
    h = x + o @ P("wo")
    n2 = rmsnorm(h, P("mlp_norm"))
    return h + (jax.nn.silu(n2 @ P("w1")) * (n2 @ P("w3"))) @ P("w2")


def head_loss(p, x, targets):
    logits = rmsnorm(x, p["final_norm"]) @ p["lm_head"]
    lse = jax.scipy.special.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
    return jnp.mean(lse - picked), logits


def write_golden(path, records):
    with open(path, "wb") as f:
        f.write(b"ZBGOLD01")
        for name, arr in records:
            data = np.asarray(arr, dtype=np.float64).astype("<f4").ravel()
            nb = name.encode("ascii")
            assert len(nb) < 32
            f.write(nb + b"\0" * (32 - len(nb)))
            f.write(struct.pack("<I", data.size))
            f.write(data.tobytes())


def make(cfg, outdir):
    name, L, d, nh, nkv, ff, V, T, B, theta, seed = cfg
    rng = np.random.default_rng(seed)
    specs = tensor_specs(L, d, nh, nkv, ff, V)
    parts = []
    for tname, shape in specs:
        if len(shape) == 1:   # norm gains around 1
            parts.append(1.0 + 0.2 * rng.standard_normal(shape))
        else:                 # matrices: large enough that attention is not uniform
            parts.append(rng.standard_normal(shape) / np.sqrt(shape[0]))
    flat = np.concatenate([a.ravel() for a in parts]).astype(np.float32)
    flat64 = jnp.asarray(flat.astype(np.float64))
    tokens = rng.integers(0, V, size=B * T)
    targets = rng.integers(0, V, size=B * T)
    tok = jnp.asarray(tokens)
    tgt = jnp.asarray(targets)

    def stream(flatp):
        p = unflatten(flatp, specs)
        xs = [p["embedding"][tok]]
        for l in range(L):
            xs.append(layer(p, l, xs[-1], cfg))
        return p, xs

    def loss_fn(flatp):
        p, xs = stream(flatp)
        return head_loss(p, xs[-1], tgt)

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(flat64)
    p, xs = stream(flat64)

    # d loss / d acts[l]: run the model from stream position l onwards
    dacts = []
    for l in range(L + 1):
        def tail(x, l=l):
            for j in range(l, L):
                x = layer(p, j, x, cfg)
            return head_loss(p, x, tgt)[0]
        dacts.append(jax.grad(tail)(xs[l]))

    records = [
        ("config", [L, d, nh, nkv, ff, V, T, B, theta]),
        ("tokens", tokens), ("targets", targets), ("params", flat),
        ("logits", logits), ("loss", [loss]), ("grads", grads),
        ("acts", jnp.stack(xs)), ("dacts", jnp.stack(dacts)),
    ]
    path = os.path.join(outdir, name + ".bin")
    write_golden(path, records)
    print(f"{path}: {flat.size} params, loss {float(loss):.6f}, "
          f"{os.path.getsize(path)} bytes")


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/kernels/golden"
    os.makedirs(outdir, exist_ok=True)
    for cfg in CONFIGS:
        make(cfg, outdir)


if __name__ == "__main__":
    main()
