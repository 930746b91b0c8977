"""The classic FP8 and MXFP8 attention methods (``node_lowering.md`` §14.1, §16.1), present so that code written
for the classic module finds them, and refusing clearly: per-tensor FP8 attention (``sdpa_fp8``,
``sdpa_fp8_backward``) is not implemented in cudnn_py yet; MXFP8 attention is Blackwell-only in cuDNN
(SM 10.x, cuDNN >= 9.21, node_lowering.md §14.4) and not implemented here for any GPU."""
from __future__ import annotations

from typing import Any

from ..errors import NotImplementedOptionError, cudnnGraphNotSupportedError

_MXFP8 = ("MXFP8 attention ({method}) runs only on Blackwell GPUs (SM 10.x) with cuDNN >= 9.21; it is not supported "
          "on Hopper (the H200 is SM 9.0), and cudnn_py does not implement it for any GPU yet")


class LowPrecisionAttentionMixin:
    """``sdpa_fp8``, ``sdpa_fp8_backward``, ``sdpa_mxfp8``, ``sdpa_mxfp8_backward`` with the classic surface."""

    def sdpa_fp8(self, *args: Any, name: str = "", compute_data_type: Any = None, out_dims: Any = None,
                 **kwargs: Any) -> Any:
        raise NotImplementedOptionError("sdpa_fp8() (per-tensor FP8 attention forward) is not implemented yet in "
                                        "cudnn_py; use sdpa() with fp16 / bf16 tensors")

    def sdpa_fp8_backward(self, *args: Any, name: str = "", compute_data_type: Any = None, out_dims: Any = None,
                          **kwargs: Any) -> Any:
        raise NotImplementedOptionError("sdpa_fp8_backward() (per-tensor FP8 attention backward) is not implemented "
                                        "yet in cudnn_py; use sdpa_backward() with fp16 / bf16 tensors")

    def sdpa_mxfp8(self, *args: Any, name: str = "", compute_data_type: Any = None, out_dims: Any = None,
                   **kwargs: Any) -> Any:
        raise cudnnGraphNotSupportedError(_MXFP8.format(method="sdpa_mxfp8"))

    def sdpa_mxfp8_backward(self, *args: Any, name: str = "", compute_data_type: Any = None, out_dims: Any = None,
                            **kwargs: Any) -> Any:
        raise cudnnGraphNotSupportedError(_MXFP8.format(method="sdpa_mxfp8_backward"))
