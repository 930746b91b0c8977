#!/usr/bin/env bash
# The whole test suite in two pytest processes at once (the files split by size, alternating), for a machine with
# a GPU where one process would outlast a command's time limit. Logs: $OUT/suite_a.log, $OUT/suite_b.log (OUT
# defaults to the current folder); SUITE_TIMEOUT seconds per half (default 420). Run from the repository root:
#     PYTHONPATH=. bash tests/support/run_halves.sh
set -o pipefail
OUT=${OUT:-.}
export PYTHONUNBUFFERED=1
A=(); B=(); i=0
for f in $(ls -S tests/test_*.py); do if ((i % 2 == 0)); then A+=("$f"); else B+=("$f"); fi; i=$((i + 1)); done
t0=$(date +%s)
timeout "${SUITE_TIMEOUT:-420}" python3 -m pytest -q -p no:cacheprovider -rfEsx "${A[@]}" > "$OUT/suite_a.log" 2>&1 &
timeout "${SUITE_TIMEOUT:-420}" python3 -m pytest -q -p no:cacheprovider -rfEsx "${B[@]}" > "$OUT/suite_b.log" 2>&1 &
wait
echo "suite: $(( $(date +%s) - t0 )) s"
for h in a b; do echo "== half $h"; grep -E "^(FAILED|ERROR|XFAIL)" "$OUT/suite_$h.log" | head -30
  echo "graphs refused, reported as skip / xfail (tests/support/refusals.py): $(grep -c ': refused on cuDNN ' "$OUT/suite_$h.log")"
  tail -1 "$OUT/suite_$h.log"; done
