"""Layout ops, from their definitions: numpy's transpose, concatenate, slicing and (LOGICAL) reshape; a VIEW_ONLY
reshape reads X's memory (X laid out by its strides) through Y's dims and strides."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, reference
from ...enums import reshape_mode
from ...ir import layout


def _offsets(dims: Any, strides: Any) -> np.ndarray:
    """The memory offset (in elements) of every element, in row-major index order."""
    grids = np.indices(tuple(int(d) for d in dims)).reshape(len(dims), -1)
    return (np.asarray([int(s) for s in strides]).reshape(-1, 1) * grids).sum(axis=0)


def _check_reshape(node: Any) -> str | None:
    if node.params["reshape_mode"] is not reshape_mode.VIEW_ONLY:
        return None
    x, y = node.inputs["X"], node.outputs["Y"]
    xo, yo = _offsets(x.dim, x.stride), _offsets(y.dim, y.stride)
    if len(np.unique(xo)) != xo.size or not np.isin(yo, xo).all():
        return (f"the VIEW_ONLY reshape's output (dims {list(y.dim)}, strides {list(y.stride)}) reads memory its "
                f"input (dims {list(x.dim)}, strides {list(x.stride)}) does not hold exactly once")
    return None


@reference("reshape", check=_check_reshape)
def _reshape(node: Any, read: Read) -> np.ndarray:
    x, y = node.inputs["X"], node.outputs["Y"]
    value = read(x)
    if node.params["reshape_mode"] is reshape_mode.LOGICAL:
        return value.reshape(tuple(y.dim))
    return read_through(value, x, y)


def read_through(value: np.ndarray, x: Any, y: Any) -> np.ndarray:
    """A view's value: ``value`` laid out in memory by tensor ``x``'s strides, read through ``y``'s dims and
    strides (a VIEW_ONLY reshape's, and attention's transposed views)."""
    memory = np.zeros(layout.span(x.dim, x.stride))
    memory[_offsets(x.dim, x.stride)] = value.reshape(-1)
    return memory[_offsets(y.dim, y.stride)].reshape(tuple(y.dim))


# After the IR passes (ReferenceEngine(program=True)) tensors may have gained leading unit axes: the axis-indexed
# params, written for the user's rank, are shifted by that padding.

@reference("slice")
def _slice(node: Any, read: Read) -> np.ndarray:
    x = read(node.inputs["X"])
    slices = tuple(node.params["slices"])
    pad = x.ndim - len(node.params["ranges"])
    return x[(slice(None),) * pad + slices]


@reference("transpose")
def _transpose(node: Any, read: Read) -> np.ndarray:
    x = read(node.inputs["X"])
    perm = list(node.params["permutation"])
    pad = x.ndim - len(perm)
    return np.transpose(x, list(range(pad)) + [p + pad for p in perm])


@reference("concatenate")
def _concatenate(node: Any, read: Read) -> np.ndarray:
    xs = [read(t) for t in node.list_input("X")]
    return np.concatenate(xs, axis=node.params["axis"] + xs[0].ndim - node.params["rank"])
