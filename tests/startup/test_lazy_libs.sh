#!/bin/bash
# tests/startup/test_lazy_libs.sh: zbsched links neither GLPK, Graphviz nor
# MPI (issue 28: mapping them cost every command ~1.9 ms of start-up), and
# loads each only in the command that uses it:
#   - the program's NEEDED entries (readelf -d) name none of them;
#   - `gen zb-auto` maps none of them at run time (LD_DEBUG=libs), while
#     an ILP that builds a model does map GLPK and `render --format dag`
#     Graphviz, so the lazy paths are really taken;
#   - a missing library or module is one line on stderr naming it, a
#     non-zero exit and no output file ($ZBSCHED_GLPK, $ZBSCHED_GRAPHVIZ,
#     $ZBSCHED_MPI_MODULE point the loaders at a missing file).
# Usage: test_lazy_libs.sh ZBSCHED yes|no (whether the build has MPI)
set -u
ZB=${1:?program}
HAVE_MPI=${2:?yes or no}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. NEEDED entries
needed=$(readelf -d "$ZB" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || fail "readelf -d $ZB lists no NEEDED entry"
for lib in libglpk libgvc libcgraph libcdt libpathplan libmpi libopen-rte libopen-pal libhwloc libevent; do
    if echo "$needed" | grep -q "^$lib"; then
        fail "zbsched links $lib again (NEEDED: $(echo $needed))"
    fi
done

# 2. what is mapped at run time
LD_DEBUG=libs "$ZB" gen zb-auto -p 8 -m 16 --mem-limit 16 -o "$T/a.json" 2> "$T/a.libs" \
    || fail "gen zb-auto failed: $(grep -v ':' "$T/a.libs" | head -1)"
if grep -Eq "calling init: .*(libglpk|libgvc|libcgraph|libmpi)" "$T/a.libs"; then
    fail "gen zb-auto maps a library it never calls: $(grep -Eo '(libglpk|libgvc|libcgraph|libmpi)[^ ]*' "$T/a.libs" | sort -u | tr '\n' ' ')"
fi
ilp="gen ilp -p 3 -m 6 --mem-limit 4 --time-limit 5 -q"
LD_DEBUG=libs "$ZB" $ilp -o "$T/i.json" 2> "$T/i.libs" || fail "$ilp failed"
grep -q "calling init: .*libglpk" "$T/i.libs" || fail "$ilp did not load GLPK"
"$ZB" gen 1f1b -p 2 -m 2 -o "$T/s.json" || fail "gen 1f1b failed"
LD_DEBUG=libs "$ZB" render "$T/s.json" --format dag -o "$T/d.svg" 2> "$T/d.libs" \
    || fail "render --format dag failed"
grep -q "calling init: .*libgvc" "$T/d.libs" || fail "render --format dag did not load Graphviz"
grep -q "<svg" "$T/d.svg" || fail "render --format dag wrote no SVG"

# 3. missing: one line naming it, non-zero exit, no file
# expect_refusal NAME WORD OUTFILE CMD...: CMD exits non-zero with one stderr
# line containing WORD, and OUTFILE (if not -) does not exist
expect_refusal() {
    local name=$1 word=$2 out=$3
    shift 3
    "$@" > /dev/null 2> "$T/err"
    local rc=$?
    if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then
        fail "$name: exit $rc, expected a clean failure"
    elif [ "$(grep -c . "$T/err")" != 1 ] || ! grep -q -- "$word" "$T/err"; then
        fail "$name: stderr is not one line naming $word: $(cat "$T/err")"
    elif [ "$out" != - ] && [ -e "$out" ]; then
        fail "$name: wrote $out anyway"
    else
        echo "ok: $name: $(cat "$T/err")"
    fi
}
expect_refusal "no GLPK" "GLPK (/nonexistent/libglpk.so.40)" "$T/i2.json" \
    env ZBSCHED_GLPK=/nonexistent/libglpk.so.40 "$ZB" $ilp -o "$T/i2.json"
expect_refusal "no Graphviz" "Graphviz (/nonexistent/libgvc.so.6)" "$T/d2.svg" \
    env ZBSCHED_GRAPHVIZ=/nonexistent/libgvc.so.6 "$ZB" render "$T/s.json" --format dag -o "$T/d2.svg"
if [ "$HAVE_MPI" = yes ]; then
    # as rank 0 of 2 of an Open MPI launch, without mpirun: the module is
    # loaded before any MPI call, so its absence is all this reaches
    expect_refusal "no MPI module" "ZBSCHED_MPI_MODULE=/nonexistent/zbsched_mpi.so" - \
        env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 \
        ZBSCHED_MPI_MODULE=/nonexistent/zbsched_mpi.so "$ZB" run "$T/s.json" --steps 1
    # a file that is not the module: dlerror's reason, naming the file
    expect_refusal "not an MPI module" "cannot load the MPI module $T/s.json" - \
        env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 \
        ZBSCHED_MPI_MODULE="$T/s.json" "$ZB" run "$T/s.json" --steps 1
fi
[ $fails -eq 0 ] || exit 1
echo "ok: zbsched links no GLPK, Graphviz or MPI and loads each on demand"
