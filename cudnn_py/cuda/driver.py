"""The two ways cudnn_py reaches the CUDA driver, each function reached one way only.

* :func:`bindings` - cuda.bindings' ``driver`` module: every driver call of cudnn_py (contexts, devices, stream
  capture, ``DeviceInfo``) except those listed below.
* :func:`raw` - ``libcuda.so.1`` through ctypes, with :func:`typed` giving entry points their prototypes. Two
  uses, each with its reason:

  - ``cuGraphLaunch`` (``capture.py``; the execute hot path launches a recorded execute with it): one launch per
    replayed execute, whose stream is an int read from the handle at every call. Measured on the CPU machine
    (``benchmarks/driver_calls.py --stand-in``: a libcuda whose entry points return at once, so only the binding
    is timed; 2-core Xeon, median of 7 x 200k calls, 2026-12): ctypes with int arguments 0.20-0.22 us a call,
    cuda.bindings 0.31-0.34 us (it builds a ``CUstream`` and a ``CUgraphExec`` from the ints), 0.21-0.23 us with
    both objects made beforehand (the stream cannot be: it is read per call). The other two calls of the hot
    path went to cuda.bindings on the same measurement: ``cuCtxGetCurrent`` 0.14-0.17 us there against
    0.20-0.22 us through ctypes (a preallocated out-parameter), ``cuStreamIsCapturing`` 0.23-0.30 us against
    0.22-0.28 us (equal within the noise).
  - the graph rewrite of ``graph_memsets.py`` (12 graph-editing and module entry points, run once per recording,
    so not for speed): its edge-data calls have other signatures in cuda.bindings 12 (``..._v2`` names) and 13
    (the base names take the edge data), which the driver's own symbols do not; and it is GPU-only code whose CPU
    tests model the ctypes calling convention. Its ``cuGraphDestroy`` is :func:`bindings`' (``capture.py``'s).

Both report "no driver" the same way: :func:`bindings` is None without cuda-bindings or without a driver it can
use (the CPU test stub of ``tests/support`` exports only what cuDNN's engines need, not ``cuGetProcAddress``), and
callers then treat every fact as unknown and switch nothing, as they do without a driver at all.
"""
from __future__ import annotations

import ctypes
from collections.abc import Iterable
from typing import Any

_bindings: Any = None  # cuda.bindings.driver once probed; False: not usable here
_raw: Any = None  # the ctypes libcuda once loaded; False: none


def bindings() -> Any:
    """cuda.bindings' driver module, or None: cuda-bindings not installed, or no driver it can load. The probe,
    ``cuDriverGetVersion``, needs no ``cuInit``; its answer is kept for the process."""
    global _bindings
    if _bindings is None:
        try:
            from cuda.bindings import driver
        except ImportError:
            _bindings = False
        else:
            try:
                err, _ = driver.cuDriverGetVersion()
                _bindings = driver if int(err) == 0 else False
            except RuntimeError:  # no libcuda, or one without cuGetProcAddress (the CPU stub)
                _bindings = False
    return _bindings or None


def raw() -> Any:
    """``libcuda.so.1`` through ctypes (untyped: see :func:`typed`), or None where it does not load."""
    global _raw
    if _raw is None:
        try:
            _raw = ctypes.CDLL("libcuda.so.1")
        except OSError:
            _raw = False
    return _raw or None


_vp, _u, _i, _size = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t
# The argument types of every raw entry point cudnn_py calls, one catalog: ctypes shares one function object per
# name in a process, so two users typing one name differently would break each other (the memset rewrite of a
# replay once typed cuModuleLoadData's image as char* and the norm engine's cubin, passed as void*, was refused).
PROTOTYPES: dict[str, list] = {
    # capture.py: the execute hot path's launch of a recording
    "cuGraphLaunch": [_vp, _vp],
    # engines/runtime/modules.py: cubins of our engines, their kernels, launches and occupancy
    "cuModuleLoadData": [_vp, _vp],
    "cuModuleGetFunction": [_vp, _vp, ctypes.c_char_p],
    "cuModuleUnload": [_vp],
    "cuLaunchKernel": [_vp, _u, _u, _u, _u, _u, _u, _u, _vp, _vp, _vp],
    "cuCtxGetDevice": [_vp],
    "cuDeviceGetAttribute": [_vp, _i, _i],
    "cuOccupancyMaxActiveBlocksPerMultiprocessor": [_vp, _vp, _i, _size],
    # graph_memsets.py: a recording's memset nodes rewritten as kernel nodes (the _v2 edge-data forms where the
    # driver has them, >= 12.3)
    "cuGraphGetNodes": [_vp, _vp, _vp],
    "cuGraphNodeGetType": [_vp, _vp],
    "cuGraphMemsetNodeGetParams": [_vp, _vp],
    "cuGraphNodeGetDependencies": [_vp, _vp, _vp],
    "cuGraphNodeGetDependencies_v2": [_vp, _vp, _vp, _vp],
    "cuGraphNodeGetDependentNodes": [_vp, _vp, _vp],
    "cuGraphNodeGetDependentNodes_v2": [_vp, _vp, _vp, _vp],
    "cuGraphAddDependencies": [_vp, _vp, _vp, _size],
    "cuGraphAddDependencies_v2": [_vp, _vp, _vp, _vp, _size],
    "cuGraphAddKernelNode": [_vp, _vp, _vp, _size, _vp],
    "cuGraphAddKernelNode_v2": [_vp, _vp, _vp, _size, _vp],
    "cuGraphDestroyNode": [_vp],
    "cuGraphClone": [_vp, _vp],
}


def typed(lib: Any, names: Iterable[str]) -> bool:
    """Give each named entry point of ``lib`` its argument types from :data:`PROTOTYPES` and a CUresult (int)
    result; False, typing none, where one of them is missing (an older driver, the CPU stub). The one place libcuda's
    raw entry points get types, all from the one catalog."""
    try:
        functions = [(getattr(lib, name), PROTOTYPES[name]) for name in names]
    except AttributeError:
        return False
    for fn, argtypes in functions:
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return True
