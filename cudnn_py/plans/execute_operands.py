"""The operand slots of an :class:`~cudnn_py.plans.execute.Executor` and their full checks.

``OperandSlots`` holds the Executor's methods that map variant-pack keys to slots, resolve pointers (comparing each
operand with the signature recorded at its slot's last full check) and check operands in full (shape, strides,
dtype, device, alignment); the attributes they read are made by ``Executor.__init__``. The functions below are the
checks themselves, and the workspace's (a caller's workspace object: device and size). None of this is on the
bound execute's path (``Executor.fast``), whose comparison is generated into it (``execute_fast.py``).
"""
from __future__ import annotations

import ctypes
import warnings
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
from ..ir.tensor import declared_otherwise
from .execute_checks import resolve_checked

# every operand compared with its slot's last full check (execute_checks.py, the bound execute's comparison made
# from the same description)
_compare_operands = resolve_checked()


# a slot's checked entry before any full check: see OperandSlots._checked
_UNCHECKED = (None, None, None, None, None, 0, None, None, None, None)

# how many tensors of other graphs, per slot, are kept as keys the bound execute resolves at once (see
# OperandSlots._foreign_slot); past that they resolve through the checked execute, by uid, at each call
FOREIGN_KEYS_KEPT = 4


def _where(t: Any) -> str:
    return f"tensor {t.name!r} (uid {t.uid})"


class OperandSlots:
    """Keys to slots, pointers, and the full operand checks of a graph's operands: the base of an Executor (cuDNN
    plans), and what a python engine's plans are fed through (facade/executing.py), so that both check alike."""

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
                self._fixed[slot] = host_scalar(t)
            else:
                self._fast_slots[t] = slot  # Tensors hash by identity: one lookup on the hot path
            names[t.name] = -1 if t.name in names else slot
        for name, slot in names.items():
            if slot >= 0 and name:
                self._slot_by_key[name] = slot
        self._fast_slots.update({k: v for k, v in self._slot_by_key.items() if v not in self._fixed})
        self._ambiguous = {n for n, s in names.items() if s < 0}
        self._foreign_keys = 0  # tensors of other graphs kept in _fast_slots (OperandSlots._foreign_slot)
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
        # the device the graph was built for (its planning handle's); None until known (deviceless validation)
        self.device: int | None = None

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
        if s is None and hasattr(key, "uid") and key.__hash__ is not None:
            s = self._foreign_slot(key)
        if s is not None and s in self._views:
            view, source = self._tensors[s], self._tensors[self._views[s]]
            raise InvalidValueError(f"variant pack key {_where(view)} is a view of {_where(source)} (a slice's output, "
                             "which aliases its input's memory): bind the source; the view's pointer is derived")
        if s is not None:
            return s
        try:
            if key in self._unread or (hasattr(key, "uid") and key.uid in self._unread):
                return -1  # a tensor of the graph (or its uid) that no operation reads: the caller skips it
        except TypeError:
            pass
        if isinstance(key, str) and key in self._ambiguous:
            raise InvalidValueError(f"variant pack key {key!r} names several tensors; use the Tensor object or its uid")
        if hasattr(key, "uid"):  # a Tensor not registered by identity whose uid names no slot: a virtual one
            raise InvalidValueError(f"variant pack key {getattr(key, 'name', key)!r} (uid {key.uid}) is not a "
                                    f"non-virtual tensor of this graph (expected one of uids {self._uids})")
        raise InvalidValueError(f"variant pack key {key!r} is not a non-virtual tensor of this graph "
                         f"(expected one of uids {self._uids})")

    def _foreign_slot(self, key: Any) -> int | None:
        """The slot of ``key``, a tensor of another graph, by its uid, as the official module takes every tensor
        key (a graph deserialized from another's blob runs with that graph's tensors); None where its uid names no
        slot. A key declaring other dims, strides or a data type than the slot's tensor is refused: the uids of
        two graphs meet by chance (each counts from 1). A frozen key (its uid and declaration can no longer change)
        is remembered among the keys the bound execute resolves at once, a bounded number of them."""
        s = self._slot_by_key.get(key.uid)
        if s is None:
            return None
        conflict = declared_otherwise(key, self._tensors[s])
        if conflict is not None:
            raise InvalidValueError(f"variant pack key {key.name!r} (uid {key.uid}) is not a non-virtual tensor of "
                                    f"this graph: a tensor of another graph, taken by its uid for this graph's "
                                    f"{_where(self._tensors[s])}, which has {conflict}")
        if getattr(key, "is_frozen", False) and s not in self._fixed and s not in self._views and \
                self._foreign_keys < FOREIGN_KEYS_KEPT * len(self._uids):
            self._fast_slots[key] = s
            self._foreign_keys += 1
        return s

    def pointers(self, variant_pack: dict) -> list[int]:
        """The data pointer of every variant-pack slot, in uid order. Slots the caller leaves out keep the
        template's value (scalars the graph carries, data bound at build time); a slot still 0 is missing."""
        return self._resolve(variant_pack)[0]

    def _resolve(self, variant_pack: dict) -> tuple[list[int], bool, Any]:
        """(pointers, whether every operand matches the signature last checked for its slot, the placement of
        the first device operand of a framework or None)."""
        ptrs, same, placement = _compare_operands(self, variant_pack)
        if 0 in ptrs:
            missing = [self._tensors[s] for s, p in enumerate(ptrs) if p == 0 and s not in self._views]
            raise InvalidValueError("variant pack is missing " + ", ".join(_where(t) for t in missing))
        return ptrs, same, placement

    def checked(self, variant_pack: dict) -> tuple[list[int], bool, Any]:
        """(pointers, whether every operand matched its slot's last full check, placement): each operand compared
        with that check, and all of them checked in full (and recorded) where one differs; a missing or refused
        operand raises, naming its tensor."""
        ptrs, same, placement = self._resolve(variant_pack)
        if not same:  # an operand unlike the one last checked for its slot: check them all now
            placement = self._check_operands(variant_pack, ptrs)
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
        placement = None
        given: dict[int, int] = {}  # slot -> the pointer the first key gave it
        for key, value in variant_pack.items():
            if key is None:
                continue
            slot = self._slot(key)
            if slot < 0 or slot in self._fixed:
                continue
            first = given.get(slot)
            p = self._check_one(slot, value, ptrs)
            # Two keys for one tensor (its name and its uid; another graph's tensor of its uid): the same buffer
            # twice is what the official module computes with; two different ones would silently be the last
            # (the official module keys the pack by uid), so they are refused.
            if first is not None and ptrs[slot] != first:
                raise InvalidValueError(f"variant pack gives {_where(self._tensors[slot])} two different buffers "
                                        f"(key {key!r} names it again, at 0x{ptrs[slot]:x} against 0x{first:x})")
            given[slot] = ptrs[slot]
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
