"""The shared objects this process has mapped or loaded, found without loading anything: what the loader reuses
(a libcudnn torch loaded), what the vetting child is given to load first, what ``info`` reports.
"""
from __future__ import annotations

import ctypes
import os

from ..bounded_read import read_regular

MAX_MAPS_BYTES = 256 << 20  # /proc/self/maps: about 100 bytes a mapping


def mapped_libraries(fragment: str) -> list[str]:
    """Distinct paths of shared objects mapped into this process whose file name contains ``fragment``."""
    paths: list[str] = []
    try:  # through the bounded reader: /proc/self/maps says size 0, and a process's map is far below the cap
        maps, _ = read_regular("/proc/self/maps", MAX_MAPS_BYTES, "the process's memory map", follow_links=True)
    except OSError:  # not Linux: nothing to report
        return paths
    for line in maps.decode("utf-8", "surrogateescape").splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6:
            p = parts[5].strip()
            if fragment in os.path.basename(p) and p not in paths:
                paths.append(p)
    return paths


class _LinkMap(ctypes.Structure):
    _fields_ = [("l_addr", ctypes.c_void_p), ("l_name", ctypes.c_char_p)]


def loaded_path_of(soname: str) -> str | None:
    """The file of the object this process has loaded under ``soname`` (e.g. "libcuda.so.1"), or None. Never loads
    anything (RTLD_NOLOAD)."""
    try:
        handle = ctypes.CDLL(soname, mode=getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1))
    except OSError:
        return None
    try:
        dlinfo = ctypes.CDLL(None).dlinfo  # glibc >= 2.34; before that, in libdl
    except AttributeError:
        try:
            dlinfo = ctypes.CDLL("libdl.so.2").dlinfo
        except (OSError, AttributeError):
            return None
    lm = ctypes.POINTER(_LinkMap)()
    dlinfo.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    if dlinfo(handle._handle, 2, ctypes.byref(lm)) != 0 or not lm:  # 2 = RTLD_DI_LINKMAP
        return None
    name = lm.contents.l_name
    return os.fsdecode(name) if name else None

