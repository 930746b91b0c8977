"""What vetting libcudnn costs a process (issue #29): ``vet()`` of the library cuda.pathfinder would load, first
(a trial in a child process), then again in the same process (the per-file verdict), and in a fresh process that
finds the verdict an earlier one kept in the cache directory. Runs on the CPU (the test-only libcuda stand-in,
``tests/support/libcuda_stub.py``, where there is no driver library).

Each round is two fresh processes over a new empty cache directory: the first runs the trial (and vets the file
again), the second finds the verdict the first one kept there. Figures are medians over ``-n`` rounds,
in milliseconds. tests/test_loader.py checks the behaviour (one trial per file, none for a kept verdict); how
long each takes is measured here.

    python benchmarks/vetting.py [-n 5] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """import json, sys, time
sys.path.insert(0, {root!r})
from tests.support.libcuda_stub import ensure_driver
ensure_driver()
from cudnn_py.backend import loader, vetting
p = loader._pathfinder_candidate()
t0 = time.perf_counter(); v1 = loader.vet(p); t1 = time.perf_counter(); v2 = loader.vet(p); t2 = time.perf_counter()
assert v1.ok and v1 is v2, (v1, v2)
print(json.dumps({{"first_ms": (t1 - t0) * 1e3, "again_ms": (t2 - t1) * 1e3, "kept": vetting.remembered}}))
"""


def one(env: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT))], capture_output=True, text=True,
                       env={**os.environ, **env}, timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"vetting child failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    rows: dict[str, list[float]] = {"trial (first vet)": [], "same file again": [], "kept verdict (fresh process)": []}
    for _ in range(args.n):
        with tempfile.TemporaryDirectory() as cache:
            env = {"CUDNN_PY_CACHE": "1", "CUDNN_PY_CACHE_DIR": cache, "CUDNN_PY_LIBRARY_VETTED": ""}
            trial, kept = one(env), one(env)
        if trial["kept"] or not kept["kept"]:
            raise SystemExit(f"unexpected: the first process found a kept verdict, or the second none ({trial}, {kept})")
        rows["trial (first vet)"].append(trial["first_ms"])
        rows["same file again"].append(trial["again_ms"])
        rows["kept verdict (fresh process)"].append(kept["first_ms"])
    medians = {k: statistics.median(v) for k, v in rows.items()}
    for k, v in medians.items():
        print(f"{k:32s} {v:10.3f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": args.n, "median_ms": medians, "runs_ms": rows}, indent=1))


if __name__ == "__main__":
    main()
