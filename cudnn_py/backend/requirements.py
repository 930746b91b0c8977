"""What a descriptor needs before ``finalize()``, which reads cuDNN cannot answer, and the raw-layer errata.

Checked by :class:`~cudnn_py.backend.descriptor.Descriptor` before it calls the backend. The tables keyed by names
(``REQUIRED``, ``BACKEND_FILLED_KINDS``, ``GRAPH_MODE_NEEDS``, ``GET_CRASHES_WHEN_UNSET``, ``GET_CRASHES_ALWAYS``,
``FILLED_FROM_JSON``, ``NONFINITE_ALLOWED``, ``HOST_POINTER_ATTRIBUTES``) are data of the generated catalog: written
by hand in ``bindings/requirements.json``, each entry with its source, and generated into
``cudnn_py/_generated/requirements.py`` (``python bindings/generate.py``), which checks every attribute, descriptor
kind and graph mode against the pinned headers and every required attribute against its kind in the attribute
catalog. Every entry says where it comes from:

* ``header``: the descriptor's doc block in ``bindings/headers/9.28.0/cudnn_graph.h`` ("Required attribute.",
  "This attribute is required.", "Required to be set before finalization.");
* ``schema``: the attribute types of the 9.28 headers, cross-checked live on cuDNN 9.28 (set, finalize, get back);
  ``flow``: the official cudnn-frontend's backend calls (github.com/NVIDIA/cudnn-frontend, 1.23);
* ``probe``: what cuDNN 9.28 did when the attribute was left out, run in a child process on the CPU (with the test
  libcuda stub): SIGSEGV / SIGABRT (the reason the check exists), or a silent success with a made-up value.

The header also calls some attributes required that cuDNN and the frontend do without; those are left out, and
the reason is written next to the descriptor (deprecated handles, mode-dependent norm inputs).

A :class:`Requirement` is met when at least one of its attributes was set through the ``Descriptor`` object; one
with ``when`` only applies once that attribute is set. Attributes the loaded library does not have are skipped
(a requirement made only of such attributes does not apply). This module keeps the two hand-written pieces: the
smallest plausible host address and the raw-layer errata.
"""
from __future__ import annotations

from .._generated.requirements import (
    BACKEND_FILLED_KINDS,
    FILLED_FROM_JSON,
    GET_CRASHES_ALWAYS,
    GET_CRASHES_WHEN_UNSET,
    GRAPH_MODE_NEEDS,
    HOST_POINTER_ATTRIBUTES,
    NONFINITE_ALLOWED,
    REQUIRED,
    Requirement,
)

__all__ = [
    "BACKEND_FILLED_KINDS", "FILLED_FROM_JSON", "GET_CRASHES_ALWAYS", "GET_CRASHES_WHEN_UNSET", "GRAPH_MODE_NEEDS",
    "HOST_POINTER_ATTRIBUTES", "MIN_HOST_ADDRESS", "NONFINITE_ALLOWED", "RAW_ERRATA", "REQUIRED", "Requirement",
]

# Host pointers cuDNN dereferences during the Set itself (HOST_POINTER_ATTRIBUTES): an int given for one must at
# least be a plausible address. Linux never maps the first 64 KiB (vm.mmap_min_addr), so a smaller value is certainly
# not one — e.g. a scalar passed where its address belongs (probe: CONSTANT_VALUE = 3 is a SIGSEGV in the Set).
MIN_HOST_ADDRESS = 1 << 16

# Raw-layer errata: cuDNN 9.28 crashes on input that is legal (or that cudnn_py cannot tell from legal), and no
# check here can prevent it. The graph-level errata are in cudnn_py/plans/errata.py.
RAW_ERRATA: tuple[tuple[str, str], ...] = (
    ("CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC on a descriptor cuDNN filled in",
     "Get of an unset ragged offset is a SIGSEGV, and a copy read back with get() does not say whether its original "
     "had one: the read is refused on such copies even when the original had a ragged offset (read it from the "
     "tensor you built)."),
    ("VOID_PTR addresses",
     "VARIANT_PACK_DATA_POINTERS / WORKSPACE and TENSOR_CONSTANT_VALUE are addresses cuDNN dereferences (at execute, "
     "or during the Set for CONSTANT_VALUE). cudnn_py checks they are pointer values (and not Descriptors, nor "
     "values below 64 KiB for host pointers), not that they point at live memory of the right size: a stale or "
     "wrong address still crashes. Give CONSTANT_VALUE a ctypes scalar instead of an int to have its size checked "
     "against the tensor's data type."),
    ("adopt_handle",
     "an adopted handle is taken on the caller's word; a pointer that is not a live cudnnHandle_t crashes wherever "
     "cuDNN uses it. cuDNN can also hand out a destroyed handle's address again: a stale Handle object equal to a "
     "new handle's address is indistinguishable from it."),
    ("VARIANT_PACK_OVERRIDE_SHAPES / STRIDES",
     "cuDNN reads arrayOfElements as a C++ std::vector<std::vector<int64_t>>* — an ABI, not a C type. cudnn_py "
     "builds that layout (three pointers: begin, end, end of storage; libstdc++ and libc++ on 64-bit Linux) from "
     "rows of ints; a cuDNN built against another C++ library layout would misread it."),
    ("an explicit CUDNN_ATTR_OPERATIONGRAPH_MODE",
     "only the presence of an operation of the mode's family is checked (GRAPH_MODE_NEEDS); a graph that has one "
     "but does not match the mode's pattern in another way is the backend's to reject, and the header warns that "
     "a wrong mode fails 'during plan creation or execution' — which could not be probed without a GPU."),
)
