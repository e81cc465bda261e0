#!/usr/bin/env python3
"""Run a schedule exported by zbsched in PyTorch's own pipeline runtime.

    zbsched gen zb-v -p 2 -m 8 -o zbv.json
    zbsched export zbv.json -o zbv.csv
    python3 examples/pytorch/run_schedule.py zbv.csv

The CSV (one row per rank, compute-only actions such as 0F1, 3I0, 3W0) is
loaded with torch.distributed.pipelining's _PipelineScheduleRuntime._load_csv,
which inserts the sends and receives itself.  Which stages a rank holds comes
from the CSV: one stage per rank for plain schedules, two (s and 2p-1-s) for
the V family, v for interleaved ones.

The script starts one CPU process per rank with the gloo backend, runs one
training step of a small model (a stack of Linear + tanh blocks, one block
per pipeline stage, float64 so that rounding does not hide a real
difference) through the schedule, and compares the loss and every weight
gradient with the same step run unpipelined in one process.  It prints one
line and exits 0 when they match within --tol, 1 otherwise.

Needs PyTorch (CPU is enough).  zbsched itself never needs it.
"""
import argparse
import csv
import os
import re
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

ACTION = re.compile(r"^(\d+)(F|I|W|B)(\d+)$")


def read_csv(path):
    """Ranks, stages and micro-batches the exported CSV describes, and the
    stage -> rank map (the first rank that runs a stage's forward)."""
    rows = []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            rows.append([c.strip() for c in row if c.strip()])
    stage_rank, n_micro = {}, 0
    for rank, row in enumerate(rows):
        for cell in row:
            m = ACTION.match(cell)
            if not m:
                raise SystemExit(f"{path}: '{cell}' is not a compute action (export writes e.g. 0F1)")
            stage, mb = int(m.group(1)), int(m.group(3))
            stage_rank.setdefault(stage, rank)
            n_micro = max(n_micro, mb + 1)
    n_stages = max(stage_rank) + 1
    return len(rows), n_stages, n_micro, stage_rank


class Block(nn.Module):
    """One pipeline stage: Linear then tanh."""

    def __init__(self, width):
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        return torch.tanh(self.lin(x))


def make_model(n_stages, width, seed):
    torch.manual_seed(seed)
    return nn.ModuleList([Block(width) for _ in range(n_stages)]).double()


def make_batch(batch, width, seed):
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, width, generator=g, dtype=torch.float64)
    y = torch.randn(batch, width, generator=g, dtype=torch.float64)
    return x, y


def loss_fn(out, target):
    return nn.functional.mse_loss(out, target)


def worker(rank, world, args, shape, port, outdir):
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    n_stages, n_micro, stage_rank = shape
    model = make_model(n_stages, args.width, args.seed)
    x, y = make_batch(n_micro * args.micro_batch, args.width, args.seed)
    mine = sorted(s for s, r in stage_rank.items() if r == rank)
    stages = [PipelineStage(model[s], s, n_stages, torch.device("cpu")) for s in mine]
    sched = _PipelineScheduleRuntime(stages, n_micro, loss_fn=loss_fn)
    sched._load_csv(args.csv, format="compute_only")
    losses = []
    kwargs = {}
    if 0 in mine:
        kwargs["target"] = y if (n_stages - 1) in mine else None
        sched.step(x, **kwargs, losses=losses)
    elif (n_stages - 1) in mine:
        sched.step(target=y, losses=losses)
    else:
        sched.step()
    grads = {s: {n: p.grad.clone() for n, p in model[s].named_parameters()} for s in mine}
    torch.save({"grads": grads, "losses": [l.detach() for l in losses]},
               os.path.join(outdir, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="schedule exported with `zbsched export`")
    ap.add_argument("--width", type=int, default=16, help="features per layer (default 16)")
    ap.add_argument("--micro-batch", type=int, default=2, help="rows per micro-batch (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=1e-10,
                    help="largest relative difference accepted (default 1e-10, float64)")
    args = ap.parse_args()
    world, n_stages, n_micro, stage_rank = read_csv(args.csv)
    if world < 2:
        raise SystemExit("the schedule has one rank; nothing to pipeline")

    with tempfile.TemporaryDirectory() as outdir:
        mp.spawn(worker, args=(world, args, (n_stages, n_micro, stage_rank), free_port(), outdir),
                 nprocs=world, join=True)
        parts = [torch.load(os.path.join(outdir, f"rank{r}.pt")) for r in range(world)]

    # the same step without a pipeline: one process, the whole batch
    model = make_model(n_stages, args.width, args.seed)
    x, y = make_batch(n_micro * args.micro_batch, args.width, args.seed)
    h = x
    for block in model:
        h = block(h)
    ref_loss = loss_fn(h, y)
    ref_loss.backward()

    mb_losses = [l for p in parts for l in p["losses"]]
    pipe_loss = torch.stack(mb_losses).mean()
    loss_diff = abs(pipe_loss.item() - ref_loss.item()) / max(abs(ref_loss.item()), 1e-30)
    grad_diff, n_tensors = 0.0, 0
    for p in parts:
        for s, named in p["grads"].items():
            for name, g in named.items():
                ref = dict(model[s].named_parameters())[name].grad
                d = ((g - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
                grad_diff = max(grad_diff, d)
                n_tensors += 1
    ok = loss_diff <= args.tol and grad_diff <= args.tol and n_tensors == 2 * n_stages
    print(f"{os.path.basename(args.csv)}: {world} ranks, {n_stages} stages, {n_micro} micro-batches "
          f"(torch {torch.__version__}, gloo): loss {pipe_loss.item():.12g} vs "
          f"{ref_loss.item():.12g} unpipelined (relative difference {loss_diff:.1e}); "
          f"{n_tensors} gradient tensors, largest relative difference {grad_diff:.1e}: "
          f"{'match' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
