"""The operands of an execute: each key resolved to its variant-pack slot, and each value checked against the
tensor of that slot — the one operand check of every execute tier.

Two checks, one meaning. The *full* check (:meth:`OperandSlots._check_operands`: shape, strides, dtype, device,
alignment, the buffer rules) runs for an operand unlike the one last checked for its slot, and records what it
checked as the slot's *row*: class, pointer getter, signature getter, signature, placement, and for torch the
signature's fields. The *re-check* (:meth:`OperandSlots._resolve`) compares every operand of a call with its slot's
row — class, then torch's shape, dtype, device and strides field by field (row-major ones by ``is_contiguous()``),
other frameworks' signature as a whole — and reads its pointer. ``Executor.execute``, the bound execute
(``Executor.fast``) and its steady state's hot path all call ``_resolve``; none re-checks an operand in any other
way, so a check added there holds for every tier. Int pointers carry no metadata: they are the caller's
responsibility.
"""
from __future__ import annotations

import ctypes
import warnings
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..cuda import context as _context
from ..enums import dtype_info
from ..errors import InvalidValueError
from ..interop import (
    KDL_CPU,
    KDL_CUDA,
    POINTER_GETTERS,
    SIGNATURE_GETTERS,
    OperandInfo,
    _torch_signature,
    data_ptr,
    operand_info,
    placement_of,
    pointer_getter,
    signature_getter,
)
from ..ir import layout


def _where(t: Any) -> str:
    return f"tensor {t.name!r} (uid {t.uid})"


# a slot's row before any full check (or after a bare pointer): see OperandSlots._checked
_UNCHECKED = (None, None, None, None, None, 0, None, None, None, None)


class OperandSlots:
    """The variant-pack slots of one lowered graph (one per non-virtual uid, in uid order), the keys that name
    them, and the row of the operand last fully checked for each: the operand half of ``Executor``."""

    device: int | None  # the graph's device (Executor.set_device): every full check compares the operand's

    def _init_operands(self, uids: list[int], ir_by_uid: dict[int, Any],
                       aliases: dict[int, tuple[int, int]] | None, unread: Any) -> None:
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
        self._bound_items: list[tuple[int, Any]] = []  # (slot, value) of data bound at build time (set in place)
        self._template = [0] * len(self._uids)
        for slot, value in self._fixed.items():
            self._template[slot] = ctypes.addressof(value)
        # slot -> (class, pointer getter, signature getter, signature, placement, torch kind, and for torch the
        # signature's shape, strides, dtype and device, else None each) of the operand last fully checked there:
        # one flat tuple (_resolve unpacks it in one step), replaced whole (_UNCHECKED: nothing checked yet,
        # or a bare pointer).
        self._checked: list[tuple] = [_UNCHECKED] * len(self._uids)
        self._resolve = self._resolver()

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
        return self._gather(variant_pack)

    def _resolver(self) -> Callable[[dict], tuple[list[int], Any] | None]:
        """``_resolve``, the re-check of every tier: ``resolve(variant_pack)`` is (pointers in uid order, the
        placement of the first device operand of a framework or None) when every operand matches the row of its
        slot (class and signature, see the module docstring); None when one does not (the caller checks them all
        in full: :meth:`_gather` then :meth:`_check_operands`). Keys of no slot raise as :meth:`_slot` does. A
        pointer left 0 is a missing operand, which no binding matches (execute reports it: :meth:`_missing`).
        A closure over the executor's tables (each mutated in place, never replaced), so a call reads no
        attribute of the executor but its bound data."""
        template, slots, checked, aliases, fixed = (self._template, self._fast_slots, self._checked, self._aliases,
                                                    self._fixed)
        bound_items = self._bound_items
        owner = weakref.ref(self)  # (held by the executor: a strong reference would make a cycle)

        def resolve(variant_pack: dict) -> tuple[list[int], Any] | None:
            ptrs = template.copy()
            placement = None
            for key, value in variant_pack.items():
                slot = slots.get(key)
                if slot is None:
                    if key is None:
                        continue
                    slot = owner()._slot(key)  # type: ignore[union-attr]  # (the executor calls this)
                    if slot < 0 or slot in fixed:
                        continue  # read by no operation, or a scalar whose value the graph carries
                cls = value.__class__
                if cls is int:
                    ptrs[slot] = value
                    continue
                seen_cls, getter, signature, sig, where, is_torch, shape, stride, dtype, device = checked[slot]
                if seen_cls is not cls:
                    return None
                if is_torch:
                    # interop._torch_signature compared inline, field by field: no call frame, no tuple. This is
                    # most of what the re-check costs per operand. Row-major strides are re-checked by
                    # is_contiguous(): with the same shape it holds exactly when every dim of size > 1 has its
                    # row-major stride, which is what the full check requires (_check_operand)
                    if value.shape != shape or value.dtype is not dtype or value.get_device() != device or (
                            not value.is_contiguous() if is_torch == 2 else value.stride() != stride):
                        return None
                    ptrs[slot] = value.data_ptr()  # the getter (cls.data_ptr), bound: cheaper than calling it
                elif signature(value) != sig:
                    return None
                else:
                    ptrs[slot] = getter(value)
                if placement is None:
                    placement = where
            if bound_items or aliases:
                for slot, value in bound_items:  # data bound at build time: the same checks (unless rebound)
                    if ptrs[slot] != template[slot]:
                        continue
                    seen_cls, getter, signature, sig, where = checked[slot][:5]
                    if seen_cls is not value.__class__ or signature(value) != sig:
                        return None
                    ptrs[slot] = getter(value)
                    if placement is None:
                        placement = where
                for view, source, offset in aliases:
                    ptrs[view] = ptrs[source] + offset if ptrs[source] else 0
            return ptrs, placement

        return resolve

    def _gather(self, variant_pack: dict) -> list[int]:
        """Every slot's pointer, read without any check (before a full check; :meth:`pointers`)."""
        ptrs = self._template.copy()
        for key, value in variant_pack.items():
            slot = self._fast_slots.get(key)
            if slot is None:
                if key is None:
                    continue
                slot = self._slot(key)
                if slot < 0 or slot in self._fixed:
                    continue
            ptrs[slot] = value if value.__class__ is int else data_ptr(value)
        for slot, value in self._bound_items:
            if ptrs[slot] == self._template[slot]:  # unless the caller's pack rebinds this slot
                ptrs[slot] = data_ptr(value)
        for view, source, offset in self._aliases:
            ptrs[view] = ptrs[source] + offset if ptrs[source] else 0
        if 0 in ptrs:
            self._missing(ptrs)
        return ptrs

    def _missing(self, ptrs: list[int]) -> None:
        """Raise for the slots ``ptrs`` leaves 0 (views excepted: their source is named)."""
        missing = [self._tensors[s] for s, p in enumerate(ptrs) if p == 0 and s not in self._views]
        raise InvalidValueError("variant pack is missing " + ", ".join(_where(t) for t in missing))


    def bind(self, bindings: dict) -> None:
        """Pre-fill slots with data bound at build time (framework tensors passed to op builders)."""
        for uid, value in bindings.items():
            slot = self._slot_by_key.get(uid)
            if slot is not None and slot not in self._fixed:
                self._template[slot] = data_ptr(value)
                self._bound[slot] = value
        self._bound_items[:] = self._bound.items()

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



def _alias_depth(uid: int, aliases: dict[int, tuple[int, int]]) -> int:
    """How many views lie between ``uid`` and memory the caller binds (a slice of a slice: 2)."""
    depth = 0
    while uid in aliases:
        uid, depth = aliases[uid][0], depth + 1
    return depth



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

