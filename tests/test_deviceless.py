"""Deviceless validation with no NVIDIA driver and no C compiler (#40): the libcuda.so.1 stand-in that cudnn_py
writes in Python (cudnn_py/backend/elf_image.py, driver_standin.py), read back by a reader of its own here, loaded in
a child and called; and the README's path on a CPU machine: a fresh venv, no compiler on PATH, no driver, a scrubbed
environment, where `python -m cudnn_py info --json` runs and a matmul and an SDPA graph validate."""
from __future__ import annotations

import json
import os
import shutil
import site
import struct
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from cudnn_py.backend import driver_standin, elf_image
from tests.support.libcuda_stub import real_libcuda_available

ROOT = Path(__file__).resolve().parents[1]
SIX = ("cuGetErrorString", "cuModuleGetFunction", "cuModuleLoadData", "cuModuleUnload", "cuTensorMapEncodeIm2col",
       "cuTensorMapEncodeTiled")


# ------------------------------------------------------------------------------------- an ELF reader of its own
def _hash(name: bytes) -> int:  # the System V ABI's elf_hash, written again from the specification
    h = 0
    for c in name:
        h = (h << 4) + c
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= 0x0FFFFFFF
    return h


def read_elf(data: bytes) -> dict:
    """What ld.so reads of an ELF64 little-endian shared object: header, program headers, the dynamic section and,
    through it (not the section headers), the soname and the symbols, each looked up through DT_HASH."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1 and data[6] == 1, "not ELF64 LSB v1"
    e_type, e_machine, _, e_entry, e_phoff, _, _, _, e_phentsize, e_phnum = struct.unpack_from("<HHIQQQIHHH", data, 16)
    phdrs = [dict(zip(("type", "flags", "offset", "vaddr", "paddr", "filesz", "memsz", "align"),
                      struct.unpack_from("<IIQQQQQQ", data, e_phoff + i * e_phentsize))) for i in range(e_phnum)]
    loads = [p for p in phdrs if p["type"] == 1]

    def at(addr: int) -> int:  # the file offset of an address, through the PT_LOAD covering it
        (p,) = [p for p in loads if p["vaddr"] <= addr < p["vaddr"] + p["filesz"]]
        return addr - p["vaddr"] + p["offset"]

    (dyn,) = [p for p in phdrs if p["type"] == 2]
    tags = {}
    for i in range(dyn["filesz"] // 16):
        tag, val = struct.unpack_from("<qQ", data, dyn["offset"] + 16 * i)
        if tag == 0:
            break
        tags[tag] = val
    strtab = at(tags[5])

    def string(off: int) -> bytes:
        return data[strtab + off:data.index(b"\0", strtab + off)]

    nbucket, nchain = struct.unpack_from("<II", data, at(tags[4]))
    buckets = struct.unpack_from(f"<{nbucket}I", data, at(tags[4]) + 8)
    chains = struct.unpack_from(f"<{nchain}I", data, at(tags[4]) + 8 + 4 * nbucket)
    syms = {}
    for i in range(1, nchain):
        st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", data, at(tags[6]) + 24 * i)
        name = string(st_name)
        j = buckets[_hash(name) % nbucket]  # the lookup ld.so makes
        while j and j != i:
            j = chains[j]
        syms[name.decode()] = dict(info=st_info, shndx=st_shndx, value=st_value, size=st_size, found=j == i,
                                   code=data[at(st_value):at(st_value) + st_size])
    return dict(type=e_type, machine=e_machine, entry=e_entry, phdrs=phdrs, tags=tags, soname=string(tags[14]),
                syms=syms, at=at)


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_written_stand_in_reads_back(machine):
    data = driver_standin.image(machine)
    elf = read_elf(data)
    assert elf["type"] == 3 and elf["machine"] == {"x86_64": 62, "aarch64": 183}[machine] and elf["entry"] == 0
    assert elf["soname"] == b"libcuda.so.1" and elf["tags"][11] == 24  # DT_SYMENT
    assert 0x6FFFFEF5 not in elf["tags"]  # no DT_GNU_HASH: DT_HASH suffices
    types = [p["type"] for p in elf["phdrs"]]
    assert types.count(1) == 2 and 2 in types and 0x6474E551 in types
    for p in elf["phdrs"]:
        if p["type"] == 1:  # mappable with 4, 16 and 64 KiB pages; code not writable, data not executable
            assert (p["vaddr"] - p["offset"]) % 0x10000 == 0 and p["align"] % 0x10000 == 0
            assert p["flags"] in (5, 6) and p["offset"] + p["filesz"] <= len(data)
        if p["type"] == 0x6474E551:
            assert p["flags"] & 1 == 0, "the stack must not be executable"
    (dyn,) = [p for p in elf["phdrs"] if p["type"] == 2]
    assert any(p["type"] == 1 and p["flags"] & 2 and p["vaddr"] <= dyn["vaddr"] < p["vaddr"] + p["memsz"]
               for p in elf["phdrs"]), ".dynamic in a writable segment (glibc < 2.35 relocates it in place)"
    assert set(elf["syms"]) == set(SIX)
    message = data.index(driver_standin.MESSAGE)
    for name, s in elf["syms"].items():
        assert s["found"], f"{name} not found through DT_HASH"
        assert s["info"] == 0x12 and s["shndx"] != 0  # global function, defined
        code, pc = s["code"], s["value"]
        if machine == "x86_64":
            if name == "cuGetErrorString":  # lea rax,[rip+d]; test rsi,rsi; je; mov [rsi],rax; mov eax,0; ret
                assert code[:3] == b"\x48\x8d\x05" and code[7:] == bytes.fromhex("4885f6 7403 488906 b800000000 c3")
                assert elf["at"](pc + 7 + struct.unpack_from("<i", code, 3)[0]) == message
            else:
                assert code == bytes.fromhex("b864000000c3")  # mov eax, 100; ret
        else:
            words = struct.unpack(f"<{len(code) // 4}I", code)
            if name == "cuGetErrorString":  # adr x2, msg; cbz x1, +8; str x2, [x1]; mov w0, #0; ret
                adr = words[0]
                assert adr & 0x9F00001F == 0x10000002
                imm = ((adr >> 5) & 0x7FFFF) << 2 | (adr >> 29) & 3
                assert elf["at"](pc + imm) == message
                assert words[1:] == (0xB4000041, 0xF9000022, 0x52800000, 0xD65F03C0)
            else:
                assert words == (0x52800C80, 0xD65F03C0)  # mov w0, #100; ret


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf here (the reader above checks the same)")
def test_readelf_agrees(tmp_path):
    path = tmp_path / "libcuda.so.1"
    path.write_bytes(driver_standin.image())
    r = subprocess.run(["readelf", "-W", "-d", "--dyn-syms", "-l", str(path)], capture_output=True, text=True)
    assert r.returncode == 0 and "Warning" not in r.stderr and "Error" not in r.stderr, r.stderr
    assert "Library soname: [libcuda.so.1]" in r.stdout
    assert all(f" FUNC    GLOBAL DEFAULT    4 {n}" in r.stdout for n in SIX), r.stdout


def test_other_machines_are_refused_plainly():
    with pytest.raises(elf_image.UnsupportedMachine, match="'riscv64'.*only x86_64 and little-endian aarch64"):
        driver_standin.image("riscv64")


# --------------------------------------------------------------------------------------- loaded in a child
def _scrubbed_env(**extra: str) -> dict[str, str]:
    return {"PATH": os.path.dirname(sys.executable), "HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8",
            "PYTHONPATH": str(ROOT), **extra}


def _child(code: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=_scrubbed_env(**extra), cwd=ROOT, timeout=300)


def test_the_stand_in_loads_and_answers_no_device():
    r = _child("""
        import ctypes, os, stat
        from cudnn_py.backend import driver_standin
        path = driver_standin.write_private(driver_standin.image())
        folder = os.stat(os.path.dirname(path)).st_mode
        print(oct(stat.S_IMODE(folder)), oct(stat.S_IMODE(os.stat(path).st_mode)))
        lib = ctypes.CDLL(path)
        print(*(getattr(lib, n)() for n in driver_standin.SYMBOLS[1:]))
        f = lib.cuGetErrorString
        f.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        out = ctypes.c_char_p()
        print(f(100, ctypes.byref(out)), out.value.decode(), f(100, None))
        print(path)
    """)
    assert r.returncode == 0, r.stderr
    modes, codes, err, path = r.stdout.splitlines()
    assert modes == "0o700 0o500"
    assert codes == "100 100 100 100 100"
    assert err.startswith("0 no device (cudnn_py's deviceless libcuda.so.1 stand-in") and err.endswith(" 0")
    assert not os.path.exists(os.path.dirname(path)), "the private directory outlived its process"


# ------------------------------------------------------------------------------------- the README's path
GRAPHS = """
import cudnn_py as cudnn
from cudnn_py.backend import driver_standin
from cudnn_py.errors import CudaUnavailableError

