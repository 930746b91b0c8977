"""What the GNN operators share: the torch -> cuDNN data-type maps, the CSC graph's checks (the official operators'
checks, their messages and exception classes, in their order), and how a C-API call gets its stream and pointers.

Importing this module imports torch.
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import InvalidTypeError, InvalidValueError
from ..ops._conv1d_common import stream  # noqa: F401  (the C-API operators' one current-stream read)

# cudnnDataType_t values of the feature and index dtypes the GNN C API takes
TORCH_DTYPE_TO_CUDNN = {torch.float32: 0, torch.float16: 2, torch.bfloat16: 9}
TORCH_INDEX_DTYPE_TO_CUDNN = {torch.int32: 4, torch.int64: 10}


def validate_csc_graph(offsets: torch.Tensor, indices: torch.Tensor, map_csc_to_coo: torch.Tensor | None,
                       num_src_nodes: Any, csc_rev_offsets: torch.Tensor | None = None,
                       map_rev_to_coo: torch.Tensor | None = None) -> tuple[int, int]:
    """The CSC tensors' shared invariants; returns (destination count, edge count). An operator's own limits (a
    nonempty destination set with no edges) are its caller's to check."""
    if offsets.ndim != 1:
        raise InvalidValueError(f"offsets must be rank 1, got shape {tuple(offsets.shape)}")
    if indices.ndim != 1:
        raise InvalidValueError(f"indices must be rank 1, got shape {tuple(indices.shape)}")
    if offsets.numel() == 0:
        raise InvalidValueError("offsets must contain at least one element")
    if offsets.dtype not in TORCH_INDEX_DTYPE_TO_CUDNN:
        raise InvalidTypeError(f"offsets must have dtype int32 or int64, got {offsets.dtype}")
    if indices.dtype != offsets.dtype:
        raise InvalidTypeError(f"indices dtype {indices.dtype} must match offsets dtype {offsets.dtype}")
    if not offsets.is_cuda or not indices.is_cuda:
        raise InvalidValueError(f"offsets and indices must be CUDA tensors, got {offsets.device} and {indices.device}")
    if offsets.device != indices.device:
        raise InvalidValueError(f"offsets and indices must be on the same device, got {offsets.device} and "
                                f"{indices.device}")
    if not isinstance(num_src_nodes, int):
        raise InvalidTypeError(f"num_src_nodes must be an int, got {type(num_src_nodes).__name__}")
    if num_src_nodes <= 0:
        raise InvalidValueError(f"num_src_nodes must be positive, got {num_src_nodes}")

    num_dst_nodes, num_edges = offsets.numel() - 1, indices.numel()
    if num_dst_nodes == 0 and num_edges != 0:
        raise InvalidValueError("a graph with zero destination nodes cannot contain edges")
    if map_csc_to_coo is not None:
        _same_as_offsets("map_csc_to_coo", map_csc_to_coo, (num_edges,), offsets, shape_first=True)
    if (csc_rev_offsets is None) != (map_rev_to_coo is None):
        raise InvalidValueError("csc_rev_offsets and map_rev_to_coo must be provided together")
    if csc_rev_offsets is not None and map_rev_to_coo is not None:
        _same_as_offsets("csc_rev_offsets", csc_rev_offsets, (num_src_nodes + 1,), offsets)
        _same_as_offsets("map_rev_to_coo", map_rev_to_coo, (num_edges,), offsets)
    return num_dst_nodes, num_edges


def _same_as_offsets(name: str, t: torch.Tensor, shape: tuple[int, ...], offsets: torch.Tensor, *,
                     shape_first: bool = False) -> None:
    """An index array of ``shape`` with the offsets' dtype and device (the official's message for each)."""
    if shape_first:  # map_csc_to_coo: rank and length in one message
        if t.ndim != 1 or t.numel() != shape[0]:
            raise InvalidValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    elif tuple(t.shape) != shape:
        raise InvalidValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    if t.dtype != offsets.dtype:
        raise InvalidTypeError(f"{name} dtype {t.dtype} must match offsets dtype {offsets.dtype}")
    if t.device != offsets.device:
        raise InvalidValueError(f"{name} must be on {offsets.device}, got {t.device}")


def pointer(t: torch.Tensor | None) -> int:
    """A tensor's device address, NULL (0) for None or an empty tensor (cuDNN takes NULL for an absent operand)."""
    return 0 if t is None or t.numel() == 0 else t.data_ptr()


def contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.contiguous()
