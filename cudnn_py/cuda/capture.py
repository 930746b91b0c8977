"""Stream capture through the CUDA driver API (cuda.bindings, ``cuGraphLaunch`` raw: ``driver.py``): what
replaying an execute takes.

``plans/execute_replay.py`` records one ``cudnnBackendExecute`` into a CUDA graph on a private stream and launches the
instantiated graph on later calls with the same operands; this module is the driver side of that and nothing else:

* :func:`driver` - the capture entry points (cuda.bindings' calling convention: ``(CUresult, *values)``) and
  ``cuGraphLaunch`` (ctypes: ``(exec, stream) -> int``), or None (no driver cudnn_py can use, see ``driver.py``);
* :func:`side_stream` - this thread's private capture stream in the current context (non-blocking, created once);
* :func:`capture` - begin (thread-local mode) / run / end / instantiate, returning the executable graph or why not
  (its small memset nodes as kernel nodes, on request: ``graph_memsets.py``);
* :func:`destroy_exec`.

Thread-local capture mode: another thread's CUDA calls are neither captured nor refused, and this thread cannot
make an unsafe call unnoticed (cuDNN gets an error instead, and the capture is thrown away).
"""
from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import CudaDriverError, CudaUnavailableError
from . import context, graph_memsets
from . import driver as _driver_mod

CU_STREAM_NON_BLOCKING = 1
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
CU_STREAM_CAPTURE_STATUS_NONE = 0

_BINDINGS = ("cuStreamCreate", "cuStreamEndCapture", "cuStreamIsCapturing", "cuGraphDestroy", "cuGraphExecDestroy")
_entry_points: Any = None  # the namespace driver() returns; False: no usable driver


def driver() -> Any:
    """The entry points capture and replay use, or None where the driver lacks them: those of ``_BINDINGS``
    (cuda.bindings) and ``cuGraphLaunch`` (ctypes, typed ``(exec, stream) -> CUresult``: the execute hot path's
    launch, raw for the reason ``driver.py`` gives)."""
    global _entry_points
    if _entry_points is None:
        cuda, lib = _driver_mod.bindings(), _driver_mod.raw()
        if cuda is None or lib is None or not _driver_mod.typed(lib, ("cuGraphLaunch",)):
            _entry_points = False
        else:
            _entry_points = types.SimpleNamespace(
                cuGraphLaunch=lib.cuGraphLaunch, **{name: getattr(cuda, name) for name in _BINDINGS},
                # the mode as the binding's enum (it refuses an int); cuda.bindings' cuGraphInstantiate is the
                # driver's cuGraphInstantiateWithFlags
                cuStreamBeginCapture=lambda stream, mode: cuda.cuStreamBeginCapture(
                    stream, cuda.CUstreamCaptureMode(mode)),
                cuGraphInstantiateWithFlags=cuda.cuGraphInstantiate)
    return _entry_points or None


_side_streams: dict[tuple[int, int], int] = {}  # (thread id, context id) -> this thread's capture stream there


def side_stream() -> int:
    """This thread's private capture stream in the current context (created on first use, never destroyed: one
    per thread and context). Raises RuntimeError when the driver cannot make one."""
    lib = driver()
    if lib is None:
        raise CudaUnavailableError("stream capture needs a CUDA driver with cuStreamBeginCapture")
    ctx = context.current_id()
    if ctx is None:  # keyed by address, a context made where a destroyed one was would get the old one's stream
        raise CudaUnavailableError("stream capture needs a current context with an id (cuCtxGetId: CUDA >= 12.0) "
                                   "to key its capture stream by; this thread has no current context, or the driver "
                                   "no ids")
    key = (threading.get_ident(), ctx)
    s = _side_streams.get(key)
    if s is None:
        err, made = lib.cuStreamCreate(CU_STREAM_NON_BLOCKING)
        if int(err) != 0:
            raise CudaDriverError(f"cuStreamCreate failed with CUresult {int(err)}")
        s = _side_streams[key] = int(made)
    return s


class Captured(NamedTuple):
    """What :func:`capture` made."""

    status: int  # what run() returned
    exec: int  # the instantiated graph; 0: none
    why: str  # why there is none ("" when there is one)
    memsets_replaced: int = 0  # memset nodes instantiated as kernel nodes (graph_memsets.py)
    memsets_kept: str = ""  # why the graph's memset nodes stayed memsets ("" when it had none, or all went)


def capture(stream: int, run: Callable[[], int], memsets_as_kernels: bool = False) -> Captured:
    """Capture what ``run()`` enqueues on ``stream`` (it returns a status, 0 for success) into an instantiated
    graph; with ``memsets_as_kernels``, its small memset nodes become kernel nodes (``graph_memsets.py``: a
    cheaper launch), unless that is refused or fails, when the graph is instantiated as captured."""
    lib = driver()
    if lib is None:
        return Captured(0, 0, "the CUDA driver has no stream capture entry points")
    (begun,) = lib.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    if int(begun) != 0:
        return Captured(0, 0, f"cuStreamBeginCapture failed with CUresult {int(begun)}")
    status = -1
    try:
        status = run()
    finally:  # the capture is always ended: the stream stays usable whatever run() did
        ended, got = lib.cuStreamEndCapture(stream)
    graph = int(got) if int(ended) == 0 and got is not None else 0
    rewritten = 0
    try:
        if status != 0:
            return Captured(status, 0, f"the captured call returned status {status}")
        if not graph:
            return Captured(status, 0, f"cuStreamEndCapture failed with CUresult {int(ended)} (a call not allowed "
                                       "under capture)")
        replaced, kept = 0, ""
        if memsets_as_kernels:
            try:
                target, replaced, kept = graph_memsets.rewrite(graph)
            except Exception as e:  # an optimization: whatever it meets, the graph as captured still runs
                target, replaced, kept = graph, 0, f"the rewrite failed: {e!r}"
            if target != graph:
                rewritten = target
        made, exec_ = lib.cuGraphInstantiateWithFlags(rewritten or graph, 0)
        if rewritten and (int(made) != 0 or not int(exec_ or 0)):  # the rewritten graph did not: the captured one
            kept = f"the graph with kernel nodes for its memsets did not instantiate (CUresult {int(made)})"
            replaced = 0
            made, exec_ = lib.cuGraphInstantiateWithFlags(graph, 0)
        if int(made) != 0 or not int(exec_ or 0):
            return Captured(status, 0, f"cuGraphInstantiateWithFlags failed with CUresult {int(made)}")
        return Captured(status, int(exec_), "", replaced, kept)
    finally:
        if rewritten:
            lib.cuGraphDestroy(rewritten)
        if graph:
            lib.cuGraphDestroy(graph)  # the exec keeps what it needs


def destroy_exec(exec_: int) -> None:
    """Destroy an executable graph (quietly: at interpreter exit the driver may be gone already)."""
    lib = driver()
    if lib is not None and exec_:
        try:
            lib.cuGraphExecDestroy(exec_)
        except Exception:  # a finalizer must not raise
            pass
