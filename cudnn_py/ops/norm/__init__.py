"""``cudnn.ops.norm``: RMSNorm and LayerNorm as torch custom operators on cudnn_py's norm graphs.

    import cudnn_py as cudnn
    y = cudnn.ops.norm.rms_norm(x, weight, bias=None, eps=1e-5)
    y = cudnn.ops.norm.layer_norm(x, (hidden,), weight=None, bias=None, eps=1e-5)

The implementation modules (:mod:`.rmsnorm`, :mod:`.layernorm`) import torch, so the public names resolve on first
access: importing this package needs no torch. Reading a name without torch installed raises ImportError.
"""
from __future__ import annotations

from .._lazy import lazy_getattr

_LAZY_EXPORTS: dict[str, tuple[str, str | None]] = {
    "layer_norm": ("cudnn_py.ops.norm.layernorm", "layer_norm"),
    "rms_norm": ("cudnn_py.ops.norm.rmsnorm", "rms_norm"),
}

__all__ = list(_LAZY_EXPORTS)

__getattr__ = lazy_getattr(globals(), _LAZY_EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
