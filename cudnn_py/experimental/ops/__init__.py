"""``cudnn.experimental.ops``: the official module's lazy aliases of operators implemented with their families.

Reading a name imports its implementation module (so importing this package needs no torch) and keeps the value;
the module is also registered as ``cudnn_py.experimental.ops.<name>``, as the official module does. A name whose
implementation is missing raises ImportError saying what is missing (torch, or an operator cudnn_py has not built
yet: ``moe_grouped_matmul`` and ``swiglu_mlp`` for now), never AttributeError.
"""
from __future__ import annotations

import sys
from typing import Any

from ...ops._lazy import import_export

# public name -> the module that implements it (the attribute of the same name)
_LAZY_ALIASES = {
    "moe_grouped_matmul": "cudnn_py.gemm.ops.moe_grouped_matmul",
    "swiglu_mlp": "cudnn_py.gemm.ops.swiglu_mlp",
    "rms_norm": "cudnn_py.ops.norm.rmsnorm",
    "layer_norm": "cudnn_py.ops.norm.layernorm",
}

__all__ = list(_LAZY_ALIASES)


def __getattr__(name: str) -> Any:
    target = _LAZY_ALIASES.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = import_export(name, target, None)
    value = import_export(name, target, name)
    sys.modules[f"{__name__}.{name}"] = module
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
