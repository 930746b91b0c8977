"""Several devices in one process, on the CPU: a graph belongs to its planning handle's device, operands and handles
of another device are refused naming both devices (on the cached path too), default handles and workspaces are
keyed by (thread, device) / (device, stream), and each call runs with its handle's CUDA context current.

The fakes of ``test_execute_correctness`` stand in for torch, cupy, the default-handle machinery and
cudnnBackendExecute; a fake driver (the current context per thread) stands in for ``cuda/context.py``'s cuda.bindings
calls. The second device is a device id on the fakes: nothing here needs a GPU.
"""
from __future__ import annotations

import threading

import pytest

from cudnn_py.backend import live
from cudnn_py.cuda import context as context_mod
from cudnn_py.plans import execute as execute_mod
from cudnn_py.plans import execute_defaults
from tests import test_execute_correctness as fakes
from tests.test_execute_correctness import FakeDevice, FakePlan, Tensor, ndarray, new_address, square_matmul, uint8

torch, cupy, handles = fakes.torch, fakes.cupy, fakes.handles  # the fakes' fixtures, shared

CUDA1 = FakeDevice("cuda", 1)
_REAL_DRIVER_CALLS = {n: getattr(context_mod, n) for n in ("reader", "set_current", "several_devices")}
H0, H1 = 0x9000, 0x9100  # explicit handles of device 0 and device 1
CTX0, CTX1 = 0xC0C0, 0xC1C1  # their contexts


@pytest.fixture(autouse=True)
def fake_handles_on_devices(monkeypatch):
    monkeypatch.setattr(live, "_live", dict(live._live))
    monkeypatch.setattr(execute_mod, "_live_handles", live._live)
    monkeypatch.setattr(execute_defaults, "_live_handles", live._live)
    live.register(H0, 0, owned=False, origin="adopt_handle", context=CTX0)
    live.register(H1, 1, owned=False, origin="adopt_handle", context=CTX1)
    live.register(0x77, None, owned=False, origin="adopt_handle")  # a handle of unknown device and context


class FakeDriver:
    """The current CUDA context of each thread, and every cuCtxSetCurrent."""

    def __init__(self, initial: int = CTX0):
        self.initial, self.current, self.sets = initial, {}, []
        self.devices = 2  # the devices the process sees

    def now(self) -> int:
        return self.current.get(threading.get_ident(), self.initial)

    def get(self) -> tuple[int, int]:  # cuCtxGetCurrent, as cuda.bindings calls it: (CUresult, CUcontext)
        return 0, self.now()

    def reader(self):
        return self.get

    def set_current(self, ctx: int) -> None:
        self.sets.append(ctx)
        self.current[threading.get_ident()] = ctx


@pytest.fixture(autouse=True)  # every test: a real driver would be handed the fake contexts (and crash)
def driver(monkeypatch):
    d = FakeDriver()
    monkeypatch.setattr(context_mod, "reader", d.reader)
    monkeypatch.setattr(context_mod, "several_devices", lambda: d.devices > 1)
    monkeypatch.setattr(context_mod, "set_current", d.set_current)
    return d


def graph_on(device: int | None):
    ex, A, B, C = square_matmul()
    ex.set_device(device)
    return ex, A, B, C


def paths(ex, plan, handle):
    fast = ex.fast(plan)
    return {"fast": lambda pack: fast(pack, None, handle),
            "execute": lambda pack: ex.execute(plan, pack, None, handle)}


# ------------------------------------------------------------------------------------------------- mismatches
@pytest.mark.parametrize("path", ["fast", "execute"])
def test_torch_operand_on_another_device_is_refused_naming_both(path, torch):
    ex, A, B, C = graph_on(0)
    run = paths(ex, FakePlan(), H0)[path]
    a, b, c = (Tensor((2, 16, 16)) for _ in range(3))
    run({A: a, B: b, C: c})
    run({A: a, B: b, C: c})  # cached now
    b1 = Tensor((2, 16, 16), device=CUDA1)
    with pytest.raises(ValueError, match=r"tensor 'B' \(uid \d+\) is on device 1, but the graph was built for "
                                         r"device 0"):
        run({A: a, B: b1, C: c})
    assert len(ex._backend_execute.calls) == 2, "the device-1 operand must not reach cuDNN"
    run({A: a, B: b, C: c})
    assert len(ex._backend_execute.calls) == 3


