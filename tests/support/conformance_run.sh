#!/bin/bash
# The official frontend's own tests against cudnn_py on a GPU machine, in two processes (~6 minutes on an H200),
# compared with the official module's outcomes. Needs .conformance/ beside the checkout's files (made once, on a
# machine with the package registry, by the conformance suite's prepare.sh; git ignores it: carry it along).
#   bash tests/support/conformance_run.sh            # writes mhas.xml, rest.xml, compare.txt into $OUT (default .)
set -u
cd "$(dirname "$0")/../.."
OUT=$(realpath "${OUT:-.}")
export OUT
grep test_mhas.py .conformance/cases.txt > .conformance/a.txt
grep -v test_mhas.py .conformance/cases.txt > .conformance/b.txt
( bash .conformance/run.sh cudnn_py .conformance/a.txt mhas ) &
( bash .conformance/run.sh cudnn_py .conformance/b.txt rest ) &
wait
python3 .conformance/compare.py .conformance/reference/official-1.32.0_h200_cudnn9.19.xml "$OUT/mhas.xml" \
  "$OUT/rest.xml" --list > "$OUT/compare.txt"
grep -v "^    " "$OUT/compare.txt" | cut -c1-300 | head -40
