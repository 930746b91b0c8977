"""The execute fast path's replay policy on the CPU (plans/execute_replay.py, plans/execute.py): when a binding is recorded,
when its recording is launched, and what executes normally instead. The driver's capture and launch calls and
cudnnGetStream are replaced by recorders (a CPU has nothing to capture or launch); the executor, its bindings and
variant packs are the real ones, executed by the Recorder of test_execute_correctness. That replays compute what
executes do is tests/test_gpu_replay.py, on a GPU.
"""
from __future__ import annotations

import itertools
import sys

import pytest

from cudnn_py.cuda import capture
from cudnn_py.plans import execute as execute_mod
from cudnn_py.plans import execute_replay as replay_mod
from tests import test_execute_correctness as harness
from tests.test_execute_correctness import HANDLE, FakePlan, operands, square_matmul

# the harness's fixtures: its fake torch module, and its fake handles registered as live (autouse there and here)
torch_module = harness.torch
registered_fake_handles = harness.registered_fake_handles
pytestmark = pytest.mark.usefixtures("torch_module")

STREAM = 0x5000  # the explicit handles' stream: not the legacy stream, so the capture status is asked for
SIDE = 0x5EED


class FakeDriver:
    """cuStreamIsCapturing and cuGraphLaunch, recorded; plus the capture of plans/execute_replay.py's capture module."""

    def __init__(self):
        self.launches: list[tuple[int, int]] = []
        self.captures: list[int] = []
        self.destroyed: list[int] = []
        self.capturing: set[int] = set()  # streams the "caller" is capturing
        self.launch_status = 0
        self.capture_fails = False
        self.memsets_as_kernels: list[bool] = []  # what each capture was asked
        self.memset_outcome = (1, "")  # (memset nodes replaced, why kept) of each capture
        self._execs = itertools.count(0xE000)

    def cuStreamIsCapturing(self, stream):  # as cuda.bindings calls it: (CUresult, CUstreamCaptureStatus)
        return 0, 1 if stream in self.capturing else 0

    def cuGraphLaunch(self, exec_, stream):
        self.launches.append((exec_, stream))
        return self.launch_status

    def capture(self, stream, run, memsets_as_kernels=False):
        assert stream == SIDE
        self.memsets_as_kernels.append(memsets_as_kernels)
        status = run()  # on a GPU this enqueues nothing: the capture records it
        if self.capture_fails:
            return capture.Captured(status, 0, "cuStreamEndCapture failed with CUresult 900 (a call not allowed "
                                    "under capture)")
        e = next(self._execs)
        self.captures.append(e)
        return capture.Captured(status, e, "", *(self.memset_outcome if memsets_as_kernels else (0, "")))


class FakeCudnn:
    """What Executor.fast takes from the loaded cuDNN: cudnnGetStream (the handle's stream) and an execute."""

    def __init__(self):
        self.streams: dict[int, int] = {}

    def cudnnGetStream(self, handle, out):
        out.value = self.streams.get(int(handle), STREAM)
        return 0

    @staticmethod
    def cudnnBackendExecute(*_args):  # replaced by the Recorder (square_matmul)
        raise AssertionError("the Recorder executes")


def fake_driver(monkeypatch) -> FakeDriver:
    """Replay on, with a FakeDriver for the driver's capture and launch calls and a FakeCudnn (``.cudnn``) for
    cudnnGetStream; the handle's stream set around a capture is recorded in ``.stream_sets``."""
    d, cudnn_lib = FakeDriver(), FakeCudnn()
    monkeypatch.delenv(replay_mod.REPLAY_ENV, raising=False)  # conftest turns replay off for the CPU tests
    monkeypatch.setattr(capture, "driver", lambda: d)
    monkeypatch.setattr(capture, "side_stream", lambda: SIDE)
    monkeypatch.setattr(capture, "capture", d.capture)
    monkeypatch.setattr(capture, "destroy_exec", d.destroyed.append)
    monkeypatch.setattr(execute_mod, "lib", lambda: cudnn_lib)
    d.stream_sets = []
    monkeypatch.setattr(replay_mod._handle_mod, "set_stream", lambda h, s: d.stream_sets.append((int(h), int(s))))
    d.cudnn = cudnn_lib
    return d


@pytest.fixture
def driver(monkeypatch):
    return fake_driver(monkeypatch)


def setup():
    ex, A, B, C = square_matmul()
    assert ex.replays.on, ex.replays.refusal
    plan = FakePlan()
    fast = ex.fast(plan)
    a, b, c = operands()
    return ex, fast, {A: a, B: b, C: c}


def test_the_second_call_in_a_row_is_recorded_and_then_launched(driver):
    ex, fast, pack = setup()
    for _ in range(5):
        fast(pack, None, HANDLE)
    # call 1: the checked path; call 2: noted; call 3: recorded (its execute captured) and launched; 4, 5: launched
    assert len(ex._backend_execute.calls) == 3
    assert driver.launches == [(driver.captures[0], STREAM)] * 3
    assert driver.stream_sets == [(HANDLE, SIDE), (HANDLE, STREAM)]  # pointed at the capture stream and back
    st = ex.replays.stats()
    assert (st["captures"], st["recorded"], st["launches"], st["failures"]) == (1, 1, 3, [])


def test_a_stream_the_caller_captures_gets_the_execute(driver):
    ex, fast, pack = setup()
    for _ in range(3):
        fast(pack, None, HANDLE)
    driver.capturing.add(STREAM)
    fast(pack, None, HANDLE)
    assert len(ex._backend_execute.calls) == 4 and len(driver.launches) == 1  # executed, so the caller records it
    driver.capturing.clear()
    fast(pack, None, HANDLE)
    assert len(driver.launches) == 2


def test_the_handles_stream_is_read_at_every_call(driver):
    ex, fast, pack = setup()
    for _ in range(3):
        fast(pack, None, HANDLE)
    driver.cudnn.streams[HANDLE] = 0x6000  # set_stream between calls
    fast(pack, None, HANDLE)
    assert driver.launches[-1] == (driver.captures[0], 0x6000)


