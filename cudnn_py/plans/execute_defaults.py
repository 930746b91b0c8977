"""The default handles of the execute path: this thread's handle for the graph's device, the stream last bound to
it, and the hook that keeps that record true when anyone sets the handle's stream.

Without a handle, execute runs on the operands' framework's current stream (see ``execute.py``): that stream is bound
to this thread's default handle for the graph's device with ``cudnnSetStream``, only when it changed since that
handle's last call. Default handles are per (thread, graph device).

``_DEFAULT_HANDLES``, ``_executed`` and the registry alias ``_live_handles`` are read here and, as globals of
``execute.py`` (imported there), by ``Executor.execute`` and ``Executor.fast``: a test that replaces one of them
replaces it in both modules; the indirections below (``_new_default_handle``, ``_set_stream``, ``_context_of``) are
replaced here.
"""
from __future__ import annotations

import threading
from threading import get_ident
from typing import Any

from ..backend import handle as _handle_mod
from ..backend import out_params
from ..backend.live import _live as _live_handles  # the registry of live handles (a dict: one lookup)
from ..cuda import context as _context
from .execute_checks import call_check


class _DefaultHandle:
    """A thread's default handle for one device, the stream last bound to it (None: not yet bound), the CUDA
    context it belongs to (None: not known) and its record in the handle registry when it was taken: the handle is
    ``backend.default_handle()``, which a caller can destroy; a state whose handle no longer has that record is
    replaced, never used (cuDNN would dereference the freed handle)."""

    __slots__ = ("handle", "stream", "context", "record")

    def __init__(self, handle: int, context: int | None = None):
        self.handle, self.context = handle, context
        self.stream: int | None = None
        self.record = _live_handles.get(handle)


# (thread id, device or None for "the current device") -> its default handle. Shared by every executor, since the
# handles are (backend.handle.default_handle); each entry is only read and written by its own thread.
_DEFAULT_HANDLES: dict[tuple[int, int | None], _DefaultHandle] = {}


def _note_stream_set(handle: int, stream: int) -> None:
    """backend.handle.set_stream's hook: a default handle's stream set by anyone (the caller's own
    set_stream(default_handle(), ...) among them) is the stream its state records, so the next execute without a
    handle binds the framework's current stream again instead of trusting a stale record."""
    for state in list(_DEFAULT_HANDLES.values()):  # (one C-level copy: safe against other threads' inserts)
        if state.handle == handle:
            state.stream = stream


_handle_mod.stream_set_hooks.append(_note_stream_set)


# indirections the CPU tests replace (no cudnnCreate without a GPU)
def _new_default_handle(device: int | None) -> int:
    return int(_handle_mod.default_handle(device))


def _set_stream(handle: int, stream: int) -> None:
    _handle_mod.set_stream(handle, stream)


def _context_of(handle: int) -> int | None:
    return _handle_mod.context_of(handle)


# (execute_checks.CALL_CHECKS: the bound execute inlines the same two)
_default_handle_live = call_check("default_handle_live")
_stream_bound = call_check("stream_bound")


def _default_handle_on(placement: Any, device: int | None = None) -> _DefaultHandle:
    """This thread's default handle for ``device`` (the graph's; None: the placement's device), bound to the
    framework's current stream."""
    if device is None:
        device = placement.device
    key = (get_ident(), device)
    state = _DEFAULT_HANDLES.get(key)
    if not _default_handle_live(state, _live_handles):  # none yet, or destroyed since
        h = _new_default_handle(device)
        state = _DEFAULT_HANDLES[key] = _DefaultHandle(h, _context_of(h))
    assert state is not None  # (the check above: a live one, or a new one)
    stream = placement.current_stream()
    if not _stream_bound(state, stream):
        _set_stream(state.handle, stream)
        state.stream = stream
    return state


# .params: this thread's out-parameters, set by its first execute (the slow path, _first_context) and read by the
# fast path: a thread without them has not made its first call yet. Not out_params.per_thread itself: what marks
# the thread is that its first call went through _first_context, not that some call made its buffers.
_executed = threading.local()


def _first_context(ctx: int | None) -> None:
    """Make the handle's context current on a thread that has none, in a process that sees one device, and mark
    the thread as one the fast path may run on. With one device the fast path skips reading the current context
    (context.several_devices), and on a thread that has done no CUDA work there is none: a cuGraphLaunch or a
    capture there fails (and the plan would lose its replay for every thread). The CUDA runtime makes the same
    (primary) context current at a thread's first runtime call. With several devices each call on another context
    than the handle's takes the slow path, which switches for the call and restores the thread's own. Once per
    thread: every later slow call (each new pointer set) would read the context again, and context.bound reads it."""
    if getattr(_executed, "params", None) is not None:
        return
    if ctx and not _context.several_devices() and _context.current() == 0:
        _context.set_current(ctx)
    _executed.params = out_params.this_thread()
