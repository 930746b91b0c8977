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

Modules. The operand slots and the full checks are ``execute_operands.py`` (``OperandSlots``, a base class of the
Executor); the default handles and their streams ``execute_defaults.py``; replay ``execute_replay.py``; every
check, described once, ``execute_checks.py``; the bound execute (``Executor.fast``), generated, ``execute_fast.py``.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from threading import get_ident  # noqa: F401  (read by the generated bound execute: execute_fast.py)
from typing import Any

from .. import frontend_log as _fe
from .._generated.names import attr, desc
from ..backend import Descriptor, trace
from ..backend import handle as _handle_mod
from ..backend.api import error_for, lib
from ..backend.handle import live_handle
from ..backend.live import _live as _live_handles  # the registry of live handles (a dict: one lookup)
from ..backend.live import lookup as _lookup_handle
from ..cuda import capture
from ..cuda import context as _context
from ..errors import (
    InvalidTypeError,  # noqa: F401  (read by the generated bound execute: execute_fast.py)
    InvalidValueError,
)
from ..interop import NO_FRAMEWORK, POINTER_GETTERS, _buffer_ptr, _torch_signature, data_ptr, signature_getter
from .execute_checks import call_check, hot_fields, hot_matcher
from .execute_defaults import _DEFAULT_HANDLES, _default_handle_on, _executed, _first_context
from .execute_fast import bound_execute
from .execute_operands import _UNCHECKED, OperandSlots, _check_workspace, _where
from .execute_operands import _check_operand as _check_operand  # (re-exported: tests import it from here)
from .execute_replay import Replays, environment_refusal
from .workspace import WorkspaceCache

VARIANT_PACK_CACHE_SIZE = 64
SCRATCH_ALIGNMENT = 256  # bytes; each workspace-resident intermediate starts on such a boundary
_log = logging.getLogger(__name__)
_PLAN_KIND = desc.EXECUTION_PLAN_DESCRIPTOR.removesuffix("_DESCRIPTOR")  # how its errors name the plan


# indirection the CPU tests replace (no cuDNN without a GPU)
def _get_stream(handle: int) -> int:
    return _handle_mod.get_stream(handle)


# A binding: what one (plan, workspace, pointers) executes with — (plan, workspace pointer, pointer list, the
# VARIANT_PACK's pointer as a ctypes value, the VARIANT_PACK descriptor). Immutable once published; the list is
# never mutated after. Holding the tuple keeps the descriptor alive.
_NO_BINDING = (None, None, None, None, None)
_binding_matches = call_check("binding_matches")  # (execute_checks.CALL_CHECKS, as the other checks below)
_handle_on_device = call_check("handle_on_device")