def test_each_handle_has_its_own_recording(driver):
    ex, fast, pack = setup()
    driver.cudnn.streams[0x55] = 0x7000
    for _ in range(4):  # two handles taking turns (threads with their own handles): no one evicts the other
        fast(pack, None, HANDLE)
        fast(pack, None, 0x55)
    st = ex.replays.stats()
    assert (st["captures"], st["recorded"]) == (2, 2), st
    # call 1 takes the checked path; each handle is recorded (and launched) on its 2nd fast call, launched after;
    # each launch is its own handle's recording (the one launched last is the other handle's at every call)
    assert len(driver.launches) == 5
    by_stream = {s: {e for e, s2 in driver.launches if s2 == s} for s in (STREAM, 0x7000)}
    assert len(by_stream[STREAM]) == len(by_stream[0x7000]) == 1 and by_stream[STREAM] != by_stream[0x7000]


def test_bindings_taking_turns_launch_their_own_recordings(driver):
    ex, fast, pack = setup()
    other = dict(pack)
    other[next(iter(pack))] = operands()[0]  # another buffer for the first operand: another binding
    for _ in range(3):  # the first call of each later run finds its binding in the pack cache (the last was the other)
        for p in (pack, other):
            for _ in range(3):
                fast(p, None, HANDLE)
    first, second = driver.captures  # each recorded on its 3rd call (the 2nd on the fast path)
    # each launch is the recording of its own pointers, also when the one launched last is the other's: from the
    # second run on, every call launches one
    assert [e for e, _ in driver.launches] == [first, second] + [first, first, first, second, second, second] * 2
    # the two checked first calls, the two second calls and the two captures (the fake capture executes): no more
    assert len(ex._backend_execute.calls) == 6


def test_bindings_that_come_back_every_other_call_are_recorded(driver):
    """A training step's fresh outputs at the same addresses every other step: two bindings alternating call by
    call (never twice in a row) are recorded on their second call each and launched from then on; a binding that
    comes back only after more than RECENT others is not recorded (executed each time)."""
    from cudnn_py.plans.execute_replay import RECENT

    ex, fast, pack = setup()
    other = dict(pack)
    other[next(iter(pack))] = operands()[0]
    fast(pack, None, HANDLE)  # checked (first call of the executor)
    fast(other, None, HANDLE)  # checked (pointers never seen)
    for _ in range(3):
        fast(pack, None, HANDLE)
        fast(other, None, HANDLE)
    first, second = driver.captures  # each recorded on its 2nd fast call (the 1st is remembered, and executes)
    assert [e for e, _ in driver.launches] == [first, second, first, second]
    assert len(ex._backend_execute.calls) == 2 + 2 + 2  # the checked calls, the first fast calls, the captures
    many = [dict(pack) for _ in range(RECENT + 1)]
    key = next(iter(pack))
    for m in many:
        m[key] = operands()[0]
    for m in many:
        fast(m, None, HANDLE)
    calls = len(ex._backend_execute.calls)
    for m in many:  # each back after RECENT others: outside the window, executed again, not recorded
        fast(m, None, HANDLE)
    assert len(driver.captures) == 2 and len(ex._backend_execute.calls) == calls + RECENT + 1

def test_a_failed_launch_executes_and_the_plan_is_not_recorded_again(driver):
    ex, fast, pack = setup()
    driver.launch_status = 700
    for _ in range(3):
        fast(pack, None, HANDLE)
    assert len(ex._backend_execute.calls) == 4  # the recorded call's launch failed: it executed as well
    st = ex.replays.stats()
    assert st["recorded"] == 0 and "cuGraphLaunch failed with CUresult 700" in st["failures"][0]
    driver.launch_status = 0
    for _ in range(3):
        fast(pack, None, HANDLE)
    assert len(driver.captures) == 1 and len(ex._backend_execute.calls) == 7


def test_a_launch_that_fails_later_drops_the_recording(driver):
    ex, fast, pack = setup()
    for _ in range(3):
        fast(pack, None, HANDLE)
    driver.launch_status = 999
    fast(pack, None, HANDLE)
    assert len(ex._backend_execute.calls) == 4  # executed instead
    st = ex.replays.stats()
    assert st["recorded"] == 0 and st["launches"] == 1 and "CUresult 999" in st["failures"][-1]
    assert st["refused_plans"]  # and not recorded again
    driver.launch_status = 0
    fast(pack, None, HANDLE)  # nor launched again: the dropped recording is not the one launched last any more
    assert len(driver.launches) == 2 and len(ex._backend_execute.calls) == 5 and ex.replays.last is None


def test_a_plan_whose_execute_cannot_be_captured_executes(driver):
    ex, fast, pack = setup()
    driver.capture_fails = True
    for _ in range(6):
        fast(pack, None, HANDLE)
    # every call executed; the 3rd also ran once under the (failed) capture, which on a GPU enqueues nothing
    assert driver.launches == [] and len(ex._backend_execute.calls) == 7
    st = ex.replays.stats()
    assert st["captures"] == 0 and len(st["failures"]) == 1 and "could not be captured" in st["failures"][0]


def test_other_pointers_are_other_bindings(driver):
    ex, fast, pack = setup()
    _, _, c2 = operands()
    (A, a), (B, b), (C, _) = pack.items()
    other = {A: a, B: b, C: c2}
    for p in (pack, pack, pack, other, other, other, pack):
        fast(p, None, HANDLE)
    st = ex.replays.stats()
    assert (st["captures"], st["recorded"]) == (2, 2)
    # the 6th call launches the second recording; the 7th (the first pointers again) the first one
    assert [e for e, _ in driver.launches[-2:]] == [driver.captures[1], driver.captures[0]]


def test_recordings_rewrite_their_memsets_unless_switched_off(driver, monkeypatch):
    monkeypatch.setenv(replay_mod.MEMSET_KERNELS_ENV, " Off ")  # read when the executor is made
    ex0, fast0, pack0 = setup()
    for _ in range(3):
        fast0(pack0, None, HANDLE)
    assert driver.memsets_as_kernels == [False]
    st0 = ex0.replays.stats()
    assert (st0["memsets_as_kernels"], st0["memsets_off"]) == (0, "CUDNN_PY_REPLAY_MEMSET_KERNELS= Off ")
    monkeypatch.delenv(replay_mod.MEMSET_KERNELS_ENV)  # on by default
    ex, fast, pack = setup()
    for _ in range(3):
        fast(pack, None, HANDLE)
    assert driver.memsets_as_kernels == [False, True]
    st = ex.replays.stats()
    assert (st["memsets_as_kernels"], st["memsets_off"], st["memsets_kept"]) == (1, None, [])
    driver.memset_outcome = (0, "a memset of 8-byte elements")  # a recording whose memsets stay: said why
    other = dict(pack)
    other[next(iter(pack))] = operands()[0]
    for _ in range(3):
        fast(other, None, HANDLE)
    st = ex.replays.stats()
    assert st["memsets_as_kernels"] == 1 and st["memsets_kept"] == ["plan fake_plan: a memset of 8-byte elements"]


