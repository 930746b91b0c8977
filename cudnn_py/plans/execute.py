"""Binding user operands to a plan and executing it — the per-call hot path.

What repeats between calls is computed once: the slot of every accepted key (Tensor, uid, name), the host
values of pass-by-value scalars, and finalized VARIANT_PACK descriptors keyed by the tuple of pointers. A call
whose pointers were seen before costs: one dict walk, one ``data_ptr`` per operand, one tuple lookup and
``cudnnBackendExecute``. Operands are fully checked (shape, strides, dtype, device, alignment, workspace size)
whenever the pointer tuple is new; on a hit only the torch shape is re-checked, because torch's caching
allocator hands the same address to tensors of other shapes.
"""
from __future__ import annotations

import ctypes
import functools
import time
from threading import get_ident
from typing import Any

from ..backend import Descriptor, trace
from ..backend.api import lib
from ..backend.api import error_for
from ..backend.handle import default_handle
from ..enums import dtype_info
from ..interop import KDL_CPU, POINTER_GETTERS, OperandInfo, data_ptr, operand_info, pointer_getter
from .workspace import WorkspaceCache

VARIANT_PACK_CACHE_SIZE = 64

def _is_torch(value: Any) -> bool:
    return value.__class__.__module__.startswith("torch")


def _where(t: Any) -> str:
    return f"tensor {t.name!r} (uid {t.uid})"


