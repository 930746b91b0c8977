"""Where cudnn_py keeps what outlives a process, and whether it may: the cache directory and the switch that turns
it off, at the bottom of the package (it imports nothing of it): the raw layer's use (the loader's kept vetting
verdicts, ``backend/vetting.py``) and planning's disk cache (``plans/disk_cache.py``) read both answers from here.

* the directory: ``CUDNN_PY_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudnn_py``, else ``~/.cache/cudnn_py``;
* ``CUDNN_PY_CACHE=0`` (``off``, ``false``, ``no``; case and blanks ignored) turns every use of it off.

Whether a directory is cudnn_py's to use, and how its files are read, written and deleted, is
:mod:`cudnn_py.cache_trust`'s (``docs/security.md``). :func:`read_regular` reads a regular file, without following a
link nor blocking, bounded.
"""
from __future__ import annotations

import errno
import os
import stat

DIR_ENV = "CUDNN_PY_CACHE_DIR"
SWITCH_ENV = "CUDNN_PY_CACHE"
OFF_VALUES = ("0", "off", "false", "no")  # case and surrounding blanks ignored


def directory() -> str:
    """``CUDNN_PY_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudnn_py``, else ``~/.cache/cudnn_py``."""
    given = os.environ.get(DIR_ENV)
    if given:
        return os.path.abspath(os.path.expanduser(given))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.abspath(os.path.join(base, "cudnn_py"))


def switched_off(variable: str = SWITCH_ENV) -> str | None:
    """``"VARIABLE=value"`` when the environment turns a feature off (by default the cache: ``CUDNN_PY_CACHE``),
    else None (unset or any other value). Planning's other switches (``plans/switches.py``) read it too."""
    value = os.environ.get(variable)
    if value is not None and value.strip().lower() in OFF_VALUES:
        return f"{variable}={value}"
    return None


class Refused(OSError):
    """The path is there but is not a regular file of a readable size (``st``: its fstat, when it was opened)."""

    def __init__(self, message: str, st: os.stat_result | None):
        super().__init__(message)
        self.st = st


def read_regular(path: str, limit: int, what: str = "a file", holder: str = "a file") -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most ``limit`` bytes, never following a symbolic link nor blocking on a
    FIFO; :class:`Refused` (naming ``what`` the file should have been, ``holder`` what is bounded) for anything
    else, OSError as raised."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Refused(f"a symbolic link, not {what}", None) from None
        if e.errno in (errno.EISDIR, errno.ENXIO):
            raise Refused("not a regular file", None) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
                "not a regular file"
            raise Refused(f"{kind}, not {what}", st)
        if st.st_size > limit:
            raise Refused(f"{st.st_size} bytes, over the {limit} {holder} may have", st)
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise Refused(f"over the {limit} bytes {holder} may have", st)
        return data, st
    finally:
        os.close(fd)
