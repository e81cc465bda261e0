#!/usr/bin/env python3
"""torch_layer.py: the PyTorch side of the GPU proof (bench/gpu/run.sh).

Times one training step (forward + backward, weight gradients included) of
the same Llama-style decoder layer zbsched's CUDA stage runs -- RMSNorm,
q/k/v projections with grouped KV heads, interleaved-pair RoPE, causal
attention (scaled_dot_product_attention: FlashAttention on H100/H200),
output projection with residual, RMSNorm, SwiGLU MLP with residual -- in
bf16, eager and under torch.compile, and reports the median step time,
achieved TFLOP/s (same FLOP convention as zbsched's cost model: 2 FLOPs per
multiply-add, causal attention counted at half, backward = 2x forward) and
the peak memory of the allocator.

usage: torch_layer.py D HEADS KV_HEADS FF SEQ BATCH [REPS]
prints "key value" lines; exit 0, or 1 with one line on stderr.
"""
import sys
import time


def main():
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001
        print(f"torch_layer.py: cannot import torch: {e}", file=sys.stderr)
        return 1
    if len(sys.argv) < 7:
        print(__doc__, file=sys.stderr)
        return 2
    d, nh, nkv, ff, T, B = (int(a) for a in sys.argv[1:7])
    reps = int(sys.argv[7]) if len(sys.argv) > 7 else 10
    if not torch.cuda.is_available():
        print("torch_layer.py: no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    hd = d // nh
    torch.manual_seed(0)

    def w(i, o, std=0.02):
        return (torch.randn(i, o, device=dev) * std).to(torch.bfloat16).requires_grad_()

    P = dict(g1=torch.ones(d, device=dev, dtype=torch.bfloat16, requires_grad=True),
             wq=w(d, nh * hd), wk=w(d, nkv * hd), wv=w(d, nkv * hd), wo=w(nh * hd, d),
             g2=torch.ones(d, device=dev, dtype=torch.bfloat16, requires_grad=True),
             w1=w(d, ff), w3=w(d, ff), w2=w(ff, d))
    pos = torch.arange(T, device=dev, dtype=torch.float32)
    inv = 10000.0 ** (-torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd)
    ang = torch.outer(pos, inv)  # [T, hd/2]
    cos, sin = ang.cos(), ang.sin()

    def rms(x, g):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * g

    def rope(x):  # x [B, T, H, hd], interleaved pairs
        xf = x.float().unflatten(-1, (hd // 2, 2))
        x0, x1 = xf[..., 0], xf[..., 1]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2).to(x.dtype)

    def layer(x, p):
        n1 = rms(x, p["g1"])
        q = rope((n1 @ p["wq"]).view(B, T, nh, hd)).transpose(1, 2)
        k = rope((n1 @ p["wk"]).view(B, T, nkv, hd)).transpose(1, 2)
        v = (n1 @ p["wv"]).view(B, T, nkv, hd).transpose(1, 2)
        if nkv != nh:
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + a.transpose(1, 2).reshape(B, T, nh * hd) @ p["wo"]
        n2 = rms(h, p["g2"])
        return h + (F.silu(n2 @ p["w1"]) * (n2 @ p["w3"])) @ p["w2"]

    x = torch.randn(B, T, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(B, T, d, device=dev, dtype=torch.bfloat16) * 1e-3

    N = B * T
    mm = 2 * N * (d * nh * hd + 2 * d * nkv * hd + nh * hd * d + 3 * d * ff)
    att = 2 * 2 * B * nh * T * T * hd / 2
    flops = 3 * mm + 3 * att  # F + (B + W) = 3x forward

    def bench(fn, name):
        for _ in range(3):
            fn(x, P).backward(dy)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn(x, P).backward(dy)
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        ts.sort()
        med = ts[len(ts) // 2]
        print(f"torch_{name}_step_ms {med * 1e3:.4f}")
        print(f"torch_{name}_tflops_step {flops / med / 1e12:.1f}")
        print(f"torch_{name}_peak_bytes {torch.cuda.max_memory_allocated()}")

    print(f"torch_version {torch.__version__}")
    print(f"torch_shape d={d} heads={nh} kv={nkv} ff={ff} seq={T} batch={B}")
    bench(layer, "eager")
    try:
        bench(torch.compile(layer), "compile")
    except Exception as e:  # noqa: BLE001
        print(f"torch_layer.py: torch.compile failed: {str(e).splitlines()[0][:200]}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
