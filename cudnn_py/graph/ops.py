"""Op tables and shape / data-type inference (node_lowering.md §0.3-0.4, §1-3).

* `POINTWISE` - every classic pointwise method: backend mode name, classic tensor-argument names (which become
  ports IN_0..IN_2 in order), scalar attributes, and the call signature the reference surface records.
* `infer(node, ctx)` - fills output dims/strides, data types and compute types for one node, in place; the graph
  calls it for every node in creation (= topological) order. Other op families plug in via `register_inference`.
Shape errors are ValueErrors naming the op, the node and the tensor.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..enums import data_type
from .errors import shape_error
from .node import Node
from .tensor import Tensor

DBL_MAX = sys.float_info.max
FLT_MAX = 3.4028234663852886e38


# ---- pointwise table ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Attr:
    """A scalar argument of a pointwise method and the node param it lands in."""

    arg: str  # classic keyword name, e.g. "negative_slope"
    param: str  # node.params key, e.g. "relu_lower_clip_slope"
    required: bool = False


@dataclass(frozen=True)
class PointwiseOp:
    method: str
    mode: str  # backend enumerator name, "CUDNN_POINTWISE_*"
    args: Tuple[str, ...]  # classic tensor-argument names, in port order IN_0, IN_1, IN_2
    attrs: Tuple[Attr, ...] = ()
    # The reference surface gives the parameterized ops a positional signature and the rest `*args`.
    explicit: bool = False
    # 1.23 positional order of the arguments after the tensors; used when a classic positional call is detected.
    classic_tail: Tuple[str, ...] = ("compute_data_type", "name")

    def signature(self) -> inspect.Signature:
        P = inspect.Parameter
        params = [P("self", P.POSITIONAL_OR_KEYWORD)]
        if self.explicit:
            params += [P(a, P.POSITIONAL_OR_KEYWORD) for a in self.args]
            params += [P(a.arg, P.POSITIONAL_OR_KEYWORD, **({} if a.required else {"default": None})) for a in self.attrs]
            params += [P("name", P.POSITIONAL_OR_KEYWORD, default=""),
                       P("compute_data_type", P.POSITIONAL_OR_KEYWORD, default=None)]
        else:
            params += [P("args", P.VAR_POSITIONAL), P("name", P.KEYWORD_ONLY, default=""),
                       P("compute_data_type", P.KEYWORD_ONLY, default=None), P("kwargs", P.VAR_KEYWORD)]
        return inspect.Signature(params)


_RELU_ATTRS = (Attr("negative_slope", "relu_lower_clip_slope"), Attr("lower_clip", "relu_lower_clip"),
               Attr("upper_clip", "relu_upper_clip"))
_LEAKY_ATTRS = (Attr("negative_slope", "relu_lower_clip_slope", required=True),)
_SWISH_ATTRS = (Attr("swish_beta", "swish_beta"),)


def _table() -> Dict[str, PointwiseOp]:
    def pw(method: str, mode: str, args: Tuple[str, ...], attrs: Tuple[Attr, ...] = (),
           tail: Optional[Tuple[str, ...]] = None) -> PointwiseOp:
        explicit = tail is not None  # parameterized ops have positional signatures in the surface
        return PointwiseOp(method, "CUDNN_POINTWISE_" + mode, args, attrs, explicit,
                           tail if explicit else ("compute_data_type", "name"))

    unary = {
        "sqrt": "SQRT", "tanh": "TANH_FWD", "elu": "ELU_FWD", "gelu": "GELU_FWD", "sigmoid": "SIGMOID_FWD",
        "softplus": "SOFTPLUS_FWD", "gelu_approx_tanh": "GELU_APPROX_TANH_FWD", "erf": "ERF", "identity": "IDENTITY",
        "exp": "EXP", "log": "LOG", "neg": "NEG", "abs": "ABS", "ceil": "CEIL", "floor": "FLOOR", "rsqrt": "RSQRT",
        "reciprocal": "RECIPROCAL", "sin": "SIN", "cos": "COS", "tan": "TAN", "logical_not": "LOGICAL_NOT",
    }
    ab = {"add": "ADD", "mul": "MUL", "sub": "SUB", "div": "DIV", "add_square": "ADD_SQUARE",
          "logical_and": "LOGICAL_AND", "logical_or": "LOGICAL_OR"}
    bwd = {"tanh_backward": "TANH_BWD", "sigmoid_backward": "SIGMOID_BWD", "elu_backward": "ELU_BWD",
           "gelu_backward": "GELU_BWD", "softplus_backward": "SOFTPLUS_BWD",
           "gelu_approx_tanh_backward": "GELU_APPROX_TANH_BWD"}
    clips = ("negative_slope", "lower_clip", "upper_clip")
    ct = ("compute_data_type", "name")
    ops = [pw(m, mode, ("input",)) for m, mode in unary.items()]
    ops += [pw(m, mode, ("a", "b")) for m, mode in ab.items()]
    ops += [pw(m, m.upper(), ("input0", "input1")) for m in ("max", "min", "mod", "pow")]
    ops += [pw("bias", "ADD", ("input", "bias")), pw("scale", "MUL", ("input", "scale"))]
    ops += [pw(f"cmp_{c}", f"CMP_{c.upper()}", ("input", "comparison")) for c in ("eq", "neq", "gt", "ge", "lt", "le")]
    ops += [pw("binary_select", "BINARY_SELECT", ("input0", "input1", "mask"))]
    ops += [pw(m, mode, ("loss", "input")) for m, mode in bwd.items()]
    ops += [
        pw("relu", "RELU_FWD", ("input",), _RELU_ATTRS, clips + ct),
        pw("relu_backward", "RELU_BWD", ("loss", "input"), _RELU_ATTRS, clips + ct),
        pw("leaky_relu", "RELU_FWD", ("input",), _LEAKY_ATTRS, ("negative_slope",) + ct),
        pw("leaky_relu_backward", "RELU_BWD", ("loss", "input"), _LEAKY_ATTRS, ("negative_slope",) + ct),
        pw("swish", "SWISH_FWD", ("input",), _SWISH_ATTRS, ("swish_beta",) + ct),
        # 1.23 put compute_data_type before swish_beta here (python_api.md §4.1)
        pw("swish_backward", "SWISH_BWD", ("loss", "input"), _SWISH_ATTRS, ("compute_data_type", "swish_beta", "name")),
        pw("gen_index", "GEN_INDEX", ("input",), (Attr("axis", "axis", required=True),), ("axis",) + ct),
    ]
    return {op.method: op for op in ops}


POINTWISE: Mapping[str, PointwiseOp] = _table()

# Backward activations read IN_0 as dy and IN_1 as x (lowering: DYDESC <- IN_0, XDESC <- IN_1, DXDESC <- OUT_0).
ACTIVATION_BACKWARD_MODES = frozenset(
    "CUDNN_POINTWISE_" + m for m in ("RELU_BWD", "TANH_BWD", "SIGMOID_BWD", "ELU_BWD", "GELU_BWD",
                                     "GELU_APPROX_TANH_BWD", "SOFTPLUS_BWD", "SWISH_BWD"))


def pointwise_params(mode: str, given: Mapping[str, Any]) -> Dict[str, Any]:
    """Node params for a pointwise mode: the user's scalar attributes plus the backend defaults
    (node_lowering.md §1.3). `relu_upper_clip` stays None here; inference resolves it with the compute type."""
    params: Dict[str, Any] = {"mode": mode}
    if mode in ("CUDNN_POINTWISE_RELU_FWD", "CUDNN_POINTWISE_RELU_BWD"):
        params["relu_lower_clip"] = float(given.get("relu_lower_clip") or 0.0)
        params["relu_lower_clip_slope"] = float(given.get("relu_lower_clip_slope") or 0.0)
        upper = given.get("relu_upper_clip")
        params["relu_upper_clip"] = None if upper is None else float(upper)
    elif mode in ("CUDNN_POINTWISE_ELU_FWD", "CUDNN_POINTWISE_ELU_BWD"):
        params["elu_alpha"] = 1.0  # not settable from the classic Python API
    elif mode in ("CUDNN_POINTWISE_SOFTPLUS_FWD", "CUDNN_POINTWISE_SOFTPLUS_BWD"):
        params["softplus_beta"] = 1.0  # not settable from the classic Python API
    elif mode in ("CUDNN_POINTWISE_SWISH_FWD", "CUDNN_POINTWISE_SWISH_BWD"):
        beta = given.get("swish_beta")
        params["swish_beta"] = 1.0 if beta is None else float(beta)
    elif mode == "CUDNN_POINTWISE_GEN_INDEX":
        params["axis"] = int(given["axis"])
    return params


# ---- stride helpers (graph_helpers.h) -----------------------------------------------------------------------------
def row_major_strides(dim: Sequence[int]) -> List[int]:
    strides, acc = [], 1
    for d in reversed(list(dim)):
        strides.append(acc)
        acc *= max(int(d), 1)
    return strides[::-1]


def strides_from_order(dim: Sequence[int], order: Sequence[int]) -> List[int]:
    """Dense strides where axis with the smallest order value is fastest (generate_stride)."""
    strides = [0] * len(dim)
    acc = 1
    for axis in sorted(range(len(dim)), key=lambda a: order[a]):
        strides[axis] = acc
        acc *= max(int(dim[axis]), 1)
    return strides


def nhwc_order(rank: int) -> List[int]:
    """Channels-last: axis 1 fastest, then axes rank-1 .. 2, then axis 0 (generate_NHWC_stride_order)."""
    if rank < 3:
        return list(range(rank - 1, -1, -1))  # row-major for rank 1 and 2
    order = [0] * rank
    order[1] = 0
    for i, axis in enumerate(range(rank - 1, 1, -1)):
        order[axis] = i + 1
    order[0] = rank - 1
    return order


def order_preserving_format(in_stride: Sequence[int], out_rank: int) -> List[int]:
    """Rank input axes by ascending stride; extra output axes come after (generate_stride_order_preserving_format).
    Equal strides (size-1 axes) tie-break towards the later axis being faster, as row-major would; the C++ sort
    is unstable there, so any choice is valid."""
    n = len(in_stride)
    ranked = sorted(range(n), key=lambda a: (in_stride[a], -a))
    order = [0] * out_rank
    for rank, axis in enumerate(ranked):
        if axis < out_rank:
            order[axis] = rank
    for extra in range(n, out_rank):
        order[extra] = extra
    return order


def broadcast(shapes: Sequence[Sequence[int]]) -> Optional[List[int]]:
    """NumPy right-aligned broadcast; None when the shapes do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, start=rank - len(s)):
            if d == out[i] or d == 1:
                continue
            if out[i] != 1:
                return None
            out[i] = d
    return out


