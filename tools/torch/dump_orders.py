#!/usr/bin/env python3
"""Dump PyTorch's own pipeline orders as compute-only CSV files.

zbsched reimplements several of torch.distributed.pipelining's schedules
(interleaved 1F1B, interleaved zero bubble, ZB-V).  This script asks PyTorch
itself for their per-rank orders, with no process group and no model: it
builds a schedule object without running its constructor, sets the few
fields that the order computation reads, and calls PyTorch's own
_calculate_single_rank_operations (and, where the class has it,
_add_bubbles_to_actions).  The CSVs it writes are committed under
tests/gen/torch/ and compared against zbsched's generators by
tests/gen/test_gen_torch.c, so the tests never need PyTorch.

usage: python3 tools/torch/dump_orders.py OUTDIR
       (needs `pip install torch`; any CPU wheel)
"""
import os
import sys

import torch
from torch.distributed.pipelining import schedules as S

# (class, file prefix, chunks) and the (p, m) shapes of issue 10's check.
KINDS = [
    (S.ScheduleInterleavedZeroBubble, "interleaved-zb", 2),
    (S.ScheduleInterleaved1F1B, "interleaved", 2),
]
SHAPES = [(4, 8), (4, 16), (8, 16)]


def order(cls, p, m, v):
    """PyTorch's per-rank action lists for p ranks, m micro-batches and v
    local stages per rank, idle slots dropped."""
    sched = cls.__new__(cls)
    sched.pp_group_size = p
    sched.n_local_stages = v
    sched._n_microbatches = m
    sched.number_of_rounds = max(1, m // p)
    sched.microbatches_per_round = m // sched.number_of_rounds
    sched.pipeline_order = {}
    for rank in range(p):
        sched.rank = rank
        sched.pipeline_order[rank] = sched._calculate_single_rank_operations(rank)
    if hasattr(sched, "_add_bubbles_to_actions"):
        sched.pipeline_order = sched._add_bubbles_to_actions(v * p)
    return [[a for a in sched.pipeline_order[r] if a is not None] for r in range(p)]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    for cls, name, v in KINDS:
        for p, m in SHAPES:
            path = os.path.join(out, f"{name}-p{p}-m{m}.csv")
            with open(path, "w") as f:
                for row in order(cls, p, m, v):
                    f.write(",".join(str(a) for a in row) + "\n")
            print(path)
    print(f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
