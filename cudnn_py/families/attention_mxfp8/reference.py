"""MXFP8 attention from its definition (``cudnn_py/families/attention_mxfp8/spec.py``), in float64: every MX operand
dequantized with its F8_128x4 E8M0 block scales (``quantize.unswizzle``, one scale per 32 elements along the
operand's block axis), then attention as ``sdpa`` / ``sdpa_backward`` define it, on the user's untransposed
tensors.

Not rounded: the forward's softmax output, which the decomposition types as Q's FP8 type (the backend's bmm2
operand type). How the fused kernel quantizes P there (a scale, a block-scaled requantization) is not documented,
so the definition keeps P exact; the GPU test's tolerance covers an E4M3 rounding of P. ``ReferenceEngine(program=
True)`` keeps every virtual tensor in float64, so the decomposition equals this definition.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, WithExtra, reference
from ..attention.reference import _probabilities, _sum_to, add_sink_gradient
from ..quantize.reference import unswizzle
from .spec import ALONG_D, ALONG_S, BLOCK


def dequantized(x: np.ndarray, scale_t: Any, stored: np.ndarray, along: int) -> np.ndarray:
    """x times the scale of its block: ``stored`` read through ``scale_t`` (F8_128x4), blocks of 32 along axis
    ``along`` of x, the tile padding cropped."""
    scales = unswizzle(stored, scale_t, along)
    blocks = [int(n) for n in x.shape]
    blocks[along] //= BLOCK
    scales = scales[tuple(slice(0, n) for n in blocks)]
    return x * np.repeat(scales, BLOCK, axis=along)


def _reader(node: Any, read: Read, blocked: dict[str, tuple[str, int]]) -> tuple[Read, dict[str, np.ndarray]]:
    """A read that gives each MX operand dequantized, and those values by port."""
    ins = node.inputs
    values = {port: dequantized(read(ins[port]), ins[scale], read(ins[scale]), along)
              for port, (scale, along) in blocked.items()}
    by_uid = {ins[port].uid: value for port, value in values.items()}

    def read_mx(t: Any) -> np.ndarray:
        found = by_uid.get(t.uid)
        return found if found is not None else read(t)
    return read_mx, values


def _check(node: Any) -> str | None:
    ins = node.inputs
    for port, t in ins.items():
        if port.startswith("DESCALE_") and t.reordering_type.name != "F8_128x4":
            return f"{node.op} with a {t.reordering_type.name} descale (the reference reads F8_128x4 tiles)"
    return None


def forward(node: Any, read: Read) -> WithExtra:
    """O = P · V (P the softmax of the scaled, masked scores of the dequantized q, k), Stats, Amax_O = max |O|."""
    read_mx, _ = _reader(node, read, {"Q": ("DESCALE_Q", ALONG_D), "K": ("DESCALE_K", ALONG_D),
                                      "V": ("DESCALE_V", ALONG_S)})
    probs, rows, _, _, _, v = _probabilities(node, read_mx)
    o = probs @ v
    outs = node.outputs
    extra = {outs[port].uid: value for port, value in rows.items() if port in outs}
    extra[outs["Amax_O"].uid] = np.max(np.abs(o))
    return WithExtra(o, extra)


def backward(node: Any, read: Read) -> WithExtra:
    """With P recomputed from the dequantized q and k (not from the given Stats): dV = Pᵀ dO_T; D = rowsum(dO_f16 ∘
    o_f16); dS = scale · P ∘ (dO Vᵀ - D); dQ = dS K_T; dK = dSᵀ Q_T (q heads summed per kv head); each Amax the
    max |·| of its gradient; dSink = -Σ p_sink D."""
    ins, outs = node.inputs, node.outputs
    read_mx, mx = _reader(node, read, {
        "Q": ("DESCALE_Q", ALONG_D), "Q_T": ("DESCALE_Q_T", ALONG_S), "K": ("DESCALE_K", ALONG_D),
        "K_T": ("DESCALE_K_T", ALONG_S), "V": ("DESCALE_V", ALONG_D), "DO_MX": ("DESCALE_DO", ALONG_D),
        "DO_MX_T": ("DESCALE_DO_T", ALONG_S)})
    probs, rows, scale, _, _, v = _probabilities(node, read_mx)
    h_q = probs.shape[1]
    k_t = np.repeat(mx["K_T"], h_q // mx["K_T"].shape[1], axis=1)
    d_v = _sum_to(np.swapaxes(probs, -1, -2) @ mx["DO_MX_T"], outs["dV"].dim)
    d_row = np.sum(read(ins["DO"]) * read(ins["O"]), axis=-1, keepdims=True)
    d_s = scale * probs * (mx["DO_MX"] @ np.swapaxes(v, -1, -2) - d_row)
    d_q = d_s @ k_t
    d_k = _sum_to(np.swapaxes(d_s, -1, -2) @ mx["Q_T"], outs["dK"].dim)
    extra = {outs["dK"].uid: d_k, outs["dV"].uid: d_v, outs["Amax_dQ"].uid: np.max(np.abs(d_q)),
             outs["Amax_dK"].uid: np.max(np.abs(d_k)), outs["Amax_dV"].uid: np.max(np.abs(d_v))}
    add_sink_gradient(node, read, rows, d_row, extra)
    return WithExtra(d_q, extra)


@reference("sdpa_mxfp8", _check)
def _sdpa_mxfp8(node: Any, read: Read) -> np.ndarray:
    return forward(node, read)


@reference("sdpa_mxfp8_backward", _check)
def _sdpa_mxfp8_backward(node: Any, read: Read) -> np.ndarray:
    return backward(node, read)
