"""Normalizations, forward (``node_lowering.md`` §5): layernorm and rmsnorm, in TRAINING (statistics out) and
INFERENCE. All lower to one OPERATION_NORM_FORWARD; the statistics outputs exist only in TRAINING (the classic
methods return ``None`` in their place otherwise).

The normalized axes are those where ``scale`` is not 1 (per-feature scale ``[1, C, H, W]`` normalizes over C, H, W
per sample); statistics have X's dims with those axes set to 1. ``validate()`` checks that scale and bias have one
shape, compatible with X - a check the official frontend leaves to cuDNN.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...enums import data_type, norm_forward_phase
from ...errors import shape_error
from .. import layout
from ..node import Node
from ..spec import OpSpec, Output, Param, Port, register
from .common import InferenceContext, fill_data_types, require_dims


def _phase(v: Any) -> Any:
    if not isinstance(v, norm_forward_phase) or v is norm_forward_phase.NOT_SET:
        raise TypeError(f"needs norm_forward_phase.TRAINING or INFERENCE, got {v!r}")
    return v


def _training(params: Mapping[str, Any]) -> bool:
    return params["norm_forward_phase"] is norm_forward_phase.TRAINING


def infer(node: Node, ctx: InferenceContext) -> None:
    op = node.spec.method if node.spec is not None else "norm"
    x, scale, y = node.inputs["X"], node.inputs["SCALE"], node.outputs["Y"]
    require_dims(op, node, x)
    rank = len(x.dim)
    for port in ("SCALE", "BIAS"):
        t = node.inputs.get(port)
        if t is None:
            continue
        if not t.dim:  # the frontend's default: X's dims with the batch axis 1
            t._infer_set("dim", [1] + [int(d) for d in x.dim[1:]])
            t._infer_set("stride", layout.strides_from_order(
                t.dim, layout.order_preserving_format(x.stride, rank)))
        if len(t.dim) != rank or any(int(d) not in (1, int(xd)) for d, xd in zip(t.dim, x.dim)):
            raise shape_error(op, node.name, t, f"dims {list(t.dim)} do not fit X {list(x.dim)} (same rank, each "
                              "axis 1 or X's)")
    bias = node.inputs.get("BIAS")
    if bias is not None and list(bias.dim) != list(scale.dim):
        raise shape_error(op, node.name, bias, f"dims {list(bias.dim)} differ from the scale's {list(scale.dim)}")
    if not y.dim:
        y._infer_set("dim", list(x.dim))
    elif list(y.dim) != list(x.dim):
        raise shape_error(op, node.name, y, f"dims {list(y.dim)} differ from X's {list(x.dim)}")
    if not y.stride:
        y._infer_set("stride", list(x.stride))
    stats_dims = [1 if int(s) != 1 else int(d) for s, d in zip(scale.dim, x.dim)]
    for port in ("MEAN", "INV_VARIANCE"):
        t = node.outputs.get(port)
        if t is None:
            continue
        if not t.dim:
            t._infer_set("dim", stats_dims)
        if not t.stride:
            t._infer_set("stride", layout.strides_from_order(
                t.dim, layout.order_preserving_format(x.stride, rank)))
        if t.data_type is data_type.NOT_SET:
            t._infer_set("data_type", data_type.FLOAT)  # statistics are kept in float
    fill_data_types(node, ctx, x)


def _norm(method: str, mode: str, with_mean: bool, bias_optional: bool) -> OpSpec:
    outputs = (Output("Y"),) + ((Output("MEAN", _training),) if with_mean else ()) + (Output("INV_VARIANCE",
                                                                                             _training),)
    return OpSpec(
        method=method, kind="norm_forward",
        inputs=(Port("X", "input"), Port("SCALE", "scale"), Port("BIAS", "bias", optional=bias_optional),
                Port("EPSILON", "epsilon")),
        outputs=outputs, infer=infer,
        params=(Param("norm_forward_phase", convert=_phase),),
        fixed={"mode": mode},
        order=("norm_forward_phase", "input", "scale", "bias", "epsilon", "compute_data_type", "name"),
        varargs=True, out_dims=True, returns_list=True,
        requires=("CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR", mode),
        doc=f"{method}(norm_forward_phase, input, scale, bias, epsilon) -> "
            f"[Y{', mean' if with_mean else ''}, inv_variance] (statistics None unless TRAINING).")


LAYERNORM = _norm("layernorm", "CUDNN_LAYER_NORM", with_mean=True, bias_optional=False)
RMSNORM = _norm("rmsnorm", "CUDNN_RMS_NORM", with_mean=False, bias_optional=True)
register(LAYERNORM, RMSNORM)
