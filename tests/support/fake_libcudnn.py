"""Test support: broken cuDNN installs for the loader's vetting tests (never shipped).

``fake_libcudnn(dir, *defines)`` compiles ``fake_libcudnn.c`` (four exported symbols) with the machine's C compiler
into ``dir/libcudnn.so.9``; ``truncated_install(dir, sublibrary)`` copies the real cuDNN wheel's ``libcudnn.so.9``
into ``dir``, links the other sub-libraries beside it and writes the first MiB of ``sublibrary`` only.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

_SRC = Path(__file__).with_name("fake_libcudnn.c")


def fake_libcudnn(out_dir: str | os.PathLike, *defines: str) -> Path:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler found to build the test-only fake libcudnn (set CC)")
    out = Path(out_dir) / "libcudnn.so.9"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", *(f"-D{d}" for d in defines), "-Wl,-soname,libcudnn.so.9",
                    "-o", str(out), str(_SRC)], check=True)
    return out


def wheel_lib_dir() -> Path:
    import nvidia.cudnn

    return Path(list(nvidia.cudnn.__path__)[0]) / "lib"


def truncated_install(out_dir: str | os.PathLike, sublibrary: str, keep: int = 1 << 20) -> Path:
    src, out = wheel_lib_dir(), Path(out_dir)
    for f in src.glob("libcudnn*.so.9"):
        if f.name == "libcudnn.so.9":
            shutil.copyfile(f, out / f.name)
        elif f.name == sublibrary:
            with open(f, "rb") as i, open(out / f.name, "wb") as o:
                o.write(i.read(keep))
        else:
            (out / f.name).symlink_to(f)
    return out / "libcudnn.so.9"
