"""``cudnn.ops``: the public namespace of the official module's torch-facing operators, for code written for the
official ``cudnn`` module, built over cudnn_py's graphs.

* ``cudnn.ops.norm.rms_norm`` and ``cudnn.ops.norm.layer_norm``: RMSNorm and LayerNorm over the last axis as torch
  custom operators (``torch.ops.cudnn_py.*``), with autograd and fake implementations for ``torch.compile``
  (docs/torch.md).
* ``cudnn.ops.causal_conv1d``: the dense causal depthwise conv1d over cuDNN's C API (libcudnn_ext), with autograd;
  ``causal_conv1d_nwh`` (its NWH layout), ``b2b_causal_conv1d`` (the fused back-to-back block) and
  ``fft_causal_conv1d`` (long filters by FFT) likewise, as torch custom operators; ``causal_conv1d_update`` (the
  decode step, a CuTe DSL kernel in the official module) checks its call and refuses it.

Public names resolve on first attribute access, so importing ``cudnn_py.ops`` needs no torch. The internal op
families (a spec, lowering and float64 reference per family) are ``cudnn_py.families``, not this namespace.
"""
from __future__ import annotations

from ._lazy import lazy_getattr

_LAZY_EXPORTS: dict[str, tuple[str, str | None]] = {
    "norm": ("cudnn_py.ops.norm", None),
    "causal_conv1d": ("cudnn_py.ops.causal_conv1d", "causal_conv1d"),
    "causal_conv1d_nwh": ("cudnn_py.ops._causal_conv1d_nwh", "causal_conv1d_nwh"),
    "b2b_causal_conv1d": ("cudnn_py.ops._b2b_causal_conv1d", "b2b_causal_conv1d"),
    "causal_conv1d_update": ("cudnn_py.ops._causal_conv1d_update", "causal_conv1d_update"),
    "fft_causal_conv1d": ("cudnn_py.ops._fft_causal_conv1d", "fft_causal_conv1d"),
}

__all__ = list(_LAZY_EXPORTS)

__getattr__ = lazy_getattr(globals(), _LAZY_EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