class Executor:
    """Variant-pack binding and execution for one lowered graph."""

    def __init__(self, uids: list[int], ir_by_uid: dict[int, Any]):
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
        self._bound: dict[int, Any] = {}
        self._template = [0] * len(self._uids)
        for slot, value in self._fixed.items():
            self._template[slot] = ctypes.addressof(value)
        self._vp_cache: dict[tuple, Descriptor] = {}
        self._shape_check: list[tuple | None] = [None] * len(self._uids)
        self._workspaces = WorkspaceCache()
        self._handles: dict[int, int] = {}
        self._backend_execute = lib().cudnnBackendExecute
        self._last: tuple = (None, None, None, None, False)  # plan, workspace, pointers, variant pack, auto ws

    # --------------------------------------------------------------------------------------------- binding
    def _slot(self, key: Any) -> int:
        """The slot of any accepted key, including scalars the graph carries; a ValueError naming the key else."""
        try:
            s = self._fast_slots.get(key)
            if s is None:
                s = self._slot_by_key.get(key)
        except TypeError:  # an unhashable key: reported below
            s = None
        if s is None:
            s = self._fixed_slot_by_id.get(id(key))
        if s is not None:
            return s
        if isinstance(key, str) and key in self._ambiguous:
            raise ValueError(f"variant pack key {key!r} names several tensors; use the Tensor object or its uid")
        if hasattr(key, "uid"):  # a Tensor not registered by identity: another graph's, or a virtual one
            raise ValueError(f"variant pack key {getattr(key, 'name', key)!r} (uid {key.uid}) is not a non-virtual "
                             "tensor of this graph")
        raise ValueError(f"variant pack key {key!r} is not a non-virtual tensor of this graph "
                         f"(expected one of uids {self._uids})")

    def pointers(self, variant_pack: dict) -> list[int]:
        """The data pointer of every variant-pack slot, in uid order. Slots the caller leaves out keep the
        template's value (scalars the graph carries, data bound at build time); a slot still 0 is missing.
        A torch operand whose shape differs from the one last checked for its slot gets -1, which forces the
        full check (the pointer tuple then misses the cache)."""
        ptrs = self._template.copy()
        slots, fixed, shapes, getters = self._fast_slots, self._fixed, self._shape_check, POINTER_GETTERS
        for key, value in variant_pack.items():
            slot = slots.get(key)
            if slot is None:
                if key is None:
                    continue
                slot = self._slot(key)
                if slot in fixed:
                    continue  # the graph carries this scalar's value
            cls = value.__class__
            if cls is int:
                ptrs[slot] = value
                continue
            getter = getters.get(cls)
            if getter is None:
                getter = pointer_getter(cls)
            ptrs[slot] = getter(value)
            shape = shapes[slot]
            if shape is not None and cls is shape[0] and value.shape != shape[1]:
                ptrs[slot] = -1
        if 0 in ptrs:
            missing = [self._tensors[s] for s, p in enumerate(ptrs) if p == 0]
            raise ValueError("variant pack is missing " + ", ".join(_where(t) for t in missing))
        return ptrs

    def bind(self, bindings: dict) -> None:
        """Pre-fill slots with data bound at build time (framework tensors passed to op builders)."""
        for uid, value in bindings.items():
            slot = self._slot_by_key.get(uid)
            if slot is not None and slot not in self._fixed:
                self._template[slot] = data_ptr(value)
                self._bound[slot] = value

    def _check_operands(self, variant_pack: dict, ptrs: list[int]) -> None:
        for key, value in variant_pack.items():
            if key is None:
                continue
            slot = self._slot(key)
            if slot in self._fixed:
                continue
            self._check_one(slot, value, ptrs)
        for slot, value in self._bound.items():
            if ptrs[slot] == self._template[slot]:
                self._check_one(slot, value, ptrs)

    def _check_one(self, slot: int, value: Any, ptrs: list[int]) -> None:
        info = operand_info(value)
        ptrs[slot] = info.ptr
        _check_operand(self._tensors[slot], info)
        self._shape_check[slot] = (value.__class__, tuple(value.shape)) if _is_torch(value) else None

    # --------------------------------------------------------------------------------------------- execute
    def execute(self, plan: Any, variant_pack: dict, workspace: Any = None, handle: Any = None) -> None:
        ptrs = self.pointers(variant_pack)
        if workspace is None:
            ws = self._workspaces.get(plan.workspace, self._device_of(variant_pack)) if plan.workspace else 0
        elif workspace.__class__ is int:
            ws = workspace
        else:
            ws = (POINTER_GETTERS.get(workspace.__class__) or pointer_getter(workspace.__class__))(workspace)
        last = self._last  # the previous call's binding: a loop over the same buffers skips the dict lookup
        if last[0] is plan and last[1] == ws and last[2] == ptrs:
            vp_ptr = last[3]
        else:
            vp_ptr = self._variant_pack_for(plan, variant_pack, workspace, ws, ptrs)
        if handle is None:
            handle = self._handles.get(get_ident())
            if handle is None:
                handle = self._handles[get_ident()] = int(default_handle())
        if trace.active is None:
            status = self._backend_execute(handle, plan.ptr, vp_ptr)
        else:
            t0 = time.perf_counter()
            status = self._backend_execute(handle, plan.ptr, vp_ptr)
            trace.active.record("cudnnBackendExecute", status, t0, handle=trace.hexptr(int(handle)), plan=plan.id,
                                variant_pack=hex(vp_ptr.value or 0), plan_name=plan.name)
        if status != 0:
            raise error_for(status, "cudnnBackendExecute", kind="CUDNN_BACKEND_EXECUTION_PLAN",
                            detail=f"plan {plan.name}")

    def _variant_pack_for(self, plan: Any, variant_pack: dict, workspace: Any, ws: int, ptrs: list[int]):
        """The finalized VARIANT_PACK for these pointers: cached, or checked and built now."""
        key = (plan.id, ws, *ptrs)
        cached = self._vp_cache.get(key)
        if cached is None:
            self._check_operands(variant_pack, ptrs)
            if workspace is not None and workspace.__class__ is not int:
                _check_workspace(workspace, plan)
            key = (plan.id, ws, *ptrs)
            vp = self._variant_pack(ptrs, ws)
            if len(self._vp_cache) >= VARIANT_PACK_CACHE_SIZE:
                self._vp_cache.pop(next(iter(self._vp_cache)))[0].destroy()
            # the pointer is converted to a ctypes value once: the hot call passes it as is
            cached = self._vp_cache[key] = (vp, ctypes.c_void_p(vp.ptr))
        self._last = (plan, ws, ptrs, cached[1], workspace is None)
        return cached[1]

    def fast(self, plan: Any):
        """``execute`` for one plan, specialised for the call that repeats: the same buffers as last time. It
        resolves keys and pointers with everything bound as closure locals, and hands anything else (new
        pointers, a changed torch shape, unknown keys, tracing on, no handle yet) to :meth:`execute`."""
        slots, template, shapes, getters = self._fast_slots, self._template, self._shape_check, POINTER_GETTERS
        backend_execute, plan_ptr, handles = self._backend_execute, plan.ptr, self._handles
        slow = functools.partial(self.execute, plan)
        executor = self

        def run(variant_pack: dict, workspace: Any = None, handle: Any = None) -> None:
            ptrs = template.copy()
            for key, value in variant_pack.items():
                slot = slots.get(key)
                if slot is None:
                    return slow(variant_pack, workspace, handle)
                cls = value.__class__
                if cls is int:
                    ptrs[slot] = value
                    continue
                getter = getters.get(cls)
                if getter is None:
                    return slow(variant_pack, workspace, handle)
                ptrs[slot] = getter(value)
                shape = shapes[slot]
                if shape is not None and cls is shape[0] and value.shape != shape[1]:
                    return slow(variant_pack, workspace, handle)
            last = executor._last
            if workspace is None:
                if not last[4]:
                    return slow(variant_pack, workspace, handle)
                ws = last[1]
            elif workspace.__class__ is int:
                ws = workspace
            else:
                getter = getters.get(workspace.__class__)
                if getter is None:
                    return slow(variant_pack, workspace, handle)
                ws = getter(workspace)
            if last[0] is not plan or last[1] != ws or last[2] != ptrs or trace.active is not None:
                return slow(variant_pack, workspace, handle)
            if handle is None:
                handle = handles.get(get_ident())
                if handle is None:
                    return slow(variant_pack, workspace, handle)
            status = backend_execute(handle, plan_ptr, last[3])
            if status != 0:
                raise error_for(status, "cudnnBackendExecute", kind="CUDNN_BACKEND_EXECUTION_PLAN",
                                detail=f"plan {plan.name}")

        return run

    def _variant_pack(self, ptrs: list[int], ws: int) -> Descriptor:
        vp = Descriptor("CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR")
        vp.set("CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS", self._uids)
        vp.set("CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS", ptrs)
        vp.set("CUDNN_ATTR_VARIANT_PACK_WORKSPACE", ws)
        vp._keepalive["scalars"] = list(self._fixed.values())
        return vp.finalize()

    def _device_of(self, variant_pack: dict) -> int:
        for v in variant_pack.values():
            dev = getattr(v, "device", None)
            idx = getattr(dev, "index", None) if dev is not None else None
            if isinstance(idx, int):
                return idx
            if isinstance(dev, int):  # cupy arrays: .device is a Device with .id; ints from others
                return dev
            did = getattr(dev, "id", None)
            if isinstance(did, int):
                return did
        from ..backend.handle import current_device

        return current_device()


