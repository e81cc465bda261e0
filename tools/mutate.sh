#!/usr/bin/env bash
# tools/mutate.sh: how strong is the test suite?  Plants each bug of a list
# (tools/mutations.txt) one at a time in a scratch copy of the tree, builds,
# runs the suite, and reports which planted bugs ("mutants") the suite
# missed.  Run it before a release, not in CI: a full pass takes tens of
# minutes on two cores.
#
#   tools/mutate.sh [-l LIST] [-d DIR] [ID...]
#
#   -l LIST  the list of mutants (default tools/mutations.txt; format in
#            tools/mutate_apply.py)
#   -d DIR   scratch directory (default ${TMPDIR:-/tmp}/zbsched-mutate);
#            it gets a copy of the working tree (tracked and untracked,
#            not ignored, files), a build directory and report.txt
#   ID...    run only these mutants
#
# Environment: MUTATE_TIMEOUT_MULT (meson's --timeout-multiplier, default 1).
#
# How: the copy is built once (plain, -Dcuda=disabled; ccache when meson
# finds it) and the unmutated suite must pass.  For each mutant the script
# restores the files the previous one changed, applies the edit, rebuilds
# the same build directory (only the changed file recompiles and its
# dependants relink), runs the mutant's own suite first and then the
# others, and stops at the first failing test (meson's --maxfail 1).  A
# mutant is KILLED when a test fails or times out, SURVIVED when all pass,
# BROKEN when it does not compile, STALE when its text does not occur
# exactly once in its file, SKIPPED when its file is absent.  The score is
# killed / (killed + survived).  A mutant that was not applied (stale,
# skipped, broken) is no measurement at all: the run lists every one and
# fails, so that a score is never reported over planted bugs that were
# never planted.  The real tree is never modified.
#
# Exit status: 0 when every mutant was applied and killed; 1 when every
# one was applied and some survived; 2 when some were stale, skipped or
# broken, or on a setup error.
set -euo pipefail

usage() { sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
list=$root/tools/mutations.txt
work=${TMPDIR:-/tmp}/zbsched-mutate
while getopts "l:d:h" opt; do
    case $opt in
    l) list=$(realpath "$OPTARG") ;;
    d) work=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
only=("$@")
mult=${MUTATE_TIMEOUT_MULT:-1}
apply=$root/tools/mutate_apply.py

[ -f "$list" ] || { echo "mutate: no list $list" >&2; exit 2; }
case $(realpath -m "$work") in
"$root" | "$root"/*) echo "mutate: the scratch directory must lie outside the tree" >&2; exit 2 ;;
esac
mkdir -p "$work"
work=$(realpath "$work")
tree=$work/tree
build=$work/build
report=$work/report.txt
log=$work/log

# The copy: the working tree as it is now (uncommitted edits included).
# Files get the current time (tar -m), not their original one: a build
# directory kept from an earlier run holds objects of that run's last
# mutant, newer than the original sources, which ninja would keep.
# Tests find the data set at $ZB_SOURCE_ROOT/../shared, so the copy gets
# the same neighbour.
rm -rf "$tree" "$log" "$work/orig"
mkdir -p "$tree" "$log" "$work/orig"
(cd "$root" && git ls-files -z -c -o --exclude-standard | xargs -0 -r sh -c \
    'for f; do [ -e "$f" ] || [ -L "$f" ] && printf "%s\0" "$f"; done' sh |
    tar --null -T - -cf -) | tar -xmf - -C "$tree"
if [ -e "$root/../shared" ]; then
    ln -sfn "$(realpath "$root/../shared")" "$work/shared"
fi

# The list and its reader are read from copies too, so that edits made in
# the tree while a run goes on do not mix into it.
cp "$list" "$work/list.txt"
cp "$apply" "$work/mutate_apply.py"
list_name=$(basename "$list")
list=$work/list.txt
apply=$work/mutate_apply.py

MUTATE_TREE="$tree" python3 "$apply" list "$list" > "$work/mutants.tsv" ||
    { echo "mutate: cannot read the list $list_name" >&2; exit 2; }
for id in "${only[@]}"; do
    cut -f1 "$work/mutants.tsv" | grep -qxF "$id" ||
        { echo "mutate: no mutant '$id' in $list_name" >&2; exit 2; }
done

say() { printf '%s\n' "$*" | tee -a "$report"; }
: > "$report"
say "mutation run $(date -u '+%Y-%m-%d %H:%M UTC') of $(git -C "$root" rev-parse --short HEAD)$([ -z "$(git -C "$root" status --porcelain)" ] || echo '+edits') with $list_name"

if [ ! -f "$build/build.ninja" ]; then
    nice meson setup "$build" "$tree" -Dcuda=disabled > "$log/setup.txt" 2>&1 ||
        { echo "mutate: meson setup failed, see $log/setup.txt" >&2; exit 2; }
fi
nice ninja -C "$build" > "$log/build.txt" 2>&1 ||
    { echo "mutate: the unmutated tree does not build, see $log/build.txt" >&2; exit 2; }
nice meson test -C "$build" --no-rebuild --timeout-multiplier "$mult" > "$log/baseline.txt" 2>&1 ||
    { echo "mutate: the unmutated suite fails, see $log/baseline.txt" >&2; exit 2; }

# Runs suite selection "$@" (meson test arguments); on failure prints the
# names of the failing tests and returns 1.
run_tests() {
    local out=$1
    shift
    if nice meson test -C "$build" --no-rebuild --maxfail 1 --timeout-multiplier "$mult" "$@" > "$out" 2>&1; then
        return 0
    fi
    grep -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|ERROR)' "$out" |
        sed -E 's/^ *[0-9]+\/[0-9]+ +zbsched:([^ ]+) \/ ([^ ]+) +([A-Z]+).*/\1\/\2 (\3)/' | paste -sd ' ' - |
        grep . || echo "a failing test (see $out)"
    return 1
}

