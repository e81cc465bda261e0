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
  ..., N by floor        besides, N vocabulary-parallel versions over the
                        limit that OLD placed and simulated are in NEW
                        reported by a lower bound of their peak
                        (peak_is_lower_bound, no times): same identity,
                        OLD over the limit with a peak no lower;
  DIFF                  anything else.
Used by bench/bench_search_ab.sh (JSON=1)."""
import collections
import json
import sys

# What names a candidate, whatever its figures.
IDENTITY = ("schedule", "family", "vocab", "targets", "chunks", "pipeline_parallel", "data_parallel",
            "layout", "micro_batch", "n_micro", "recompute", "recompute_devices", "recompute_level",
            "recompute_first_stages", "recompute_mlp_stages", "split", "layers_per_stage")


def main():
    old, new = (json.load(open(p)) for p in sys.argv[1:3])
    for d in (old, new):
        d.pop("n_reused", None)
    if old == new:
        print("same")
        return
    key = lambda c: json.dumps(c, sort_keys=True)
    # A version NEW reports by its floor stands for OLD's placed build of
    # it: the two are matched by identity and taken out of both lists.
    ident = lambda c: json.dumps({k: v for k, v in c.items() if k in IDENTITY}, sort_keys=True)
    floors = [c for c in new["candidates"] if c.get("peak_is_lower_bound")]
    n_floor = 0
    for f in floors:
        match = [c for c in old["candidates"] if ident(c) == ident(f) and c["status"] == "oom" and
                 not c.get("peak_is_lower_bound") and c["peak_bytes"] >= f["peak_bytes"]]
        if len(match) != 1:
            print("DIFF")
            return
        old["candidates"].remove(match[0])
        new["candidates"].remove(f)
        n_floor += 1
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
    word = "same" if not gone else f"pruned {len(gone)} over-limit"
    print((word + (f", {n_floor} by floor" if n_floor else "")) if ok else "DIFF")


if __name__ == "__main__":
    main()
