"""The cuDNN C-API families outside the graph API (``cudnn_subquadratic_ops.h``: causal conv1d and the FFT
convolutions; ``cudnn_gnn_ops.h``: the GNN ops), loaded from the library that exports them, on first use.

In cuDNN 9.28 both families are exported by ``libcudnn_ext.so.9`` (``libcudnn.so.9`` re-exports them as a shim), which
lies beside ``libcudnn.so.9``; older releases have neither the library nor the symbols. Nothing is loaded at import,
nor by :func:`~cudnn_py.backend.loader.load_library`: the first :func:`function` of a family loads libcudnn (as any
call does), then ``libcudnn_ext.so.9`` from the directory of the loaded libcudnn (or the copy already mapped in this
process), vetted first as the loader vets libcudnn (:mod:`.vetting`: ELF truncation named without a trial, then a
trial load in a child process - dlopen beside its libcudnn, the family's symbols, ``cudnnSubquadraticOpsVersionCheck``
where exported -; ``CUDNN_PY_LIBRARY_VETTED=1`` skips the trial, a copy already mapped is not vetted).

Gating is on the *loaded* library, never on the headers: a function whose ``@since`` is newer than the loaded cuDNN,
a library without the symbol, or no ``libcudnn_ext.so.9`` at all is refused with
:class:`~cudnn_py.errors.FeatureVersionError` naming the function and the version that has it (the GNN header states
none: "the cuDNN 9.28 headers declare it", the newest pinned), before anything is called.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from .._generated import HEADER_VERSION
from .._generated.functions import FUNCTIONS, STRUCTS
from ..errors import CApiUnavailableError, FeatureVersionError
from . import vetting
from .api import ctype
from .loader import load_library
from .mapped import mapped_libraries

EXT_SONAME = "libcudnn_ext.so.9"
# header -> the family's name in messages
FAMILIES = {"cudnn_subquadratic_ops.h": "subquadratic (causal conv1d / FFT conv)", "cudnn_gnn_ops.h": "GNN"}
VERSION_CHECK = "cudnnSubquadraticOpsVersionCheck"


def family_functions(header: str) -> tuple[str, ...]:
    return tuple(n for n, f in FUNCTIONS.items() if f[2] == header)


def _struct(name: str) -> type[ctypes.Structure]:
    _header, fields = STRUCTS[name]
    return type(name, (ctypes.Structure,), {"_fields_": [(f, ctype(t)) for f, t in fields]})


GnnCscGraph = _struct("cudnnGnnCscGraph_t")  # the generated layouts, as ctypes structures
GnnMhaParams = _struct("cudnnGnnMhaParams_t")


@dataclass
class ExtLibrary:
    """``libcudnn_ext.so.9`` as loaded (``cdll`` None where it is not: ``why`` says so)."""

    path: str = ""
    cdll: ctypes.CDLL | None = None
    why: str = ""
    missing: set[str] = field(default_factory=set)  # family functions the loaded copy does not export


_lock = threading.Lock()
_ext: ExtLibrary | None = None

_VET_EXT = r"""
import ctypes, json, resource, sys
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
def say(**kw):
    sys.stdout.write(json.dumps(kw) + "\n"); sys.stdout.flush()
core, ext, symbols = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
say(stage="dlopen libcudnn"); ctypes.CDLL(core, mode=ctypes.RTLD_GLOBAL)
say(stage="dlopen")
try:
    lib = ctypes.CDLL(ext)
except OSError as e:
    say(error=str(e)); sys.exit(0)
say(exported=[s for s in symbols if hasattr(lib, s)])
if hasattr(lib, "cudnnSubquadraticOpsVersionCheck"):
    say(stage="cudnnSubquadraticOpsVersionCheck")
    fn = lib.cudnnSubquadraticOpsVersionCheck; fn.restype, fn.argtypes = ctypes.c_int, []
    say(check=int(fn()))
