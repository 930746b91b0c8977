"""Normalizations, forward: layernorm and rmsnorm, in TRAINING (statistics out) and
INFERENCE. All lower to one OPERATION_NORM_FORWARD; the statistics outputs exist only in TRAINING (the classic
methods return ``None`` in their place otherwise).

The normalized axes are those where ``scale`` is not 1 (per-feature scale ``[1, C, H, W]`` normalizes over C, H, W
per sample); statistics have X's dims with those axes set to 1. ``validate()`` checks that scale and bias have one
shape, compatible with X - a check the official frontend leaves to cuDNN.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._generated.names import GenStatsMode, NormMode, PointwiseMode, desc
from ...enums import data_type, norm_forward_phase
from ...errors import InvalidTypeError, InvalidValueError, shape_error
from ...ir import layout
from ...ir.inference import InferenceContext, fill_data_types, fill_or_check_dims, like_input, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register


def _phase(v: Any) -> Any:
    if not isinstance(v, norm_forward_phase) or v is norm_forward_phase.NOT_SET:
        raise InvalidTypeError(f"needs norm_forward_phase.TRAINING or INFERENCE, got {v!r}")
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
    like_input(op, node, y, x, "X's")  # the normalized output
    stats_dims = normalized_stats_dims(node.params["mode"], list(scale.dim), list(x.dim))
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


def normalized_axes(mode: str, scale_dims: list, x_dims: list) -> tuple[int, ...]:
    """The axes a norm reduces over: instance norm every spatial axis (per sample and channel); layer / RMS norm
    the axes where the scale is not 1 (per sample); adaptive layer norm those of them after the batch axis."""
    if mode == NormMode.INSTANCE_NORM:
        return tuple(range(2, len(x_dims)))
    if mode == NormMode.BATCH_NORM:  # per channel: over the batch and the spatial axes
        return tuple(i for i in range(len(x_dims)) if i != 1)
    first = 1 if mode == NormMode.ADA_LAYER_NORM else 0  # adaptive: the scale is per sample, the batch axis is kept
    return tuple(i for i, s in enumerate(scale_dims) if i >= first and int(s) != 1)


def normalized_stats_dims(mode: str, scale_dims: list, x_dims: list) -> list[int]:
    axes = normalized_axes(mode, scale_dims, x_dims)
    return [1 if i in axes else int(d) for i, d in enumerate(x_dims)]


def _tensors_first(args: Any, kwargs: Mapping[str, Any]) -> bool:
    """A call in the 1.32 module's order: ``layernorm(input, scale, bias, epsilon, norm_forward_phase)``."""
    return bool(args) and not isinstance(args[0], norm_forward_phase)


def _norm(method: str, mode: str, with_mean: bool, bias_optional: bool, min_version: int = 0) -> OpSpec:
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
        # the pure-Python 1.32 module takes the tensors first and the phase after them (or by keyword)
        legacy_order=("input", "scale", "bias", "epsilon", "norm_forward_phase", "compute_data_type", "name"),
        legacy_call=_tensors_first,
        varargs=True, out_dims=True, returns_list=True,
        requires=(desc.OPERATION_NORM_FORWARD_DESCRIPTOR, mode), min_version=min_version,
        doc=f"{method}(norm_forward_phase, input, scale, bias, epsilon) -> "
            f"[Y{', mean' if with_mean else ''}, inv_variance] (statistics None unless TRAINING).")


LAYERNORM = _norm("layernorm", NormMode.LAYER_NORM, with_mean=True, bias_optional=False)
RMSNORM = _norm("rmsnorm", NormMode.RMS_NORM, with_mean=False, bias_optional=True)
INSTANCENORM = _norm("instancenorm", NormMode.INSTANCE_NORM, with_mean=True, bias_optional=False)
# the frontend converts ADA_LAYER_NORM only from cuDNN 9.9.0 (the header has the enum since 9.7.0)
ADA_LAYER_NORM_MIN_VERSION = 90900
ADALAYERNORM = _norm("adalayernorm", NormMode.ADA_LAYER_NORM, with_mean=True, bias_optional=True,
                     min_version=ADA_LAYER_NORM_MIN_VERSION)
