"""Every exception cudnn_py raises, in one module that every layer may import (it imports only the generated
status table).

The classic module maps failures onto three Python types, and so do we:

* ``ValueError`` - bad attributes, shapes, tensor names, variant packs (:class:`DescriptorError` and the
  IR's shape errors are ValueErrors);
* :class:`cudnnGraphNotSupportedError` - no engine or plan supports the graph, or the running cuDNN / GPU is too
  old for a feature (:class:`FeatureVersionError`);
* ``RuntimeError`` - everything else: backend call failures (:class:`CudnnError` by status category), misuse
  such as mutating a frozen graph, a call out of phase.
"""
from __future__ import annotations

import contextlib
import os
import sys
from functools import cache

from ._generated.enums import ENUMS
from ._generated.status import STATUS_TEXT


class CudnnPyError(Exception):
    """The root of every exception cudnn_py raises on purpose (``except CudnnPyError`` catches them all). Each one
    is also of the classic type a caller of the official module catches for its kind of problem (ValueError,
    TypeError, RuntimeError, NotImplementedError), except :class:`cudnnGraphNotSupportedError`, which is an
    Exception only, as the pybind original is."""


class InvalidValueError(CudnnPyError, ValueError):
    """A value, shape, layout or combination refused (the classic module's ValueError)."""


class InvalidTypeError(CudnnPyError, TypeError):
    """An argument of a type cudnn_py does not take (strings and floats are refused, never converted)."""


class UsageError(CudnnPyError, RuntimeError):
    """A call the object's state forbids: mutating a frozen graph, a destroyed handle, and the like."""


class cudnnGraphNotSupportedError(CudnnPyError):
    """No engine or execution plan supports the graph, or the official module does not support the configuration
    (a subclass of Exception and of cudnn_py's root only, like the pybind original)."""


def version_parts(version: int) -> tuple[int, int, int]:
    """cuDNN's integer version as (major, minor, patch): MAJOR*10000 + MINOR*100 + PATCH since cuDNN 9, and
    MAJOR*1000 + MINOR*100 + PATCH before (8907 is 8.9.7: every cuDNN 9 version is at least 90000)."""
    if 0 < version < 10000:
        return version // 1000, version % 1000 // 100, version % 100
    return version // 10000, version % 10000 // 100, version % 100


def version_string(version: int) -> str:
    """cuDNN's integer version as "M.m.p" (8907 -> "8.9.7", 92800 -> "9.28.0")."""
    return "{}.{}.{}".format(*version_parts(version))


class FeatureVersionError(cudnnGraphNotSupportedError):
    """A feature needs a newer cuDNN than the one loaded. ``feature`` names it (an attribute, a descriptor kind,
    a backend function, an op), ``needed`` and ``loaded`` are integer versions."""

    def __init__(self, feature: str, needed: int, loaded: int, detail: str = ""):
        self.feature, self.needed, self.loaded = feature, needed, loaded
        msg = f"{feature} needs cuDNN {version_string(needed)} or newer; the loaded cuDNN is {version_string(loaded)}"
        super().__init__(msg + (f" ({detail})" if detail else ""))


class CApiUnavailableError(FeatureVersionError, RuntimeError):
    """A C-API function outside the graph API (libcudnn_ext: causal conv1d, the FFT convolutions, the GNN ops) that
    the loaded cuDNN does not have: a :class:`FeatureVersionError`, and a RuntimeError as the official bindings'
    refusal of a function missing from the loaded library is. Where the loaded version is new enough and the
    function is missing all the same (no libcudnn_ext beside it, a symbol it does not export), the message says
    that, not a version to upgrade to."""

    def __init__(self, feature: str, needed: int, loaded: int, detail: str = ""):
        if loaded < needed:
            super().__init__(feature, needed, loaded, detail)
            return
        self.feature, self.needed, self.loaded = feature, needed, loaded
        said = f"{feature} is not available in the loaded cuDNN {version_string(loaded)}"
        # (FeatureVersionError's own message skipped, its bases' init run)
        super(FeatureVersionError, self).__init__(said + (f": {detail}" if detail else ""))


@cache
def _status_names() -> dict[int, str]:
    names: dict[int, str] = {}
    members = ENUMS["cudnnStatus_t"]
    for name, value, _since, deprecated in members:  # current names first, deprecated aliases only as fallback
        if not deprecated:
            names.setdefault(value, name)
    for name, value, _since, _deprecated in members:
        names.setdefault(value, name)
    return names


def status_name(status: int) -> str:
    return _status_names().get(status, f"CUDNN_STATUS_UNKNOWN_{status}")


class CudnnError(CudnnPyError, RuntimeError):
    """A cuDNN call returned a non-success status. Carries the status, the C function, the descriptor kind and
    attribute involved (C names) and ``cudnnGetLastErrorString()`` captured right after the call; ``hint``, where
    the cause is known (no driver library for the sub-libraries), is the message's first sentence."""

    def __init__(self, status: int, function: str, *, kind: str | None = None, attribute: str | None = None,
                 last_error: str = "", detail: str = "", hint: str = ""):
        self.status = status
        self.status_name = status_name(status)
        self.function = function
        self.kind = kind
        self.attribute = attribute
        self.last_error = last_error
        self.detail = detail
        self.hint = hint
        super().__init__(f"{hint} ({self._message()})" if hint else self._message())

    def _message(self) -> str:
        where = " ".join(x for x in (self.kind, self.attribute) if x)
        msg = f"{self.function}({where}) failed: {self.status_name} ({self.status})" if where else \
            f"{self.function} failed: {self.status_name} ({self.status})"
        if self.detail:
            msg += f"; {self.detail}"
        if self.last_error:
            msg += f"; cuDNN says: {self.last_error}"
        text = STATUS_TEXT.get(self.status_name, "")
        if text:
            msg += f" [{text}]"
        return msg


