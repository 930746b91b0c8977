"""ctypes prototypes for the cuDNN graph/backend API, bound from the generated function table.

``argtypes``/``restype`` are always set (a missing ``argtypes`` is how 64-bit pointers get truncated). Functions the
running library does not export (older than the header, e.g. ``cudnnGetExecutionPlanWorkspaceSize`` before 9.23)
stay unbound and raise a clear error on use, instead of failing at load time.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_double, c_float, c_int, c_int32, c_int64, c_size_t, c_uint, c_void_p
from typing import Any

from .._generated.functions import FUNCTIONS

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
        raise ValueError(f"unknown ctype spelling {spelling!r} in the generated function table") from None


missing: dict[str, str] = {}  # function name -> why it is unbound
_cdll: ctypes.CDLL | None = None  # set once the loader has bound it: lib() is on every call path


def bind(cdll: ctypes.CDLL) -> None:
    """Set argtypes/restype on every backend-API function the library exports."""
    global _cdll
    for name, (restype, args, header, since, _deprecated) in FUNCTIONS.items():
        if header not in BOUND_HEADERS:
            continue
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            missing[name] = f"not exported by this libcudnn (added in cuDNN {since // 10000}.{since % 10000 // 100})"
            continue
        fn.restype = ctype(restype)
        fn.argtypes = [ctype(t) for _, t in args]
    _cdll = cdll


def lib() -> ctypes.CDLL:
    """The loaded library with prototypes bound (loads it on first use)."""
    if _cdll is not None:
        return _cdll
    from .loader import load_library

    return load_library().cdll


def function(name: str) -> Any:
    """A bound function, or a clear error when the running cuDNN lacks it."""
    cdll = lib()
    if name in missing:
        from .loader import load_library

        raise NotImplementedError(f"{name} is {missing[name]}; the loaded cuDNN is {load_library().version_string}")
    return getattr(cdll, name)


def get_last_error_string() -> str:
    """``cudnnGetLastErrorString``: the most recent error message of this thread (cleared on read)."""
    buf = ctypes.create_string_buffer(65535)
    lib().cudnnGetLastErrorString(buf, len(buf))
    return buf.value.decode(errors="replace")

