"""`python -m cudnn_py trace summary FILE` and `python -m cudnn_py explain SCRIPT` on the CPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import trace, tracing
from cudnn_py.tools import trace_summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F, H = cudnn.data_type.FLOAT, cudnn.data_type.HALF


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "cudnn_py", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_trace_summary_counts_calls_phases_and_failures_with_cudnns_message(tmp_path):
    path = tmp_path / "t.jsonl"
    with tracing(str(path)):
        g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
        a, b = g.tensor([1, 8, 16], name="a"), g.tensor([1, 16, 4], name="b")
        g.relu(g.matmul(a, b)).set_output(True)
        g.validate()
        bad = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
        x = bad.tensor([3, 1, 8, 16], name="x")
        bad.matmul(x, bad.tensor([5, 16, 4], name="w")).set_output(True)  # cuDNN 9.28 rejects this matmul
        with pytest.raises(cudnn.backend.CudnnError):
            bad.validate()
        # a failure cuDNN explains: a ragged-offset tensor whose dims do not fit
        off = _tensor(100, [3, 1, 1, 1], "CUDNN_DATA_INT32").finalize()
        with pytest.raises(cudnn.backend.BadParamError):
            _tensor(101, [3, 1, 1, 1], "CUDNN_DATA_HALF").set("CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC", off).finalize()
    summary = trace_summary.summarize(trace.calls(str(path)))
    assert summary["by_function"]["cudnnBackendSetAttribute"] > 10
    assert summary["by_kind"]["CUDNN_BACKEND_TENSOR_DESCRIPTOR"] >= 3 and summary["us_by_phase"]["build"] > 0
    failure, explained = summary["failures"]
    assert failure["fn"] == "cudnnBackendFinalize" and failure["kind"] == "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR"
    assert failure["status"] == "CUDNN_STATUS_NOT_SUPPORTED"
    assert explained["status"] == "CUDNN_STATUS_BAD_PARAM" and "ragged" in explained["message"]  # cuDNN's words
    out = cli("trace", "summary", str(path))
    assert out.returncode == 0, out.stderr
    assert "time by phase (ms): build" in out.stdout and "failures: 2" in out.stdout and "cuDNN says:" in out.stdout
    as_json = cli("trace", "summary", str(path), "--json")
    assert json.loads(as_json.stdout)["failures"][0]["fn"] == "cudnnBackendFinalize"


def _tensor(uid, dims, dt):
    strides, acc = [1] * len(dims), 1
    for i in range(len(dims) - 1, -1, -1):
        strides[i], acc = acc, acc * dims[i]
    return (cudnn.backend.Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR").set("CUDNN_ATTR_TENSOR_DATA_TYPE", dt)
            .set("CUDNN_ATTR_TENSOR_DIMENSIONS", dims).set("CUDNN_ATTR_TENSOR_STRIDES", strides)
            .set("CUDNN_ATTR_TENSOR_UNIQUE_ID", uid).set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", 16))


def test_trace_summary_names_the_call_a_crashed_process_died_in(tmp_path):
    path = tmp_path / "crash.jsonl"
    code = textwrap.dedent(f"""
        import ctypes, sys
        sys.path.insert(0, {ROOT!r})
        from tests.support.libcuda_stub import ensure_driver
        ensure_driver()
        from cudnn_py.backend import Descriptor, trace
        d = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
        trace.begin("cudnnBackendFinalize", desc=d.id, kind=d.kind.name)
        ctypes.string_at(0)
    """)
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "CUDNN_PY_TRACE": str(path)},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    out = cli("trace", "summary", str(path))
    assert "calls that never returned" in out.stdout and "cudnnBackendFinalize" in out.stdout.split("never returned")[1]


def test_explain_command_runs_a_script_and_explains_its_graphs(tmp_path):
    script = tmp_path / "make_graph.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        from tests.support.libcuda_stub import ensure_driver
        ensure_driver()
        import cudnn_py as cudnn
        F, H = cudnn.data_type.FLOAT, cudnn.data_type.HALF
        g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
        a, b = g.tensor([1, 8, 16], name="a"), g.tensor([1, 16, 4], name="b")
        g.relu(g.matmul(a, b, name="mm"), name="act").set_output(True)
    """))
    out = cli("explain", str(script))
    assert out.returncode == 0, out.stderr
    assert "IR as built:" in out.stdout and "mm: matmul" in out.stdout and "OPERATIONGRAPH_DESCRIPTOR" in out.stdout
    dot = cli("explain", str(script), "--graph", "g", "--format", "dot")
    assert dot.stdout.startswith("digraph cudnn_py {")
    missing = cli("explain", str(script), "--graph", "nope")
    assert missing.returncode == 2 and "no pygraph named 'nope'" in missing.stderr
