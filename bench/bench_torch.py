#!/usr/bin/env python3
"""bench_torch.py: training tokens/s of zbsched's CPU executor against
PyTorch eager on the same model, batch and thread count.

For each model preset (tiny, shakespeare-char) it measures:

  * `zbsched run` of a one-device 1F1B schedule with --threads 1 and with
    --threads ALL (every CPU this process may use);
  * PyTorch eager, same architecture (Llama-style: RMSNorm, interleaved
    RoPE, causal attention through scaled_dot_product_attention, SwiGLU,
    untied head), same micro-batches (m micro-batches of B sequences of T
    tokens accumulated into one step), AdamW + global-norm clip 1.0, with
    torch.set_num_threads(1) and (ALL);
  * `zbsched run` of a two-device 1F1B schedule with --threads ALL/2.

Steady-state tokens/s: the median over the steps after the first (zbsched's
progress lines on stderr give each step's tokens/s; PyTorch steps are timed
one by one with perf_counter).  tokens/CPU-s: the tokens of steps 2..N over
the CPU time (user + system, every thread) they took; for zbsched, the CPU
of a 1-step run (start-up, first step, final evaluation) is subtracted from
the N-step run's.  On a shared machine it is the figure least disturbed by
other jobs.  PyTorch comes from PyPI when installed; the
script still measures zbsched without it.  Never run by the tests.

usage: bench/bench_torch.py [--zbsched build/zbsched] [--steps N]
                            [--models tiny,shakespeare-char] [--batch-size B] [--micro M]
"""
import argparse
import os
import resource
import re
import statistics
import subprocess
import sys
import tempfile
import time

