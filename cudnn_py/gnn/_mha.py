"""What GAT and GATv2 share: the operand checks (the official operators', in their order, with their messages),
the gradient dtypes, the forward outputs, the attention coefficients handed back, and the feature argument.

``v2`` selects GATv2's two differences: edge features are ``(num_edges, dim_node)`` and the attention weights
``(dim_node,)``; GAT's edge features are ``(num_edges, dim_edge)`` (``dim_edge`` a multiple of ``num_heads``) and
its weights ``(2 * dim_node + dim_edge,)``.
"""
from __future__ import annotations

from numbers import Real
from typing import Any

import torch
from torch import Tensor  # (imported, not assigned: a type mypy reads where torch is not installed)

from ..errors import InvalidTypeError, InvalidValueError
from ._common import TORCH_DTYPE_TO_CUDNN, validate_csc_graph
from .graph import CscGraph

ACTIVATION_TO_INT = {"linear": 0, "relu": 1, "sigmoid": 2, "tanh": 3, "elu": 4, "scalar": 5, "leaky_relu": 6}


def validate_inputs(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, src_features: Tensor,
                    dst_features: Tensor, edge_features: Tensor | None, attn_weights: Tensor,
                    dropout_mask: Tensor | None, num_src_nodes: int, num_heads: Any, concat_heads: Any,
                    activation: str, activation_alpha: Any, csc_rev_offsets: Tensor | None,
                    map_rev_to_coo: Tensor | None, *, v2: bool) -> tuple[int, int, int, int]:
    """(num_dst_nodes, num_edges, dim_node, dim_edge)."""
    num_dst_nodes, num_edges = validate_csc_graph(offsets, indices, map_csc_to_coo, num_src_nodes, csc_rev_offsets,
                                                  map_rev_to_coo)
    if num_dst_nodes > 0 and num_edges == 0:
        raise InvalidValueError(f"cuDNN {'GATv2' if v2 else 'GAT'} does not support a nonempty destination set with "
                                "zero edges")
    if not isinstance(num_heads, int) or isinstance(num_heads, bool):
        raise InvalidTypeError(f"num_heads must be an int, got {type(num_heads).__name__}")
    if num_heads <= 0:
        raise InvalidValueError(f"num_heads must be positive, got {num_heads}")
    if not isinstance(concat_heads, bool):
        raise InvalidTypeError(f"concat_heads must be a bool, got {type(concat_heads).__name__}")
    if activation not in ACTIVATION_TO_INT:
        raise InvalidValueError(f"Unsupported activation '{activation}'. Supported: {', '.join(ACTIVATION_TO_INT)}.")
    if not isinstance(activation_alpha, Real):
        raise InvalidTypeError(f"activation_alpha must be a real number, got {type(activation_alpha).__name__}")

    tensors = [src_features, dst_features, attn_weights] + ([edge_features] if edge_features is not None else [])
    dtype = src_features.dtype
    if dtype not in TORCH_DTYPE_TO_CUDNN:
        raise InvalidTypeError(f"features and weights must have dtype float32, float16, or bfloat16, got {dtype}")
    for t in tensors:
        if not t.is_cuda:
            raise InvalidValueError(f"features and weights must be CUDA tensors, got {t.device}")
        if t.device != offsets.device:
            raise InvalidValueError(f"all graph, feature, and weight tensors must be on {offsets.device}, got "
                                    f"{t.device}")
        if t.dtype != dtype:
            raise InvalidTypeError(f"all features and weights must have dtype {dtype}, got {t.dtype}")

    if src_features.ndim != 2 or src_features.shape[0] != num_src_nodes:
        raise InvalidValueError(f"src_features must have shape ({num_src_nodes}, dim_node), got "
                                f"{tuple(src_features.shape)}")
    dim_node = src_features.shape[1]
    if dst_features.ndim != 2 or tuple(dst_features.shape) != (num_dst_nodes, dim_node):
        raise InvalidValueError(f"dst_features must have shape ({num_dst_nodes}, {dim_node}), got "
                                f"{tuple(dst_features.shape)}")
    if dim_node == 0 or dim_node % num_heads != 0:
        raise InvalidValueError(f"node feature dimension {dim_node} must be positive and divisible by num_heads "
                                f"({num_heads})")
    dim_edge = 0
    if edge_features is not None:
        if edge_features.ndim != 2 or edge_features.shape[0] != num_edges:
            raise InvalidValueError(f"edge_features must have shape ({num_edges}, dim_edge), got "
                                    f"{tuple(edge_features.shape)}")
        dim_edge = edge_features.shape[1]
        if dim_edge == 0:
            raise InvalidValueError("edge_features cannot have zero feature dimension")
    if dropout_mask is not None:
        _validate_dropout_mask(dropout_mask, offsets, num_heads, num_edges)
    if v2:
        if edge_features is not None and dim_edge != dim_node:
            raise InvalidValueError(f"GATv2 edge feature dimension must equal node feature dimension {dim_node}, got "
                                    f"{dim_edge}")
        expected_weights = dim_node
    else:
        if edge_features is not None and dim_edge % num_heads != 0:
            raise InvalidValueError(f"edge feature dimension {dim_edge} must be divisible by num_heads ({num_heads})")
        expected_weights = 2 * dim_node + dim_edge
    if attn_weights.ndim != 1 or attn_weights.numel() != expected_weights:
        raise InvalidValueError(f"attn_weights must have shape ({expected_weights},), got "
                                f"{tuple(attn_weights.shape)}")
    return num_dst_nodes, num_edges, dim_node, dim_edge


