"""Operands from any framework: torch tensors, cupy arrays, numpy arrays, anything with ``__dlpack__`` or
``__cuda_array_interface__``, and plain int pointers; and streams from any of them. Also what the execute hot
path needs per operand class: a pointer getter, a metadata signature and the placement (framework, device,
current stream).

Nothing here imports torch or cupy: objects are recognised by their protocols and type names, and the framework
modules are only read from ``sys.modules`` once the caller's objects show they are in use.
"""
from __future__ import annotations

import ctypes
import functools
import sys
from dataclasses import dataclass
from typing import Any

from . import dtypes
from .dtypes import KDL_BFLOAT, KDL_BOOL, KDL_COMPLEX, KDL_FLOAT, KDL_INT, KDL_UINT
from .errors import InvalidTypeError

# DLPack device types
KDL_CPU, KDL_CUDA = 1, 2


# ------------------------------------------------------------------------------------------------- streams
def stream_ptr(stream: Any) -> int:
    """A ``cudaStream_t`` value from an int, a torch/cupy/cuda.core stream, or any ``__cuda_stream__`` object."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        _version, handle = proto()
        return int(handle)
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy Stream, cuda.core / others
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
        if v is not None and hasattr(v, "__int__"):
            return int(v)
    raise InvalidTypeError(f"cannot use {type(stream).__name__} as a CUDA stream (pass an int, a torch/cupy stream "
                           f"or an "
                    "object with __cuda_stream__)")


# ------------------------------------------------------------------------------------------------- DLPack
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass(frozen=True)
class OperandInfo:
    """What cudnn_py needs to know about an operand to check it against a graph tensor."""

    ptr: int
    shape: tuple[int, ...] | None
    strides: tuple[int, ...] | None  # in elements
    dtype: tuple[int, int] | None  # DLPack (code, bits)
    device_type: int | None  # DLPack device type; None = unknown (int pointer)
    device_id: int | None
    nbytes: int | None = None  # the size of untyped memory (a cuda.core Buffer); None where shape says it

    @property
    def on_host(self) -> bool:
        return self.device_type == KDL_CPU


def _from_dlpack(obj: Any) -> OperandInfo:
    try:
        capsule = obj.__dlpack__(stream=-1) if _accepts_stream(obj) else obj.__dlpack__()
    except TypeError:
        capsule = obj.__dlpack__()
    if not _capsule_is_valid(capsule, b"dltensor"):
        raise InvalidTypeError(f"{type(obj).__name__}.__dlpack__() did not return a 'dltensor' capsule")
    # DLManagedTensor starts with its DLTensor; the capsule keeps ownership (we only read).
    t = _DLTensor.from_address(_capsule_get_pointer(capsule, b"dltensor"))
    n = t.ndim
    shape = tuple(t.shape[i] for i in range(n))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(n))
    else:
        strides = _row_major(shape)
    info = OperandInfo((t.data or 0) + t.byte_offset, shape, strides, (t.dtype.code, t.dtype.bits),
                       t.device.device_type, t.device.device_id)
    del capsule
    return info


def _accepts_stream(obj: Any) -> bool:
    return type(obj).__module__.startswith(("torch", "cupy"))


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


_NUMPY_KIND = {"f": KDL_FLOAT, "i": KDL_INT, "u": KDL_UINT, "b": KDL_BOOL, "c": KDL_COMPLEX}
_DLPACK_OF_DTYPE: dict[Any, tuple[int, int] | None] = {}  # framework dtype object -> DLPack (code, bits)


def dlpack_of_dtype(dt: Any) -> tuple[int, int] | None:
    """The DLPack (code, bits) of a torch / numpy / cupy dtype, from the dtype catalog (cached per dtype)."""
    try:
        return _DLPACK_OF_DTYPE[dt]
    except KeyError:
        row = dtypes.of_framework_dtype(dt)
        code = row.dlpack if row is not None else None
        _DLPACK_OF_DTYPE[dt] = code
        return code


def is_raw_buffer(cls: type) -> bool:
    """Untyped device memory: a cuda.core ``Buffer`` (its DLPack view is a flat byte array, which says nothing about
    the tensor it holds). Bound as raw memory of the tensor's size, checked for device and size."""
    return cls.__module__.startswith("cuda.core") and hasattr(cls, "handle") and hasattr(cls, "size")