say(stage="done")
"""


def _vet_ext(core: str, path: str) -> str:
    """Why ``path`` must not be loaded into this process ("" when it may)."""
    truncated = vetting._elf_truncation(path)
    if truncated:
        return truncated + " (a broken install: reinstall the cuDNN wheel)"
    if not vetting.vetting_enabled() or not sys.executable:
        return ""
    symbols = [n for h in FAMILIES for n in family_functions(h)]
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", _VET_EXT, core, path, ",".join(symbols)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                              timeout=vetting.VET_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"a trial load in a child process did not finish in {vetting.VET_TIMEOUT_S:.0f} s"
    except OSError:
        return ""  # cannot spawn: accepted unvetted, as the loader does
    seen: dict = {}
    for line in proc.stdout.splitlines():
        try:
            seen.update(json.loads(line))
        except ValueError:
            pass
    if proc.returncode < 0:
        return (f"a trial load in a child process died of {vetting.signal_name(-proc.returncode)} in "
                f"{seen.get('stage', 'start-up')}")
    if "error" in seen:
        return str(seen["error"])
    if seen.get("check", 0) != 0:
        from ..errors import status_name

        return (f"{VERSION_CHECK}() returned {status_name(seen['check'])}: it and {os.path.basename(core)} come "
                "from different cuDNN versions")
    if seen.get("stage") != "done":
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"a trial load in a child process exited with status {proc.returncode}: {tail}"
    return ""


def _load() -> ExtLibrary:
    core = load_library().path
    already = [p for p in mapped_libraries("libcudnn_ext.so") if os.path.isabs(p)]
    dirs = dict.fromkeys([os.path.dirname(os.path.abspath(core)), os.path.dirname(os.path.realpath(core))])
    candidates = [os.path.join(d, EXT_SONAME) for d in dirs if os.path.isfile(os.path.join(d, EXT_SONAME))]
    if already:
        path = already[0]
    elif candidates:
        path = candidates[0]
        why = _vet_ext(core, path)
        if why:
            return ExtLibrary(path, None, f"{path} was refused: {why}")
    else:
        return ExtLibrary("", None, f"no {EXT_SONAME} beside the loaded {core}")
    try:
        cdll = ctypes.CDLL(path)
    except OSError as e:
        return ExtLibrary(path, None, f"{path} does not load: {e}")

    lib = ExtLibrary(path, cdll)
    for header in FAMILIES:
        for name in family_functions(header):
            restype, args, _h, _since, _dep = FUNCTIONS[name]
            try:
                fn = getattr(cdll, name)
            except AttributeError:
                lib.missing.add(name)
                continue
            fn.restype, fn.argtypes = ctype(restype), [ctype(t) for _, t in args]
    return lib


def ext_library() -> ExtLibrary:
    """``libcudnn_ext.so.9`` (loaded, with the families' prototypes bound, on the first call)."""
    global _ext
    if _ext is None:
        with _lock:
            if _ext is None:
                _ext = _load()
    return _ext


def header_version() -> int:
    return int(HEADER_VERSION)


def function(name: str) -> Any:
    """The bound C function ``name`` of a family, or :class:`FeatureVersionError` where the loaded cuDNN lacks it."""
    entry = FUNCTIONS.get(name)
    if entry is None or entry[2] not in FAMILIES:
        raise KeyError(f"{name!r} is not a function of the bound C-API families ({', '.join(FAMILIES)})")
    since = entry[3]
    loaded = load_library().version
    needed = since if since is not None else header_version()
    said = "" if since is not None else (f"; {entry[2]} gives no @since: the cuDNN "
                                         f"{header_version() // 10000}.{header_version() // 100 % 100} headers "
                                         "declare it")
    if since is not None and since > loaded:
        raise CApiUnavailableError(f"{name} ({FAMILIES[entry[2]]} C API)", since, loaded,
                                  f"not in the loaded {load_library().path}")
    lib = ext_library()
    if lib.cdll is None:
        raise CApiUnavailableError(f"{name} ({FAMILIES[entry[2]]} C API)", needed, loaded, f"{lib.why}{said}")
    if name in lib.missing:
        raise CApiUnavailableError(f"{name} ({FAMILIES[entry[2]]} C API)", needed, loaded,
                                  f"not exported by {lib.path}{said}")
    return getattr(lib.cdll, name)


def available(name: str) -> bool:
    """Whether :func:`function` would return ``name`` (loads the libraries)."""
    try:
        function(name)
    except FeatureVersionError:
        return False
    return True


def why_unavailable(name: str) -> str:
    """The refusal :func:`function` raises for ``name``, "" where it is available."""
    try:
        function(name)
    except FeatureVersionError as e:
        return str(e)
    return ""


def _reset_for_tests() -> None:
    global _ext
    _ext = None
