"""Binding user operands to a plan and executing it — the per-call hot path.

What repeats between calls is computed once: the slot of every accepted key (Tensor, uid, name), the host
values of pass-by-value scalars, and finalized VARIANT_PACK descriptors keyed by the tuple of pointers.

Checks. An operand is fully checked (shape, strides, dtype, device, alignment) when its pointer tuple is new or
when it does not match the *signature* recorded for its slot at its last full check: class, shape, strides,
dtype and device, read as cheaply as its framework allows (see ``interop.signature_getter``). The cached path
compares that signature for every operand on every call, so a tensor with the pointer of a checked one but
other strides, another dtype or another device is checked again, and rejected with a ValueError naming the
tensor and what differs. Int pointers carry no metadata: they are the caller's responsibility.

Streams. With a handle — given to execute, else the one the graph was created with — execute runs on that handle's
stream (set with ``set_stream``), as in the classic module. Without one, it runs on the *operands' framework's
current stream*: torch's current stream of the operands' device for torch tensors, cupy's current stream for cupy
arrays, else the legacy default stream (0) — only frameworks already in ``sys.modules`` are consulted, none is
imported. That stream is bound to this thread's default handle for the operands' device with ``cudnnSetStream``,
only when it changed since that handle's last call.

Workspace. ``workspace=None`` takes a buffer of the executor's ``WorkspaceCache``, one per (device, stream),
allocated stream-ordered on the stream the call runs on (see ``workspace.py`` for the ordering argument).

Devices. A graph is built for one device: the device of the handle it was planned with (``Executor.device``, set
when the operation graph gets its handle). Every full operand check compares the operand's device with it (a
``ValueError`` naming the tensor and both devices), as does every call for the handle it is given; the signature
re-check of the cached path includes the device, so the fast path needs no further device test. Each call runs
with its handle's CUDA context current (``cuda/context.py``): the fast path reads the current context (one
ctypes call) and leaves for the slow path, which makes the handle's context current around the call and restores
the caller's, when it is another one. A thread's first call always takes the slow path; in a process that sees one
device, where the fast path skips reading the context, it makes the handle's context current on a thread that has
none (as the CUDA runtime does at a thread's first call): a launch or a capture there needs one.
Default handles are per (thread, graph device).

Threads. The variant-pack cache is an LRU under a lock; eviction only drops the cache's reference, and a call
holds its binding (which holds the descriptor) until cuDNN returns, so a descriptor is destroyed (by its
finalizer) only once no call uses it. The last binding is one immutable tuple, published and read in one step.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from threading import get_ident
from typing import Any

from ..backend import Descriptor, out_params, trace
from ..backend import handle as _handle_mod
from ..backend.api import error_for, lib
from ..backend.handle import live_handle
from ..backend.live import _live as _live_handles  # the registry of live handles (a dict: one lookup)
from ..backend.live import lookup as _lookup_handle
from ..cuda import capture
from ..cuda import context as _context
from ..enums import dtype_info
from ..errors import InvalidTypeError, InvalidValueError
from ..interop import (
    KDL_CPU,
    KDL_CUDA,
    NO_FRAMEWORK,
    POINTER_GETTERS,
    SIGNATURE_GETTERS,
    OperandInfo,
    _buffer_ptr,
    _torch_signature,
    data_ptr,
    operand_info,
    placement_of,
    pointer_getter,
    signature_getter,
)
from ..ir import layout
from .execute_replay import Replays, environment_refusal
from .workspace import WorkspaceCache

VARIANT_PACK_CACHE_SIZE = 64
SCRATCH_ALIGNMENT = 256  # bytes; each workspace-resident intermediate starts on such a boundary
_log = logging.getLogger(__name__)



def _where(t: Any) -> str:
    return f"tensor {t.name!r} (uid {t.uid})"


# ------------------------------------------------------------------------------------------------- default handles
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


def _get_stream(handle: int) -> int:
    return _handle_mod.get_stream(handle)


def _context_of(handle: int) -> int | None:
    return _handle_mod.context_of(handle)


def _default_handle_on(placement: Any, device: int | None = None) -> _DefaultHandle:
    """This thread's default handle for ``device`` (the graph's; None: the placement's device), bound to the
    framework's current stream."""
    if device is None:
        device = placement.device
    key = (get_ident(), device)
    state = _DEFAULT_HANDLES.get(key)
    if state is None or _live_handles.get(state.handle) is not state.record:  # none yet, or destroyed since
        h = _new_default_handle(device)
        state = _DEFAULT_HANDLES[key] = _DefaultHandle(h, _context_of(h))
    stream = placement.current_stream()
    if stream != state.stream:
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


