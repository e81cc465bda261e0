#!/usr/bin/env bash
# test_docs_words.sh: advice in the docs that is known to mislead users.
#
#   mpirun -q   hides Open MPI's own launch errors ("There are not enough
#               slots available", an unreachable host): the job exits 1
#               without a word (issue 29.8).  No command line in README.md
#               or docs/*.md may use it, and docs/mpi.md must say what to
#               do instead.
#
# Usage: test_docs_words.sh SOURCE_ROOT
set -u
root=${1:?usage: $0 SOURCE_ROOT}
fail=0
# A command line: optional prompt or indentation, then mpirun and, among
# its options, -q or --quiet.
if grep -nE '^[[:space:]$]*mpirun([[:space:]]+-[^[:space:]]+([[:space:]]+[^-[:space:]][^[:space:]]*)?)*[[:space:]]+(-q|--quiet)([[:space:]]|$)' \
        "$root/README.md" "$root"/docs/*.md; then
  echo "docs_words: the lines above run mpirun -q, which hides Open MPI's launch errors" >&2
  fail=1
fi
if ! grep -q "Leave out mpirun's \`-q\`" "$root/docs/mpi.md"; then
  echo "docs_words: docs/mpi.md no longer says to leave out mpirun's -q" >&2
  fail=1
fi
[ $fail -eq 0 ] && echo "docs_words: 1 passed, 0 failed"
exit $fail
