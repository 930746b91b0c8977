"""Thin wrappers of ``cudnn_gnn_ops.h`` under the official module's top-level names: the CSC graph aggregation
(``gnn_agg_simple_forward`` / ``_backward``, the official's flat argument order: the graph's fields spelt out) and
the enums ``gnn_agg_op`` / ``gnn_activation_op``.

Every argument is checked first (:mod:`.ext_checks`: pointers non-null where the header requires, NULL exactly where
a dimension is 0, sizes, data and index types, the aggregation), then the function is called from
``libcudnn_ext.so.9`` (:mod:`.ext_loader`, gated on the loaded cuDNN) with a ``cudnnGnnCscGraph_t`` built from the
generated layout. The multi-head attention functions (``cudnnGnnMhaGat*``) are bound and gated
(``ext_loader.function``) but have no checked wrapper yet.
"""
from __future__ import annotations

import ctypes
import enum
from typing import Any

from .._generated.names import DataType
from . import ext_checks as ck
from .ext_loader import GnnCscGraph

GNN_DATA = (DataType.FLOAT, DataType.HALF, DataType.BFLOAT16)
INDEX_DATA = (DataType.INT32, DataType.INT64)


class gnn_agg_op(enum.IntEnum):
    """``cudnnGnnAggOp_t``."""

    SUM = 0
    MEAN = 1
    MAX = 2
    MIN = 3


class gnn_activation_op(enum.IntEnum):
    """``cudnnGnnActivationOp_t``."""

    LINEAR = 0
    RELU = 1
    SIGMOID = 2
    TANH = 3
    ELU = 4
    SCALAR = 5
    LEAKY_RELU = 6


def csc_graph(fn: str, offsets: Any, indices: Any, map_csc_to_coo: Any, num_src_nodes: Any, num_dst_nodes: Any,
              num_indices: Any, index_type: Any, *, map_rev_to_coo: Any = 0, csc_rev_offsets: Any = 0) -> Any:
    """A checked ``cudnnGnnCscGraph_t``."""
    n_src = ck.size(fn, "num_src_nodes", num_src_nodes, 0, 2**63 - 1)
    n_dst = ck.size(fn, "num_dst_nodes", num_dst_nodes, 0, 2**63 - 1)
    n_idx = ck.size(fn, "num_indices", num_indices, 0, 2**63 - 1)
    return GnnCscGraph(ck.pointer(fn, "offsets", offsets), ck.pointer(fn, "indices", indices, nullable=n_idx == 0),
                       ck.pointer(fn, "map_csc_to_coo", map_csc_to_coo, nullable=True),
                       ck.pointer(fn, "map_rev_to_coo", map_rev_to_coo, nullable=True), n_src, n_dst, n_idx,
                       ck.data_type(fn, "index_type", index_type, INDEX_DATA),
                       ck.pointer(fn, "csc_rev_offsets", csc_rev_offsets, nullable=True))


def _null_iff_zero(fn: str, name: str, value: Any, dim: int, dim_name: str) -> int:
    p = ck.pointer(fn, name, value, nullable=True)
    if (p == 0) != (dim == 0):
        raise ck.InvalidValueError(f"{fn}: {name} must be NULL exactly when {dim_name} is 0 "
                                   f"({dim_name}={dim}, {name}={'NULL' if p == 0 else hex(p)})")
    return p


def _dims(fn: str, node_feat_dim: Any, edge_feat_dim: Any, concat_feat_dim: Any) -> tuple[int, int, int]:
    dims = (ck.size(fn, "node_feat_dim", node_feat_dim, 0), ck.size(fn, "edge_feat_dim", edge_feat_dim, 0),
            ck.size(fn, "concat_feat_dim", concat_feat_dim, 0))
    if dims[0] == 0 and dims[1] == 0:
        raise ck.InvalidValueError(f"{fn}: at least one of node_feat_dim and edge_feat_dim must be > 0")
    if sum(dims) > ck.INT_MAX:
        raise ck.InvalidValueError(f"{fn}: node_feat_dim + edge_feat_dim + concat_feat_dim must fit a C int")
    return dims


