#!/bin/bash
# The A/B half of a device check (device_check.sh runs the suites): this tree against an older cudnn_py on one
# quiet machine, one step after another: host time per SDPA execute (benchmarks/host_ab.py), the build time of a key
# built before (benchmarks/build_ab.py), benchmarks/run.py's host and build figures for this tree then the old, and
# the cold start of a fresh process (benchmarks/cold_start.py, sdpa_fwd and matmul) for this tree then the old.
# Needs .conformance/ (the official wheel) and .ab/ (cudnn_py_old: the old package; oldrepo: the old tree's
# cudnn_py and benchmarks, for cold_start). Summaries go into $OUT.
#     bash tests/support/device_ab.sh
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=$(realpath "${OUT:-.}")
W=$(mktemp -d)
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .conformance/whl/*.whl
t0=$(date +%s)
PYTHONPATH=$site:$PWD OLD=.ab OUT=$W ROUNDS=${ROUNDS:-15} timeout 70 python3 benchmarks/host_ab.py > "$OUT/host_ab.txt" 2>&1
PYTHONPATH=$site:$PWD OLD=.ab OUT=$W ROUNDS=${ROUNDS_BUILD:-41} timeout 100 python3 benchmarks/build_ab.py \
  > "$OUT/build_ab.txt" 2>&1
oldroot=$(mktemp -d); ln -s "$PWD/.ab/cudnn_py_old" "$oldroot/cudnn_py"
for r in new old; do
  if [ $r = new ]; then pp=$site:$PWD; else pp=$site:$oldroot; fi
  echo "== $r"
  ( cd benchmarks && PYTHONPATH=$pp timeout 120 python3 run.py --skip-large --skip-convnorm --skip-attention \
      --out "$W/run_$r" 2>&1 | tail -22 )
done > "$OUT/run_py.txt" 2>&1
for r in new old; do
  if [ $r = new ]; then root=$PWD; else root=$PWD/.ab/oldrepo; fi
  [ -d "$root/benchmarks" ] || continue  # (no old tree's benchmarks: the new tree's cold start alone)
  echo "== $r"
  ( cd "$root" && PYTHONPATH=$site timeout 110 python3 benchmarks/cold_start.py --processes 2 \
      --cases sdpa_fwd,matmul --out "$W/cold_$r" 2>&1 | tail -14 )
done > "$OUT/cold_start.txt" 2>&1
echo "a/b: $(( $(date +%s) - t0 )) s" > "$OUT/ab_env.txt"
tar czf "$OUT/ab_logs.tgz" -C "$W" .
cat "$OUT/ab_env.txt"; tail -6 "$OUT/host_ab.txt"; grep "total ms" "$OUT/build_ab.txt"
grep "^==\|µs per execute\|build ms" "$OUT/run_py.txt"; cat "$OUT/cold_start.txt"
