"""GPU: several devices in one process. On one GPU: graphs know their device, handles their context, a fake second
device id is refused naming both devices, calls from a thread with no current context run correctly. On two GPUs
(skipped with fewer): the same graph built and executed on both devices, from one thread (with and without device
guards around the calls) and from one thread per device, against float64; operands of the other device refused.

Fresh random inputs, outputs poisoned (NaN) before each run, ``‖out−ref‖/‖ref‖`` against float64.
"""
from __future__ import annotations

import threading

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import live
from cudnn_py.cuda import context as cuda_context

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

F, H = cudnn.data_type.FLOAT, cudnn.data_type.HALF
TOL_HALF = 5e-3

two_gpus = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                              reason="needs two GPUs")


def rel_err(out, ref) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    assert torch.isfinite(out).all(), "output has NaN/Inf: not every element was written"
    return ((out - ref).norm() / ref.norm()).item()


def matmul_relu(handle=None, n=64):
    """relu(A @ B) over [2, n, n] halves; built on `handle`'s device, else the current one."""
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, handle=handle)
    A = g.tensor(dim=[2, n, n], stride=[n * n, n, 1], data_type=H, name="A")
    B = g.tensor(dim=[2, n, n], stride=[n * n, n, 1], data_type=H, name="B")
    C = g.relu(g.matmul(A, B))
    C.set_output(True).set_data_type(H).set_name("C")
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, A, B, C


def operands(device, n=64):
    a = torch.randn(2, n, n, device=device, dtype=torch.float16)
    b = torch.randn(2, n, n, device=device, dtype=torch.float16)
    c = torch.full((2, n, n), float("nan"), device=device, dtype=torch.float16)
    return a, b, c


def reference(a, b):
    return torch.relu(a.double().cpu() @ b.double().cpu())


def run_and_check(g, A, B, C, device, reps=3, handle=None):
    for _ in range(reps):
        a, b, c = operands(device)
        g.execute({A: a, B: b, C: c}, None, handle)
        torch.cuda.synchronize(device)
        assert rel_err(c, reference(a, b)) < TOL_HALF


# ------------------------------------------------------------------------------------------------- one GPU
@pytest.fixture(autouse=True)
def torch_context_on_device0():
    """Each test starts as torch code does: device 0 current, its (primary) context current on this thread."""
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda:0")
    yield
    torch.cuda.set_device(0)


def test_a_graph_knows_its_device_and_its_handle_its_context():
    g, A, B, C = matmul_relu()
    assert g.session.device == torch.cuda.current_device() == 0
    assert g.session.executor.device == 0
    assert g.session.context is not None and g.session.context == cuda_context.current()
    run_and_check(g, A, B, C, "cuda:0")


def test_create_handle_on_a_given_device():
    h = cudnn.create_handle(0)
    try:
        assert h.ordinal == h.device.ordinal == 0 and h.context == cuda_context.current()
        assert live.lookup(h).context == h.context
        g, A, B, C = matmul_relu(handle=h)
        assert g.session.device == 0
        run_and_check(g, A, B, C, "cuda:0")
    finally:
        cudnn.destroy_handle(h)


def test_driver_queries_on_one_gpu():
    torch.zeros(1, device="cuda")  # torch's context is current
    assert cuda_context.current() not in (None, 0)
    assert cuda_context.device_of_current() == 0
    x = torch.empty(1024, device="cuda")
    assert cuda_context.device_of_pointer(x.data_ptr()) == 0
    assert cuda_context.device_of_pointer(torch.empty(16).pin_memory().data_ptr()) in (None, 0)


def test_a_handle_with_a_fake_second_device_id_is_refused_naming_both():
    g, A, B, C = matmul_relu()
    a, b, c = operands("cuda:0")
    g.execute({A: a, B: b, C: c})
    fake = 0x7E57_0000  # never reaches cuDNN: refused before
    live.register(fake, 1, owned=False, origin="adopt_handle")
    try:
        with pytest.raises(ValueError, match=r"is on device 1, but the graph was built for device 0"):
            g.execute({A: a, B: b, C: c}, None, fake)
    finally:
        live.unregister(fake, destroyed=False)


class CudaArray:
    """A ``__cuda_array_interface__`` view of a torch tensor's memory, of no known framework (no device in it)."""

    def __init__(self, t):
        self.t = t

    @property
    def __cuda_array_interface__(self):
        return {"shape": tuple(self.t.shape), "typestr": "<f2", "strides": None,
                "data": (self.t.data_ptr(), False), "version": 3}


def test_array_interface_operands_take_their_device_from_the_driver():
    g, A, B, C = matmul_relu()
    a, b, c = operands("cuda:0")
    g.execute({A: CudaArray(a), B: CudaArray(b), C: CudaArray(c)})
    torch.cuda.synchronize()
    assert rel_err(c, reference(a, b)) < TOL_HALF


def test_an_operand_with_a_fake_second_device_id_is_refused(monkeypatch):
    g, A, B, C = matmul_relu()
    a, b, c = operands("cuda:0")
    g.execute({A: a, B: b, C: c})
    monkeypatch.setattr(cuda_context, "device_of_pointer", lambda p: 1 if p == c.data_ptr() else 0)
    c.fill_(float("nan"))
    with pytest.raises(ValueError, match=r"tensor 'C' .* on device 1, but the graph was built for device 0"):
        g.execute({A: CudaArray(a), B: CudaArray(b), C: CudaArray(c)})
    torch.cuda.synchronize()
    assert torch.isnan(c.float()).all(), "the refused call must not have run"