register(LAYERNORM, RMSNORM, INSTANCENORM, ADALAYERNORM)


# ---- per-channel tensors (batch norm, genstats) -------------------------------------------------------------------
def per_channel_dims(x_dims: list) -> list[int]:
    return [1, int(x_dims[1])] + [1] * (len(x_dims) - 2)


def fit_per_channel(op: str, node: Node, x: Any, tensors: list, statistics: bool = False) -> None:
    """Each tensor is per channel of X: dims (1, C, 1, ...) filled in or checked, NHWC strides where unset;
    ``statistics`` outputs are kept in float unless set."""
    per_channel = per_channel_dims(list(x.dim))
    for t in tensors:
        fill_or_check_dims(op, node, t, per_channel, f"the per-channel dims for X {list(x.dim)}:")
        if not t.stride:
            t._infer_set("stride", layout.strides_from_order(per_channel, layout.nhwc_order(len(per_channel))))
        if statistics and t.data_type is data_type.NOT_SET:
            t._infer_set("data_type", data_type.FLOAT)


# ---- batchnorm inference ------------------------------------------------------------------------------------------
def infer_batchnorm_inference(node: Node, ctx: InferenceContext) -> None:
    op = "batchnorm_inference"
    x, y = node.inputs["X"], node.outputs["Y"]
    require_dims(op, node, x)
    fit_per_channel(op, node, x, [node.inputs[p] for p in ("MEAN", "INV_VARIANCE", "SCALE", "BIAS")])
    like_input(op, node, y, x, "X's")  # the normalized output
    fill_data_types(node, ctx, x)


def _feeds_drelu_dbn(node: Node, nodes: list[Node]) -> bool:
    """Whether the batchnorm-inference ``node`` opens the BN-inference -> dReLU -> dBN pattern: its Y is read only
    by a relu_backward as its x (IN_1), whose gradient is read by a batchnorm_backward as its DY."""
    y = node.outputs["Y"]
    readers = [(n, port) for n in nodes for port, t in n.inputs.items() if t is y]
    if len(readers) != 1:
        return False
    relu, port = readers[0]
    if relu.op != "pointwise" or relu.params.get("mode") != PointwiseMode.RELU_BWD or port != "IN_1":
        return False
    grad = relu.outputs["OUT_0"]
    return any(n.op == "norm_backward" and n.params.get("mode") == NormMode.BATCH_NORM and n.inputs.get("DY") is grad
               for n in nodes)


def expand_batchnorm_inference(node: Node, rw: Any, options: Any) -> bool:
    """Y = (X - mean) * inv_variance * scale + bias as four pointwise ops. cuDNN's NORM_FORWARD has no batch-norm
    INFERENCE engine on its own (the 9.28 header: "Batch norm only supports forward training"; on the H200 with
    9.19 heuristics fail with "matcher_casted == nullptr"), although the official frontend emits that form.

    Kept as one NORM_FORWARD (phase INFERENCE), as the frontend emits it, where it opens the BN-inference ->
    relu_backward -> batchnorm_backward pattern: cuDNN's fused dBN engine matches that form only (the official
    test_bn_infer_drelu_dbn runs on the H200 with 9.19), not the pointwise decomposition."""
    if _feeds_drelu_dbn(node, rw.program.nodes):
        return False
    ins, y = node.inputs, node.outputs["Y"]
    ct = node.params["compute_data_type"]
    if ct is data_type.NOT_SET:
        ct = data_type.FLOAT
    centred = rw.sub(ins["X"], ins["MEAN"], compute_data_type=ct, out_data_type=data_type.FLOAT)
    normalized = rw.mul(centred, ins["INV_VARIANCE"], compute_data_type=ct, out_data_type=data_type.FLOAT)
    scaled = rw.mul(normalized, ins["SCALE"], compute_data_type=ct, out_data_type=data_type.FLOAT)
    rw.add(scaled, ins["BIAS"], compute_data_type=ct, out=y)
    return True


