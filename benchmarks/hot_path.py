"""Host time of the execute hot path (``Executor.fast``), for comparing two versions of cudnn_py.

    PYTHONPATH=<checkout> python benchmarks/hot_path.py --fake     # CPU: fake torch tensors, no-op backend
    PYTHONPATH=<checkout> python benchmarks/hot_path.py            # GPU: real torch tensors, real cuDNN plan

``--fake`` needs no GPU: cuDNN's execute is replaced by a Python no-op (and, for the ``fake_replayed_*`` figures,
the replayed branch's three driver / cuDNN calls by C functions that return at once), operands are instances of a tiny class
whose module is ``torch`` (so they take the torch code path); its ``data_ptr``/``stride`` are Python methods, so
absolute times are higher than with real torch, the difference between versions is what it shows. On a GPU it
times a tiny pointwise add with torch tensors (handle and workspace given, as benchmarks/run.py does; and
without handle/workspace), int pointers, and the raw ctypes ``cudnnBackendExecute`` floor, then the pieces of
the per-operand check with real torch tensors. Prints one JSON line.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.environ.get("CUDNN_PY_PATH", os.getcwd()))


def per_call_us(fn, n=20000, rounds=7, sync=None) -> float:
    for _ in range(500):
        fn()
    out = []
    for _ in range(rounds):
        if sync:
            sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    if sync:
        sync()
    return statistics.median(out)


def _tiny_add(cudnn):
    """Z = X + Y over [1, 1, 8] halves, validated; its executor's cuDNN execute replaced by a Python no-op.
    Returns (graph, (X, Y, Z), executor): keep the graph while using the executor's session."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor(dim=[1, 1, 8], stride=[8, 8, 1])
    Y = g.tensor(dim=[1, 1, 8], stride=[8, 8, 1])
    Z = g.add(X, Y)
    Z.set_output(True)
    g.validate()
    ex = g.session.executor
    ex._backend_execute = lambda h, p, v: 0
    return g, (X, Y, Z), ex


def fake() -> dict:
    from tests.support.libcuda_stub import ensure_driver

    if ensure_driver() == "real":
        # its fake handle and stream would reach the real driver and cuDNN (cudnnGetStream on a made-up handle
        # crashed the process on the H200): the fake run is for machines without a GPU driver only
        raise SystemExit("hot_path.py --fake needs a machine without a CUDA driver; here run it without --fake")
    import cudnn_py as cudnn

    class Dev:
        type, index = "cuda", 0

        def __eq__(self, o):
            return self is o

        __hash__ = object.__hash__

    dev = Dev()

    class T:
        dtype = type("float16", (), {"__str__": lambda s: "torch.float16"})()
        device = dev

        def __init__(self, ptr):
            self._ptr, self.shape, self._stride = ptr, (1, 1, 8), (8, 8, 1)

        def data_ptr(self):
            return self._ptr

        def stride(self):
            return self._stride

        def get_device(self):
            return 0

        def is_contiguous(self):  # the fast path re-checks row-major operands this way
            return True

    T.__module__ = "torch"
    g, (X, Y, Z), ex = _tiny_add(cudnn)

    class Plan:
        id, ptr, name, workspace = 1, 0x1000, "fake", 0

    from cudnn_py.backend import live

    if live.lookup(0x77) is None:  # the fake handle, registered as a caller's (execute refuses unknown handles)
        live.register(0x77, 0, owned=False, origin="adopt_handle")
    fast = ex.fast(Plan())
    pack = {X: T(0x10000), Y: T(0x20000), Z: T(0x30000)}
    ipack = {X: 0x10000, Y: 0x20000, Z: 0x30000}
    fast(pack, 0, 0x77)
    fast(ipack, 0, 0x77)
    fast(pack, 0, 0x77)
    figures = {"fake_torch_us": per_call_us(lambda: fast(pack, 0, 0x77)),
               "fake_int_ptrs_us": per_call_us(lambda: fast(ipack, 0, 0x77)),
               "noop_backend_us": per_call_us(lambda: ex._backend_execute(0x77, 0x1000, None))}
    figures.update(_fake_replayed(cudnn, T))
    return figures


