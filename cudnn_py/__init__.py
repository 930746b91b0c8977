"""cudnn_py: drive NVIDIA cuDNN's backend API from pure Python.

``import cudnn_py as cudnn`` runs code written for the classic ``cudnn`` module of nvidia-cudnn-frontend.
Importing needs no GPU, no torch and not even libcudnn: the library is loaded by the first call that needs it.

``import cudnn_py`` itself imports nothing of the package: every public name below is imported from its module the
first time it is read (``cudnn.pygraph``, ``cudnn.data_type``, ...), through the module ``__getattr__``, and then kept
as a plain attribute. ``tests/test_import_time.py`` checks which modules a bare import loads.
"""
from __future__ import annotations

import logging as _logging

TYPE_CHECKING = False  # typing is not imported for it (mypy reads any `TYPE_CHECKING` as true)

from ._version import __version__  # noqa: E402, F401  (the one place the version is written)

# public name -> the module (relative to this package) it comes from; "" for a submodule of this package
_LAZY: dict[str, str] = {
    "datatypes": "",  # 1.32's cudnn.datatypes
    "wrapper": ".facade",  # 1.32's cudnn.wrapper (a module; `import cudnn_py.wrapper` works too: cudnn_py/wrapper.py)
    **dict.fromkeys(["Handle", "backend_version", "backend_version_string", "create_handle", "destroy_handle",
                     "get_last_error_string", "get_stream", "set_stream"], ".backend"),
    "DeviceInfo": ".backend.device",
    # the C-API families outside the graph API (libcudnn_ext), under the official top-level names
    **dict.fromkeys(["causal_conv1d_forward", "causal_conv1d_backward", "causal_conv1d_nwh_forward",
                     "causal_conv1d_nwh_backward", "b2b_causal_conv1d_forward", "b2b_causal_conv1d_backward",
                     "fft_causal_conv1d_forward", "fft_causal_conv1d_backward",
                     "long_fft_causal_conv1d_get_buffer_sizes", "long_fft_causal_conv1d_forward",
                     "long_fft_causal_conv1d_backward"], ".backend.ext_subquadratic"),
    **dict.fromkeys(["gnn_agg_op", "gnn_activation_op", "gnn_agg_simple_forward", "gnn_agg_simple_backward",
                     "gnn_mha_gat_forward", "gnn_mha_gat_backward", "gnn_mha_gat_v2_forward",
                     "gnn_mha_gat_v2_backward"], ".backend.ext_gnn"),
    # the classic enums: data_type, heur_mode, reduction_mode, ... (cudnn_py.enums.__all__)
    **dict.fromkeys(["data_type", "tensor_reordering", "scalar_type", "reshape_mode", "knob_type",
                     "norm_forward_phase", "heur_mode", "reduction_mode", "build_plan_policy", "numerical_note",
                     "behavior_note", "diagonal_alignment", "attention_implementation", "moe_grouped_matmul_mode",
                     "cuda_graph_retention", "FRONTEND_KNOB_TYPE_BASE", "is_frontend_knob_type"], ".enums"),
    "cudnnGraphNotSupportedError": ".errors",
    **dict.fromkeys(["Graph", "GraphContext", "Node", "NodeType", "Tensor", "graph", "graph_cache", "jit", "pygraph",
                     "sdpa_capabilities", "tensor"], ".facade"),
    "create_device_properties": ".plans.device_properties",
    "create_kernel_cache": ".plans.kernel_cache",
    "knob": ".plans.session",
}
# 1.32's lazy exports of optional dependencies: public name -> (module, attribute). Not in __all__ (a star import
# must not import torch); a missing dependency is an ImportError saying so.
_OPTIONAL: dict[str, tuple[str, str]] = {
    "sdpa_torch": ("cudnn_py.torch.sdpa_ops", "sdpa"),  # defines torch.ops.cudnn_py.sdpa_fwd / sdpa_bwd
}
_ALIASES = {"handle": "Handle"}  # 1.32's alias, for annotations naming `cudnn.handle`

__all__ = sorted([*_LAZY, *_ALIASES])


# the package's own modules and subpackages, importable by attribute (``cudnn_py.backend.default_handle()``)
_SUBMODULES = frozenset({"backend", "collect_env", "dtypes", "engines", "enums", "errors", "experimental", "facade",
                         "families", "gemm", "gnn", "interop", "ir", "lowering", "ops", "plans", "torch", "yarn"})


def __getattr__(name: str) -> Any:
    target = _ALIASES.get(name, name)
    import importlib

    if target in _OPTIONAL:
        module_name, attr = _OPTIONAL[target]
        try:
            value = getattr(importlib.import_module(module_name), attr)
        except ImportError as error:  # (what is missing is said; never an AttributeError)
            raise ImportError(f"{name} requires the 'torch' module, which could not be imported. Install a "
                              f"CUDA-enabled torch build: {error}") from error
        globals()[name] = value
        return value
    if target not in _LAZY:
        if name in _SUBMODULES:  # cudnn_py.backend.X without importing cudnn_py.backend first, as before
            try:
                module = importlib.import_module("." + name, __name__)
            except ModuleNotFoundError as e:  # cudnn.gnn without torch: the official's lazy export's ImportError
                if not e.name or e.name.split(".")[0] == __name__:
                    raise
                raise ImportError(f"{name} requires the {e.name!r} module, which is not installed. Install a "
                                  f"CUDA-enabled torch build: {e}") from e
            globals()[name] = module
            return module
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    source = _LAZY[target]
    if source:
        value = getattr(importlib.import_module(source, __name__), target)
    else:
        value = importlib.import_module("." + target, __name__)
    globals()[name] = value  # the next read is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what the names are, for type checkers and IDEs (never imported at run time from here)
    from typing import Any

    from . import datatypes as datatypes
    from .backend import (  # noqa: F401
                          Handle,
                          backend_version,
                          backend_version_string,
                          create_handle,
                          destroy_handle,
                          get_last_error_string,
                          get_stream,
                          set_stream,
    )
    from .backend.device import DeviceInfo  # noqa: F401
    from .enums import *  # noqa: F403
    from .errors import cudnnGraphNotSupportedError  # noqa: F401
    from .facade import (  # noqa: F401
                          Graph,
                          GraphContext,
                          Node,
                          NodeType,
                          Tensor,
                          graph,
                          graph_cache,
                          jit,
                          pygraph,
                          sdpa_capabilities,
                          tensor,
                          wrapper,
    )
    from .plans.device_properties import create_device_properties  # noqa: F401
    from .plans.kernel_cache import create_kernel_cache  # noqa: F401
    from .plans.session import knob  # noqa: F401

    handle = Handle

# The `cudnn_py` logger (and its per-module children) is silent unless the application configures logging:
# graph builds and their times, heuristics results, plan choices, cache hits and misses, workspace allocations.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())