BATCHNORM_INFERENCE = OpSpec(
    method="batchnorm_inference", kind="norm_forward",
    inputs=(Port("X", "input"), Port("MEAN", "mean"), Port("INV_VARIANCE", "inv_variance"), Port("SCALE", "scale"),
            Port("BIAS", "bias")),
    outputs=(Output("Y"),), infer=infer_batchnorm_inference,
    fixed={"mode": NormMode.BATCH_NORM, "norm_forward_phase": norm_forward_phase.INFERENCE},
    order=("input", "mean", "inv_variance", "scale", "bias", "compute_data_type", "name"), varargs=True,
    out_dims=True, expand=expand_batchnorm_inference,
    requires=(desc.OPERATION_POINTWISE_DESCRIPTOR, desc.OPERATION_NORM_FORWARD_DESCRIPTOR,
              NormMode.BATCH_NORM),
    doc="batchnorm_inference(input, mean, inv_variance, scale, bias) -> Y = (X - mean) * inv_variance * scale + bias.")


# ---- backward: layernorm, rmsnorm, instancenorm, adalayernorm ------------------------------------------------------
def infer_backward(node: Node, ctx: InferenceContext) -> None:
    op = node.spec.method if node.spec is not None else "norm_backward"
    dy, x, scale = node.inputs["DY"], node.inputs["X"], node.inputs["SCALE"]
    for t in (dy, x, scale):
        require_dims(op, node, t)
    if list(dy.dim) != list(x.dim):
        raise shape_error(op, node.name, dy, f"dims {list(dy.dim)} differ from X's {list(x.dim)}")
    if len(scale.dim) != len(x.dim) or any(int(s) not in (1, int(d)) for s, d in zip(scale.dim, x.dim)):
        raise shape_error(op, node.name, scale, f"dims {list(scale.dim)} do not fit X {list(x.dim)}")
    needed = ("INV_VARIANCE",) if node.params["mode"] == NormMode.RMS_NORM else ("MEAN", "INV_VARIANCE")
    missing = [p.lower() for p in needed if p not in node.inputs]
    if missing:  # cuDNN's NORM_BACKWARD reads the forward's statistics; it refuses at finalize without them
        raise InvalidValueError(f"{op} node {node.name!r}: needs the forward's {' and '.join(missing)} (cuDNN's "
                         "NORM_BACKWARD does not recompute them)")
    stats = normalized_stats_dims(node.params["mode"], list(scale.dim), list(x.dim))
    for port in ("MEAN", "INV_VARIANCE"):
        stat = node.inputs.get(port)
        if stat is not None and stat.dim and list(stat.dim) != stats:
            raise shape_error(op, node.name, stat, f"dims {list(stat.dim)} are not the statistics' {stats}")
    batch_norm = node.params["mode"] == NormMode.BATCH_NORM
    for port, like, what in (("DX", x, "X's"), ("DSCALE", scale, "scale's"), ("DBIAS", scale, "scale's")):
        grad = node.outputs.get(port)
        if grad is None:
            continue
        if batch_norm and port != "DX" and not grad.stride:
            # the frontend's DBN node gives the per-channel gradients NHWC strides (dbn.h), not the scale's: the
            # same memory, but the strides of their unit axes are part of the graph cuDNN matches
            fill_or_check_dims(op, node, grad, list(scale.dim), what)
            grad._infer_set("stride", layout.strides_from_order(list(grad.dim), layout.nhwc_order(len(grad.dim))))
        else:  # a gradient has its operand's dims
            like_input(op, node, grad, like, what)
    fill_data_types(node, ctx, x)