def _check_operand(t: Any, info: OperandInfo) -> None:
    where = _where(t)
    if t.is_pass_by_value:
        if info.device_type not in (None, KDL_CPU):
            raise ValueError(f"{where} is pass-by-value: pass a host (CPU) scalar, not device memory")
        return
    if info.ptr == 0:
        raise ValueError(f"{where}: null data pointer")
    if info.device_type == KDL_CPU:
        raise ValueError(f"{where} lives on the GPU: got a host (CPU) array; move it to the device first")
    if info.shape is not None:
        if tuple(info.shape) != tuple(t.dim):
            # a broadcast-free reshape with the same element count and layout is still wrong for cuDNN's view
            raise ValueError(f"{where}: expected shape {list(t.dim)}, got {list(info.shape)}")
        if info.strides is not None and any(d > 1 and s != e for d, s, e in zip(t.dim, info.strides, t.stride)):
            raise ValueError(f"{where}: expected strides {list(t.stride)}, got {list(info.strides)}")
    if info.dtype is not None:
        accepted = dtype_info(t.data_type).accepted_dlpack
        if accepted and tuple(info.dtype) not in accepted:
            raise ValueError(f"{where}: expected {t.data_type}, got an operand of DLPack dtype {info.dtype}")
    align = getattr(t, "alignment", 16) or 16
    if info.ptr % min(align, 16) != 0:
        raise ValueError(f"{where}: pointer 0x{info.ptr:x} is not {align}-byte aligned as the tensor declares")


def _check_workspace(workspace: Any, plan: Any) -> None:
    nbytes = None
    if hasattr(workspace, "nbytes"):
        nbytes = int(workspace.nbytes)
    elif hasattr(workspace, "numel") and hasattr(workspace, "element_size"):
        nbytes = int(workspace.numel() * workspace.element_size())
    if nbytes is not None and nbytes < plan.workspace:
        raise ValueError(f"workspace too small: plan {plan.name} needs {plan.workspace} bytes, got {nbytes}")
