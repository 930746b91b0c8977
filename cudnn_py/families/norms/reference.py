"""Normalizations and genstats."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..._generated.names import NormMode
from ...engines.reference.registry import Read, WithExtra, reference, scalar
from .spec import normalized_axes


def _why_not_peer_stats(node: Any) -> str | None:
    """Refused at check_support (so the Router routes around the reference): the peers' statistics live on the
    other GPUs of a data-parallel batchnorm, which the float64 reference cannot read."""
    if node.list_input("PEER_STATS"):
        return (f"{node.spec.method if node.spec else node.op}: peer statistics come from other GPUs; the float64 "
                "reference has no peers")
    return None


@reference("norm_forward", check=_why_not_peer_stats)
def _norm_forward(node: Any, read: Read) -> np.ndarray:
    """y = (x - mean) * inv_std * scale + bias over the axes where scale is not 1 (RMS: no mean); the statistics
    go to the MEAN / INV_VARIANCE outputs through ``node.reference_extra`` (see ReferencePlan)."""
    x, scale = read(node.inputs["X"]), read(node.inputs["SCALE"])
    if "EPSILON" not in node.inputs:  # batchnorm inference: the statistics are given
        return (x - read(node.inputs["MEAN"])) * read(node.inputs["INV_VARIANCE"]) * scale + read(node.inputs["BIAS"])
    eps = scalar(read, node.inputs["EPSILON"])
    axes = normalized_axes(node.params["mode"], list(node.inputs["SCALE"].dim), list(x.shape))
    rms = node.params["mode"] == NormMode.RMS_NORM
    mean = x.mean(axis=axes, keepdims=True)
    if rms:  # RMS norm: no centring
        mean = np.zeros_like(mean)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    y = (x - mean) * inv * scale
    if "BIAS" in node.inputs:
        y = y + read(node.inputs["BIAS"])
    extra = {}
    if "MEAN" in node.outputs:
        extra[node.outputs["MEAN"].uid] = mean
    if "INV_VARIANCE" in node.outputs:
        extra[node.outputs["INV_VARIANCE"].uid] = inv
    if "NEXT_RUNNING_MEAN" in node.outputs:  # exponential averages; the variance's is unbiased (n / (n - 1))
        m = scalar(read, node.inputs["MOMENTUM"])
        n = x.size // mean.size
        extra[node.outputs["NEXT_RUNNING_MEAN"].uid] = (1 - m) * read(node.inputs["PREV_RUNNING_MEAN"]) + m * mean
        extra[node.outputs["NEXT_RUNNING_VAR"].uid] = ((1 - m) * read(node.inputs["PREV_RUNNING_VAR"])
                                                       + m * var * n / max(n - 1, 1))
    return y if not extra else WithExtra(y, extra)


@reference("genstats")
def _genstats(node: Any, read: Read) -> np.ndarray:
    """Per-channel sum and sum of squares over every axis but 1."""
    x = read(node.inputs["X"])
    axes = tuple(i for i in range(x.ndim) if i != 1)
    return WithExtra(x.sum(axis=axes, keepdims=True), {node.outputs["SQ_SUM"].uid: (x * x).sum(axis=axes,
                                                                                             keepdims=True)})


@reference("norm_backward", check=_why_not_peer_stats)
def _norm_backward(node: Any, read: Read) -> np.ndarray:
    """Gradients of y = xhat * scale + bias, xhat = (x - mean) * inv (RMS: x * inv), over the normalized axes
    (layer / RMS: where scale is not 1; instance: the spatial axes): dscale, dbias sum where scale is 1."""
    dy, x, scale = read(node.inputs["DY"]), read(node.inputs["X"]), read(node.inputs["SCALE"])
    inv = read(node.inputs["INV_VARIANCE"])
    rms = node.params["mode"] == NormMode.RMS_NORM
    mean = 0.0 if rms else read(node.inputs["MEAN"])
    dims = node.inputs["SCALE"].dim
    norm_axes = normalized_axes(node.params["mode"], list(dims), list(x.shape))
    other_axes = tuple(i for i, s in enumerate(dims) if int(s) == 1)
    xhat = (x - mean) * inv
    g = dy * scale
    dx = g - xhat * (g * xhat).mean(axis=norm_axes, keepdims=True)
    if not rms:
        dx = dx - g.mean(axis=norm_axes, keepdims=True)
    extra = {node.outputs["DSCALE"].uid: (dy * xhat).sum(axis=other_axes, keepdims=True)}
    if "DBIAS" in node.outputs:
        extra[node.outputs["DBIAS"].uid] = dy.sum(axis=other_axes, keepdims=True)
    return WithExtra(dx * inv, extra)