def test_capture_streams_are_made_per_thread_and_context_id(monkeypatch):
    """A context's address can be reused by one created after it is destroyed; its id cannot: the capture stream
    of a destroyed context is never handed out again."""
    from cudnn_py.cuda import context

    made: list[int] = []

    class StreamMaker:
        def cuStreamCreate(self, flags):  # as cuda.bindings calls it: (CUresult, CUstream)
            made.append(flags)
            return 0, 0x500 + len(made)

    monkeypatch.setattr(capture, "driver", lambda: StreamMaker())
    monkeypatch.setattr(capture, "_side_streams", {})
    for ctx_id, expected in ((1, 0x501), (1, 0x501), (2, 0x502)):
        monkeypatch.setattr(context, "current_id", lambda ctx_id=ctx_id: ctx_id)
        assert capture.side_stream() == expected
    assert made == [capture.CU_STREAM_NON_BLOCKING] * 2
    monkeypatch.setattr(context, "current_id", lambda: None)
    with pytest.raises(RuntimeError, match="cuCtxGetId"):
        capture.side_stream()


def test_a_threads_first_call_takes_the_slow_path_which_gives_it_the_handles_context(driver, monkeypatch):
    """One device, and a thread that has done no CUDA work: it has no current context, which the fast path does not
    read with one device (a cuGraphLaunch or a capture there would fail, and the plan would lose its replay for
    every thread). Its first call takes the slow path, which makes the handle's context current on it, as the CUDA
    runtime does at a thread's first call; its next calls launch the recording."""
    import threading

    from cudnn_py.backend import live, out_params
    from cudnn_py.cuda import context

    ctx, h = 0xC7, 0x99
    live.register(h, None, owned=False, origin="adopt_handle", context=ctx)
    current = {threading.get_ident(): ctx}  # this thread has the context current; a new one has none
    made_current: list[int] = []

    def set_current(c):
        made_current.append(c)
        current[threading.get_ident()] = c

    monkeypatch.setattr(context, "several_devices", lambda: False)
    monkeypatch.setattr(context, "current", lambda: current.get(threading.get_ident(), 0))
    monkeypatch.setattr(context, "set_current", set_current)
    ex, fast, pack = setup()
    for _ in range(3):
        fast(pack, None, h)
    assert len(driver.launches) == 1 and made_current == []
    executed = len(ex._backend_execute.calls)
    def work():
        assert current.get(threading.get_ident(), 0) == 0  # no current context on this thread
        out_params.this_thread()  # context.current() makes these on a GPU: they do not mean "executed before"
        for _ in range(3):
            fast(pack, None, h)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert made_current == [ctx]
    assert len(ex._backend_execute.calls) == executed + 1  # the thread's first call executed (the slow path)
    assert len(driver.launches) == 3  # its next two launched the recording
    st = ex.replays.stats()
    assert (st["failures"], st["refused_plans"]) == ([], {})


# ---------------------------------------------------------------------------------------------------- the hot path
def hot_state(fast):
    """The steady state of a bound execute (its closure's `hot`), None when it has none."""
    cells = dict(zip(fast.__code__.co_freevars, fast.__closure__))
    return cells["hot"].cell_contents


def steady(driver, calls=6):
    """An executor whose recording was launched twice in a row by the general path: its hot path is on."""
    ex, fast, pack = setup()
    ex.set_device(0)  # the operands' device is then checked, as on a GPU
    for _ in range(calls):
        fast(pack, None, HANDLE)
    assert hot_state(fast) is not None
    return ex, fast, pack


def counts(ex, driver):
    return len(ex._backend_execute.calls), len(driver.launches)


def test_the_steady_state_launches_from_the_hot_path(driver):
    ex, fast, pack = steady(driver)
    executed, launched = counts(ex, driver)
    for _ in range(4):
        fast(pack, None, HANDLE)
    assert counts(ex, driver) == (executed, launched + 4)
    assert driver.launches[-1] == (driver.captures[0], STREAM)
    st = ex.replays.stats()
    assert (st["captures"], st["recorded"], st["failures"]) == (1, 1, [])


def _transposed(t):
    return t.transpose(1, 2)


def _as_float32(t):  # 4-byte elements over the same shape: an element size that differs
    return t.view(harness.float32)


