"""CPU: compiled kernels kept on disk (issue #38 item 3; cudnn_py/engines/runtime/store.py) under the trust rules of
docs/security.md: sealed kernel files in ``kernels/`` of the cache directory, a corrupt, planted, foreign or copied
file a miss (never handed to the driver), the cubin check before the driver, eviction of the least recently used,
``CUDNN_PY_CACHE=0``, the cache commands, and a warm process that compiles nothing."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import struct
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from cudnn_py import cache_trust
from cudnn_py.cache_trust import CacheWarning
from cudnn_py.engines.runtime import modules, nvrtc, store
from cudnn_py.engines.runtime.store import DiskCubinStore, KernelFiles, MemoryCubinStore, TieredCubinStore
from cudnn_py.errors import CudaDriverError

ROOT = Path(__file__).resolve().parents[1]
ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root (chown)")
needs_nvrtc = pytest.mark.skipif(isinstance(nvrtc.toolchain(), str), reason="no usable NVRTC here")


def fake_cubin(size: int = 256, machine: int = store.EM_CUDA, tag: int = 0) -> bytes:
    head = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + struct.pack("<HH", 2, machine)
    return head + bytes([tag % 256]) * (size - len(head))


def key(i: int = 0) -> str:
    return hashlib.sha256(f"k{i}".encode()).hexdigest()


@pytest.fixture
def cache_on(monkeypatch, tmp_path):
    d = tmp_path / "cache"
    monkeypatch.setenv("CUDNN_PY_CACHE", "1")
    monkeypatch.setenv("CUDNN_PY_CACHE_DIR", str(d))
    return d


def kfile(d: Path, i: int = 0) -> Path:
    return d / "kernels" / (key(i) + ".cubin")


def miss_with_warning(s: DiskCubinStore, k: str, match: str) -> list[str]:
    problems: list[str] = []
    with pytest.warns(CacheWarning, match=match):
        assert s.get(k, problems) is None
    assert problems
    return problems


# ---- the cubin check ----------------------------------------------------------------------------------------------
def test_check_cubin():
    assert store.check_cubin(fake_cubin()) is None
    assert "ELF magic" in store.check_cubin(b"\x00" * 256)
    assert "ELF magic" in store.check_cubin(b"\x7fELF")
    assert "machine 62" in store.check_cubin(fake_cubin(machine=62))
    assert "64-bit little-endian" in store.check_cubin(b"\x7fELF" + bytes([1, 1]) + bytes(250))
    assert "bound" in store.check_cubin(fake_cubin(store.MAX_CUBIN_BYTES + 1))


def test_the_loader_refuses_what_is_not_a_cubin_before_the_driver():
    with pytest.raises(CudaDriverError, match="not loaded: .*ELF"):
        modules.LoadedModule(b"#!/bin/sh\n" + bytes(100), "k")
    with pytest.raises(CudaDriverError, match="not EM_CUDA"):
        modules.LoadedModule(fake_cubin(machine=62), "k")


@needs_nvrtc
def test_nvrtc_output_passes_the_check():
    cubin, _ = nvrtc.compile_cubin('extern "C" __global__ void k(int* p) { *p = 1; }', "k.cu", (), 90)
    assert store.check_cubin(cubin) is None


# ---- the kernel files ---------------------------------------------------------------------------------------------
def test_round_trip_sealed_private_files(cache_on):
    s = DiskCubinStore()
    assert s.get(key()) is None and not cache_on.exists()  # a get creates nothing
    s.put(key(), fake_cubin())
    f = kfile(cache_on)
    assert f.is_file() and stat.S_IMODE(f.stat().st_mode) == 0o600
    assert stat.S_IMODE((cache_on / "kernels").stat().st_mode) == 0o700
    assert f.read_bytes().startswith(b"hmac-sha256:") and f.read_bytes().endswith(fake_cubin())
    assert s.get(key()) == fake_cubin()
    t = TieredCubinStore(MemoryCubinStore(), s)
    assert t.get(key()) == fake_cubin() and len(t.memory) == 1
    s.put(key(1), b"not a cubin")  # never kept
    assert not kfile(cache_on, 1).exists()


def test_switched_off(cache_on, monkeypatch):
    monkeypatch.setenv("CUDNN_PY_CACHE", "0")
    s = DiskCubinStore()
    s.put(key(), fake_cubin())
    assert not cache_on.exists() and s.get(key()) is None
    monkeypatch.setenv("CUDNN_PY_CACHE", "1")
    s.put(key(), fake_cubin())
    monkeypatch.setenv("CUDNN_PY_CACHE", "off")
    assert s.get(key()) is None and kfile(cache_on).exists()


def test_corrupt_file_is_a_miss_and_deleted(cache_on):
    s = DiskCubinStore()
    s.put(key(), fake_cubin())
    f = kfile(cache_on)
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    f.write_bytes(bytes(data))
    problems = miss_with_warning(s, key(), "keyed checksum")
    assert "keyed checksum" in problems[0] and not f.exists()
    s.put(key(), fake_cubin())
    f.write_bytes(f.read_bytes()[:100])  # cut short
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert s.get(key()) is None and not f.exists()


def test_planted_and_copied_files_are_misses(cache_on, tmp_path):
    s = DiskCubinStore()
    s.put(key(9), fake_cubin())  # (makes the directory and kernels/)
    f = kfile(cache_on)
    f.write_bytes(b"hmac-sha256:" + b"0" * 64 + b"\n" + fake_cubin())  # planted: a cubin with a made-up seal
    miss_with_warning(s, key(), "keyed checksum")
    # a file sealed in another cache directory, copied here
    other = tmp_path / "other"
    DiskCubinStore(str(other)).put(key(), fake_cubin())
    shutil.copy(kfile(other), f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert s.get(key()) is None
    # sealed under this key by someone who has it, but not a cubin: still never handed on
    h = cache_trust.home(str(cache_on))
    name = key() + ".cubin"
    body = b"#!/bin/sh\n" + bytes(200)
    f.write_bytes(h.mac(f"kernels/{name}".encode() + b"\0" + body).encode() + b"\n" + body)
    assert s.get(key()) is None and not f.exists()
    f.write_bytes(h.mac(f"kernels/{name}".encode() + b"\0" + body).encode() + b"\n" + body)
    assert "not a cubin" in KernelFiles(str(cache_on)).verify()[0][1]


def test_links_fifos_and_others_writable_files_are_left_in_place(cache_on, tmp_path):
    s = DiskCubinStore()
    s.put(key(9), fake_cubin())
    target = tmp_path / "target"
    target.write_bytes(b"x")
    os.symlink(target, kfile(cache_on))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert s.get(key()) is None
    assert kfile(cache_on).is_symlink() and target.read_bytes() == b"x"
    s.put(key(), fake_cubin())  # not replaced
    assert kfile(cache_on).is_symlink()
    os.mkfifo(kfile(cache_on, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert s.get(key(1)) is None  # (no block on the FIFO)
    s.put(key(2), fake_cubin())
    os.chmod(kfile(cache_on, 2), 0o666)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert s.get(key(2)) is None
    assert not kfile(cache_on, 2).exists()  # (this user's file: deleted, as the disk cache's entries are)


@ROOT_ONLY
def test_another_users_file_is_a_miss_and_left(cache_on):
    s = DiskCubinStore()
    s.put(key(), fake_cubin())
    os.chown(kfile(cache_on), 65534, 65534)
    problems: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert s.get(key(), problems) is None
    assert "owned by uid 65534" in problems[0] and kfile(cache_on).exists()
    left: list[tuple[str, str]] = []
    assert KernelFiles(str(cache_on)).clear(left) == 0 and left and kfile(cache_on).exists()


def test_kernels_directory_of_another_kind_is_refused(cache_on):
    assert cache_trust.home(str(cache_on)) is not None  # (the directory and its marker, no kernels/ yet)
    (cache_on / "kernels").write_text("x")
    with pytest.warns(CacheWarning, match="kernel files are not used"):
        DiskCubinStore(str(cache_on)).get(key())
    assert (cache_on / "kernels").read_text() == "x"


def test_eviction_deletes_least_recently_used_only_ours(cache_on, monkeypatch):
    s = DiskCubinStore()
    size = len(fake_cubin(1024)) + 90
    monkeypatch.setenv(store.MAX_BYTES_ENV, str(3 * size))
    for i in range(3):
        s.put(key(i), fake_cubin(1024, tag=i))
        os.utime(kfile(cache_on, i), (time.time() - 100 + i, time.time() - 100 + i))
    assert s.get(key(0)) is not None  # used: now the most recent
    (cache_on / "kernels" / "notes.txt").write_text("mine")
    s.put(key(3), fake_cubin(1024, tag=3))
    assert [kfile(cache_on, i).exists() for i in range(4)] == [True, False, True, True]
    assert (cache_on / "kernels" / "notes.txt").exists()
    monkeypatch.setenv(store.MAX_BYTES_ENV, "junk")
    assert store.max_bytes() == store.DEFAULT_MAX_BYTES


# ---- the cache commands -------------------------------------------------------------------------------------------
def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudnn_py", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_cache_commands_cover_the_kernel_files(cache_on):
    s = DiskCubinStore(str(cache_on))
    for i in range(2):
        s.put(key(i), fake_cubin(tag=i))
    (cache_on / "kernels" / "other.bin").write_text("not ours to delete")
    r = cli("cache", "show", "--dir", str(cache_on))
    assert r.returncode == 0 and "compiled kernels (kernels/): 2," in r.stdout, r.stdout + r.stderr
    r = cli("cache", "verify", "--dir", str(cache_on))
    assert r.returncode == 0 and "2 compiled kernels" in r.stdout and "0 bad" in r.stdout, r.stdout + r.stderr
    kfile(cache_on, 1).write_bytes(b"junk")
    r = cli("cache", "verify", "--dir", str(cache_on))
    assert r.returncode == 1 and key(1) in r.stdout and "1 bad" in r.stdout, r.stdout
    r = cli("cache", "clear", "--dir", str(cache_on))
    assert r.returncode == 0 and "2 compiled kernels" in r.stdout, r.stdout + r.stderr
    assert sorted(os.listdir(cache_on / "kernels")) == ["other.bin"] and (cache_on / cache_trust.MARKER).exists()


# ---- a warm process compiles nothing ------------------------------------------------------------------------------
_CHILD = textwrap.dedent("""
    import hashlib, sys
    from cudnn_py.engines.runtime import modules, nvrtc
    if sys.argv[1] == "warm":
        import cuda.bindings.nvrtc as raw
        def refuse(*a, **k):
            raise AssertionError("NVRTC compiled in a warm process")
        raw.nvrtcCompileProgram = refuse
        nvrtc.compile_cubin = refuse
    src = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] *= 2.0f; }'
    c = modules.compiled(src, "k.cu", ("-DWARM=1",), 90)
    print(hashlib.sha256(c.cubin).hexdigest(), modules.COMPILES["count"], bool(c.log))
""")


@needs_nvrtc
def test_a_warm_process_compiles_nothing(cache_on):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cold = subprocess.run([sys.executable, "-c", _CHILD, "cold"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert cold.returncode == 0, cold.stderr
    digest, count, logged = cold.stdout.split()
    assert count == "1" and logged == "True"
    files = list((cache_on / "kernels").glob("*.cubin"))
    assert len(files) == 1
    warm = subprocess.run([sys.executable, "-c", _CHILD, "warm"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.split() == [digest, "0", "False"]
    # a damaged file: the warm process compiles again (and does not load the damaged bytes)
    files[0].write_bytes(files[0].read_bytes()[:-8] + b"\0" * 8)
    again = subprocess.run([sys.executable, "-c", _CHILD, "cold"], capture_output=True, text=True, env=env,
                           timeout=300)
    # (compiled again: the same cubin; whether NVRTC's log says anything depends on its version)
    # (on the device the fields of this run once arrived separated by NULs: split on those too)
    fields = again.stdout.replace("\0", " ").split()
    assert again.returncode == 0 and fields[:2] == [digest, "1"], again.stdout + again.stderr
    assert "CacheWarning" in again.stderr
