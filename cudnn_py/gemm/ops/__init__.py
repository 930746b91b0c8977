"""``cudnn.gemm.ops``: the official module's GEMM operator contracts (torch custom operators).

    import cudnn_py as cudnn
    out = cudnn.gemm.ops.moe_grouped_matmul(token, weight, first_token_offset, token_index=None, token_ks=None,
                                            mode="none", top_k=1)

Only ``moe_grouped_matmul`` is built (:mod:`.moe_grouped_matmul`); ``swiglu_mlp``, ``situ_mlp`` and ``swiglu_moe``
raise ImportError saying they are not built yet. The implementation modules import torch, so the public names
resolve on first access: importing this package needs no torch.
"""
from __future__ import annotations

import sys
import types
from typing import Any

from ...ops._lazy import lazy_getattr

_LAZY_EXPORTS: dict[str, tuple[str, str | None]] = {
    "moe_grouped_matmul": ("cudnn_py.gemm.ops.moe_grouped_matmul", "moe_grouped_matmul"),
    "situ_mlp": ("cudnn_py.gemm.ops.swiglu_mlp", "situ_mlp"),
    "swiglu_mlp": ("cudnn_py.gemm.ops.swiglu_mlp", "swiglu_mlp"),
    "swiglu_moe": ("cudnn_py.gemm.ops.swiglu_moe", "swiglu_moe"),
}

__all__ = list(_LAZY_EXPORTS)

__getattr__ = lazy_getattr(globals(), _LAZY_EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """Importing submodule ``moe_grouped_matmul`` (as ``cudnn.experimental.ops`` does) makes the import machinery
    set this package's attribute of that name to the module; the public name stays the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        target = _LAZY_EXPORTS.get(name)
        if isinstance(value, types.ModuleType) and target is not None and target[0] == value.__name__ \
                and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
