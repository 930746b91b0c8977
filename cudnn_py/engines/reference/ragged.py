"""Ragged (packed, THD) tensors in the reference engine. A ragged tensor's batch b starts at element
``offset[b]`` of its buffer (the offsets are in elements, times the tensor's ragged-offset multiplier) and owns the
elements up to ``offset[b + 1]``; inside a batch the other axes follow the tensor's strides (its batch stride is
not used). Rows past a batch's end belong to the next batch: they read as 0 and are never written."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidValueError


def _indices(t: Any, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The flat buffer index of every element of ``t`` and whether it lies inside its own batch."""
    dims, strides = [int(d) for d in t.dim], [int(s) for s in t.stride]
    b = dims[0]
    if offsets.size != b + 1:
        raise InvalidValueError(f"ragged tensor {t.name!r}: {offsets.size} offsets for {b} batches (needs b + 1)")
    inner = np.zeros(dims[1:], dtype=np.int64)
    for axis, (d, s) in enumerate(zip(dims[1:], strides[1:])):
        shape = [1] * (len(dims) - 1)
        shape[axis] = d
        inner = inner + (np.arange(d, dtype=np.int64) * s).reshape(shape)
    starts = offsets[:-1].astype(np.int64).reshape([b] + [1] * (len(dims) - 1))
    ends = offsets[1:].astype(np.int64).reshape(starts.shape)
    index = starts + inner
    return index, (index >= starts) & (index < ends)


def gather(buffer: np.ndarray, t: Any, offsets: np.ndarray) -> np.ndarray:
    flat = np.asarray(buffer, dtype=np.float64).reshape(-1)
    index, inside = _indices(t, offsets)
    inside &= index < flat.size
    out = np.zeros(index.shape)
    out[inside] = flat[index[inside]]
    return out


def scatter(flat: np.ndarray, value: np.ndarray, t: Any, offsets: np.ndarray) -> None:
    index, inside = _indices(t, offsets)
    if inside.any() and int(index[inside].max()) >= flat.size:
        raise InvalidValueError(f"ragged tensor {t.name!r}: its offsets reach element {int(index[inside].max())}, "
                                f"past the "
                         f"{flat.size} of its buffer")
    flat[index[inside]] = np.broadcast_to(value, index.shape)[inside]
