"""benchmarks/hot_path.py --fake on the CPU: it runs (its fake torch tensor must offer what the execute fast path
reads; it lacked is_contiguous once and the benchmark failed unnoticed) and prints its JSON line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.libcuda_stub import ensure_driver

ROOT = Path(__file__).resolve().parent.parent


# ensure_driver(), not real_libcuda_available(): once conftest has loaded the stub under the soname libcuda.so.1, a
# load of that name finds the stub, and the test skipped everywhere (the benchmark broke unnoticed, twice)
@pytest.mark.skipif(ensure_driver() == "real", reason="--fake is for machines without a CUDA driver (it refuses here)")
def test_the_fake_hot_path_benchmark_runs():
    env = {k: v for k, v in os.environ.items() if k != "CUDNN_PY_REPLAY"}  # (conftest turns replay off)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "hot_path.py"), "--fake"], capture_output=True,
                       text=True, timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    names = ("fake_torch_us", "fake_int_ptrs_us", "noop_backend_us", "fake_replayed_torch_us",
             "fake_replayed_int_ptrs_us")  # (the replayed branch's figures assert that the branch was taken)
    assert set(names) <= set(figures), figures
    assert all(figures[k] > 0 for k in names)