def _positions(fn: str, name: str, value: Any, agg: int) -> int:
    needs = agg in (gnn_agg_op.MAX, gnn_agg_op.MIN)
    p = ck.pointer(fn, name, value, nullable=True)
    if needs and p == 0:
        raise ck.InvalidValueError(f"{fn}: {name} must not be NULL for MAX/MIN aggregation")
    if not needs and p != 0:
        raise ck.InvalidValueError(f"{fn}: {name} must be NULL (0) for SUM/MEAN aggregation")
    return p


def gnn_agg_simple_forward(stream: Any, offsets: Any, indices: Any, map_csc_to_coo: Any, num_src_nodes: int,
                           num_dst_nodes: int, num_indices: int, index_type: int, node_features: Any,
                           edge_features: Any, concat_features: Any, output: Any, out_positions: Any,
                           node_feat_dim: int, edge_feat_dim: int, concat_feat_dim: int, data_type: int,
                           agg_op: int) -> None:
    """``cudnnGnnAggSimpleForward``: output [num_dst_nodes, node+edge+concat dims], rows [agg node | agg edge |
    concat]; out_positions (index_type) for MAX/MIN, NULL for SUM/MEAN."""
    fn = "gnn_agg_simple_forward"
    graph = csc_graph(fn, offsets, indices, map_csc_to_coo, num_src_nodes, num_dst_nodes, num_indices, index_type)
    nd, ed, cd = _dims(fn, node_feat_dim, edge_feat_dim, concat_feat_dim)
    agg = ck.enum_value(fn, "agg_op", agg_op, "cudnnGnnAggOp_t")
    args = (ck.stream(fn, stream), ctypes.byref(graph), _null_iff_zero(fn, "node_features", node_features, nd,
                                                                       "node_feat_dim"),
            _null_iff_zero(fn, "edge_features", edge_features, ed, "edge_feat_dim"),
            _null_iff_zero(fn, "concat_features", concat_features, cd, "concat_feat_dim"),
            ck.pointer(fn, "output", output, nullable=graph.nDstNodes == 0),
            _positions(fn, "out_positions", out_positions, agg), nd, ed, cd,
            ck.data_type(fn, "data_type", data_type, GNN_DATA), agg)
    ck.call("cudnnGnnAggSimpleForward", *args)


def gnn_agg_simple_backward(stream: Any, offsets: Any, indices: Any, map_csc_to_coo: Any, num_src_nodes: int,
                            num_dst_nodes: int, num_indices: int, index_type: int, grad_output: Any,
                            out_positions: Any, grad_node_features: Any, grad_edge_features: Any,
                            grad_concat_features: Any, node_feat_dim: int, edge_feat_dim: int, concat_feat_dim: int,
                            data_type: int, agg_op: int) -> None:
    """``cudnnGnnAggSimpleBackward``: grad_node_features and grad_edge_features accumulated (zero them first)."""
    fn = "gnn_agg_simple_backward"
    graph = csc_graph(fn, offsets, indices, map_csc_to_coo, num_src_nodes, num_dst_nodes, num_indices, index_type)
    nd, ed, cd = _dims(fn, node_feat_dim, edge_feat_dim, concat_feat_dim)
    agg = ck.enum_value(fn, "agg_op", agg_op, "cudnnGnnAggOp_t")
    args = (ck.stream(fn, stream), ctypes.byref(graph),
            ck.pointer(fn, "grad_output", grad_output, nullable=graph.nDstNodes == 0),
            _positions(fn, "out_positions", out_positions, agg),
            _null_iff_zero(fn, "grad_node_features", grad_node_features, nd, "node_feat_dim"),
            _null_iff_zero(fn, "grad_edge_features", grad_edge_features, ed, "edge_feat_dim"),
            _null_iff_zero(fn, "grad_concat_features", grad_concat_features, cd, "concat_feat_dim"), nd, ed, cd,
            ck.data_type(fn, "data_type", data_type, GNN_DATA), agg)
    ck.call("cudnnGnnAggSimpleBackward", *args)


__all__ = ["gnn_agg_op", "gnn_activation_op", "gnn_agg_simple_forward", "gnn_agg_simple_backward", "csc_graph"]