def test_a_first_call_with_operands_on_another_device_is_refused(torch):
    ex, A, B, C = graph_on(1)
    a, b, c = (Tensor((2, 16, 16)) for _ in range(3))  # cuda:0
    with pytest.raises(ValueError, match=r"tensor 'A' .* on device 0, but the graph was built for device 1"):
        ex.fast(FakePlan())({A: a, B: b, C: c}, None, H1)
    assert ex._backend_execute.calls == []


def test_cupy_operand_on_another_device_is_refused(cupy):
    ex, A, B, C = graph_on(0)
    a, b = ndarray((2, 16, 16)), ndarray((2, 16, 16))
    c1 = ndarray((2, 16, 16), device_id=1)
    with pytest.raises(ValueError, match=r"tensor 'C' .* on device 1, but the graph was built for device 0"):
        ex.execute(FakePlan(), {A: a, B: b, C: c1}, None, H0)


class CudaArray:
    """A ``__cuda_array_interface__`` object of no known framework: the interface carries no device."""

    def __init__(self, shape=(2, 16, 16)):
        self.ptr, self.shape = new_address(), shape

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": "<f2", "strides": None, "data": (self.ptr, False), "version": 3}


def test_array_interface_operands_get_their_device_from_the_driver(monkeypatch):
    on_device1 = set()
    monkeypatch.setattr(context_mod, "device_of_pointer", lambda p: 1 if p in on_device1 else 0)
    ex, A, B, C = graph_on(0)
    a, b, c = CudaArray(), CudaArray(), CudaArray()
    ex.execute(FakePlan(), {A: a, B: b, C: c}, None, H0)
    c1 = CudaArray()
    on_device1.add(c1.ptr)
    with pytest.raises(ValueError, match=r"tensor 'C' .* on device 1, but the graph was built for device 0"):
        ex.execute(FakePlan(), {A: a, B: b, C: c1}, None, H0)
    assert len(ex._backend_execute.calls) == 1


@pytest.mark.parametrize("path", ["fast", "execute"])
def test_a_handle_of_another_device_is_refused_naming_both(path, torch):
    ex, A, B, C = graph_on(0)
    a, b, c = (Tensor((2, 16, 16)) for _ in range(3))
    paths(ex, FakePlan(), H0)[path]({A: a, B: b, C: c})
    with pytest.raises(ValueError, match=r"handle 0x9100 is on device 1, but the graph was built for device 0"):
        paths(ex, FakePlan(), H1)[path]({A: a, B: b, C: c})
    assert len(ex._backend_execute.calls) == 1


def test_a_handle_of_unknown_device_is_the_callers_responsibility(torch):
    ex, A, B, C = graph_on(1)
    a, b, c = (Tensor((2, 16, 16), device=CUDA1) for _ in range(3))
    ex.fast(FakePlan())({A: a, B: b, C: c}, None, 0x77)
    assert [call[0] for call in ex._backend_execute.calls] == [0x77]


def test_learning_the_device_rechecks_operands_checked_before(torch):
    """Operands checked while the device was unknown (deviceless validation) are checked again once it is known."""
    ex, A, B, C = graph_on(None)
    fast = ex.fast(FakePlan())
    a, b, c = (Tensor((2, 16, 16), device=CUDA1) for _ in range(3))
    fast({A: a, B: b, C: c}, None, 0x77)
    ex.set_device(0)
    # a bound execute made before (the one that checked them) and one made after both check them again
    for run in (fast, ex.fast(FakePlan())):
        with pytest.raises(ValueError, match=r"on device 1, but the graph was built for device 0"):
            run({A: a, B: b, C: c}, None, 0x77)