def _has_dbias(params: Mapping[str, Any]) -> bool:
    return bool(params.get("has_dbias", True))


def _norm_backward(method: str, mode: str, stats_optional: bool = False, min_version: int = 0,
                   note: str = "") -> OpSpec:
    """A backward norm that takes the forward's mean and inv_variance (layer, instance, adaptive layer norm)."""
    return OpSpec(
        method=method, kind="norm_backward",
        inputs=(Port("DY", "grad"), Port("X", "input"), Port("SCALE", "scale"),
                Port("MEAN", "mean", optional=stats_optional),
                Port("INV_VARIANCE", "inv_variance", optional=stats_optional)),
        outputs=(Output("DX"), Output("DSCALE"), Output("DBIAS")), infer=infer_backward, fixed={"mode": mode},
        order=("grad", "input", "scale", "mean", "inv_variance", "compute_data_type", "name"), varargs=True,
        out_dims=True, returns_list=True, min_version=min_version,
        requires=(desc.OPERATION_NORM_BACKWARD_DESCRIPTOR, mode),
        doc=f"{method}(grad, input, scale, mean, inv_variance) -> [DX, DScale, DBias]{note}.")


LAYERNORM_BACKWARD = _norm_backward("layernorm_backward", NormMode.LAYER_NORM)

RMSNORM_BACKWARD = OpSpec(
    method="rmsnorm_backward", kind="norm_backward",
    inputs=(Port("DY", "grad"), Port("X", "input"), Port("SCALE", "scale"), Port("INV_VARIANCE", "inv_variance")),
    outputs=(Output("DX"), Output("DSCALE"), Output("DBIAS", _has_dbias)), infer=infer_backward,
    params=(Param("has_dbias", True, convert=bool),), fixed={"mode": NormMode.RMS_NORM},
    order=("grad", "input", "scale", "inv_variance", "has_dbias", "compute_data_type", "name"), varargs=True,
    out_dims=True, returns_list=True, requires=(desc.OPERATION_NORM_BACKWARD_DESCRIPTOR, NormMode.RMS_NORM),
    doc="rmsnorm_backward(grad, input, scale, inv_variance, has_dbias) -> [DX, DScale, DBias or None].")

INSTANCENORM_BACKWARD = _norm_backward("instancenorm_backward", NormMode.INSTANCE_NORM, stats_optional=True,
                                       note="; the statistics are per sample and channel ([N, C, 1, 1])")
ADALAYERNORM_BACKWARD = _norm_backward("adalayernorm_backward", NormMode.ADA_LAYER_NORM,
                                       min_version=ADA_LAYER_NORM_MIN_VERSION, note="; the scale is per sample")
register(BATCHNORM_INFERENCE, LAYERNORM_BACKWARD, RMSNORM_BACKWARD, INSTANCENORM_BACKWARD, ADALAYERNORM_BACKWARD)


# ---- genstats: per-channel sum and sum of squares (the batchnorm-statistics producer) -----------------------------
def infer_genstats(node: Node, ctx: InferenceContext) -> None:
    x = node.inputs["X"]
    require_dims("genstats", node, x)
    fit_per_channel("genstats", node, x, [node.outputs["SUM"], node.outputs["SQ_SUM"]])
    fill_data_types(node, ctx, x)


GENSTATS = OpSpec(
    method="genstats", kind="genstats", inputs=(Port("X", "input"),),
    outputs=(Output("SUM", label="{node}_sum_output"), Output("SQ_SUM", label="{node}_sq_sum_output")),
    infer=infer_genstats, order=("input", "compute_data_type", "name"), varargs=True, out_dims=True,
    returns_list=True,
    requires=(desc.OPERATION_GEN_STATS_DESCRIPTOR, GenStatsMode.GENSTATS_SUM_SQSUM),
    doc="genstats(input) -> [SUM, SQ_SUM]: per-channel sum and sum of squares of X over N and the spatial axes.")
register(GENSTATS)


