"""The deviceless driver stand-in: a six-function ``libcuda.so.1`` that lets cuDNN validate graphs on a machine
with no NVIDIA driver, written by Python (:mod:`.elf_image`), no compiler needed.

Why: cuDNN's engine libraries (``libcudnn_engines_runtime_compiled.so.9``, ``..._tensor_ir``) link against the
driver's ``libcuda.so.1`` and import exactly :data:`SYMBOLS`. Without any ``libcuda.so.1`` they fail to load, and
every ``cudnnBackendFinalize`` of an operation, so ``validate()``, fails with ``SUBLIBRARY_LOADING_FAILED``, even
though finalizing descriptors needs no GPU. The stand-in exports those six symbols: each one answers
``CUDA_ERROR_NO_DEVICE`` (100), except ``cuGetErrorString``, which gives a static "no device" message and returns 0.
So it can never make GPU work seem to succeed: it is what a driver says on a machine with no GPU.

When (:func:`load_quietly`, called by the loader before it loads libcudnn): only when no ``libcuda.so.1`` is loaded
in the process nor loadable from the library search path, and ``CUDNN_PY_DRIVER_STANDIN`` does not turn it off. A
real driver, once there, is always the one used: the stand-in is never loaded beside it.

How it is kept safe: each process writes its own copy into a fresh private directory (``tempfile.mkdtemp``: mode
0700, owned by the user), reads the file back and compares it with the bytes it wrote, then loads exactly that file
(``RTLD_GLOBAL``, so that cuDNN's ``dlopen("libcuda.so.1")`` finds it by its soname). The directory is removed when
the process exits. Where the temporary directory is mounted ``noexec`` (the load fails), ``$XDG_RUNTIME_DIR`` and
then the cache directory's parent are tried.

Execution: handles, plans and ``execute()`` need a GPU; with the stand-in loaded, :func:`loaded` says so and
``create_handle`` reports "no NVIDIA driver" plainly (``backend/handle.py``) instead of calling the driver.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import shutil
import stat
import tempfile
import threading

from .. import cache_home
from . import elf_image

SONAME = "libcuda.so.1"
# the driver symbols cuDNN 9's engine libraries import (``nm -D --undefined-only`` of them), in that order
SYMBOLS = ("cuGetErrorString", "cuModuleGetFunction", "cuModuleLoadData", "cuModuleUnload",
           "cuTensorMapEncodeIm2col", "cuTensorMapEncodeTiled")
CUDA_ERROR_NO_DEVICE = 100
MESSAGE = b"no device (cudnn_py's deviceless libcuda.so.1 stand-in: this machine has no NVIDIA driver)\0"
SWITCH_ENV = "CUDNN_PY_DRIVER_STANDIN"
# what GPU work says where the stand-in is loaded (create_handle: every handle, plan and execute needs one)
NO_GPU = ("no NVIDIA driver on this machine (no libcuda.so.1 loads; cudnn_py loaded its deviceless stand-in for it, "
          "with which validate() works): handles, plans and execute() need an NVIDIA GPU and its driver; the float64 "
          "reference engine runs a graph on the CPU (see docs/getting-started.md, 'With no GPU')")

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_path: str | None = None  # the stand-in this process loaded
_failure: str | None = None  # why the last attempt to load it failed


def image(machine: str | None = None) -> bytes:
    """The stand-in's bytes for ``machine`` (default: this one; ``elf_image.UnsupportedMachine`` for a machine
    other than x86_64 or aarch64)."""
    m = elf_image.machine(machine)
    functions = [(name, elf_image.stores_data_address(m) if name == "cuGetErrorString"
                  else elf_image.returns(m, CUDA_ERROR_NO_DEVICE)) for name in SYMBOLS]
    return elf_image.shared_object(SONAME, functions, MESSAGE, m)


def refused() -> str | None:
    """``"CUDNN_PY_DRIVER_STANDIN=0"`` (as set) when the environment turns the stand-in off, else None."""
    return cache_home.switched_off(SWITCH_ENV)


def loaded() -> str | None:
    """The path of the stand-in this process loaded, or None (a real driver, or none at all)."""
    return _path


def why_not() -> str:
    """Why the stand-in is not loaded in this process, in words (for the "no driver" error)."""
    if (off := refused()) is not None:
        return f"{off} turns it off"
    if _failure:
        return f"it could not be loaded: {_failure}"
    return "it was not needed when libcudnn was loaded (a libcuda.so.1 was there then)"


def _candidate_dirs() -> list[str]:
    out = [tempfile.gettempdir()]
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run and os.path.isabs(run):
        out.append(run)
    out.append(os.path.dirname(cache_home.directory()))
    return list(dict.fromkeys(out))


def _remove(folder: str, pid: int) -> None:
    if os.getpid() == pid:  # not in a forked child that exits through atexit
        shutil.rmtree(folder, ignore_errors=True)


def write_private(data: bytes, parent: str | None = None) -> str:
    """Write ``data`` as ``libcuda.so.1`` into a fresh private directory under ``parent`` (default: the temporary
    directory), check what is on disk is exactly ``data`` (read back, no link followed), and return its path. The
    directory is removed when this process exits. OSError where it cannot be written or does not read back."""
    folder = tempfile.mkdtemp(prefix="cudnn_py-driver-", dir=parent)  # mode 0700, this user's
    atexit.register(_remove, folder, os.getpid())
    path = os.path.join(folder, SONAME)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o500)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    _verify(path, data)
    return path


def _verify(path: str, data: bytes) -> None:
    """OSError unless ``path`` is a regular file of this user, in a directory only this user may write, holding
    exactly ``data``."""
    folder = os.stat(os.path.dirname(path), follow_symlinks=False)
    if not stat.S_ISDIR(folder.st_mode) or folder.st_uid != os.getuid() or folder.st_mode & 0o077:
        raise OSError(f"{os.path.dirname(path)} is not a private directory of this user")
    got, st = cache_home.read_regular(path, len(data), what="the driver stand-in")
    if got != data or st.st_uid != os.getuid():
        raise OSError(f"{path} does not hold the bytes just written to it")


def load() -> str:
    """Write, check and load the stand-in (once per process) and return its path. OSError (every place tried, each
    with its reason) or ``elf_image.UnsupportedMachine`` where it cannot be."""
    global _path, _failure
    with _lock:
        if _path is not None:
            return _path
        try:
            data = image()
        except elf_image.UnsupportedMachine as e:
            _failure = str(e)
            raise
        tried = []
        for parent in _candidate_dirs():
            path = None
            try:
                path = write_private(data, parent)
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                tried.append(f"{parent}: {e}")
                if path is not None:
                    with contextlib.suppress(OSError):
                        shutil.rmtree(os.path.dirname(path))
                continue
            _path, _failure = path, None
            _log.info("no NVIDIA driver library here: loaded cudnn_py's deviceless libcuda.so.1 stand-in (validation "
                      "works; handles, plans and execute need a GPU)")
            _log.debug("the deviceless libcuda.so.1 stand-in: %s", path)
            return path
        _failure = "; ".join(tried)
        raise OSError(f"the deviceless libcuda.so.1 stand-in could not be loaded ({_failure})")


def load_quietly() -> bool:
    """:func:`load`, for the loader (which calls it only where no ``libcuda.so.1`` loads and :func:`refused` is
    None): True when the stand-in is loaded; a failure is logged and kept for :func:`why_not`, never raised."""
    try:
        load()
        return True
    except (OSError, elf_image.UnsupportedMachine) as e:
        _log.warning("%s: validate() will fail without a driver library", e)
        return False
