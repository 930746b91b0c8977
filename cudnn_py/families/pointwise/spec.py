"""Pointwise ops: every classic pointwise method as one spec of kind "pointwise".

Ports IN_0..IN_2 take the classic tensor arguments in order; OUT_0 is the result. Backward activations read
IN_0 as dy and IN_1 as x. The mode's backend name goes into ``params["mode"]``; its catalog entry (the
``cudnnPointwiseMode_t`` member) is the version gate.
"""
from __future__ import annotations

import sys
from typing import Any

from ..._generated.names import desc
from ...enums import data_type
from ...errors import shape_error
from ...ir import layout
from ...ir.inference import InferenceContext, as_float, fill_data_types, int_at_least, optional_float, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register
from ...ir.tensor import Tensor

DBL_MAX = sys.float_info.max
FLT_MAX = 3.4028234663852886e38
PREFIX = "CUDNN_POINTWISE_"

# Backward activations read IN_0 as dy and IN_1 as x (lowering: DYDESC <- IN_0, XDESC <- IN_1, DXDESC <- OUT_0).
ACTIVATION_BACKWARD_MODES = frozenset(
    PREFIX + m for m in ("RELU_BWD", "TANH_BWD", "SIGMOID_BWD", "ELU_BWD", "GELU_BWD", "GELU_APPROX_TANH_BWD",
                         "SOFTPLUS_BWD", "SWISH_BWD"))


def infer(node: Node, ctx: InferenceContext) -> None:
    op = "pointwise"
    ins = [node.inputs[p] for p in ("IN_0", "IN_1", "IN_2") if p in node.inputs]
    out = node.outputs["OUT_0"]
    for t in ins:
        require_dims(op, node, t)
    if not out.dim:
        shape = layout.broadcast([t.dim for t in ins])
        if shape is None:
            bad = _first_unbroadcastable(ins)
            raise shape_error(op, node.name, bad, f"dims {list(bad.dim)} do not broadcast with "
                              f"{[list(t.dim) for t in ins]}")
        out._infer_set("dim", shape)
    for t in ins:
        if not layout.broadcastable_to(t.dim, out.dim):
            raise shape_error(op, node.name, t, f"dims {list(t.dim)} do not broadcast to the output dims "
                              f"{list(out.dim)}")
    if node.params.get("mode") == PREFIX + "GEN_INDEX":
        axis = node.params["axis"]
        if not 0 <= axis < len(out.dim):
            raise shape_error(op, node.name, ins[0], f"gen_index axis {axis} is outside [0, {len(out.dim) - 1}]")
    if not out.stride:
        same = next((t for t in ins if list(t.dim) == list(out.dim) and t.stride), None)
        if same is not None:
            out._infer_set("stride", list(same.stride))
        elif out.is_virtual:
            out._infer_set("stride", layout.strides_from_order(
                out.dim, layout.order_preserving_format(ins[0].stride, len(out.dim))))
        else:
            raise shape_error(op, node.name, out, "output stride cannot be deduced (no input has the output dims "
                              "and the output is not virtual); set_stride on it")
    fill_data_types(node, ctx, ins[0])
    if "relu_upper_clip" in node.params and node.params["relu_upper_clip"] is None:
        # the frontend's default is DBL_MAX, clamped to FLT_MAX for float math
        float_compute = node.params["compute_data_type"] is data_type.FLOAT
        node.params["relu_upper_clip"] = FLT_MAX if float_compute else DBL_MAX


def _first_unbroadcastable(ins: list[Tensor]) -> Tensor:
    for i in range(1, len(ins)):
        if layout.broadcast([t.dim for t in ins[: i + 1]]) is None:
            return ins[i]
    return ins[0]


# ---- the specs ------------------------------------------------------------------------------------------------------
_RELU = (Param("negative_slope", None, "relu_lower_clip_slope", as_float(0.0)),
         Param("lower_clip", None, "relu_lower_clip", as_float(0.0)),
         Param("upper_clip", None, "relu_upper_clip", optional_float))  # None: resolved with the compute type
_LEAKY = (Param("negative_slope", key="relu_lower_clip_slope", convert=float),)
_LEAKY_FIXED = {"relu_lower_clip": 0.0, "relu_upper_clip": None}
_SWISH = (Param("swish_beta", None, convert=as_float(1.0)),)
_TAIL_1_32 = ("name", "compute_data_type")  # the 1.32 surface: name before compute_data_type
_TAIL_1_23 = ("compute_data_type", "name")  # 1.23 (and every varargs method)
# parameters the classic Python API cannot set, with the backend defaults the frontend leaves them at
_MODE_FIXED: dict[str, dict[str, Any]] = {
    "ELU_FWD": {"elu_alpha": 1.0}, "ELU_BWD": {"elu_alpha": 1.0},
    "SOFTPLUS_FWD": {"softplus_beta": 1.0}, "SOFTPLUS_BWD": {"softplus_beta": 1.0},
}


