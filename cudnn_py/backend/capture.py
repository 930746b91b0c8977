"""Stream capture through the CUDA driver API (``libcuda.so.1``, via ctypes): what replaying an execute takes.

``plans/replay.py`` records one ``cudnnBackendExecute`` into a CUDA graph on a private stream and launches the
instantiated graph on later calls with the same operands; this module is the driver side of that and nothing else:

* :func:`driver` - the ctypes libcuda with the capture entry points typed, or None (no driver, or one without
  them: the CPU test stub exports only what cuDNN's engines need);
* :func:`side_stream` - this thread's private capture stream in the current context (non-blocking, created once);
* :func:`capture` - begin (thread-local mode) / run / end / instantiate, returning the executable graph or why not
  (its small memset nodes as kernel nodes, on request: ``graph_memsets.py``);
* :func:`destroy_exec`.

Thread-local capture mode: another thread's CUDA calls are neither captured nor refused, and this thread cannot
make an unsafe call unnoticed (cuDNN gets an error instead, and the capture is thrown away).
"""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import CudaDriverError, CudaUnavailableError
from . import context, graph_memsets

CU_STREAM_NON_BLOCKING = 1
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
CU_STREAM_CAPTURE_STATUS_NONE = 0

_vp = ctypes.c_void_p
_PROTOTYPES: dict[str, list] = {  # entry point -> argument types (context.typed)
    "cuStreamCreate": [_vp, ctypes.c_uint], "cuStreamBeginCapture_v2": [_vp, ctypes.c_int],
    "cuStreamEndCapture": [_vp, _vp], "cuStreamIsCapturing": [_vp, _vp],
    "cuGraphInstantiateWithFlags": [_vp, _vp, ctypes.c_ulonglong], "cuGraphLaunch": [_vp, _vp],
    "cuGraphDestroy": [_vp], "cuGraphExecDestroy": [_vp]}
_typed: Any = None  # the typed libcuda; False: none with these entry points


def driver() -> Any:
    """libcuda with the capture entry points typed, or None where the driver lacks them."""
    global _typed
    if _typed is None:
        lib = context._lib()
        _typed = lib if lib and context.typed(lib, _PROTOTYPES) else False
    return _typed or None


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
        out = ctypes.c_void_p()
        status = lib.cuStreamCreate(ctypes.byref(out), CU_STREAM_NON_BLOCKING)
        if status != 0:
            raise CudaDriverError(f"cuStreamCreate failed with CUresult {status}")
        s = _side_streams[key] = out.value or 0
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
    begun = lib.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    if begun != 0:
        return Captured(0, 0, f"cuStreamBeginCapture failed with CUresult {begun}")
    status = -1
    try:
        status = run()
    finally:  # the capture is always ended: the stream stays usable whatever run() did
        graph = ctypes.c_void_p()
        ended = lib.cuStreamEndCapture(stream, ctypes.byref(graph))
    rewritten = 0
    try:
        if status != 0:
            return Captured(status, 0, f"the captured call returned status {status}")
        if ended != 0 or not graph.value:
            return Captured(status, 0, f"cuStreamEndCapture failed with CUresult {ended} (a call not allowed under "
                                       "capture)")
        replaced, kept = 0, ""
        if memsets_as_kernels:
            try:
                target, replaced, kept = graph_memsets.rewrite(graph.value)
            except Exception as e:  # an optimization: whatever it meets, the graph as captured still runs
                target, replaced, kept = graph.value, 0, f"the rewrite failed: {e!r}"
            if target != graph.value:
                rewritten = target
        exec_ = ctypes.c_void_p()
        made = lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), rewritten or graph, 0)
        if rewritten and (made != 0 or not exec_.value):  # the rewritten graph did not instantiate: the captured one
            kept = f"the graph with kernel nodes for its memsets did not instantiate (CUresult {made})"
            replaced = 0
            made = lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, 0)
        if made != 0 or not exec_.value:
            return Captured(status, 0, f"cuGraphInstantiateWithFlags failed with CUresult {made}")
        return Captured(status, exec_.value, "", replaced, kept)
    finally:
        if rewritten:
            lib.cuGraphDestroy(rewritten)
        if graph.value:
            lib.cuGraphDestroy(graph)  # the exec keeps what it needs


def destroy_exec(exec_: int) -> None:
    """Destroy an executable graph (quietly: at interpreter exit the driver may be gone already)."""
    lib = driver()
    if lib is not None and exec_:
        try:
            lib.cuGraphExecDestroy(exec_)
        except Exception:  # a finalizer must not raise
            pass
