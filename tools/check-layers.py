#!/usr/bin/env python3
"""check-layers.py: no two source files of zbsched depend on each other in
a circle, and no file is larger than its folder allows.

Source file A depends on source file B when

  - A includes B (#include "b/path.h"), or
  - A's object file uses a global name (nm: undefined) that only B's
    object file defines: a call into B, however it was declared.

The check fails when the dependency graph has a circle (a strongly
connected component of more than one file), printing each circle with the
include or the names that make every edge of it.  A header is a file of
its own: a public header may declare what several files define (gen.h,
search.h, trainer.h), and a file that includes it does not depend on
them; what it calls, it does.  The objects come from the build
directory's compile_commands.json, so a file that this build does not
compile (CUDA, MPI without the toolkits) is checked by its includes only.

Sizes: every file under a folder with a limit is reported when it has more
lines than the limit; `--enforce DIR=N` makes that a failure, `--report
DIR=N` only prints it (for a limit being introduced while others shrink
the folder).  tests/meson.build runs this as the test `check_layers`:

    tools/check-layers.py SOURCE_ROOT BUILD_DIR --enforce runtime/=1000 \
        --enforce src/cli/=400

Exit status: 0 clean, 1 a circle or an enforced size, 2 bad usage.
"""

import argparse
import json
import os
import re
import subprocess
import sys

# The layers of the program (tests, benches and tools may use anything).
SOURCE_DIRS = ("src", "schedules", "solver", "viz", "kernels", "runtime")
EXTENSIONS = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def node_of(path):
    """A node of the graph: the file itself (see the header comment)."""
    return path


def source_files(root):
    """Every source file of the layers, as root-relative paths."""
    out = []
    for top in SOURCE_DIRS:
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if n.endswith(EXTENSIONS):
                    out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)


def include_edges(root, files, edges):
    """Adds A -> B for every include of file B by file A."""
    known = set(files)
    for f in files:
        here = os.path.dirname(f)
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                # project includes are root-relative; allow file-relative too
                target = inc if inc in known else os.path.normpath(os.path.join(here, inc))
                if target not in known:
                    continue
                a, b = node_of(f), node_of(target)
                if a != b:
                    edges.setdefault((a, b), set()).add("includes " + target)


def objects_by_file(root, build, files):
    """{source file: [object paths]} from compile_commands.json."""
    db = os.path.join(build, "compile_commands.json")
    if not os.path.exists(db):
        return {}
    known = set(files)
    out = {}
    with open(db, encoding="utf-8") as fh:
        for e in json.load(fh):
            src = os.path.relpath(os.path.normpath(os.path.join(e["directory"], e["file"])), root)
            obj = e.get("output")
            if src not in known or not obj:
                continue
            obj = os.path.normpath(os.path.join(e["directory"], obj))
            if os.path.exists(obj):
                out.setdefault(node_of(src), []).append(obj)
    return out


def symbols(paths):
    """{object path: (defined, undefined)} global names, one nm -P -A run."""
    out = {p: (set(), set()) for p in paths}
    if not paths:
        return out
    res = subprocess.run(["nm", "-P", "-A"] + list(paths), capture_output=True, text=True,
                         check=False)
    for line in res.stdout.splitlines():
        # "path: name kind value size" (nm -A prefixes the file)
        head, sep, rest = line.partition(": ")
        parts = rest.split()
        if not sep or head not in out or len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            out[head][1].add(name)
        elif kind in "TDBRCGSVW" and kind.isupper():
            out[head][0].add(name)
    return out


def call_edges(objs, edges):
    """Adds A -> B for every name A's objects use that only B's define."""
    defined_by = {}
    uses = {}
    syms = symbols([p for paths in objs.values() for p in paths])
    for mod, paths in objs.items():
        for p in paths:
            d, u = syms[p]
            for name in d:
                defined_by.setdefault(name, set()).add(mod)
            uses.setdefault(mod, set()).update(u)
    for mod, names in uses.items():
        for name in names:
            owners = defined_by.get(name, set())
            if len(owners) == 1:
                (b,) = owners
                if b != mod:
                    edges.setdefault((mod, b), set()).add("calls " + name)


def circles(nodes, edges):
    """Strongly connected components of more than one node (Tarjan)."""
    succ = {n: [] for n in nodes}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(succ):
        if v not in index:
            visit(v)
    return out


def limits(specs, what):
    out = []
    for s in specs or []:
        if "=" not in s:
            sys.exit("check-layers: %s %r: expected DIR=LINES" % (what, s))
        d, n = s.split("=", 1)
        out.append((d.rstrip("/") + "/", int(n)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="the source tree")
    ap.add_argument("build", nargs="?", default=None, help="a build directory (for nm)")
    ap.add_argument("--enforce", action="append", metavar="DIR=LINES",
                    help="fail when a file under DIR has more lines")
    ap.add_argument("--report", action="append", metavar="DIR=LINES",
                    help="only report files under DIR with more lines")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    if not os.path.isdir(root):
        print("check-layers: %s: not a directory" % a.root, file=sys.stderr)
        return 2
    files = source_files(root)
    edges = {}
    include_edges(root, files, edges)
    objs = objects_by_file(root, a.build, files) if a.build else {}
    call_edges(objs, edges)
    nodes = sorted({node_of(f) for f in files})
    failed = False
    found = circles(nodes, edges)
    for comp in found:
        failed = True
        inside = set(comp)
        print("check-layers: circle of %d files: %s" % (len(comp), ", ".join(comp)))
        for (x, y), why in sorted(edges.items()):
            if x in inside and y in inside:
                shown = sorted(why)
                more = " (+%d more)" % (len(shown) - 3) if len(shown) > 3 else ""
                print("    %s -> %s: %s%s" % (x, y, "; ".join(shown[:3]), more))
    sizes = [(d, n, True) for d, n in limits(a.enforce, "--enforce")]
    sizes += [(d, n, False) for d, n in limits(a.report, "--report")]
    for d, n, enforced in sizes:
        for f in files:
            if not f.startswith(d):
                continue
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                lines = sum(1 for _ in fh)
            if lines > n:
                failed = failed or enforced
                print("check-layers: %s: %d lines, over %s's limit of %d%s"
                      % (f, lines, d, n, "" if enforced else " (reported, not enforced)"))
    print("check-layers: %d files (%d with objects), %d dependencies, %s"
          % (len(nodes), len(objs), len(edges),
             "%d circle(s)" % len(found) if found else "no circle"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
