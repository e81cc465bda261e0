#!/usr/bin/env python3
"""mutate_apply.py: reads the planted-bug list of tools/mutate.sh and applies
one planted bug (a "mutant") to a scratch copy of the tree.

Why a list of literal edits rather than patch files: a reviewer reads the
whole list in one place, and an edit names the exact text it changes, so a
mutant whose code has moved on is reported as stale instead of landing
somewhere else through patch's fuzz.

List format (tools/mutations.txt):

    # comment lines and blank lines are ignored
    == ID SUITE
    one or more lines of description (what a reviewer would miss)
    @ path/relative/to/the/root
    <<<
    text to find, exactly once in the file (one or more lines)
    ---
    text to put in its place
    >>>

SUITE is the meson test suite that should catch the mutant (core, gen,
solver, viz, kernels, runtime, outer); mutate.sh runs it first.

Commands:
    mutate_apply.py list LIST            one line per mutant: ID SUITE PATH SKIP DESCRIPTION
                                         (tab separated; SKIP is "-" or why it is skipped)
    mutate_apply.py apply LIST ID TREE   edits TREE/PATH in place

Exit status: 0 done; 1 bad list or unknown ID; 3 stale (the text to find
does not occur exactly once); 4 the mutant is skipped (its file is absent).
mutate.sh fails a run with any stale or skipped mutant: a mutant for code
that is gone is removed from the list, not kept and skipped.
"""
import os
import sys


class Mutant:
    def __init__(self, ident, suite, line):
        self.ident = ident  # unique name, e.g. core-sim-peak-before-add
        self.suite = suite  # meson suite expected to kill it
        self.line = line    # line of the "==" header, for messages
        self.desc = []      # description lines
        self.path = None    # file to edit, relative to the tree root
        self.find = None    # text to find
        self.put = None     # replacement


def parse(list_path):
    """Returns the mutants of the list, in order; exits 1 on a malformed list."""
    with open(list_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    mutants, seen, cur, i = [], set(), None, 0

    def fail(n, msg):
        sys.stderr.write(f"{list_path}:{n + 1}: {msg}\n")
        sys.exit(1)

    while i < len(lines):
        ln = lines[i]
        if ln.startswith("== "):
            parts = ln[3:].split()
            if len(parts) != 2:
                fail(i, "expected '== ID SUITE'")
            if parts[0] in seen:
                fail(i, f"duplicate mutant id {parts[0]}")
            seen.add(parts[0])
            cur = Mutant(parts[0], parts[1], i)
            mutants.append(cur)
        elif ln.startswith("#") or not ln.strip():
            pass
        elif cur is None:
            fail(i, "text before the first '== ID SUITE' header")
        elif ln.startswith("@ "):
            cur.path = ln[2:].strip()
        elif ln.startswith("unless "):
            fail(i, f"{cur.ident}: 'unless' is gone (a skipped mutant fails the run); "
                 "remove the mutant instead")
        elif ln == "<<<":
            body, i = [], i + 1
            while i < len(lines) and lines[i] != ">>>":
                body.append(lines[i])
                i += 1
            if i == len(lines) or body.count("---") != 1:
                fail(cur.line, f"{cur.ident}: needs one '<<<', one '---' and one '>>>'")
            k = body.index("---")
            cur.find, cur.put = "\n".join(body[:k]), "\n".join(body[k + 1:])
        elif cur.find is None:
            cur.desc.append(ln.strip())
        else:
            fail(i, f"{cur.ident}: unexpected line after the edit")
        i += 1
    for m in mutants:
        if not m.path or m.find is None or not m.find.strip():
            fail(m.line, f"{m.ident}: needs an '@ path' and a non-empty edit")
        if m.find == m.put:
            fail(m.line, f"{m.ident}: the edit changes nothing")
    return mutants


def skip_reason(m, tree):
    if not os.path.exists(os.path.join(tree, m.path)):
        return f"{m.path} absent"
    return None


def main(argv):
    if len(argv) == 3 and argv[1] == "list":
        tree = os.environ.get("MUTATE_TREE", ".")
        for m in parse(argv[2]):
            why = skip_reason(m, tree) or "-"
            print("\t".join([m.ident, m.suite, m.path, why, " ".join(m.desc)]))
        return 0
    if len(argv) == 5 and argv[1] == "apply":
        byid = {m.ident: m for m in parse(argv[2])}
        m = byid.get(argv[3])
        if m is None:
            sys.stderr.write(f"no mutant {argv[3]} in {argv[2]}\n")
            return 1
        why = skip_reason(m, argv[4])
        if why:
            sys.stderr.write(f"{m.ident}: skipped: {why}\n")
            return 4
        path = os.path.join(argv[4], m.path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        n = text.count(m.find)
        if n != 1:
            sys.stderr.write(f"{m.ident}: stale: the text to find occurs {n} times in {m.path}\n")
            return 3
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(m.find, m.put))
        return 0
    sys.stderr.write(__doc__)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
