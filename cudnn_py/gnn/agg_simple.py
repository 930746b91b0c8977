"""``cudnn.gnn.agg_simple``: sum / mean / max / min aggregation of incoming node and edge features over a CSC graph,
a torch operator (``torch.ops.cudnn_py.gnn_agg_simple_fwd`` / ``_bwd``, the official operator's schema) with
autograd, over ``cudnnGnnAggSimpleForward`` / ``Backward`` (:mod:`cudnn_py.backend.ext_gnn`).

The checks are the official operator's, in its order, with its messages; a cuDNN without the GNN C API refuses at
the call into it (:class:`~cudnn_py.errors.CApiUnavailableError`, a RuntimeError), where the official's binding does.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor  # (imported, not assigned: a type mypy reads where torch is not installed)

from ..backend import ext_gnn
from ..errors import InvalidTypeError, InvalidValueError
from ..ops._library import define
from ._common import TORCH_DTYPE_TO_CUDNN, TORCH_INDEX_DTYPE_TO_CUDNN, contiguous, pointer, stream, validate_csc_graph
from .graph import CscGraph

_AGGREGATION_TO_INT = {"sum": 0, "mean": 1, "max": 2, "min": 3}


def _validate_aggregation(aggr: str) -> None:
    if aggr not in _AGGREGATION_TO_INT:
        raise InvalidValueError(f"Unsupported aggregation '{aggr}'. Supported: {', '.join(_AGGREGATION_TO_INT)}.")


def _validate_graph(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None,
                    num_src_nodes: int) -> tuple[int, int]:
    num_dst_nodes, num_edges = validate_csc_graph(offsets, indices, map_csc_to_coo, num_src_nodes)
    if num_dst_nodes > 0 and num_edges == 0:
        raise InvalidValueError("cuDNN AggSimple does not yet support a nonempty destination set with zero edges")
    return num_dst_nodes, num_edges


def _validate_features(offsets: Tensor, num_src_nodes: int, num_dst_nodes: int, num_edges: int,
                       node_features: Tensor | None, edge_features: Tensor | None,
                       concat_features: Tensor | None) -> tuple[torch.dtype, int, int, int]:
    if node_features is None and edge_features is None:
        raise InvalidValueError("at least one of node_features or edge_features must be provided")
    tensors = [t for t in (node_features, edge_features, concat_features) if t is not None]
    dtype = tensors[0].dtype
    if dtype not in TORCH_DTYPE_TO_CUDNN:
        raise InvalidTypeError(f"feature tensors must have dtype float32, float16, or bfloat16, got {dtype}")
    for t in tensors:
        if t.ndim != 2:
            raise InvalidValueError(f"feature tensors must be rank 2, got shape {tuple(t.shape)}")
        if not t.is_cuda:
            raise InvalidValueError(f"feature tensors must be CUDA tensors, got {t.device}")
        if t.device != offsets.device:
            raise InvalidValueError(f"all graph and feature tensors must be on {offsets.device}, got {t.device}")
        if t.dtype != dtype:
            raise InvalidTypeError(f"all feature tensors must have dtype {dtype}, got {t.dtype}")
    dims = []
    for name, opt, rows in (("node_features", node_features, num_src_nodes),
                            ("edge_features", edge_features, num_edges),
                            ("concat_features", concat_features, num_dst_nodes)):
        if opt is not None and opt.shape[0] != rows:
            raise InvalidValueError(f"{name} must have {rows} rows, got {opt.shape[0]}")
        dims.append(0 if opt is None else opt.shape[1])
    if dims[0] == 0 and dims[1] == 0:
        raise InvalidValueError("node_features and edge_features cannot both have zero feature dimension")
    return dtype, dims[0], dims[1], dims[2]


def _validate_inputs(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, node_features: Tensor | None,
                     edge_features: Tensor | None, concat_features: Tensor | None, num_src_nodes: int,
                     aggr: str) -> tuple[int, int, torch.dtype, int, int, int]:
    _validate_aggregation(aggr)
    num_dst_nodes, num_edges = _validate_graph(offsets, indices, map_csc_to_coo, num_src_nodes)
    dtype, nd, ed, cd = _validate_features(offsets, num_src_nodes, num_dst_nodes, num_edges, node_features,
                                           edge_features, concat_features)
    return num_dst_nodes, num_edges, dtype, nd, ed, cd


def _graph_args(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, num_src_nodes: int,
                num_dst_nodes: int, num_edges: int) -> tuple[int, int, int, int, int, int, int, int]:
    return (stream(offsets.device), offsets.data_ptr(), pointer(indices), pointer(map_csc_to_coo), num_src_nodes,
            num_dst_nodes, num_edges, TORCH_INDEX_DTYPE_TO_CUDNN[offsets.dtype])


def _forward(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, node_features: Tensor | None,
             edge_features: Tensor | None, concat_features: Tensor | None, num_src_nodes: int,
             aggr: str) -> tuple[Tensor, Tensor]:
    num_dst_nodes, num_edges, dtype, nd, ed, cd = _validate_inputs(
        offsets, indices, map_csc_to_coo, node_features, edge_features, concat_features, num_src_nodes, aggr)
    offsets, indices = offsets.contiguous(), indices.contiguous()
    map_csc_to_coo = contiguous(map_csc_to_coo)
    node_features, edge_features, concat_features = (contiguous(node_features), contiguous(edge_features),
                                                     contiguous(concat_features))
    output = torch.empty((num_dst_nodes, nd + ed + cd), device=offsets.device, dtype=dtype)
    positions_shape = (num_dst_nodes, nd + ed) if aggr in ("max", "min") else (0,)
    out_positions = torch.empty(positions_shape, device=offsets.device, dtype=offsets.dtype)
    if num_dst_nodes == 0:
        return output, out_positions
    with torch.cuda.device(offsets.device):
        ext_gnn.gnn_agg_simple_forward(*_graph_args(offsets, indices, map_csc_to_coo, num_src_nodes, num_dst_nodes,
                                                    num_edges),
                                       pointer(node_features), pointer(edge_features), pointer(concat_features),
                                       output.data_ptr(), pointer(out_positions), nd, ed, cd,
                                       TORCH_DTYPE_TO_CUDNN[dtype], _AGGREGATION_TO_INT[aggr])
    return output, out_positions


def _backward(grad_output: Tensor, offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None,
              out_positions: Tensor, num_src_nodes: int, node_feat_dim: int, edge_feat_dim: int,
              concat_feat_dim: int, aggr: str) -> tuple[Tensor, Tensor, Tensor]:
    _validate_aggregation(aggr)
    num_dst_nodes, num_edges = _validate_graph(offsets, indices, map_csc_to_coo, num_src_nodes)
    for name, dim in (("node_feat_dim", node_feat_dim), ("edge_feat_dim", edge_feat_dim),
                      ("concat_feat_dim", concat_feat_dim)):
        if dim < 0:  # the official leaves a negative width to torch.zeros; it would reach cuDNN as a size
            raise InvalidValueError(f"{name} must not be negative, got {dim}")
    expected = (num_dst_nodes, node_feat_dim + edge_feat_dim + concat_feat_dim)
    if tuple(grad_output.shape) != expected:
        raise InvalidValueError(f"grad_output must have shape {expected}, got {tuple(grad_output.shape)}")
    if grad_output.dtype not in TORCH_DTYPE_TO_CUDNN or not grad_output.is_cuda:
        raise InvalidTypeError(f"grad_output must be a CUDA float32, float16, or bfloat16 tensor, got "
                               f"{grad_output.dtype}")
    if grad_output.device != offsets.device:
        raise InvalidValueError(f"grad_output must be on {offsets.device}, got {grad_output.device}")
    if aggr in ("max", "min"):
        want = (num_dst_nodes, node_feat_dim + edge_feat_dim)
        if tuple(out_positions.shape) != want or out_positions.dtype != offsets.dtype:
            raise InvalidValueError(f"out_positions must have shape {want} and dtype {offsets.dtype}, got "
                                    f"{tuple(out_positions.shape)} and {out_positions.dtype}")
        if out_positions.device != offsets.device:  # cuDNN reads it: it must be the graph's device memory
            raise InvalidValueError(f"out_positions must be on {offsets.device}, got {out_positions.device}")
    offsets, indices = offsets.contiguous(), indices.contiguous()
    map_csc_to_coo = contiguous(map_csc_to_coo)
    grad_output, out_positions = grad_output.contiguous(), out_positions.contiguous()
    dev, dt = offsets.device, grad_output.dtype
    if num_dst_nodes == 0:
        return (torch.zeros((num_src_nodes, node_feat_dim), device=dev, dtype=dt),
                torch.empty((num_edges, edge_feat_dim), device=dev, dtype=dt),
                torch.empty((num_dst_nodes, concat_feat_dim), device=dev, dtype=dt))
    # zeroed: the backward accumulates into the node and edge gradients with atomics
    grad_node = torch.zeros((num_src_nodes, node_feat_dim), device=dev, dtype=dt)
    grad_edge = torch.zeros((num_edges, edge_feat_dim), device=dev, dtype=dt)
    grad_concat = torch.zeros((num_dst_nodes, concat_feat_dim), device=dev, dtype=dt)
    with torch.cuda.device(dev):
        ext_gnn.gnn_agg_simple_backward(*_graph_args(offsets, indices, map_csc_to_coo, num_src_nodes, num_dst_nodes,
                                                     num_edges),
                                        grad_output.data_ptr(), pointer(out_positions) if aggr in ("max", "min")
                                        else 0, pointer(grad_node), pointer(grad_edge), pointer(grad_concat),
                                        node_feat_dim, edge_feat_dim, concat_feat_dim, TORCH_DTYPE_TO_CUDNN[dt],
                                        _AGGREGATION_TO_INT[aggr])
    return grad_node, grad_edge, grad_concat


def _fwd_fake(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, node_features: Tensor | None,
              edge_features: Tensor | None, concat_features: Tensor | None, num_src_nodes: int,
              aggr: str) -> tuple[Tensor, Tensor]:
    num_dst_nodes, _, dtype, nd, ed, cd = _validate_inputs(
        offsets, indices, map_csc_to_coo, node_features, edge_features, concat_features, num_src_nodes, aggr)
    output = torch.empty((num_dst_nodes, nd + ed + cd), device=offsets.device, dtype=dtype)
    positions_shape = (num_dst_nodes, nd + ed) if aggr in ("max", "min") else (0,)
    return output, torch.empty(positions_shape, device=offsets.device, dtype=offsets.dtype)


def _bwd_fake(grad_output: Tensor, offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None,
              out_positions: Tensor, num_src_nodes: int, node_feat_dim: int, edge_feat_dim: int,
              concat_feat_dim: int, aggr: str) -> tuple[Tensor, Tensor, Tensor]:
    dev, dt = grad_output.device, grad_output.dtype
    return (torch.empty((num_src_nodes, node_feat_dim), device=dev, dtype=dt),
            torch.empty((indices.numel(), edge_feat_dim), device=dev, dtype=dt),
            torch.empty((offsets.numel() - 1, concat_feat_dim), device=dev, dtype=dt))


_FWD = define("gnn_agg_simple_fwd(Tensor offsets, Tensor indices, Tensor? map_csc_to_coo, Tensor? node_features, "
              "Tensor? edge_features, Tensor? concat_features, int num_src_nodes, str aggr) -> (Tensor, Tensor)",
              _forward, _fwd_fake, exact_strides=False)
_BWD = define("gnn_agg_simple_bwd(Tensor grad_output, Tensor offsets, Tensor indices, Tensor? map_csc_to_coo, "
              "Tensor out_positions, int num_src_nodes, int node_feat_dim, int edge_feat_dim, int concat_feat_dim, "
              "str aggr) -> (Tensor, Tensor, Tensor)", _backward, _bwd_fake, exact_strides=False)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    offsets, indices, map_csc_to_coo, node_features, edge_features, concat_features, num_src_nodes, aggr = inputs
    out_positions = output[1]
    ctx.save_for_backward(offsets, indices, map_csc_to_coo, out_positions)
    ctx.mark_non_differentiable(out_positions)
    ctx.num_src_nodes, ctx.aggr = num_src_nodes, aggr
    ctx.dims = tuple(0 if t is None else t.shape[1] for t in (node_features, edge_features, concat_features))
    ctx.present = tuple(t is not None for t in (node_features, edge_features, concat_features))


def _autograd_backward(ctx: Any, grad_output: Tensor, _grad_positions: Tensor | None) -> tuple[Any, ...]:
    offsets, indices, map_csc_to_coo, out_positions = ctx.saved_tensors
    grads = torch.ops.cudnn_py.gnn_agg_simple_bwd(grad_output, offsets, indices, map_csc_to_coo, out_positions,
                                                  ctx.num_src_nodes, *ctx.dims, ctx.aggr)
    return (None, None, None, *(g if p else None for g, p in zip(grads, ctx.present)), None, None)


torch.library.register_autograd(_FWD, torch.compiler.allow_in_graph(_autograd_backward), setup_context=_setup_context)


def agg_simple(graph: CscGraph, *, node_features: Tensor | None = None, edge_features: Tensor | None = None,
               concat_features: Tensor | None = None, aggr: str = "sum") -> Tensor:
    """Aggregate incoming node and edge features over a CSC graph.

    For each destination node, reduces the features of its incoming source nodes and of its incoming edges (each
    with ``aggr``: ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``), then appends the destination's
    ``concat_features`` unchanged. At least one of ``node_features`` ``(num_src_nodes, node_feat_dim)`` and
    ``edge_features`` ``(num_edges, edge_feat_dim)`` (rows in mapped order when ``graph.map_csc_to_coo`` is set)
    is needed; ``concat_features`` is ``(num_dst_nodes, concat_feat_dim)``.

    Returns ``(num_dst_nodes, node_feat_dim + edge_feat_dim + concat_feat_dim)``: the present groups in that order.
    Every tensor is a CUDA tensor on the graph's device, one dtype of float32, float16 or bfloat16. The backward
    accumulates with atomics, so its result may vary in the last bits from run to run.
    """
    output, _ = torch.ops.cudnn_py.gnn_agg_simple_fwd(graph.offsets, graph.indices, graph.map_csc_to_coo,
                                                      node_features, edge_features, concat_features,
                                                      graph.num_src_nodes, aggr)
    return output