# ---- batchnorm training and backward ------------------------------------------------------------------------------
_RUNNING = ("in_running_mean", "in_running_var", "momentum")


def infer_batchnorm(node: Node, ctx: InferenceContext) -> None:
    op = "batchnorm"
    x, y = node.inputs["X"], node.outputs["Y"]
    require_dims(op, node, x)
    running = [port for port in ("PREV_RUNNING_MEAN", "PREV_RUNNING_VAR", "MOMENTUM") if port in node.inputs]
    if running and len(running) != 3:  # the frontend drops a partial set silently; say so instead
        raise InvalidValueError(f"batchnorm node {node.name!r}: running statistics need in_running_mean, "
                                f"in_running_var "
                         f"and momentum together; got only {', '.join(p.lower() for p in running)}")
    fit_per_channel(op, node, x, [node.inputs[p] for p in ("SCALE", "BIAS", "PREV_RUNNING_MEAN", "PREV_RUNNING_VAR")
                                  if p in node.inputs])
    like_input(op, node, y, x, "X's")  # the normalized output
    fit_per_channel(op, node, x, [node.outputs[p] for p in ("MEAN", "INV_VARIANCE", "NEXT_RUNNING_MEAN",
                                                             "NEXT_RUNNING_VAR") if p in node.outputs],
                    statistics=True)
    fill_data_types(node, ctx, x)


BATCHNORM = OpSpec(
    method="batchnorm", kind="norm_forward",
    inputs=(Port("X", "input"), Port("SCALE", "scale"), Port("BIAS", "bias"),
            Port("PREV_RUNNING_MEAN", "in_running_mean", optional=True),
            Port("PREV_RUNNING_VAR", "in_running_var", optional=True), Port("EPSILON", "epsilon"),
            Port("MOMENTUM", "momentum", optional=True), Port("PEER_STATS", "peer_stats", optional=True, is_list=True)),
    outputs=(Output("Y"), Output("MEAN"), Output("INV_VARIANCE"), Output("NEXT_RUNNING_MEAN", given=_RUNNING),
             Output("NEXT_RUNNING_VAR", given=_RUNNING)),
    infer=infer_batchnorm, fixed={"mode": NormMode.BATCH_NORM, "norm_forward_phase": norm_forward_phase.TRAINING},
    order=("input", "scale", "bias", "in_running_mean", "in_running_var", "epsilon", "momentum", "peer_stats",
           "compute_data_type", "name"),
    varargs=True, out_dims=True, returns_list=True,
    requires=(desc.OPERATION_NORM_FORWARD_DESCRIPTOR, NormMode.BATCH_NORM),
    doc="batchnorm(input, scale, bias, in_running_mean, in_running_var, epsilon, momentum, peer_stats=[]) -> "
        "[Y, mean, inv_variance, next_running_mean, next_running_var] (running outputs None unless all three "
        "running inputs are given).")

BATCHNORM_BACKWARD = OpSpec(
    method="batchnorm_backward", kind="norm_backward",
    inputs=(Port("DY", "grad"), Port("X", "input"), Port("SCALE", "scale"), Port("MEAN", "mean"),
            Port("INV_VARIANCE", "inv_variance"), Port("PEER_STATS", "peer_stats", optional=True, is_list=True)),
    outputs=(Output("DX"), Output("DSCALE"), Output("DBIAS")), infer=infer_backward,
    fixed={"mode": NormMode.BATCH_NORM},
    order=("grad", "input", "scale", "mean", "inv_variance", "peer_stats", "compute_data_type", "name"),
    varargs=True, out_dims=True, returns_list=True,
    requires=(desc.OPERATION_NORM_BACKWARD_DESCRIPTOR, NormMode.BATCH_NORM),
    doc="batchnorm_backward(grad, input, scale, mean, inv_variance, peer_stats=[]) -> [DX, DScale, DBias].")
register(BATCHNORM, BATCHNORM_BACKWARD)