class Executor(OperandSlots):
    """Variant-pack binding and execution for one lowered graph."""

    def __init__(self, uids: list[int], ir_by_uid: dict[int, Any], aliases: dict[int, tuple[int, int]] | None = None,
                 unread: Any = ()):
        """The operand slots (``OperandSlots``: ``aliases``, ``unread``), then what executing adds: the variant
        packs, the workspaces, the replays, the graph's handle."""
        super().__init__(uids, ir_by_uid, aliases, unread)
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

    def set_device(self, device: int | None) -> None:
        """Record the device the graph's plans are built for. Operands checked before are checked again."""
        if device != self.device:
            self.device = device
            self._checked[:] = [_UNCHECKED] * len(self._uids)  # in place: the bound executes (fast) read this list
            self._last = _NO_BINDING


    # --------------------------------------------------------------------------------------------- execute
    def execute(self, plan: Any, variant_pack: dict, workspace: Any = None, handle: Any = None) -> None:
        ptrs, same, placement = self.checked(variant_pack)
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
            if rec is not None and not _handle_on_device(rec, self.device):
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
        if not _binding_matches(binding, plan, ws, ptrs):
            binding = self._binding_for(plan, variant_pack, ws, ptrs, checked=not same)
        if _fe.ENABLED:
            _fe.write(f"INFO: Executing {plan.name} (workspace {plan.workspace} bytes at 0x{ws:x})")
        if trace.active is None:
            status = self._backend_execute(handle, plan.ptr, binding[3])
        else:
            call = trace.begin("cudnnBackendExecute", handle=trace.hexptr(int(handle)), plan=plan.id,
                               variant_pack=hex(binding[3].value or 0), plan_name=plan.name)
            status = self._backend_execute(handle, plan.ptr, binding[3])
            if call is not None:
                call.end(status)
        if status != 0:
            if _fe.ENABLED:
                _fe.write(f"ERROR: cudnnBackendExecute of {plan.name} returned status {status}")
            raise error_for(status, "cudnnBackendExecute", kind=_PLAN_KIND,
                            detail=f"plan {plan.name}")
        if _fe.ENABLED:
            _fe.write(f"INFO: Executed {plan.name}")

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
        extras = bool(self._bound_items or self._aliases)
        # the function itself is generated (execute_fast.py: one template, the operand re-check inlined); while
        # the frontend log is on (read once per process) every call takes execute, which logs it
        make = bound_execute(extras, globals(), logged=True) if _fe.ENABLED else bound_execute(extras, globals())
        return self._made(make, plan, classic, functools.partial(self.execute, plan))

    def fast_trusted(self, plan: Any, checked_keys: tuple, trusted_keys: tuple) -> Callable[..., None] | None:
        """``plan``'s bound execute in a split form, for a caller that guarantees some of its operands:
        ``run(operands)`` takes the operands of ``checked_keys`` then those of ``trusted_keys`` (together every key a
        caller binds, once each) as one sequence in that order. The first are re-checked as :meth:`fast` re-checks
        every operand; the others are read for their pointers alone: the caller guarantees each has the class,
        shape, strides, dtype and device fully checked last for its slot (the outputs it allocates itself from the
        graph's layouts, say). Then as :meth:`fast` (workspace, handle, stream, context, bindings, replay; a miss,
        or new pointers, to :meth:`execute`, which checks them in full). None where this cannot be offered: a slot
        not yet checked (the first call goes through the checked execute), keys that are not exactly the bound
        slots, data bound at build time or views, the frontend log on (every call logged)."""
        if _fe.ENABLED or self._bound_items or self._aliases or not trusted_keys:
            return None
        keys = tuple(checked_keys) + tuple(trusted_keys)
        found = [self._fast_slots.get(k) for k in keys]
        slots = tuple(s for s in found if s is not None)
        bound = {s for s in range(len(self._uids)) if s not in self._fixed}
        if len(slots) != len(found) or len(set(slots)) != len(slots) or set(slots) != bound or \
                any(self._checked[s][5] not in (1, 2) for s in slots):  # (each a torch tensor, checked)
            return None

        def slow(operands: Any, workspace: Any = None, handle: Any = None) -> None:
            return self.execute(plan, dict(zip(keys, operands)), workspace, handle)

        n = len(checked_keys)
        return self._made(bound_execute(False, globals(), trusted=True), plan, None, slow, slots[:n], slots[n:])

    def _made(self, make: Callable[..., Any], plan: Any, classic: Callable[..., None] | None,
              slow: Callable[..., None], checked_slots: tuple = (), trusted_slots: tuple = ()) -> Callable[..., None]:
        """``make`` (execute_fast.py's template, compiled) called with this executor's tables and ``plan``."""
        ctx_get = _context.reader()  # None without a driver: no context to check
        if ctx_get is not None and not _context.several_devices():
            ctx_get = None  # one device, one primary context: nothing to check per call (see several_devices)
        replays = self.replays
        driver: Any = capture.driver() if replays.on else None  # replays.on implies a driver
        extras = bool(self._bound_items or self._aliases)
        return make(
            plan=plan, classic=classic, executor=self, slots=self._fast_slots, checked=self._checked,
            template=self._template, bound_items=self._bound_items, aliases=self._aliases, extras=extras,
            backend_execute=self._backend_execute, plan_ptr=plan.ptr, plan_ws=plan.workspace, plan_id=plan.id,
            default_handles=_DEFAULT_HANDLES, ws_buffers=self._workspaces._buffers, getters=POINTER_GETTERS,
            graph_handle=self.graph_handle, live_handles=_live_handles, buffer_ptr=_buffer_ptr, ctx_get=ctx_get,
            executed=_executed,  # .params: the calls' out-parameters, once the thread's first call set them
            replays=replays, find_replay=replays.find,
            is_capturing=driver.cuStreamIsCapturing if driver else None,  # cuda.bindings': (CUresult, status)
            graph_launch=driver.cuGraphLaunch if driver else None,  # ctypes (capture.py): CUresult
            cudnn_get_stream=lib().cudnnGetStream, slow=slow, checked_slots=checked_slots,
            trusted_slots=trusted_slots)

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
        vp = Descriptor(desc.VARIANT_PACK_DESCRIPTOR)
        uids, scratch = self._uids, self._scratch
        if scratch:
            if not ws:
                raise InvalidValueError(f"this graph keeps {self.scratch_bytes} bytes of intermediates in the "
                                        f"workspace: "
                                 "pass a workspace of the plan's size (get_workspace_size())")
            uids = uids + [uid for uid, _ in scratch]
            ptrs = list(ptrs) + [ws + offset for _, offset in scratch]
            ws += self.scratch_bytes
        vp.set(attr.VARIANT_PACK_UNIQUE_IDS, uids)
        vp.set(attr.VARIANT_PACK_DATA_POINTERS, ptrs)
        vp.set(attr.VARIANT_PACK_WORKSPACE, ws)
        vp._keepalive["scalars"] = list(self._fixed.values())
        return vp.finalize()




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
    rows, fields = [], hot_fields()
    for key, value in variant_pack.items():
        slot = slots[key]
        entry = checked[slot]
        if entry[5] != 2 or value.__class__ is not entry[0]:  # (kind, class: execute_checks.CHECKED)
            return None
        rows.append((*(entry[i] for i in fields), ptrs[slot]))
    ws_cls = None if workspace is None or workspace.__class__ is int else workspace.__class__
    return (tuple(variant_pack), tuple(rows), rec, ws_cls, weakref.ref(replay), hot_matcher(len(rows)))
