"""IR -> backend descriptors: tensors, one module per op family, and the operation graph.

What is lowered is a :class:`~cudnn_py.ir.program.Program` (the user's graph after the IR passes): every node's
kind picks its lowering from :data:`LOWERINGS` (filled by ``@lowers(kind)`` in the family modules), and
``lower_program`` finalizes the OPERATIONGRAPH over the result.
"""
from __future__ import annotations

from . import (  # noqa: F401  (registration)
    attention,
    conv,
    layout_ops,
    masks,
    matmul,
    moe,
    norms,
    paged_cache,
    pointwise,
    quantize,
    reduction,
    rng,
    rope,
)
from .layout_ops import slice_aliases
from .operation_graph import LoweredGraph, finalize_operation_graph, lower_program
from .registry import LOWERINGS, lowers
from .tensors import TensorTable, host_scalar, lower_tensor, pointer_alignment

__all__ = ["LOWERINGS", "LoweredGraph", "TensorTable", "finalize_operation_graph", "host_scalar", "lower_program",
           "lower_tensor", "lowers", "pointer_alignment", "slice_aliases"]
