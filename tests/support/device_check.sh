#!/bin/bash
# One device call that checks a tree end to end (about 8 minutes on an H200): the official frontend's test suite
# and our whole suite side by side, then, on a quiet machine, the A/B half against an older cudnn_py when
# .ab/cudnn_py_old exists (tests/support/device_ab.sh: host time per SDPA execute, the build time of a key built
# before, benchmarks/run.py's figures for both trees, the cold start), and the import time against the official
# module. Needs .conformance/ (made by the conformance suite's prepare.sh; carry it, and .ab). Summaries go straight
# into $OUT (they come back even if the call is cut short), the logs into $OUT/logs.tgz.
#     bash tests/support/device_check.sh
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=$(realpath "${OUT:-.}")
W=$(mktemp -d)
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .conformance/whl/*.whl
python3 -m compileall -q cudnn_py >/dev/null 2>&1  # as pip compiles it: some machines set PYTHONDONTWRITEBYTECODE
# the tree's own fingerprint: the copy's .git can be older than its files (compare with the same line run here)
{ echo "tree $(find cudnn_py -name '*.py' | LC_ALL=C sort | xargs cat | sha1sum | cut -c1-12)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import cudnn_py, torch; print('cudnn', cudnn_py.backend_version(), 'torch', torch.__version__)"; } \
  > "$OUT/env.txt" 2>&1
t0=$(date +%s)
( OUT=$W FE_TIMEOUT=${FE_TIMEOUT:-380} bash tests/support/conformance_run.sh > "$OUT/conformance_summary.txt" 2>&1 ) &
( OUT=$W SUITE_TIMEOUT=${SUITE_TIMEOUT:-380} bash tests/support/run_halves.sh > "$OUT/suite_summary.txt" 2>&1 ) &
wait
echo "conformance + suite: $(( $(date +%s) - t0 )) s" >> "$OUT/env.txt"
if [ -d .ab/cudnn_py_old ]; then  # the A/B half (host, warm build, run.py, cold start): its own script
  OUT=$OUT bash tests/support/device_ab.sh > "$OUT/ab_summary.txt" 2>&1
fi
official=$(mktemp -d)/venv
python3 -m venv --system-site-packages "$official" >/dev/null && \
  "$official/bin/python" -m pip install -q --no-index --no-deps .conformance/whl/nvidia_cudnn_frontend*.whl && \
  timeout 40 python3 benchmarks/import_time.py -n 11 --official "$official/bin/python" > "$OUT/import_time.txt" 2>&1
echo "all: $(( $(date +%s) - t0 )) s" >> "$OUT/env.txt"
tar czf "$OUT/logs.tgz" -C "$W" .
cat "$OUT/env.txt" "$OUT/conformance_summary.txt" "$OUT/suite_summary.txt"
cat "$OUT/ab_summary.txt" 2>/dev/null
cat "$OUT/import_time.txt"
