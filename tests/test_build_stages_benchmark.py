"""benchmarks/build_stages.py on the CPU: the module imports without torch or a GPU, its trace summary counts the
backend calls a real (deviceless) SDPA validate makes, and its table and medians are the figures it was given."""
from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import cudnn_py as cudnn
from cudnn_py.backend import descriptor, trace
from cudnn_py.ir.layout import row_major_strides

_ROOT = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", _ROOT / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stages = _load("build_stages")
attention = _load("attention")


def test_the_trace_summary_counts_the_descriptors_a_validate_creates():
    case = {**attention.CASES["causal"], "b": 1, "h_q": 2, "h_kv": 2, "s_q": 128, "s_kv": 128, "d": 64}
    layouts = {n: (dims, row_major_strides(dims)) for n, dims in attention.shapes(case).items()}
    g, _ = attention.forward_graph(cudnn, None, case, layouts)
    first = next(descriptor._ids)
    buf = io.StringIO()
    with trace.tracing(buf):
        g.validate()
    created = next(descriptor._ids) - first - 1  # ids handed out in between
    calls = stages.in_cudnn_ms(buf.getvalue())
    assert created > 10 and calls["cudnnBackendCreateDescriptor"][0] == created
    assert calls["cudnnBackendFinalize"][0] >= 1 and all(ms >= 0 for _, ms in calls.values())


def test_medians_and_table():
    builds = [dict.fromkeys(stages.STAGES, 1.0), dict.fromkeys(stages.STAGES, 3.0), dict.fromkeys(stages.STAGES, 2.0)]
    builds[2]["build_plans"] = 10.0
    s = stages.summary(builds)
    assert s["build_plans"] == 3.0 and s["validate"] == 2.0
    assert s["total"] == 15.0  # the median build (1*5, 3*5, 2*4 + 10), not the sum of the stages' medians (11)
    text = stages.table({"fwd_causal": {"official": {**s, "total": 10.0}, "cudnn_py": {**s, "total": 12.0}}})
    assert "| fwd_causal | cudnn_py / official | 1.20x |" in text
