"""MoE grouped matmul: per-expert matmuls over the row ranges first_token_offset gives (expert e owns rows
offset[e] .. offset[e+1], the last expert up to the end), with token_index gathering the rows in GATHER mode.
SCATTER (routing weights, top_k) is not modelled: its combination rule is not pinned down against a GPU yet."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...enums import moe_grouped_matmul_mode
from .registry import Read, reference


def expert_ranges(node: Any, read: Read, rows: int) -> list[tuple[int, int]]:
    offsets = read(node.inputs["FIRST_TOKEN_OFFSET"]).reshape(-1)
    starts = [int(o) for o in offsets]
    if any(float(o) != s for o, s in zip(offsets, starts)) or starts[0] != 0 or \
            any(b < a for a, b in zip(starts, starts[1:])) or starts[-1] > rows:
        raise ValueError(f"{node.op} node {node.name!r}: first_token_offset {starts} must be integers starting at 0, "
                         f"non-decreasing, at most the {rows} rows")
    return list(zip(starts, starts[1:] + [rows]))


def _why_not_forward(node: Any) -> str | None:
    if node.params["mode"] is moe_grouped_matmul_mode.SCATTER:
        return "moe_grouped_matmul in SCATTER mode"
    return None


@reference("moe_grouped_matmul", _why_not_forward)
def _forward(node: Any, read: Read) -> np.ndarray:
    token, weight = read(node.inputs["TOKEN"])[0], read(node.inputs["WEIGHT"])
    rows = list(range(token.shape[0]))
    if node.params["mode"] is moe_grouped_matmul_mode.GATHER:
        index = read(node.inputs["TOKEN_INDEX"]).reshape(-1)
        rows = [int(i) for i in index]
        if any(not 0 <= r < token.shape[0] or float(i) != r for i, r in zip(index, rows)):
            raise ValueError(f"moe_grouped_matmul node {node.name!r}: token_index values must be row indices in "
                             f"[0, {token.shape[0]})")
    out = np.zeros((len(rows), weight.shape[2]))
    for e, (start, end) in enumerate(expert_ranges(node, read, len(rows))):
        out[start:end] = token[rows[start:end]] @ weight[e]
    return out[None]


@reference("moe_grouped_matmul_bwd")
def _backward(node: Any, read: Read) -> np.ndarray:
    dout, token = read(node.inputs["DOUTPUT"])[0], read(node.inputs["TOKEN"])[0]
    ranges = expert_ranges(node, read, token.shape[0])
    dweight = np.zeros((len(ranges), token.shape[1], dout.shape[1]))
    for e, (start, end) in enumerate(ranges):
        dweight[e] = token[start:end].T @ dout[start:end]
    return dweight
