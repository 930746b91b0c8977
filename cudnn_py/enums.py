"""The classic public enums of the `cudnn` module, and their mapping to backend C enumerator names.

Why not `enum.IntEnum`: on Python 3.11+ its `str()`/`format()` give the number, while test ids are built from
`str(member)` == "<enum>.<MEMBER>" (pybind11 style). And IntEnum members of different enums compare equal when
their ints match (`data_type.FLOAT == reduction_mode.MUL`); pybind11 enums do not. So these are plain `Enum`s
that still convert with `int()` / `operator.index()`.

Integer values are frontend-internal (they changed between frontend releases): compare members, never ints.
The backend side is addressed by C enumerator *names* ("CUDNN_DATA_HALF"); the numeric values belong to the
binding layer that reads `cudnn_graph.h`.
"""
from __future__ import annotations

import enum
import operator
from typing import Any, TypeVar

from . import dtypes
from .errors import InvalidTypeError, InvalidValueError

__all__ = [
    "data_type", "tensor_reordering", "scalar_type", "reshape_mode", "knob_type", "norm_forward_phase",
    "heur_mode", "reduction_mode", "build_plan_policy", "numerical_note", "behavior_note", "diagonal_alignment",
    "attention_implementation", "moe_grouped_matmul_mode", "cuda_graph_retention", "FRONTEND_KNOB_TYPE_BASE",
    "is_frontend_knob_type",
]
# convolution_mode exists but, as in the classic module, is not re-exported at the top level.