def _raw_buffer_info(buf: Any) -> OperandInfo:
    on_device = bool(getattr(buf, "is_device_accessible", True))
    device = getattr(buf, "device_id", None)
    return OperandInfo(int(buf.handle), None, None, None, KDL_CUDA if on_device else KDL_CPU,
                       int(device) if device is not None else None, int(buf.size))


def operand_info(obj: Any) -> OperandInfo:
    """Pointer, shape, strides, dtype and device of any supported operand."""
    if isinstance(obj, int):
        return OperandInfo(obj, None, None, None, None, None)
    if is_raw_buffer(type(obj)):
        return _raw_buffer_info(obj)
    mod = type(obj).__module__
    if mod.startswith("torch") and hasattr(obj, "data_ptr"):  # fast path, also covers dtypes DLPack lacks
        dev = obj.device
        return OperandInfo(obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()), dlpack_of_dtype(obj.dtype),
                           KDL_CUDA if dev.type == "cuda" else KDL_CPU, dev.index if dev.index is not None else 0)
    if mod.startswith("numpy") and hasattr(obj, "ctypes"):  # (an array; a numpy scalar has no memory to point at)
        item = obj.dtype.itemsize
        code = dlpack_of_dtype(obj.dtype) or (_NUMPY_KIND.get(obj.dtype.kind, -1), item * 8)
        return OperandInfo(obj.ctypes.data, tuple(obj.shape), tuple(s // item for s in obj.strides), code, KDL_CPU, 0)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        import numpy as np

        dt = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        strides = tuple(s // dt.itemsize for s in cai["strides"]) if cai.get("strides") else _row_major(shape)
        kind = KDL_BFLOAT if cai["typestr"] in ("<V2",) else _NUMPY_KIND.get(dt.kind, -1)
        # the interface carries no device; cupy says it (others: the executor asks the driver about the pointer)
        device = obj.data.device_id if _framework(obj.__class__) == "cupy" else None
        return OperandInfo(int(cai["data"][0]), shape, strides, (kind, dt.itemsize * 8), KDL_CUDA, device)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj)
    if isinstance(obj, ctypes.c_void_p):
        return OperandInfo(obj.value or 0, None, None, None, None, None)
    raise InvalidTypeError(f"cannot use {type(obj).__name__} as a tensor operand (pass a torch/cupy/numpy array, an "
                           f"object "
                    "with __dlpack__ or __cuda_array_interface__, or an int device pointer)")


def data_ptr(obj: Any) -> int:
    """The device (or host) address of an operand's first element."""
    cls = obj.__class__
    return (POINTER_GETTERS.get(cls) or pointer_getter(cls))(obj)


def _framework(cls: type) -> str:
    """"torch", "cupy" or "" for instances of ``cls``, by module name (nothing is imported)."""
    mod = cls.__module__
    if mod.startswith("torch") and hasattr(cls, "data_ptr"):
        return "torch"
    if mod.startswith("cupy") and hasattr(cls, "__cuda_array_interface__"):
        return "cupy"
    return ""


def pointer_getter(cls: type):
    """How to read the data pointer of instances of ``cls``, decided once per class and cached in
    ``POINTER_GETTERS`` (the execute hot path looks it up directly)."""
    fw = _framework(cls)
    getter: Any
    if issubclass(cls, int):
        getter = int
    elif fw == "torch":
        getter = cls.data_ptr  # type: ignore[attr-defined]  # torch's own accessor: far cheaper than building a DLPack capsule
    elif fw == "cupy":
        getter = _cupy_ptr  # MemoryPointer.ptr includes the view's offset, like __cuda_array_interface__
    elif cls.__module__.startswith("numpy"):
        getter = _numpy_ptr
    elif is_raw_buffer(cls):
        getter = _buffer_ptr
    else:
        getter = _pointer_from_info
    POINTER_GETTERS[cls] = getter
    return getter


def _pointer_from_info(obj: Any) -> int:
    return operand_info(obj).ptr


def _cupy_ptr(a: Any) -> int:
    return a.data.ptr


def _buffer_ptr(b: Any) -> int:
    return int(b.handle)


def _numpy_ptr(a: Any) -> int:
    return a.__array_interface__["data"][0]  # cheaper than a.ctypes.data


POINTER_GETTERS: dict[type, Any] = {}


# ------------------------------------------------------------------------------------------------- signatures
# The execute hot path skips the full operand check when an operand "looks like" the one last checked for its
# slot: same class and same signature. A signature holds everything the full check reads apart from the pointer
# (shape, strides, dtype, device), read as cheaply as the framework allows; the pointer is compared separately
# (the variant-pack cache is keyed by pointers, and each pointer in it was checked for null and alignment).
# Two objects with equal signatures pass or fail the full check alike, so a match never hides a wrong operand.
def signature_getter(cls: type):
    """The signature function of instances of ``cls``, decided once per class (``SIGNATURE_GETTERS``)."""
    fw = _framework(cls)
    getter: Any
    if issubclass(cls, int) or issubclass(cls, ctypes.c_void_p):
        getter = _no_signature  # bare pointers carry no metadata: the caller's responsibility
    elif fw == "torch":
        getter = _torch_signature
    elif fw == "cupy":
        getter = _cupy_signature
    elif cls.__module__.startswith("numpy"):
        getter = _numpy_signature
    elif is_raw_buffer(cls):
        getter = _buffer_signature
    else:
        getter = _info_signature
    SIGNATURE_GETTERS[cls] = getter
    return getter


def _no_signature(obj: Any) -> None:
    return None


def _torch_signature(t: Any) -> tuple:
    # dtypes are singletons; torch.Size compares as a tuple; get_device() is an int (-1 on the host), cheaper to
    # read and compare than a torch.device. The execute tiers compare these four field by field, as
    # plans/execute_checks.TORCH_TERMS describes them: keep the two in sync.
    return (t.shape, t.stride(), t.dtype, t.get_device())


def _cupy_signature(a: Any) -> tuple:
    return (a.shape, a.strides, a.dtype, a.data.device_id)


def _buffer_signature(b: Any) -> tuple:
    return (int(b.size), getattr(b, "device_id", None), bool(getattr(b, "is_device_accessible", True)))


def _numpy_signature(a: Any) -> tuple:
    return (a.shape, a.strides, a.dtype)


def _info_signature(obj: Any) -> tuple:
    """Any other protocol object: what its DLPack / __cuda_array_interface__ view says (as costly as reading
    its pointer, which these objects only expose through the same protocols)."""
    info = operand_info(obj)
    return (info.shape, info.strides, info.dtype, info.device_type, info.device_id)


SIGNATURE_GETTERS: dict[type, Any] = {}


# ------------------------------------------------------------------------------------------------- placement
class Placement:
    """Where an operand's work belongs: its framework ("torch", "cupy" or "" for none), its device (None when
    unknown: the caller's current device is used) and how to read that framework's current stream on that
    device now. ``execute`` without a handle runs on that stream."""

    __slots__ = ("framework", "device", "current_stream")

    def __init__(self, framework: str, device: int | None, current_stream):
        self.framework, self.device, self.current_stream = framework, device, current_stream

    def __repr__(self) -> str:
        return f"Placement({self.framework or 'no framework'}, device={self.device})"


def _legacy_default_stream() -> int:
    return 0


NO_FRAMEWORK = Placement("", None, _legacy_default_stream)
_placements: dict[tuple[str, int], Placement] = {}


def placement_of(obj: Any, info: OperandInfo) -> Placement | None:
    """The placement of a device operand of torch or cupy (None for host memory, bare pointers and other
    protocol objects: they do not decide the stream). Only reads modules the caller already imported."""
    if info.device_type != KDL_CUDA:
        return None
    fw = _framework(obj.__class__)
    if fw == "torch":
        device = info.device_id or 0
    elif fw == "cupy":
        device = obj.data.device_id
    else:
        return None
    key = (fw, device)
    p = _placements.get(key)
    if p is None:
        stream = _torch_stream_getter(device) if fw == "torch" else _cupy_stream_getter(device)
        if stream is None:  # the framework module is not loaded (an impostor class): no opinion on the stream
            return None
        p = _placements.setdefault(key, Placement(fw, device, stream))
    return p


def _torch_stream_getter(device: int):
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    if raw is not None:  # ~0.1 us, against ~1 us for torch.cuda.current_stream(device).cuda_stream
        return functools.partial(raw, device)
    current = torch.cuda.current_stream
    return lambda: current(device).cuda_stream


def _cupy_stream_getter(device: int):
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    current = cupy.cuda.get_current_stream
    try:
        current(device)
    except TypeError:  # an older cupy: the current stream of the current device only
        def on_device() -> int:
            with cupy.cuda.Device(device):
                return current().ptr

        return on_device
    return lambda: current(device).ptr
