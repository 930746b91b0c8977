"""The raw layer: the library loader, ctypes prototypes, typed descriptors, version gates, handles and tracing.

Everything here maps 1:1 onto the cuDNN backend C API; the graph IR and planning are built on top of it. The
exceptions live in :mod:`cudnn_py.errors` and are re-exported here for convenience.
"""
from ..errors import (
    BadParamError,
    CudaUnavailableError,
    CudnnError,
    CudnnLibraryNotFoundError,
    CudnnVersionError,
    DescriptorError,
    ExecutionFailedError,
    FeatureVersionError,
    InternalError,
    NotInitializedError,
    NotSupportedError,
    UnsupportedAttributeError,
    status_name,
)
from .api import error_for, get_last_error_string
from .descriptor import Descriptor, attribute_spec
from .enums import CEnum, enum_class, member
from .handle import Handle, create_handle, default_handle, destroy_handle, get_stream, set_stream
from .loader import load_library
from .trace import tracing
from .versions import available, require, runtime_version, since


def backend_version() -> int:
    """``cudnnGetVersion()`` of the loaded library, e.g. 92800."""
    return load_library().version


def backend_version_string() -> str:
    """The loaded library's version as "M.m.p", e.g. "9.28.0"."""
    return load_library().version_string


def cudart_version() -> int:
    """``cudnnGetCudartVersion()``: the CUDA runtime version the loaded cuDNN was built with."""
    return load_library().cudart_version


__all__ = [
    "Descriptor", "attribute_spec", "CEnum", "enum_class", "member", "BadParamError", "CudaUnavailableError",
    "CudnnError", "CudnnLibraryNotFoundError", "CudnnVersionError", "DescriptorError", "ExecutionFailedError",
    "FeatureVersionError", "InternalError", "NotInitializedError", "NotSupportedError", "UnsupportedAttributeError",
    "status_name", "error_for", "Handle", "create_handle", "default_handle", "destroy_handle", "get_stream",
    "set_stream", "load_library", "tracing", "get_last_error_string", "available", "require", "runtime_version",
    "since", "backend_version", "backend_version_string", "cudart_version",
]
