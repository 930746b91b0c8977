"""GPU: y = a + b built from raw descriptors only (tensors, pointwise op, operation graph, heuristics, engine
config, plan, variant pack, execute), checked against numpy in float64; then the same with tracing on."""
from __future__ import annotations

import numpy as np
import pytest

from cudnn_py import backend
from cudnn_py.backend import Descriptor

pytestmark = pytest.mark.gpu
N = (4, 32, 64)


def _tensor(uid):
    return (Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR").set("CUDNN_ATTR_TENSOR_DATA_TYPE", "CUDNN_DATA_FLOAT")
            .set("CUDNN_ATTR_TENSOR_DIMENSIONS", list(N)).set("CUDNN_ATTR_TENSOR_STRIDES", [N[1] * N[2], N[2], 1])
            .set("CUDNN_ATTR_TENSOR_UNIQUE_ID", uid).set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", 16).finalize())


def _run_add(handle, stream_obj):
    torch = pytest.importorskip("torch")
    a_t, b_t, y_t = _tensor(1), _tensor(2), _tensor(3)
    pw = (Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR").set("CUDNN_ATTR_POINTWISE_MODE", "CUDNN_POINTWISE_ADD")
          .set("CUDNN_ATTR_POINTWISE_MATH_PREC", "CUDNN_DATA_FLOAT").finalize())
    op = (Descriptor("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR")
          .set("CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR", pw).set("CUDNN_ATTR_OPERATION_POINTWISE_XDESC", a_t)
          .set("CUDNN_ATTR_OPERATION_POINTWISE_BDESC", b_t).set("CUDNN_ATTR_OPERATION_POINTWISE_YDESC", y_t).finalize())
    # the handle tells heuristics which device to rank for (without it cuDNN 9.19 returns no configs)
    og = (Descriptor("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR").set("CUDNN_ATTR_OPERATIONGRAPH_OPS", [op])
          .set("CUDNN_ATTR_OPERATIONGRAPH_HANDLE", handle).finalize())
    heur = (Descriptor("CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR").set("CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH", og)
            .set("CUDNN_ATTR_ENGINEHEUR_MODE", "CUDNN_HEUR_MODE_A").finalize())
    cfgs = heur.get("CUDNN_ATTR_ENGINEHEUR_RESULTS")
    assert cfgs, "heuristics returned no engine config for a plain add"
    plan = None
    for cfg in cfgs:
        try:
            plan = Descriptor("CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR").set(
                "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG", cfg).finalize()
            break
        except backend.CudnnError:
            continue
    assert plan is not None
    ws_size = plan.get("CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE")
    a = torch.randn(N, device="cuda", dtype=torch.float32)
    b = torch.randn(N, device="cuda", dtype=torch.float32)
    y = torch.full(N, float("nan"), device="cuda")  # poisoned
    ws = torch.empty(max(ws_size, 1), dtype=torch.uint8, device="cuda")
    vp = (Descriptor("CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR").set("CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS", [1, 2, 3])
          .set("CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS", [a.data_ptr(), b.data_ptr(), y.data_ptr()])
          .set("CUDNN_ATTR_VARIANT_PACK_WORKSPACE", ws.data_ptr()).finalize())
    backend.set_stream(handle=handle, stream=stream_obj)
    assert backend.get_stream(handle) == stream_obj.cuda_stream
    status = backend.api.lib().cudnnBackendExecute(int(handle), plan.ptr, vp.ptr)
    assert status == 0, backend.get_last_error_string()
    stream_obj.synchronize()
    ref = a.double().cpu().numpy() + b.double().cpu().numpy()
    out = y.double().cpu().numpy()
    assert np.isfinite(out).all()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-6


def test_add_with_raw_descriptors(handle):
    torch = pytest.importorskip("torch")
    _run_add(handle, torch.cuda.Stream())


def test_add_with_raw_descriptors_traced(handle, tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "trace.jsonl"
    with backend.tracing(str(path)):
        _run_add(handle, torch.cuda.Stream())
    recs = backend.trace.calls(path)
    fns = [r["fn"] for r in recs]
    for fn in ("cudnnBackendCreateDescriptor", "cudnnBackendSetAttribute", "cudnnBackendFinalize",
               "cudnnBackendGetAttribute", "cudnnSetStream"):
        assert fn in fns
    results = [r for r in recs if r.get("attr") == "CUDNN_ATTR_ENGINEHEUR_RESULTS" and r["count"] > 0]
    assert results and results[0]["returned"] >= 1
    ptrs = next(r for r in recs if r.get("attr") == "CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS")
    assert all(p.startswith("0x") for p in ptrs["values"]) and ptrs["count"] == 3
