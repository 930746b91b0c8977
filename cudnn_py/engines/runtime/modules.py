"""Compiled kernels and loaded modules of the runtime-compiled engines.

* :func:`compiled` answers a cubin for (source, options, architecture), compiling only on a miss of the cubin
  store (``store.py``: in memory, then the kernel files of the cache directory), keyed by :func:`cubin_key`: a
  hash of the source, the options, the exact architecture, the NVRTC version and this package's version.
* :class:`LoadedModule` is a cubin loaded into one CUDA context (``cuModuleLoadData``) and its kernel. A plan holds
  its module; plans of one cubin in one context share it (a weak map), and it is unloaded (``cuModuleUnload``) when
  the last plan holding it is dropped. A CUDA graph captured from a plan's execute launches that module's kernel:
  keep the graph (the pygraph) alive as long as the capture is replayed, as for cuDNN's plans.
* :func:`launch` enqueues the kernel on the caller's stream with ``cuLaunchKernel``: no synchronisation and no
  allocation, so an execute can be captured into a CUDA graph.

The driver is reached through ``libcuda`` with ctypes (``cudnn_py.cuda.driver.raw``): one typed entry point per
call, the same with cuda-bindings 12 and 13.
"""
from __future__ import annotations

import ctypes
import hashlib
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from ..._version import __version__
from ...cuda import context, driver
from ...errors import CudaDriverError
from . import nvrtc
from .store import STORE, CubinStore, check_cubin

_P, _U, _I = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int
_ENTRY_POINTS = ("cuModuleLoadData", "cuModuleGetFunction", "cuModuleUnload", "cuLaunchKernel", "cuCtxGetDevice",
                 "cuDeviceGetAttribute", "cuOccupancyMaxActiveBlocksPerMultiprocessor")  # (cuda/driver.py types them)
_ATTR_SMS, _ATTR_CC_MAJOR, _ATTR_CC_MINOR = 16, 75, 76
_lib: Any = None


def _driver() -> Any:
    global _lib
    if _lib is None:
        lib = driver.raw()
        _lib = lib if lib is not None and driver.typed(lib, _ENTRY_POINTS) else False
    if not _lib:
        raise CudaDriverError("runtime-compiled engines need the CUDA driver (libcuda.so.1 with the module and "
                              "launch entry points)")
    return _lib


def _ok(status: int, what: str) -> None:
    if status != 0:
        raise CudaDriverError(f"{what} failed: CUresult {status}")


@dataclass(frozen=True)
class Target:
    """The GPU a plan compiles for: compute capability as major * 10 + minor, and its multiprocessor count."""

    cc: int
    sms: int


def current_target() -> Target | str:
    """The device of the calling thread's current context, or why there is none."""
    try:
        lib = _driver()
    except CudaDriverError as e:
        return str(e)
    dev = ctypes.c_int()
    if lib.cuCtxGetDevice(ctypes.byref(dev)) != 0:
        return "no current CUDA context (no device in use by this thread)"
    vals = []
    for attr in (_ATTR_CC_MAJOR, _ATTR_CC_MINOR, _ATTR_SMS):
        v = ctypes.c_int()
        if lib.cuDeviceGetAttribute(ctypes.byref(v), attr, dev.value) != 0:
            return "the CUDA device's attributes cannot be read"
        vals.append(v.value)
    return Target(vals[0] * 10 + vals[1], vals[2])


# ---- compiled cubins --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Compiled:
    key: str
    cubin: bytes
    log: str  # the compiler's log ("" when the cubin came from the store)
    fresh: bool = False  # compiled now (not found in the store)


def cubin_key(source: str, options: tuple[str, ...], cc: int, version: tuple[int, int]) -> str:
    h = hashlib.sha256()
    for part in ("cudnn_py-cubin-1", __version__, source, "\0".join(options), nvrtc.arch_flag(cc),
                 f"nvrtc-{version[0]}.{version[1]}"):
        h.update(part.encode())
        h.update(b"\x1f")
    return h.hexdigest()


_compile_lock = threading.Lock()
COMPILES = {"count": 0}  # compiles made by this process (tests and the benchmark read it)


def compiled(source: str, name: str, options: tuple[str, ...], cc: int, store: CubinStore | None = None,
             problems: list[str] | None = None) -> Compiled:
    """The cubin of ``source`` for ``cc``: from the store, else compiled (and put there); why a kept kernel file
    was not used is appended to ``problems`` when given."""
    tc = nvrtc.require()
    store = STORE if store is None else store
    key = cubin_key(source, options, cc, tc.version)
    data = store.get(key, problems)
    if data is not None:
        return Compiled(key, data, "")
    with _compile_lock:  # one compile of a key at a time (a second thread finds it in the store)
        data = store.get(key)
        if data is not None:
            return Compiled(key, data, "")
        cubin, log = nvrtc.compile_cubin(source, name, options, cc)
        COMPILES["count"] += 1
        store.put(key, cubin)
    return Compiled(key, cubin, log, fresh=True)


# ---- loaded modules -----------------------------------------------------------------------------------------------
def _unload(lib: Any, handle: int) -> None:
    try:
        lib.cuModuleUnload(handle)
    except Exception:  # interpreter shutdown: the driver may be gone
        pass


class LoadedModule:
    """A cubin loaded into the current context, with its kernel ``name``; unloaded when dropped."""

    def __init__(self, cubin: bytes, name: str) -> None:
        why = check_cubin(cubin)
        if why:  # (the driver parses what it is given: only what looks like a cubin for a CUDA GPU reaches it)
            raise CudaDriverError(f"not loaded: the image for {name} is {why}")
        lib = _driver()
        self.context = context.current()
        mod = _P()
        image = ctypes.create_string_buffer(cubin, len(cubin))
        _ok(lib.cuModuleLoadData(ctypes.byref(mod), ctypes.cast(image, _P)), "cuModuleLoadData")
        self.handle = int(mod.value or 0)
        self._finalizer = weakref.finalize(self, _unload, lib, self.handle)
        fn = _P()
        _ok(lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), f"cuModuleGetFunction({name})")
        self.function = int(fn.value or 0)

    def occupancy(self, threads: int) -> int:
        """CTAs of ``threads`` threads resident per multiprocessor."""
        n = ctypes.c_int()
        _ok(_driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), self.function, threads, 0),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return max(1, n.value)

    def unload(self) -> None:
        self._finalizer()

    @property
    def loaded(self) -> bool:
        return self._finalizer.alive


_modules: weakref.WeakValueDictionary[tuple[str, int | None], LoadedModule] = weakref.WeakValueDictionary()
_modules_lock = threading.Lock()


def module(c: Compiled, name: str) -> LoadedModule:
    """The module of ``c`` in the current context, shared by every plan that holds it."""
    key = (c.key, context.current())
    with _modules_lock:
        m = _modules.get(key)
        if m is None:
            m = LoadedModule(c.cubin, name)
            _modules[key] = m
        return m


def live_modules() -> int:
    return len(_modules)


def launch(m: LoadedModule, grid: int, threads: int, stream: int, params: ctypes.Structure) -> None:
    """Enqueue one launch of ``m``'s kernel taking ``params`` (one struct, by value) on ``stream``."""
    args = (_P * 1)(ctypes.addressof(params))
    status = _driver().cuLaunchKernel(m.function, grid, 1, 1, threads, 1, 1, 0, stream, args, None)
    _ok(status, "cuLaunchKernel")
