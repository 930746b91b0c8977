"""``cudnn.gemm``: the official module's GEMM operator family, as far as cudnn_py builds it over its own graphs.

* ``cudnn.gemm.ops.moe_grouped_matmul`` (also ``cudnn.gemm.moe_grouped_matmul``): the MoE grouped matmul as a torch
  custom operator on cudnn_py's ``moe_grouped_matmul`` graph op (docs/torch.md).

The official module's other names here (``swiglu_mlp``, ``situ_mlp``, ``swiglu_moe``, the mHC projection backward)
are CuTe DSL kernels cudnn_py has not built: reading them raises ImportError saying so. Public names resolve on
first access, so importing this package needs no torch.
"""
from __future__ import annotations

from ..ops._lazy import lazy_getattr

_LAZY_EXPORTS: dict[str, tuple[str, str | None]] = {
    "ops": ("cudnn_py.gemm.ops", None),
    "MhcProjectionBackward": ("cudnn_py.gemm.mhc_projection_bwd", "MhcProjectionBackward"),
    "mhc_projection_backward": ("cudnn_py.gemm.mhc_projection_bwd", "mhc_projection_backward"),
    "moe_grouped_matmul": ("cudnn_py.gemm.ops.moe_grouped_matmul", "moe_grouped_matmul"),
    "situ_mlp": ("cudnn_py.gemm.ops.swiglu_mlp", "situ_mlp"),
    "swiglu_mlp": ("cudnn_py.gemm.ops.swiglu_mlp", "swiglu_mlp"),
    "swiglu_moe": ("cudnn_py.gemm.ops.swiglu_moe", "swiglu_moe"),
}

__all__ = [n for n in _LAZY_EXPORTS if n != "ops"]

__getattr__ = lazy_getattr(globals(), _LAZY_EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_EXPORTS))
