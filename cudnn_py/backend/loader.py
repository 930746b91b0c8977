"""Find and load ``libcudnn.so.9`` once per process, and explain every place searched when that fails.

Search order (the first hit wins; every attempt is recorded for the error message and ``python -m cudnn_py info``):

1. ``CUDNN_PY_LIBRARY=/abs/path/libcudnn.so.9`` — an explicit override, never second-guessed.
2. A copy already mapped into this process (e.g. loaded by torch): loading a second libcudnn next to it
   would give two independent cuDNN states, so it is reused.
3. ``cuda.pathfinder.load_nvidia_dynamic_lib("cudnn")``: pip wheels (cu12/cu13), conda, ``CUDNN_PATH``, system.
4. A scan of ``sys.path`` for ``nvidia/cudnn/lib/libcudnn.so.9`` (``pip --target`` installs and embedded
   interpreters whose layout pathfinder does not know).

Nothing here runs at ``import cudnn_py``; the first call that needs the library triggers :func:`load_library`.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CudnnLibraryNotFoundError, CudnnVersionError, status_name, version_string

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

    @property
    def version_string(self) -> str:
        return version_string(self.version)


_lock = threading.Lock()
_loaded: LoadedLibrary | None = None


def mapped_libraries(fragment: str) -> list[str]:
    """Distinct paths of shared objects mapped into this process whose file name contains ``fragment``."""
    paths: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    p = parts[5].strip()
                    if fragment in os.path.basename(p) and p not in paths:
                        paths.append(p)
    except OSError:  # not Linux: nothing to report
        pass
    return paths


def _candidates_on_sys_path() -> list[str]:
    found = []
    for entry in sys.path:
        p = Path(entry or ".") / "nvidia" / "cudnn" / "lib" / SONAME
        if p.is_file() and str(p) not in found:
            found.append(str(p))
    return found


def _try_cdll(path: str, attempts: list[tuple[str, str]], how: str) -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        attempts.append((how, f"{path}: {e}"))
        return None


def _locate() -> tuple[ctypes.CDLL, str, str, list[tuple[str, str]]]:
    attempts: list[tuple[str, str]] = []
    override = os.environ.get("CUDNN_PY_LIBRARY")
    if override:
        if not os.path.isabs(override):
            attempts.append(("CUDNN_PY_LIBRARY", f"{override!r} is not an absolute path"))
        elif not os.path.isfile(override):
            attempts.append(("CUDNN_PY_LIBRARY", f"{override}: no such file"))
        else:
            cdll = _try_cdll(override, attempts, "CUDNN_PY_LIBRARY")
            if cdll is not None:
                return cdll, override, "CUDNN_PY_LIBRARY", attempts
        # An explicit override that fails must not silently fall back to another copy.
        raise CudnnLibraryNotFoundError(_explain(attempts))
    already = [p for p in mapped_libraries("libcudnn.so") if os.path.basename(p).startswith("libcudnn.so")]
    if already:
        cdll = _try_cdll(already[0], attempts, "already loaded in this process")
        if cdll is not None:
            return cdll, already[0], "already loaded in this process", attempts
    else:
        attempts.append(("already loaded in this process", "no libcudnn.so mapped"))
    try:
        from cuda import pathfinder
    except ImportError as e:
        attempts.append(("cuda.pathfinder", f"not importable ({e}); install cuda-pathfinder>=1.7"))
    else:
        try:
            ld = pathfinder.load_nvidia_dynamic_lib("cudnn")
        except Exception as e:
            attempts.append(("cuda.pathfinder", f"{type(e).__name__}: {e}"))
        else:
            if ld.abs_path:
                cdll = _try_cdll(ld.abs_path, attempts, "cuda.pathfinder")
                if cdll is not None:
                    return cdll, ld.abs_path, f"cuda.pathfinder ({ld.found_via})", attempts
            else:
                attempts.append(("cuda.pathfinder", "loaded but reported no path"))
    scanned = _candidates_on_sys_path()
    if not scanned:
        attempts.append(("sys.path scan",
                         f"no nvidia/cudnn/lib/{SONAME} under any of {len(sys.path)} sys.path entries"))
    for p in scanned:
        cdll = _try_cdll(p, attempts, "sys.path scan")
        if cdll is not None:
            return cdll, p, "sys.path scan", attempts
    raise CudnnLibraryNotFoundError(_explain(attempts))


def _explain(attempts: list[tuple[str, str]]) -> str:
    lines = [f"cudnn_py could not load {SONAME}. Places searched, in order:"]
    lines += [f"  - {how}: {why}" for how, why in attempts]
    lines.append(
        "Install the cuDNN wheel (pip install 'cudnn-py[cu12]' or '[cu13]'), or point CUDNN_PY_LIBRARY at an absolute "
        f"path to {SONAME}."
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
        cdll, path, how, attempts = _locate()
        # the three calls made here get their prototypes now; api.bind() sets all the others
        cdll.cudnnGetVersion.restype = cdll.cudnnGetCudartVersion.restype = ctypes.c_size_t
        cdll.cudnnGetVersion.argtypes = cdll.cudnnGetCudartVersion.argtypes = []
        cdll.cudnnGraphVersionCheck.restype, cdll.cudnnGraphVersionCheck.argtypes = ctypes.c_int, []
        version = int(cdll.cudnnGetVersion())
        if version // 10000 < MIN_MAJOR:
            raise CudnnVersionError(
                f"{path} is cuDNN {version_string(version)}; cudnn_py needs cuDNN {MIN_MAJOR}.x"
            )
        info = LoadedLibrary(path=path, found_via=how, cdll=cdll, version=version, attempts=attempts)
        info.cudart_version = int(cdll.cudnnGetCudartVersion())
        status = int(cdll.cudnnGraphVersionCheck())
        if status != 0:
            raise CudnnVersionError(
                f"cudnnGraphVersionCheck() on {path} returned {status_name(status)}: the cuDNN sub-libraries next to "
                "it "
                "come from different cuDNN versions (mixed wheels or a stale LD_LIBRARY_PATH copy)"
            )
        _loaded = info
        return info


def loaded() -> LoadedLibrary | None:
    """The loaded library, or None when nothing has needed it yet (does not load)."""
    return _loaded
