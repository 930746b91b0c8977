"""GPU cases run by tests/test_gpu_frameworks.py in a child process where torch cannot be imported
(``sys.modules["torch"] = None``): cupy arrays, cuda.core Buffers and int pointers, each with ``workspace=None`` and
with a workspace of the caller's, against a float64 numpy reference, outputs poisoned (NaN) before every run.

    python -c "import sys; sys.modules['torch'] = None; from tests.support.torch_free import main; main('cupy')"

Prints one JSON line: what ran, each relative error, the workspace allocators used. Any failed check raises.
"""
from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

import cudnn_py as cudnn

TOLERANCE = 1e-2  # half inputs, float accumulation and output
M, K, N = 64, 8192, 64  # a long K: split-K engines, which need workspace, rank among the configs


def matmul_graph():
    """C[1, M, N] (float) = A[1, M, K] @ B[1, K, N] (half), every plan built; the index of a built plan that needs
    workspace (None when none does) and of the default plan."""
    half, flt = cudnn.data_type.HALF, cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=half, intermediate_data_type=flt, compute_data_type=flt)
    A = g.tensor(dim=[1, M, K], stride=[M * K, K, 1], data_type=half, name="A")
    B = g.tensor(dim=[1, K, N], stride=[K * N, N, 1], data_type=half, name="B")
    C = g.matmul(A, B)
    C.set_output(True).set_data_type(flt).set_name("C")
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.B, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans(cudnn.build_plan_policy.ALL)
    with_ws = None
    for i in range(g.get_execution_plan_count()):
        try:
            if g.get_workspace_size_plan_at_index(i) > 0:
                with_ws = i
                break
        except RuntimeError:  # that plan did not build
            continue
    return g, A, B, C, with_ws


