"""Which function lowers which IR node kind: ``@lowers("matmul")`` on a family module's function registers it.

A lowering is ``fn(node, tensors) -> list[Descriptor]``: the finalized operation descriptor(s) of that node, in
execution order; ``tensors(t)`` gives the (shared, finalized) tensor descriptor of IR tensor ``t``. Before a
lowering runs, the catalog features its spec ``requires`` are checked against the running cuDNN.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import InvalidValueError

Lowering = Callable[[Any, Any], list[Any]]
LOWERINGS: dict[str, Lowering] = {}


def lowers(kind: str) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        if kind in LOWERINGS:
            raise InvalidValueError(f"node kind {kind!r} has two lowerings")
        LOWERINGS[kind] = fn
        return fn
    return register
