"""Vetting: a candidate ``libcudnn.so.9`` tried before :mod:`.loader` maps it into this process.

A broken install must not kill the process that loads it: a truncated ``libcudnn.so.9`` dies of SIGBUS inside
``dlopen``, and a lone ``libcudnn.so.9`` without its sub-libraries aborts in its first call. So before a candidate is
loaded into this process it is checked: its sub-libraries (:data:`SUBLIBRARIES`) must lie beside it, none of them may
be shorter than its ELF headers say (a truncated copy, named), and it is tried once in a child process (``python -I -S
-c``, with the driver library and cuBLASLt this process has loaded: dlopen, the cuDNN symbols, every function
:func:`~cudnn_py.backend.loader.load_library` calls, then what validation and planning do first - an operation graph
finalized without a handle, which loads the sub-libraries, and a heuristics query; without a driver library the
sub-libraries that need it fail to load cleanly, here as there; about 90-150 ms on a CPU machine, partly hidden). The
verdict (:class:`Verdict`) is cached per (path, mtime, size) for the process; a rejected one says why (e.g. "a trial
load in a child process died of SIGABRT in finalize (it said: ...)"). ``CUDNN_PY_LIBRARY_VETTED=1`` turns vetting off
(the caller vouches for the library: :func:`vetting_enabled`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import bounded_read, cache_home, cache_trust
from .._version import __version__
from . import driver_standin
from .mapped import loaded_path_of, mapped_libraries

# the sub-libraries libcudnn.so.9 dlopens from its own directory for the graph/backend API (the legacy ops/cnn/adv
# libraries and the newer optional ones are not required)
SUBLIBRARIES = ("libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
                "libcudnn_heuristic.so.9")
SYMBOLS = ("cudnnGetVersion", "cudnnGetCudartVersion", "cudnnGraphVersionCheck", "cudnnBackendCreateDescriptor")
VET_TIMEOUT_S = 60.0


_VET_SCRIPT = r"""
import ctypes, json, os, resource, sys
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash here is expected: no core dump
def say(**kw):
    sys.stdout.write(json.dumps(kw) + "\n"); sys.stdout.flush()
mode, arg, symbols, preload = sys.argv[1], sys.argv[2], sys.argv[3].split(","), json.loads(sys.argv[4])
if mode == "pathfinder":
    sys.path[:] = json.loads(arg)
    say(stage="cuda.pathfinder")
    try:
        from cuda import pathfinder
        path = pathfinder.load_nvidia_dynamic_lib("cudnn").abs_path
    except Exception as e:
        say(error=f"{type(e).__name__}: {e}"); sys.exit(0)
else:
    path = arg
