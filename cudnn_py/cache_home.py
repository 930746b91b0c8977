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

import logging
import os

from . import bounded_read
from .errors import FileRefusedError

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


def size_limit(variable: str, default: int) -> int:
    """The byte limit a variable sets (``CUDNN_PY_CACHE_MAX_BYTES``, ``CUDNN_PY_KERNEL_CACHE_MAX_BYTES``): a positive
    integer; unset or blank, ``default``; anything else, ``default`` with a warning in the ``cudnn_py`` log."""
    raw = (os.environ.get(variable) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
        if value > 0:
            return value
    except ValueError:
        pass
    logging.getLogger("cudnn_py.cache_home").warning("%s=%r is not a positive integer; the limit is %d bytes",
                                                      variable, raw, default)
    return default


Refused = FileRefusedError  # a path there but not read (not a regular file, a link, too large): the bounded reader's


def read_regular(path: str, limit: int, what: str = "a file", holder: str = "a file") -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most ``limit`` bytes and its fstat, never following a symbolic link nor
    blocking on a FIFO: the package's one bounded reader (``cudnn_py/bounded_read.py``), naming ``what`` the file
    should have been (``holder``: kept for the callers that name both). :class:`Refused` for anything else, OSError
    as raised."""
    return bounded_read.read_regular(path, limit, what)