H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT
g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
a = g.tensor(name="a", dim=[2, 64, 32], stride=[2048, 32, 1])
b = g.tensor(name="b", dim=[2, 32, 16], stride=[512, 16, 1])
g.relu(g.matmul(a, b)).set_output(True).set_data_type(H)
g.validate()
print("matmul", g.session.phase.name)

s = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
q, k, v = (s.tensor(name=n, dim=[1, 2, 128, 64], stride=[16384, 8192, 64, 1]) for n in "qkv")
o, _ = s.sdpa(q=q, k=k, v=v, generate_stats=False, attn_scale=0.125, use_causal_mask=True)
o.set_output(True)
s.validate()
print("sdpa", s.session.phase.name)
print("stand-in", driver_standin.loaded() is not None)
try:
    cudnn.create_handle()
    print("handle made")
except CudaUnavailableError as e:
    print("no handle:", e)
try:  # nothing runs on the stand-in: execute() says why
    g.build([cudnn.heur_mode.A])
    print("built")
except Exception as e:
    print("no plans:", type(e).__name__, str(e).replace("\\n", " "))
"""


def _assert_validated(out: str) -> None:
    lines = out.splitlines()
    assert "matmul VALIDATED" in lines and "sdpa VALIDATED" in lines, out
    if not real_libcuda_available():
        assert "stand-in True" in lines, out
        assert any(line.startswith("no handle: no NVIDIA driver on this machine") for line in lines), out
        assert any(line.startswith("no plans:") and "no NVIDIA driver on this machine" in line for line in lines), out


@pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
def test_deviceless_validation_in_a_scrubbed_child():
    """This interpreter, no LD_PRELOAD, nothing of the test run's environment: the loader loads the stand-in by
    itself."""
    r = _child(GRAPHS)
    assert r.returncode == 0, r.stderr[-3000:]
    _assert_validated(r.stdout)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
def test_readme_path_in_a_fresh_venv_with_no_compiler(tmp_path):
    """A fresh venv (no pip), which sees this environment's installed packages (cuDNN's wheels, numpy, cudnn_py) only
    through a .pth line, run with PATH holding nothing but its own bin/ (no cc, gcc, ld), HOME a new directory and
    nothing else in the environment but the locale."""
    venv = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, env=_scrubbed_env(), timeout=120)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    ours = [p for p in site.getsitepackages() if os.path.isdir(p)]
    # where this process takes cudnn_py from, when that is not an installed copy (a checkout on PYTHONPATH, as on
    # the GPU machine): the venv sees the same package
    import cudnn_py

    here = str(Path(cudnn_py.__file__).resolve().parents[1])
    if not any(here == str(Path(p).resolve()) for p in ours):
        ours.append(here)
    # site.addsitedir, not a bare path: the .pth files there (an editable install's finder) are processed too
    (purelib / "here.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in ours))
    home = tmp_path / "home"
    home.mkdir()
    bindir = str(venv / "bin")
    assert not [c for c in ("cc", "gcc", "clang", "ld") if shutil.which(c, path=bindir)]
    env = {"PATH": bindir, "HOME": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    cwd = tmp_path  # not the checkout: what is imported comes from the install
    py = str(venv / "bin" / "python")

    r = subprocess.run([py, "-m", "cudnn_py", "info", "--json"], capture_output=True, text=True, env=env, cwd=cwd,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    facts = json.loads(r.stdout)
    assert isinstance(facts, dict) and facts, r.stdout[:2000]
    assert "Traceback" not in r.stderr, r.stderr

    script = tmp_path / "graphs.py"
    script.write_text(GRAPHS)
    r = subprocess.run([py, str(script)], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    _assert_validated(r.stdout)
    assert not list(home.rglob("libcuda.so.1")), "the stand-in is written to a temporary directory, not HOME"
