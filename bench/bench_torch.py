#!/usr/bin/env python3
"""bench_torch.py: step time of zbsched's CPU executor against PyTorch eager on
the same model, batch and thread count, measured alternately on the machine
at hand (issue 28).

For each model preset (tiny, shakespeare-char) and each thread count (1, 2):

  * `zbsched run` of a one-device 1F1B schedule with --threads N (a fresh
    process per round, N steps);
  * PyTorch eager, same architecture (Llama-style: RMSNorm, interleaved
    RoPE, causal attention through scaled_dot_product_attention, SwiGLU,
    untied head), same micro-batches (m micro-batches of B sequences of T
    tokens accumulated into one step), AdamW + global-norm clip 1.0, with
    torch.set_num_threads(N) (one model per thread count, N steps per round).

The two sides take turns, round after round, so that the load of a shared
machine falls on both alike.  Each round's first step is left out (zbsched
grows its pools and scratch then, PyTorch its caches), and the median over
the other steps of every round is reported, with the ratio PyTorch / zbsched
(above 1: zbsched is faster) and the load average before and after.  Beside
the wall time, the CPU time per step (every thread of the process; for
zbsched an N-step process less a 1-step one, per round): on a loaded machine
the wall time follows the scheduler's share, the CPU time the work (with
several threads it also counts their spinning).

zbsched's step time comes from its progress lines (tokens per step / the
step's tokens/s).  PyTorch comes from PyPI when installed; without it the
script still measures zbsched.  Never run by the tests.

--profile also prints PyTorch's profiler table (self CPU time per aten op,
one step after a warm-up) for the per-op comparison with build/bench/
bench_ops (bench/README.md, "issue 28").

usage: bench/bench_torch.py [--zbsched build/zbsched] [--steps N] [--rounds R]
                            [--threads 1,2] [--models tiny,shakespeare-char]
                            [--batch-size B] [--micro M] [--profile]
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


def zbsched_steps(zb, sched, model, threads, steps, batch, m):
    """Step times (s) of one `zbsched run`, its first step left out, and the
    CPU seconds (user + system, every thread) of the whole process."""
    cmd = [zb, "run", sched, "--model", model, "--steps", str(steps), "--threads", str(threads),
           "--data", DATA, "--eval-windows", "1", "--seed", "1"]
    if batch:
        cmd += ["--batch-size", str(batch)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit("zbsched failed: " + r.stderr.strip())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tps = [float(x) for x in re.findall(r"^step \d+/\d+: loss \S+\s+(\S+) tok/s", r.stderr, re.M)]
    b, t = re.search(r"batch (\d+) x (\d+) tokens", r.stderr).groups()
    tokens = float(b) * float(t) * m
    return [tokens / x for x in tps[1:]], cpu


class TorchModel:
    """The same model in PyTorch eager, its optimizer and fixed data."""

    def __init__(self, cfg, m, threads, batch):
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        self.torch = torch
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

        self.threads = threads
        self.m = m
        self.model = Model()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, betas=(0.9, 0.99),
                                     weight_decay=0.1)
        g = torch.Generator().manual_seed(1)
        self.xs = torch.randint(0, V, (m, B, T), generator=g)
        self.ys = torch.randint(0, V, (m, B, T), generator=g)

    def step(self):
        for j in range(self.m):
            (self.model(self.xs[j], self.ys[j]) / self.m).backward()
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def steps(self, n):
        """Step times (s) of n steps and their CPU seconds (every thread of
        the process), the first step left out."""
        self.torch.set_num_threads(self.threads)
        times, cpus = [], []
        for _ in range(n):
            t0, c0 = time.perf_counter(), time.process_time()
            self.step()
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        return times[1:], cpus[1:]

    def profile(self):
        """PyTorch's profiler table of one step (after one warm-up step)."""
        from torch.profiler import ProfilerActivity, profile
        self.step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            self.step()
        return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zbsched", default="build/zbsched")
    ap.add_argument("--steps", type=int, default=4, help="steps per round and side (>= 2)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, the two sides alternating")
    ap.add_argument("--micro", type=int, default=4, help="micro-batches per step (m)")
    ap.add_argument("--batch-size", type=int, default=0, help="sequences per micro-batch (0: preset)")
    ap.add_argument("--threads", default="1,2", help="thread counts, each for both sides")
    ap.add_argument("--models", default="tiny,shakespeare-char")
    ap.add_argument("--profile", action="store_true", help="print PyTorch's per-op profile too")
    a = ap.parse_args()
    if a.steps < 2:
        sys.exit("bench_torch: --steps must be at least 2 (the first step of a round is left out)")
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch = None
        torch_version = "not installed"
    cpu = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        cpu = re.search(r"Model name:\s*(.*)", out).group(1).strip()
    except (OSError, AttributeError):
        pass
    print("%s, %d cores; PyTorch %s; %d rounds of %d steps per side (first step of each left "
          "out), m=%d" % (cpu, cores(), torch_version, a.rounds, a.steps, a.micro))
    for name in a.models.split(","):
        cfg = MODELS[name]
        B = a.batch_size or cfg["B"]
        print("\n%s: %d layers, d=%d, batch %d x %d tokens, m=%d (%d tokens/step)" %
              (name, cfg["layers"], cfg["d"], B, cfg["T"], a.micro, a.micro * B * cfg["T"]))
        print("  %-8s %-24s %12s %12s %14s %12s   %s" % ("threads", "side", "median ms", "min ms",
                                                          "tokens/s", "CPU ms/step",
                                                          "load before -> after"))
        with tempfile.TemporaryDirectory() as tmp:
            sched = os.path.join(tmp, "s.json")
            subprocess.run([a.zbsched, "gen", "1f1b", "-p", "1", "-m", str(a.micro), "-o", sched],
                           check=True)
            for threads in [int(x) for x in a.threads.split(",")]:
                load0 = os.getloadavg()[0]
                tm = TorchModel(cfg, a.micro, threads, a.batch_size) if torch else None
                if tm and a.profile:
                    print(tm.profile())
                zs, ts, zc, tc = [], [], [], []
                # zbsched's CPU per step: an N-step process less a 1-step one
                # (start-up, data, the first step and the final evaluation)
                _, cpu1 = zbsched_steps(a.zbsched, sched, name, threads, 1, a.batch_size, a.micro)
                for _ in range(a.rounds):
                    times, cpu = zbsched_steps(a.zbsched, sched, name, threads, a.steps,
                                               a.batch_size, a.micro)
                    zs += times
                    zc.append((cpu - cpu1) / (a.steps - 1))
                    if tm:
                        times, cpus = tm.steps(a.steps)
                        ts += times
                        tc += cpus
                load1 = os.getloadavg()[0]
                tokens = a.micro * B * cfg["T"]
                rows = [("zbsched", zs, zc)] + ([("PyTorch eager", ts, tc)] if tm else [])
                for side, xs, cs in rows:
                    med = statistics.median(xs)
                    print("  %-8d %-24s %12.1f %12.1f %14.0f %12.1f   %.1f -> %.1f" %
                          (threads, side, 1e3 * med, 1e3 * min(xs), tokens / med,
                           1e3 * statistics.median(cs), load0, load1))
                if tm:
                    print("  %-8d %-24s %12.2f %12s %14s %12.2f   (PyTorch / zbsched; > 1: "
                          "zbsched faster)" % (threads, "ratio", statistics.median(ts) /
                                               statistics.median(zs), "", "",
                                               statistics.median(tc) / statistics.median(zc)))
                del tm


if __name__ == "__main__":
    main()