class NotInitializedError(CudnnError):
    """1xxx: the library or a descriptor is not initialised, or sub-library/version problems."""


class BadParamError(CudnnError):
    """2xxx: an argument or attribute value was rejected."""


class NotSupportedError(CudnnError):
    """3xxx: the configuration is valid but no implementation supports it."""


class InternalError(CudnnError):
    """4xxx: internal failure (allocation, compilation, ...)."""


class ExecutionFailedError(CudnnError):
    """5xxx: a kernel or CUDA call failed during execution."""


ERROR_BY_CATEGORY: dict[int, type[CudnnError]] = {
    1000: NotInitializedError, 2000: BadParamError, 3000: NotSupportedError, 4000: InternalError,
    5000: ExecutionFailedError,
}


class DescriptorError(InvalidValueError):
    """Misuse of a descriptor caught before reaching the backend (which may crash on some of it)."""


class SerializedJSONError(DescriptorError):
    """A serialized document (kernel cache, execution plan or device properties JSON, a serialized plan, a trace)
    that does not match what cuDNN / cudnn_py write; the message names the document and the field path. Refused
    before the backend reads it (cuDNN crashes on some malformed JSON)."""


class UnsupportedAttributeError(DescriptorError, FeatureVersionError):
    """An attribute, descriptor kind or enum member newer than the running cuDNN: both a ValueError (the descriptor
    was misused) and a cudnnGraphNotSupportedError (the feature needs another cuDNN)."""

    def __init__(self, feature: str, needed: int, loaded: int, detail: str = ""):
        FeatureVersionError.__init__(self, feature, needed, loaded, detail)


class CudaUnavailableError(CudnnPyError, RuntimeError):
    """No usable CUDA driver or device: handles, plans and execution need a GPU."""


class NoCudaDeviceError(CudaUnavailableError, NotImplementedError):
    """No CUDA device is visible (no cuda.bindings, no driver, or ``cuInit`` failed) where a device's facts are read:
    a :class:`CudaUnavailableError`, and a NotImplementedError as 1.32's ``DeviceInfo`` raises in this case."""


class CudaDriverError(CudnnPyError, RuntimeError):
    """A CUDA driver call failed (its CUresult in the message)."""


class CudnnLibraryNotFoundError(CudnnPyError, RuntimeError):
    """libcudnn could not be loaded; the message lists every place searched and why each failed."""


class CudnnVersionError(CudnnPyError, RuntimeError):
    """The loaded libcudnn is too old for cudnn_py at all, or its sub-libraries disagree on their version."""


class FileRefusedError(CudnnPyError, OSError):
    """A file cudnn_py was given or keeps that is there but is not read (``cudnn_py/bounded_read.py``): not a
    regular file (a FIFO, a device, a directory), a symbolic link where none is followed, or larger than the cap of
    what it is read as. An OSError, as ``open()``'s own refusals are (``except OSError`` catches every reason a file
    cannot be read): ``errno`` EINVAL / ELOOP / EFBIG, ``strerror`` the reason (also its ``str()``: the caller
    names the file), ``filename`` the path, ``st`` its stat when it was looked at."""

    def __init__(self, code: int, reason: str, path: str, st: os.stat_result | None = None):
        super().__init__(code, reason, path)
        self.st = st

    def __str__(self) -> str:
        return str(self.strerror)


class PhaseError(UsageError):
    """A planning call made before the phase it needs (e.g. ``build_plans()`` before ``create_execution_plans()``)."""


class NotImplementedOptionError(CudnnPyError, NotImplementedError):
    """An option the classic API accepts that cudnn_py does not implement yet: refused instead of ignored."""


def shape_error(op: str, node: str, tensor: object, message: str) -> InvalidValueError:
    """A ValueError that names the op, the node and the tensor (name and uid), so a failing build says where to look."""
    name = getattr(tensor, "name", None)
    uid = getattr(tensor, "uid", "?")
    label = f"{name!r} (uid {uid})" if name else f"uid {uid}"
    return InvalidValueError(f"{op} node {node!r}: tensor {label}: {message}")


def not_supported(op: str, node: str, message: str, tensor: object = None) -> cudnnGraphNotSupportedError:
    """A configuration the official module does not support: the frontend's GRAPH_NOT_SUPPORTED, which its
    ``validate()`` raises as ``cudnnGraphNotSupportedError`` (callers catch it to skip or fall back). Names the op,
    the node and, where one tensor is at fault, the tensor."""
    where = f"{op} node {node!r}"
    if tensor is not None:
        name, uid = getattr(tensor, "name", None), getattr(tensor, "uid", "?")
        where += f": tensor {name!r} (uid {uid})" if name else f": tensor uid {uid}"
    return cudnnGraphNotSupportedError(f"{where}: {message}")


def frozen_error(what: str) -> UsageError:
    return UsageError(
        f"cannot {what}: the graph is frozen after planning (create_execution_plans) - build a new graph to change it"
    )


def warn_quietly(message: str, category: type[Warning] = RuntimeWarning) -> None:
    """``warnings.warn`` at the caller's caller, which must not raise even where warnings are turned into errors
    (a tracer or a log that cannot write must never break the traced or logged call): stderr then, or nothing."""
    import warnings

    try:
        warnings.warn(message, category, stacklevel=3)
    except Exception:
        with contextlib.suppress(Exception):
            sys.stderr.write(f"{category.__name__}: {message}\n")

