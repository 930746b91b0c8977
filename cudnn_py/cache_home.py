"""Where cudnn_py keeps what outlives a process, and whether it may: the cache directory and the switch that turns
it off, at the bottom of the package (it imports nothing of it): the raw layer's use (the loader's kept vetting
verdicts, ``backend/vetting.py``) and planning's disk cache (``plans/disk_cache.py``) read both answers from here.

* the directory: ``CUDNN_PY_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudnn_py``, else ``~/.cache/cudnn_py``;
* ``CUDNN_PY_CACHE=0`` (``off``, ``false``, ``no``; case and blanks ignored) turns every use of it off.

:func:`read_regular` and :func:`write_replacing` are how both read and write their files: a regular file, read
without following a link nor blocking, bounded; written to a temporary file renamed into place, so that a reader
never sees half a file and processes writing at once leave one whole file. :func:`read_small` and
:func:`write_atomic` are the quiet forms for small records (a verdict): a record that cannot be kept only costs the
work it would have saved.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time

from . import bounded_read
from .errors import FileRefusedError

DIR_ENV = "CUDNN_PY_CACHE_DIR"
SWITCH_ENV = "CUDNN_PY_CACHE"
OFF_VALUES = ("0", "off", "false", "no")  # case and surrounding blanks ignored
TMP_PREFIX = ".tmp-"  # a file being written (renamed into place when whole)


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


Refused = FileRefusedError  # a path there but not read (not a regular file, a link, too large): the bounded reader's


def read_regular(path: str, limit: int, what: str = "a file", holder: str = "a file") -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most ``limit`` bytes and its fstat, never following a symbolic link nor
    blocking on a FIFO: the package's one bounded reader (``cudnn_py/bounded_read.py``), naming ``what`` the file
    should have been (``holder``: kept for the callers that name both). :class:`Refused` for anything else, OSError
    as raised."""
    return bounded_read.read_regular(path, limit, what)


def write_replacing(folder: str, name: str, data: bytes, prefix: str = TMP_PREFIX) -> None:
    """Write ``data`` to ``folder/name`` through a temporary file in ``folder`` (``prefix``) renamed into place, its
    times set to now: a reader sees the old file or the new one, never a part. OSError as raised; no temporary file
    is left behind."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix, dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        now = time.time_ns()
        os.utime(tmp, ns=(now, now))
        os.replace(tmp, os.path.join(folder, name))
        tmp = None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def read_small(subdir: str, name: str, limit: int = 16384) -> str | None:
    """The text of ``<directory>/<subdir>/<name>`` if it is a regular file of at most ``limit`` bytes (no link
    followed), else None."""
    try:
        data, _ = read_regular(os.path.join(directory(), subdir, name), limit)
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def write_atomic(subdir: str, name: str, text: str) -> bool:
    """Write ``text`` to ``<directory>/<subdir>/<name>`` (:func:`write_replacing`); False where it cannot be."""
    folder = os.path.join(directory(), subdir)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        write_replacing(folder, name, text.encode("utf-8"))
        return True
    except OSError:
        return False
