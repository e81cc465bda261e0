#!/usr/bin/env bash
# hf_transformers.sh ZBSCHED SOURCE_ROOT: transformers loads what
# `zbsched checkpoint export` writes (issue 26, "Done when").  A tiny model
# trained 60 steps is exported; AutoModelForCausalLM and AutoTokenizer load
# it; the greedy continuation of "ROMEO:" for 30 tokens equals `zbsched
# generate --temperature 0`'s; the tokenizer encodes a passage of the text
# to zbsched's token ids and decodes it back unchanged.  Skips (exit 77)
# when transformers cannot be imported.
# $ZB_PYTHON picks the interpreter (default python3).
set -u
zb=$1 root=$2
py=${ZB_PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
  echo "skipped: no $py"; exit 77
fi
if ! "$py" -c "import torch, transformers" >/dev/null 2>&1; then
  echo "skipped: $py cannot import transformers (set ZB_PYTHON to an interpreter that can)"; exit 77
fi
data=$root/../shared/data/tinyshakespeare.txt
[ -r "$data" ] || { echo "skipped: no $data"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

"$zb" gen 1f1b -p 2 -m 4 -o s.json || fail "gen"
"$zb" run s.json --steps 60 --data "$data" --checkpoint ck -q >/dev/null || fail "run"
"$zb" checkpoint export ck -o hf 2>/dev/null || fail "checkpoint export"
"$zb" generate --checkpoint ck --prompt "ROMEO:" --tokens 30 --temperature 0 -q >zb.txt ||
  fail "generate"
"$py" - hf zb.txt "$data" <<'EOF'
import sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import transformers
hf, want, data = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
tok = AutoTokenizer.from_pretrained(hf)
model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
model.eval()
# the tokenizer: zbsched's ids (sorted bytes of the text), a passage both ways
chars = sorted(set(data))
passage = data[1000:1400]
ids = tok(passage).input_ids
assert ids == [chars.index(c) for c in passage], "tokenizer ids differ from zbsched's"
assert tok.decode(ids) == passage, "decode does not give the passage back"
prompt = tok("ROMEO:", return_tensors="pt").input_ids
with torch.no_grad():
    out = model.generate(prompt, max_new_tokens=30, do_sample=False)
got = tok.decode(out[0])
ok = got == want
print(f"transformers {transformers.__version__}, torch {torch.__version__}: "
      f"{got!r} vs zbsched {want!r}: {'match' if ok else 'MISMATCH'}")
sys.exit(0 if ok else 1)
EOF
