"""Test support: broken cuDNN installs for the loader's vetting tests (never shipped).

``fake_libcudnn(dir, *defines)`` writes ``dir/libcudnn.so.9``, a shared object exporting the four symbols the
loader vets, with the package's ELF writer (``cudnn_py/backend/elf_image.py``; no C compiler): ``cudnnGetVersion``
returns 92800 (``"VERSION=8907"``: that version), ``cudnnGetCudartVersion`` 12090 (``"CRASH_IN_CUDART"``: it dies of
SIGSEGV, writing to address 0), ``cudnnGraphVersionCheck`` 0 and ``cudnnBackendCreateDescriptor`` 2000.
``truncated_install(dir, sublibrary)`` copies the real cuDNN wheel's ``libcudnn.so.9`` into ``dir``, links the other
sub-libraries beside it and writes the first MiB of ``sublibrary`` only.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from cudnn_py.backend import elf_image

# a write of 0 to address 0, then ret (never reached)
_CRASH = {
    "x86_64": bytes.fromhex("31c0" "8900" "c3"),  # xor eax, eax; mov [rax], eax; ret
    "aarch64": bytes.fromhex("000080d2" "000000b9" "c0035fd6"),  # movz x0, #0; str w0, [x0]; ret
}


def fake_libcudnn(out_dir: str | os.PathLike, *defines: str) -> Path:
    m = elf_image.machine()
    version = next((int(d.split("=", 1)[1]) for d in defines if d.startswith("VERSION=")), 92800)
    cudart = (lambda pc, data: _CRASH[m]) if "CRASH_IN_CUDART" in defines else elf_image.returns(m, 12090)
    functions = [("cudnnGetVersion", elf_image.returns(m, version)), ("cudnnGetCudartVersion", cudart),
                 ("cudnnGraphVersionCheck", elf_image.returns(m, 0)),
                 ("cudnnBackendCreateDescriptor", elf_image.returns(m, 2000))]
    out = Path(out_dir) / "libcudnn.so.9"
    out.write_bytes(elf_image.shared_object("libcudnn.so.9", functions, b"", m))
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
