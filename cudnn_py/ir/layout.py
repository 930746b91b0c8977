"""Dims and strides: the frontend's stride helpers (``graph_helpers.h`` of the official frontend) and
NumPy-style broadcasting, shared by inference, the passes and the reference engine."""
from __future__ import annotations

from collections.abc import Sequence


def row_major_strides(dim: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for d in reversed(list(dim)):
        strides.append(acc)
        acc *= max(int(d), 1)
    return strides[::-1]


def pointer_alignment(ptr: int, cap: int = 16) -> int:
    """The largest power of two (<= cap) dividing ``ptr`` (a byte address or offset)."""
    if ptr == 0:
        return cap
    a = 1
    while a < cap and ptr % (a * 2) == 0:
        a *= 2
    return a


def span(dim: Sequence[int], stride: Sequence[int]) -> int:
    """The elements a strided tensor reaches, from its first to its last (1 + the largest offset)."""
    last = 0
    for d, s in zip(dim, stride):  # (a loop, not sum() of a generator: validate calls this for every tensor)
        last += (int(d) - 1) * int(s)
    return last + 1


def strides_from_order(dim: Sequence[int], order: Sequence[int]) -> list[int]:
    """Dense strides where axis with the smallest order value is fastest (generate_stride)."""
    strides = [0] * len(dim)
    acc = 1
    for axis in sorted(range(len(dim)), key=lambda a: order[a]):
        strides[axis] = acc
        acc *= max(int(dim[axis]), 1)
    return strides


def nhwc_order(rank: int) -> list[int]:
    """Channels-last: axis 1 fastest, then axes rank-1 .. 2, then axis 0 (generate_NHWC_stride_order)."""
    if rank < 3:
        return list(range(rank - 1, -1, -1))  # row-major for rank 1 and 2
    order = [0] * rank
    order[1] = 0
    for i, axis in enumerate(range(rank - 1, 1, -1)):
        order[axis] = i + 1
    order[0] = rank - 1
    return order


def nhwc_strides(dim: Sequence[int]) -> list[int]:
    """Dense channels-last strides (NHWC, NDHWC; row-major below rank 3), the frontend's default for conv outputs."""
    return strides_from_order(dim, nhwc_order(len(dim)))


def order_preserving_format(in_stride: Sequence[int], out_rank: int) -> list[int]:
    """Rank input axes by ascending stride; extra output axes come after (generate_stride_order_preserving_format).
    Equal strides (size-1 axes) tie-break towards the later axis being faster, as row-major would; the C++ sort
    is unstable there, so any choice is valid."""
    n = len(in_stride)
    ranked = sorted(range(n), key=lambda a: (in_stride[a], -a))
    order = [0] * out_rank
    for rank, axis in enumerate(ranked):
        if axis < out_rank:
            order[axis] = rank
    for extra in range(n, out_rank):
        order[extra] = extra
    return order


def broadcast(shapes: Sequence[Sequence[int]]) -> list[int] | None:
    """NumPy right-aligned broadcast; None when the shapes do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, start=rank - len(s)):
            if d == out[i] or d == 1:
                continue
            if out[i] != 1:
                return None
            out[i] = d
    return out


def broadcastable_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    if len(shape) > len(target):
        return False
    return all(d in (1, t) for d, t in zip(reversed(list(shape)), reversed(list(target))))


def is_dense(dim: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether the elements fill one block without gaps or overlaps, in some order of the axes (row-major, BSHD
    stored as BHSD, channels-last, ...): sorted by stride, each axis of size > 1 steps over the ones inside it."""
    step = 1
    for s, d in sorted((int(s), int(d)) for d, s in zip(dim, stride) if int(d) > 1):
        if s != step:
            return False
        step *= d
    return True


def numel(dim: Sequence[int]) -> int:
    n = 1
    for d in dim:
        n *= int(d)
    return n
