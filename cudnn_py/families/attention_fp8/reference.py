"""Per-tensor FP8 attention from its definition (``cudnn_py/families/attention_fp8/spec.py``), in float64, with the FP8
rounding of the intermediates the definition quantizes: P · scale_s into Q's FP8 type (forward and backward) and
dP · scale_dP into dO's type (backward), round to nearest even, saturating (``quantize.GRIDS``). The outputs are
returned unrounded: writing them into an FP8 buffer rounds them, as the GPU does.

The decomposition run by ``ReferenceEngine(program=True)`` keeps every virtual tensor in float64, so it equals this
definition without the rounding (``_rounder``), which is how tests/test_sdpa_fp8.py compares them exactly.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, WithExtra, reference, scalar
from ..attention.reference import _dropout_factor, _probabilities, _sdpa_check, _sum_to, add_sink_gradient
from ..quantize.reference import GRIDS


def _check(node: Any) -> str | None:
    for t in (node.inputs["Q"], node.inputs.get("DO", node.inputs["Q"])):  # the types the rounding targets
        if t.data_type not in GRIDS:
            return f"{node.op} over {t.data_type.name} (the reference rounds FP8_E4M3 / FP8_E5M2)"
    return _sdpa_check(node)


def _rounder(dt: Any) -> Any:
    """The FP8 rounding of an intermediate quantized into ``dt``."""
    return GRIDS[dt].round


def _value(node: Any, read: Read, port: str) -> float:
    return scalar(read, node.inputs[port])


def forward(node: Any, read: Read) -> WithExtra:
    """O = scale_o · descale_s · descale_v · fp8(scale_s · P) V, Amax_S = max |P|, Amax_O = max |O| before scale_o
    (P with dropout; the softmax statistics as sdpa's)."""
    ins, outs = node.inputs, node.outputs
    descale = _value(node, read, "DESCALE_Q") * _value(node, read, "DESCALE_K")
    probs, rows, _, _, _, v = _probabilities(node, read, descale)
    probs = probs * _dropout_factor(node, read)
    s8 = _rounder(ins["Q"].data_type)(probs * _value(node, read, "SCALE_S"))
    o = s8 @ v * _value(node, read, "DESCALE_S") * _value(node, read, "DESCALE_V")
    extra = {outs[port].uid: value for port, value in rows.items() if port in outs}
    extra[outs["Amax_S"].uid] = np.max(np.abs(probs))
    extra[outs["Amax_O"].uid] = np.max(np.abs(o))
    return WithExtra(o * _value(node, read, "SCALE_O"), extra)


def backward(node: Any, read: Read) -> WithExtra:
    """With P recomputed from q and k (not from the given Stats) and D from the given O and dO:
    S8 = fp8(scale_s · P_dropped), dV = scale_dV · descale_s · descale_dO · S8ᵀ dO;
    D = descale_dO · descale_o · rowsum(dO ∘ O); dP = attn_scale · P ∘ (dropout(descale_dO · descale_v · dO Vᵀ) - D);
    dP8 = fp8(scale_dP · dP); dQ = scale_dQ · descale_dP · descale_k · dP8 K, dK = scale_dK · descale_dP ·
    descale_q · dP8ᵀ Q (q heads summed per kv head); each Amax the max |·| before its scale; dSink = -Σ p_sink D."""
    ins, outs = node.inputs, node.outputs

    def val(port: str) -> float:
        return _value(node, read, port)

    probs, rows, scale, q, k, v = _probabilities(node, read, val("DESCALE_Q") * val("DESCALE_K"))
    factor = _dropout_factor(node, read)
    d_o, o = read(ins["DO"]), read(ins["O"])
    s8 = _rounder(ins["Q"].data_type)(probs * factor * val("SCALE_S"))
    d_v = _sum_to(np.swapaxes(s8, -1, -2) @ d_o * val("DESCALE_S") * val("DESCALE_DO"), outs["dV"].dim)
    d_row = np.sum(d_o * o, axis=-1, keepdims=True) * val("DESCALE_DO") * val("DESCALE_O")
    d_p = (d_o @ np.swapaxes(v, -1, -2)) * val("DESCALE_DO") * val("DESCALE_V") * factor
    d_s = probs * (d_p - d_row) * scale
    dp8 = _rounder(ins["DO"].data_type)(d_s * val("SCALE_DP"))
    d_q = dp8 @ k * val("DESCALE_DP") * val("DESCALE_K")
    d_k = _sum_to(np.swapaxes(dp8, -1, -2) @ q * val("DESCALE_DP") * val("DESCALE_Q"), outs["dK"].dim)
    extra = {outs["dK"].uid: d_k * val("SCALE_DK"), outs["dV"].uid: d_v * val("SCALE_DV"),
             outs["Amax_dQ"].uid: np.max(np.abs(d_q)), outs["Amax_dK"].uid: np.max(np.abs(d_k)),
             outs["Amax_dV"].uid: np.max(np.abs(d_v)), outs["Amax_dP"].uid: np.max(np.abs(d_s))}
    add_sink_gradient(node, read, rows, d_row, extra)
    return WithExtra(d_q * val("SCALE_DQ"), extra)


@reference("sdpa_fp8", _check)
def _sdpa_fp8(node: Any, read: Read) -> np.ndarray:
    return forward(node, read)


@reference("sdpa_fp8_backward", _check)
def _sdpa_fp8_backward(node: Any, read: Read) -> np.ndarray:
    return backward(node, read)
