"""Find and load ``libcudnn.so.9`` once per process, and explain every place searched when that fails.

Search order (the first hit wins; every attempt is recorded for the error message and ``python -m cudnn_py info``):

1. ``CUDNN_PY_LIBRARY=/abs/path/libcudnn.so.9`` — an explicit override: never falls back to another copy.
2. A copy already mapped into this process (e.g. loaded by torch): loading a second libcudnn next to it
   would give two independent cuDNN states, so it is reused.
3. ``cuda.pathfinder.load_nvidia_dynamic_lib("cudnn")``: pip wheels (cu12/cu13), conda, ``CUDNN_PATH``, system.
4. A scan of ``sys.path`` for ``nvidia/cudnn/lib/libcudnn.so.9`` (``pip --target`` installs and embedded
   interpreters whose layout pathfinder does not know).

**Vetting** (:mod:`.vetting`): a candidate is tried in a child process before it is loaded here; a rejected one is
recorded (why) and the search goes on, ending in :class:`~cudnn_py.errors.CudnnLibraryNotFoundError` with the whole
list. Not vetted: a copy already mapped in the process, and everything when ``CUDNN_PY_LIBRARY_VETTED=1``. A library
that loads but is not cuDNN (no ``cudnnGetVersion``) is rejected the same way, and unloaded again if this loader
mapped it; nothing stays bound to a rejected library.

Nothing here runs at ``import cudnn_py``; the first call that needs the library triggers :func:`load_library`.
"""
from __future__ import annotations

import ctypes
import logging
import os
import stat
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..bounded_read import file_kind
from ..errors import CudnnLibraryNotFoundError, CudnnVersionError, status_name, version_parts, version_string
from . import driver_standin, vetting
from .mapped import loaded_path_of, mapped_libraries
from .vetting import (  # noqa: F401  (signal_name, _pathfinder_candidate: read from here)
    SYMBOLS,
    _pathfinder_candidate,
    _vet_pathfinder,
    signal_name,
    vet,
    vetting_enabled,
)

SONAME = "libcudnn.so.9"
MIN_MAJOR = 9


@dataclass
class LoadedLibrary:
    """Where the library came from, and what it reported about itself."""

    path: str
    found_via: str
    cdll: ctypes.CDLL
    version: int = 0
    cudart_version: int = 0
    attempts: list[tuple[str, str]] = field(default_factory=list)
    vetted: str = ""  # how the library was checked before loading (or why it was not)

    @property
    def version_string(self) -> str:
        return version_string(self.version)


_lock = threading.Lock()
_log = logging.getLogger(__name__)
_loaded: LoadedLibrary | None = None


# what a cuDNN call failing with CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED says first when no driver library loads
# (cuDNN itself prints "Unable to load any of {libcudnn_engines_runtime_compiled.so...}" on stderr the first time,
# from libcudnn_graph, when that library's dlopen fails for want of libcuda.so.1: the message names that line)
NO_DRIVER = ("cuDNN's engine libraries need the NVIDIA driver's libcuda.so.1, which this machine does not have (what "
             "cuDNN's 'Unable to load any of {libcudnn_engines_runtime_compiled.so...}' line on stderr means), and "
             "cudnn_py's deviceless stand-in for it is not loaded")


def no_driver_hint() -> str:
    """:data:`NO_DRIVER`, why the stand-in is not loaded, and what to do."""
    return (f"{NO_DRIVER} ({driver_standin.why_not()}): validate() without a GPU needs one of them, so unset "
            f"{driver_standin.SWITCH_ENV} or install the NVIDIA driver's user-space libraries (no GPU is needed); "
            "`python -m cudnn_py info` says what works here, the float64 reference engine included")


def driver_library_missing() -> bool:
    """True when ``libcuda.so.1`` (the NVIDIA driver's library, which cuDNN's engine sub-libraries link against) is
    neither loaded in this process nor loadable from the library search path."""
    if loaded_path_of("libcuda.so.1"):
        return False
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return True
    return False


