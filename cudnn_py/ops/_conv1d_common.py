"""What the causal conv1d torch operators share (``cudnn.ops.causal_conv1d_nwh``, ``b2b_causal_conv1d``,
``fft_causal_conv1d``): the data-type and activation maps (the official operators', with their messages), the
parameter-gradient dtype, the current stream, and the 16-byte alignment the C API asks of its operands.

Importing this module imports torch.
"""
from __future__ import annotations

import torch

from ..errors import InvalidValueError

TORCH_DTYPE_TO_CUDNN = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 9}
ACTIVATION_TO_INT = {"identity": 0, "silu": 1}
ALIGNMENT = 16


def dtype_to_int(dtype: torch.dtype) -> int:
    if dtype not in TORCH_DTYPE_TO_CUDNN:
        raise InvalidValueError(f"Unsupported dtype {dtype}. Supported: float64, float32, float16, bfloat16.")
    return TORCH_DTYPE_TO_CUDNN[dtype]


def activation_to_int(activation: str) -> int:
    if activation not in ACTIVATION_TO_INT:
        raise InvalidValueError(f"Unsupported activation '{activation}'. Supported: 'identity', 'silu'.")
    return ACTIVATION_TO_INT[activation]


def gradient_dtype(dtype: torch.dtype) -> torch.dtype:
    """The parameter gradients accumulate in float32 for half types, in the input's type otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def stream(device: torch.device) -> int:
    """torch's current stream on ``device``, as the ``cudaStream_t`` the C API takes (the GNN operators' too)."""
    return torch.cuda.current_stream(device).cuda_stream


def aligned(t: torch.Tensor) -> torch.Tensor:
    """``t`` contiguous, at a 16-byte aligned address: a contiguous view at an odd offset is copied (the FFT paths
    require the alignment, and the others read vectors), never handed to cuDNN as it is."""
    t = t.contiguous()
    return t if t.data_ptr() % ALIGNMENT == 0 else t.clone()
