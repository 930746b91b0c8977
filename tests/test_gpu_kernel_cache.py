"""GPU: the kernel cache shared by two graphs of the same structure (and loaded from its JSON into a fresh cache),
device properties read from device 0, written as JSON and rebuilt from it, and a graph planned ahead of time from
them (no handle on the operation graph, heuristics and engines given the DEVICEPROP) executing correctly, directly
and after serialize / deserialize. Fresh seeded inputs, NaN-poisoned outputs, float64 references; the trace shows
what reached cuDNN. Build times are logged, never asserted.

Set CUDNN_PY_DEVICEPROP_JSON_OUT=<path> to keep device 0's DEVICEPROP JSON (a CPU machine cannot make one)."""
from __future__ import annotations

import json
import os
import time

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import trace, tracing, versions

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT
MODES = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
TOL = 5e-3  # fp16 output rounding


def matmul_relu(batch, m, k, n, **options):
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, **options)
    A = g.tensor([batch, m, k], name="A", data_type=H)
    B = g.tensor([batch, k, n], name="B", data_type=H)
    C = g.relu(g.matmul(A, B), name="act").set_output(True).set_name("C")
    return g, A, B, C


def cuda_ready():
    """A current CUDA context before planning starts: the plans are compiled and loaded in this process, so
    whichever test runs first must not depend on an earlier one having touched the GPU."""
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()


def run_and_check(g, A, B, C, seed, handle=None):
    """Execute with fresh inputs and a poisoned output; the relative error against float64."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(A.get_dim(), generator=gen, device="cuda").half()
    b = torch.randn(B.get_dim(), generator=gen, device="cuda").half()
    c = torch.full(C.get_dim(), float("nan"), device="cuda", dtype=torch.half)
    ws = torch.full((max(1, g.get_workspace_size()),), 255, device="cuda", dtype=torch.uint8)
    g.execute({A: a, B: b, C: c}, ws, handle=handle)
    torch.cuda.synchronize()
    assert torch.isfinite(c).all(), "not every output element was written (NaN poison left)"
    ref = torch.relu(a.double() @ b.double())
    return ((c.double() - ref).norm() / ref.norm()).item()


def cache_entries(text):
    """The kernels listed in a kernel cache JSON (cuDNN 9.28 writes them under "kernel_cache"); None if the
    loaded cuDNN's schema has no such list."""
    doc = json.loads(text)
    entries = doc.get("kernel_cache")
    return len(entries) if isinstance(entries, list) else None


def sets(recs, attr):
    return [r for r in recs if r["fn"] == "cudnnBackendSetAttribute" and r.get("attr") == attr]


def assert_cache_holds_kernels(kc, bound_json):
    """The cache after a plan was built. A plan of a precompiled engine (cuBLASLt: the operation graph's JSON says
    "finalizeMode": "BLAS_MATMUL") compiles no kernel, so there is nothing to cache: the rest of the test cannot
    run then: None."""
    text = kc.serialize()
    assert text
    n = cache_entries(text)
    if n == 0 and '"BLAS_MATMUL"' in text:
        return None
    if n is not None:
        assert n >= 1, f"no kernel in the cache after building a plan: {text[:300]}"
    else:
        assert len(text) > len(bound_json), "the cache JSON did not grow when a plan was built"
    if versions.runtime_version() >= 92700:
        assert kc.size() >= 1
    return text


def test_kernel_cache_is_shared_by_two_graphs_of_the_same_structure(tmp_path):
    cuda_ready()
    kc = cudnn.create_kernel_cache()
    path = tmp_path / "t.jsonl"
    with tracing(str(path)):
        g1, *t1 = matmul_relu(2, 64, 32, 16, kernel_cache=kc)
        assert g1.is_dynamic_shape_enabled
        g1.build_operation_graph()
        bound = kc.serialize()  # bound to the first graph, no plan yet
        t0 = time.perf_counter()
        g1.build(MODES)
        first_ms = (time.perf_counter() - t0) * 1e3
        assert run_and_check(g1, *t1, seed=1) < TOL
        after_first = assert_cache_holds_kernels(kc, bound)
        g2, *t2 = matmul_relu(3, 128, 32, 16, kernel_cache=kc)  # same ops, other dims
        t0 = time.perf_counter()
        g2.build(MODES)
        second_ms = (time.perf_counter() - t0) * 1e3
        assert run_and_check(g2, *t2, seed=2) < TOL
    print(f"kernel cache: first graph built in {first_ms:.1f} ms, the second in {second_ms:.1f} ms; cache JSON "
          f"{len(after_first or '')} -> {len(kc.serialize())} chars")
    recs = trace.calls(path)
    plan_sets = sets(recs, "CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE")
    assert plan_sets and all(r["status"] == 0 and r["values"][0]["desc"] == kc.descriptor.id for r in plan_sets)
    built = [r for r in recs if r["fn"] == "cudnnBackendFinalize" and r["kind"] ==
             "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR" and r["status"] == 0]
    assert len(plan_sets) >= len(built) >= 2  # every plan of both graphs got the cache
    assert len([r for r in recs if r["fn"] == "cudnnBackendCreateDescriptor" and r["kind"] ==
                "CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR"]) == 1
    if after_first is None:
        pytest.skip(f"cuDNN {versions.runtime_version()} ran this graph on a precompiled cuBLASLt engine: no kernel "
                    "to cache (every plan did get the cache, and both graphs' results were checked)")


