#!/bin/bash
# Errata probe: every case of probe.py in both libraries (official 1.32 wheel vs cudnn_py), each in its own
# subprocess (timeout 60 s), 12 at a time; then cudnn_py replaying the official's engine/knobs where they differ;
# then widen-unaligned-n (an illegal memory access can kill its process) last, alone.
# Run on a GPU machine:  bash fuzz/errata_probe/run.sh   (env: PY=python3, JOBS=12, OUT=<dir>, WHEELS=<dir holding the
# official nvidia_cudnn_frontend-1.32 and looseversion wheels>, default .conformance/whl)
# DRY=1: build/validate only (CPU check; the official runs deviceless with the test libcuda stub, see probe.py)
set -u
cd "$(dirname "$0")/../.."
REPO=$PWD
PY=${PY:-python3}
JOBS=${JOBS:-12}
OUT=${OUT:-/tmp/probe_out}
P=fuzz/errata_probe/probe.py
WHEELS=${WHEELS:-.conformance/whl}
mkdir -p "$OUT/runs"
site=$(mktemp -d)
T0=$(date +%s)
$PY -m pip install -q --no-index --no-deps --target "$site" "$WHEELS"/nvidia_cudnn_frontend*.whl \
    "$WHEELS"/looseversion*.whl || { echo "wheel install failed"; exit 1; }
echo "official wheel in $site ($(( $(date +%s) - T0 )) s)"

one() {  # one LIB CASE TAG [extra args]: writes $OUT/runs/TAG.json (one JSON line), stderr to TAG.err
  lib=$1; case=$2; tag=$3; shift 3
  if [ "$lib" = official ]; then pp=$site; else pp=$REPO; fi
  PYTHONPATH=$pp timeout 60 $PY $P --lib $lib --case $case ${DRY:+--dry} "$@" >"$OUT/runs/$tag.out" 2>"$OUT/runs/$tag.err"
  rc=$?
  line=$(grep '^{' "$OUT/runs/$tag.out" | tail -1)
  if [ -z "$line" ]; then
    err=$(tail -c 600 "$OUT/runs/$tag.err" | tr '\n\t\r"\\' "    /")
    line="{\"lib\": \"$lib\", \"case\": \"$case\", \"outcome\": \"died\", \"rc\": $rc, \"reason\": \"$err\"}"
  fi
  echo "$line" >"$OUT/runs/$tag.json"
}
export -f one
export OUT P PY REPO site DRY=${DRY:-}

CASES=$($PY $P --list | grep -v '^widen-unaligned-n$')
for c in $CASES; do echo "official $c official.$c"; echo "ours $c ours.$c"; done |
  xargs -P "$JOBS" -L 1 bash -c 'one "$0" "$1" "$2"'
echo "phase 1 done ($(( $(date +%s) - T0 )) s)"

# phase 2: ours with the official's engine and knobs, for single-graph cases where the two differ
$PY - "$OUT" $CASES >"$OUT/replays.txt" <<'PYEOF'
import json, sys, os
out = sys.argv[1]
for c in sys.argv[2:]:
    try:
        off = json.load(open(f"{out}/runs/official.{c}.json"))
        ours = json.load(open(f"{out}/runs/ours.{c}.json"))
    except Exception:
        continue
    go, gu = off.get("graphs", {}).get("main", {}), ours.get("graphs", {}).get("main", {})
    eo, eu = go.get("engine"), gu.get("engine")
    if isinstance(eo, dict) and eo != eu:
        os.makedirs(f"{out}/replays", exist_ok=True)
        json.dump(eo, open(f"{out}/replays/{c}.json", "w"))
        print(c, f"@{out}/replays/{c}.json")
PYEOF
while read -r c rp; do echo "$c $rp"; done <"$OUT/replays.txt" |
  xargs -r -P "$JOBS" -L 1 bash -c 'one ours "$0" "ours_replay.$0" --replay "$1"'
echo "phase 2 done: $(wc -l <"$OUT/replays.txt") replay(s) ($(( $(date +%s) - T0 )) s)"

# phase 3: the case that can kill the CUDA context, alone and last
one official widen-unaligned-n official.widen-unaligned-n
one ours widen-unaligned-n ours.widen-unaligned-n
echo "phase 3 done ($(( $(date +%s) - T0 )) s)"

cat "$OUT"/runs/*.json >"$OUT/probe.jsonl"
$PY fuzz/errata_probe/table.py "$OUT/probe.jsonl"
echo "all JSON lines: $OUT/probe.jsonl  (stderr of each run: $OUT/runs/*.err)  total $(( $(date +%s) - T0 )) s"
rm -rf "$site"
