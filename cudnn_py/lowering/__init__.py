"""IR -> backend descriptors: tensors, the lowering registry and the operation graph; the lowerings themselves are
the families' (``cudnn_py/families/<family>/lowering.py``), imported when :data:`LOWERINGS` is first read.

What is lowered is a :class:`~cudnn_py.ir.program.Program` (the user's graph after the IR passes): every node's
kind picks its lowering from :data:`LOWERINGS` (filled by ``@lowers(kind)`` in the family modules), and
``lower_program`` finalizes the OPERATIONGRAPH over the result.
"""
from __future__ import annotations

from .operation_graph import LoweredGraph, finalize_operation_graph, lower_program
from .registry import LOWERINGS, lowers
from .tensors import TensorTable, host_scalar, lower_tensor, pointer_alignment

__all__ = ["LOWERINGS", "LoweredGraph", "TensorTable", "finalize_operation_graph", "host_scalar", "lower_program",
           "lower_tensor", "lowers", "pointer_alignment"]