# ------------------------------------------------------------------------------------------------- keyed by device
def test_default_handles_follow_the_graphs_device_for_bare_pointers(handles):
    """Int pointers say nothing of their device: the graph's device picks the default handle."""
    ex0, A0, B0, C0 = graph_on(0)
    ex1, A1, B1, C1 = graph_on(1)
    p = [new_address() for _ in range(3)]
    for _ in range(2):
        ex0.fast(FakePlan())({A0: p[0], B0: p[1], C0: p[2]}, None, None)
        ex1.fast(FakePlan())({A1: p[0], B1: p[1], C1: p[2]}, None, None)
    assert handles.created == [(0x1000, 0), (0x1001, 1)]
    assert [c[0] for c in ex0._backend_execute.calls] == [0x1000, 0x1000]
    assert [c[0] for c in ex1._backend_execute.calls] == [0x1001, 0x1001]


def test_default_handles_are_per_thread_and_device(torch, handles):
    graphs = [graph_on(d) for d in (0, 1)]
    plans = [FakePlan(), FakePlan()]
    both_alive = threading.Barrier(2, timeout=60)  # a finished thread's id may be reused: keep both alive to the end

    def work():
        both_alive.wait()
        for d, (ex, A, B, C) in enumerate(graphs):
            dev = FakeDevice("cuda", d)
            a, b, c = (Tensor((2, 16, 16), device=dev) for _ in range(3))
            fast = ex.fast(plans[d])
            for _ in range(3):
                fast({A: a, B: b, C: c}, None, None)
        both_alive.wait()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(d for _, d in handles.created) == [0, 0, 1, 1], "one default handle per (thread, device)"
    by_device = {d: set() for d in (0, 1)}
    for h, d in handles.created:
        by_device[d].add(h)
    for d, (ex, *_rest) in enumerate(graphs):
        used = {call[0] for call in ex._backend_execute.calls}
        assert used == by_device[d], f"device {d}'s graph ran on another device's handle"
        assert len(ex._backend_execute.calls) == 6


def test_workspaces_are_allocated_on_the_graphs_device(torch, handles):
    ex, A, B, C = graph_on(1)
    fast = ex.fast(FakePlan(workspace=4096))
    a, b, c = (Tensor((2, 16, 16), device=CUDA1) for _ in range(3))
    fast({A: a, B: b, C: c}, None, None)
    fast({A: a, B: b, C: c}, None, None)
    ws = [r() for r in torch.allocations if r() is not None]
    assert len(ws) == 1 and ws[0].device == CUDA1
    assert list(ex._workspaces._buffers) == [(1, 0)]


def test_a_workspace_on_another_device_is_refused(torch):
    ex, A, B, C = graph_on(0)
    a, b, c = (Tensor((2, 16, 16)) for _ in range(3))
    ws1 = Tensor((4096,), dtype=uint8, device=CUDA1)
    with pytest.raises(ValueError, match=r"workspace is on device 1, but the graph was built for device 0"):
        ex.execute(FakePlan(workspace=4096), {A: a, B: b, C: c}, ws1, H0)


# ------------------------------------------------------------------------------------------------- contexts
def recording_contexts(ex, driver):
    seen = []
    inner = ex._backend_execute

    def run(handle, plan, vp):
        seen.append((int(handle), driver.now()))
        return inner(handle, plan, vp)

    ex._backend_execute = run
    return seen


