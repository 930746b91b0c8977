"""Executing a plan with the user's operands: the execute tiers, built on the jobs of their own modules.

* ``execute_operands.py``: each key resolved to its slot, each operand checked in full against its tensor, and
  the re-check of every later call against what was checked (``OperandSlots._resolve``);
* ``execute_bindings.py``: what a call binds (``Binding``: plan, workspace, pointers, its variant pack), the one
  test of whether a call may use a binding (``Binding.matches``), and the executor's cache of bindings;
* ``execute_defaults.py``: the default handle of a call without one, on the framework's current stream;
* ``workspace.py``: the workspace cudnn_py allocates for ``workspace=None``; ``execute_replay.py``: recordings.

The tiers. :meth:`Executor.execute` re-checks the operands (``_resolve``), checks them all in full when one is
unlike the last checked for its slot, resolves the handle (given, else the graph's, else this thread's default one;
a handle of another device than the graph's is refused), the workspace and the binding (``matches``, else the
cache, else a new variant pack), and calls ``cudnnBackendExecute`` with the handle's CUDA context current.
:meth:`Executor.fast` is the same for one plan with its lookups bound once (the graph installs it as its own
``execute``): the same ``_resolve`` and ``matches``; whatever it cannot decide as execute would (an operand to check
in full, pointers never seen, a new stream, another context, a thread's first call, tracing) it hands to execute.
It launches recordings (``execute_replay.py``), and its steady state's hot path caches only what the general path
looked up (the handle's record, the recording), after the same ``_resolve`` and ``matches``. So every operand and
binding check is made by one function that every tier calls; ``tests/test_replay_policy.py`` plays random call
sequences through the tiers against each other.

Streams. With a handle — given to execute, else the one the graph was created with — execute runs on that handle's
stream (set with ``set_stream``), as in the classic module. Without one, it runs on the *operands' framework's
current stream* with this thread's default handle (``execute_defaults.py``). ``workspace=None`` takes a buffer of the
executor's ``WorkspaceCache``, one per (device, stream), allocated stream-ordered on the stream the call runs on.

Devices. A graph is built for one device: the device of the handle it was planned with (``Executor.device``, set
when the operation graph gets its handle). Every full operand check compares the operand's device with it, as does
every call for the handle it is given; the re-check includes the device. Each call runs with its handle's CUDA
context current (``cuda/context.py``): the fast path reads the current context (one ctypes call) and leaves for
execute, which makes the handle's context current around the call and restores the caller's, when it is another
one; in a process that sees one device the fast path skips reading it (``execute_defaults.first_context``).

Threads. A call holds its binding (which holds the descriptor) until cuDNN returns; the last binding is published
and read in one step (``execute_bindings.py``).
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from threading import get_ident
from typing import Any

from ..backend import trace
from ..backend.api import error_for, lib
from ..backend.handle import live_handle
from ..backend.live import _live as _live_handles  # the registry of live handles (a dict: one lookup)
from ..backend.live import lookup as _lookup_handle
from ..cuda import capture
from ..cuda import context as _context
from ..errors import InvalidTypeError, InvalidValueError
from ..interop import NO_FRAMEWORK, POINTER_GETTERS, _buffer_ptr, _torch_signature, data_ptr, signature_getter
from . import execute_defaults as defaults
from .execute_bindings import NO_BINDING, VARIANT_PACK_CACHE_SIZE, BindingCache
from .execute_defaults import _DEFAULT_HANDLES
from .execute_operands import _UNCHECKED, OperandSlots, _check_operand, _check_workspace, _where
from .execute_replay import Replays, environment_refusal
from .workspace import WorkspaceCache

# names other modules and the tests read here
__all__ = ["VARIANT_PACK_CACHE_SIZE", "Executor", "_DEFAULT_HANDLES", "_check_operand"]


def _get_stream(handle: int) -> int:  # an indirection the CPU tests replace (no cudnnGetStream without a GPU)
    from ..backend import handle as _handle_mod

    return _handle_mod.get_stream(handle)


class Executor(OperandSlots, BindingCache):
    """Variant-pack binding and execution for one lowered graph."""

    def __init__(self, uids: list[int], ir_by_uid: dict[int, Any], aliases: dict[int, tuple[int, int]] | None = None,
                 unread: Any = ()):
        """See ``OperandSlots._init_operands`` for ``aliases`` and ``unread``."""
        self._init_operands(uids, ir_by_uid, aliases, unread)
        self._init_bindings()
        self._workspaces = WorkspaceCache()
        self._backend_execute = lib().cudnnBackendExecute
        host_scalars = [t for t in self._tensors if t.is_pass_by_value and t.pass_by_value is None]
        self.replays = Replays(f"{_where(host_scalars[0])} is a pass-by-value scalar the caller provides: an "
                               "execute reads its value on the host at each call, a replay would not"
                               if host_scalars else environment_refusal())
        # the handle the graph was created with (pygraph(handle=...)): used when execute gets none, as classic does
        self.graph_handle: Any = None
        # the device the graph was built for (its planning handle's); None until known (deviceless validation)
        self.device: int | None = None

    def set_device(self, device: int | None) -> None:
        """Record the device the graph's plans are built for. Operands checked before are checked again."""
        if device != self.device:
            self.device = device
            self._checked[:] = [_UNCHECKED] * len(self._uids)  # in place: the bound executes (fast) read this list
            self._last = NO_BINDING

    def execute(self, plan: Any, variant_pack: dict, workspace: Any = None, handle: Any = None) -> None:
        got = self._resolve(variant_pack)  # the operands re-checked against their slots' rows (execute_operands)
        if got is None:  # an operand unlike the one last checked for its slot: check them all now
            ptrs = self._gather(variant_pack)
            placement, same = self._check_operands(variant_pack, ptrs), False
        else:
            (ptrs, placement), same = got, True
            if 0 in ptrs:
                self._missing(ptrs)
        if placement is None:
            placement = NO_FRAMEWORK
        stream = None
        if handle is None:
            handle = self.graph_handle
        if handle is not None:
            rec = _live_handles.get(handle) if handle.__hash__ is not None else None
            if rec is None:  # cuDNN dereferences it unchecked
                live_handle(handle, "execute(handle=...)")
                rec = _lookup_handle(handle)
            ctx = rec.context if rec is not None else None
            if rec is not None and rec.device is not None and self.device is not None and rec.device != self.device:
                raise InvalidValueError(f"execute(handle=...): handle 0x{int(handle):x} is on device {rec.device}, "
                                        f"but the graph was built for device {self.device}; pass a handle of device "
                                        f"{self.device} or build the graph with one of device {rec.device}")
        else:
            state = defaults.default_handle_on(placement, self.device)
            handle, stream, ctx = state.handle, state.stream, state.context
        device = self.device if self.device is not None else placement.device
        defaults.first_context(ctx)
        with _context.bound(ctx):  # the handle's context current for the call, the caller's restored after
            self._enqueue(plan, variant_pack, workspace, handle, stream, placement, device, ptrs, same)

    def _enqueue(self, plan: Any, variant_pack: dict, workspace: Any, handle: Any, stream: Any, placement: Any,
                 device: int | None, ptrs: list[int], same: bool) -> None:
        """The rest of :meth:`execute`, with the handle's context current: workspace, binding, cudnnBackendExecute."""
        ws_entry = None  # held until cuDNN returns: the buffer cannot be freed under this call
        if workspace is None:
            ws = 0
            if plan.workspace > 0:
                if stream is None:
                    stream = _get_stream(handle)
                ws_entry = self._workspaces.get(plan.workspace, placement.framework, device, stream,
                                                getattr(handle, "ordinal", None))
                ws = ws_entry[1]
        elif workspace.__class__ is int:
            ws = workspace
        else:
            ws = data_ptr(workspace)
            _check_workspace(workspace, plan, self.device)
        binding = self._last  # read once: another thread may publish its own meanwhile
        if not binding.matches(plan, ws, ptrs):
            binding = self._binding_for(plan, variant_pack, ws, ptrs, checked=not same)
        if trace.active is None:
            status = self._backend_execute(handle, plan.ptr, binding.vp_ptr)
        else:
            call = trace.begin("cudnnBackendExecute", handle=trace.hexptr(int(handle)), plan=plan.id,
                               variant_pack=hex(binding.vp_ptr.value or 0), plan_name=plan.name)
            status = self._backend_execute(handle, plan.ptr, binding.vp_ptr)
            if call is not None:
                call.end(status)
        if status != 0:
            raise error_for(status, "cudnnBackendExecute", kind="CUDNN_BACKEND_EXECUTION_PLAN",
                            detail=f"plan {plan.name}")

    def fast(self, plan: Any, classic: Callable[..., None] | None = None):
        """``execute`` for one plan, specialised for the call that repeats: what :meth:`execute` computes per call
        is bound once as closure locals. Every call re-checks its operands with :meth:`_resolve` and its binding
        with ``Binding.matches``, as :meth:`execute` does; it hands anything else (an operand unlike the last
        checked one, pointers never seen, a stream change, no handle yet, tracing on) to :meth:`execute`.

        The steady state of a replayed call (the same recording launched by two calls in a row, an explicit or the
        graph's handle) is a cache only: it keeps the handle's registry record and the recording (whose binding
        is the call's), so a call that passes the same checks (operands, workspace, binding, handle, recording,
        tracing, the thread, its context, the stream and whether the caller captures it) launches without looking
        them up again; on any difference the state is dropped and the general path decides.

        It also takes the classic ``execute``'s other keywords (``override_*``, ``tensor_uids``), so that
        ``pygraph`` can install it as the graph's ``execute`` itself (one Python frame per call): a call that
        gives any of them goes to ``classic`` with every argument (a TypeError without one)."""
        resolve = self._resolve
        backend_execute, plan_ptr, plan_ws, plan_id = self._backend_execute, plan.ptr, plan.workspace, plan.id
        default_handles, ws_buffers = defaults._DEFAULT_HANDLES, self._workspaces._buffers
        getters, graph_handle = POINTER_GETTERS, self.graph_handle
        live_handles, buffer_ptr = _live_handles, _buffer_ptr
        ctx_get = _context.reader()  # None without a driver: no context to check
        if ctx_get is not None and not _context.several_devices():
            ctx_get = None  # one device, one primary context: nothing to check per call (see several_devices)
        executed = defaults.executed  # .params: the calls' out-parameters, once the thread's first call set them
        replays, find_replay = self.replays, self.replays.find
        driver: Any = capture.driver() if replays.on else None  # replays.on implies a driver
        is_capturing: Any = driver.cuStreamIsCapturing if driver else None  # cuda.bindings': (CUresult, status)
        graph_launch: Any = driver.cuGraphLaunch if driver else None  # ctypes (capture.py): CUresult
        cudnn_get_stream = lib().cudnnGetStream
        slow = functools.partial(self.execute, plan)
        executor = self
        # The steady state of a replayed call, made when the general path launches the recording the executor
        # launched last (two launches of it in a row: bindings, handles or plans taking turns never pay for making
        # it; see _hot_state): one tuple, replaced whole, None when there is none; it holds its recording weakly.
        # `tried`: the id of the recording a state was last made (or found impossible) for, so that is tried once
        # per run. An id, not a reference: a recording dropped or evicted is destroyed at once (its graph exec with
        # it); an id reused by a later recording only skips one attempt.
        hot: tuple | None = None
        tried = 0

        def run(variant_pack: dict, workspace: Any = None, handle: Any = None, override_uids: Any = None,
                override_shapes: Any = None, override_strides: Any = None, tensor_uids: Any = None) -> None:
            nonlocal hot, tried
            if override_uids is not None or override_shapes is not None or override_strides is not None or \
                    tensor_uids is not None:
                if classic is None:
                    raise InvalidTypeError(f"plan {plan.name}'s execute takes no override_uids, override_shapes, "
                                    "override_strides or tensor_uids")
                return classic(variant_pack, workspace, handle, override_uids, override_shapes, override_strides,
                               tensor_uids)
            got = resolve(variant_pack)  # every operand re-checked against its slot's row, as execute does
            if got is None:
                if hot is not None:
                    hot, tried = None, 0
                return slow(variant_pack, workspace, handle)
            ptrs, placement = got
            state_now = hot
            if state_now is not None:
                # The hot path: what the general path below would look up, cached for one call shape (the
                # pack's keys in order) — the handle's registry record and the recording launched last, whose
                # binding must still be the executor's last and match the call (Binding.matches: plan, workspace
                # pointer, the pointers just re-checked). Anything else clears the state and takes the general
                # path, which decides; nothing is launched here that the general path would not launch.
                keys, hot_rec, ws_cls, replay_ref = state_now
                hot_replay = replay_ref()  # still recorded and launched last
                if tuple(variant_pack) == keys and hot_replay is replays.last and hot_replay is not None:
                    # the workspace's pointer as the general path reads it; -1: the general path decides
                    if workspace.__class__ is ws_cls:
                        ws = workspace.data_ptr() if workspace.nbytes >= plan_ws else -1
                    elif workspace is None:
                        ws = 0 if not plan_ws else -1  # (workspace=None with a workspace: the general path)
                    elif workspace.__class__ is int:
                        ws = workspace
                    else:
                        ws = -1
                    h = graph_handle if handle is None else handle
                    binding = hot_replay.binding
                    if executor._last is binding and binding.matches(plan, ws, ptrs) and \
                            live_handles.get(h) is hot_rec and trace.active is None:
                        try:
                            out = executed.params
                        except AttributeError:  # this thread's first call: the general path sends it on
                            out = None
                        ctx = hot_rec.context  # type: ignore[union-attr]  # (narrowed by `is`: the record)
                        if out is not None and (ctx_get is None or ctx is None or (
                                (got := ctx_get())[0] == 0 and int(got[1]) == ctx)) and \
                                cudnn_get_stream(h, out.stream) == 0:
                            stream = out.stream.value or 0
                            if stream < 2 or ((got := is_capturing(stream))[0] == 0 and got[1] == 0):
                                if graph_launch(hot_replay.exec, stream) == 0:
                                    hot_replay.launches += 1
                                    return None
                                # (the general path below launches it once more, and drops it if that fails)
                hot, tried = None, 0
            try:
                out = executed.params
            except AttributeError:  # this thread's first call: the slow path makes its buffers (and gives it a context)
                return slow(variant_pack, workspace, handle)
            graph_device = executor.device  # read per call: set_device may come after this closure was made
            stream = state = None
            owner: Any  # the handle's registry record, or this thread's default-handle state: what a replay is for
            if handle is not None or graph_handle is not None:
                h = graph_handle if handle is None else handle  # `handle` stays the caller's: the slow path gets it
                rec = live_handles.get(h)
                # not live, or of another device than the graph's: the slow path raises, naming why
                if rec is None or (graph_device is not None and rec.device is not None and rec.device != graph_device):
                    return slow(variant_pack, workspace, handle)
                ctx, owner = rec.context, rec
            else:
                if placement is None:
                    placement = NO_FRAMEWORK
                state = default_handles.get((get_ident(), placement.device if graph_device is None else graph_device))
                if state is None or live_handles.get(state.handle) is not state.record:  # (destroyed: a new one)
                    return slow(variant_pack, workspace, handle)
                stream = placement.current_stream()
                if stream != state.stream:  # the slow path binds the new stream
                    return slow(variant_pack, workspace, handle)
                h, ctx, owner = state.handle, state.context, state
            if ctx_get is not None and ctx is not None:  # cuCtxGetCurrent, inlined: no call frame
                got = ctx_get()
                if got[0] != 0 or int(got[1]) != ctx:  # the slow path switches contexts
                    return slow(variant_pack, workspace, handle)
            if workspace is None:
                ws = 0
                if plan_ws:
                    if placement is None:
                        placement = NO_FRAMEWORK
                    if stream is None:
                        stream = _get_stream(h)
                    # held until cuDNN returns
                    ws_entry = ws_buffers.get((placement.device if graph_device is None else graph_device, stream))
                    if ws_entry is None or ws_entry[0] < plan_ws:
                        return slow(variant_pack, workspace, handle)
                    ws = ws_entry[1]
            elif workspace.__class__ is int:
                ws = workspace
            else:
                getter = getters.get(workspace.__class__)
                nbytes = getattr(workspace, "nbytes", None)
                if nbytes is None and getter is buffer_ptr:  # a cuda.core Buffer knows its size in bytes
                    nbytes = workspace.size
                if getter is None or nbytes is None or nbytes < plan_ws:  # the slow path checks and reports
                    return slow(variant_pack, workspace, handle)
                ws = getter(workspace)
            binding = executor._last  # read once; holding it keeps its variant pack alive
            if trace.active is not None:
                return slow(variant_pack, workspace, handle)
            if not binding.matches(plan, ws, ptrs):
                # Other pointers than the last call's (a framework's fresh output tensors at every call): where a
                # variant pack was built for these before, execute does no more than this path has done (every
                # operand re-checked against its slot's signature, the handle, stream, context and workspace as
                # above) before it takes that pack from its cache (_binding_for: no check on a hit) and executes.
                # So does this, with neither replay nor recording (as execute). Pointers never seen go to execute,
                # which checks them in full, and so does a caller's workspace object (execute checks its device).
                if workspace is not None and workspace.__class__ is not int:
                    return slow(variant_pack, workspace, handle)
                cached = executor._cached_binding((plan_id, ws, *ptrs))
                if cached is None:
                    return slow(variant_pack, workspace, handle)
                status = backend_execute(h, plan_ptr, cached.vp_ptr)
                if status != 0:
                    raise error_for(status, "cudnnBackendExecute", kind="CUDNN_BACKEND_EXECUTION_PLAN",
                                    detail=f"plan {plan.name}")
                return None
            if replays.on:  # replay.py: a recorded binding is launched as a CUDA graph
                if stream is None:
                    if cudnn_get_stream(h, out.stream) != 0:
                        return slow(variant_pack, workspace, handle)
                    stream = out.stream.value or 0
                replay = replays.last  # the one launched last, else the one recorded for this binding and handle
                again = replay is not None and replay.binding is binding and replay.owner is owner
                if not again:
                    replay = find_replay(binding, owner)
                if replay is not None:
                    # not while the caller captures this stream: its capture records the execute instead. The
                    # legacy default stream (0, or CU_STREAM_LEGACY: 1) cannot be captured: no query for it
                    if stream < 2 or ((got := is_capturing(stream))[0] == 0 and got[1] == 0):
                        status = graph_launch(replay.exec, stream)
                        if status == 0:
                            replay.launches += 1
                            if again and tried != id(replay):  # the second launch in a row: a steady state?
                                tried = id(replay)
                                if state is None:
                                    hot = _hot_state(variant_pack, workspace, rec, replay)
                            return None
                        replays.drop(replay, f"plan {plan.name}: cuGraphLaunch failed with CUresult {status}")
                elif replays.consider(binding, owner, h, stream, backend_execute):
                    return None
            status = backend_execute(h, plan_ptr, binding.vp_ptr)
            if status != 0:
                raise error_for(status, "cudnnBackendExecute", kind="CUDNN_BACKEND_EXECUTION_PLAN",
                                detail=f"plan {plan.name}")

        return run


def _hot_state(variant_pack: dict, workspace: Any, rec: Any, replay: Any) -> tuple | None:
    """The steady state of the call that just launched ``replay`` for the second time in a row, for the hot path of
    ``Executor.fast``: (the pack's keys in order, the call shape it caches for; the handle's registry record; the
    workspace's class where it is a torch tensor, else None; a weak reference to the recording, whose binding is the
    call's). None when the workspace is neither a torch tensor, an int nor None: the hot path reads a workspace's
    size and pointer as torch's (nbytes, data_ptr()), so such calls stay on the general path."""
    if workspace is not None and workspace.__class__ is not int and \
            signature_getter(workspace.__class__) is not _torch_signature:
        return None
    ws_cls = None if workspace is None or workspace.__class__ is int else workspace.__class__
    return (tuple(variant_pack), rec, ws_cls, weakref.ref(replay))
