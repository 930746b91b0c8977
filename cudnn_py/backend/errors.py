"""Exceptions for backend failures, one class per ``CUDNN_STATUS_CATEGORY`` (status // 1000 * 1000).

Every backend error carries the status name, the C function, the descriptor kind and attribute involved (C names)
and ``cudnnGetLastErrorString()`` captured right after the failing call (it is cleared on read). They subclass
``RuntimeError``, which is what the classic module raises for backend failures. Misuse caught in Python before
any backend call (wrong type, count or descriptor kind, destroyed descriptor, attribute newer than the library)
raises :class:`DescriptorError`, a ``ValueError``.
"""
from __future__ import annotations

from functools import lru_cache

from .._generated.enums import ENUMS
from .._generated.status import STATUS_TEXT


@lru_cache(maxsize=None)
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


class CudnnError(RuntimeError):
    """A cuDNN call returned a non-success status."""

    def __init__(self, status: int, function: str, *, kind: str | None = None, attribute: str | None = None,
                 last_error: str = "", detail: str = ""):
        self.status = status
        self.status_name = status_name(status)
        self.function = function
        self.kind = kind
        self.attribute = attribute
        self.last_error = last_error
        self.detail = detail
        super().__init__(self._message())

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


_BY_CATEGORY = {1000: NotInitializedError, 2000: BadParamError, 3000: NotSupportedError, 4000: InternalError,
                5000: ExecutionFailedError}


def error_for(status: int, function: str, *, kind: str | None = None, attribute: str | None = None,
              detail: str = "") -> CudnnError:
    """Build the exception for a failed call, reading (and thereby clearing) the last error string now."""
    from .api import get_last_error_string

    cls = _BY_CATEGORY.get(status // 1000 * 1000, CudnnError)
    return cls(status, function, kind=kind, attribute=attribute, last_error=get_last_error_string(), detail=detail)


class DescriptorError(ValueError):
    """Misuse of a descriptor caught before reaching the backend (which may crash on some of it)."""


class UnsupportedAttributeError(DescriptorError):
    """The attribute (or descriptor kind) is newer than the running cuDNN."""


class CudaUnavailableError(RuntimeError):
    """No usable CUDA driver or device: handles, plans and execution need a GPU."""
