"""The registry of live Descriptors (``_live``: pointer -> a weak reference) and their destruction.

Ownership: a descriptor is destroyed exactly once — by ``destroy()``, by leaving a ``with`` block, or when it is
garbage-collected. At interpreter exit the remaining ones are left to the OS: by then the CUDA context they may
reference can already be gone, and destroying into it is how teardown crashes happen.
"""
from __future__ import annotations

import atexit
import itertools
import weakref

from . import trace
from .api import lib

_ids = itertools.count(1)  # Descriptor.id


def _destroy_ptr(ptr: int, kind: str, desc_id: int) -> None:
    call = None if trace.active is None else trace.begin("cudnnBackendDestroyDescriptor", desc=desc_id, kind=kind)
    status = lib().cudnnBackendDestroyDescriptor(ptr)
    if call is not None:
        call.end(status)


class _Owner(weakref.ref):
    """The registry's weak reference to a live Descriptor (``_live``: pointer -> this): when the Descriptor is
    garbage-collected its callback destroys the backend descriptor. A reference costs a fraction of what
    ``weakref.finalize`` plus a ``WeakValueDictionary`` entry did (4.4 µs per descriptor; lowering an attention
    backward makes about 70)."""

    __slots__ = ("ptr", "kind", "desc_id")  # set right after it is made: _Owner(descriptor, _collected)
    ptr: int
    kind: str
    desc_id: int


_exiting = False  # set at interpreter exit: what remains is left to the OS (see the module docstring)


def _at_exit() -> None:
    global _exiting
    _exiting = True


atexit.register(_at_exit)


def _collected(ref: _Owner) -> None:
    """A Descriptor was garbage-collected without destroy(): destroy its backend descriptor (not at exit)."""
    if _exiting or _live.get(ref.ptr) is not ref:
        return
    del _live[ref.ptr]
    try:
        _destroy_ptr(ref.ptr, ref.kind, ref.desc_id)
    except Exception:  # a collection callback must not raise (a library unloaded under it, say)
        pass


_live: dict[int, _Owner] = {}  # every live Descriptor, by pointer (a weak reference: see _Owner)


def _desc_id_by_ptr(ptr: int | None) -> int | None:
    ref = _live.get(ptr or 0)
    return ref.desc_id if ref is not None else None
