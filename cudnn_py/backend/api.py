"""ctypes prototypes for the cuDNN graph/backend API, bound from the generated function table, and the one
place a failed status becomes an exception (:func:`error_for`).

``argtypes``/``restype`` are always set (a missing ``argtypes`` is how 64-bit pointers get truncated). Functions the
running library does not export (older than the header, e.g. ``cudnnGetExecutionPlanWorkspaceSize`` before 9.23)
stay unbound; :func:`function` raises :class:`~cudnn_py.errors.FeatureVersionError` for them, naming the version.
"""
from __future__ import annotations

import ctypes
import threading
from ctypes import POINTER, c_char_p, c_double, c_float, c_int, c_int32, c_int64, c_size_t, c_uint, c_void_p
from typing import Any

from .._generated.functions import FUNCTIONS
from .._generated.names import Status
from ..errors import ERROR_BY_CATEGORY, CudnnError, FeatureVersionError, InvalidValueError, status_name
from . import trace
from .loader import driver_library_missing, load_library, no_driver_hint

# The headers whose functions make up the backend API (the legacy ops/cnn/adv APIs are not bound).
BOUND_HEADERS = ("cudnn_graph.h",)

_CTYPES = {
    "None": None, "c_int": c_int, "c_uint": c_uint, "c_int32": c_int32, "c_int64": c_int64, "c_size_t": c_size_t,
    "c_float": c_float, "c_double": c_double, "c_void_p": c_void_p, "c_char_p": c_char_p,
}


def ctype(spelling: str) -> Any:
    """Resolve a ctype spelling of the generated table ("c_int64", "POINTER(c_void_p)", "None")."""
    if spelling.startswith("POINTER(") and spelling.endswith(")"):
        return POINTER(ctype(spelling[8:-1]))
    try:
        return _CTYPES[spelling]
    except KeyError:
        raise InvalidValueError(f"unknown ctype spelling {spelling!r} in the generated function table") from None


missing: dict[str, int] = {}  # function name -> the cuDNN version that added it (not exported by the loaded one)
_cdll: ctypes.CDLL | None = None  # set once bound: lib() is on every call path
_bind_lock = threading.Lock()


def bind(cdll: ctypes.CDLL) -> None:
    """Set argtypes/restype on every backend-API function the library exports."""
    global _cdll
    for name, (restype, args, header, since, _deprecated) in FUNCTIONS.items():
        if header not in BOUND_HEADERS:
            continue
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            missing[name] = since if since is not None else 0
            continue
        fn.restype = ctype(restype)
        fn.argtypes = [ctype(t) for _, t in args]
    _cdll = cdll


def lib() -> ctypes.CDLL:
    """The loaded library with prototypes bound (loads and binds it on first use)."""
    if _cdll is not None:
        return _cdll
    with _bind_lock:
        if _cdll is None:
            bind(load_library().cdll)
    assert _cdll is not None
    return _cdll


def function(name: str) -> Any:
    """A bound function, or FeatureVersionError when the running cuDNN does not export it."""
    cdll = lib()
    if name in missing:
        raise FeatureVersionError(f"backend function {name}", missing[name], load_library().version,
                                  "not exported by the loaded libcudnn")
    return getattr(cdll, name)


def get_last_error_string() -> str:
    """``cudnnGetLastErrorString``: the most recent error message of this thread (cleared on read)."""
    buf = ctypes.create_string_buffer(65535)
    lib().cudnnGetLastErrorString(buf, len(buf))
    return buf.value.decode(errors="replace")


def error_for(status: int, function: str, *, kind: str | None = None, attribute: str | None = None,
              detail: str = "") -> CudnnError:
    """The exception for a failed call, reading (and thereby clearing) the last error string now."""
    cls = ERROR_BY_CATEGORY.get(status // 1000 * 1000, CudnnError)
    message = get_last_error_string()
    # the status by its name in the headers' cudnnStatus_t (errors.status_name), not a number written here
    missing = status_name(status) == Status.SUBLIBRARY_LOADING_FAILED and driver_library_missing()
    hint = no_driver_hint() if missing else ""
    call = trace.begin("cudnnGetLastErrorString", after=function, message=message)  # reads the tracer once
    if call is not None:  # the backend's words for the failure, beside the failed call in the trace
        call.end(None)
    return cls(status, function, kind=kind, attribute=attribute, last_error=message, detail=detail, hint=hint)
