"""Test support: make cuDNN finalize descriptors on a machine with no NVIDIA driver, with no C compiler.

If a real ``libcuda.so.1`` loads, nothing is done. Otherwise the package's own deviceless driver stand-in
(``cudnn_py/backend/driver_standin.py``: six functions in an ELF file written by Python) is loaded now, with
RTLD_GLOBAL under the soname ``libcuda.so.1``, so that cuDNN's engine libraries resolve against it - as the loader
does by itself at its first call where no driver library loads, but before anything of cuDNN, so that every test
(and every child a test starts with ``LD_PRELOAD=DRIVER``) sees the same driver whether or not it loads cuDNN.
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

_state: dict = {}


def real_libcuda_available() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def build_stub(out_dir: str | os.PathLike | None = None) -> Path:
    """Write the stand-in into a fresh private directory (under ``out_dir``, default the temporary directory) and
    return its path; removed when this process exits."""
    from cudnn_py.backend import driver_standin

    return Path(driver_standin.write_private(driver_standin.image(), None if out_dir is None else str(out_dir)))


def ensure_driver() -> str:
    """Return "real" when a real driver library loads, else load the stand-in and return its path."""
    if "mode" in _state:
        return _state["mode"]
    if real_libcuda_available():
        _state["mode"] = "real"
    else:
        from cudnn_py.backend import driver_standin

        _state["mode"] = driver_standin.load()
    return _state["mode"]


if __name__ == "__main__":  # `python tests/support/libcuda_stub.py`: whether this machine needs the stand-in
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    print(ensure_driver())
