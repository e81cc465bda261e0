#!/usr/bin/env python3
"""bench_authors_zb.py: CPU time of the zero-bubble authors' own heuristic
(sail-sg/zero-bubble-pipeline-parallelism,
megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py) against
`zbsched gen zb-auto` as a whole process, on the same machine, alternating
(issue 28: the whole process at most 1/100 of the heuristic).

The authors' code is not part of this repository: pass the path of a copy
(a checkout, or the bare git directory the project's fetch tool makes).  Only
its two scheduler files are read (zb.py and the graph.py it imports), into
a temporary package, so Megatron's own package __init__ files are never
imported; zb.py itself imports torch and pulp, which must be installed
(PyPI).  Their heuristic runs as create_schedule does: build_graph, then
initial_solution (eight greedy orders, the best kept), with the costs and
memory of `zbsched gen`'s defaults (F = B = W = 1, comm 0; memory F = 2,
B = W = -1; limit --mem-limit per stage).

Reported per round (median over rounds): their heuristic's CPU time in
process (time.process_time around the call, so Python's start-up and the
torch import are not counted against it), and zbsched's CPU time (user +
system, from wait4) as a whole process writing the schedule file.

usage: bench/bench_authors_zb.py AUTHORS_COPY [--zbsched build/zbsched]
                                 [-p 32] [-m 256] [--mem-limit 128] [--rounds 7]
"""
import argparse
import importlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

SCHED = "megatron/core/pipeline_parallel/zerobubble/scheduler"


def read_file(copy, rel):
    """A file of the authors' copy: from its work tree, or from HEAD of a git dir."""
    path = os.path.join(copy, rel)
    if os.path.isfile(path):
        with open(path) as f:
            return f.read()
    git_dir = copy if os.path.isdir(os.path.join(copy, "objects")) else os.path.join(copy, ".git")
    r = subprocess.run(["git", "--git-dir", git_dir, "show", "HEAD:" + rel],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("bench_authors_zb: %s: no %s (%s)" % (copy, rel, r.stderr.strip()))
    return r.stdout


def load_authors(copy, tmp):
    """Their zb module, from a package made of graph.py and zb.py only."""
    pkg = os.path.join(tmp, *SCHED.split("/"))
    os.makedirs(pkg)
    parts = SCHED.split("/")
    for i in range(1, len(parts) + 1):
        open(os.path.join(tmp, *parts[:i], "__init__.py"), "w").close()
    for name in ("graph.py", "zb.py"):
        with open(os.path.join(pkg, name), "w") as f:
            f.write(read_file(copy, SCHED + "/" + name))
    sys.path.insert(0, tmp)
    return importlib.import_module(SCHED.replace("/", ".") + ".zb")


def authors_cpu(zb, p, m, limit):
    """CPU seconds of one create_schedule's heuristic, and its makespan."""
    cfg = zb.GraphConfig(mem_f=[2.0] * p, mem_b=[-1.0] * p, mem_w=[-1.0] * p,
                         max_mem=[float(limit)] * p, cost_f=[1.0] * p, cost_b=[1.0] * p,
                         cost_w=[1.0] * p, cost_comm=0.0, n_stages=p, n_micro=m)
    t0 = time.process_time()
    graph = zb.Graph.build_graph(p, m, cfg)
    best, _order, _times = zb.initial_solution(graph, print_result=False)
    return time.process_time() - t0, best


def zbsched_cpu(exe, p, m, limit, out):
    """CPU seconds (user + system) of `zbsched gen zb-auto` as a whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([exe, "gen", "zb-auto", "-p", str(p), "-m", str(m), "--mem-limit",
                    str(limit), "-o", out], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("copy", help="the authors' repository (checkout or git directory)")
    ap.add_argument("--zbsched", default="build/zbsched")
    ap.add_argument("-p", type=int, default=32)
    ap.add_argument("-m", type=int, default=256)
    ap.add_argument("--mem-limit", type=float, default=128)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    limit = int(a.mem_limit) if a.mem_limit == int(a.mem_limit) else a.mem_limit
    with tempfile.TemporaryDirectory() as tmp:
        zb = load_authors(a.copy, os.path.join(tmp, "authors"))
        out = os.path.join(tmp, "zb-auto.json")
        theirs, ours = [], []
        for _ in range(a.rounds):
            t, best = authors_cpu(zb, a.p, a.m, limit)
            theirs.append(t)
            ours.append(zbsched_cpu(a.zbsched, a.p, a.m, limit, out))
        import json
        with open(out) as f:
            ours_file = json.load(f)
    load = os.getloadavg()
    print("p=%d, m=%d, memory limit %s; %d rounds, alternating; load average %.2f %.2f %.2f"
          % (a.p, a.m, limit, a.rounds, *load))
    print("  authors' heuristic (zb.py initial_solution), CPU in process: median %.1f ms "
          "(min %.1f, max %.1f); its best per-stage time %s" %
          (1e3 * statistics.median(theirs), 1e3 * min(theirs), 1e3 * max(theirs), best))
    print("  zbsched gen zb-auto, whole process CPU:                     median %.2f ms "
          "(min %.2f, max %.2f); %s" %
          (1e3 * statistics.median(ours), 1e3 * min(ours), 1e3 * max(ours),
           ours_file.get("name", "?")))
    print("  ratio (authors / zbsched, medians): %.0fx" %
          (statistics.median(theirs) / max(statistics.median(ours), 1e-9)))


if __name__ == "__main__":
    main()
