"""Thin wrappers of ``cudnn_gnn_ops.h`` under the official module's top-level names: the CSC graph aggregation
(``gnn_agg_simple_forward`` / ``_backward``), the GAT and GATv2 multi-head attention (``gnn_mha_gat_forward`` /
``_backward``, ``gnn_mha_gat_v2_forward`` / ``_backward``) and the enums ``gnn_agg_op`` / ``gnn_activation_op``, in
the official bindings' flat argument order and keyword names (the graph's fields spelt out: ``csc_offsets``,
``csc_indices``, ``map_csc_to_coo``, ``n_src_nodes``, ``n_dst_nodes``, ``n_indices``, ``idx_type``).

Every argument is checked first (:mod:`.ext_checks`: pointers non-null where the header requires, NULL exactly where
a dimension is 0, sizes, data and index types, the aggregation), then the function is called from
``libcudnn_ext.so.9`` (:mod:`.ext_loader`, gated on the loaded cuDNN) with a ``cudnnGnnCscGraph_t`` built from the
generated layout (and, for the attention, a ``cudnnGnnMhaParams_t``).
"""
from __future__ import annotations

import ctypes
import enum
import math
from typing import Any

from .._generated.names import DataType
from . import ext_checks as ck
from .ext_loader import GnnCscGraph, GnnMhaParams

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