declare -a restore=()
killed=0 survived=0 skipped=0 stale=0 broken=0
survivors=()
unapplied=() # stale, skipped and broken ids: each fails the run
t_start=$(date +%s)
while IFS=$'\t' read -r -u 3 id suite path skip desc; do
    if [ ${#only[@]} -gt 0 ] && ! printf '%s\n' "${only[@]}" | grep -qxF "$id"; then
        continue
    fi
    # Undo the previous mutant.  A fresh mtime (no cp -p) makes ninja
    # recompile the restored file; ccache makes that cheap.
    for f in "${restore[@]}"; do
        cp "$work/orig/$f" "$tree/$f"
    done
    restore=()
    if [ "$skip" != "-" ]; then
        say "SKIPPED  $id: $skip"
        skipped=$((skipped + 1))
        unapplied+=("$id")
        continue
    fi
    mkdir -p "$work/orig/$(dirname "$path")"
    [ -f "$work/orig/$path" ] || cp "$tree/$path" "$work/orig/$path"
    set +e
    python3 "$apply" apply "$list" "$id" "$tree" 2> "$log/$id.apply.txt"
    rc=$?
    set -e
    if [ $rc -ne 0 ]; then
        say "STALE    $id: $(cat "$log/$id.apply.txt")"
        stale=$((stale + 1))
        unapplied+=("$id")
        continue
    fi
    restore=("$path")
    t0=$(date +%s)
    if ! nice ninja -C "$build" > "$log/$id.build.txt" 2>&1; then
        say "BROKEN   $id: does not compile, see $log/$id.build.txt"
        broken=$((broken + 1))
        unapplied+=("$id")
        continue
    fi
    if failed=$(run_tests "$log/$id.test1.txt" --suite "$suite") &&
       failed=$(run_tests "$log/$id.test2.txt" --no-suite "$suite"); then
        say "SURVIVED $id ($suite, $(($(date +%s) - t0)) s): $desc"
        survived=$((survived + 1))
        survivors+=("$id")
    else
        say "KILLED   $id ($suite, $(($(date +%s) - t0)) s) by $failed"
        killed=$((killed + 1))
    fi
done 3< "$work/mutants.tsv"
for f in "${restore[@]}"; do
    cp "$work/orig/$f" "$tree/$f"
done

ran=$((killed + survived))
say ""
if [ $ran -gt 0 ]; then
    say "score: $killed of $ran killed ($(awk "BEGIN { printf \"%.1f\", 100 * $killed / $ran }")%)," \
        "$survived survived, $skipped skipped, $stale stale, $broken broken, $(($(date +%s) - t_start)) s"
else
    say "score: no mutant ran ($skipped skipped, $stale stale, $broken broken)"
fi
[ ${#survivors[@]} -eq 0 ] || say "survivors: ${survivors[*]}"
[ ${#unapplied[@]} -eq 0 ] ||
    say "NOT APPLIED (the run fails; fix or remove them in $list_name): ${unapplied[*]}"
say "report: $report"
[ ${#unapplied[@]} -eq 0 ] || exit 2
[ $survived -eq 0 ] || exit 1
exit 0
