"""What one execute binds, and the bindings of an executor cached by what they bind.

A :class:`Binding` is a call's plan, workspace pointer and operand pointers (uid order, ``execute_operands.py``),
with the VARIANT_PACK descriptor finalized for them. ``Binding.matches(plan, workspace, pointers)`` is the one test
of whether a call may use a binding: ``Executor.execute``, the bound execute (``Executor.fast``) and its steady
state's hot path all make it, after the operand re-check (``OperandSlots._resolve``) has read the pointers and the
workspace pointer has been read. A recording (``execute_replay.py``) is made for one binding, and the hot path
launches it only where the binding matches the call.

Bindings are cached per executor by (plan id, workspace, *pointers), an LRU under a lock; eviction only drops the
cache's reference, and a call holds its binding (which holds the descriptor) until cuDNN returns, so a descriptor
is destroyed (by its finalizer) only once no call uses it. The last binding (``_last``) is published and read in
one step.
"""
from __future__ import annotations

import ctypes
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..backend import Descriptor
from ..errors import InvalidValueError

VARIANT_PACK_CACHE_SIZE = 64
SCRATCH_ALIGNMENT = 256  # bytes; each workspace-resident intermediate starts on such a boundary
_log = logging.getLogger(__name__)


class Binding:
    """What a call binds — plan, workspace pointer, operand pointers — and the variant pack finalized for them
    (its pointer as a ctypes value, converted once: the hot call passes it as is). Immutable once published;
    holding it keeps the descriptor alive."""

    __slots__ = ("plan", "workspace", "pointers", "vp_ptr", "vp")

    def __init__(self, plan: Any, workspace: Any, pointers: Any, vp_ptr: Any, vp: Any):
        self.plan, self.workspace, self.pointers, self.vp_ptr, self.vp = plan, workspace, pointers, vp_ptr, vp

    def matches(self, plan: Any, workspace: int, pointers: list[int]) -> bool:
        """Whether a call of ``plan`` with this workspace pointer and these operand pointers (uid order, every
        operand re-checked against its slot) executes this binding's variant pack."""
        return self.plan is plan and self.workspace == workspace and self.pointers == pointers


NO_BINDING = Binding(None, None, None, None, None)  # matches no call


class BindingCache:
    """The bindings of one executor: the binding half of ``Executor`` (it checks operands through
    ``OperandSlots``, which ``Executor`` also is)."""

    _uids: list[int]
    _fixed: dict[int, Any]
    _check_operands: Callable[[dict, list[int]], Any]  # OperandSlots'

    def _init_bindings(self) -> None:
        self._vp_cache: OrderedDict[tuple, Binding] = OrderedDict()
        self._vp_lock = threading.Lock()
        self._scratch: list[tuple[int, int]] = []  # (uid, byte offset in the workspace): see set_scratch
        self.scratch_bytes = 0
        self._last: Binding = NO_BINDING

    def _cached_binding(self, key: tuple) -> Binding | None:
        """The binding cached for ``key`` ((plan id, workspace, *pointers), as _binding_for keys it), published as
        the last binding; None when there is none (the fast path then takes execute, which builds it)."""
        with self._vp_lock:
            binding = self._vp_cache.get(key)
            if binding is None:
                return None
            self._vp_cache.move_to_end(key)
        self._last = binding
        return binding

    def _binding_for(self, plan: Any, variant_pack: dict, ws: int, ptrs: list[int], checked: bool) -> Binding:
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
            binding = Binding(plan, ws, list(ptrs), ctypes.c_void_p(vp.ptr), vp)
            with self._vp_lock:
                self._vp_cache[key] = binding
                while len(self._vp_cache) > VARIANT_PACK_CACHE_SIZE:
                    # only the cache's reference goes: a call still executing with it (or self._last) keeps the
                    # descriptor alive, and its finalizer destroys it once nothing refers to it
                    self._vp_cache.popitem(last=False)
        self._last = binding
        return binding

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
                                        "workspace: pass a workspace of the plan's size (get_workspace_size())")
            uids = uids + [uid for uid, _ in scratch]
            ptrs = list(ptrs) + [ws + offset for _, offset in scratch]
            ws += self.scratch_bytes
        vp.set("CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS", uids)
        vp.set("CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS", ptrs)
        vp.set("CUDNN_ATTR_VARIANT_PACK_WORKSPACE", ws)
        vp._keepalive["scalars"] = list(self._fixed.values())
        return vp.finalize()