# a slot's checked entry before any full check: see Executor._checked
_UNCHECKED = (None, None, None, None, None, 0, None, None, None, None)

# A binding: what one (plan, workspace, pointers) executes with — (plan, workspace pointer, pointer list, the
# VARIANT_PACK's pointer as a ctypes value, the VARIANT_PACK descriptor). Immutable once published; the list is
# never mutated after. Holding the tuple keeps the descriptor alive.
_NO_BINDING = (None, None, None, None, None)


class Executor:
    """Variant-pack binding and execution for one lowered graph."""

    def __init__(self, uids: list[int], ir_by_uid: dict[int, Any], aliases: dict[int, tuple[int, int]] | None = None,
                 unread: Any = ()):
        """``aliases``: view uid -> (source uid, byte offset). A view's pointer is its source's plus the offset (a
        slice's output: the frontend's variant-pack replacement); the caller binds the source, never the view.
        ``unread``: input tensors of the user's graph that no operation reads (a dropout of probability 0 reads
        no seed): accepted in a variant pack and skipped."""
        from ..lowering.tensors import host_scalar

        self._uids = sorted(uids)
        self._fixed_slot_by_id: dict[int, int] = {}
        self._fast_slots: dict[Any, int] = {}  # Tensor / uid / name -> slot, for the slots the caller binds
        self._slot_by_key: dict[Any, int] = {}
        self._tensors: list[Any] = []
        self._fixed: dict[int, Any] = {}  # slot -> ctypes scalar (pass-by-value with a value)
        names: dict[str, int] = {}
        for slot, uid in enumerate(self._uids):
            t = ir_by_uid[uid]
            self._tensors.append(t)
            self._slot_by_key[uid] = slot
            if t.is_pass_by_value and t.pass_by_value is not None:  # the graph carries those values
                self._fixed_slot_by_id[id(t)] = slot
            else:
                self._fast_slots[t] = slot  # Tensors hash by identity: one lookup on the hot path
            names[t.name] = -1 if t.name in names else slot
            if t.is_pass_by_value and t.pass_by_value is not None:
                self._fixed[slot] = host_scalar(t)
        for name, slot in names.items():
            if slot >= 0 and name:
                self._slot_by_key[name] = slot
        self._fast_slots.update({k: v for k, v in self._slot_by_key.items() if v not in self._fixed})
        self._ambiguous = {n for n, s in names.items() if s < 0}
        self._unread: set[Any] = set()
        for t in unread:
            self._unread.update((t, t.uid) if not t.name or t.name in names else (t, t.uid, t.name))
        slot_of = {uid: slot for slot, uid in enumerate(self._uids)}
        # (view slot, source slot, byte offset), sources before the views made from them
        self._aliases = tuple((slot_of[v], slot_of[src], off) for v, (src, off) in sorted(
            (aliases or {}).items(), key=lambda item: _alias_depth(item[0], aliases or {})))
        self._views = {v: src for v, src, _ in self._aliases}
        # keys naming a view go to _slot, which explains what to bind instead
        self._view_keys = {k: v for k, v in self._fast_slots.items() if v in self._views}
        for key in self._view_keys:
            del self._fast_slots[key]
        self._bound: dict[int, Any] = {}
        self._bound_items: tuple = ()  # (slot, value) of data bound at build time
        self._template = [0] * len(self._uids)
        for slot, value in self._fixed.items():
            self._template[slot] = ctypes.addressof(value)
        # slot -> (class, pointer getter, signature getter, signature, placement, torch kind, and for torch the
        # signature's shape, strides, dtype and device, else None each) of the operand last fully checked there:
        # one flat tuple (the fast path unpacks it in one step), replaced whole (_UNCHECKED: nothing checked yet,
        # or a bare pointer).
        self._checked: list[tuple] = [_UNCHECKED] * len(self._uids)
        self._vp_cache: OrderedDict[tuple, tuple] = OrderedDict()
        self._vp_lock = threading.Lock()
        self._workspaces = WorkspaceCache()
        self._scratch: list[tuple[int, int]] = []  # (uid, byte offset in the workspace): see set_scratch
        self.scratch_bytes = 0
        self._backend_execute = lib().cudnnBackendExecute
        self._last: tuple = _NO_BINDING
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
            self._last = _NO_BINDING

    # --------------------------------------------------------------------------------------------- binding
    def _slot(self, key: Any) -> int:
        """The slot of any accepted key, including scalars the graph carries; a ValueError naming the key else."""
        try:
            s = self._fast_slots.get(key)
            if s is None:
                s = self._view_keys.get(key)
            if s is None:
                s = self._slot_by_key.get(key)
        except TypeError:  # an unhashable key: reported below
            s = None
        if s is None:
            s = self._fixed_slot_by_id.get(id(key))
        if s is not None and s in self._views:
            view, source = self._tensors[s], self._tensors[self._views[s]]
            raise InvalidValueError(f"variant pack key {_where(view)} is a view of {_where(source)} (a slice's output, "
                             "which aliases its input's memory): bind the source; the view's pointer is derived")
        if s is not None:
            return s
        try:
            if key in self._unread:
                return -1  # a tensor of the graph that no operation reads: the caller skips it
        except TypeError:
            pass
        if isinstance(key, str) and key in self._ambiguous:
            raise InvalidValueError(f"variant pack key {key!r} names several tensors; use the Tensor object or its uid")
        if hasattr(key, "uid"):  # a Tensor not registered by identity: another graph's, or a virtual one
            raise InvalidValueError(f"variant pack key {getattr(key, 'name', key)!r} (uid {key.uid}) is not a "
                                    f"non-virtual "
                             "tensor of this graph")
        raise InvalidValueError(f"variant pack key {key!r} is not a non-virtual tensor of this graph "
                         f"(expected one of uids {self._uids})")

    def pointers(self, variant_pack: dict) -> list[int]:
        """The data pointer of every variant-pack slot, in uid order. Slots the caller leaves out keep the
        template's value (scalars the graph carries, data bound at build time); a slot still 0 is missing."""
        return self._resolve(variant_pack)[0]

    def _resolve(self, variant_pack: dict) -> tuple[list[int], bool, Any]:
        """(pointers, whether every operand matches the signature last checked for its slot, the placement of
        the first device operand of a framework or None)."""
        ptrs = self._template.copy()
        slots, fixed, checked = self._fast_slots, self._fixed, self._checked
        same, placement = True, None
        for key, value in variant_pack.items():
            slot = slots.get(key)
            if slot is None:
                if key is None:
                    continue
                slot = self._slot(key)
                if slot < 0 or slot in fixed:
                    continue  # read by no operation, or a scalar whose value the graph carries
            cls = value.__class__
            if cls is int:
                ptrs[slot] = value
                continue
            seen_cls, getter, signature, sig, where = checked[slot][:5]
            if seen_cls is not cls:
                ptrs[slot] = data_ptr(value)
                same = False
                continue
            ptrs[slot] = getter(value)
            if signature(value) != sig:
                same = False
            elif placement is None:
                placement = where
        for slot, value in self._bound_items:
            if ptrs[slot] != self._template[slot]:
                continue  # the caller's pack rebinds this slot
            seen_cls, getter, signature, sig, where = checked[slot][:5]
            if seen_cls is not value.__class__ or signature(value) != sig:
                same = False
                continue
            ptrs[slot] = getter(value)
            if placement is None:
                placement = where
        for view, source, offset in self._aliases:
            ptrs[view] = ptrs[source] + offset if ptrs[source] else 0
        if 0 in ptrs:
            missing = [self._tensors[s] for s, p in enumerate(ptrs) if p == 0 and s not in self._views]
            raise InvalidValueError("variant pack is missing " + ", ".join(_where(t) for t in missing))
        return ptrs, same, placement

    def bind(self, bindings: dict) -> None:
        """Pre-fill slots with data bound at build time (framework tensors passed to op builders)."""
        for uid, value in bindings.items():
            slot = self._slot_by_key.get(uid)
            if slot is not None and slot not in self._fixed:
                self._template[slot] = data_ptr(value)
                self._bound[slot] = value
        self._bound_items = tuple(self._bound.items())

    def _check_operands(self, variant_pack: dict, ptrs: list[int]) -> Any:
        """The full check of every operand; records their signatures. Returns the placement (see _resolve)."""
        placement, given = None, set()
        for key, value in variant_pack.items():
            if key is None:
                continue
            slot = self._slot(key)
            if slot < 0 or slot in self._fixed:
                continue
            given.add(slot)
            p = self._check_one(slot, value, ptrs)
            if placement is None:
                placement = p
        for slot, value in self._bound.items():
            if slot not in given:  # data bound at build time, unless the pack rebinds its slot
                p = self._check_one(slot, value, ptrs)
                if placement is None:
                    placement = p
        return placement

    def _check_one(self, slot: int, value: Any, ptrs: list[int]) -> Any:
        info = operand_info(value)
        ptrs[slot] = info.ptr
        _check_operand(self._tensors[slot], info)
        if self.device is not None and info.device_type == KDL_CUDA:
            _check_device(self._tensors[slot], info, self.device)
        cls = value.__class__
        if cls is int:
            return None
        placement = placement_of(value, info)
        signature = SIGNATURE_GETTERS.get(cls) or signature_getter(cls)
        getter = POINTER_GETTERS.get(cls) or pointer_getter(cls)
        sig = signature(value)
        # torch: 2 when the strides checked are the row-major strides of the shape, so that is_contiguous() (cheaper
        # than reading and comparing stride()) re-checks them; 1 for other strides; 0 for other frameworks
        torch_kind, fields = 0, (None, None, None, None)
        if signature is _torch_signature:
            torch_kind = 2 if tuple(sig[1]) == tuple(layout.row_major_strides(list(sig[0]))) else 1
            fields = tuple(sig)  # (shape, strides, dtype, device)
        self._checked[slot] = (cls, getter, signature, sig, placement, torch_kind, *fields)
        return placement

    # --------------------------------------------------------------------------------------------- execute
    def execute(self, plan: Any, variant_pack: dict, workspace: Any = None, handle: Any = None) -> None:
        ptrs, same, placement = self._resolve(variant_pack)
        if not same:  # an operand unlike the one last checked for its slot: check them all now
            placement = self._check_operands(variant_pack, ptrs)
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
                                        f"but the "
                                 f"graph was built for device {self.device}; pass a handle of device {self.device} "
                                 f"or build the graph with one of device {rec.device}")
        else:
            state = _default_handle_on(placement, self.device)
            handle, stream, ctx = state.handle, state.stream, state.context
        device = self.device if self.device is not None else placement.device
        _first_context(ctx)
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
        if binding[0] is not plan or binding[1] != ws or binding[2] != ptrs:
            binding = self._binding_for(plan, variant_pack, ws, ptrs, checked=not same)
        if trace.active is None:
            status = self._backend_execute(handle, plan.ptr, binding[3])
        else:
            call = trace.begin("cudnnBackendExecute", handle=trace.hexptr(int(handle)), plan=plan.id,
                               variant_pack=hex(binding[3].value or 0), plan_name=plan.name)
            status = self._backend_execute(handle, plan.ptr, binding[3])
            if call is not None:
                call.end(status)
        if status != 0:
            raise error_for(status, "cudnnBackendExecute", kind="CUDNN_BACKEND_EXECUTION_PLAN",
                            detail=f"plan {plan.name}")

    def _cached_binding(self, key: tuple) -> tuple | None:
        """The binding cached for ``key`` ((plan id, workspace, *pointers), as _binding_for keys it), published as
        the last binding; None when there is none (the fast path then takes execute, which builds it)."""
        with self._vp_lock:
            binding = self._vp_cache.get(key)
            if binding is None:
                return None
            self._vp_cache.move_to_end(key)
        self._last = binding
        return binding

    def _binding_for(self, plan: Any, variant_pack: dict, ws: int, ptrs: list[int], checked: bool) -> tuple:
        """The binding for these pointers: cached, or (pointers never seen with this plan) checked and built now.
        Publishes it as the last binding."""
        key = (plan.id, ws, *ptrs)
        with self._vp_lock:
            binding = self._vp_cache.get(key)
            if binding is not None:
                self._vp_cache.move_to_end(key)
        if _log.isEnabledFor(logging.DEBUG):  # not on the fast path: only when the pointers change
            _log.debug("variant pack cache %s: plan %s, %d pointer(s), workspace 0x%x (%d cached)",
                       "hit" if binding is not None else "miss", plan.name, len(ptrs), ws, len(self._vp_cache))
        if binding is None:
            if not checked:
                self._check_operands(variant_pack, ptrs)
            vp = self._variant_pack(ptrs, ws)
            # the pointer is converted to a ctypes value once: the hot call passes it as is
            binding = (plan, ws, list(ptrs), ctypes.c_void_p(vp.ptr), vp)
            with self._vp_lock:
                self._vp_cache[key] = binding
                while len(self._vp_cache) > VARIANT_PACK_CACHE_SIZE:
                    # only the cache's reference goes: a call still executing with it (or self._last) keeps the
                    # descriptor alive, and its finalizer destroys it once nothing refers to it
                    self._vp_cache.popitem(last=False)
        self._last = binding
        return binding

    def fast(self, plan: Any, classic: Callable[..., None] | None = None):
        """``execute`` for one plan, specialised for the call that repeats: the same buffers as last time. It
        resolves keys and pointers with everything bound as closure locals, re-checks every operand's
        signature, and hands anything else (new pointers, an operand unlike the last checked one, unknown keys,
        a stream change, no handle yet, tracing on) to :meth:`execute`.

        The steady state of a replayed call (the same recording launched by two calls in a row, every operand a
        row-major torch tensor, an explicit or the graph's handle) gets a shorter path still: the pack's keys
        compared in one step with that call's, each operand re-checked against the signature fully checked for
        its slot (class, shape, dtype, device, contiguity) and its pointer, then the workspace, the handle's
        registry record, the binding, the recording, tracing, the thread, its context, the stream and whether the
        caller captures it, as below; on any difference the state is dropped and the general path decides.

        It also takes the classic ``execute``'s other keywords (``override_*``, ``tensor_uids``), so that
        ``pygraph`` can install it as the graph's ``execute`` itself (one Python frame per call): a call that
        gives any of them goes to ``classic`` with every argument (a TypeError without one)."""
        slots, template, checked = self._fast_slots, self._template, self._checked
        backend_execute, plan_ptr, plan_ws, plan_id = self._backend_execute, plan.ptr, plan.workspace, plan.id
        default_handles, ws_buffers = _DEFAULT_HANDLES, self._workspaces._buffers
        getters, bound_items, graph_handle = POINTER_GETTERS, self._bound_items, self.graph_handle
        live_handles, aliases, buffer_ptr = _live_handles, self._aliases, _buffer_ptr
        extras = bool(bound_items or aliases)  # one test per call for both
        ctx_get = _context.reader()  # None without a driver: no context to check
        if ctx_get is not None and not _context.several_devices():
            ctx_get = None  # one device, one primary context: nothing to check per call (see several_devices)
        executed = _executed  # .params: the calls' out-parameters, once the thread's first call set them
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
            state_now = hot
            if state_now is not None:
                # The hot path: the same keys in the same order as the steady state's call, every operand a
                # row-major torch tensor re-checked as the general path re-checks it (class, shape, dtype, device,
                # contiguity) with the same pointers, the same workspace pointer (and size), handle registry record,
                # binding and recording. Anything else clears the state and takes the general path below, which
                # checks everything again; nothing is launched here that the general path would not launch.
                keys, rows, hot_rec, ws_cls, replay_ref = state_now
                if tuple(variant_pack) == keys:
                    for value, (cls, shape, dtype, device, ptr) in zip(variant_pack.values(), rows):
                        if value.__class__ is not cls or value.shape != shape or value.dtype is not dtype or \
                                value.get_device() != device or not value.is_contiguous() or value.data_ptr() != ptr:
                            break
                    else:
                        hot_replay = replay_ref()  # still recorded and launched last: its binding is the state's
                        if hot_replay is replays.last and hot_replay is not None:
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
                            if ws == binding[1] and executor._last is binding and live_handles.get(h) is hot_rec \
                                    and trace.active is None:
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
            ptrs = template.copy()
            placement = None
            for key, value in variant_pack.items():
                slot = slots.get(key)
                if slot is None:
                    return slow(variant_pack, workspace, handle)
                cls = value.__class__
                if cls is int:
                    ptrs[slot] = value
                    continue
                seen_cls, getter, signature, sig, where, is_torch, shape, stride, dtype, device = checked[slot]
                if seen_cls is not cls:
                    return slow(variant_pack, workspace, handle)
                if is_torch:
                    # interop._torch_signature compared inline, field by field: no call frame, no tuple. This is
                    # most of what the re-check costs per operand. Row-major strides are re-checked by
                    # is_contiguous(): with the same shape it holds exactly when every dim of size > 1 has its
                    # row-major stride, which is what the full check requires (_check_operand)
                    if value.shape != shape or value.dtype is not dtype or value.get_device() != device or (
                            not value.is_contiguous() if is_torch == 2 else value.stride() != stride):
                        return slow(variant_pack, workspace, handle)
                    ptrs[slot] = value.data_ptr()  # the getter (cls.data_ptr), bound: cheaper than calling it
                elif signature(value) != sig:
                    return slow(variant_pack, workspace, handle)
                else:
                    ptrs[slot] = getter(value)
                if placement is None:
                    placement = where
            if extras:
                for slot, value in bound_items:  # data bound at build time: the same checks (unless rebound)
                    if ptrs[slot] != template[slot]:
                        continue
                    seen_cls, getter, signature, sig, where = checked[slot][:5]
                    if seen_cls is not value.__class__ or signature(value) != sig:
                        return slow(variant_pack, workspace, handle)
                    ptrs[slot] = getter(value)
                    if placement is None:
                        placement = where
                for view, source, offset in aliases:
                    ptrs[view] = ptrs[source] + offset
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
            if binding[0] is not plan or binding[1] != ws or binding[2] != ptrs:
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
                status = backend_execute(h, plan_ptr, cached[3])
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
                                if state is None and not extras:
                                    hot = _hot_state(variant_pack, workspace, ptrs, checked, slots, rec, replay)
                            return None
                        replays.drop(replay, f"plan {plan.name}: cuGraphLaunch failed with CUresult {status}")
                elif replays.consider(binding, owner, h, stream, backend_execute):
                    return None
            status = backend_execute(h, plan_ptr, binding[3])
            if status != 0:
                raise error_for(status, "cudnnBackendExecute", kind="CUDNN_BACKEND_EXECUTION_PLAN",
                                detail=f"plan {plan.name}")

        return run

    def set_scratch(self, sizes: dict[int, int]) -> None:
        """Intermediates the program keeps in memory no caller provides (uid -> bytes): they take the start of
        the workspace, each 256-byte aligned, and cuDNN gets the rest (plans add ``scratch_bytes`` to their size)."""
        offset, layout = 0, []
        for uid in sorted(sizes):
            layout.append((uid, offset))
            offset += -(-sizes[uid] // SCRATCH_ALIGNMENT) * SCRATCH_ALIGNMENT
        self._scratch = layout
        self.scratch_bytes = offset

    def _variant_pack(self, ptrs: list[int], ws: int) -> Descriptor:
        vp = Descriptor("CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR")
        uids, scratch = self._uids, self._scratch
        if scratch:
            if not ws:
                raise InvalidValueError(f"this graph keeps {self.scratch_bytes} bytes of intermediates in the "
                                        f"workspace: "
                                 "pass a workspace of the plan's size (get_workspace_size())")
            uids = uids + [uid for uid, _ in scratch]
            ptrs = list(ptrs) + [ws + offset for _, offset in scratch]
            ws += self.scratch_bytes
        vp.set("CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS", uids)
        vp.set("CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS", ptrs)
        vp.set("CUDNN_ATTR_VARIANT_PACK_WORKSPACE", ws)
        vp._keepalive["scalars"] = list(self._fixed.values())
        return vp.finalize()


def _alias_depth(uid: int, aliases: dict[int, tuple[int, int]]) -> int:
    """How many views lie between ``uid`` and memory the caller binds (a slice of a slice: 2)."""
    depth = 0
    while uid in aliases:
        uid, depth = aliases[uid][0], depth + 1
    return depth


def _hot_state(variant_pack: dict, workspace: Any, ptrs: list[int], checked: list[tuple], slots: dict, rec: Any,
               replay: Any) -> tuple | None:
    """The steady state of the call that just launched ``replay`` for the second time in a row, for the hot path of
    ``Executor.fast``: (the pack's keys in order, each operand's (class, shape, dtype, device) as fully checked for
    its slot with its pointer, in pack order; the handle's registry record; the workspace's class where it is a
    torch tensor, else None; a weak reference to the recording, whose binding is the call's). None when an operand
    is not a row-major torch tensor (int pointers, strided or other frameworks' operands, and a workspace that is
    not a torch tensor, an int or None stay on the general path, whose checks the hot path does not repeat for
    them)."""
    if workspace is not None and workspace.__class__ is not int and \
            signature_getter(workspace.__class__) is not _torch_signature:
        return None  # the hot path reads a workspace's size and pointer as torch's (nbytes, data_ptr())
    rows = []
    for key, value in variant_pack.items():
        slot = slots[key]
        cls, _getter, _signature, _sig, _where, kind, shape, _stride, dtype, device = checked[slot]
        if kind != 2 or value.__class__ is not cls:
            return None
        rows.append((cls, shape, dtype, device, ptrs[slot]))
    ws_cls = None if workspace is None or workspace.__class__ is int else workspace.__class__
    return (tuple(variant_pack), tuple(rows), rec, ws_cls, weakref.ref(replay))


def _check_operand(t: Any, info: OperandInfo) -> None:
    where = _where(t)
    if t.is_pass_by_value:
        if info.device_type not in (None, KDL_CPU):
            raise InvalidValueError(f"{where} is pass-by-value: pass a host (CPU) scalar, not device memory")
        return
    if info.ptr == 0:
        raise InvalidValueError(f"{where}: null data pointer")
    if info.device_type == KDL_CPU:
        raise InvalidValueError(f"{where} lives on the GPU: got a host (CPU) array; move it to the device first")
    if getattr(t, "ragged_offset", None) is not None:
        # a ragged (packed) operand: batch b starts at its offset on the device and the buffer holds the packed
        # rows, not the padded dims, so neither its shape nor its size is the tensor's
        info = replace(info, nbytes=None, shape=None, strides=None)
    if info.nbytes is not None:  # untyped memory: large enough for the tensor's span
        span = layout.span(t.dim, t.stride)
        needed = -(-span * dtype_info(t.data_type).bits // 8)
        if info.nbytes < needed:
            raise InvalidValueError(f"{where}: needs {needed} bytes (dims {list(t.dim)}, strides {list(t.stride)}, "
                             f"{t.data_type}), the buffer has {info.nbytes}")
    if info.dtype is not None:
        _check_element_type(t, info, where)
    if info.shape is not None:
        if tuple(info.shape) != tuple(t.dim):
            _check_buffer(t, info, where)
        elif info.strides is not None and any(d > 1 and s != e for d, s, e in zip(t.dim, info.strides, t.stride)):
            # the declared shape with other strides: cuDNN would read it through the tensor's strides (a misread)
            raise InvalidValueError(f"{where}: expected strides {list(t.stride)}, got {list(info.strides)}")
    align = getattr(t, "alignment", 16) or 16
    if info.ptr % min(align, 16) != 0:
        raise InvalidValueError(f"{where}: pointer 0x{info.ptr:x} is not {align}-byte aligned as the tensor declares")


def _check_buffer(t: Any, info: OperandInfo, where: str) -> None:
    """An operand of another shape is a buffer, as an int pointer is (the official module reads any operand by its
    pointer): a ragged offset as [b + 1] for [b + 1, 1, 1, 1], BSHD memory for a [b, h, s, d] tensor with BSHD
    strides. It is accepted when it is dense (no gaps, no broadcast) and holds the tensor's byte span; anything
    else would make cuDNN read past it or through holes."""
    assert info.shape is not None
    if info.strides is not None and not layout.is_dense(info.shape, info.strides):
        raise InvalidValueError(f"{where}: expected shape {list(t.dim)}, got {list(info.shape)} with strides "
                         f"{list(info.strides)}; an operand of another shape is read as a buffer, and this one is not "
                         "dense (gaps or broadcast axes)")
    bits = dtype_info(t.data_type).bits
    needed = -(-layout.span(t.dim, t.stride) * bits // 8)
    held = layout.numel(info.shape) * (info.dtype[1] if info.dtype is not None else bits) // 8
    if held < needed:
        raise InvalidValueError(f"{where}: expected shape {list(t.dim)}, got {list(info.shape)}; an operand of another "
                         f"shape is read as a buffer, and it holds {held} bytes where the tensor (strides "
                         f"{list(t.stride)}, {t.data_type}) spans {needed}")


def _check_element_type(t: Any, info: OperandInfo, where: str) -> None:
    """An element of another size would be misread (refused); a dtype of the same size (bfloat16 memory for a
    HALF tensor) is read as the tensor's type, as the official module reads it, with a warning: the bits are
    reinterpreted, not converted."""
    assert info.dtype is not None
    row = dtype_info(t.data_type)
    accepted = row.accepted_dlpack
    if not accepted or tuple(info.dtype) in accepted:
        return
    if info.dtype[1] != row.bits:
        raise InvalidValueError(f"{where}: expected {t.data_type} ({row.bits}-bit elements), got an operand of "
                                f"DLPack dtype "
                         f"{info.dtype} ({info.dtype[1]}-bit elements)")
    warnings.warn(f"{where}: expected {t.data_type}, got an operand of DLPack dtype {info.dtype} (elements of the "
                  f"same size): its bits are read as {t.data_type}, not converted", RuntimeWarning, stacklevel=2)


def _operand_device(info: OperandInfo) -> int | None:
    """The device of a device operand: what its framework says, else what the driver says of its pointer (a
    ``__cuda_array_interface__`` carries no device); None where neither binds it to one device."""
    if info.device_id is not None:
        return info.device_id
    return _context.device_of_pointer(info.ptr)


def _check_device(t: Any, info: OperandInfo, device: int) -> None:
    d = _operand_device(info)
    if d is not None and d != device:
        raise InvalidValueError(f"{_where(t)} is on device {d}, but the graph was built for device {device}: build the "
                         f"graph for device {d} (with its handle: pygraph(handle=cudnn.create_handle({d})), or with "
                         f"device {d} current) or move the operand to device {device}")


def _check_workspace(workspace: Any, plan: Any, device: int | None = None) -> None:
    try:
        info: OperandInfo | None = operand_info(workspace)
    except TypeError:  # an object only known by its pointer
        info = None
    if info is not None and info.device_type == KDL_CPU:
        raise InvalidValueError(f"workspace lives on the host (CPU): plan {plan.name} needs {plan.workspace} bytes of "
                         "device memory")
    if info is not None and device is not None and info.device_type == KDL_CUDA:
        d = _operand_device(info)
        if d is not None and d != device:
            raise InvalidValueError(f"workspace is on device {d}, but the graph was built for device {device} (plan "
                             f"{plan.name}): pass a workspace on device {device}")
    nbytes = info.nbytes if info is not None else None  # untyped memory (a cuda.core Buffer) knows its size
    if hasattr(workspace, "nbytes"):
        nbytes = int(workspace.nbytes)
    elif hasattr(workspace, "numel") and hasattr(workspace, "element_size"):
        nbytes = int(workspace.numel() * workspace.element_size())
    if nbytes is not None and nbytes < plan.workspace:
        raise InvalidValueError(f"workspace too small: plan {plan.name} needs {plan.workspace} bytes, got {nbytes}")