@pytest.mark.parametrize("path", ["fast", "execute"])
def test_a_call_runs_with_its_handles_context_and_restores_the_callers(path, torch, driver):
    ex, A, B, C = graph_on(1)
    seen = recording_contexts(ex, driver)
    run = paths(ex, FakePlan(), H1)[path]
    a, b, c = (Tensor((2, 16, 16), device=CUDA1) for _ in range(3))
    run({A: a, B: b, C: c})
    run({A: a, B: b, C: c})
    assert seen == [(H1, CTX1), (H1, CTX1)], "device 1's context must be current while cuDNN runs"
    assert driver.now() == CTX0, "the caller's context is restored"
    assert driver.sets == [CTX1, CTX0, CTX1, CTX0]


def test_the_fast_path_does_not_switch_when_the_context_is_current(torch, driver):
    ex, A, B, C = graph_on(1)
    driver.initial = CTX1
    seen = recording_contexts(ex, driver)
    fast = ex.fast(FakePlan())
    a, b, c = (Tensor((2, 16, 16), device=CUDA1) for _ in range(3))
    for _ in range(3):
        fast({A: a, B: b, C: c}, None, H1)
    assert driver.sets == [] and seen == [(H1, CTX1)] * 3


def test_with_one_device_the_fast_path_reads_no_context(torch, driver):
    """One device, one primary context: the fast path skips the per-call read (the slow path still binds)."""
    driver.devices = 1
    ex, A, B, C = graph_on(0)
    reads = []
    inner = driver.get
    driver.get = lambda: reads.append(1) or inner()
    plan = FakePlan()
    fast = ex.fast(plan)
    a, b, c = (Tensor((2, 16, 16)) for _ in range(3))
    fast({A: a, B: b, C: c}, None, H0)  # the first call takes the slow path
    n = len(reads)
    for _ in range(3):
        fast({A: a, B: b, C: c}, None, H0)
    assert len(reads) == n and len(ex._backend_execute.calls) == 4
    driver.devices = 2  # the same binding, now with a read per call
    fast = ex.fast(plan)
    fast({A: a, B: b, C: c}, None, H0)
    assert len(reads) == n + 1 and len(ex._backend_execute.calls) == 5


def test_a_thread_without_a_context_is_left_without_one(torch, driver):
    """No context current: the call binds the handle's and unbinds it after (torch's current device unchanged)."""
    ex, A, B, C = graph_on(1)
    driver.initial = 0
    seen = recording_contexts(ex, driver)
    fast = ex.fast(FakePlan())
    a, b, c = (Tensor((2, 16, 16), device=CUDA1) for _ in range(3))
    fast({A: a, B: b, C: c}, None, H1)
    fast({A: a, B: b, C: c}, None, H1)
    assert seen == [(H1, CTX1)] * 2
    assert driver.sets == [CTX1, 0, CTX1, 0] and driver.now() == 0


def test_one_thread_alternating_devices_runs_each_in_its_context(torch, driver):
    ex0, A0, B0, C0 = graph_on(0)
    ex1, A1, B1, C1 = graph_on(1)
    seen0, seen1 = recording_contexts(ex0, driver), recording_contexts(ex1, driver)
    f0, f1 = ex0.fast(FakePlan()), ex1.fast(FakePlan())
    x0 = [Tensor((2, 16, 16)) for _ in range(3)]
    x1 = [Tensor((2, 16, 16), device=CUDA1) for _ in range(3)]
    for _ in range(3):
        f0(dict(zip((A0, B0, C0), x0)), None, H0)
        f1(dict(zip((A1, B1, C1), x1)), None, H1)
    assert seen0 == [(H0, CTX0)] * 3 and seen1 == [(H1, CTX1)] * 3
    assert driver.now() == CTX0


def test_context_helpers_without_a_driver_change_nothing(monkeypatch):
    """The CPU stub exports no context entry points: nothing is known, nothing is switched."""
    for name, fn in _REAL_DRIVER_CALLS.items():  # not the fake driver: the module's own calls, without a libcuda
        monkeypatch.setattr(context_mod, name, fn)
    monkeypatch.setattr(context_mod, "_driver", False)
    assert context_mod.current() is None
    assert context_mod.device_of_pointer(0x1234) is None
    assert context_mod.device_of_current() is None
    with context_mod.bound(CTX1) as b:
        assert b.before is None
    context_mod.set_current(CTX1)  # a no-op, not an error


