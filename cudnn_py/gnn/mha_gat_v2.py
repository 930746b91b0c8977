"""``cudnn.gnn.mha_gat_v2``: GATv2 multi-head attention over a homogeneous or bipartite CSC graph, a torch operator
(``torch.ops.cudnn_py.gnn_mha_gat_v2_fwd`` / ``_bwd``, the official operator's schema) with autograd, over
``cudnnGnnMhaGatV2Forward`` / ``Backward`` (:mod:`cudnn_py.backend.ext_gnn`).

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


def _forward(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, src_features: Tensor,
             dst_features: Tensor, edge_features: Tensor | None, attn_weights: Tensor, dropout_mask: Tensor | None,
             num_src_nodes: int, num_heads: int, concat_heads: bool, activation: str, activation_alpha: float,
             return_attention_weights: bool, csc_rev_offsets: Tensor | None, map_rev_to_coo: Tensor | None,
             deterministic: bool, grad_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    num_dst_nodes, num_edges, dim_node, _ = m.validate_inputs(
        offsets, indices, map_csc_to_coo, src_features, dst_features, edge_features, attn_weights, dropout_mask,
        num_src_nodes, num_heads, concat_heads, activation, activation_alpha, csc_rev_offsets, map_rev_to_coo,
        v2=True)
    m.validate_execution_options(return_attention_weights, deterministic, csc_rev_offsets)
    m.validate_gradient_dtype("grad_dtype", grad_dtype, src_features.dtype)
    offsets, indices, src_features, dst_features, attn_weights = (
        t.contiguous() for t in (offsets, indices, src_features, dst_features, attn_weights))
    map_csc_to_coo, edge_features, dropout_mask = (contiguous(t) for t in (map_csc_to_coo, edge_features,
                                                                          dropout_mask))
    output, attention, sm_scores = m.forward_outputs(
        offsets, src_features, num_dst_nodes, num_edges, num_heads, concat_heads,
        (num_heads, num_edges) if return_attention_weights and num_dst_nodes == 0 else (0,))
    act_scores = torch.empty((num_edges, dim_node), device=offsets.device, dtype=src_features.dtype)
    if num_dst_nodes == 0:
        return output, attention, sm_scores, act_scores
    with torch.cuda.device(offsets.device):
        ext_gnn.gnn_mha_gat_v2_forward(
            stream(offsets.device), offsets.data_ptr(), indices.data_ptr(), pointer(map_csc_to_coo), num_src_nodes,
            num_dst_nodes, num_edges, TORCH_INDEX_DTYPE_TO_CUDNN[offsets.dtype], src_features.data_ptr(),
            dst_features.data_ptr(), pointer(edge_features), attn_weights.data_ptr(), pointer(dropout_mask),
            output.data_ptr(), sm_scores.data_ptr(), act_scores.data_ptr(), dim_node,
            m.ACTIVATION_TO_INT[activation], float(activation_alpha), num_heads, concat_heads,
            TORCH_DTYPE_TO_CUDNN[src_features.dtype])
        if return_attention_weights:
            attention = m.extract_attention(sm_scores, dropout_mask)
    return output, attention, sm_scores, act_scores


def _backward(grad_output: Tensor | None, grad_attention: Tensor | None, offsets: Tensor, indices: Tensor,
              map_csc_to_coo: Tensor | None, src_features: Tensor, dst_features: Tensor,
              edge_features: Tensor | None, attn_weights: Tensor, sm_scores: Tensor, act_scores: Tensor,
              dropout_mask: Tensor | None, num_src_nodes: int, num_heads: int, concat_heads: bool, activation: str,
              activation_alpha: float, csc_rev_offsets: Tensor | None, map_rev_to_coo: Tensor | None,
              deterministic: bool, grad_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    num_dst_nodes, num_edges, dim_node, _ = m.validate_inputs(
        offsets, indices, map_csc_to_coo, src_features, dst_features, edge_features, attn_weights, dropout_mask,
        num_src_nodes, num_heads, concat_heads, activation, activation_alpha, csc_rev_offsets, map_rev_to_coo,
        v2=True)
    m.validate_execution_options(False, deterministic, csc_rev_offsets)
    grad_output, grad_attention = m.validate_backward_gradients(
        grad_output, grad_attention, offsets, src_features, num_dst_nodes, num_edges, dim_node, num_heads,
        concat_heads)
    gdt = m.validate_gradient_dtype("grad_dtype", grad_dtype, src_features.dtype)
    m.check_sm_scores(sm_scores, offsets, num_heads, num_edges)
    if tuple(act_scores.shape) != (num_edges, dim_node) or act_scores.dtype != src_features.dtype \
            or act_scores.device != offsets.device:  # read by cuDNN: the official trusts its forward's
        raise InvalidValueError(f"act_scores must be a {src_features.dtype} tensor of shape {(num_edges, dim_node)} "
                                f"on {offsets.device}, got {tuple(act_scores.shape)} {act_scores.dtype} "
                                f"{act_scores.device}")
    grad_src, grad_dst, grad_edge, grad_weights = m.gradient_buffers(src_features, dst_features, edge_features,
                                                                     attn_weights, gdt, gdt)
    grad_sm_scores = torch.empty_like(sm_scores, memory_format=torch.contiguous_format)
    dev = offsets.device
    ws_features = torch.empty((num_edges, dim_node), device=dev, dtype=gdt) if deterministic else None
    ws_weights = torch.empty((num_dst_nodes, dim_node), device=dev, dtype=gdt) if deterministic else None
    if num_dst_nodes == 0:
        for g in (grad_src, grad_dst, grad_edge, grad_weights):
            g.zero_()
        return grad_src, grad_dst, grad_edge, grad_weights
    offsets, indices, grad_output, src_features, dst_features, attn_weights, sm_scores, act_scores = (
        t.contiguous() for t in (offsets, indices, grad_output, src_features, dst_features, attn_weights, sm_scores,
                                 act_scores))
    map_csc_to_coo, csc_rev_offsets, map_rev_to_coo, edge_features, dropout_mask = (
        contiguous(t) for t in (map_csc_to_coo, csc_rev_offsets, map_rev_to_coo, edge_features, dropout_mask))
    with torch.cuda.device(dev):
        ext_gnn.gnn_mha_gat_v2_backward(
            stream(dev), offsets.data_ptr(), indices.data_ptr(), pointer(map_csc_to_coo), num_src_nodes,
            num_dst_nodes, num_edges, TORCH_INDEX_DTYPE_TO_CUDNN[offsets.dtype], grad_output.data_ptr(),
            src_features.data_ptr(), dst_features.data_ptr(), pointer(edge_features), attn_weights.data_ptr(),
            sm_scores.data_ptr(), act_scores.data_ptr(), pointer(dropout_mask), pointer(grad_attention),
            grad_src.data_ptr(), grad_dst.data_ptr(), pointer(grad_edge if edge_features is not None else None),
            grad_weights.data_ptr(), grad_sm_scores.data_ptr(), dim_node, m.ACTIVATION_TO_INT[activation],
            float(activation_alpha), num_heads, concat_heads, TORCH_DTYPE_TO_CUDNN[src_features.dtype],
            pointer(csc_rev_offsets), pointer(map_rev_to_coo), pointer(ws_features), pointer(ws_weights),
            TORCH_DTYPE_TO_CUDNN[gdt])
    return grad_src, grad_dst, grad_edge, grad_weights


def _fake_forward(offsets: Tensor, indices: Tensor, map_csc_to_coo: Any, src_features: Tensor, dst_features: Any,
                  edge_features: Any, attn_weights: Any, dropout_mask: Any, num_src_nodes: Any, num_heads: int,
                  concat_heads: bool, activation: Any, activation_alpha: Any, return_attention_weights: bool,
                  csc_rev_offsets: Any, map_rev_to_coo: Any, deterministic: Any,
                  grad_dtype: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    output, attention, sm_scores = m.fake_forward_outputs(offsets, indices, src_features, num_heads, concat_heads,
                                                          return_attention_weights)
    act_scores = torch.empty((indices.numel(), src_features.shape[1]), device=offsets.device,
                             dtype=src_features.dtype)
    return output, attention, sm_scores, act_scores


def _fake_backward(grad_output: Any, grad_attention: Any, offsets: Any, indices: Any, map_csc_to_coo: Any,
                   src_features: Tensor, dst_features: Tensor, edge_features: Tensor | None, attn_weights: Tensor,
                   sm_scores: Any, act_scores: Any, dropout_mask: Any, num_src_nodes: Any, num_heads: Any,
                   concat_heads: Any, activation: Any, activation_alpha: Any, csc_rev_offsets: Any,
                   map_rev_to_coo: Any, deterministic: Any,
                   grad_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return m.gradient_buffers(src_features, dst_features, edge_features, attn_weights, grad_dtype, grad_dtype)


_FWD = define(
    "gnn_mha_gat_v2_fwd(Tensor offsets, Tensor indices, Tensor? map_csc_to_coo, Tensor src_features, "
    "Tensor dst_features, Tensor? edge_features, Tensor attn_weights, Tensor? dropout_mask, int num_src_nodes, "
    "int num_heads, bool concat_heads, str activation, float activation_alpha, bool return_attention_weights, "
    "Tensor? csc_rev_offsets, Tensor? map_rev_to_coo, bool deterministic, ScalarType grad_dtype) "
    "-> (Tensor, Tensor, Tensor, Tensor)", _forward, _fake_forward, exact_strides=False)
_BWD = define(
    "gnn_mha_gat_v2_bwd(Tensor? grad_output, Tensor? grad_attention, Tensor offsets, Tensor indices, "
    "Tensor? map_csc_to_coo, Tensor src_features, Tensor dst_features, Tensor? edge_features, Tensor attn_weights, "
    "Tensor sm_scores, Tensor act_scores, Tensor? dropout_mask, int num_src_nodes, int num_heads, bool concat_heads, "
    "str activation, float activation_alpha, Tensor? csc_rev_offsets, Tensor? map_rev_to_coo, "
    "bool deterministic, ScalarType grad_dtype) -> (Tensor, Tensor, Tensor, Tensor)",
    _backward, _fake_backward, exact_strides=False)


m.register_autograd(_FWD, torch.ops.cudnn_py.gnn_mha_gat_v2_bwd)


def mha_gat_v2(graph: CscGraph, features: Tensor | tuple[Tensor, Tensor], attn_weights: Tensor, *,
               edge_features: Tensor | None = None, dropout_mask: Tensor | None = None, num_heads: int = 1,
               concat_heads: bool = True, activation: str = "leaky_relu", activation_alpha: float = 0.2,
               return_attention_weights: bool = False, deterministic: bool = False,
               high_precision_grad: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """GATv2 multi-head attention over a homogeneous or bipartite CSC graph.

    As :func:`cudnn.gnn.mha_gat`, except: ``attn_weights`` is ``(dim_node,)``, ``edge_features`` is
    ``(num_edges, dim_node)``, and ``high_precision_grad`` makes every gradient (features and weights) float32 for
    half inputs. Returns the output, or ``(output, attention_weights)`` with ``return_attention_weights=True``.
    """
    src_features, dst_features = m.normalize_features(graph, features)
    grad_dtype = torch.float32 if m.require_bool("high_precision_grad", high_precision_grad) else src_features.dtype
    output, attention, _, _ = torch.ops.cudnn_py.gnn_mha_gat_v2_fwd(
        graph.offsets, graph.indices, graph.map_csc_to_coo, src_features, dst_features, edge_features, attn_weights,
        dropout_mask, graph.num_src_nodes, num_heads, concat_heads, activation, activation_alpha,
        return_attention_weights, graph.csc_rev_offsets, graph.map_rev_to_coo, deterministic, grad_dtype)
    return (output, attention) if return_attention_weights else output
