"""``cudnn.create_kernel_cache()``: one ``CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR`` shared by the graphs given it.

What it buys: cuDNN's runtime-compiled engines compile a kernel when an execution plan is finalized, which takes
from milliseconds to seconds. Every plan of a graph built with ``pygraph(kernel_cache=kc)`` gets
``EXECUTION_PLAN_KERNEL_CACHE``, so a later graph of the same structure (on cuDNN's dynamic-shape path: other
dims, same ops) finds its kernel in the cache and its ``build_plans()`` skips the compilation. ``serialize()``
writes the cache as JSON (cuDNN >= 9.10) and ``deserialize()`` loads one into an empty cache, e.g. in another
process. The classic module turns dynamic shapes on for a graph with a kernel cache, and so does ``pygraph``.

The descriptor is made when the first graph builds its operation graph: it is bound to that graph
(``KERNEL_CACHE_OPERATION_GRAPH``, cuDNN >= 9.5) and finalized once; later graphs attach the finalized cache to
their plans. A cache loaded from JSON is finalized at ``deserialize()`` (the header: the operation graph is
required "unless the descriptor is populated from CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION instead"), so a
JSON cuDNN refuses fails there, naming the cache, not at some later build. Before cuDNN sees it, the JSON is
checked against the schema of cuDNN's own output (``backend/json_check.py``: cuDNN crashes on some malformed
JSON); a refusal is a ``SerializedJSONError`` (a ``ValueError``) naming the field path.
"""
from __future__ import annotations

import logging
import threading

from .._generated.names import attr, desc
from ..errors import CudnnError, InvalidTypeError, InvalidValueError, PhaseError, UsageError
from .backend_json import read_json_attribute

# the descriptor layer, json_check and the version gates are imported by the calls that use them (not at import:
# reading `cudnn_py.pygraph` imports this module for its isinstance check)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..backend.descriptor import Descriptor

_log = logging.getLogger(__name__)

KIND = desc.KERNEL_CACHE_DESCRIPTOR
_JSON = attr.KERNEL_CACHE_JSON_REPRESENTATION
_OPERATION_GRAPH = attr.KERNEL_CACHE_OPERATION_GRAPH


class KernelCache:
    """The classic ``kernel_cache`` object (``serialize``, ``deserialize``; 1.32's ``size``, ``revision``)."""

    def __init__(self) -> None:
        from ..backend import versions

        versions.require(KIND, what="create_kernel_cache()")
        self._descriptor: Descriptor | None = None
        self._device: int | None = None  # the device of the graph that bound it (None: deviceless or not bound)
        self._lock = threading.Lock()  # two graphs building at once must not both bind it

    @property
    def descriptor(self) -> Descriptor | None:
        """The backend descriptor; None until the first graph binds it or ``deserialize()`` loads one."""
        return self._descriptor

    def bind(self, operation_graph: Descriptor, device: int | None) -> Descriptor:
        """The finalized cache for a graph's plans: made and bound to ``operation_graph`` the first time."""
        from ..backend import versions
        from ..backend.descriptor import Descriptor

        with self._lock:
            if self._device is not None and device is not None and device != self._device:
                raise InvalidValueError(f"kernel cache: it holds kernels loaded for device {self._device}; a graph "
                                        f"planned "
                                 f"for device {device} needs a kernel cache of its own")
            if self._descriptor is None:
                desc = Descriptor(KIND)
                if versions.available(_OPERATION_GRAPH):
                    desc.set(_OPERATION_GRAPH, operation_graph)
                desc.finalize()
                self._descriptor = desc
                _log.info("kernel cache #%d bound to operation graph #%d", desc.id, operation_graph.id)
            if device is not None:
                self._device = device
            return self._descriptor

    def serialize(self) -> str:
        """The cache as cuDNN's JSON (``KERNEL_CACHE_JSON_REPRESENTATION``, cuDNN >= 9.10)."""
        from ..backend import versions

        versions.require(_JSON, what="kernel_cache.serialize()")
        desc = self._descriptor
        if desc is None:
            raise PhaseError("kernel_cache.serialize(): the cache is empty and unbound; build a graph given "
                             "pygraph(kernel_cache=...) first (its build_operation_graph() binds the cache)")
        return read_json_attribute(desc, _JSON, "kernel_cache.serialize()")

    def deserialize(self, text: str) -> None:
        """Load a cache written by ``serialize()`` into this empty cache (cuDNN >= 9.10)."""
        from ..backend import json_check, versions
        from ..backend.descriptor import Descriptor

        versions.require(_JSON, what="kernel_cache.deserialize()")
        if isinstance(text, bytes):
            text = text.decode()
        if not isinstance(text, str):
            raise InvalidTypeError(f"kernel_cache.deserialize() takes the JSON string serialize() wrote, not "
                            f"{type(text).__name__}")
        if not text:
            raise InvalidValueError("kernel_cache.deserialize(): the JSON is empty")
        # checked against the schema of cuDNN's own kernel cache JSON first: cuDNN crashes on some malformed ones
        json_check.check_kernel_cache(text, "kernel_cache.deserialize(): kernel cache JSON")
        with self._lock:
            if self._descriptor is not None:
                raise UsageError("kernel_cache.deserialize(): this kernel cache is not empty (a graph bound it, or "
                                   "a JSON was loaded); deserialize into a new create_kernel_cache()")
            desc = Descriptor(KIND)
            desc.set(_JSON, text)
            try:
                desc.finalize()
            except CudnnError as e:
                raise InvalidValueError(f"kernel_cache.deserialize(): cuDNN refused the JSON: {e}") from e
            self._descriptor = desc

    def size(self) -> int:
        """The number of kernels in the cache (``KERNEL_CACHE_ENTRY_COUNT``, cuDNN >= 9.27); 0 while unbound."""
        return self._read_count(attr.KERNEL_CACHE_ENTRY_COUNT, "kernel_cache.size()")

    def revision(self) -> int:
        """Bumped whenever the cache changes (``KERNEL_CACHE_REVISION``, cuDNN >= 9.27); 0 while unbound."""
        return self._read_count(attr.KERNEL_CACHE_REVISION, "kernel_cache.revision()")

    def _read_count(self, attribute: str, what: str) -> int:
        from ..backend import versions

        versions.require(attribute, what=what)
        if self._descriptor is None:
            return 0
        return int(self._descriptor.get(attribute))

    def __repr__(self) -> str:
        state = "unbound" if self._descriptor is None else f"descriptor #{self._descriptor.id}"
        return f"<kernel_cache {state}>"


def create_kernel_cache() -> KernelCache:
    """Classic ``cudnn.create_kernel_cache()``: an empty cache to pass to ``pygraph(kernel_cache=...)``."""
    return KernelCache()
