"""IR → backend descriptors: tensors, one module per op family, and the operation graph.

Each op-family module exposes ``lower(node, tensors: TensorTable) -> list[Descriptor]`` returning the finalized
operation descriptor(s) of that node, in execution order. ``lower_graph`` walks the IR nodes in creation order
(a topological order) and finalizes the OPERATIONGRAPH.
"""
from __future__ import annotations

from typing import Callable

from . import matmul, pointwise, reduction
from .operation_graph import LoweredGraph, lower_graph
from .tensors import TensorTable, lower_tensor

LOWERINGS: dict[str, Callable] = {
    "matmul": matmul.lower,
    "pointwise": pointwise.lower,
    "reduction": reduction.lower,
}

__all__ = ["LOWERINGS", "LoweredGraph", "lower_graph", "TensorTable", "lower_tensor"]