def _index_axis(node: Node) -> tuple[str, str] | None:
    """GEN_INDEX's values index an axis of its output: the legalize pass moves ``axis`` with the output's axes."""
    return ("axis", "OUT_0") if node.params.get("mode") == PREFIX + "GEN_INDEX" else None


def _spec(method: str, mode: str, args: tuple[str, ...], params: tuple[Param, ...] = (),
          explicit_tail: tuple[str, ...] | None = None, legacy_tail: tuple[str, ...] | None = None,
          fixed: dict[str, Any] | None = None) -> OpSpec:
    """A pointwise method. Methods with scalar parameters have explicit (1.32) signatures in the reference
    surface and accept the 1.23 positional order too; the others are (*args, name=, compute_data_type=)."""
    explicit = explicit_tail is not None
    attrs = tuple(p.arg for p in params)
    order = args + (attrs + explicit_tail if explicit else _TAIL_1_23)  # type: ignore[operator]
    legacy = args + (legacy_tail or attrs + _TAIL_1_23) if explicit else None
    return OpSpec(
        method=method, kind="pointwise",
        inputs=tuple(Port(f"IN_{i}", a) for i, a in enumerate(args)),
        outputs=(Output("OUT_0"),), infer=infer, params=params,
        fixed={"mode": PREFIX + mode, **_MODE_FIXED.get(mode, {}), **(fixed or {})},
        order=order, legacy_order=legacy, varargs=not explicit,
        requires=(desc.OPERATION_POINTWISE_DESCRIPTOR, PREFIX + mode),
        node_type="POINTWISE", elementwise=True, axis_param=_index_axis,
        doc=f"{method}({', '.join(args)}) -> OUT_0: pointwise mode {PREFIX + mode}.",
    )


_UNARY = {
    "sqrt": "SQRT", "tanh": "TANH_FWD", "elu": "ELU_FWD", "gelu": "GELU_FWD", "sigmoid": "SIGMOID_FWD",
    "softplus": "SOFTPLUS_FWD", "gelu_approx_tanh": "GELU_APPROX_TANH_FWD", "erf": "ERF", "identity": "IDENTITY",
    "exp": "EXP", "log": "LOG", "neg": "NEG", "abs": "ABS", "ceil": "CEIL", "floor": "FLOOR", "rsqrt": "RSQRT",
    "reciprocal": "RECIPROCAL", "sin": "SIN", "cos": "COS", "tan": "TAN", "logical_not": "LOGICAL_NOT",
}
_BINARY = {"add": "ADD", "mul": "MUL", "sub": "SUB", "div": "DIV", "add_square": "ADD_SQUARE",
           "logical_and": "LOGICAL_AND", "logical_or": "LOGICAL_OR"}
_BACKWARD = {"tanh_backward": "TANH_BWD", "sigmoid_backward": "SIGMOID_BWD", "elu_backward": "ELU_BWD",
             "gelu_backward": "GELU_BWD", "softplus_backward": "SOFTPLUS_BWD",
             "gelu_approx_tanh_backward": "GELU_APPROX_TANH_BWD"}

SPECS: list[OpSpec] = [_spec(m, mode, ("input",)) for m, mode in _UNARY.items()]
SPECS += [_spec(m, mode, ("a", "b")) for m, mode in _BINARY.items()]
SPECS += [_spec(m, m.upper(), ("input0", "input1")) for m in ("max", "min", "mod", "pow")]
SPECS += [_spec("bias", "ADD", ("input", "bias")), _spec("scale", "MUL", ("input", "scale"))]
SPECS += [_spec(f"cmp_{c}", f"CMP_{c.upper()}", ("input", "comparison")) for c in ("eq", "neq", "gt", "ge", "lt", "le")]
SPECS += [_spec("binary_select", "BINARY_SELECT", ("input0", "input1", "mask"))]
SPECS += [_spec(m, mode, ("loss", "input")) for m, mode in _BACKWARD.items()]
SPECS += [
    _spec("relu", "RELU_FWD", ("input",), _RELU, _TAIL_1_32),
    _spec("relu_backward", "RELU_BWD", ("loss", "input"), _RELU, _TAIL_1_32),
    _spec("leaky_relu", "RELU_FWD", ("input",), _LEAKY, _TAIL_1_32, fixed=_LEAKY_FIXED),
    _spec("leaky_relu_backward", "RELU_BWD", ("loss", "input"), _LEAKY, _TAIL_1_32, fixed=_LEAKY_FIXED),
    _spec("swish", "SWISH_FWD", ("input",), _SWISH, _TAIL_1_32),
    # 1.23 put compute_data_type before swish_beta here (unlike swish)
    _spec("swish_backward", "SWISH_BWD", ("loss", "input"), _SWISH, _TAIL_1_32,
          legacy_tail=("compute_data_type", "swish_beta", "name")),
    _spec("gen_index", "GEN_INDEX", ("input",), (Param("axis", convert=int_at_least(None)),), _TAIL_1_32),
]
register(*SPECS)
