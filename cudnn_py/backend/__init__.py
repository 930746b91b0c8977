"""The raw layer: the library loader, ctypes prototypes, typed descriptors, errors, handles and tracing.

Everything here maps 1:1 onto the cuDNN backend C API; the graph IR and planning are built on top of it.
"""
from .descriptor import Descriptor, attribute_spec
from .enums import CEnum, enum_class, member
from .errors import (BadParamError, CudnnError, DescriptorError, ExecutionFailedError, InternalError,
                     NotInitializedError, NotSupportedError, UnsupportedAttributeError, status_name)
from .handle import Handle, create_handle, default_handle, destroy_handle, get_stream, set_stream
from .loader import CudnnLibraryNotFoundError, CudnnVersionError, load_library
from .trace import tracing
from .api import get_last_error_string


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
    "Descriptor", "attribute_spec", "CEnum", "enum_class", "member", "BadParamError", "CudnnError", "DescriptorError",
    "ExecutionFailedError", "InternalError", "NotInitializedError", "NotSupportedError", "UnsupportedAttributeError",
    "status_name", "Handle", "create_handle", "default_handle", "destroy_handle", "get_stream", "set_stream",
    "CudnnLibraryNotFoundError", "CudnnVersionError", "load_library", "tracing", "get_last_error_string",
    "backend_version", "backend_version_string", "cudart_version",
]
