"""Attention backward from its definition, in float64: the gradients of ``sdpa`` (the forward's probabilities
recomputed from q and k), and the transposed views its decomposition reads."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, WithExtra, reference
from ..attention.reference import _dropout_factor, _probabilities, _score_mod, _sdpa_check, _sum_to, add_sink_gradient
from ..layout_ops.reference import read_through


@reference("sdpa_backward", _sdpa_check)
def _sdpa_backward(node: Any, read: Read) -> np.ndarray:
    """The gradients of the forward from its definition (P recomputed from q and k, not from the given O and
    Stats): dV = Pdᵀ dO, dPd = dO Vᵀ, dP = dPd ∘ dropout, dS = P ∘ (dP - rowsum(dP ∘ P)), dBias = Σ dS,
    dS := score_mod_bprop(dS), dQ = scale dS K, dK = scale dSᵀ Q (q heads summed per kv head),
    dSink = -Σ p_sink rowsum(dP ∘ P)."""
    probs, rows, scale, q, k, v = _probabilities(node, read)
    factor = _dropout_factor(node, read)
    d_o = read(node.inputs["DO"])
    d_v = np.swapaxes(probs * factor, -1, -2) @ d_o
    d_p = (d_o @ np.swapaxes(v, -1, -2)) * factor
    d_s = probs * (d_p - np.sum(d_p * probs, axis=-1, keepdims=True))
    outs = node.outputs
    extra = {outs["dV"].uid: _sum_to(d_v, outs["dV"].dim)}
    if "dBias" in outs:
        extra[outs["dBias"].uid] = _sum_to(d_s, outs["dBias"].dim)
    if node.params.get("score_mod_bprop") is not None:  # after dBias, before the scale: the user's chain rule
        d_s = _score_mod(node.params["score_mod_bprop"], d_s, read)
    extra[outs["dK"].uid] = _sum_to(scale * np.swapaxes(d_s, -1, -2) @ q, outs["dK"].dim)
    add_sink_gradient(node, read, rows, np.sum(d_p * probs, axis=-1, keepdims=True), extra)
    return WithExtra(scale * d_s @ k, extra)


@reference("attention_view")
def _attention_view(node: Any, read: Read) -> np.ndarray:
    """The same memory under Y's dims and strides: X laid out by its strides, read through Y's."""
    x, y = node.inputs["X"], node.outputs["Y"]
    return read_through(read(x), x, y)
