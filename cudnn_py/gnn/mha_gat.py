"""``cudnn.gnn.mha_gat``: GAT multi-head attention over a homogeneous or bipartite CSC graph, a torch operator
(``torch.ops.cudnn_py.gnn_mha_gat_fwd`` / ``_bwd``, the official operator's schema) with autograd, over
``cudnnGnnMhaGatForward`` / ``Backward`` (:mod:`cudnn_py.backend.ext_gnn`).

The checks are the official operator's, in its order, with its messages (:mod:`._mha`); a cuDNN without the GNN C
API refuses at the call into it (:class:`~cudnn_py.errors.CApiUnavailableError`, a RuntimeError).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor  # (imported, not assigned: a type mypy reads where torch is not installed)

from ..backend import ext_gnn
from ..errors import InvalidValueError
from ..ops._library import define
from . import _mha as m
from ._common import TORCH_DTYPE_TO_CUDNN, TORCH_INDEX_DTYPE_TO_CUDNN, contiguous, pointer, stream
from .graph import CscGraph


def _gradient_dtypes(input_dtype: torch.dtype, feature_grad_dtype: Any,
                     weight_grad_dtype: Any) -> tuple[torch.dtype, torch.dtype]:
    feature_grad_dtype = m.validate_gradient_dtype("feature_grad_dtype", feature_grad_dtype, input_dtype)
    weight_grad_dtype = m.validate_gradient_dtype("weight_grad_dtype", weight_grad_dtype, input_dtype)
    if feature_grad_dtype == torch.float32 and weight_grad_dtype != torch.float32:
        raise InvalidValueError("feature_grad_dtype=torch.float32 requires weight_grad_dtype=torch.float32")
    return feature_grad_dtype, weight_grad_dtype


def _resolve_gradient_dtypes(input_dtype: torch.dtype, high_precision_dgrad: Any,
                             high_precision_wgrad: Any) -> tuple[torch.dtype, torch.dtype]:
    m.require_bool("high_precision_dgrad", high_precision_dgrad)
    m.require_bool("high_precision_wgrad", high_precision_wgrad)
    if high_precision_dgrad and not high_precision_wgrad:
        raise InvalidValueError("high_precision_dgrad=True requires high_precision_wgrad=True")
    return (torch.float32 if high_precision_dgrad else input_dtype,
            torch.float32 if high_precision_wgrad else input_dtype)


def _forward(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, src_features: Tensor,
             dst_features: Tensor, edge_features: Tensor | None, attn_weights: Tensor, dropout_mask: Tensor | None,
             num_src_nodes: int, num_heads: int, concat_heads: bool, activation: str, activation_alpha: float,
             return_attention_weights: bool, csc_rev_offsets: Tensor | None, map_rev_to_coo: Tensor | None,
             deterministic: bool, feature_grad_dtype: torch.dtype,
             weight_grad_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    num_dst_nodes, num_edges, dim_node, dim_edge = m.validate_inputs(
        offsets, indices, map_csc_to_coo, src_features, dst_features, edge_features, attn_weights, dropout_mask,
        num_src_nodes, num_heads, concat_heads, activation, activation_alpha, csc_rev_offsets, map_rev_to_coo,
        v2=False)
    m.validate_execution_options(return_attention_weights, deterministic, csc_rev_offsets)
    _gradient_dtypes(src_features.dtype, feature_grad_dtype, weight_grad_dtype)
    offsets, indices, src_features, dst_features, attn_weights = (
        t.contiguous() for t in (offsets, indices, src_features, dst_features, attn_weights))
    map_csc_to_coo, edge_features, dropout_mask = (contiguous(t) for t in (map_csc_to_coo, edge_features,
                                                                          dropout_mask))
    output, attention, sm_scores = m.forward_outputs(
        offsets, src_features, num_dst_nodes, num_edges, num_heads, concat_heads,
        (num_heads, num_edges) if return_attention_weights and num_dst_nodes == 0 else (0,))
    if num_dst_nodes == 0:
        return output, attention, sm_scores
    with torch.cuda.device(offsets.device):
        ext_gnn.gnn_mha_gat_forward(
            stream(offsets.device), offsets.data_ptr(), indices.data_ptr(), pointer(map_csc_to_coo), num_src_nodes,
            num_dst_nodes, num_edges, TORCH_INDEX_DTYPE_TO_CUDNN[offsets.dtype], src_features.data_ptr(),
            dst_features.data_ptr(), pointer(edge_features), attn_weights.data_ptr(), pointer(dropout_mask),
            output.data_ptr(), sm_scores.data_ptr(), dim_node, dim_edge, m.ACTIVATION_TO_INT[activation],
            float(activation_alpha), num_heads, concat_heads, TORCH_DTYPE_TO_CUDNN[src_features.dtype])
        if return_attention_weights:
            attention = m.extract_attention(sm_scores, dropout_mask)
    return output, attention, sm_scores


def _backward(grad_output: Tensor | None, grad_attention: Tensor | None, offsets: Tensor, indices: Tensor,
              map_csc_to_coo: Tensor | None, src_features: Tensor, dst_features: Tensor,
              edge_features: Tensor | None, attn_weights: Tensor, sm_scores: Tensor, dropout_mask: Tensor | None,
              num_src_nodes: int, num_heads: int, concat_heads: bool, activation: str, activation_alpha: float,
              csc_rev_offsets: Tensor | None, map_rev_to_coo: Tensor | None, deterministic: bool,
              feature_grad_dtype: torch.dtype,
              weight_grad_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    num_dst_nodes, num_edges, dim_node, dim_edge = m.validate_inputs(
        offsets, indices, map_csc_to_coo, src_features, dst_features, edge_features, attn_weights, dropout_mask,
        num_src_nodes, num_heads, concat_heads, activation, activation_alpha, csc_rev_offsets, map_rev_to_coo,
        v2=False)
    m.validate_execution_options(False, deterministic, csc_rev_offsets)
    grad_output, grad_attention = m.validate_backward_gradients(
        grad_output, grad_attention, offsets, src_features, num_dst_nodes, num_edges, dim_node, num_heads,
        concat_heads)
    fdt, wdt = _gradient_dtypes(src_features.dtype, feature_grad_dtype, weight_grad_dtype)
    m.check_sm_scores(sm_scores, offsets, num_heads, num_edges)
    grad_src, grad_dst, grad_edge, grad_weights = m.gradient_buffers(src_features, dst_features, edge_features,
                                                                     attn_weights, fdt, wdt)
    grad_sm_scores = torch.empty_like(sm_scores, memory_format=torch.contiguous_format)
    dev = offsets.device
    ws_features = torch.empty((num_edges, dim_node), device=dev, dtype=fdt) if deterministic else None
    ws_weights = torch.empty((num_dst_nodes, 2 * dim_node + dim_edge), device=dev, dtype=wdt) if deterministic \
        else None
    if num_dst_nodes == 0:
        for g in (grad_src, grad_dst, grad_edge, grad_weights):
            g.zero_()
        return grad_src, grad_dst, grad_edge, grad_weights
    offsets, indices, grad_output, src_features, dst_features, attn_weights, sm_scores = (
        t.contiguous() for t in (offsets, indices, grad_output, src_features, dst_features, attn_weights, sm_scores))
    map_csc_to_coo, csc_rev_offsets, map_rev_to_coo, edge_features, dropout_mask = (
        contiguous(t) for t in (map_csc_to_coo, csc_rev_offsets, map_rev_to_coo, edge_features, dropout_mask))
    with torch.cuda.device(dev):
        ext_gnn.gnn_mha_gat_backward(
            stream(dev), offsets.data_ptr(), indices.data_ptr(), pointer(map_csc_to_coo), num_src_nodes,
            num_dst_nodes, num_edges, TORCH_INDEX_DTYPE_TO_CUDNN[offsets.dtype], grad_output.data_ptr(),
            src_features.data_ptr(), dst_features.data_ptr(), pointer(edge_features), attn_weights.data_ptr(),
            sm_scores.data_ptr(), pointer(dropout_mask), pointer(grad_attention), grad_src.data_ptr(),
            grad_dst.data_ptr(), pointer(grad_edge if edge_features is not None else None), grad_weights.data_ptr(),
            grad_sm_scores.data_ptr(), dim_node, dim_edge, m.ACTIVATION_TO_INT[activation], float(activation_alpha),
            num_heads, concat_heads, TORCH_DTYPE_TO_CUDNN[src_features.dtype], pointer(csc_rev_offsets),
            pointer(map_rev_to_coo), pointer(ws_features), pointer(ws_weights), TORCH_DTYPE_TO_CUDNN[fdt],
            TORCH_DTYPE_TO_CUDNN[wdt])
    return grad_src, grad_dst, grad_edge, grad_weights


def _fake_forward(offsets: Tensor, indices: Tensor, map_csc_to_coo: Any, src_features: Tensor, dst_features: Any,
                  edge_features: Any, attn_weights: Any, dropout_mask: Any, num_src_nodes: Any, num_heads: int,
                  concat_heads: bool, activation: Any, activation_alpha: Any, return_attention_weights: bool,
                  csc_rev_offsets: Any, map_rev_to_coo: Any, deterministic: Any, feature_grad_dtype: Any,
                  weight_grad_dtype: Any) -> tuple[Tensor, Tensor, Tensor]:
    return m.fake_forward_outputs(offsets, indices, src_features, num_heads, concat_heads, return_attention_weights)


def _fake_backward(grad_output: Any, grad_attention: Any, offsets: Any, indices: Any, map_csc_to_coo: Any,
                   src_features: Tensor, dst_features: Tensor, edge_features: Tensor | None, attn_weights: Tensor,
                   sm_scores: Any, dropout_mask: Any, num_src_nodes: Any, num_heads: Any, concat_heads: Any,
                   activation: Any, activation_alpha: Any, csc_rev_offsets: Any, map_rev_to_coo: Any,
                   deterministic: Any, feature_grad_dtype: torch.dtype,
                   weight_grad_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return m.gradient_buffers(src_features, dst_features, edge_features, attn_weights, feature_grad_dtype,
                              weight_grad_dtype)


_FWD = define(
    "gnn_mha_gat_fwd(Tensor offsets, Tensor indices, Tensor? map_csc_to_coo, Tensor src_features, Tensor dst_features, "
    "Tensor? edge_features, Tensor attn_weights, Tensor? dropout_mask, int num_src_nodes, int num_heads, "
    "bool concat_heads, str activation, float activation_alpha, bool return_attention_weights, "
    "Tensor? csc_rev_offsets, Tensor? map_rev_to_coo, bool deterministic, ScalarType feature_grad_dtype, "
    "ScalarType weight_grad_dtype) -> (Tensor, Tensor, Tensor)", _forward, _fake_forward, exact_strides=False)
_BWD = define(
    "gnn_mha_gat_bwd(Tensor? grad_output, Tensor? grad_attention, Tensor offsets, Tensor indices, "
    "Tensor? map_csc_to_coo, Tensor src_features, Tensor dst_features, Tensor? edge_features, Tensor attn_weights, "
    "Tensor sm_scores, Tensor? dropout_mask, int num_src_nodes, int num_heads, bool concat_heads, "
    "str activation, float activation_alpha, Tensor? csc_rev_offsets, Tensor? map_rev_to_coo, "
    "bool deterministic, ScalarType feature_grad_dtype, ScalarType weight_grad_dtype) "
    "-> (Tensor, Tensor, Tensor, Tensor)",
    _backward, _fake_backward, exact_strides=False)


m.register_autograd(_FWD, torch.ops.cudnn_py.gnn_mha_gat_bwd)


def mha_gat(graph: CscGraph, features: Tensor | tuple[Tensor, Tensor], attn_weights: Tensor, *,
            edge_features: Tensor | None = None, dropout_mask: Tensor | None = None, num_heads: int = 1,
            concat_heads: bool = True, activation: str = "leaky_relu", activation_alpha: float = 0.2,
            return_attention_weights: bool = False, deterministic: bool = False, high_precision_dgrad: bool = False,
            high_precision_wgrad: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """GAT multi-head attention over a homogeneous or bipartite CSC graph.

    ``features``: the source features ``(num_src_nodes, dim_node)`` (a homogeneous graph: its first
    ``num_dst_nodes`` rows are the destinations), or a ``(src_features, dst_features)`` pair. ``attn_weights``: the
    source, destination and (optional) edge weights, flat, ``2 * dim_node + dim_edge`` long. ``edge_features``
    ``(num_edges, dim_edge)``; ``dropout_mask``: float32 inverted-dropout factors ``(num_heads, num_edges)`` (mapped
    edge order where ``graph.map_csc_to_coo`` is set). ``num_heads`` divides the feature dimensions; the heads'
    outputs are concatenated (``concat_heads=True``) or averaged. ``activation`` (``"linear"``, ``"relu"``,
    ``"sigmoid"``, ``"tanh"``, ``"elu"``, ``"scalar"``, ``"leaky_relu"``) is applied to the logits, with
    ``activation_alpha`` the leaky slope or the scale. ``return_attention_weights``: also return the post-softmax,
    post-dropout coefficients, float32 ``(num_heads, num_edges)``. ``deterministic``: a deterministic backward (the
    graph needs :meth:`CscGraph.with_reverse_csc`). ``high_precision_dgrad`` / ``_wgrad``: float32 feature / weight
    gradients for half inputs (dgrad needs wgrad).

    Returns the output ``(num_dst_nodes, dim_node if concat_heads else dim_node // num_heads)``, or
    ``(output, attention_weights)``.
    """
    src_features, dst_features = m.normalize_features(graph, features)
    feature_grad_dtype, weight_grad_dtype = _resolve_gradient_dtypes(src_features.dtype, high_precision_dgrad,
                                                                     high_precision_wgrad)
    output, attention, _ = torch.ops.cudnn_py.gnn_mha_gat_fwd(
        graph.offsets, graph.indices, graph.map_csc_to_coo, src_features, dst_features, edge_features, attn_weights,
        dropout_mask, graph.num_src_nodes, num_heads, concat_heads, activation, activation_alpha,
        return_attention_weights, graph.csc_rev_offsets, graph.map_rev_to_coo, deterministic, feature_grad_dtype,
        weight_grad_dtype)
    return (output, attention) if return_attention_weights else output
