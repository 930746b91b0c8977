"""Which function lowers which IR node kind: ``@lowers("matmul")`` on a family module's function registers it.

A lowering is ``fn(node, tensors) -> list[Descriptor]``: the finalized operation descriptor(s) of that node, in
execution order; ``tensors(t)`` gives the (shared, finalized) tensor descriptor of IR tensor ``t``. Before a
lowering runs, the catalog features its spec ``requires`` are checked against the running cuDNN.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..registry import LOWERING, Registry

Lowering = Callable[[Any, Any], list[Any]]
# node kind -> its lowering; the families' lowering modules fill it on first read (cudnn_py/registry.py)
LOWERINGS: Registry[Lowering] = Registry(LOWERING, "lowering")


def lowers(kind: str) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        LOWERINGS.add(kind, fn)
        return fn
    return register
