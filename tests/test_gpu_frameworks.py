"""GPU: cudnn_py without torch, and the debugging tools on a real build.

- In child processes where torch cannot be imported (``sys.modules["torch"] = None``): cupy arrays, cuda.core
  Buffers and int pointers, each with workspace=None (from cupy's pool / cuda.core, on the stream execute runs
  on) and with a workspace of the caller's (tests/support/torch_free.py), against float64 numpy references with
  poisoned outputs; and the examples, torch-free ones with torch (and cupy, for cuda.core) blocked.
- In this process: the log of a real build (heuristics, plans, default plan, workspace, cache hits), explain with
  engine configs and knobs, and `info` on the GPU.
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cudnn_py as cudnn

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
F, H = cudnn.data_type.FLOAT, cudnn.data_type.HALF


def installed(module: str) -> bool:
    """Whether ``module`` imports, asked of a child process (importing cupy here would hide what we test)."""
    r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, timeout=300)
    return r.returncode == 0


def child(code: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout)


def blocked(*modules: str) -> str:
    return "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)


def torch_free_case(case: str) -> dict:
    r = child(blocked("torch") + f"from tests.support.torch_free import main\nmain({case!r})\n")
    assert r.returncode == 0, f"{case} failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_example(name: str, *args: str, block: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    path = str(EXAMPLES / name)
    code = blocked(*block) + (f"import runpy\nsys.argv = [{path!r}, *{list(args)!r}]\n"
                              f"runpy.run_path({path!r}, run_name='__main__')\n")
    return child(code)


# ------------------------------------------------------------------------------------------------- torch-free
def test_cupy_operands_without_torch():
    if not installed("cupy"):
        pytest.skip("cupy is not installed")
    result = torch_free_case("cupy")
    assert result["errors"] and all(e < 1e-2 for e in result["errors"].values()), result
    if result["workspace_plan"] is not None:
        assert result["allocators"] == ["cupy"], result


def test_cuda_core_buffers_without_torch():
    result = torch_free_case("cuda_core")
    assert len(result["errors"]) >= 2 and all(e < 1e-2 for e in result["errors"].values()), result
    assert "the buffer has 16" in result["refused"]
    if result["workspace_plan"] is not None:
        assert result["allocators"] == ["cuda.core"], result


def test_int_pointers_without_torch():
    result = torch_free_case("int_pointers")
    assert len(result["errors"]) >= 2 and all(e < 1e-2 for e in result["errors"].values()), result
    if result["workspace_plan"] is not None:
        assert result["allocators"] == ["cuda.core"], result


# ------------------------------------------------------------------------------------------------- examples
def example_ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    assert "relative error against float64" in r.stdout and "TOO LARGE" not in r.stdout, r.stdout
    return r.stdout


def test_first_graph_with_only_cuda_core():
    out = example_ok(run_example("first_graph.py", block=("torch", "cupy")))
    assert "operands from cuda.core" in out


def test_first_graph_without_torch_uses_cupy():
    if not installed("cupy"):
        pytest.skip("cupy is not installed")
    assert "operands from cupy" in example_ok(run_example("first_graph.py", block=("torch",)))


def test_first_graph_prefers_torch():
    if not installed("torch"):
        pytest.skip("torch is not installed")
    assert "operands from torch" in example_ok(run_example("first_graph.py"))


@pytest.mark.parametrize("framework", ["cuda.core", "cupy"])
def test_first_graph_explicit_framework_without_torch(framework):
    if framework == "cupy" and not installed("cupy"):
        pytest.skip("cupy is not installed")
    out = example_ok(run_example("first_graph.py", "--framework", framework, block=("torch",)))
    assert f"operands from {framework}" in out


def test_with_cuda_core_example_without_torch_or_cupy():
    out = example_ok(run_example("with_cuda_core.py", block=("torch", "cupy")))
    assert "cuda.core Buffers:" in out and "int pointers:" in out


def test_with_cupy_example_without_torch():
    if not installed("cupy"):
        pytest.skip("cupy is not installed")
    example_ok(run_example("with_cupy.py", block=("torch",)))


def test_with_torch_example():
    if not installed("torch"):
        pytest.skip("torch is not installed")
    example_ok(run_example("with_torch.py"))


# ------------------------------------------------------------------------------------------------- logging, explain
def matmul_graph():
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    A = g.tensor(dim=[1, 64, 8192], stride=[64 * 8192, 8192, 1], data_type=H, name="A")
    B = g.tensor(dim=[1, 8192, 64], stride=[8192 * 64, 64, 1], data_type=H, name="B")
    C = g.matmul(A, B)
    C.set_output(True).set_data_type(F).set_name("C")
    return g, A, B, C


def test_a_real_build_and_execute_log(caplog):
    from cuda.core import Buffer, Device

    g, A, B, C = matmul_graph()
    with caplog.at_level(logging.DEBUG, logger="cudnn_py"):
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        device = Device(0)
        device.set_current()
        stream = device.create_stream()
        rng = np.random.default_rng(1)
        a = rng.standard_normal((1, 64, 8192)).astype(np.float16)
        b = rng.standard_normal((1, 8192, 64)).astype(np.float16)
        out = np.full((1, 64, 64), np.nan, dtype=np.float32)
        bufs = []
        for host in (a, b, out):
            buf = device.allocate(host.nbytes, stream=stream)
            buf.copy_from(Buffer.from_handle(host.ctypes.data, host.nbytes, owner=host), stream=stream)
            bufs.append(buf)
        stream.sync()
        for _ in range(2):
            g.execute({A: bufs[0], B: bufs[1], C: bufs[2]}, workspace=None)
        device.sync()
    bufs[2].copy_to(Buffer.from_handle(out.ctypes.data, out.nbytes, owner=out), stream=stream)
    stream.sync()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.isfinite(out).all() and np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2
    msgs = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"graph {g.name!r} validated in ") for m in msgs), msgs
    assert any("heuristics in " in m and "CUDNN_HEUR_MODE_A: " in m for m in msgs), msgs
    assert any(" built in " in m and "workspace" in m for m in msgs), msgs
    assert any(m.startswith(f"graph {g.name!r}: default plan is ") for m in msgs), msgs
    assert any(m.startswith("variant pack cache miss") for m in msgs), msgs
    if g.get_workspace_size() > 0:
        assert any(m.startswith(f"workspace: {g.get_workspace_size()} bytes") for m in msgs), msgs


def test_explain_after_a_real_build_shows_configs_knobs_plans_and_the_default():
    g, A, B, C = matmul_graph()
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    doc = json.loads(g.explain("json"))
    assert doc["phase"] == "EXECUTABLE" and doc["engine_configs"]
    default = doc["default_plan"]
    assert doc["engine_configs"][default]["plan"] == "built"
    assert doc["default_plan_name"] == g.get_plan_name_at_index(default)
    assert {m["mode"] for m in doc["heuristics"]} >= {"CUDNN_HEUR_MODE_A", "CUDNN_HEUR_MODE_FALLBACK"}
    for c in doc["engine_configs"]:
        assert all(k.startswith("CUDNN_KNOB_TYPE_") or k.isdigit() for k in c["knobs"]), c
        assert "workspace" in c and "numerical_notes" in c
    text = g.explain()
    assert f"default plan: {default} ({doc['default_plan_name']})" in text and "knobs {" in text
    assert "<- default" in text
    assert 'cluster_o { label="backend operation graph' in g.explain("dot")


def test_info_on_the_gpu_names_its_architecture():
    r = child("from cudnn_py.__main__ import main\nmain(['info'])\n")
    assert r.returncode == 0, r.stderr
    assert re.search(r"run graphs on a GPU: yes \(GPU 0: .* \(sm\d+\)", r.stdout), r.stdout
    assert re.search(r"GPU 0: .* \(compute capability \d+\.\d+\)", r.stdout), r.stdout
    assert "frameworks (versions from package metadata" in r.stdout
