"""cudnn_py: drive NVIDIA cuDNN's backend API from pure Python.

``import cudnn_py as cudnn`` runs code written for the classic ``cudnn`` module of nvidia-cudnn-frontend.
Importing needs no GPU, no torch and not even libcudnn: the library is loaded by the first call that needs it.
"""
import logging as _logging
import sys as _sys

from . import datatypes  # noqa: F401  (1.32's cudnn.datatypes)
from ._version import __version__  # noqa: F401  (the classic cudnn.__version__ attribute)
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
from .enums import *  # noqa: F403  (the classic enums: data_type, heur_mode, reduction_mode, ...)
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

handle = Handle  # 1.32's alias, for annotations naming `cudnn.handle`
wrapper.cudnn = _sys.modules[__name__]  # 1.32's cudnn.wrapper exports the module it belongs to as `cudnn`
_sys.modules[__name__ + ".wrapper"] = wrapper  # `import cudnn_py.wrapper` / `from cudnn_py.wrapper import Graph`

# The `cudnn_py` logger (and its per-module children) is silent unless the application configures logging:
# graph builds and their times, heuristics results, plan choices, cache hits and misses, workspace allocations.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())
