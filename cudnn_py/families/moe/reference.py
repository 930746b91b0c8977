"""MoE grouped matmul: per-expert matmuls over the row ranges first_token_offset gives (expert e owns rows
offset[e] .. offset[e+1], the last expert up to the end), with token_index gathering the rows in GATHER mode
and token_index * top_k + token_ks placing them in SCATTER mode (``ops/moe/spec.py`` gives the source).

Where the GPU leaves something unspecified (an index out of range, two rows scattered to one slot, a slot no row
reaches) the oracle refuses the values instead of inventing an answer."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, reference
from ...enums import moe_grouped_matmul_mode
from ...errors import InvalidValueError


def expert_ranges(node: Any, read: Read, rows: int) -> list[tuple[int, int]]:
    offsets = read(node.inputs["FIRST_TOKEN_OFFSET"]).reshape(-1)
    starts = [int(o) for o in offsets]
    if any(float(o) != s for o, s in zip(offsets, starts)) or starts[0] != 0 or \
            any(b < a for a, b in zip(starts, starts[1:])) or starts[-1] > rows:
        raise InvalidValueError(f"{node.op} node {node.name!r}: first_token_offset {starts} must be integers "
                                f"starting at 0, "
                         f"non-decreasing, at most the {rows} rows")
    return list(zip(starts, starts[1:] + [rows]))


def _indices(node: Any, read: Read, port: str, bound: int) -> np.ndarray:
    """An INT32 per-row input as integers, each in [0, bound)."""
    values = read(node.inputs[port]).reshape(-1)
    ints = values.astype(np.int64)
    if (ints != values).any() or (ints < 0).any() or (ints >= bound).any():
        raise InvalidValueError(f"moe_grouped_matmul node {node.name!r}: {port.lower()} values must be integers in "
                         f"[0, {bound})")
    return ints


def _scatter_slots(node: Any, read: Read, rows: int) -> np.ndarray:
    top_k = int(node.params["top_k"])
    slots = _indices(node, read, "TOKEN_INDEX", rows // top_k) * top_k + _indices(node, read, "TOKEN_KS", top_k)
    if len(np.unique(slots)) != rows:
        raise InvalidValueError(f"moe_grouped_matmul node {node.name!r}: SCATTER slots token_index * top_k + token_ks "
                         f"must reach each of the {rows} output rows once (the GPU leaves a collision or an "
                         "unreached slot unspecified)")
    return slots


@reference("moe_grouped_matmul")
def _forward(node: Any, read: Read) -> np.ndarray:
    token, weight = read(node.inputs["TOKEN"])[0], read(node.inputs["WEIGHT"])
    mode = node.params["mode"]
    rows = np.arange(token.shape[0])
    if mode is moe_grouped_matmul_mode.GATHER:
        rows = _indices(node, read, "TOKEN_INDEX", token.shape[0])
    products = np.zeros((len(rows), weight.shape[2]))
    for e, (start, end) in enumerate(expert_ranges(node, read, len(rows))):
        products[start:end] = token[rows[start:end]] @ weight[e]
    if mode is not moe_grouped_matmul_mode.SCATTER:
        return products[None]
    out = np.empty_like(products)
    out[_scatter_slots(node, read, len(rows))] = products
    return out[None]


@reference("moe_grouped_matmul_bwd")
def _backward(node: Any, read: Read) -> np.ndarray:
    dout, token = read(node.inputs["DOUTPUT"])[0], read(node.inputs["TOKEN"])[0]
    ranges = expert_ranges(node, read, token.shape[0])
    dweight = np.zeros((len(ranges), token.shape[1], dout.shape[1]))
    for e, (start, end) in enumerate(ranges):
        dweight[e] = token[start:end].T @ dout[start:end]
    return dweight