def test_a_thread_without_a_current_context_executes_correctly():
    """A fresh thread has no current CUDA context: each call binds the graph's device's context and unbinds it
    after (bare pointers, so nothing of torch runs in the thread)."""
    g, A, B, C = matmul_relu()
    a, b, c = operands("cuda:0")
    torch.cuda.synchronize()
    out: dict = {}

    def worker():
        try:
            out["before"] = cuda_context.current()
            ptrs = {A: a.data_ptr(), B: b.data_ptr(), C: c.data_ptr()}  # bare pointers: no framework hint
            g.execute(ptrs)
            g.execute(ptrs)
            out["after"] = cuda_context.current()
        except BaseException as e:  # reported below, in the test's thread
            out["error"] = e

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    torch.cuda.synchronize()
    assert out["before"] == 0, "the fresh thread had a context already: this test shows nothing"
    # cuDNN's own calls (cudnnCreate for the thread's default handle) make the device's primary context current,
    # as the CUDA runtime does on a thread's first call; no other context may be left behind
    assert out["after"] in (0, cuda_context.current()), "the thread is left with a foreign context"
    assert rel_err(c, reference(a, b)) < TOL_HALF


def test_the_callers_context_is_unchanged_after_execute():
    g, A, B, C = matmul_relu()
    before = cuda_context.current()
    run_and_check(g, A, B, C, "cuda:0")
    assert cuda_context.current() == before


# ------------------------------------------------------------------------------------------------- two GPUs
@two_gpus
def test_same_graph_on_both_devices_from_one_thread_with_device_guards():
    graphs = {}
    for d in (0, 1):
        with torch.cuda.device(d):
            graphs[d] = matmul_relu()
            assert graphs[d][0].session.device == d
    for _ in range(2):
        for d in (0, 1):
            with torch.cuda.device(d):
                run_and_check(*graphs[d], f"cuda:{d}")


@two_gpus
def test_same_graph_on_both_devices_from_one_thread_without_guards():
    """Device 0 stays current; the device-1 graph is built on a device-1 handle and fed cuda:1 tensors, as torch
    code does without torch.cuda.device(...): cudnn_py makes device 1's context current around its calls."""
    assert torch.cuda.current_device() == 0
    handles = {d: cudnn.create_handle(d) for d in (0, 1)}
    try:
        assert torch.cuda.current_device() == 0, "create_handle(1) must restore the caller's device"
        graphs = {d: matmul_relu(handle=handles[d]) for d in (0, 1)}
        assert torch.cuda.current_device() == 0, "planning on device 1 must restore the caller's device"
        for _ in range(3):
            for d in (0, 1):
                run_and_check(*graphs[d], f"cuda:{d}")  # graph handle: pygraph(handle=...)
                assert torch.cuda.current_device() == 0
        # the same through the default handles: a no-handle graph built with device 1 current
        with torch.cuda.device(1):
            g1 = matmul_relu()
        run_and_check(*g1, "cuda:1")
        assert torch.cuda.current_device() == 0
    finally:
        for h in handles.values():
            cudnn.destroy_handle(h)


@two_gpus
def test_same_graph_on_both_devices_one_thread_per_device():
    errors: list = []
    results: dict = {}

    def worker(d):
        try:
            torch.cuda.set_device(d)
            g, A, B, C = matmul_relu()
            assert g.session.device == d
            errs = []
            for _ in range(20):
                a, b, c = operands(f"cuda:{d}")
                g.execute({A: a, B: b, C: c})
                torch.cuda.synchronize(d)
                errs.append(rel_err(c, reference(a, b)))
            results[d] = max(errs)
        except BaseException as e:
            errors.append((d, e))

    threads = [threading.Thread(target=worker, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0][1]
    assert results.keys() == {0, 1} and max(results.values()) < TOL_HALF


@two_gpus
def test_operands_of_the_other_device_are_refused_naming_both():
    g, A, B, C = matmul_relu()  # device 0
    a, b, c = operands("cuda:0")
    g.execute({A: a, B: b, C: c})
    b1 = b.to("cuda:1")
    with pytest.raises(ValueError, match=r"tensor 'B' .* on device 1, but the graph was built for device 0"):
        g.execute({A: a, B: b1, C: c})
    h1 = cudnn.create_handle(1)
    try:
        with pytest.raises(ValueError, match=r"is on device 1, but the graph was built for device 0"):
            g.execute({A: a, B: b, C: c}, None, h1)
    finally:
        cudnn.destroy_handle(h1)
    run_and_check(g, A, B, C, "cuda:0")  # still runs after the refusals


@two_gpus
def test_workspace_none_on_both_devices():
    """Graphs on both devices with cudnn_py-allocated workspaces: each buffer on its graph's device."""
    graphs = {}
    for d in (0, 1):
        with torch.cuda.device(d):
            graphs[d] = matmul_relu(n=256)
    for d in (0, 1):
        with torch.cuda.device(d):
            run_and_check(*graphs[d], f"cuda:{d}")
        buffers = graphs[d][0].session.executor._workspaces._buffers
        assert bool(buffers) == (graphs[d][0].get_workspace_size() > 0)
        for (dev, _stream), (_size, ptr, _owner) in buffers.items():
            assert dev == d and cuda_context.device_of_pointer(ptr) == d
