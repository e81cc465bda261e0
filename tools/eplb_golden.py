#!/usr/bin/env python3
"""eplb_golden.py: golden placements from DeepSeek's reference EPLB.

Runs eplb.rebalance_experts from github.com/deepseek-ai/EPLB (pass the path
of its eplb.py; it is not vendored here) on a fixed set of load matrices and
writes tests/solver/eplb_golden.json, which tests/solver/test_eplb.c compares
zbsched's C port against.  Dev-only: needs PyTorch and NumPy; the tests do
not.

Two runs per case:
  "stable"  the reference with its one sort made stable
            (.sort(dim=-1, descending=True, stable=True)).  This is the order the
            C port implements, and the test requires an exact match of
            phy2log, log2phy and logcnt.
  "as_is"   the reference unchanged.  torch.sort(stable=False) on x86 CPUs
            sorts rows longer than 16 with x86-simd-sort, which does not keep
            equal loads in index order (and whose order depends on the SIMD
            path), so equal-load items may trade places.  That changes which
            of two equal replicas lands on which GPU, never a pack's load
            sequence, so the test compares logcnt and the per-GPU loads.

Loads are integers (token counts, as the reference's own example) or
float32 values written exactly, so every float32 group total is exact and
the comparison does not depend on torch's summation order.

Usage:
  python3 tools/eplb_golden.py --eplb /path/to/EPLB/eplb.py \
      [-o tests/solver/eplb_golden.json]
  python3 tools/eplb_golden.py --eplb /path/to/EPLB/eplb.py \
      --sweep 300 --zbsched build/zbsched
The second form writes nothing: it runs the built `zbsched eplb --json` on
N random shapes and loads (small integers full of ties, log-normal token
counts, float32 values) and counts the cases whose phy2log, log2phy or
logcnt differ from the stable reference's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import types

import numpy as np
import torch


def load_reference(path, stable):
    src = open(path).read()
    if stable:
        old = "sort(-1, descending=True)"
        if src.count(old) != 1:
            sys.exit(f"{path}: expected exactly one '{old}' to make stable")
        src = src.replace(old, "sort(dim=-1, descending=True, stable=True)")
    mod = types.ModuleType("eplb_stable" if stable else "eplb_as_is")
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod


def run(mod, weights, R, G, N, M, policy):
    w = torch.tensor(weights)
    if policy == "global":
        # The reference's global policy is its hierarchical one with one
        # group and one node (what rebalance_experts does when N does not
        # divide G).
        G, N = 1, 1
    elif policy == "hierarchical":
        assert G % N == 0
    phy2log, log2phy, logcnt = mod.rebalance_experts(w, R, G, N, M)
    return {"phy2log": phy2log.tolist(), "log2phy": log2phy.tolist(),
            "logcnt": logcnt.tolist()}


def zipf_ints(rng, layers, experts, scale=5000, a=1.2):
    """Skewed integer loads: a shuffled power law, like real routing counts."""
    rows = []
    for _ in range(layers):
        base = scale / np.arange(1, experts + 1) ** a
        noise = rng.uniform(0.5, 1.5, experts)
        row = np.floor(base * noise).astype(np.int64)
        rng.shuffle(row)
        rows.append([int(v) for v in row])
    return rows


def cases():
    rng = np.random.default_rng(20261201)
    readme = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
              [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]

    def ints(layers, experts, hi):
        return rng.integers(0, hi, (layers, experts)).tolist()

    floats = rng.uniform(0, 100, (4, 32)).astype(np.float32)
    dominant = [[1000] + [1] * 7, [5, 5, 5, 5, 400, 5, 5, 5]]
    return [
        # name, weights, R, G, N, M, policy
        ("readme", readme, 16, 4, 2, 8, "auto"),
        ("readme_global", readme, 16, 4, 2, 8, "global"),
        ("ties_small", ints(3, 16, 4), 24, 4, 2, 4, "auto"),
        ("ties_wide", ints(4, 64, 5), 96, 8, 2, 8, "hierarchical"),
        ("global_fallback", ints(3, 30, 1000), 40, 5, 2, 4, "auto"),
        ("global_wide", zipf_ints(rng, 3, 64), 80, 8, 2, 16, "global"),
        ("deepseek_v3_8_layers", zipf_ints(rng, 8, 256), 288, 8, 4, 32, "auto"),
        ("all_zero", [[0] * 8, [0] * 8], 12, 2, 2, 4, "auto"),
        ("no_redundancy", ints(2, 16, 500), 16, 4, 2, 8, "auto"),
        ("one_gpu_per_node", ints(2, 12, 300), 16, 4, 2, 2, "auto"),
        ("groups_equal_nodes", ints(2, 16, 300), 24, 4, 4, 8, "auto"),
        ("one_node", ints(2, 24, 100), 32, 4, 1, 4, "hierarchical"),
        ("dominant_expert", dominant, 16, 2, 1, 4, "auto"),
        ("float32_loads", [[float(v) for v in row] for row in floats], 48, 4, 2, 8, "auto"),
        # 4 groups on 3 nodes: rebalance_experts falls back to its global
        # policy, which never asks whether the 4 GPUs divide into 3 nodes.
        ("fallback_uneven_nodes", ints(3, 16, 1000), 20, 4, 3, 4, "auto"),
    ]


def sweep(mod, zbsched, n):
    """Compares `zbsched eplb --json` with the reference on n random cases."""
    rng = np.random.default_rng(7)
    mismatches = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "w.json")
        for t in range(n):
            N = int(rng.choice([1, 2, 4]))
            M = N * int(rng.choice([1, 2, 4, 8]))
            G = N * int(rng.integers(1, 5)) + (1 if rng.random() < 0.2 else 0)
            E = G * int(rng.integers(1, 9))
            R = M * int(rng.integers(1, 6))
            while R < E:
                R += M
            R += M * int(rng.integers(0, 3))
            L = int(rng.integers(1, 4))
            if t % 10 == 9 and G % (N + 1) and N + 1 <= M:
                # The reference's fallback: groups that do not divide into
                # one more node than the GPUs were built for, so its global
                # policy runs and the GPUs need not divide into the nodes.
                N += 1
            if t % 3 == 0:
                w = rng.integers(0, 5, (L, E)).tolist()
            elif t % 3 == 1:
                w = np.floor(rng.lognormal(6, 1, (L, E))).astype(int).tolist()
            else:
                w = [[float(v) for v in r]
                     for r in rng.uniform(0, 100, (L, E)).astype(np.float32)]
            want = run(mod, w, R, G, N, M, "auto")
            with open(path, "w") as f:
                json.dump(w, f)
            out = subprocess.run(
                [zbsched, "eplb", path, "--replicas", str(R), "--groups", str(G),
                 "--nodes", str(N), "--gpus", str(M), "--json"],
                capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"case {t}: {out.stderr.strip()}")
            got = json.loads(out.stdout)
            if any(got[k] != want[k] for k in ("phy2log", "log2phy", "logcnt")):
                mismatches += 1
                print(f"case {t}: L={L} E={E} R={R} G={G} N={N} M={M} differs")
    print(f"{n} cases, {mismatches} mismatches")
    return 1 if mismatches else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eplb", required=True, help="path of the reference eplb.py")
    ap.add_argument("-o", "--output", default="tests/solver/eplb_golden.json")
    ap.add_argument("--sweep", type=int, default=0,
                    help="instead: compare the built zbsched on this many random cases")
    ap.add_argument("--zbsched", default="build/zbsched")
    args = ap.parse_args()
    stable = load_reference(args.eplb, True)
    if args.sweep:
        sys.exit(sweep(stable, args.zbsched, args.sweep))
    as_is = load_reference(args.eplb, False)
    out = {"source": "github.com/deepseek-ai/EPLB eplb.py, rebalance_experts",
           "torch": torch.__version__, "cases": []}
    for name, weights, R, G, N, M, policy in cases():
        s = run(stable, weights, R, G, N, M, policy)
        a = run(as_is, weights, R, G, N, M, policy)
        out["cases"].append({
            "name": name, "weights": weights, "replicas": R, "groups": G,
            "nodes": N, "gpus": M, "policy": policy, "stable": s,
            "as_is": {"phy2log": a["phy2log"], "logcnt": a["logcnt"]},
            "as_is_differs": a["phy2log"] != s["phy2log"],
        })
        print(f"{name}: max replicas {len(s['log2phy'][0][0])}, "
              f"as-is {'differs' if a['phy2log'] != s['phy2log'] else 'same'}")
    with open(args.output, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