def broadcastable_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    if len(shape) > len(target):
        return False
    return all(d in (1, t) for d, t in zip(reversed(list(shape)), reversed(list(target))))


# ---- inference -----------------------------------------------------------------------------------------------------
@dataclass
class InferenceContext:
    """The graph's data-type defaults as inference sees them."""

    io_data_type: Any = data_type.NOT_SET
    intermediate_data_type: Any = data_type.NOT_SET
    compute_data_type: Any = data_type.NOT_SET


_RULES: Dict[str, Callable[[Node, InferenceContext], None]] = {}


def register_inference(op: str, rule: Callable[[Node, InferenceContext], None]) -> None:
    """Let another op family (conv, norms, ...) add its inference rule."""
    _RULES[op] = rule


def infer(node: Node, ctx: InferenceContext) -> None:
    rule = _RULES.get(node.op)
    if rule is None:
        raise ValueError(f"node {node.name!r}: no inference rule for op {node.op!r}")
    rule(node, ctx)


def _fill_data_types(node: Node, ctx: InferenceContext, first_input: Optional[Tensor]) -> None:
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


def _reshape_fused_scalars(node: Node) -> None:
    """By-value scalars carrying a value take rank R of the first non-scalar input (else output, else 1),
    with all dims and strides 1 (node_lowering.md §0.3). One step further than the frontend: a one-element
    by-value tensor the user described with a lower rank (tensor_like of a CPU tensor of shape [1]) gets leading
    1s, since the backend requires equal ranks and a scalar means the same at any rank."""
    scalars = [t for t in node.inputs.values() if t.is_fused_scalar]
    short = [t for t in node.inputs.values() if t.is_pass_by_value and not t.is_fused_scalar and _numel(t.dim) == 1]
    if not scalars and not short:
        return
    others = [t for t in node.inputs.values() if not t.is_pass_by_value and t.dim]
    others += [t for t in node.outputs.values() if t.dim]
    rank = len(others[0].dim) if others else 1
    for t in scalars:
        t._infer_set("dim", [1] * rank)
        t._infer_set("stride", [1] * rank)
    for t in short:
        if len(t.dim) < rank:  # padding with leading 1s keeps the user's choice otherwise intact
            pad = rank - len(t.dim)
            t._raw_set("dim", [1] * pad + list(t.dim))
            t._raw_set("stride", [1] * pad + list(t.stride))