def csc_graph(fn: str, csc_offsets: Any, csc_indices: Any, map_csc_to_coo: Any, n_src_nodes: Any, n_dst_nodes: Any,
              n_indices: Any, idx_type: Any, *, map_rev_to_coo: Any = 0, csc_rev_offsets: Any = 0) -> Any:
    """A checked ``cudnnGnnCscGraph_t``."""
    n_src = ck.size(fn, "n_src_nodes", n_src_nodes, 0, 2**63 - 1)
    n_dst = ck.size(fn, "n_dst_nodes", n_dst_nodes, 0, 2**63 - 1)
    n_idx = ck.size(fn, "n_indices", n_indices, 0, 2**63 - 1)
    return GnnCscGraph(ck.pointer(fn, "csc_offsets", csc_offsets),
                       ck.pointer(fn, "csc_indices", csc_indices, nullable=n_idx == 0),
                       ck.pointer(fn, "map_csc_to_coo", map_csc_to_coo, nullable=True),
                       ck.pointer(fn, "map_rev_to_coo", map_rev_to_coo, nullable=True), n_src, n_dst, n_idx,
                       ck.data_type(fn, "idx_type", idx_type, INDEX_DATA),
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


def gnn_agg_simple_forward(stream: Any, csc_offsets: Any, csc_indices: Any, map_csc_to_coo: Any, n_src_nodes: int,
                           n_dst_nodes: int, n_indices: int, idx_type: int, node_features: Any,
                           edge_features: Any, concat_features: Any, output: Any, out_positions: Any,
                           node_feat_dim: int, edge_feat_dim: int, concat_feat_dim: int, data_type: int,
                           agg_op: int) -> None:
    """``cudnnGnnAggSimpleForward``: output [n_dst_nodes, node+edge+concat dims], rows [agg node | agg edge |
    concat]; out_positions (idx_type) for MAX/MIN, NULL for SUM/MEAN."""
    fn = "gnn_agg_simple_forward"
    graph = csc_graph(fn, csc_offsets, csc_indices, map_csc_to_coo, n_src_nodes, n_dst_nodes, n_indices, idx_type)
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


def gnn_agg_simple_backward(stream: Any, csc_offsets: Any, csc_indices: Any, map_csc_to_coo: Any, n_src_nodes: int,
                            n_dst_nodes: int, n_indices: int, idx_type: int, grad_output: Any,
                            out_positions: Any, grad_node_features: Any, grad_edge_features: Any,
                            grad_concat_features: Any, node_feat_dim: int, edge_feat_dim: int, concat_feat_dim: int,
                            data_type: int, agg_op: int) -> None:
    """``cudnnGnnAggSimpleBackward``: grad_node_features and grad_edge_features accumulated (zero them first)."""
    fn = "gnn_agg_simple_backward"
    graph = csc_graph(fn, csc_offsets, csc_indices, map_csc_to_coo, n_src_nodes, n_dst_nodes, n_indices, idx_type)
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


# ---- multi-head attention (GAT, GATv2) ------------------------------------------------------------------------------
def _mha_params(fn: str, activation: Any, activation_alpha: Any, num_heads: Any, concat_heads: Any) -> Any:
    act = ck.enum_value(fn, "activation", activation, "cudnnGnnActivationOp_t")
    if isinstance(activation_alpha, bool) or not isinstance(activation_alpha, (int, float)):
        raise ck.InvalidTypeError(f"{fn}: activation_alpha must be a float, got {type(activation_alpha).__name__}")
    if not math.isfinite(activation_alpha):
        raise ck.InvalidValueError(f"{fn}: activation_alpha must be finite, got {activation_alpha}")
    heads = ck.size(fn, "num_heads", num_heads)
    if not isinstance(concat_heads, (bool, int)):
        raise ck.InvalidTypeError(f"{fn}: concat_heads must be a bool, got {type(concat_heads).__name__}")
    return GnnMhaParams(act, float(activation_alpha), heads, int(bool(concat_heads)))


def _float_ptr(fn: str, name: str, value: Any) -> Any:
    """An optional ``const float *`` (the prototype takes a float pointer: NULL is None)."""
    p = ck.pointer(fn, name, value, nullable=True)
    return ctypes.cast(p, ctypes.POINTER(ctypes.c_float)) if p else None


def _head_dims(fn: str, dim_node: Any, dim_edge: Any, heads: int, *, v2: bool) -> tuple[int, int]:
    dn = ck.size(fn, "dim_node", dim_node)
    if dn % heads:
        raise ck.InvalidValueError(f"{fn}: dim_node ({dn}) must be a multiple of num_heads ({heads})")
    de = ck.size(fn, "dim_edge", dim_edge, 0) if not v2 else 0
    if de % heads:
        raise ck.InvalidValueError(f"{fn}: dim_edge ({de}) must be a multiple of num_heads ({heads})")
    if not v2 and 2 * dn + de > ck.INT_MAX:
        raise ck.InvalidValueError(f"{fn}: 2 * dim_node + dim_edge must fit a C int")
    return dn, de


def _grad_type(fn: str, name: str, value: Any, data_type: int) -> int:
    v = ck.data_type(fn, name, value, GNN_DATA)
    if v != data_type and ck.data_name(v) != DataType.FLOAT:
        raise ck.InvalidValueError(f"{fn}: {name} must be data_type ({ck.data_name(data_type)}) or "
                                   f"{DataType.FLOAT}, got {ck.data_name(v)}")
    return v


def _deterministic(fn: str, graph: Any, wspace_feat: Any, wspace_weights: Any) -> tuple[int, int]:
    """Both workspaces or neither; both, only with the reversed-CSC arrays (the header: one NULL is an error)."""
    wf = ck.pointer(fn, "grad_workspace_features", wspace_feat, nullable=True)
    ww = ck.pointer(fn, "grad_workspace_weights", wspace_weights, nullable=True)
    if (wf == 0) != (ww == 0):
        raise ck.InvalidValueError(f"{fn}: grad_workspace_features and grad_workspace_weights must both be given "
                                   "(deterministic backward) or both be NULL")
    if wf and not (graph.cscRevOffsets and graph.mapRevToCoo):
        raise ck.InvalidValueError(f"{fn}: the deterministic backward (workspaces given) needs csc_rev_offsets and "
                                   "map_rev_to_coo")
    return wf, ww


def _mha_head(fn: str, stream: Any, csc_offsets: Any, csc_indices: Any, map_csc_to_coo: Any, n_src_nodes: Any,
              n_dst_nodes: Any, n_indices: Any, idx_type: Any, **rev: Any) -> tuple[int, Any]:
    graph = csc_graph(fn, csc_offsets, csc_indices, map_csc_to_coo, n_src_nodes, n_dst_nodes, n_indices, idx_type,
                      **rev)
    if graph.nDstNodes == 0 or graph.nIndices == 0:
        raise ck.InvalidValueError(f"{fn}: the graph must have destination nodes and edges (n_dst_nodes="
                                   f"{graph.nDstNodes}, n_indices={graph.nIndices})")
    return ck.stream(fn, stream), graph


def gnn_mha_gat_forward(stream: Any, csc_offsets: Any, csc_indices: Any, map_csc_to_coo: Any, n_src_nodes: int,
                        n_dst_nodes: int, n_indices: int, idx_type: int, src_features: Any, dst_features: Any,
                        edge_features: Any, attn_weights: Any, dropout_mask: Any, output: Any, sm_scores: Any,
                        dim_node: int, dim_edge: int, activation: int, activation_alpha: float, num_heads: int,
                        concat_heads: bool, data_type: int) -> None:
    """``cudnnGnnMhaGatForward``: output [n_dst_nodes, concat_heads ? dim_node : dim_node / num_heads]; sm_scores
    float [2, num_heads, n_indices] (logits, then the softmax); attn_weights [2 * dim_node + dim_edge]."""
    fn = "gnn_mha_gat_forward"
    s, graph = _mha_head(fn, stream, csc_offsets, csc_indices, map_csc_to_coo, n_src_nodes, n_dst_nodes, n_indices,
                         idx_type)
    params = _mha_params(fn, activation, activation_alpha, num_heads, concat_heads)
    dn, de = _head_dims(fn, dim_node, dim_edge, params.numHeads, v2=False)
    args = (s, ctypes.byref(graph), ck.pointer(fn, "src_features", src_features),
            ck.pointer(fn, "dst_features", dst_features), _null_iff_zero(fn, "edge_features", edge_features, de,
                                                                         "dim_edge"),
            ck.pointer(fn, "attn_weights", attn_weights), _float_ptr(fn, "dropout_mask", dropout_mask),
            ck.pointer(fn, "output", output), ck.pointer(fn, "sm_scores", sm_scores), dn, de, ctypes.byref(params),
            ck.data_type(fn, "data_type", data_type, GNN_DATA))
    ck.call("cudnnGnnMhaGatForward", *args)


def gnn_mha_gat_backward(stream: Any, csc_offsets: Any, csc_indices: Any, map_csc_to_coo: Any, n_src_nodes: int,
                         n_dst_nodes: int, n_indices: int, idx_type: int, grad_output: Any, src_features: Any,
                         dst_features: Any, edge_features: Any, attn_weights: Any, sm_scores: Any, dropout_mask: Any,
                         grad_attention: Any, grad_src_features: Any, grad_dst_features: Any,
                         grad_edge_features: Any, grad_weights: Any, grad_sm_scores: Any, dim_node: int,
                         dim_edge: int, activation: int, activation_alpha: float, num_heads: int, concat_heads: bool,
                         data_type: int, csc_rev_offsets: Any, map_rev_to_coo: Any, grad_workspace_features: Any,
                         grad_workspace_weights: Any, grad_data_type: int, grad_weight_type: int) -> None:
    """``cudnnGnnMhaGatBackward``: every gradient written (no zeroing needed); the workspaces (deterministic
    backward) both given, with csc_rev_offsets and map_rev_to_coo, or both NULL."""
    fn = "gnn_mha_gat_backward"
    s, graph = _mha_head(fn, stream, csc_offsets, csc_indices, map_csc_to_coo, n_src_nodes, n_dst_nodes, n_indices,
                         idx_type, csc_rev_offsets=csc_rev_offsets, map_rev_to_coo=map_rev_to_coo)
    params = _mha_params(fn, activation, activation_alpha, num_heads, concat_heads)
    dn, de = _head_dims(fn, dim_node, dim_edge, params.numHeads, v2=False)
    dt = ck.data_type(fn, "data_type", data_type, GNN_DATA)
    wf, ww = _deterministic(fn, graph, grad_workspace_features, grad_workspace_weights)
    args = (s, ctypes.byref(graph), ck.pointer(fn, "grad_output", grad_output),
            ck.pointer(fn, "src_features", src_features), ck.pointer(fn, "dst_features", dst_features),
            _null_iff_zero(fn, "edge_features", edge_features, de, "dim_edge"),
            ck.pointer(fn, "attn_weights", attn_weights), ck.pointer(fn, "sm_scores", sm_scores),
            _float_ptr(fn, "dropout_mask", dropout_mask), _float_ptr(fn, "grad_attention", grad_attention),
            ck.pointer(fn, "grad_src_features", grad_src_features),
            ck.pointer(fn, "grad_dst_features", grad_dst_features),
            _null_iff_zero(fn, "grad_edge_features", grad_edge_features, de, "dim_edge"),
            ck.pointer(fn, "grad_weights", grad_weights), ck.pointer(fn, "grad_sm_scores", grad_sm_scores), wf, ww,
            dn, de, ctypes.byref(params), dt, _grad_type(fn, "grad_data_type", grad_data_type, dt),
            _grad_type(fn, "grad_weight_type", grad_weight_type, dt))
    ck.call("cudnnGnnMhaGatBackward", *args)


def _edge_pair(fn: str, edge: Any, grad_edge: Any | None) -> tuple[int, int]:
    """GATv2's optional edge features (and their gradient): both given or both NULL."""
    e = ck.pointer(fn, "edge_features", edge, nullable=True)
    if grad_edge is None:
        return e, 0
    g = ck.pointer(fn, "grad_edge_features", grad_edge, nullable=True)
    if (e == 0) != (g == 0):
        raise ck.InvalidValueError(f"{fn}: grad_edge_features must be NULL exactly when edge_features is NULL")
    return e, g


def gnn_mha_gat_v2_forward(stream: Any, csc_offsets: Any, csc_indices: Any, map_csc_to_coo: Any, n_src_nodes: int,
                           n_dst_nodes: int, n_indices: int, idx_type: int, src_features: Any, dst_features: Any,
                           edge_features: Any, attn_weights: Any, dropout_mask: Any, output: Any, sm_scores: Any,
                           act_scores: Any, dim_node: int, activation: int, activation_alpha: float, num_heads: int,
                           concat_heads: bool, data_type: int) -> None:
    """``cudnnGnnMhaGatV2Forward``: as :func:`gnn_mha_gat_forward` with edge features (optional) [n_indices,
    dim_node], attn_weights [dim_node], and act_scores [n_indices, dim_node] saved for the backward."""
    fn = "gnn_mha_gat_v2_forward"
    s, graph = _mha_head(fn, stream, csc_offsets, csc_indices, map_csc_to_coo, n_src_nodes, n_dst_nodes, n_indices,
                         idx_type)
    params = _mha_params(fn, activation, activation_alpha, num_heads, concat_heads)
    dn, _ = _head_dims(fn, dim_node, 0, params.numHeads, v2=True)
    args = (s, ctypes.byref(graph), ck.pointer(fn, "src_features", src_features),
            ck.pointer(fn, "dst_features", dst_features), _edge_pair(fn, edge_features, None)[0],
            ck.pointer(fn, "attn_weights", attn_weights), _float_ptr(fn, "dropout_mask", dropout_mask),
            ck.pointer(fn, "output", output), ck.pointer(fn, "sm_scores", sm_scores),
            ck.pointer(fn, "act_scores", act_scores), dn, ctypes.byref(params),
            ck.data_type(fn, "data_type", data_type, GNN_DATA))
    ck.call("cudnnGnnMhaGatV2Forward", *args)


def gnn_mha_gat_v2_backward(stream: Any, csc_offsets: Any, csc_indices: Any, map_csc_to_coo: Any, n_src_nodes: int,
                            n_dst_nodes: int, n_indices: int, idx_type: int, grad_output: Any, src_features: Any,
                            dst_features: Any, edge_features: Any, attn_weights: Any, sm_scores: Any,
                            act_scores: Any, dropout_mask: Any, grad_attention: Any, grad_src_features: Any,
                            grad_dst_features: Any, grad_edge_features: Any, grad_weights: Any, grad_sm_scores: Any,
                            dim_node: int, activation: int, activation_alpha: float, num_heads: int,
                            concat_heads: bool, data_type: int, csc_rev_offsets: Any, map_rev_to_coo: Any,
                            grad_workspace_features: Any, grad_workspace_weights: Any, grad_type: int) -> None:
    """``cudnnGnnMhaGatV2Backward``: one gradient type for every gradient and workspace (data_type or FLOAT)."""
    fn = "gnn_mha_gat_v2_backward"
    s, graph = _mha_head(fn, stream, csc_offsets, csc_indices, map_csc_to_coo, n_src_nodes, n_dst_nodes, n_indices,
                         idx_type, csc_rev_offsets=csc_rev_offsets, map_rev_to_coo=map_rev_to_coo)
    params = _mha_params(fn, activation, activation_alpha, num_heads, concat_heads)
    dn, _ = _head_dims(fn, dim_node, 0, params.numHeads, v2=True)
    dt = ck.data_type(fn, "data_type", data_type, GNN_DATA)
    wf, ww = _deterministic(fn, graph, grad_workspace_features, grad_workspace_weights)
    edge, grad_edge = _edge_pair(fn, edge_features, grad_edge_features)
    args = (s, ctypes.byref(graph), ck.pointer(fn, "grad_output", grad_output),
            ck.pointer(fn, "src_features", src_features), ck.pointer(fn, "dst_features", dst_features), edge,
            ck.pointer(fn, "attn_weights", attn_weights), ck.pointer(fn, "sm_scores", sm_scores),
            ck.pointer(fn, "act_scores", act_scores), _float_ptr(fn, "dropout_mask", dropout_mask),
            _float_ptr(fn, "grad_attention", grad_attention), ck.pointer(fn, "grad_src_features", grad_src_features),
            ck.pointer(fn, "grad_dst_features", grad_dst_features), grad_edge,
            ck.pointer(fn, "grad_weights", grad_weights, nullable=True),
            ck.pointer(fn, "grad_sm_scores", grad_sm_scores), wf, ww, dn, ctypes.byref(params), dt,
            _grad_type(fn, "grad_type", grad_type, dt))
    ck.call("cudnnGnnMhaGatV2Backward", *args)


__all__ = ["gnn_agg_op", "gnn_activation_op", "gnn_agg_simple_forward", "gnn_agg_simple_backward", "csc_graph",
           "gnn_mha_gat_forward", "gnn_mha_gat_backward", "gnn_mha_gat_v2_forward", "gnn_mha_gat_v2_backward"]