def host_inputs(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((1, M, K)).astype(np.float16)
    b = rng.standard_normal((1, K, N)).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    got = got.astype(np.float64)
    if not np.isfinite(got).all():
        raise AssertionError("output has NaN/Inf: not every element was written")
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def allocators(g) -> list[str]:
    """Where every workspace buffer cudnn_py allocated for this graph came from ("cupy", "cuda.core", "torch")."""
    mods = {type(entry[2]).__module__ for entry in g.session.executor._workspaces._buffers.values()}
    return sorted("cuda.core" if m.startswith("cuda.core") else m.split(".")[0] for m in mods)


def check(errors: dict[str, float]) -> None:
    bad = {k: v for k, v in errors.items() if not v < TOLERANCE}
    if bad:
        raise AssertionError(f"relative error above {TOLERANCE}: {bad}")


def no_torch() -> None:
    if sys.modules.get("torch") is not None:
        raise AssertionError("torch was imported")


# ------------------------------------------------------------------------------------------------- cupy
def case_cupy() -> dict[str, Any]:
    import cupy as cp

    g, A, B, C, with_ws = matmul_graph()
    errors: dict[str, float] = {}
    stream = cp.cuda.Stream(non_blocking=True)
    runs: list[tuple[str, Any]] = [("default plan, workspace=None", None)]
    if with_ws is not None:
        runs += [("workspace plan, workspace=None", with_ws), ("workspace plan, cupy workspace", with_ws)]
    for seed, (label, index) in enumerate(runs):
        a, b, ref = host_inputs(seed)
        with stream:
            da, db = cp.asarray(a), cp.asarray(b)
            dc = cp.full((1, M, N), cp.nan, dtype=cp.float32)
            pack = {A: da, B: db, C: dc}
            if index is None:
                g.execute(pack, workspace=None)
            elif label.endswith("workspace=None"):
                g.execute_plan_at_index(pack, None, index)
            else:
                ws = cp.empty(g.get_workspace_size_plan_at_index(index), dtype=cp.uint8)
                g.execute_plan_at_index(pack, ws, index)
        stream.synchronize()
        errors[label] = rel_err(cp.asnumpy(dc), ref)
    check(errors)
    used = allocators(g)
    if with_ws is not None and used != ["cupy"]:
        raise AssertionError(f"workspace=None with cupy operands allocated from {used}, not cupy's pool")
    if with_ws is not None and not any(k[1] == stream.ptr for k in g.session.executor._workspaces._buffers):
        raise AssertionError("the workspace was not allocated for cupy's current stream")
    no_torch()
    return {"case": "cupy", "errors": errors, "allocators": used, "workspace_plan": with_ws}


# ------------------------------------------------------------------------------------------------- cuda.core
class CoreMemory:
    """cuda.core device memory and copies, on one stream of our own."""

    def __init__(self) -> None:
        from cuda.core import Buffer, Device

        self.Buffer = Buffer
        self.device = Device(0)
        self.device.set_current()
        self.stream = self.device.create_stream()

    def upload(self, host: np.ndarray):
        buf = self.device.allocate(host.nbytes, stream=self.stream)
        buf.copy_from(self.Buffer.from_handle(host.ctypes.data, host.nbytes, owner=host), stream=self.stream)
        return buf

    def download(self, buf, host: np.ndarray) -> np.ndarray:
        buf.copy_to(self.Buffer.from_handle(host.ctypes.data, host.nbytes, owner=host), stream=self.stream)
        self.stream.sync()
        return host


def _raw_memory_case(as_ints: bool) -> dict[str, Any]:
    g, A, B, C, with_ws = matmul_graph()
    dev = CoreMemory()
    handle = cudnn.create_handle()
    cudnn.set_stream(handle, dev.stream)
    errors: dict[str, float] = {}
    wrap = (lambda buf: int(buf.handle)) if as_ints else (lambda buf: buf)
    runs: list[tuple[str, Any, bool]] = [("default plan, handle on our stream, workspace=None", None, True),
                                         ("default plan, no handle (legacy default stream), workspace=None", None,
                                          False)]
    if with_ws is not None:
        runs += [("workspace plan, workspace=None", with_ws, True), ("workspace plan, own workspace", with_ws, True)]
    kept = []  # buffers stay alive until the device is synchronized
    for seed, (label, index, on_handle) in enumerate(runs):
        a, b, ref = host_inputs(seed)
        out = np.full((1, M, N), np.nan, dtype=np.float32)
        da, db, dc = dev.upload(a), dev.upload(b), dev.upload(out)
        kept += [da, db, dc]
        pack = {A: wrap(da), B: wrap(db), C: wrap(dc)}
        if not on_handle:
            dev.stream.sync()  # the legacy default stream does not wait for our stream's copies otherwise
            g.execute(pack, workspace=None)
            dev.device.sync()
        elif index is None:
            g.execute(pack, workspace=None, handle=handle)
        elif label.endswith("workspace=None"):
            g.execute_plan_at_index(pack, None, index, handle=handle)
        else:
            ws = dev.device.allocate(g.get_workspace_size_plan_at_index(index), stream=dev.stream)
            kept.append(ws)
            g.execute_plan_at_index(pack, wrap(ws), index, handle=handle)
        errors[label] = rel_err(dev.download(dc, out), ref)
    check(errors)
    used = allocators(g)
    if with_ws is not None and used != ["cuda.core"]:
        raise AssertionError(f"workspace=None with {'int pointers' if as_ints else 'Buffers'} allocated from {used}")
    if with_ws is not None and not any(k[1] == int(dev.stream.handle) for k in g.session.executor._workspaces._buffers):
        raise AssertionError("the workspace was not allocated for the handle's stream")
    refused = None
    if not as_ints:  # a Buffer too small for its tensor is refused, naming it
        small = dev.device.allocate(16, stream=dev.stream)
        try:
            g.execute({A: small, B: kept[1], C: kept[2]}, workspace=None, handle=handle)
        except ValueError as e:
            refused = str(e)
        if refused is None or "'A'" not in refused or "the buffer has 16" not in refused:
            raise AssertionError(f"a 16-byte Buffer for A was not refused as too small: {refused}")
    dev.device.sync()
    cudnn.destroy_handle(handle)
    no_torch()
    return {"case": "int_pointers" if as_ints else "cuda_core", "errors": errors, "allocators": used,
            "workspace_plan": with_ws, "refused": refused}


CASES = {"cupy": case_cupy, "cuda_core": lambda: _raw_memory_case(False),
         "int_pointers": lambda: _raw_memory_case(True)}


def main(case: str) -> None:
    print(json.dumps(CASES[case]()))