def _numel(dim: Sequence[int]) -> int:
    n = 1
    for d in dim:
        n *= d
    return n if dim else 0


def _require_dims(op: str, node: Node, t: Tensor) -> None:
    if not t.dim:
        raise shape_error(op, node.name, t, "dims are not set (set_dim) and cannot be inferred")


def _infer_pointwise(node: Node, ctx: InferenceContext) -> None:
    op = "pointwise"
    _reshape_fused_scalars(node)
    ins = [node.inputs[p] for p in ("IN_0", "IN_1", "IN_2") if p in node.inputs]
    out = node.outputs["OUT_0"]
    for t in ins:
        _require_dims(op, node, t)
    if not out.dim:
        shape = broadcast([t.dim for t in ins])
        if shape is None:
            bad = _first_unbroadcastable(ins)
            raise shape_error(op, node.name, bad, f"dims {list(bad.dim)} do not broadcast with "
                              f"{[list(t.dim) for t in ins]}")
        out._infer_set("dim", shape)
    for t in ins:
        if not broadcastable_to(t.dim, out.dim):
            raise shape_error(op, node.name, t, f"dims {list(t.dim)} do not broadcast to the output dims "
                              f"{list(out.dim)}")
    if node.params.get("mode") == "CUDNN_POINTWISE_GEN_INDEX":
        axis = node.params["axis"]
        if not 0 <= axis < len(out.dim):
            raise shape_error(op, node.name, ins[0], f"gen_index axis {axis} is outside [0, {len(out.dim) - 1}]")
    if not out.stride:
        same = next((t for t in ins if list(t.dim) == list(out.dim) and t.stride), None)
        if same is not None:
            out._infer_set("stride", list(same.stride))
        elif out.is_virtual:
            out._infer_set("stride", strides_from_order(out.dim, order_preserving_format(ins[0].stride, len(out.dim))))
        else:
            raise shape_error(op, node.name, out, "output stride cannot be deduced (no input has the output dims "
                              "and the output is not virtual); set_stride on it")
    _fill_data_types(node, ctx, ins[0])
    _resolve_relu_upper_clip(node)