# Mirrors src/model.c's presets (vocab: the 65 characters of tinyshakespeare).
MODELS = {
    "tiny": dict(layers=4, d=64, heads=4, kv=4, ff=256, vocab=65, T=64, B=4),
    "shakespeare-char": dict(layers=6, d=384, heads=6, kv=6, ff=1536, vocab=65, T=256, B=16),
}
DATA = "../shared/data/tinyshakespeare.txt"


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def zbsched_run(zb, sched, model, threads, steps, batch):
    """One `zbsched run`: its stderr and the CPU seconds it used."""
    cmd = [zb, "run", sched, "--model", model, "--steps", str(steps), "--threads", str(threads),
           "--data", DATA, "--eval-windows", "1"]
    if batch:
        cmd += ["--batch-size", str(batch)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit("zbsched failed: " + r.stderr.strip())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return r.stderr, cpu


def zbsched_tps(zb, model, p, m, threads, steps, batch):
    """Median steady-state tokens/s of `zbsched run` (steps after the first)
    and tokens per CPU-second of steps 2..N: the CPU of a 1-step run
    (start-up, first step, the final evaluation) subtracted from an N-step
    run's."""
    with tempfile.TemporaryDirectory() as tmp:
        sched = os.path.join(tmp, "s.json")
        subprocess.run([zb, "gen", "1f1b", "-p", str(p), "-m", str(m), "-o", sched], check=True)
        err, cpu_n = zbsched_run(zb, sched, model, threads, steps, batch)
        _, cpu_1 = zbsched_run(zb, sched, model, threads, 1, batch)
        tps = [float(x) for x in re.findall(r"^step \d+/\d+: loss \S+\s+(\S+) tok/s", err, re.M)]
        b, t = re.search(r"batch (\d+) x (\d+) tokens", err).groups()
        tokens = float(b) * float(t) * m * (steps - 1)
        return statistics.median(tps[1:] if len(tps) > 1 else tps), tokens / max(cpu_n - cpu_1, 1e-9)


def torch_tps(cfg, m, threads, steps, batch):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    d, H, KV, ff, V, T = cfg["d"], cfg["heads"], cfg["kv"], cfg["ff"], cfg["vocab"], cfg["T"]
    B = batch or cfg["B"]
    hd = d // H

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.g

    pos = torch.arange(T, dtype=torch.float32)
    inv = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    rot = torch.polar(torch.ones(T, hd // 2), torch.outer(pos, inv))  # [T, hd/2]

    def rope(x):  # x [B, T, h, hd], interleaved pairs
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], hd // 2, 2))
        return torch.view_as_real(xc * rot[None, :, None, :]).flatten(-2)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = RMSNorm(), RMSNorm()
            self.wq = nn.Linear(d, H * hd, bias=False)
            self.wk = nn.Linear(d, KV * hd, bias=False)
            self.wv = nn.Linear(d, KV * hd, bias=False)
            self.wo = nn.Linear(H * hd, d, bias=False)
            self.w1 = nn.Linear(d, ff, bias=False)
            self.w3 = nn.Linear(d, ff, bias=False)
            self.w2 = nn.Linear(ff, d, bias=False)

        def forward(self, x):
            n = self.n1(x)
            q = rope(self.wq(n).view(B, T, H, hd)).transpose(1, 2)
            k = rope(self.wk(n).view(B, T, KV, hd)).transpose(1, 2)
            v = self.wv(n).view(B, T, KV, hd).transpose(1, 2)
            if KV != H:
                k = k.repeat_interleave(H // KV, dim=1)
                v = v.repeat_interleave(H // KV, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.wo(a.transpose(1, 2).reshape(B, T, H * hd))
            n = self.n2(x)
            return x + self.w2(F.silu(self.w1(n)) * self.w3(n))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(V, d)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["layers"]))
            self.nf = RMSNorm()
            self.head = nn.Linear(d, V, bias=False)

        def forward(self, x, y):
            h = self.emb(x)
            for blk in self.blocks:
                h = blk(h)
            return F.cross_entropy(self.head(self.nf(h)).view(-1, V), y.view(-1))

    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    g = torch.Generator().manual_seed(1)
    xs = torch.randint(0, V, (m, B, T), generator=g)
    ys = torch.randint(0, V, (m, B, T), generator=g)
    times = []
    for k in range(steps):
        if k == 1:
            cpu0 = time.process_time()  # steps 2..N, as for zbsched
        t0 = time.perf_counter()
        for j in range(m):
            (model(xs[j], ys[j]) / m).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    tps = [m * B * T / t for t in times]
    return statistics.median(tps[1:] if len(tps) > 1 else tps), m * B * T * (steps - 1) / cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zbsched", default="build/zbsched")
    ap.add_argument("--steps", type=int, default=6, help="steps per run (>= 2)")
    ap.add_argument("--micro", type=int, default=4, help="micro-batches per step (m)")
    ap.add_argument("--batch-size", type=int, default=0, help="sequences per micro-batch (0: preset)")
    ap.add_argument("--models", default="tiny,shakespeare-char")
    a = ap.parse_args()
    try:
        import torch
        have_torch = True
        torch_version = torch.__version__
    except ImportError:
        have_torch = False
        torch_version = "not installed"
    n = cores()
    print("cores %d, PyTorch %s, %d steps (median of steps 2..%d), m=%d" %
          (n, torch_version, a.steps, a.steps, a.micro))
    for name in a.models.split(","):
        cfg = MODELS[name]
        B = a.batch_size or cfg["B"]
        print("\n%s: %d layers, d=%d, batch %d x %d tokens, m=%d (%d tokens/step)" %
              (name, cfg["layers"], cfg["d"], B, cfg["T"], a.micro, a.micro * B * cfg["T"]))
        print("  %-44s %10s %16s" % ("configuration", "tokens/s", "tokens/CPU-s"))
        rows = []
        for threads in sorted({1, n}):
            z = zbsched_tps(a.zbsched, name, 1, a.micro, threads, a.steps, a.batch_size)
            rows.append(("zbsched, 1 device, %d thread%s" % (threads, "s" if threads > 1 else ""), z))
            if have_torch:
                t = torch_tps(cfg, a.micro, threads, a.steps, a.batch_size)
                rows.append(("PyTorch eager, %d thread%s" % (threads, "s" if threads > 1 else ""), t))
                rows.append(("  ratio zbsched / PyTorch", (z[0] / t[0], z[1] / t[1])))
        half = max(1, n // 2)
        z2 = zbsched_tps(a.zbsched, name, 2, a.micro, half, a.steps, a.batch_size)
        rows.append(("zbsched, 2 devices (1F1B), %d thread%s each" % (half, "s" if half > 1 else ""), z2))
        for label, (v, c) in rows:
            if "ratio" in label:
                print("  %-44s %10.2f %16.2f" % (label, v, c))
            else:
                print("  %-44s %10.0f %16.0f" % (label, v, c))


if __name__ == "__main__":
    main()
