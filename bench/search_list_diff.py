#!/usr/bin/env python3
"""search_list_diff.py OLD NEW: compare two `zbsched search --json` outputs.

Prints one word or phrase:
  same                  the two documents are equal;
  pruned N over-limit   NEW lists a subset of OLD's candidates, figure for
                        figure, the rest of the document is equal but for
                        n_pruned, and every candidate left out is a plan
                        over the limit whose label (schedule at its depth)
                        has in NEW a fit or a peak no larger, with n_pruned
                        grown by exactly their number: what pruning a plan
                        by its peak may remove (docs/search.md, "Pruning");
  DIFF                  anything else.
Used by bench/bench_search_ab.sh (JSON=1)."""
import collections
import json
import sys


def main():
    old, new = (json.load(open(p)) for p in sys.argv[1:3])
    for d in (old, new):
        d.pop("n_reused", None)
    if old == new:
        print("same")
        return
    key = lambda c: json.dumps(c, sort_keys=True)
    have_old = collections.Counter(key(c) for c in old["candidates"])
    have_new = collections.Counter(key(c) for c in new["candidates"])
    gone = list((have_old - have_new).elements())
    rest_old = {k: v for k, v in old.items() if k not in ("candidates", "n_pruned")}
    rest_new = {k: v for k, v in new.items() if k not in ("candidates", "n_pruned")}
    ok = not (have_new - have_old) and rest_old == rest_new and \
        new["n_pruned"] - old["n_pruned"] == len(gone)
    for k in gone if ok else []:
        c = json.loads(k)
        label = (c["schedule"], c["pipeline_parallel"])
        ok = ok and c["status"] == "oom" and any(
            (x["schedule"], x["pipeline_parallel"]) == label and
            (x["status"] == "fit" or (x["status"] == "oom" and x["peak_bytes"] <= c["peak_bytes"]))
            for x in new["candidates"])
    print(f"pruned {len(gone)} over-limit" if ok else "DIFF")


if __name__ == "__main__":
    main()
