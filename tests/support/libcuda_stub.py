"""Test support: make cuDNN finalize descriptors on a machine with no NVIDIA driver.

If a real ``libcuda.so.1`` loads, nothing is done. Otherwise the six-symbol stub in ``libcuda_stub.c`` is
compiled with the machine's C compiler (cached by source hash) and loaded with RTLD_GLOBAL under the
soname ``libcuda.so.1``, so that cuDNN's runtime-compiled engine library resolves against it when cuDNN
dlopens it. Test-only: the package never ships or loads this.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

_SRC = Path(__file__).with_name("libcuda_stub.c")
_state: dict = {}


def real_libcuda_available() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def build_stub(out_dir: str | os.PathLike | None = None) -> Path:
    """Compile the stub (once per source hash) and return the path of the shared object."""
    src = _SRC.read_bytes()
    digest = hashlib.sha256(src).hexdigest()[:16]
    out_dir = Path(out_dir or os.environ.get("CUDNN_PY_STUB_DIR") or Path(tempfile.gettempdir()) / "cudnn_py_stub")
    out_dir.mkdir(parents=True, exist_ok=True)
    so = out_dir / f"libcuda_stub_{digest}.so"
    if not so.exists():
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise RuntimeError("no C compiler found to build the test-only libcuda stub (set CC)")
        tmp = so.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o", str(tmp), str(_SRC)], check=True)
        os.replace(tmp, so)
    return so


def ensure_driver() -> str:
    """Return "real" when a real driver library loads, else load the stub and return its path."""
    if "mode" in _state:
        return _state["mode"]
    if real_libcuda_available():
        _state["mode"] = "real"
    else:
        so = build_stub()
        ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)
        _state["mode"] = str(so)
    return _state["mode"]


if __name__ == "__main__":  # `python tests/support/libcuda_stub.py` prebuilds it (used by .ci/run)
    print(build_stub())
