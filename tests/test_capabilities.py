"""`python -m cudnn_py info` predicts what works here (#40): running on a GPU, deviceless validation and the float64
reference engine, each found by trying it, so the answer follows the machine (here: no GPU; deviceless validation
only where a libcuda.so.1 loads, real or the tests' stand-in)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from cudnn_py import capabilities
from cudnn_py.backend.loader import driver_library_missing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _info_json(prelude: str = "") -> dict:
    """``info --json`` in a fresh process (after ``prelude``), its stderr checked for cuDNN's loader line."""
    code = f"{prelude}\nimport sys\nfrom cudnn_py.__main__ import main\nsys.exit(main(['info', '--json']))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stderr
    assert "Unable to load any of" not in r.stderr, r.stderr  # the trial keeps cuDNN's loader line to itself
    return json.loads(r.stdout)["capabilities"]


def _no_driver_library_in_a_fresh_process() -> bool:
    """This process may hold the tests' stand-in (conftest): ask a fresh one whether libcuda.so.1 loads."""
    r = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"], capture_output=True)
    return r.returncode != 0


def test_info_json_capabilities_here():
    caps = _info_json()
    assert set(caps) == {"gpu_execution", "deviceless_validation", "reference_engine"}
    assert caps["reference_engine"] == {"works": True, "reason": caps["reference_engine"]["reason"]}
    assert "ReferenceEngine" in caps["reference_engine"]["reason"]
    if _no_driver_library_in_a_fresh_process():  # no driver: no GPU, and deviceless validation on the stand-in
        assert caps["gpu_execution"]["works"] is False and "libcuda.so.1" in caps["gpu_execution"]["reason"]
        assert caps["deviceless_validation"]["works"] is True, caps
        assert "stand-in" in caps["deviceless_validation"]["reason"]


def test_without_the_stand_in_deviceless_validation_says_what_is_missing(monkeypatch):
    if not _no_driver_library_in_a_fresh_process():
        import pytest

        pytest.skip("a real libcuda.so.1 loads here")
    monkeypatch.setenv("CUDNN_PY_DRIVER_STANDIN", "0")
    caps = _info_json()
    assert caps["deviceless_validation"]["works"] is False
    assert "libcuda.so.1" in caps["deviceless_validation"]["reason"]


def test_deviceless_validation_is_tried_not_assumed():
    """With a libcuda.so.1 loaded first (here the tests' stand-in, loaded as a real driver library would be), the
    same question answers yes, naming the library."""
    caps = _info_json("import sys\nsys.path.insert(0, '.')\nfrom tests.support.libcuda_stub import ensure_driver\n"
                      "ensure_driver()")
    assert caps["deviceless_validation"]["works"] is True, caps
    reason = caps["deviceless_validation"]["reason"]
    assert "libcuda.so.1 from " in reason or "stand-in" in reason, reason


def test_gpu_execution_reasons():
    no_gpu = {"cuda_driver_api": None, "nvidia_driver": None, "gpus": [], "missing": "none (0 devices)"}
    unknown = {**no_gpu, "missing": "unknown (cuda-bindings not installed: x)"}
    assert capabilities.gpu_execution(unknown).works is None
    c = capabilities.gpu_execution(no_gpu)
    assert c.works is False and c.line().startswith("no (")
    from cudnn_py.backend import driver_standin

    if not driver_library_missing() and driver_standin.loaded() is None:  # a real driver that shows no GPU
        assert c.reason == "no GPU: 0 devices"
    else:
        assert c.reason == "no NVIDIA driver here (libcuda.so.1 does not load), so no GPU"
