"""cudnn_py: drive NVIDIA cuDNN's backend API from pure Python.

``import cudnn_py as cudnn`` runs code written for the classic ``cudnn`` module of nvidia-cudnn-frontend.
Importing needs no GPU, no torch and not even libcudnn: the library is loaded by the first call that needs it.
"""
__version__ = "0.1.0"

from .backend import (backend_version, backend_version_string, create_handle, destroy_handle,
                      get_last_error_string, get_stream, set_stream)

try:  # the graph layer (IR, classic enums) — see cudnn_py/graph
    from .enums import *  # noqa: F401,F403
    from .enums import data_type  # noqa: F401
    from .graph import pygraph, tensor, cudnnGraphNotSupportedError  # noqa: F401
except ImportError as _e:  # pragma: no cover - only while the graph layer is being written
    if "cudnn_py.enums" not in str(_e) and "cudnn_py.graph" not in str(_e) and "cannot import" not in str(_e):
        raise
