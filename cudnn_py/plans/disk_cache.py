"""The disk cache: a store of planning results kept across processes (the storage half of issue #29).

Planning reads and writes it through ``disk_planning.py`` (on by default, ``CUDNN_PY_CACHE=0`` turns it off: that
module says why, what the key holds and what a hit skips); ``python -m cudnn_py cache show|verify|clear`` shows,
verifies and empties it. This module stores text and checks what it reads back; it makes no cuDNN call.

The entries, their envelope and the checks on what is read back are :mod:`.disk_entry`'s (its names are
imported here too: ``Key``, ``Entry``, ``PlanRecord``, ``encode``, ``decode``, ``seal``, ...). This module is the
store: the files, their writes, their eviction.

Where: ``CUDNN_PY_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudnn_py``, else ``~/.cache/cudnn_py``; one file per entry,
``<sha256 of the key>.entry``, holding the entry's envelope (JSON). The directory is used only if it is this user's
and cudnn_py's (``cudnn_py/cache_trust.py``, ``docs/security.md``: owner, mode, no other user's symbolic link on the
way, cudnn_py's marker and key in it); one that is not turns the store off in this process with one
``CacheWarning``. Every file operation is relative to the checked directory's descriptor and follows no link.

Writes: a temporary file in the same directory (a name only cudnn_py makes: ``.cudnn_py-tmp-<pid>-<random>.part``),
then ``os.replace``: a reader sees the old file or the new one, never a partial one, with any number of processes
and threads writing at once (no lock; the last writer of a key wins). No fsync: a file cut short by a power loss
fails its checksum and is dropped like any other. The file's mtime is its last use (set by the write, bumped with
``os.utime`` on each hit); when the entries' total exceeds ``max_bytes`` (``CUDNN_PY_CACHE_MAX_BYTES``, default
1 GiB) the least recently used are deleted until it fits; files that vanish meanwhile (another process evicting or
clearing) are skipped.

Deleting: only a regular file of this user with an entry's name, or a temp file of this user's cudnn_py whose
writer is gone (``cache_trust.stale_temporary``). Anything else in the directory (another user's file, a link, a
FIFO, a directory, a file of another name) is never deleted nor replaced, by a read, an eviction or ``clear``:
``clear`` reports it.

Trust: nothing read back is used before it is checked: the file is a regular file of this user, not writable by
others (not a symlink, FIFO or directory: opened with ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat``-ed) of at most
:data:`MAX_ENTRY_BYTES`, then :func:`~cudnn_py.plans.disk_entry.decode` checks the envelope, the keyed checksum,
the key and the payload's schemas. An entry failing any of this is a miss, logged on one line with the reason (and
given to ``explain()``); it is deleted when it is this user's regular file, else left in place. One failing the
trust checks (another owner, writable by others, the keyed checksum) also gives one ``CacheWarning`` per directory
per process. :meth:`DiskCache.get` raises nothing for what it reads. A directory that cannot be created or written
disables the store (every call a miss or a no-op) with one logged warning per directory per process.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, replace

from .. import cache_home, cache_trust
from ..cache_trust import Home, NotOurs
from ..errors import InvalidTypeError, SerializedJSONError
from .disk_entry import (  # noqa: F401  (the entry's names, imported from here too)
    FORMAT,
    FORMAT_VERSION,
    MAX_CONFIGS,
    MAX_ENTRY_BYTES,
    MAX_KNOBS,
    MAX_OPTIONS,
    MAX_TIME,
    Entry,
    EntryProblem,
    Key,
    OptionValue,
    PlanRecord,
    Unsealed,
    _int,
    check_heuristics_answer,
    decode,
    encode,
    seal,
)

_log = logging.getLogger(__name__)

DIR_ENV = cache_home.DIR_ENV  # (the one variable the whole package reads: cache_home.directory)
MAX_BYTES_ENV = "CUDNN_PY_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30
SUFFIX = ".entry"
TMP_PREFIX = cache_trust.TMP_PREFIX
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}" + re.escape(SUFFIX))


@dataclass(frozen=True)
class Stored:
    """One entry file as listed (not read): ``last_used`` is its mtime."""

    path: str
    size: int
    last_used: float


def default_dir() -> str:
    """``CUDNN_PY_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudnn_py``, else ``~/.cache/cudnn_py`` (one answer for the
    whole package: ``cudnn_py/cache_home.py``, which the loader's kept verdicts use too)."""
    return cache_home.directory()


def default_max_bytes() -> int:
    """``CUDNN_PY_CACHE_MAX_BYTES`` (a positive integer; anything else: the default, logged), else 1 GiB."""
    return cache_home.size_limit(MAX_BYTES_ENV, DEFAULT_MAX_BYTES)


_disabled: dict[str, str] = {}  # directory -> why; each warned about once per process
_disabled_lock = threading.Lock()


class DiskCache:
    """The store in ``path`` (None: :func:`default_dir`), holding at most ``max_bytes`` (None:
    :func:`default_max_bytes`) of entries. ``get`` / ``put`` never raise for the directory or what is in it; the
    listing methods (``entries``, ``verify``, ``clear``, ...) create nothing and raise ``NotOurs`` for a directory
    that is not cudnn_py's (OSError for one that cannot be read)."""

    def __init__(self, path: str | os.PathLike | None = None, max_bytes: int | None = None):
        self.path = os.path.abspath(os.fspath(path)) if path is not None else default_dir()
        self.max_bytes = default_max_bytes() if max_bytes is None else _int(max_bytes, "DiskCache(max_bytes=)", 1,
                                                                            (1 << 63) - 1)
        self._home: Home | None = None
        self._ready = False
        self._lock = threading.Lock()

    # ---- state -------------------------------------------------------------------------------------------------
    @property
    def disabled(self) -> str | None:
        """Why the store is off in this process (its directory is not cudnn_py's, or could not be created or
        written), else None."""
        return _disabled.get(self.path)

    def usable(self) -> bool:
        """Check the directory (making it, with its marker, when absent) and probe that a file can be written in
        it, once; on failure disable it (one warning)."""
        if self._ready:
            return True
        if self.path in _disabled:
            return False
        with self._lock:
            if self._ready:
                return True
            try:
                h = cache_trust.home(self.path, create=True)
                assert h is not None  # (made when absent)
                h.probe()
            except NotOurs as e:  # (warned about by home(): a CacheWarning)
                self._disable(str(e), warned=True)
                return False
            except OSError as e:
                self._disable(f"{type(e).__name__}: {e.strerror or e}")
                return False
            self._home, self._ready = h, True
            return True

    def _disable(self, why: str, warned: bool = False) -> None:
        with _disabled_lock:
            if self.path in _disabled:
                return
            _disabled[self.path] = why if warned else f"not writable ({why})"
        if warned:
            _log.info("disk cache: %s is not used (%s); the disk cache is off in this process", self.path, why)
        else:
            _log.warning("disk cache: %s is not a writable directory (%s); the disk cache is off in this process",
                         self.path, why)

    def _listing_home(self) -> Home | None:
        """The checked directory for listing or clearing (nothing created; None: there is no cache there yet)."""
        return self._home if self._home is not None else cache_trust.home(self.path, create=False, warn=False)

    @staticmethod
    def _name(key: Key) -> str:
        return key.digest() + SUFFIX

    # ---- reading -----------------------------------------------------------------------------------------------
    def get(self, key: Key, problems: list[str] | None = None) -> Entry | None:
        """The entry for ``key``, checked in full, its last use bumped; None: a miss (none, or one dropped: why is
        appended to ``problems`` when given, for the caller to show)."""
        if not isinstance(key, Key):
            raise InvalidTypeError(f"DiskCache.get: a Key, not {type(key).__name__}")
        if not self.usable():
            return None
        h = self._home
        assert h is not None
        name = self._name(key)
        try:
            data, st = _read(h, name)
        except FileNotFoundError:
            return None
        except _Refused as e:
            self._drop(name, str(e), e.st, problems, trust=e.st is None or not cache_trust.trusted(e.st))
            return None
        except OSError as e:
            _log.info("disk cache: cannot read %s (%s); a miss", name, e)
            return None
        try:
            entry = decode(data, key, secret=h.key)
        except (EntryProblem, SerializedJSONError) as e:
            self._drop(name, str(e), st, problems, trust=isinstance(e, Unsealed))
            return None
        now = time.time_ns()
        try:
            os.utime(name, ns=(now, now), dir_fd=h.fd, follow_symlinks=False)
        except OSError:  # replaced or evicted meanwhile: the entry read is still good
            pass
        return replace(entry, last_used=st.st_mtime)

    def discard(self, key: Key, why: str) -> None:
        """Delete the entry of ``key`` because its user found it bad after reading it (a plan that did not
        rebuild, or rebuilt differently; a heuristics answer that does not fit), logging why on one line."""
        if not isinstance(key, Key):
            raise InvalidTypeError(f"DiskCache.discard: a Key, not {type(key).__name__}")
        if self.usable():
            self._drop(self._name(key), why, None)

    def _drop(self, name: str, why: str, st: os.stat_result | None, problems: list[str] | None = None,
              trust: bool = False) -> None:
        """A bad entry: delete it if it is this user's regular file (and still the file that was read), else leave
        it; log why on one line (``trust``: a file someone else may have put there: also one CacheWarning per
        directory per process)."""
        h = self._home
        assert h is not None
        why = " ".join(why.split())
        try:
            h.remove(name, st)
        except _Refused as e:
            why += f"; left in place ({e})"
        except OSError as e:
            why += f"; could not delete it: {e.strerror or e}"
        if problems is not None:
            problems.append(why)
        _log.warning("disk cache: dropped %s: %s", name, why)
        if trust:
            cache_trust.warn_once(f"entries of {self.path}", f"disk cache {self.path}: entry {name} is not used: "
                                  f"{why} (further ones are logged)")

    # ---- writing -----------------------------------------------------------------------------------------------
    def put(self, key: Key, entry: Entry) -> bool:
        """Store ``entry`` for ``key`` (replacing any of this user's), then evict down to ``max_bytes``; False: not
        stored (the store is off, the entry is too big, its name holds something else, or the write failed:
        logged)."""
        if not isinstance(key, Key) or not isinstance(entry, Entry):
            raise InvalidTypeError("DiskCache.put takes a Key and an Entry")
        if not self.usable():
            return False
        h = self._home
        assert h is not None
        data = encode(key, entry, time.time(), h.key)
        if len(data) > min(MAX_ENTRY_BYTES, self.max_bytes):
            _log.info("disk cache: an entry of %d bytes is over the limit (%d); not stored", len(data),
                      min(MAX_ENTRY_BYTES, self.max_bytes))
            return False
        name = self._name(key)
        try:
            h.write(name, data)
        except _Refused as e:
            _log.warning("disk cache: not stored: %s", e)
            return False
        except OSError as e:
            _log.warning("disk cache: could not write %s (%s); not stored", name, e.strerror or e)
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.ENOENT):
                self._ready = False  # the directory itself changed: check and probe again next time
                if e.errno == errno.ENOENT:  # removed under this process: made afresh next time
                    cache_trust.forget(self.path, h)
                    self._home = None
            return False
        self.evict()
        return True

    def evict(self) -> int:
        """Delete the least recently used entries until the total is at most ``max_bytes`` (and temp files left
        by writers that are gone); the number of entries deleted. Only this user's regular files are counted and
        deleted; files vanishing meanwhile are skipped."""
        h = self._listing_home()
        if h is None:
            return 0
        scanned, temporaries = self._scan(h)
        deleted = cache_trust.evict(scanned, temporaries, self.max_bytes, h.remove,
                                    lambda name, e: _log.info("disk cache: cannot evict %s (%s)", name, e))
        if deleted:
            _log.info("disk cache: evicted %d least recently used entries (limit %d bytes)", deleted,
                      self.max_bytes)
        return deleted

    # ---- listing -----------------------------------------------------------------------------------------------
    def _scan(self, h: Home) -> tuple[list[tuple[str, os.stat_result]], list[tuple[str, os.stat_result]]]:
        """(name, lstat) of everything with an entry's name and of cudnn_py's temp files, in one pass over the
        directory, skipping what vanishes meanwhile."""
        entries: list[tuple[str, os.stat_result]] = []
        temporaries: list[tuple[str, os.stat_result]] = []
        for name, st in h.scan():
            if _ENTRY_NAME.fullmatch(name):
                entries.append((name, st))
            elif cache_trust.is_temporary_name(name):
                temporaries.append((name, st))
        return entries, temporaries

    def _stored(self, scanned: list[tuple[str, os.stat_result]]) -> list[Stored]:
        """The entries of this user (regular files), least recently used first."""
        return [Stored(os.path.join(self.path, n), st.st_size, st.st_mtime_ns / 1e9)
                for n, st in cache_trust.owned_oldest_first(scanned)]

    def entries(self) -> list[Stored]:
        """The entry files of this user (not read), least recently used first."""
        h = self._listing_home()
        return [] if h is None else self._stored(self._scan(h)[0])

    def size(self) -> int:
        """Total bytes of the entry files."""
        return sum(s.size for s in self.entries())

    def verify(self) -> list[tuple[str, str]]:
        """(file, problem) for each file of an entry's name that ``get`` would not use (nothing is deleted)."""
        h = self._listing_home()
        if h is None:
            return []
        problems = []
        for name, _ in sorted(self._scan(h)[0]):
            digest = name[: -len(SUFFIX)]
            try:
                data, _ = _read(h, name)
                decode(data, None, digest, secret=h.key)
            except FileNotFoundError:
                continue
            except (_Refused, EntryProblem, SerializedJSONError, OSError) as e:
                problems.append((os.path.join(self.path, name), " ".join(str(e).split())))
        return problems

    def clear(self, left: list[tuple[str, str]] | None = None) -> int:
        """Delete every entry of this user and the temp files of this user's cudnn_py whose writer is gone; the
        number of entries deleted. What has an entry's name but is not this user's regular file, or cannot be
        deleted, is left and appended to ``left`` as (file, why). Nothing else is touched."""
        h = self._listing_home()
        if h is None:
            return 0
        n = 0
        entries, temporaries = self._scan(h)
        now = time.time()
        for name, st in entries + [t for t in temporaries if cache_trust.stale_temporary(t[0], t[1], now)]:
            try:
                if h.remove(name, st) and _ENTRY_NAME.fullmatch(name):
                    n += 1
            except OSError as e:
                why = str(e) if isinstance(e, _Refused) else e.strerror or str(e)
                _log.warning("disk cache: cannot delete %s (%s)", name, why)
                if left is not None:
                    left.append((os.path.join(self.path, name), why))
        return n


_Refused = cache_home.Refused


def _read(h: Home, name: str) -> tuple[bytes, os.stat_result]:
    """The bytes of an entry file: a regular file of this user of at most MAX_ENTRY_BYTES, never following a
    symbolic link nor blocking."""
    return h.read(name, MAX_ENTRY_BYTES, "an entry file", "an entry")
