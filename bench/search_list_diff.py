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
  ..., N near            besides, N vocabulary-parallel versions are in NEW
                        cut short as unable to come within
                        SEARCH_VOCAB_NEAR of the best plan ("cannot come
                        within 25% ..."), each where OLD built it over the
                        limit, cut it too, or timed it at 1.25x NEW's
                        winner or more; the depth rows and the why block's
                        rows of their depths may then name a slower plan,
                        and the vocabulary row's other best and count of
                        cut versions may change with them (the notes of
                        versions both cut short may give another time);
  DIFF                  anything else.
Used by bench/bench_search_ab.sh (JSON=1)."""
import collections
import json
import os
import sys

# What names a candidate, whatever its figures.
IDENTITY = ("schedule", "family", "vocab", "targets", "chunks", "pipeline_parallel", "data_parallel",
            "layout", "micro_batch", "n_micro", "recompute", "recompute_devices", "recompute_level",
            "recompute_first_stages", "recompute_mlp_stages", "split", "layers_per_stage")

NEAR = 1.25  # SEARCH_VOCAB_NEAR (solver/search.h)


def key(c):
    """A candidate, every figure included, as a comparable string."""
    return json.dumps(c, sort_keys=True)
CUT = "cannot "  # the start of a cut-short version's note


def vocab_row_text(text, other_went):
    """The why block's vocabulary row without its count of versions cut
    short (and the reason's wording), and without its other best when
    other_went."""
    clauses = [c for c in text.split("; ") if " cut short: " not in c]
    if other_went:
        clauses = [c for c in clauses if not c.startswith("the best vocabulary-parallel plan, ") and
                   c != "no vocabulary-parallel plan that fits was simulated"]
    return "; ".join(clauses)


def near_cut(old, new):
    """Matches NEW's vocabulary-parallel versions that differ from OLD's
    same version (schedule, depth and micro-batch name one) and takes both
    out when NEW's is cut short or over the limit (SEARCH_VOCAB_NEAR cuts
    a version, or ends its recompute steps at one over the limit) and
    OLD's did not fit within NEAR of NEW's winner; makes the depth and why
    rows of the depths whose OLD best went, and the vocabulary row,
    comparable.  Returns how many versions differed so, or -1 when one
    differs otherwise."""
    version = lambda c: (c["schedule"], c["pipeline_parallel"], c["micro_batch"], c["vocab"])
    win = new["candidates"][0]["time_ms"] if new["candidates"] and new["candidates"][0]["status"] == "fit" else None
    n_near, gone_depths, gone_labels = 0, set(), set()
    old_keys = collections.Counter(key(o) for o in old["candidates"])
    for c in [c for c in new["candidates"] if c["vocab"] and not old_keys[key(c)]]:
        match = [o for o in old["candidates"] if version(o) == version(c)]
        if len(match) != 1 or not (c["status"] == "oom" or
                                   (c["status"] == "skipped" and c.get("note", "").startswith(CUT))):
            return -1
        o = match[0]
        if o["status"] == "fit" and not (win and o["time_ms"] >= NEAR * win * (1 - 1e-9)):
            return -1
        if o["status"] == "fit":
            gone_depths.add(o["pipeline_parallel"])
            gone_labels.add(o["schedule"])
        old["candidates"].remove(o)
        new["candidates"].remove(c)
        n_near += 1
    for d in (old, new):
        d["n_fit"] = sum(1 for c in d["candidates"] if c["status"] == "fit")
    # Depth rows of the depths whose best went: NEW's may only be slower.
    od = {r["pipeline_parallel"]: r for r in old.get("depths", [])}
    for r in new.get("depths", []):
        o = od.get(r["pipeline_parallel"])
        if o and o != r and r["pipeline_parallel"] in gone_depths and o["schedule"] in gone_labels and \
                r.get("time_ms", 0) >= o.get("time_ms", 0):
            r.clear()
            o.clear()
    why_o, why_n = old.get("why", {}), new.get("why", {})
    for w in (why_o, why_n):
        w.pop("vocab_pruned", None)
    rows_o, rows_n = why_o.get("rows", []), why_n.get("rows", [])
    if len(rows_o) == len(rows_n):
        for ro, rn in zip(rows_o, rows_n):
            if ro == rn:
                continue
            depth_row = ro.get("label", "").startswith("pp=") and any(
                ro["label"].startswith(f"pp={p} x") for p in gone_depths)
            vocab_row = ro.get("label") == "vocabulary parallelism"
            if depth_row and rn.get("ms", 0) >= ro.get("ms", 0):
                ro.clear()
                rn.clear()
            elif vocab_row:
                # The cut count and its reason's wording; the other best
                # when it went.
                other_went = any(f"the best vocabulary-parallel plan, {l} " in ro["text"] for l in gone_labels)
                if vocab_row_text(ro["text"], other_went) == vocab_row_text(rn["text"], other_went):
                    ro.clear()
                    rn.clear()
    return n_near


def main():
    old, new = (json.load(open(p)) for p in sys.argv[1:3])
    for d in (old, new):
        d.pop("n_reused", None)
    if old == new:
        print("same")
        return
    # A version NEW reports by its floor stands for OLD's placed build of
    # it: the two are matched by identity and taken out of both lists.
    ident = lambda c: json.dumps({k: v for k, v in c.items() if k in IDENTITY}, sort_keys=True)
    floors = [c for c in new["candidates"] if c.get("peak_is_lower_bound") and
              not any(key(o) == key(c) for o in old["candidates"])]  # not OLD's floor row too
    n_floor = 0
    for f in floors:
        match = [c for c in old["candidates"] if ident(c) == ident(f) and c["status"] == "oom" and
                 not c.get("peak_is_lower_bound") and c["peak_bytes"] >= f["peak_bytes"]]
        if len(match) != 1:
            continue  # not OLD's placed build of it: near_cut says whether it may differ
        old["candidates"].remove(match[0])
        new["candidates"].remove(f)
        n_floor += 1
    n_near = near_cut(old, new)
    if n_near < 0:
        print("DIFF")
        return
    have_old = collections.Counter(key(c) for c in old["candidates"])
    have_new = collections.Counter(key(c) for c in new["candidates"])
    gone = list((have_old - have_new).elements())
    rest_old = {k: v for k, v in old.items() if k not in ("candidates", "n_pruned")}
    rest_new = {k: v for k, v in new.items() if k not in ("candidates", "n_pruned")}
    if os.environ.get("LIST_DIFF_DEBUG"):
        for k in rest_old:
            if rest_old[k] != rest_new.get(k):
                print("differs:", k, json.dumps(rest_old[k])[:400], "|", json.dumps(rest_new.get(k))[:400],
                      file=sys.stderr)
        print("only old:", len(have_old - have_new), "only new:", len(have_new - have_old), file=sys.stderr)
        for k in list((have_new - have_old).elements())[:3]:
            print("  new:", k[:300], file=sys.stderr)
        for k in list((have_old - have_new).elements())[:3]:
            print("  old:", k[:300], file=sys.stderr)
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
    print((word + (f", {n_floor} by floor" if n_floor else "") + (f", {n_near} near" if n_near else ""))
          if ok else "DIFF")


if __name__ == "__main__":
    main()
