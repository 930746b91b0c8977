"""What every op family's inference shares: the graph's data-type defaults, filling unset data types
(a virtual tensor takes the intermediate type, any other the I/O type), and the tensor checks run after inference."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..enums import data_type, dtype_info
from ..errors import InvalidTypeError, InvalidValueError, shape_error
from . import layout
from .node import Node
from .tensor import Tensor, checked_int

MAX_INT64 = 2**63  # cuDNN's dims, strides, element counts and byte sizes are int64


@dataclass
class InferenceContext:
    """The graph's data-type defaults as inference sees them."""

    io_data_type: Any = data_type.NOT_SET
    intermediate_data_type: Any = data_type.NOT_SET
    compute_data_type: Any = data_type.NOT_SET


def fill_data_types(node: Node, ctx: InferenceContext, first_input: Tensor | None) -> None:
    """fill_from_context: unset tensors get intermediate (virtual) or io (real); unset compute gets the graph's.
    Two IR fallbacks where the context leaves a gap (classic would fail later in the backend): an output takes
    its first input's type, and the compute type becomes FLOAT."""
    for t in list(node.inputs.values()) + list(node.outputs.values()):
        if t.data_type is data_type.NOT_SET:
            t._infer_set("data_type", ctx.intermediate_data_type if t.is_virtual else ctx.io_data_type)
    for t in node.outputs.values():
        if t.data_type is data_type.NOT_SET and first_input is not None:
            t._infer_set("data_type", first_input.data_type)
    requested = node.requested_compute_data_type
    compute = requested if requested is not data_type.NOT_SET else ctx.compute_data_type
    node.params["compute_data_type"] = compute if compute is not data_type.NOT_SET else data_type.FLOAT


def require_dims(op: str, node: Node, t: Tensor) -> None:
    if not t.dim:
        raise shape_error(op, node.name, t, "dims are not set (set_dim) and cannot be inferred")


def fill_or_check_dims(op: str, node: Node, t: Tensor, expected: list[int], what: str) -> None:
    """An output's dims: ``expected`` where the user left them unset, else they must equal it. ``what`` names the
    expectation in the error: "dims [..] differ from <what> [..]"."""
    expected = [int(d) for d in expected]
    if not t.dim:
        t._infer_set("dim", expected)
    elif [int(d) for d in t.dim] != expected:
        raise shape_error(op, node.name, t, f"dims {list(t.dim)} differ from {what} {expected}")


def like_input(op: str, node: Node, y: Tensor, x: Tensor, what: str = "the input's") -> None:
    """An output shaped as its input: X's dims (checked where set) and, unless set, X's strides."""
    fill_or_check_dims(op, node, y, list(x.dim), what)
    if not y.stride:
        y._infer_set("stride", list(x.stride))


def check_tensor(t: Tensor) -> None:
    """Tensor_attributes::validate, plus an explicit data-type check."""
    dims, strides = t.dim, t.stride
    if not dims:
        raise InvalidValueError(f"tensor {_label(t)}: dims are not set")
    if min(dims) <= 0:
        raise InvalidValueError(f"tensor {_label(t)}: dims must be positive, got {list(dims)}")
    if len(strides) != len(dims):
        raise InvalidValueError(f"tensor {_label(t)}: stride {list(strides)} and dims {list(dims)} differ in rank")
    if t.is_virtual and t.is_pass_by_value:
        raise InvalidValueError(f"tensor {_label(t)}: cannot be both virtual and pass-by-value")
    if t.is_compile_time_constant and (t.is_virtual or not t.is_pass_by_value):
        raise InvalidValueError(f"tensor {_label(t)}: a compile-time constant must be pass-by-value and not virtual")
    if t.data_type is data_type.NOT_SET:
        raise InvalidValueError(f"tensor {_label(t)}: data type is not set (set_data_type, or give the graph an "
                                f"io_data_type)")
    if min(strides) < 0:
        raise InvalidValueError(f"tensor {_label(t)}: strides must not be negative, got {list(strides)}")
    # cuDNN computes element offsets and byte sizes in int64: a tensor whose bytes do not fit is refused here, not
    # left to wrap around in the backend (or in a workspace size)
    span_bytes = layout.span(dims, strides) * max(dtype_info(t.data_type).bits, 8) // 8
    if layout.numel(dims) >= MAX_INT64 or span_bytes >= MAX_INT64:
        raise InvalidValueError(f"tensor {_label(t)}: dims {list(dims)} with strides {list(strides)} "
                                f"({t.data_type.name}) span {span_bytes} bytes, more than cuDNN's int64 sizes hold "
                                f"(< 2**63)")


def _label(t: Tensor) -> str:
    return f"{t.name!r} (uid {t.uid})" if t.name else f"uid {t.uid}"


def as_float(default: float):
    """A Param converter: None -> ``default``, else float()."""
    def convert(v: Any) -> float:
        return default if v is None else float(v)
    return convert


def optional_float(v: Any) -> float | None:
    return None if v is None else float(v)


def int_at_least(minimum: int | None, *, optional: bool = False):
    """A Param converter for an integer argument (numpy ints too; bools, floats and strings refused) that is
    ``>= minimum`` (``None``: any int, e.g. an axis): the IR's integer check, ``tensor.checked_int``.
    ``optional``: None passes through as None. The spec prefixes the error with the op and the argument
    (``OpSpec.node_params``); this names the value and the rule."""

    def convert(v: Any) -> int | None:
        if v is None and optional:
            return None
        return checked_int(v, minimum)
    return convert


def member(enum_cls: Any, exclude: tuple = ()):
    """A Param converter that accepts members of ``enum_cls`` only (and not those in ``exclude``, e.g. NOT_SET)."""
    def convert(v: Any) -> Any:
        if not isinstance(v, enum_cls) or v in exclude:
            raise InvalidTypeError(f"needs a {enum_cls.__name__} member, got {v!r}")
        return v
    return convert