def _fake_replayed(cudnn, T) -> dict:
    """The replayed branch of the fast path on the CPU: the driver's graph launch and cudnnGetStream are a C
    function that returns 0 and ignores its arguments (libm's fegetround: 0 is
    FE_TONEAREST, the default rounding mode; no system call), and a recording of the last binding is put in place
    (the stub driver cannot capture); its capture query is a dict lookup. Times the branch's Python and its three
    calls; the launch itself costs nothing here."""
    import ctypes
    import ctypes.util
    import types

    from cudnn_py.backend import out_params
    from cudnn_py.backend.api import lib
    from cudnn_py.cuda import capture
    from cudnn_py.plans import execute as execute_mod
    from cudnn_py.plans import execute_replay as replay_mod

    libm = ctypes.util.find_library("m")
    if libm is None:
        return {"fake_replayed_skipped": "no libm to stand in for the driver"}

    def returns_zero():
        fn = ctypes.CDLL(libm).fegetround
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
        if fn(0, 0) != 0:  # a rounding mode other than the default: no stand-in
            raise RuntimeError("fegetround() is not 0 here")
        return fn

    # cuStreamIsCapturing as cuda.bindings calls it: the stream in, (CUresult, status) out; a dict lookup, so no
    # Python frame either (the stream is the one set below)
    fake_driver = types.SimpleNamespace(cuStreamIsCapturing={0x1234: (0, 0)}.__getitem__, cuGraphLaunch=returns_zero())
    capture.driver = lambda: fake_driver
    capture.destroy_exec = lambda exec_: None
    lib().cudnnGetStream = returns_zero()
    g, (X, Y, Z), ex = _tiny_add(cudnn)
    ex.replays.consider = lambda *args: False  # no recording here: one is put in place below
    if not ex.replays.on:
        return {"fake_replayed_skipped": f"replay is off: {ex.replays.refusal}"}

    class Plan:
        id, ptr, name, workspace = 2, 0x2000, "fake", 0

    fast = ex.fast(Plan())
    out_params.this_thread().stream.value = 0x1234  # the fake cudnnGetStream leaves it: a stream one can capture
    figures = {}
    # the two packs' pointers differ: with the same pointers both are one binding (the variant-pack cache), and the
    # fast path would launch the first pack's recording, its `replays.last`, never the second's
    for name, pack in (("fake_replayed_torch_us", {X: T(0x40000), Y: T(0x50000), Z: T(0x60000)}),
                       ("fake_replayed_int_ptrs_us", {X: 0x70000, Y: 0x80000, Z: 0x90000})):
        fast(pack, 0, 0x77)
        fast(pack, 0, 0x77)
        binding, owner = ex._last, execute_mod._live_handles.get(0x77)
        recording = replay_mod.Replay(binding, owner, 1)
        ex.replays.recorded[(id(binding), id(owner))] = recording
        figures[name] = per_call_us(lambda pack=pack: fast(pack, 0, 0x77))
        assert recording.launches > 1000, "the replayed branch was not taken"
    return figures


def gpu() -> dict:
    import torch

    import cudnn_py as cudnn

    dev = torch.device("cuda")
    x = torch.randn(1, 1, 8, device=dev, dtype=torch.float16)
    y = torch.randn(1, 1, 8, device=dev, dtype=torch.float16)
    z = torch.full_like(x, float("nan"))
    h = cudnn.create_handle()
    cudnn.set_stream(handle=h, stream=torch.cuda.current_stream().cuda_stream)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=h)
    X, Y = g.tensor_like(x), g.tensor_like(y)
    Z = g.add(X, Y)
    Z.set_output(True).set_data_type(cudnn.data_type.HALF)
    g.build([cudnn.heur_mode.A])
    ws = torch.empty(max(1, g.get_workspace_size()), device=dev, dtype=torch.uint8)
    pack = {X: x, Y: y, Z: z}
    upack = {X.get_uid(): x.data_ptr(), Y.get_uid(): y.data_ptr(), Z.get_uid(): z.data_ptr()}
    g.execute(pack, ws, handle=h)
    g.execute(pack, ws, handle=h)
    ex = g.session.executor
    raw, args = ex._backend_execute, (int(h), ex._last[0].ptr, ex._last[3])
    sync = torch.cuda.synchronize
    out = {
        "torch_handle_ws_us": per_call_us(lambda: g.execute(pack, ws, handle=h), sync=sync),
        "torch_no_handle_no_ws_us": per_call_us(lambda: g.execute(pack), sync=sync),
        "int_ptrs_us": per_call_us(lambda: g.execute(upack, ws.data_ptr(), handle=h), sync=sync),
        "raw_ctypes_execute_us": per_call_us(lambda: raw(*args), sync=sync),
    }
    torch.cuda.synchronize()
    out["correct"] = bool(torch.allclose(z, x + y))
    # the pieces of the per-operand check, real torch tensor
    pieces = {
        "t.data_ptr()": lambda: x.data_ptr(), "t.shape": lambda: x.shape, "t.stride()": lambda: x.stride(),
        "t.dtype": lambda: x.dtype, "t.device": lambda: x.device, "t.get_device()": lambda: x.get_device(),
        "(shape, stride(), dtype, device)": lambda: (x.shape, x.stride(), x.dtype, x.device),
        "torch._C._cuda_getCurrentRawStream(0)": lambda: torch._C._cuda_getCurrentRawStream(0),
        "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream().cuda_stream,
    }
    try:
        from cudnn_py.interop import signature_getter

        sig = signature_getter(type(x))
        ref = sig(x)
        pieces["signature(t) != ref"] = lambda: sig(x) != ref
    except ImportError:
        pass
    out["pieces_ns"] = {k: round(per_call_us(f, n=100000, rounds=5) * 1000, 1) for k, f in pieces.items()}
    return out


if __name__ == "__main__":
    res = fake() if "--fake" in sys.argv else gpu()
    res["version"] = os.environ.get("LABEL", "")
    print(json.dumps(res))