def _shrunk(t):  # another shape, holding less memory than the tensor spans
    return t.reshape(t.numel() // 2)


def _on_device_1(t):
    return harness.Tensor(t.shape, t.stride(), t.dtype, harness.FakeDevice("cuda", 1), t.data_ptr())


@pytest.mark.parametrize("change, match", [(_transposed, "strides"), (_as_float32, "HALF.*16-bit"),
                                           (_shrunk, "shape"), (_on_device_1, "device 1")])
def test_an_operand_changed_in_place_is_refused_after_the_steady_state(driver, change, match):
    """The same pointer with other strides, dtype, shape or device (what `t.data = ...` or `resize_` can do to the
    tensor object a caller passes again): the hot path sends it to the general path, which refuses it; nothing is
    launched or executed. The unchanged pack launches again afterwards."""
    ex, fast, pack = steady(driver)
    before = counts(ex, driver)
    key = next(iter(pack))
    changed = dict(pack)
    changed[key] = change(pack[key])
    with pytest.raises(ValueError, match=match):
        fast(changed, None, HANDLE)
    assert counts(ex, driver) == before
    fast(pack, None, HANDLE)
    assert counts(ex, driver) == (before[0], before[1] + 1)


def test_other_pointers_key_order_and_int_pointers_leave_the_hot_path_and_stay_correct(driver):
    ex, fast, pack = steady(driver)
    executed, launched = counts(ex, driver)
    (A, a), (B, b), (C, c) = pack.items()
    fast({C: c, A: a, B: b}, None, HANDLE)  # the same binding, keys in another order: launched
    assert counts(ex, driver) == (executed, launched + 1)
    assert hot_state(fast)[0] == (C, A, B)  # (the general path's launch, the second in a row, made it anew)
    fast({A: a.data_ptr(), B: b.data_ptr(), C: c.data_ptr()}, None, HANDLE)  # int pointers: the same binding
    assert counts(ex, driver) == (executed, launched + 2)
    c2 = operands()[2]
    fast({A: a, B: b, C: c2}, None, HANDLE)  # another output buffer: another binding, executed
    assert counts(ex, driver) == (executed + 1, launched + 2)
    assert c2.data_ptr() in ex._backend_execute.calls[-1][1]


def test_tracing_a_captured_stream_and_a_new_stream_are_seen_from_the_steady_state(driver):
    from cudnn_py.backend import trace

    ex, fast, pack = steady(driver)
    executed, launched = counts(ex, driver)
    driver.capturing.add(STREAM)  # the caller captures the handle's stream: its capture gets the execute
    fast(pack, None, HANDLE)
    assert counts(ex, driver) == (executed + 1, launched)
    driver.capturing.clear()
    for _ in range(3):  # steady again
        fast(pack, None, HANDLE)
    assert hot_state(fast) is not None
    driver.cudnn.streams[HANDLE] = 0x6000  # set_stream between calls: read at every call
    fast(pack, None, HANDLE)
    assert driver.launches[-1] == (driver.captures[0], 0x6000)
    import io

    executed, launched = counts(ex, driver)
    with trace.tracing(io.StringIO()):
        fast(pack, None, HANDLE)
    assert counts(ex, driver) == (executed + 1, launched)  # traced: a real execute


def test_a_launch_failing_on_the_hot_path_executes_and_drops_the_recording(driver):
    ex, fast, pack = steady(driver)
    executed, launched = counts(ex, driver)
    driver.launch_status = 999
    fast(pack, None, HANDLE)
    # the hot path's launch failed, the general path's launch of it too (then dropped), and the call executed
    assert counts(ex, driver) == (executed + 1, launched + 2)
    st = ex.replays.stats()
    assert st["recorded"] == 0 and "CUresult 999" in st["failures"][-1] and st["refused_plans"]
    driver.launch_status = 0
    fast(pack, None, HANDLE)
    assert counts(ex, driver) == (executed + 2, launched + 2)


def test_a_handle_destroyed_after_the_steady_state_is_refused(driver):
    from cudnn_py.backend import live

    ex, fast, pack = steady(driver)
    before = counts(ex, driver)
    live.unregister(HANDLE, destroyed=True)
    with pytest.raises(Exception, match="0x77|handle"):
        fast(pack, None, HANDLE)
    assert counts(ex, driver) == before


def test_a_workspace_shrunk_in_place_is_refused_after_the_steady_state(driver):
    ex, fast, pack = setup()
    ex.set_device(0)
    plan = FakePlan(workspace=4096)
    fast = ex.fast(plan)
    ws = harness.Tensor((4096,), dtype=harness.uint8)
    for _ in range(6):
        fast(pack, ws, HANDLE)
    assert hot_state(fast) is not None
    before = counts(ex, driver)
    fast(pack, ws, HANDLE)
    assert counts(ex, driver) == (before[0], before[1] + 1)
    ws._shape = (1024,)  # resize_ to fewer bytes keeps the pointer
    with pytest.raises(ValueError, match="workspace too small"):
        fast(pack, ws, HANDLE)
    assert counts(ex, driver) == (before[0], before[1] + 1)


def test_the_steady_state_holds_its_recording_weakly(driver):
    """A recording dropped or evicted is destroyed at once (its graph exec with it): the bound execute's steady
    state and its bookkeeping of the last launch do not keep it alive."""
    import weakref

    from tests.support.collector import collector_off

    ex, fast, pack = steady(driver)
    with collector_off():
        recorded = weakref.ref(next(iter(ex.replays.recorded.values())))
        ex.replays.recorded.clear()
        ex.replays.last = None
        assert recorded() is None, "the recording is still referenced"
    executed, launched = counts(ex, driver)
    fast(pack, None, HANDLE)  # the state's recording is gone: the general path records the binding again
    assert counts(ex, driver) == (executed + 1, launched + 1) and len(driver.captures) == 2
    assert hot_state(fast) is None


def test_a_workspace_that_is_not_a_torch_tensor_keeps_the_general_path(driver):
    """The hot path reads a workspace's size and pointer the torch way: a cuda.core Buffer (or a cupy array) as the
    workspace never makes a steady state, and its calls launch from the general path."""
    from tests.test_frameworks_tools import FakeBuffer

    ex, fast, pack = setup()
    fast = ex.fast(FakePlan(workspace=4096))
    ws = FakeBuffer(harness.new_address(), 4096)
    for _ in range(8):
        fast(pack, ws, HANDLE)
    assert hot_state(fast) is None
    assert len(driver.launches) == 6 and ex.replays.stats()["failures"] == []


def test_handles_taking_turns_do_not_remake_the_steady_state_every_call(driver, monkeypatch):
    """Two handles executing one binding in turn (threads with their own handles): each call launches its handle's
    recording after the other's, so it is never the second launch in a row of one recording and no steady state is
    made per call; one handle alone again makes it once."""
    made = []
    real = execute_mod._hot_state
    monkeypatch.setattr(execute_mod, "_hot_state", lambda *a: made.append(1) or real(*a))
    ex, fast, pack = setup()
    driver.cudnn.streams[0x55] = 0x7000
    for _ in range(10):
        fast(pack, None, HANDLE)
        fast(pack, None, 0x55)
    st = ex.replays.stats()
    assert (st["recorded"], st["failures"]) == (2, []) and st["launches"] >= 16, st
    assert made == [] and hot_state(fast) is None
    for _ in range(4):
        fast(pack, None, HANDLE)
    assert made == [1] and hot_state(fast) is not None


def test_a_recording_dropped_while_still_referenced_is_not_launched_from_the_steady_state(driver):
    """A recording dropped (its launch failed on another thread, which still holds it) is not launched again from
    the steady state of a bound execute that made it: the call executes."""
    ex, fast, pack = steady(driver)
    held = next(iter(ex.replays.recorded.values()))  # what another thread's call would hold
    ex.replays.drop(held, "a launch failed elsewhere")
    executed, launched = counts(ex, driver)
    fast(pack, None, HANDLE)
    assert counts(ex, driver) == (executed + 1, launched)
    assert held.launches >= 4


# ------------------------------------------------------------------------ the hot path against the general path
def _random_script(rng, steps: int) -> list[tuple]:
    """A call sequence of a bound execute with everything between calls that can change what it must do: operands
    changed in place (strides, dtype, shape, device, pointer: what `t.data = ...`, `as_strided_` or `resize_` do
    under the same object), operands replaced by equal objects, keys in another order, the workspace (none, an int,
    a torch tensor, shrunk in place), operands bound to other keys, an object of no framework with a tensor's
    methods, the handle (or none: this thread's default one, on the framework's current stream) and its stream,
    the handle destroyed, the caller capturing the stream, tracing, the graph's device. Mostly
    plain repeated calls, so that steady states are made and used."""
    script = []
    for _ in range(steps):
        r = rng.random()
        if r < 0.65:
            script.append(("call",))
        elif r < 0.77:
            script.append(("mutate", rng.randrange(3), rng.choice(
                ["strides", "dtype", "same_size_dtype", "shape", "buffer", "device", "pointer", "restore", "restore",
                 "replace", "impostor"])))
        elif r < 0.81:
            script.append(("order", rng.choice(["as built", "reversed", "rebound"])))
        elif r < 0.87:
            script.append(("workspace", rng.choice(["none", "int", "tensor", "tensor", "shrink", "grow"])))
        elif r < 0.92:
            script.append(("handle", rng.choice([HANDLE, HANDLE, 0x55, None])))  # None: this thread's default
        elif r < 0.94:
            script.append(("stream", rng.choice([STREAM, 0x6000, 0])))
        elif r < 0.95:
            script.append(("framework stream", rng.choice([0, 0x8000, 0x9000])))  # torch.cuda.set_stream
        elif r < 0.96:
            script.append(("default handle stream", rng.choice([0x8000, 0xA000])))  # set_stream(default_handle())
        elif r < 0.97:
            script.append(("capturing", rng.random() < 0.5))
        elif r < 0.978:
            script.append(("graph device", rng.choice([0, 0, 1])))
        elif r < 0.986:
            script.append(("handle live", rng.random() < 0.6))
        else:
            script.append(("traced_call",))
    return script


def _play(script: list[tuple], monkeypatch, hot: bool, checked: bool = False) -> tuple[list, int]:
    """Run ``script`` in a fresh world (driver, cuDNN stand-in, executor; fixed pointers): every call's outcome, the
    executes, captures and launches it caused, in order, and the handle's stream then. ``hot=False``: no steady
    state is ever made, so every call takes the general path; ``checked``: every call is ``Executor.execute``
    (operands fully checked whenever unlike the last ones, never replayed). Returns (the log, how many calls
    launched from a steady state)."""
    import io
    import re
    import types

    from cudnn_py.backend import handle as handle_mod
    from cudnn_py.backend import live, trace

    UID = re.compile(r"uid \d+")
    harness.register_fake_handles(monkeypatch, {})  # a registry of this world's own: a script may destroy a handle
    defaults = harness.fake_default_handles(monkeypatch)  # this thread's, bound to the framework's current stream
    # the caller's own set_stream: cuDNN's binding as the fake default handles keep it (and the hooks told)
    monkeypatch.setattr(handle_mod, "lib", lambda: types.SimpleNamespace(
        cudnnSetStream=lambda h, st: defaults.streams.__setitem__(int(h), int(st or 0)) or 0))
    framework = sys.modules["torch"]  # the harness's fake torch: its current stream per device
    framework.current.clear()
    d = fake_driver(monkeypatch)
    cudnn_lib = d.cudnn
    # (the workspace cudnn_py keeps per stream, for workspace=None: the handle's stream as the stand-ins say)
    monkeypatch.setattr(execute_mod, "_get_stream", lambda h: defaults.streams[int(h)] if int(h) in defaults.streams
                        else cudnn_lib.streams.get(int(h), STREAM))
    real_hot_state = _REAL_HOT_STATE
    monkeypatch.setattr(execute_mod, "_hot_state", real_hot_state if hot else (lambda *a: None))
    cudnn_lib.streams[0x55] = 0x7000
    ex, A, B, C = square_matmul()
    ex.set_device(0)
    recorder = ex._backend_execute

    def execute_on_its_stream(h, plan_ptr, vp):  # each execute with the stream its handle was bound to then
        status = recorder(h, plan_ptr, vp)
        h = int(h)
        recorder.calls[-1] += (defaults.streams[h] if h in defaults.streams else cudnn_lib.streams.get(h, STREAM),)
        return status

    execute_on_its_stream.calls = recorder.calls  # type: ignore[attr-defined]
    ex._backend_execute = execute_on_its_stream
    plan = FakePlan(workspace=4096)
    fast = ex.fast(plan) if not checked else (lambda pack, ws, handle: ex.execute(plan, pack, ws, handle))
    keys = [A, B, C]
    base = [0x10_0000, 0x20_0000, 0x30_0000]
    ts = [harness.Tensor((2, 16, 16), ptr=p) for p in base]
    ws_tensor = harness.Tensor((4096,), dtype=harness.uint8, ptr=0x40_0000)
    ws: object = ws_tensor
    handle, order, log, hot_launches = HANDLE, "as built", [], 0
    own_ws: dict[int, int] = {}
    recorded_ws: dict[int, int] = {}  # recording -> the workspace pointer it was captured with
    for step in script:
        kind = step[0]
        if kind in ("call", "traced_call"):
            if order == "as built":
                pack = dict(zip(keys, ts))
            elif order == "reversed":  # the same bindings, the keys in another order
                pack = dict(zip(keys[::-1], ts[::-1]))
            else:  # the operands in the same order, bound to other keys: A gets C's tensor, C gets A's
                pack = dict(zip(keys[::-1], ts))
            before = (len(ex._backend_execute.calls), len(d.captures), len(d.launches))
            was_hot = not checked and hot_state(fast) is not None
            try:
                if kind == "traced_call":
                    with trace.tracing(io.StringIO()):
                        fast(pack, ws, handle)
                else:
                    fast(pack, ws, handle)
                outcome = "ok"
            except Exception as e:  # the same refusal, whichever path: type and text (uids differ per world)
                outcome = f"{type(e).__name__}: {UID.sub('uid N', str(e))}"
            if was_hot and len(d.launches) == before[2] + 1 and len(ex._backend_execute.calls) == before[0]:
                hot_launches += 1
            if d.captures[before[1]:]:  # the workspace the recording was captured with
                recorded_ws[d.captures[-1]] = recorder.calls[-1][2]
            # a workspace cudnn_py allocated (workspace=None) has its own address in each world: named by order
            executes = [(h, ptrs, w if w in (0, 0x40_0000) else f"workspace #{own_ws.setdefault(w, len(own_ws))}", on)
                        for h, ptrs, w, on in recorder.calls[before[0]:]]
            stream = framework.current.get(0, 0) if handle is None else cudnn_lib.streams.get(handle, STREAM)
            # launched where the general path must execute: into the caller's capture, or while tracing
            must_execute = stream in d.capturing or kind == "traced_call"
            if outcome == "ok":  # an oracle, not a comparison: the work went to the stream it belongs on
                on = [e[3] for e in executes if not d.captures[before[1]:]] + [s for _, s in d.launches[before[2]:]]
                assert all(x == stream for x in on), \
                    f"step {len(log)}: work on {on}, the call's stream is {stream:#x} (handle {handle})"
                # a workspace cudnn_py allocated is the plan's size at least and belongs to the call's stream
                own = {r().data_ptr(): r() for r in framework.allocations if r() is not None}
                used = [e[2] for e in executes] + [recorded_ws[x] for x, _ in d.launches[before[2]:]
                                                   if x in recorded_ws]
                for w in used:
                    if w in own:
                        assert own[w].nbytes >= 4096 and own[w].alloc_stream == stream, \
                            f"step {len(log)}: workspace of {own[w].nbytes} bytes on stream {own[w].alloc_stream:#x}"
            log.append((outcome, executes, d.captures[before[1]:], d.launches[before[2]:], stream, must_execute))
        elif kind == "mutate":
            _, i, how = step
            t = ts[i]
            if how == "strides":
                t._stride = (256, 1, 16)  # as_strided_: the same shape and pointer, transposed
            elif how == "dtype":
                t.dtype = harness.float32  # elements of another size: refused
            elif how == "same_size_dtype":
                t.dtype = harness.bfloat16  # t.data = t.view(torch.bfloat16): read as HALF, with a warning
            elif how == "shape":
                t._shape, t._stride = (2, 8, 16), (128, 16, 1)  # less memory than the tensor spans: refused
            elif how == "buffer":
                t._shape, t._stride = (2, 8, 32), (256, 32, 1)  # the same bytes in another shape: a buffer
            elif how == "device":
                t.device = harness.FakeDevice("cuda", 1)
            elif how == "pointer":
                t._ptr = base[i] + 0x8000
            elif how == "restore" and type(t) is _Impostor:
                ts[i] = harness.Tensor((2, 16, 16), ptr=base[i])
            elif how == "restore":  # in place: the same object as it was
                t._shape, t._stride, t.dtype, t.device, t._ptr = (2, 16, 16), (256, 16, 1), harness.float16, \
                    harness.CUDA0, base[i]
            elif how == "replace":  # another object, equal to the original
                ts[i] = harness.Tensor((2, 16, 16), ptr=base[i])
            else:  # an object of another class answering the same methods: no framework cudnn_py knows
                ts[i] = _Impostor((2, 16, 16), ptr=base[i])
        elif kind == "order":
            order = step[1]
        elif kind == "workspace":
            how = step[1]
            if how == "none":
                ws = None
            elif how == "int":
                ws = 0x40_0000
            elif how == "tensor":
                ws = ws_tensor
            elif how == "shrink":
                ws_tensor._shape, ws_tensor._stride = (1024,), (1,)  # resize_ to fewer bytes: the same pointer
            else:
                ws_tensor._shape, ws_tensor._stride = (4096,), (1,)
        elif kind == "handle":
            handle = step[1]
        elif kind == "stream":
            if handle is not None:
                cudnn_lib.streams[handle] = step[1]
        elif kind == "framework stream":
            framework.current[0] = step[1]
        elif kind == "default handle stream":  # the caller's set_stream on this thread's default handle, if any
            for state in list(execute_mod._DEFAULT_HANDLES.values()):
                if state.handle in live._live:
                    _REAL_SET_STREAM(state.handle, step[1])  # (replay's use of set_stream is stubbed in these worlds)
        elif kind == "handle live":  # the handle destroyed (cudnnDestroy through cudnn_py), or made again
            if handle is None:  # destroy_handle(default_handle()): the next call takes a new default handle
                for state in execute_mod._DEFAULT_HANDLES.values():
                    if not step[1] and state.handle in live._live:
                        live.unregister(state.handle, destroyed=True)
                continue
            if step[1]:
                live.register(handle, None, owned=False, origin="adopt_handle")
            else:
                live.unregister(handle, destroyed=True)
        elif kind == "graph device":  # the device the plans are built for (a re-planned graph): operands re-checked
            ex.set_device(step[1])
        elif kind == "capturing":  # (the legacy default stream, 0 or 1, cannot be captured)
            on = framework.current.get(0, 0) if handle is None else cudnn_lib.streams.get(handle, STREAM)
            if on >= 2:
                (d.capturing.add if step[1] else d.capturing.discard)(on)
    return log, hot_launches


_REAL_HOT_STATE = execute_mod._hot_state
_REAL_SET_STREAM = replay_mod._handle_mod.set_stream  # backend.handle.set_stream, before any test stubs it


class _Impostor(harness.Tensor):
    """A torch tensor's methods on a class of no framework (not torch's module): refused as an operand."""


_Impostor.__module__ = __name__


@pytest.mark.filterwarnings("ignore:.*elements of the same size:RuntimeWarning")  # same_size_dtype steps
def test_the_hot_path_does_what_the_general_path_does_on_random_call_sequences(monkeypatch):
    """Differential: 150 seeded random sequences of 100 steps (operands changed in place between calls, keys reordered, the
    workspace, handle, stream, capture and tracing changed), each played twice in fresh worlds, with steady states
    and with none. Every call must end alike (the same refusal, or success) and cause the same executes (handle,
    pointers, workspace), captures and launches (recording, stream), in the same order: the hot path launches
    exactly what the general path would, and refuses (by handing over) what it would refuse."""
    import random

    total_hot = 0
    for seed in range(150):
        script = _random_script(random.Random(seed), 100)
        general, none_hot = _play(script, monkeypatch, hot=False)
        fast, hot_launches = _play(script, monkeypatch, hot=True)
        assert none_hot == 0
        for i, (g, f) in enumerate(zip(general, fast)):
            assert g == f, f"seed {seed}, call {i}: general path {g}, with the hot path {f}"
        total_hot += hot_launches
    assert total_hot > 500, f"the sequences reached the hot path {total_hot} times only"


def _work(log: list) -> list:
    """Each call's outcome and the work it enqueued, however: (pointers, workspace, the stream its handle was bound
    to) of each execute, a launch read as the execute its recording captured (on the stream it was launched on); a
    launch where only an execute will do (the caller capturing the stream, tracing on) is marked as such."""
    recorded, out = {}, []
    for outcome, executes, captures, launches, _stream, must_execute in log:
        work = []
        if captures:  # the call's execute was the capture (one per call), then its recording was launched
            assert len(captures) == 1 and len(executes) == 1, (captures, executes)
            recorded[captures[0]] = executes[0][1:3]
            executes = []
        work += [(*e[1:], "") for e in executes]  # (pointers, workspace, the stream its handle was bound to)
        work += [(*recorded[exec_], on, "launched" if must_execute else "") for exec_, on in launches]
        out.append((outcome, work))
    return out


@pytest.mark.filterwarnings("ignore:.*elements of the same size:RuntimeWarning")  # same_size_dtype steps
def test_the_general_fast_path_does_what_execute_does_on_random_call_sequences(monkeypatch):
    """Differential, one level down: the same scripts through the bound execute with no steady states (operands
    re-checked against the last checked signature, recordings launched) and through ``Executor.execute`` (every
    operand fully checked when unlike the last, every call a cudnnBackendExecute). The same refusals, and the same
    work enqueued: each launch does what the execute its recording captured did, on the handle's stream."""
    import random

    for seed in range(150):
        script = _random_script(random.Random(seed), 100)
        general, _ = _play(script, monkeypatch, hot=False)
        checked, _ = _play(script, monkeypatch, hot=False, checked=True)
        for i, (g, c) in enumerate(zip(_work(general), _work(checked))):
            assert g == c, f"seed {seed}, call {i}: the bound execute {g}, Executor.execute {c}"


def test_every_tier_compares_operands_by_the_one_description():
    """The three forms of the operand re-check (execute_checks.py) are generated from TORCH_TERMS: nothing else
    describes a torch operand's comparison."""
    import inspect

    from cudnn_py.plans import execute_checks, execute_fast

    for form in (execute_checks.resolve_checked, execute_checks.fast_operand_lines, execute_checks.hot_matcher,
                 execute_fast.bound_execute, execute_fast.bound_execute_source):
        assert inspect.signature(form).parameters["terms"].default is execute_checks.TORCH_TERMS


@pytest.mark.filterwarnings("ignore:.*elements of the same size:RuntimeWarning")
def test_a_term_left_out_of_the_hot_form_fails_the_differential_test(monkeypatch):
    """The hot path generated from the description less its dtype term launches where the general path refuses:
    the differential sequences see it (so they would see a hot check that drifted from the general one)."""
    import random

    from cudnn_py.plans import execute_checks

    less = tuple(t for t in execute_checks.TORCH_TERMS if "dtype" not in t.differs)
    assert len(less) == len(execute_checks.TORCH_TERMS) - 1
    for seed in range(150):
        script = _random_script(random.Random(seed), 100)
        general, _ = _play(script, monkeypatch, hot=False)
        with monkeypatch.context() as m:
            m.setattr(execute_mod, "hot_matcher", lambda n: execute_checks.hot_matcher(n, terms=less))
            fast, _ = _play(script, monkeypatch, hot=True)
        if general != fast:
            return
    raise AssertionError("no sequence told the hot path without its dtype term from the general path")


@pytest.mark.filterwarnings("ignore:.*elements of the same size:RuntimeWarning")
def test_a_term_left_out_of_the_bound_execute_fails_the_differential_test(monkeypatch):
    """The bound execute generated from the description less its dtype term executes where Executor.execute
    refuses: the differential sequences see it."""
    import random

    from cudnn_py.plans import execute_checks, execute_fast

    less = tuple(t for t in execute_checks.TORCH_TERMS if "dtype" not in t.differs)
    for seed in range(150):
        script = _random_script(random.Random(seed), 100)
        checked, _ = _play(script, monkeypatch, hot=False, checked=True)
        with monkeypatch.context() as m:
            m.setattr(execute_mod, "bound_execute", lambda extras, ns: execute_fast.bound_execute(extras, ns, less))
            general, _ = _play(script, monkeypatch, hot=False)
        if _work(general) != _work(checked):
            return
    raise AssertionError("no sequence told the bound execute without its dtype term from Executor.execute")


def test_the_generated_bound_execute_reads_only_names_it_is_given():
    """Every global the generated bound execute reads (execute_fast._RUN_TEMPLATE) is one of plans/execute.py's or
    a builtin: a name dropped from that module fails here, not at the first call that reaches its line."""
    import builtins
    import dis
    import types

    from cudnn_py.plans import execute_fast

    for extras in (False, True):
        code = compile(execute_fast.bound_execute_source(extras), "<run>", "exec")
        make = next(c for c in code.co_consts if isinstance(c, types.CodeType))
        run = next(c for c in make.co_consts if isinstance(c, types.CodeType))
        read = {i.argval for i in dis.get_instructions(run) if i.opname == "LOAD_GLOBAL"}
        assert "_hot_state" in read and "trace" in read, sorted(read)
        assert all(n in vars(execute_mod) or hasattr(builtins, n) for n in read), \
            sorted(n for n in read if n not in vars(execute_mod) and not hasattr(builtins, n))


def test_the_call_checks_are_written_once_and_made_by_both_tiers():
    """Each of the call's other checks (execute_checks.CALL_CHECKS: the binding, the handle's device, the default
    handle's liveness and stream) is inlined into the generated bound execute and compiled for the general path."""
    from cudnn_py.plans import execute_checks, execute_defaults, execute_fast

    source = execute_fast.bound_execute_source(False)
    assert "<<" not in source
    general = {"binding_matches": execute_mod._binding_matches, "handle_on_device": execute_mod._handle_on_device,
               "default_handle_live": execute_defaults._default_handle_live,
               "stream_bound": execute_defaults._stream_bound}
    assert set(general) == set(execute_checks.CALL_CHECKS)
    for name in execute_checks.CALL_CHECKS:
        assert general[name] is execute_checks.call_check(name)
        given = _template_args(name)
        assert given, f"the template does not make check {name}"
        assert all(execute_checks.call_check_expr(name, args) in source for args in given), name


def _template_args(name: str) -> list[tuple[str, ...]]:
    """The argument names the template gives check ``name`` (read back from its placeholders)."""
    import re

    from cudnn_py.plans import execute_fast

    return [tuple(a.strip() for a in m[2].split(","))
            for m in re.finditer(execute_fast._CHECK, execute_fast._RUN_TEMPLATE) if m[1] == name]


# ------------------------------------------------------------------------------------------------- the split form
def test_the_split_form_is_offered_only_for_checked_slots_and_exact_keys(driver):
    ex, fast, pack = setup()
    plan = FakePlan()
    A, B, C = pack
    assert ex.fast_trusted(plan, (A, B), (C,)) is None  # nothing checked yet: the first call checks in full
    fast(pack, None, HANDLE)
    assert ex.fast_trusted(plan, (A,), (B,)) is None  # a slot the caller binds left out
    assert ex.fast_trusted(plan, (A, B), (B,)) is None  # one twice
    assert ex.fast_trusted(plan, (A, B), (C, "nope")) is None  # a key of no slot
    assert ex.fast_trusted(plan, (A, B, C), ()) is None  # nothing trusted: that is fast()
    assert ex.fast_trusted(plan, (C, A), (B,)) is not None  # any order, each slot once
    assert ex.fast_trusted(plan, (), (A, B, C)) is not None


def test_the_split_form_executes_and_replays_what_the_checked_one_would(driver):
    ex, _, pack = setup()
    A, B, C = pack
    plan = FakePlan()
    ex.fast(plan)(pack, None, HANDLE)  # the full check of every slot
    run = ex.fast_trusted(plan, (A, B), (C,))
    a, b, c = pack[A], pack[B], pack[C]
    for _ in range(4):
        run((a, b, c), None, HANDLE)
    # the same pointers as the checked call (in slot order: A, B, C): noted, recorded and launched (as by fast)
    ptrs = [t.data_ptr() for t in (a, b, c)]
    assert all(call[1] == ptrs for call in ex._backend_execute.calls)
    assert len(driver.captures) == 1 and len(driver.launches) == 3
    # new pointers: the checked execute, which checks them in full (a wrong shape is refused there)
    c2 = operands()[0]
    run((a, b, c2), None, HANDLE)
    assert ex._backend_execute.calls[-1][1] == [a.data_ptr(), b.data_ptr(), c2.data_ptr()]
    wrong = type(c2)((2, 16, 8))
    with pytest.raises(execute_mod.InvalidValueError):
        run((a, b, wrong), None, HANDLE)
    # a re-checked operand unlike its slot's last full check (same pointer, other strides): the checked execute
    calls = len(ex._backend_execute.calls)
    with pytest.raises(execute_mod.InvalidValueError, match="strides"):
        run((a.permute(0, 2, 1), b, c), None, HANDLE)
    assert len(ex._backend_execute.calls) == calls


def test_the_split_form_checks_again_after_the_slots_are_reset(driver):
    ex, fast, pack = setup()
    A, B, C = pack
    fast(pack, None, HANDLE)
    run = ex.fast_trusted(FakePlan(), (), (A, B, C))
    ex.set_device(5)  # the slots' checks dropped: the next call is checked in full, and fails on device 0's tensors
    with pytest.raises(execute_mod.InvalidValueError, match="device"):
        run(tuple(pack.values()), None, HANDLE)


def test_the_split_form_refuses_or_runs_every_mutated_operand_seeded():
    """Seeded mutations of the re-checked operands of the split form (another shape, strides, element type,
    device, class; a transposed view of the same memory; a larger dense buffer, a bare pointer, a fresh buffer and
    the same one, which are accepted), 400 cases, replay off so that every call executes: each call either raises
    (ValueError / TypeError, before cuDNN) or executes exactly the given pointers, and only for operands the graph's
    tensors accept."""
    import random
    import warnings

    from tests.test_execute_correctness import FakeDevice, Tensor, bfloat16, float32

    rng = random.Random(1207)
    ex, A, B, C = square_matmul()
    ex.set_device(0)  # built for device 0, as a planned graph is (the harness validates deviceless)
    pack = dict(zip((A, B, C), operands()))
    plan = FakePlan()
    ex.fast(plan)(pack, None, HANDLE)
    run = ex.fast_trusted(plan, (A, B), (C,))

    def mutated(t):  # (operand, whether the graph's tensor accepts it)
        kind = rng.choice(["same", "fresh", "bigger", "smaller", "strides", "dtype", "dtype16", "device",
                           "transposed", "int", "class"])
        kinds.append(kind)
        return {
            "same": lambda: (t, True),
            "fresh": lambda: (Tensor((2, 16, 16)), True),
            "bigger": lambda: (Tensor(rng.choice([(4, 16, 16), (2, 16, 32), (600,)])), True),  # dense: a buffer
            "smaller": lambda: (Tensor(rng.choice([(2, 16, 8), (1, 16, 16), (511,)])), False),
            "strides": lambda: (Tensor((2, 16, 16), rng.choice([(256, 1, 16), (512, 32, 1), (0, 16, 1)])), False),
            "dtype": lambda: (Tensor((2, 16, 16), dtype=float32), False),
            "dtype16": lambda: (Tensor((2, 16, 16), dtype=bfloat16), True),  # same size: read as HALF, warned
            "device": lambda: (Tensor((2, 16, 16), device=FakeDevice("cuda", 1)), False),
            "transposed": lambda: (t.transpose(1, 2), False),
            "int": lambda: (0x7000_0000 + 256 * rng.randrange(1, 1 << 16), True),  # the caller's responsibility
            "class": lambda: (object(), False),
        }[kind]()

    def ptr(v):
        return v if isinstance(v, int) else v.data_ptr()

    ran = refused = 0
    for _ in range(400):
        kinds = []
        (a, a_ok), (b, b_ok) = mutated(pack[A]), mutated(pack[B])
        calls = len(ex._backend_execute.calls)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run((a, b, pack[C]), None, HANDLE)
        except (ValueError, TypeError):
            refused += 1
            assert not (a_ok and b_ok), "good operands were refused"
            assert len(ex._backend_execute.calls) == calls, "cuDNN ran before the refusal"
            continue
        ran += 1
        assert a_ok and b_ok, f"an operand the graph's tensor refuses reached cuDNN: {kinds}, {b!r}"
        assert len(ex._backend_execute.calls) == calls + 1
        assert ex._backend_execute.calls[-1][1] == [ptr(a), ptr(b), pack[C].data_ptr()]
    assert ran > 40 and refused > 40, (ran, refused)