def not_a_library_file(path: str) -> str | None:
    """Why ``path`` cannot be a shared library (no such file, a directory, a FIFO, a device, ...), or None for a
    regular file (links followed). Only stat()ed: never opened, so a FIFO or a device cannot block."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file" if not os.path.islink(path) else "is a dangling symbolic link"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISREG(mode):
        return None
    return f"is {file_kind(mode)}, not a library file"


def _candidates_on_sys_path() -> list[str]:
    found = []
    for entry in sys.path:
        p = Path(entry or ".") / "nvidia" / "cudnn" / "lib" / SONAME
        if p.is_file() and str(p) not in found:
            found.append(str(p))
    return found



def _check_version(path: str, version: int, check: int) -> None:
    if version_parts(version)[0] < MIN_MAJOR:
        raise CudnnVersionError(f"{path} is cuDNN {version_string(version)}; cudnn_py needs cuDNN {MIN_MAJOR}.x")
    if check != 0:
        raise CudnnVersionError(
            f"cudnnGraphVersionCheck() on {path} returned {status_name(check)}: the cuDNN sub-libraries next to it "
            "come from different cuDNN versions (mixed wheels or a stale LD_LIBRARY_PATH copy)"
        )


# ------------------------------------------------------------------------------------------------------- loading
def _is_mapped(path: str) -> bool:
    real = os.path.realpath(path)
    return any(os.path.realpath(p) == real for p in mapped_libraries(os.path.basename(real)))


def _unload(cdll: ctypes.CDLL) -> None:
    try:
        import _ctypes

        _ctypes.dlclose(cdll._handle)
    except Exception:
        pass


def _try_cdll(path: str, attempts: list[tuple[str, str]], how: str, vetted: bool = False) -> ctypes.CDLL | None:
    """Load ``path`` into the process (after vetting it, where asked) and check it is cuDNN."""
    if vetted:
        verdict = vet(path)
        if not verdict.ok:
            attempts.append((how, f"{path}: {verdict.reason}"))
            return None
        if verdict.version:
            _check_version(path, verdict.version, verdict.check)  # refused before it is mapped here
    was_mapped = _is_mapped(path)
    try:
        cdll = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        attempts.append((how, f"{path}: {e}"))
        return None
    missing = [s for s in SYMBOLS if not hasattr(cdll, s)]
    if missing:
        attempts.append((how, f"{path}: not a cuDNN library (does not export {', '.join(missing)})"))
        if not was_mapped:
            _unload(cdll)
        return None
    return cdll


def _locate() -> tuple[ctypes.CDLL, str, str, list[tuple[str, str]], str]:
    attempts: list[tuple[str, str]] = []
    vetting = vetting_enabled()
    how_vetted = "in a child process before loading" if vetting else "skipped (CUDNN_PY_LIBRARY_VETTED=1)"
    override = os.environ.get("CUDNN_PY_LIBRARY")
    if override:
        if not os.path.isabs(override):
            attempts.append(("CUDNN_PY_LIBRARY", f"{override!r} is not an absolute path"))
        elif (why := not_a_library_file(override)) is not None:
            attempts.append(("CUDNN_PY_LIBRARY", f"{override}: {why}"))
        else:
            mapped = _is_mapped(override)
            cdll = _try_cdll(override, attempts, "CUDNN_PY_LIBRARY", vetted=vetting and not mapped)
            if cdll is not None:
                return cdll, override, "CUDNN_PY_LIBRARY", attempts, \
                    "skipped (already loaded in this process)" if mapped else how_vetted
        # An explicit override that fails must not silently fall back to another copy.
        raise CudnnLibraryNotFoundError(_explain(attempts))
    already = [p for p in mapped_libraries("libcudnn.so") if os.path.basename(p).startswith("libcudnn.so")]
    if already:
        cdll = _try_cdll(already[0], attempts, "already loaded in this process")
        if cdll is not None:
            return cdll, already[0], "already loaded in this process", attempts, "skipped (already loaded)"
    else:
        attempts.append(("already loaded in this process", "no libcudnn.so mapped"))
    try:
        from cuda import pathfinder
    except ImportError as e:
        attempts.append(("cuda.pathfinder", f"not importable ({e}); install cuda-pathfinder>=1.7"))
    else:
        verdict = _vet_pathfinder() if vetting else None
        if verdict is not None and not verdict.ok:
            attempts.append(("cuda.pathfinder", f"{verdict.path or SONAME}: {verdict.reason}"))
        else:
            if verdict is not None and verdict.version:
                _check_version(verdict.path, verdict.version, verdict.check)
            try:
                ld = pathfinder.load_nvidia_dynamic_lib("cudnn")
            except Exception as e:
                attempts.append(("cuda.pathfinder", f"{type(e).__name__}: {e}"))
            else:
                if ld.abs_path:
                    cdll = _try_cdll(ld.abs_path, attempts, "cuda.pathfinder")
                    if cdll is not None:
                        return cdll, ld.abs_path, f"cuda.pathfinder ({ld.found_via})", attempts, how_vetted
                else:
                    attempts.append(("cuda.pathfinder", "loaded but reported no path"))
    scanned = _candidates_on_sys_path()
    if not scanned:
        attempts.append(("sys.path scan",
                         f"no nvidia/cudnn/lib/{SONAME} under any of {len(sys.path)} sys.path entries"))
    for p in scanned:
        cdll = _try_cdll(p, attempts, "sys.path scan", vetted=vetting)
        if cdll is not None:
            return cdll, p, "sys.path scan", attempts, how_vetted
    raise CudnnLibraryNotFoundError(_explain(attempts))


def _explain(attempts: list[tuple[str, str]]) -> str:
    lines = [f"cudnn_py could not load {SONAME}. Places searched, in order:"]
    lines += [f"  - {how}: {why}" for how, why in attempts]
    lines.append(
        "Install the cuDNN wheel (pip install nvidia-cudnn-cu12, or nvidia-cudnn-cu13; from a clone of cudnn_py: "
        f'pip install ".[cu12]"), or point CUDNN_PY_LIBRARY at an absolute path to {SONAME}.'
    )
    return "\n".join(lines)


def load_library() -> LoadedLibrary:
    """Load libcudnn (once), bind the prototypes, check the version. Raises with the full search log on failure."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        # no driver library: the deviceless stand-in, before anything of cuDNN (the vetting child included) loads
        if driver_standin.refused() is None and driver_library_missing():
            driver_standin.load_quietly()
        cdll, path, how, attempts, vetted = _locate()
        # the three calls made here get their prototypes now; api.bind() sets all the others
        cdll.cudnnGetVersion.restype = cdll.cudnnGetCudartVersion.restype = ctypes.c_size_t
        cdll.cudnnGetVersion.argtypes = cdll.cudnnGetCudartVersion.argtypes = []
        cdll.cudnnGraphVersionCheck.restype, cdll.cudnnGraphVersionCheck.argtypes = ctypes.c_int, []
        version = int(cdll.cudnnGetVersion())
        # one check: the major first, then the sub-libraries (every symbol called here is exported: _try_cdll)
        _check_version(path, version, int(cdll.cudnnGraphVersionCheck()))
        info = LoadedLibrary(path=path, found_via=how, cdll=cdll, version=version, attempts=attempts, vetted=vetted)
        info.cudart_version = int(cdll.cudnnGetCudartVersion())
        if vetting.vetting_ms:
            info.vetted += f" ({vetting.vetting_ms:.0f} ms)"
        elif vetting.remembered:
            info.vetted = "by an earlier process (its verdict kept in the cache directory)"
        _loaded = info
        _log.info("loaded %s (cuDNN %s, found via %s; %s)", path, info.version_string, how, info.vetted)
        return info


def loaded() -> LoadedLibrary | None:
    """The loaded library, or None when nothing has needed it yet (does not load)."""
    return _loaded
