"""Import time of cudnn_py against the official module (nvidia-cudnn-frontend's `cudnn`), in fresh interpreters.

Each run is a new process that times, with ``time.perf_counter``, ``import <module>`` (the interpreter's own start-up
is not counted) and then the first read of ``<module>.pygraph`` and ``<module>.data_type`` (what a first graph
needs: cudnn_py imports its graph layer then; the official module has it already). The processes alternate
between the two sides; the figures are the medians over ``-n`` runs of each.

    python benchmarks/import_time.py [-n 21] [--ours PYTHON] [--official PYTHON] [--no-compile]

``--ours`` (or ``CUDNN_PY_PYTHON``) is the interpreter importing cudnn_py from this checkout (default: this one);
``--official`` (or ``CUDNN_OFFICIAL_PYTHON``) one where ``import cudnn`` works (left out: cudnn_py alone).
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

CHILD = """import time
t0 = time.perf_counter()
import {module} as m
t1 = time.perf_counter()
m.pygraph; m.data_type
t2 = time.perf_counter()
import json, sys
print(json.dumps({{"import_ms": (t1 - t0) * 1e3, "first_use_ms": (t2 - t1) * 1e3,
                  "python": sys.version.split()[0], "file": m.__file__,
                  "dont_write_bytecode": sys.flags.dont_write_bytecode}}))
"""


def one(python: str, module: str, cwd: str) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if module == "cudnn_py":
        env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([python, "-c", CHILD.format(module=module)], capture_output=True, text=True, cwd=cwd,
                       env=env, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{python} -c 'import {module}' failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=21, help="runs of each side (default 21)")
    ap.add_argument("--ours", default=os.environ.get("CUDNN_PY_PYTHON", sys.executable))
    ap.add_argument("--official", default=os.environ.get("CUDNN_OFFICIAL_PYTHON"))
    ap.add_argument("--json", help="also write the runs and medians here")
    ap.add_argument("--no-compile", action="store_true",
                    help="leave the checkout's bytecode as it is (by default it is compiled first, as pip does when it "
                         "installs the wheel: without it, a machine with PYTHONDONTWRITEBYTECODE set compiles every "
                         "module in every process)")
    a = ap.parse_args()
    if not a.no_compile:
        import compileall

        compileall.compile_dir(str(ROOT / "cudnn_py"), quiet=1)
    sides = [("cudnn_py", a.ours, "cudnn_py")] + ([("official", a.official, "cudnn")] if a.official else [])
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in sides}
    with tempfile.TemporaryDirectory() as cwd:  # nothing importable in the working directory
        for name, python, module in sides:  # one warm-up each: bytecode caches written, files in the page cache
            one(python, module, cwd)
        for i in range(a.n):
            for name, python, module in (sides if i % 2 == 0 else sides[::-1]):
                runs[name].append(one(python, module, cwd))
    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("import_ms", "first_use_ms")}
           for name, rs in runs.items()}
    for name, python, module in sides:
        r0 = runs[name][0]
        m = med[name]
        print(f"{name:9s} import {module}: median {m['import_ms']:7.1f} ms (min {min(r['import_ms'] for r in runs[name]):.1f},"
              f" max {max(r['import_ms'] for r in runs[name]):.1f}); + first pygraph/data_type read"
              f" {m['first_use_ms']:7.1f} ms = {m['import_ms'] + m['first_use_ms']:.1f} ms"
              f"   [Python {r0['python']}, {r0['file']}"
              f"{', PYTHONDONTWRITEBYTECODE' if r0.get('dont_write_bytecode') else ''}]")
    if a.official:
        ours, off = med["cudnn_py"], med["official"]
        print(f"ratio cudnn_py / official: import {ours['import_ms'] / off['import_ms']:.2f}x;"
              f" import + first use {(ours['import_ms'] + ours['first_use_ms']) / (off['import_ms'] + off['first_use_ms']):.2f}x"
              f"   ({a.n} fresh processes each)")
    if a.json:
        Path(a.json).write_text(json.dumps({"n": a.n, "medians": med, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