class _ClassicEnum(enum.Enum):
    """pybind11-looking enum: `str()` and f-strings give "<enum>.<MEMBER>"."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value}>"

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.value))

    def __reduce_ex__(self, proto):  # pickle by name, like any Enum
        return getattr, (type(self), self.name)


def _make(name: str, members: list, band: tuple[int, list] | None = None) -> Any:
    """An enum of ``members`` numbered from 0, plus, with ``band`` = (base, names), ``names`` numbered from base.
    (Any: members are made at run time, mypy cannot see them.)"""
    values = [(m, i) for i, m in enumerate(members)]
    if band is not None:
        values += [(m, band[0] + i) for i, m in enumerate(band[1])]
    cls: Any = _ClassicEnum(name, values, module=__name__)  # type: ignore[call-arg]
    cls.__qualname__ = name
    return cls


data_type = _make("data_type", [d.name for d in dtypes.CATALOG])  # the catalog keeps the classic order
tensor_reordering = _make("tensor_reordering", ["NONE", "INT8x32", "F16x16", "F8_128x4"])
scalar_type = _make("scalar_type", ["RUNTIME_PARAM", "COMPILE_TIME_CONST"])
reshape_mode = _make("reshape_mode", ["VIEW_ONLY", "LOGICAL"])
_BACKEND_KNOBS = [
    "SWIZZLE", "TILE_SIZE", "EDGE", "MULTIPLY", "SPLIT_K_BUF", "TILEK", "STAGES", "REDUCTION_MODE", "SPLIT_K_SLC",
    "IDX_MODE", "SPECFILT", "KERNEL_CFG", "WORKSPACE", "TILE_CGA_M", "TILE_CGA_N", "BLOCK_SIZE", "OCCUPANCY",
    "ARRAY_SIZE_PER_THREAD", "SPLIT_COLS", "TILE_ROWS", "TILE_COLS", "LOAD_SIZE", "CTA_COUNT", "STREAM_K",
    "SPLIT_P_SLC", "TILE_M", "TILE_N", "WARP_SPEC_CFG", "SWAP_AB", "INPUT_TMA_ENABLE", "OUTPUT_TMA_ENABLE", "TILE_CGA",
]
# 1.32's frontend-only knob band: these never reach the backend.
_FRONTEND_KNOBS = ["SCHED_POLICY", "PACK_GQA", "SPLIT_KV", "PIPELINE_ARCH", "MMA_TILE_M", "MMA_TILE_N", "MMA_TILE_K",
                   "CTA_GROUP", "WARPS_M", "WARPS_N"]
FRONTEND_KNOB_TYPE_BASE = 1000  # 1.32: the frontend-only knob types are numbered from here
knob_type = _make("knob_type", ["NOT_SET"] + _BACKEND_KNOBS, band=(FRONTEND_KNOB_TYPE_BASE, _FRONTEND_KNOBS))


def is_frontend_knob_type(knob: Any) -> bool:
    """True for a knob type of 1.32's frontend-only band (tuned by the frontend's own engines, never sent to
    cuDNN): a ``knob_type`` member or its integer value."""
    value = knob.value if isinstance(knob, knob_type) else operator.index(knob)
    return value >= FRONTEND_KNOB_TYPE_BASE
norm_forward_phase = _make("norm_forward_phase", ["INFERENCE", "TRAINING", "NOT_SET"])
heur_mode = _make("heur_mode", ["A", "B", "FALLBACK", "OPENSOURCE"])
convolution_mode = _make("convolution_mode", ["CONVOLUTION", "CROSS_CORRELATION"])
reduction_mode = _make("reduction_mode", ["ADD", "MUL", "MIN", "MAX", "AMAX", "AVG", "NORM1", "NORM2",
                                          "MUL_NO_ZEROS", "NOT_SET"])
build_plan_policy = _make("build_plan_policy", ["HEURISTICS_CHOICE", "ALL"])
numerical_note = _make("numerical_note", [
    "TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT", "NONDETERMINISTIC", "WINOGRAD",
    "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13", "STRICT_NAN_PROP",
])
behavior_note = _make("behavior_note", [
    "RUNTIME_COMPILATION", "REQUIRES_FILTER_INT8x32_REORDER", "REQUIRES_BIAS_INT8x32_REORDER",
    "SUPPORTS_CUDA_GRAPH_NATIVE_API", "CUBLASLT_DEPENDENCY",
])
diagonal_alignment = _make("diagonal_alignment", ["TOP_LEFT", "BOTTOM_RIGHT"])
attention_implementation = _make("attention_implementation", ["AUTO", "COMPOSITE", "UNIFIED"])
moe_grouped_matmul_mode = _make("moe_grouped_matmul_mode", ["NONE", "GATHER", "SCATTER", "COMBINE"])
cuda_graph_retention = _make("cuda_graph_retention", ["PER_GRAPH", "NONE"])


# ---- backend C names --------------------------------------------------------------------------------------------
# One prefix per enum; members listed in `_NO_BACKEND` have no backend counterpart (they map to None).
_PREFIX: dict[type, str] = {
    data_type: "CUDNN_DATA_",
    tensor_reordering: "CUDNN_TENSOR_REORDERING_",
    reshape_mode: "CUDNN_RESHAPE_",
    knob_type: "CUDNN_KNOB_TYPE_",
    norm_forward_phase: "CUDNN_NORM_FWD_",
    heur_mode: "CUDNN_HEUR_MODE_",
    convolution_mode: "CUDNN_",
    reduction_mode: "CUDNN_REDUCE_TENSOR_",
    numerical_note: "CUDNN_NUMERICAL_NOTE_",
    behavior_note: "CUDNN_BEHAVIOR_NOTE_",
    moe_grouped_matmul_mode: "CUDNN_MOE_GROUPED_MATMUL_MODE_",
    cuda_graph_retention: "CUDNN_CUDA_GRAPH_RETENTION_",
}
_NO_BACKEND = {
    data_type.NOT_SET, knob_type.NOT_SET, norm_forward_phase.NOT_SET, reduction_mode.NOT_SET,
    heur_mode.OPENSOURCE,  # selects the frontend's own NVRTC kernels, never a libcudnn engine
    moe_grouped_matmul_mode.COMBINE,  # not in the 9.28 backend enum
    *(knob_type[k] for k in _FRONTEND_KNOBS),
}

E = TypeVar("E", bound=_ClassicEnum)


def backend_name(member: _ClassicEnum) -> str | None:
    """C enumerator name for a classic member ("CUDNN_DATA_HALF"), or None when the backend has none."""
    prefix = _PREFIX.get(type(member))
    if prefix is None or member in _NO_BACKEND:
        return None
    return prefix + member.name


def from_backend_name(enum_cls: type[E], cname: str) -> E:
    """Inverse of `backend_name`; raises ValueError for a name this enum does not cover."""
    prefix = _PREFIX.get(enum_cls, "")
    if prefix and cname.startswith(prefix):
        member = enum_cls.__members__.get(cname[len(prefix):])
        if member is not None and member not in _NO_BACKEND:
            return member
    raise InvalidValueError(f"{cname!r} is not a backend name of {enum_cls.__name__}")


def _require(member: Any, enum_cls: Any, what: str) -> str:
    if not isinstance(member, enum_cls):
        raise InvalidTypeError(f"{what} must be a {enum_cls.__name__} member, got {member!r}")
    name = backend_name(member)
    if name is None:
        raise InvalidValueError(f"{member} has no cuDNN backend counterpart")
    return name


def to_backend_data_type(dt: Any) -> str:
    """"CUDNN_DATA_HALF" for data_type.HALF (torch/numpy dtypes accepted too). NOT_SET raises ValueError."""
    return _require(from_any_dtype(dt), data_type, "data type")


def to_backend_reduction_mode(mode: Any) -> str:
    return _require(mode, reduction_mode, "reduction mode")


def to_backend_heur_mode(mode: Any) -> str:
    return _require(mode, heur_mode, "heuristic mode")


def to_backend_numerical_note(note: Any) -> str:
    return _require(note, numerical_note, "numerical note")


def to_backend_behavior_note(note: Any) -> str:
    return _require(note, behavior_note, "behavior note")


def to_backend_knob_type(kt: Any) -> str:
    return _require(kt, knob_type, "knob type")


def numerical_note_from_backend(cname: str) -> Any:
    return from_backend_name(numerical_note, cname)


def behavior_note_from_backend(cname: str) -> Any:
    return from_backend_name(behavior_note, cname)


def knob_type_from_backend(cname: str) -> Any:
    """Backend knob names the classic enum lacks (deprecated ones) come back as NOT_SET, like the frontend."""
    try:
        return from_backend_name(knob_type, cname)
    except ValueError:
        return knob_type.NOT_SET


# ---- dtype conversion from frameworks (the catalog in dtypes.py) -----------------------------------------------
def from_any_dtype(x: Any) -> Any:
    """Convert a classic data_type, a torch dtype, a numpy dtype/scalar type, a dtype name, or a DLPack
    (code, bits) pair to `data_type`. None -> NOT_SET. Anything else raises TypeError."""
    if isinstance(x, data_type):
        return x
    if x is None:
        return data_type.NOT_SET
    if isinstance(x, tuple) and len(x) in (2, 3) and all(isinstance(v, int) for v in x):
        row = dtypes.BY_DLPACK.get((x[0], x[1]))
        if row is None:
            raise InvalidTypeError(f"unsupported DLPack dtype (code, bits) = {x[:2]}")
        return data_type[row.name]
    row = dtypes.of_framework_dtype(x)
    if row is None:
        raise InvalidTypeError(f"cannot convert {x!r} to a cudnn data_type")
    return data_type[row.name]


def dtype_info(dt: Any) -> dtypes.DType:
    """The catalog row of a classic data_type member (or anything `from_any_dtype` takes)."""
    return dtypes.BY_NAME[from_any_dtype(dt).name]