def _validate_dropout_mask(mask: Tensor, offsets: Tensor, num_heads: int, num_edges: int) -> None:
    if tuple(mask.shape) != (num_heads, num_edges):
        raise InvalidValueError(f"dropout_mask must have shape {(num_heads, num_edges)}, got {tuple(mask.shape)}")
    if not mask.is_cuda or mask.device != offsets.device:
        raise InvalidValueError(f"dropout_mask must be a CUDA tensor on {offsets.device}, got {mask.device}")
    if mask.dtype != torch.float32:
        raise InvalidTypeError(f"dropout_mask must have dtype float32, got {mask.dtype}")
    if mask.requires_grad:
        raise InvalidValueError("dropout_mask must not require gradients")


def validate_execution_options(return_attention_weights: Any, deterministic: Any,
                               csc_rev_offsets: Tensor | None) -> None:
    if not isinstance(return_attention_weights, bool):
        raise InvalidTypeError("return_attention_weights must be a bool, got "
                               f"{type(return_attention_weights).__name__}")
    if not isinstance(deterministic, bool):
        raise InvalidTypeError(f"deterministic must be a bool, got {type(deterministic).__name__}")
    if deterministic and csc_rev_offsets is None:
        raise InvalidValueError("deterministic backward requires graph.csc_rev_offsets and graph.map_rev_to_coo")


def validate_gradient_dtype(name: str, grad_dtype: Any, input_dtype: torch.dtype) -> torch.dtype:
    if not isinstance(grad_dtype, torch.dtype):
        raise InvalidTypeError(f"{name} must be a torch.dtype, got {type(grad_dtype).__name__}")
    if grad_dtype not in (input_dtype, torch.float32):
        raise InvalidValueError(f"{name} must be {input_dtype} or torch.float32, got {grad_dtype}")
    return grad_dtype


def require_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def validate_backward_gradients(grad_output: Tensor | None, grad_attention: Tensor | None, offsets: Tensor,
                                src_features: Tensor, num_dst_nodes: int, num_edges: int, dim_node: int,
                                num_heads: int, concat_heads: bool) -> tuple[Tensor, Tensor | None]:
    """The upstream gradients (a missing output gradient is zeros); the attention one made contiguous."""
    output_dim = dim_node if concat_heads else dim_node // num_heads
    if grad_output is None:
        grad_output = torch.zeros((num_dst_nodes, output_dim), device=offsets.device, dtype=src_features.dtype)
    elif tuple(grad_output.shape) != (num_dst_nodes, output_dim) or grad_output.dtype != src_features.dtype:
        raise InvalidValueError(f"grad_output must have shape {(num_dst_nodes, output_dim)} and dtype "
                                f"{src_features.dtype}")
    elif not grad_output.is_cuda or grad_output.device != offsets.device:
        raise InvalidValueError(f"grad_output must be a CUDA tensor on {offsets.device}, got {grad_output.device}")
    if grad_attention is not None:
        if tuple(grad_attention.shape) != (num_heads, num_edges) or grad_attention.dtype != torch.float32:
            raise InvalidValueError(f"grad_attention must have shape {(num_heads, num_edges)} and dtype float32")
        if not grad_attention.is_cuda or grad_attention.device != offsets.device:
            raise InvalidValueError(f"grad_attention must be a CUDA tensor on {offsets.device}, got "
                                    f"{grad_attention.device}")
        grad_attention = grad_attention.contiguous()
    return grad_output, grad_attention


