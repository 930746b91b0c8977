"""Where cudnn_py keeps what outlives a process, and whether it may: the cache directory and the switch that turns
it off, at the bottom of the package (it imports nothing of it): the raw layer's use (the loader's kept vetting
verdicts, ``backend/vetting.py``) and planning's disk cache (``plans/disk_cache.py``) read both answers from here.

* the directory: ``CUDNN_PY_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudnn_py``, else ``~/.cache/cudnn_py``;
* ``CUDNN_PY_CACHE=0`` (``off``, ``false``, ``no``; case and blanks ignored) turns every use of it off.

:func:`read_small` and :func:`write_atomic` are for small records only (a verdict: a few hundred bytes): a regular
file, read without following a link and bounded, written to a temporary file and renamed into place, so that a
reader never sees half a record and processes writing at once leave one whole record. Failures are quiet (None /
False): a record that cannot be kept only costs the work it would have saved.
"""
from __future__ import annotations

import contextlib
import os
import tempfile

DIR_ENV = "CUDNN_PY_CACHE_DIR"
SWITCH_ENV = "CUDNN_PY_CACHE"
OFF_VALUES = ("0", "off", "false", "no")


def directory() -> str:
    """``CUDNN_PY_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudnn_py``, else ``~/.cache/cudnn_py``."""
    given = os.environ.get(DIR_ENV)
    if given:
        return os.path.abspath(os.path.expanduser(given))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.abspath(os.path.join(base, "cudnn_py"))


def switched_off() -> str | None:
    """``"CUDNN_PY_CACHE=value"`` when the environment turns the cache off, else None."""
    value = os.environ.get(SWITCH_ENV)
    if value is not None and value.strip().lower() in OFF_VALUES:
        return f"{SWITCH_ENV}={value}"
    return None


def read_small(subdir: str, name: str, limit: int = 16384) -> str | None:
    """The text of ``<directory>/<subdir>/<name>`` if it is a regular file of at most ``limit`` bytes (no link
    followed), else None."""
    path = os.path.join(directory(), subdir, name)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000) or st.st_size > limit:  # S_ISREG
            return None
        data = os.read(fd, limit + 1)
        return data.decode("utf-8") if len(data) <= limit else None
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def write_atomic(subdir: str, name: str, text: str) -> bool:
    """Write ``text`` to ``<directory>/<subdir>/<name>`` through a temporary file renamed into place."""
    folder = os.path.join(directory(), subdir)
    tmp = None
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(folder, name))
        return True
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return False
