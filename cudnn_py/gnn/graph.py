"""``cudnn.gnn.CscGraph``: the graph the GNN operators take, in compressed sparse column form, as tensors."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..errors import InvalidTypeError, InvalidValueError


@dataclass(frozen=True)
class CscGraph:
    """A CSC graph for the cuDNN GNN operations.

    ``offsets`` has shape ``(num_dst_nodes + 1,)`` and ``indices`` ``(num_edges,)``: destination ``j``'s incoming
    edges come from ``indices[offsets[j]:offsets[j + 1]]``. Both are CUDA tensors of one dtype, ``int32`` or
    ``int64``. ``map_csc_to_coo`` (optional) maps each CSC edge position to its row of an edge-feature tensor.
    ``csc_rev_offsets`` and ``map_rev_to_coo`` (optional, together) describe the graph in source-major reverse-CSC
    order, which the deterministic backward needs (:meth:`with_reverse_csc` builds them).
    """

    offsets: torch.Tensor
    indices: torch.Tensor
    num_src_nodes: int
    map_csc_to_coo: torch.Tensor | None = None
    csc_rev_offsets: torch.Tensor | None = None
    map_rev_to_coo: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.num_src_nodes, int):
            raise InvalidTypeError(f"num_src_nodes must be an int, got {type(self.num_src_nodes).__name__}")
        if self.num_src_nodes <= 0:
            raise InvalidValueError(f"num_src_nodes must be positive, got {self.num_src_nodes}")
        if (self.csc_rev_offsets is None) != (self.map_rev_to_coo is None):
            raise InvalidValueError("csc_rev_offsets and map_rev_to_coo must be provided together")

    @property
    def has_reverse_csc(self) -> bool:
        return self.csc_rev_offsets is not None

    def with_reverse_csc(self) -> CscGraph:
        """This graph with the reverse-CSC arrays the deterministic backward needs (built on the graph's device,
        on the current torch stream; a graph that has them is returned as is)."""
        if self.has_reverse_csc:
            return self
        from ._common import validate_csc_graph

        _, num_edges = validate_csc_graph(self.offsets, self.indices, self.map_csc_to_coo, self.num_src_nodes)
        idx = self.indices
        counts = torch.zeros((self.num_src_nodes,), device=idx.device, dtype=idx.dtype)
        counts.scatter_add_(0, idx.long(), torch.ones_like(idx))
        rev_offsets = torch.cat((torch.zeros((1,), device=idx.device, dtype=idx.dtype),
                                 counts.cumsum(dim=0, dtype=idx.dtype)))
        order = torch.argsort(idx, stable=True)  # edges grouped by source, in CSC order within a source
        edge_ids = (torch.arange(num_edges, device=idx.device, dtype=idx.dtype) if self.map_csc_to_coo is None
                    else self.map_csc_to_coo)
        return replace(self, csc_rev_offsets=rev_offsets, map_rev_to_coo=edge_ids[order])

    @property
    def num_dst_nodes(self) -> int:
        if self.offsets.ndim != 1:
            raise InvalidValueError(f"offsets must be rank 1, got shape {tuple(self.offsets.shape)}")
        if self.offsets.numel() == 0:
            raise InvalidValueError("offsets must contain at least one element")
        return self.offsets.numel() - 1

    @property
    def num_edges(self) -> int:
        if self.indices.ndim != 1:
            raise InvalidValueError(f"indices must be rank 1, got shape {tuple(self.indices.shape)}")
        return self.indices.numel()

    @property
    def num_indices(self) -> int:
        return self.num_edges
