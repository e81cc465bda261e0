#!/usr/bin/env bash
# docs-examples.sh: runs the documented examples whose output the docs quote
# and compares the two, so that the docs cannot drift silently from the
# program.  Part of `make test` (meson test `docs_examples`).
#
#   tools/docs-examples.sh ZBSCHED [FILE.md ...]           check (exit 1 on drift)
#   tools/docs-examples.sh --update ZBSCHED [FILE.md ...]  rewrite the quoted output
#
# Without files it reads README.md and docs/*.md.  An example is an HTML
# comment naming a shell command, followed by a fenced block holding its
# output; a first line starting with "$ " in the block is the command as a
# reader types it and is not compared:
#
#   <!-- docs-example: zbsched search --mem 1G 2>&1 >/dev/null -->
#   ```
#   zbsched: nothing fits in 1.0 GB per GPU; ...
#   ```
#
# The command runs under bash in a fresh empty directory with `zbsched` on
# PATH (the program under test); only its stdout is compared, so an example
# quoting stderr says 2>&1 in its command.  Its exit status is ignored.
# After a change to what the program prints, run with --update, read the
# diff (git diff docs/), and commit it with the change.
set -u
update=0
if [ "${1:-}" = --update ]; then update=1; shift; fi
[ $# -ge 1 ] || { echo "usage: $0 [--update] ZBSCHED [FILE.md ...]" >&2; exit 2; }
exe=$1; shift
[ -x "$exe" ] || { echo "docs-examples: $exe is not an executable" >&2; exit 2; }
exe=$(cd "$(dirname "$exe")" && pwd)/$(basename "$exe")
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -eq 0 ]; then set -- "$root/README.md" "$root"/docs/*.md; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
ln -s "$exe" "$work/bin/zbsched"

checked=0 drifted=0
for md in "$@"; do
  rm -f "$work"/ex_*
  # Split the file's examples into ex_N.cmd and ex_N.want.
  awk -v dir="$work" '
    function flush_block() { close(want) }
    state == 0 && /^<!-- docs-example: .* -->[ \t]*$/ {
      n++; cmd = $0
      sub(/^<!-- docs-example: /, "", cmd); sub(/ -->[ \t]*$/, "", cmd)
      printf "%s\n", cmd > (dir "/ex_" n ".cmd"); close(dir "/ex_" n ".cmd")
      want = dir "/ex_" n ".want"; printf "" > want
      state = 1; next
    }
    state == 1 && /^```/ { state = 2; first = 1; next }
    state == 1 && !/^[ \t]*$/ { printf "%s:%d: docs-example marker not followed by a fenced block\n", FILENAME, NR > "/dev/stderr"; exit 3 }
    state == 2 && /^```/ { flush_block(); state = 0; next }
    state == 2 { if (first && /^\$ /) { first = 0; next } first = 0; print > want }
    END { if (state != 0) { printf "%s: unterminated docs-example block\n", FILENAME > "/dev/stderr"; exit 3 } }
  ' "$md" || exit 2
  for c in "$work"/ex_*.cmd; do
    [ -e "$c" ] || continue
    k=${c%.cmd}
    cmd=$(cat "$c")
    rm -rf "$work/run"; mkdir "$work/run"
    (cd "$work/run" && PATH="$work/bin:$PATH" LC_ALL=C bash -c "$cmd" </dev/null >"$k.got" 2>/dev/null)
    checked=$((checked + 1))
    if ! cmp -s "$k.want" "$k.got"; then
      if [ $update -eq 1 ]; then
        echo "docs-examples: updating ${md#$root/}: $cmd"
      else
        drifted=$((drifted + 1))
        echo "docs-examples: ${md#$root/}: \`$cmd\` prints something else than the docs quote:"
        diff -u --label docs "$k.want" --label program "$k.got" | sed 's/^/  /'
      fi
    fi
  done
  if [ $update -eq 1 ] && ls "$work"/ex_*.cmd >/dev/null 2>&1; then
    # Rewrite every block with what its command printed.
    awk -v dir="$work" '
      state == 0 && /^<!-- docs-example: .* -->[ \t]*$/ { n++; state = 1; print; next }
      state == 1 && /^```/ { state = 2; first = 1; print; next }
      state == 2 && /^```/ {
        got = dir "/ex_" n ".got"
        while ((getline line < got) > 0) print line
        close(got); state = 0; print; next
      }
      state == 2 { if (first && /^\$ /) print; first = 0; next }
      { print }
    ' "$md" > "$work/new.md" && cat "$work/new.md" > "$md"
  fi
done
if [ $update -eq 1 ]; then
  echo "docs-examples: $checked examples run; review with git diff"
  exit 0
fi
echo "docs-examples: $checked examples, $drifted drifted"
[ $drifted -eq 0 ]
