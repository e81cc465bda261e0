#!/bin/bash
# test_check_layers.sh: tools/check-layers.py finds what it promises on a
# tree built here, and passes what it should:
#   - two files that call each other (only nm sees it: each declares the
#     other's function itself) are a circle;
#   - two headers that include each other are a circle;
#   - a chain a -> b -> c is not, nor a public header that declares what
#     two files define while one of them calls the other;
#   - a file over an enforced limit fails, over a reported one does not.
# Usage: test_check_layers.sh CHECK_LAYERS_PY
set -u
check=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# make_tree DIR: a source tree with compile_commands.json over its .c files
compile_tree() {
    local dir=$1 first=1
    mkdir -p "$dir/build"
    printf '[' > "$dir/build/compile_commands.json"
    for c in $(cd "$dir" && find src runtime -name '*.c' 2>/dev/null | sort); do
        local o="$dir/build/$(echo "$c" | tr / _).o"
        cc -c -I"$dir" "$dir/$c" -o "$o" 2>&1 || fail "cannot compile $c"
        [ $first = 1 ] || printf ',' >> "$dir/build/compile_commands.json"
        first=0
        printf '{"directory": "%s", "file": "%s", "output": "%s"}' \
            "$dir/build" "../$c" "$o" >> "$dir/build/compile_commands.json"
    done
    printf ']\n' >> "$dir/build/compile_commands.json"
}

# calls both ways, no include between them
d=$tmp/calls; mkdir -p $d/src
printf 'int b_fn(void);\nint a_fn(void) { return 1; }\nint a_use(void) { return b_fn(); }\n' > $d/src/a.c
printf 'int a_fn(void);\nint b_fn(void) { return a_fn() + 1; }\n' > $d/src/b.c
compile_tree $d
out=$("$check" $d $d/build 2>&1) && fail "calls both ways passed: $out"
echo "$out" | grep -q 'circle of 2 files: src/a.c, src/b.c' || fail "no circle named: $out"
echo "$out" | grep -q 'src/a.c -> src/b.c: calls b_fn' || fail "no call named: $out"
# without the objects (no build directory) the same tree looks clean
"$check" $d > /dev/null || fail "includes alone saw a circle in the calls tree"

# headers that include each other
d=$tmp/includes; mkdir -p $d/runtime
printf '#pragma once\n#include "runtime/q.h"\n' > $d/runtime/p.h
printf '#pragma once\n#include "runtime/p.h"\n' > $d/runtime/q.h
printf '#include "runtime/p.h"\nint p_fn(void) { return 0; }\n' > $d/runtime/p.c
compile_tree $d
out=$("$check" $d $d/build 2>&1) && fail "includes both ways passed: $out"
echo "$out" | grep -q 'runtime/p.h -> runtime/q.h: includes runtime/q.h' || fail "no include named: $out"

# a chain, and a large file under a reported and an enforced limit
d=$tmp/chain; mkdir -p $d/src $d/runtime
printf 'int c_fn(void);\nint b_fn(void) { return c_fn(); }\n' > $d/src/b.c
printf 'int b_fn(void);\nint a_fn(void) { return b_fn(); }\n' > $d/src/a.c
printf 'int c_fn(void) { return 2; }\n' > $d/src/c.c
# a family header (as gen.h or search.h): both files include it, b calls c
printf 'int b_fn(void);\nint c_fn(void);\n' > $d/src/fam.h
printf '#include "src/fam.h"\nint f1(void) { return c_fn(); }\n' > $d/src/f1.c
printf '#include "src/fam.h"\nint f2(void) { return 3; }\n' > $d/src/fam.c
{ echo 'int big(void) {'; for i in $(seq 1 1000); do echo "    ;"; done; echo '    return 0; }'; } > $d/runtime/big.c
compile_tree $d
out=$("$check" $d $d/build --report runtime/=1000 2>&1) || fail "a chain failed: $out"
echo "$out" | grep -q 'runtime/big.c: 1002 lines.*reported, not enforced' || fail "size not reported: $out"
out=$("$check" $d $d/build --enforce runtime/=1000 2>&1) && fail "an enforced size passed: $out"
"$check" $d $d/build --enforce runtime/=1002 > /dev/null || fail "a file at the limit failed"
echo "ok: circles by calls and by includes found, chains and sizes as told"