def test_kernel_cache_loaded_from_json_serves_a_new_graph():
    cuda_ready()
    kc = cudnn.create_kernel_cache()
    g1, *t1 = matmul_relu(2, 64, 32, 16, kernel_cache=kc)
    g1.build(MODES)
    assert run_and_check(g1, *t1, seed=3) < TOL
    text = kc.serialize()
    loaded = cudnn.create_kernel_cache()
    loaded.deserialize(text)
    n = cache_entries(text)
    if n is not None:
        assert cache_entries(loaded.serialize()) == n  # (none where a cuBLASLt engine compiled nothing)
    with pytest.raises(RuntimeError, match="not empty"):
        loaded.deserialize(text)
    g2, *t2 = matmul_relu(4, 96, 32, 16, kernel_cache=loaded)
    g2.build(MODES)
    assert g2.session._kernel_cache() is loaded.descriptor
    assert run_and_check(g2, *t2, seed=4) < TOL


def device_properties_round_trip():
    dp = cudnn.create_device_properties(0)
    text = dp.serialize()
    doc = json.loads(text)
    assert isinstance(doc, dict) and doc, text[:300]
    out = os.environ.get("CUDNN_PY_DEVICEPROP_JSON_OUT")
    if out:
        with open(out, "w") as f:
            f.write(text)
    again = cudnn.create_device_properties(text)
    assert again.device_id is None and dp.device_id == 0
    assert json.loads(again.serialize()).keys() == doc.keys()
    return again


def test_device_properties_from_device_0_round_trip_through_json():
    cuda_ready()
    dp = device_properties_round_trip()
    assert "from JSON" in repr(dp)


def sm_version():
    major, minor = torch.cuda.get_device_capability(0)
    return major * 10 + minor


def test_a_graph_planned_ahead_of_time_executes(tmp_path, handle):
    cuda_ready()
    dp = device_properties_round_trip()  # rebuilt from the JSON, as on a build machine without the GPU
    path = tmp_path / "t.jsonl"
    with tracing(str(path)):
        g, *t = matmul_relu(2, 64, 32, 16, device_property=dp, sm_version=sm_version())
        g.build(MODES)
    s = g.session
    assert s.lowered.handle is None and s.device is None
    recs = trace.calls(path)
    assert not sets(recs, "CUDNN_ATTR_OPERATIONGRAPH_HANDLE") and not sets(recs, "CUDNN_ATTR_EXECUTION_PLAN_HANDLE")
    heur = [r for r in recs if r["fn"] == "cudnnBackendCreateDescriptor" and r["kind"] ==
            "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR"]
    props = sets(recs, "CUDNN_ATTR_ENGINEHEUR_DEVICEPROP")
    # one query: A returned configs and built, so FALLBACK waits until needed (plans/heuristics.py, deferred modes)
    assert len(props) == len(heur) == 1 and s._deferred is not None and len(MODES) == 2
    assert all(r["status"] == 0 and r["values"][0]["desc"] == dp.descriptor.id for r in props)
    assert run_and_check(g, *t, seed=5, handle=handle) < TOL
    # the classic AoT flow: serialize where it was planned, deserialize with a handle where it runs
    blob = g.serialize()
    fresh = cudnn.pygraph()
    fresh.deserialize(handle, blob)
    gen = torch.Generator(device="cuda").manual_seed(6)
    a = torch.randn(2, 64, 32, generator=gen, device="cuda").half()
    b = torch.randn(2, 32, 16, generator=gen, device="cuda").half()
    c = torch.full((2, 64, 16), float("nan"), device="cuda", dtype=torch.half)
    ws = torch.empty(max(1, fresh.get_workspace_size()), device="cuda", dtype=torch.uint8)
    fresh.execute({"A": a, "B": b, "C": c}, ws, handle=handle)
    torch.cuda.synchronize()
    ref = torch.relu(a.double() @ b.double())
    assert torch.isfinite(c).all() and ((c.double() - ref).norm() / ref.norm()).item() < TOL


def test_an_explicit_engine_planned_ahead_of_time_gets_the_device_properties(tmp_path, handle):
    cuda_ready()
    probe, *_ = matmul_relu(2, 64, 32, 16)
    probe.build(MODES)
    engine, knobs = probe.get_engine_and_knobs_at_index(probe.session.candidate)
    dp = cudnn.create_device_properties(0)
    path = tmp_path / "t.jsonl"
    with tracing(str(path)):
        g, *t = matmul_relu(2, 64, 32, 16, device_property=dp)
        g.create_execution_plan(engine, knobs)
        g.check_support()
        g.build_plans()
    props = sets(trace.calls(path), "CUDNN_ATTR_ENGINE_DEVICEPROP")
    assert props and all(r["status"] == 0 and r["values"][0]["desc"] == dp.descriptor.id for r in props)
    assert run_and_check(g, *t, seed=7, handle=handle) < TOL