def _resolve_relu_upper_clip(node: Node) -> None:
    if "relu_upper_clip" in node.params and node.params["relu_upper_clip"] is None:
        float_compute = node.params["compute_data_type"] is data_type.FLOAT
        node.params["relu_upper_clip"] = FLT_MAX if float_compute else DBL_MAX


def _first_unbroadcastable(ins: List[Tensor]) -> Tensor:
    for i in range(1, len(ins)):
        if broadcast([t.dim for t in ins[: i + 1]]) is None:
            return ins[i]
    return ins[0]


def _infer_matmul(node: Node, ctx: InferenceContext) -> None:
    op = "matmul"
    _reshape_fused_scalars(node)
    a, b, c = node.inputs["A"], node.inputs["B"], node.outputs["C"]
    for t in (a, b):
        _require_dims(op, node, t)
        if len(t.dim) < 2:
            raise shape_error(op, node.name, t, f"needs rank >= 2, got dims {list(t.dim)}")
    if a.dim[-1] != b.dim[-2]:
        raise shape_error(op, node.name, b, f"inner dimensions differ: A is {list(a.dim)}, B is {list(b.dim)}")
    batch = broadcast([a.dim[:-2], b.dim[:-2]])
    if batch is None:
        raise shape_error(op, node.name, b, f"batch dims {list(b.dim[:-2])} do not broadcast with A's "
                          f"{list(a.dim[:-2])}")
    expected = batch + [a.dim[-2], b.dim[-1]]
    if not c.dim:
        c._infer_set("dim", expected)
    elif len(c.dim) != len(expected) or list(c.dim[-2:]) != expected[-2:] or not broadcastable_to(batch, c.dim[:-2]):
        raise shape_error(op, node.name, c, f"dims {list(c.dim)} do not match A {list(a.dim)} x B {list(b.dim)} "
                          f"(expected {expected})")
    if not c.stride:
        c._infer_set("stride", row_major_strides(c.dim))
    _fill_data_types(node, ctx, a)