def forward_outputs(offsets: Tensor, src_features: Tensor, num_dst_nodes: int, num_edges: int, num_heads: int,
                    concat_heads: bool, attention_shape: tuple[int, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """(output, attention placeholder, sm_scores: float [2, heads, edges], the logits then the softmax)."""
    dim_node = src_features.shape[1]
    output_dim = dim_node if concat_heads else dim_node // num_heads
    output = torch.empty((num_dst_nodes, output_dim), device=offsets.device, dtype=src_features.dtype)
    attention = torch.empty(attention_shape, device=offsets.device, dtype=torch.float32)
    sm_scores = torch.empty((2, num_heads, num_edges), device=offsets.device, dtype=torch.float32)
    return output, attention, sm_scores


def extract_attention(sm_scores: Tensor, dropout_mask: Tensor | None) -> Tensor:
    """The post-softmax, post-dropout coefficients (the second half of sm_scores, times the mask)."""
    attention = sm_scores[1].clone()
    if dropout_mask is not None:
        attention.mul_(dropout_mask)
    return attention


def normalize_features(graph: CscGraph, features: Any) -> tuple[Tensor, Tensor]:
    """(src_features, dst_features): one tensor for a homogeneous graph (its first num_dst_nodes rows are the
    destinations), or a pair for a bipartite one."""
    if isinstance(features, Tensor):
        return features, features[: graph.num_dst_nodes]
    if isinstance(features, tuple) and len(features) == 2 and all(isinstance(f, Tensor) for f in features):
        return features
    raise InvalidTypeError("features must be a Tensor or a (src_features, dst_features) tuple")


def fake_forward_outputs(offsets: Tensor, indices: Tensor, src_features: Tensor, num_heads: int, concat_heads: bool,
                         return_attention_weights: bool) -> tuple[Tensor, Tensor, Tensor]:
    num_edges = indices.numel()
    return forward_outputs(offsets, src_features, offsets.numel() - 1, num_edges, num_heads, concat_heads,
                           (num_heads, num_edges) if return_attention_weights else (0,))


def gradient_buffers(src_features: Tensor, dst_features: Tensor, edge_features: Tensor | None, attn_weights: Tensor,
                     feature_dtype: torch.dtype, weight_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(grad_src, grad_dst, grad_edge (empty without edge features), grad_weights), contiguous."""
    fmt = torch.contiguous_format
    grad_edge = (torch.empty_like(edge_features, dtype=feature_dtype, memory_format=fmt) if edge_features is not None
                 else torch.empty((0,), device=src_features.device, dtype=feature_dtype))
    return (torch.empty_like(src_features, dtype=feature_dtype, memory_format=fmt),
            torch.empty_like(dst_features, dtype=feature_dtype, memory_format=fmt), grad_edge,
            torch.empty_like(attn_weights, dtype=weight_dtype, memory_format=fmt))


def check_sm_scores(sm_scores: Tensor, offsets: Tensor, num_heads: int, num_edges: int) -> None:
    """The saved scores cuDNN reads: the official's backward leaves them unchecked (they come from its forward);
    a hand-made call could hand cuDNN a short buffer."""
    if tuple(sm_scores.shape) != (2, num_heads, num_edges) or sm_scores.dtype != torch.float32 \
            or sm_scores.device != offsets.device:
        raise InvalidValueError(f"sm_scores must be a float32 tensor of shape {(2, num_heads, num_edges)} on "
                                f"{offsets.device}, got {tuple(sm_scores.shape)} {sm_scores.dtype} {sm_scores.device}")


# The operators' inputs, in the order both schemas share: the CSC graph and the tensors (0-7), the options the
# backward takes again (8-12), return_attention_weights (13), the reverse CSC (14-15), then deterministic and the
# gradient dtypes (16-). The outputs: (output, attention, sm_scores, *saved), where ``saved`` (GATv2's act_scores)
# is kept for the backward and handed to it after sm_scores.
_TENSORS, _OPTIONS, _RETURN_ATTENTION, _REVERSE, _TAIL = slice(0, 7), slice(8, 13), 13, slice(14, 16), 16


def register_autograd(forward_op: Any, backward_op: Any) -> None:
    """The autograd of a GAT forward operator (``forward_op``), through its backward operator (``backward_op``):
    gradients for the source and destination features, the edge features (where given) and the attention weights;
    the attention coefficients are differentiable where returned, the scores cuDNN saves are not."""

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        _, attention, sm_scores, *saved = output
        edge_features, dropout_mask = inputs[5], inputs[7]
        ctx.save_for_backward(*inputs[_TENSORS], sm_scores, *saved, dropout_mask, *inputs[_REVERSE])
        ctx.return_attention_weights = inputs[_RETURN_ATTENTION]
        ctx.mark_non_differentiable(*(() if ctx.return_attention_weights else (attention,)), sm_scores, *saved)
        ctx.has_edge_features, ctx.saved_outputs = edge_features is not None, 1 + len(saved)
        ctx.options, ctx.tail, ctx.n_inputs = inputs[_OPTIONS], inputs[_TAIL:], len(inputs)

    def backward(ctx: Any, grad_output: Tensor, grad_attention: Tensor, *_not_differentiable: Any) -> tuple[Any, ...]:
        saved = ctx.saved_tensors
        tensors, scores, dropout_mask, reverse = saved[:7], saved[7:7 + ctx.saved_outputs], saved[-3], saved[-2:]
        grad_src, grad_dst, grad_edge, grad_weights = backward_op(
            grad_output, grad_attention if ctx.return_attention_weights else None, *tensors, *scores, dropout_mask,
            *ctx.options, *reverse, *ctx.tail)
        return (None, None, None, grad_src, grad_dst, grad_edge if ctx.has_edge_features else None, grad_weights,
                *([None] * (ctx.n_inputs - 7)))

    torch.library.register_autograd(forward_op, torch.compiler.allow_in_graph(backward), setup_context=setup_context)