def test_bound_restores_after_an_error(driver):
    with pytest.raises(RuntimeError, match="boom"):
        with context_mod.bound(CTX1):
            assert driver.now() == CTX1
            raise RuntimeError("boom")
    assert driver.now() == CTX0


def test_handles_record_their_context():
    rec = live.lookup(H1)
    assert rec is not None and (rec.device, rec.context) == (1, CTX1)
    from cudnn_py.backend.handle import adopt_handle, context_of, device_of

    h = adopt_handle(H1)
    assert (h.ordinal, h.context) == (1, CTX1)
    assert device_of(H1) == 1 and context_of(H1) == CTX1 and context_of(0x77) is None



# ------------------------------------------------------------------------------------------------- handles and planning
@pytest.mark.parametrize("before", [CTX0, 0], ids=["device-0-current", "no-context"])
def test_create_handle_on_a_device_restores_the_callers_context(before, driver, monkeypatch):
    from cudnn_py.backend import handle as handle_mod

    driver.initial = before
    primary = {0: CTX0, 1: CTX1}
    seen = []

    def ensure_context(device=None):  # as the real one: make the device's primary context current
        dev = 0 if device is None else device
        driver.set_current(primary[dev])
        return dev

    class FakeCudnn:
        def cudnnCreate(self, out):
            seen.append(driver.now())
            out._obj.value = 0xABC000
            return 0

    monkeypatch.setattr(handle_mod, "ensure_context", ensure_context)
    monkeypatch.setattr(handle_mod, "lib", FakeCudnn)
    h = handle_mod.create_handle(1)
    assert (int(h), h.ordinal, h.context) == (0xABC000, 1, CTX1)
    assert seen == [CTX1], "cudnnCreate runs in device 1's context"
    assert driver.now() == before, "the caller's context (or none) is restored"
    assert live.lookup(h).context == CTX1


def test_planning_runs_in_the_planning_handles_context(torch, driver, monkeypatch):
    """Every planning step that reaches cuDNN with the handle (operation graph, heuristics, plans) runs with that
    handle's context current, and the executor is then for the handle's device."""
    import dataclasses
    import types

    from cudnn_py.plans import session as session_mod
    from cudnn_py.plans.heuristics import HeuristicsResult

    kept: list = []
    ex, A, B, C = square_matmul(keep=kept)
    s = kept[0].session
    assert s.executor is ex
    s.options = dataclasses.replace(s.options, handle=H1)
    seen = {}
    monkeypatch.setattr(session_mod, "finalize_operation_graph",
                        lambda lowered, h: seen.setdefault("operation graph", (h, driver.now())))
    s.build_operation_graph()
    assert (s.device, s.context, s.executor.device) == (1, CTX1, 1)

    def query(operation_graph, modes, sm_count, **_cache_key):
        seen["heuristics"] = driver.now()
        return HeuristicsResult(configs=[types.SimpleNamespace(name="eng0", workspace=0)])

    monkeypatch.setattr(session_mod.heuristics, "query", query)
    s.create_execution_plans([session_mod.enums.heur_mode.A])
    plan = FakePlan()
    monkeypatch.setattr(session_mod.ExecutionPlan, "build",
                        staticmethod(lambda cfg: seen.setdefault("plan", driver.now()) and plan))
    s.build_plans()
    assert seen == {"operation graph": (H1, CTX1), "heuristics": CTX1, "plan": CTX1}
    assert driver.now() == CTX0, "the caller's context is restored after each step"
    with pytest.raises(ValueError, match=r"tensor 'A' .* on device 0, but the graph was built for device 1"):
        s.execute({A: Tensor((2, 16, 16)), B: Tensor((2, 16, 16)), C: Tensor((2, 16, 16))})