def _infer_reduction(node: Node, ctx: InferenceContext) -> None:
    op = "reduction"
    x, y = node.inputs["X"], node.outputs["Y"]
    _require_dims(op, node, x)
    if not y.dim:
        y._infer_set("dim", list(x.dim))  # frontend behaviour: no reduction unless the user sets Y's dims
    elif len(y.dim) != len(x.dim) or any(yd not in (1, xd) for yd, xd in zip(y.dim, x.dim)):
        raise shape_error(op, node.name, y, f"dims {list(y.dim)} are not a reduction of X {list(x.dim)} "
                          "(same rank; each dim equal to X's or 1)")
    if not y.stride:
        y._infer_set("stride", strides_from_order(y.dim, nhwc_order(len(y.dim))))
    _fill_data_types(node, ctx, x)


register_inference("pointwise", _infer_pointwise)
register_inference("matmul", _infer_matmul)
register_inference("reduction", _infer_reduction)


def check_tensor(t: Tensor) -> None:
    """Tensor_attributes::validate, plus an explicit data-type check."""
    label = t.name or f"uid {t.uid}"
    if not t.dim:
        raise ValueError(f"tensor {label!r}: dims are not set")
    if any(d <= 0 for d in t.dim):
        raise ValueError(f"tensor {label!r}: dims must be positive, got {list(t.dim)}")
    if len(t.stride) != len(t.dim):
        raise ValueError(f"tensor {label!r}: stride {list(t.stride)} and dims {list(t.dim)} differ in rank")
    if t.is_virtual and t.is_pass_by_value:
        raise ValueError(f"tensor {label!r}: cannot be both virtual and pass-by-value")
    if t.is_compile_time_constant and (t.is_virtual or not t.is_pass_by_value):
        raise ValueError(f"tensor {label!r}: a compile-time constant must be pass-by-value and not virtual")
    if t.data_type is data_type.NOT_SET:
        raise ValueError(f"tensor {label!r}: data type is not set (set_data_type, or give the graph an io_data_type)")