for dep in preload:  # what the parent has loaded of cuDNN's dependencies (the driver library, cuBLASLt)
    try:
        ctypes.CDLL(dep, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        pass
def mapped():
    with open("/proc/self/maps") as f:
        return sorted({os.path.basename(l.split()[-1]) for l in f if "libcudnn" in l})
say(stage="dlopen", path=path)
try:
    lib = ctypes.CDLL(path)
except OSError as e:
    say(error=str(e)); sys.exit(0)
missing = [s for s in symbols if not hasattr(lib, s)]
if missing:
    say(missing=missing); sys.exit(0)
out = {}
for name in ("cudnnGetVersion", "cudnnGetCudartVersion", "cudnnGraphVersionCheck"):  # what load_library() calls
    say(stage=name)
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = (ctypes.c_int if name == "cudnnGraphVersionCheck" else ctypes.c_size_t), []
    out[name] = int(fn())
say(version=out["cudnnGetVersion"], check=out["cudnnGraphVersionCheck"])
if out["cudnnGetVersion"] < 90000 or out["cudnnGraphVersionCheck"] != 0:
    say(stage="done"); sys.exit(0)
# what validate() and planning do first: an operation graph (RELU over 8 floats) finalized without a handle, then a
# heuristics query. The first finalize loads the sub-libraries (a truncated one dies of SIGBUS here); without a
# driver library some of them fail to load, cleanly (CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED), in the parent too.
vp, i64 = ctypes.c_void_p, ctypes.c_int64
create, set_, fin, get = (lib.cudnnBackendCreateDescriptor, lib.cudnnBackendSetAttribute, lib.cudnnBackendFinalize,
                          lib.cudnnBackendGetAttribute)
create.argtypes, create.restype = [ctypes.c_int, ctypes.POINTER(vp)], ctypes.c_int
set_.argtypes, set_.restype = [vp, ctypes.c_int, ctypes.c_int, i64, vp], ctypes.c_int
fin.argtypes, fin.restype = [vp], ctypes.c_int
get.argtypes, get.restype = [vp, ctypes.c_int, ctypes.c_int, i64, ctypes.POINTER(i64), vp], ctypes.c_int
class Status(Exception):
    pass
def call(st, what):
    if st != 0:
        raise Status(f"{what} returned status {st}")
def desc(kind, attrs):
    d = vp()
    call(create(kind, ctypes.byref(d)), "cudnnBackendCreateDescriptor")
    for attr, typ, ctype, values in attrs:
        arr = (ctype * len(values))(*values)
        call(set_(d, attr, typ, len(values), ctypes.cast(arr, vp)), "cudnnBackendSetAttribute")
    say(stage="finalize", kind=kind, mapped=mapped())
    call(fin(d), f"cudnnBackendFinalize (descriptor type {kind})")
    return d
def tensor(uid):  # CUDNN_BACKEND_TENSOR_DESCRIPTOR: data type, dims, strides, uid, alignment
    return desc(17, [(901, 1, ctypes.c_int, [0]), (902, 3, i64, [1, 1, 8]), (903, 3, i64, [8, 8, 1]),
                     (906, 3, i64, [uid]), (900, 3, i64, [16])])
try:
    x, y = tensor(1), tensor(2)
    pw = desc(0, [(0, 14, ctypes.c_int, [100]), (1, 1, ctypes.c_int, [0])])  # POINTWISE: RELU_FWD, float
    op = desc(13, [(750, 15, vp, [pw.value]), (751, 15, vp, [x.value]), (753, 15, vp, [y.value])])
    og = desc(15, [(801, 15, vp, [op.value])])  # OPERATIONGRAPH of that op, no handle
    heur = desc(4, [(201, 15, vp, [og.value]), (200, 8, ctypes.c_int, [3])])  # ENGINEHEUR, mode A
    say(stage="heuristics results", mapped=mapped())
    n = i64(0)
    call(get(heur, 202, 15, 0, ctypes.byref(n), None), "cudnnBackendGetAttribute (ENGINEHEUR_RESULTS)")
    say(stage="done", exercised="an operation graph and a heuristics query", mapped=mapped())
except Status as e:
    say(stage="done", exercised=f"stopped cleanly: {e}", mapped=mapped())
"""

# the libraries the first finalize may load, in the order cuDNN 9.28 loads them (engines_tensor_ir is optional: not
# in every cuDNN 9, and loaded only where the runtime-compiled engines load, i.e. with a driver library)
FIRST_FINALIZE_LOADS = ("libcudnn_engines_precompiled.so.9", "libcudnn_heuristic.so.9",
                        "libcudnn_engines_runtime_compiled.so.9", "libcudnn_engines_tensor_ir.so.9")

_HINTS = {
    ("dlopen", "SIGBUS"): "the file is truncated or corrupt",
    ("dlopen", "SIGSEGV"): "the file is corrupt",
    ("cudnnGetVersion", "SIGABRT"): "its sub-libraries are missing or cannot be loaded",
    ("cudnnGraphVersionCheck", "SIGABRT"): "its sub-libraries are missing or cannot be loaded",
}


def _dependencies_loaded() -> list[str]:
    """The files of cuDNN's dependencies this process has loaded: the vetting child loads them first, as cuDNN will
    find them here (a copy of libcudnn away from the wheel finds cuBLASLt only so; without it cuDNN aborts)."""
    cuda = loaded_path_of("libcuda.so.1")
    return ([cuda] if cuda else []) + [p for p in mapped_libraries("libcublasLt.so") if os.path.isabs(p)]


def _crash_hint(stage: str, sig: str, seen: dict) -> str:
    if stage in ("finalize", "heuristics results") and sig == "SIGBUS":
        loaded = set(seen.get("mapped", ()))
        pending = [s for s in FIRST_FINALIZE_LOADS if s not in loaded] or list(FIRST_FINALIZE_LOADS)
        what = "the first descriptor finalize, which loads the cuDNN sub-libraries" if stage == "finalize" else \
            "the first heuristics query"
        return f"in {what}: one of {', '.join(pending)} is truncated or corrupt"
    return _HINTS.get((stage, sig), "")


def _elf_truncation(path: str) -> str | None:
    """Why the ELF file at ``path`` is shorter than its own headers say (a truncated copy), or None. Reads the
    header and the program headers of a regular file only; not ELF64 (or unreadable): None (the trial decides)."""
    try:  # the bounded reader's checks (a regular file, never blocking on a FIFO); only the headers are read
        with bounded_read.opened(path, sys.maxsize, "a library", follow_links=True) as (fd, st):
            head = os.pread(fd, 64, 0)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
                return None
            end = "<" if head[5] == 1 else ">"
            phoff, shoff = struct.unpack_from(end + "QQ", head, 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(end + "HHHH", head, 0x36)
            table = os.pread(fd, min(phentsize * phnum, st.st_size), phoff)  # more would be past its end
    except (OSError, struct.error, OverflowError):
        return None
    need = shoff + shentsize * shnum if shnum else 0
    if len(table) < phentsize * phnum or phentsize < 40:
        need = max(need, phoff + phentsize * phnum)
    else:
        for i in range(phnum):
            (p_type,) = struct.unpack_from(end + "I", table, i * phentsize)
            p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from(end + "QQQQ", table, i * phentsize + 8)
            if p_type == 1:  # PT_LOAD
                need = max(need, p_offset + p_filesz)
    if st.st_size < need:
        return f"{path} is truncated ({st.st_size} bytes; its ELF headers need {need})"
    return None


def _trial_files(path: str) -> list[str]:
    """``path`` and the cuDNN sub-libraries beside it that a trial load loads (required or optional), each once."""
    d = os.path.dirname(os.path.realpath(path))
    return list(dict.fromkeys([path, *(os.path.join(d, s) for s in (*SUBLIBRARIES, *FIRST_FINALIZE_LOADS))]))


def truncated_libraries(path: str) -> list[str]:
    """Why ``path`` or a cuDNN sub-library beside it is truncated, one line each (cheap: ELF headers only)."""
    return [why for f in _trial_files(path) if (why := _elf_truncation(f)) is not None]


@dataclass(frozen=True)
class Verdict:
    """What trying a candidate in a child process showed. ``reason`` is empty when it is fine."""

    path: str
    reason: str = ""
    version: int = 0
    check: int = 0
    ms: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.reason


_verdicts: dict[tuple[str, int, int], Verdict] = {}
vetting_ms = 0.0  # time this process spent waiting for vetting children (the latency vetting added)
remembered = 0  # verdicts taken from an earlier process (kept in the cache directory) instead of a trial


def vetting_enabled() -> bool:
    return os.environ.get("CUDNN_PY_LIBRARY_VETTED", "") not in ("1", "true", "yes")


def missing_sublibraries(path: str) -> list[str]:
    """The required sub-libraries found neither beside ``path`` nor beside the file it links to."""
    dirs = {os.path.dirname(os.path.abspath(path)), os.path.dirname(os.path.realpath(path))}
    return [s for s in SUBLIBRARIES if not any(os.path.exists(os.path.join(d, s)) for d in dirs)]


def signal_name(signum: int) -> str:
    """``SIGSEGV`` for 11; the number where it names no signal (a child's return code is its negation)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _run_vet_child(mode: str, arg: str, meanwhile: Callable[[], object] | None = None) -> Verdict:
    """Try the library in a child process; ``meanwhile`` runs here while the child works (its errors ignored)."""
    global vetting_ms
    exe = sys.executable
    if not exe or not os.path.exists(exe):
        return Verdict(arg if mode == "path" else "", "")  # cannot vet (embedded interpreter): accept, unvetted
    flags = ["-I", "-S"] if mode == "path" else ["-I"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen([exe, *flags, "-c", _VET_SCRIPT, mode, arg, ",".join(SYMBOLS),
                                 json.dumps(_dependencies_loaded())],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace")
    except OSError:
        return Verdict(arg if mode == "path" else "", "")  # cannot spawn: accept, unvetted
    try:
        if meanwhile is not None:
            t1 = time.perf_counter()
            with contextlib.suppress(Exception):
                meanwhile()
            t0 += time.perf_counter() - t1  # not vetting's time: that work had to be done anyway
        stdout, stderr = proc.communicate(timeout=VET_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return Verdict(arg, f"a trial load in a child process did not finish in {VET_TIMEOUT_S:.0f} s "
                            "(set CUDNN_PY_LIBRARY_VETTED=1 to skip the trial)")
    finally:
        ms = (time.perf_counter() - t0) * 1e3
        vetting_ms += ms
    returncode = proc.returncode
    seen: dict = {}
    for line in stdout.splitlines():
        try:
            seen.update(json.loads(line))
        except ValueError:
            pass
    path = seen.get("path", arg if mode == "path" else "")
    stage = seen.get("stage", "start-up")
    if returncode < 0:
        sig = signal_name(-returncode)
        hint = _crash_hint(stage, sig, seen)
        said = [line for line in stderr.strip().splitlines() if line.strip()]
        if said and sig != "SIGBUS":
            hint = f"{hint}; it said: {said[-1][:200]}" if hint else f"it said: {said[-1][:200]}"
        return Verdict(path, f"a trial load in a child process died of {sig} in {stage}" +
                       (f" ({hint})" if hint else ""), int(seen.get("version", 0)), ms=ms)
    if "error" in seen:
        return Verdict(path, str(seen["error"]), ms=ms)
    if "missing" in seen:
        return Verdict(path, f"not a cuDNN library (does not export {', '.join(seen['missing'])})", ms=ms)
    if stage != "done":
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return Verdict(path, f"a trial load in a child process exited with status {returncode} in {stage}: "
                             f"{tail}", ms=ms)
    return Verdict(path, "", int(seen.get("version", 0)), int(seen.get("check", 0)), ms)


def _key(path: str) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.path.realpath(path), st.st_mtime_ns, st.st_size


# A verdict that a library is fine is kept across processes (the trial costs 100-150 ms of every fresh process's
# first use, issue #29), in the cache directory (cudnn_py/cache_home.py; CUDNN_PY_CACHE=0 keeps none), keyed by what
# the trial depended on: this cudnn_py (the trial's script), and the identity (real path, size, mtime, inode) of the
# library, of every sub-library beside it that the trial loads, and of the dependencies this process loaded first
# (libcuda, cuBLASLt; cudnn_py's deviceless stand-in for libcuda, a new file in each process, by its bytes). Any of
# them replaced, and the key differs: the trial runs again. Only good verdicts are kept: a broken install is tried
# again each time, so that a repaired one is seen at once.
# A kept verdict skips the trial, so it is trusted as an entry of the disk cache is (docs/security.md): read only from
# a cache directory that is this user's and cudnn_py's, from a regular file of this user, and sealed with the
# directory's key (cudnn_py/cache_trust.py: read_record / write_record); a verdict that fails (planted by someone
# else, copied from another directory) is not used, with one CacheWarning, and the trial runs.
VERDICTS_SUBDIR = "vetted"


def _verdict_key(path: str) -> str | None:
    identity: list[list] = []
    for f in dict.fromkeys([*_trial_files(path), *_dependencies_loaded()]):
        if f == driver_standin.loaded():  # a new file of each process: by its bytes (what the trial depended on)
            identity.append([driver_standin.SONAME, hashlib.sha256(driver_standin.image()).hexdigest()])
            continue
        try:
            st = os.stat(f)
        except OSError:
            continue  # (an optional sub-library absent: absent in the key too)
        identity.append([os.path.realpath(f), st.st_size, st.st_mtime_ns, st.st_ino])
    if not identity or identity[0][0] != os.path.realpath(path):
        return None
    return json.dumps({"cudnn_py": __version__, "files": identity}, sort_keys=True)


def _verdict_file(key: str) -> str:
    import hashlib

    return hashlib.sha256(key.encode()).hexdigest()[:32] + ".json"


def _remembered(path: str, key: str | None) -> Verdict | None:
    """A good verdict an earlier process kept for exactly this library and its neighbours, or None. ``key``: the
    :func:`_verdict_key` taken before the trial would start (what the trial would depend on then: the
    dependencies the trial's ``meanwhile`` loads come after it, in every process alike)."""
    if cache_home.switched_off() or not vetting_enabled():
        return None
    text = cache_trust.read_record(VERDICTS_SUBDIR, _verdict_file(key)) if key is not None else None
    if text is None:
        return None
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("key") != key:
            return None
        version, check = doc.get("version"), doc.get("check")
        if not (isinstance(version, int) and isinstance(check, int) and not isinstance(version, bool)
                and not isinstance(check, bool) and 0 <= version < 10**7 and 0 <= check < 10**7):
            return None
    except ValueError:
        return None
    return Verdict(path, "", version, check, 0.0)


def _remember(key: str | None, verdict: Verdict) -> None:
    if cache_home.switched_off():
        return
    if key is not None:
        cache_trust.write_record(VERDICTS_SUBDIR, _verdict_file(key),
                                 json.dumps({"key": key, "version": verdict.version, "check": verdict.check}))


def vet(path: str, meanwhile: Callable[[], object] | None = None) -> Verdict:
    """Check a candidate without loading it into this process (cached per path, mtime and size). ``meanwhile``:
    work for this process to do while the child runs."""
    global remembered
    key = _key(path)
    if key is None:
        return Verdict(path, "no such file")
    cached = _verdicts.get(key)
    if cached is not None:
        return cached
    truncated = truncated_libraries(path)
    if truncated:  # named without a trial: the trial would die of SIGBUS loading it
        verdict = Verdict(path, "; ".join(truncated) + " (a broken install: reinstall the cuDNN wheel)")
        _verdicts[key] = verdict
        return verdict
    verdict_key = _verdict_key(path)
    kept = _remembered(path, verdict_key)
    if kept is not None:
        remembered += 1
        _verdicts[key] = kept
        return kept
    verdict = _run_vet_child("path", path, meanwhile)
    if verdict.ok:
        _remember(verdict_key, verdict)
    missing = missing_sublibraries(path)
    if missing and not verdict.ok:  # (it may still find them elsewhere, e.g. on LD_LIBRARY_PATH: the trial decides)
        verdict = Verdict(path, f"{verdict.reason}; and sub-libraries it needs are not beside it: "
                                f"{', '.join(missing)} (a lone {os.path.basename(path)} cannot work)", ms=verdict.ms)
    _verdicts[key] = verdict
    return verdict


def _pathfinder_candidate() -> str | None:
    """The file cuda.pathfinder would load for "cudnn" from a wheel or conda, found without loading anything (its
    find steps are not public API: any failure means "unknown")."""
    try:
        from cuda.pathfinder._dynamic_libs.lib_descriptor import LIB_DESCRIPTORS
        from cuda.pathfinder._dynamic_libs.search_steps import EARLY_FIND_STEPS, SearchContext, run_find_steps

        found = run_find_steps(SearchContext(LIB_DESCRIPTORS["cudnn"]), EARLY_FIND_STEPS)
        return str(found.abs_path) if found is not None else None
    except Exception:
        return None


def _vet_pathfinder() -> Verdict:
    path = _pathfinder_candidate()
    if path is not None:
        # meanwhile, load what pathfinder would load first anyway (cudnn's dependency): hides most of the trial's time
        return vet(path, meanwhile=_load_pathfinder_dependencies)
    verdict = _run_vet_child("pathfinder", json.dumps(sys.path))  # system/CUDNN_PATH search: pathfinder in the child
    if verdict.ok and verdict.path and (truncated := truncated_libraries(verdict.path)):
        verdict = Verdict(verdict.path, "; ".join(truncated) + " (a broken install: reinstall the cuDNN wheel)")
    key = _key(verdict.path) if verdict.path else None
    if key is not None:
        _verdicts.setdefault(key, verdict)
    return verdict


def _load_pathfinder_dependencies() -> None:
    from cuda import pathfinder

    pathfinder.load_nvidia_dynamic_lib("cublasLt")
