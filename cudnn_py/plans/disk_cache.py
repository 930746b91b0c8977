"""The disk cache: a store of planning results kept across processes (the storage half of issue #29).

Planning reads and writes it through ``disk_planning.py`` (on by default, ``CUDNN_PY_CACHE=0`` turns it off: that
module says why, what the key holds and what a hit skips); ``python -m cudnn_py cache show|verify|clear`` shows,
verifies and empties it. This module stores text and checks what it reads back; it makes no cuDNN call.

The entries, their envelope and the checks on what is read back are :mod:`.disk_entry`'s (its names are
imported here too: ``Key``, ``Entry``, ``PlanRecord``, ``encode``, ``decode``, ``checksum``, ...). This module is the
store: the files, their writes, their eviction.

Where: ``CUDNN_PY_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudnn_py``, else ``~/.cache/cudnn_py``; one file per entry,
``<sha256 of the key>.entry``, holding the entry's envelope (JSON).

Writes: a temporary file in the same directory (``.tmp-*``), then ``os.replace``: a reader sees the old file or the
new one, never a partial one, with any number of processes and threads writing at once (no lock; the last writer
of a key wins). No fsync: a file cut short by a power loss fails its checksum and is dropped like any other.
The file's mtime is its last use (set by the write, bumped with ``os.utime`` on each hit); when the entries'
total exceeds ``max_bytes`` (``CUDNN_PY_CACHE_MAX_BYTES``, default 1 GiB) the least recently used are deleted
until it fits; files that vanish meanwhile (another process evicting or clearing) are skipped.

Trust: nothing read back is used before it is checked: the file is a regular file (not a symlink, FIFO or
directory: opened with ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat``-ed) of at most :data:`MAX_ENTRY_BYTES`, then
:func:`~cudnn_py.plans.disk_entry.decode` checks the envelope, the checksum, the key and the payload's schemas. An
entry failing any of this is deleted, logged on one line with the reason, and reported as a miss:
:meth:`DiskCache.get` raises nothing for what it reads. A directory that cannot be created or written disables the
store (every call a miss or a no-op) with one warning per directory per process.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, replace

from .. import cache_home
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
    _int,
    check_heuristics_answer,
    checksum,
    decode,
    encode,
)

_log = logging.getLogger(__name__)

DIR_ENV = cache_home.DIR_ENV  # (the one variable the whole package reads: cache_home.directory)
MAX_BYTES_ENV = "CUDNN_PY_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30
SUFFIX = ".entry"
TMP_PREFIX = cache_home.TMP_PREFIX
STALE_TMP_SECONDS = 3600  # a temp file this old was left by a writer that died: eviction deletes it
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
    raw = os.environ.get(MAX_BYTES_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw.strip())
        if value > 0:
            return value
    except ValueError:
        pass
    _log.warning("%s=%r is not a positive integer; the limit is %d bytes", MAX_BYTES_ENV, raw, DEFAULT_MAX_BYTES)
    return DEFAULT_MAX_BYTES


_disabled: dict[str, str] = {}  # directory -> why; each warned about once per process
_disabled_lock = threading.Lock()


class DiskCache:
    """The store in ``path`` (None: :func:`default_dir`), holding at most ``max_bytes`` (None:
    :func:`default_max_bytes`) of entries. ``get`` / ``put`` never raise for the directory or what is in it."""

    def __init__(self, path: str | os.PathLike | None = None, max_bytes: int | None = None):
        self.path = os.path.abspath(os.fspath(path)) if path is not None else default_dir()
        self.max_bytes = default_max_bytes() if max_bytes is None else _int(max_bytes, "DiskCache(max_bytes=)", 1,
                                                                            (1 << 63) - 1)
        self._ready = False
        self._lock = threading.Lock()

    # ---- state -------------------------------------------------------------------------------------------------
    @property
    def disabled(self) -> str | None:
        """Why the store is off in this process (its directory could not be created or written), else None."""
        return _disabled.get(self.path)

    def _usable(self) -> bool:
        """Make the directory and probe that a file can be written in it, once; on failure disable it."""
        if self._ready:
            return True
        if self.path in _disabled:
            return False
        with self._lock:
            if self._ready:
                return True
            try:
                os.makedirs(self.path, mode=0o700, exist_ok=True)
                fd, probe = tempfile.mkstemp(prefix=TMP_PREFIX + "probe-", dir=self.path)
                os.close(fd)
                os.unlink(probe)
            except OSError as e:
                self._disable(f"{type(e).__name__}: {e.strerror or e}")
                return False
            self._ready = True
            return True

    def _disable(self, why: str) -> None:
        with _disabled_lock:
            if self.path in _disabled:
                return
            _disabled[self.path] = why
        _log.warning("disk cache: %s is not a writable directory (%s); the disk cache is off in this process",
                     self.path, why)

    def _file(self, key: Key) -> str:
        return os.path.join(self.path, key.digest() + SUFFIX)

    # ---- reading -----------------------------------------------------------------------------------------------
    def get(self, key: Key, problems: list[str] | None = None) -> Entry | None:
        """The entry for ``key``, checked in full, its last use bumped; None: a miss (none, or one dropped: why is
        appended to ``problems`` when given, for the caller to show)."""
        if not isinstance(key, Key):
            raise InvalidTypeError(f"DiskCache.get: a Key, not {type(key).__name__}")
        if not self._usable():
            return None
        path = self._file(key)
        try:
            data, st = _read(path)
        except FileNotFoundError:
            return None
        except _Refused as e:
            self._drop(path, str(e), e.st, problems)
            return None
        except OSError as e:
            _log.info("disk cache: cannot read %s (%s); a miss", path, e)
            return None
        try:
            entry = decode(data, key)
        except (EntryProblem, SerializedJSONError) as e:
            self._drop(path, str(e), st, problems)
            return None
        now = time.time_ns()
        try:
            os.utime(path, ns=(now, now), follow_symlinks=False)
        except OSError:  # replaced or evicted meanwhile: the entry read is still good
            pass
        return replace(entry, last_used=st.st_mtime)

    def discard(self, key: Key, why: str) -> None:
        """Delete the entry of ``key`` because its user found it bad after reading it (a plan that did not
        rebuild, or rebuilt differently; a heuristics answer that does not fit), logging why on one line."""
        if not isinstance(key, Key):
            raise InvalidTypeError(f"DiskCache.discard: a Key, not {type(key).__name__}")
        self._drop(self._file(key), why, None)

    def _drop(self, path: str, why: str, st: os.stat_result | None, problems: list[str] | None = None) -> None:
        """Delete a bad entry (only if it is still the file that was read) and log why, on one line."""
        why = " ".join(why.split())
        if problems is not None:
            problems.append(why)
        try:
            now = os.lstat(path)
            if st is None or (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                if stat.S_ISDIR(now.st_mode):
                    os.rmdir(path)
                else:
                    os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            why += f"; could not delete it: {e.strerror or e}"
        _log.warning("disk cache: dropped %s: %s", os.path.basename(path), why)

    # ---- writing -----------------------------------------------------------------------------------------------
    def put(self, key: Key, entry: Entry) -> bool:
        """Store ``entry`` for ``key`` (replacing any), then evict down to ``max_bytes``; False: not stored (the
        store is off, the entry is too big, or the write failed: logged)."""
        if not isinstance(key, Key) or not isinstance(entry, Entry):
            raise InvalidTypeError("DiskCache.put takes a Key and an Entry")
        if not self._usable():
            return False
        data = encode(key, entry, time.time())
        if len(data) > min(MAX_ENTRY_BYTES, self.max_bytes):
            _log.info("disk cache: an entry of %d bytes is over the limit (%d); not stored", len(data),
                      min(MAX_ENTRY_BYTES, self.max_bytes))
            return False
        path = self._file(key)
        try:
            cache_home.write_replacing(self.path, os.path.basename(path), data, TMP_PREFIX)
        except OSError as e:
            _log.warning("disk cache: could not write %s (%s); not stored", os.path.basename(path),
                         e.strerror or e)
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.ENOENT):
                self._ready = False  # the directory itself changed: probe again next time
            return False
        self.evict()
        return True

    def evict(self) -> int:
        """Delete the least recently used entries until the total is at most ``max_bytes`` (and temp files left
        by dead writers); the number of entries deleted. Files vanishing meanwhile are skipped."""
        scanned, temporaries = self._scan()
        stored = self._stored(scanned)
        total = sum(s.size for s in stored)
        deleted = 0
        for s in stored:  # oldest first
            if total <= self.max_bytes:
                break
            try:
                os.unlink(s.path)
                deleted += 1
            except FileNotFoundError:
                pass
            except OSError as e:
                _log.info("disk cache: cannot evict %s (%s)", s.path, e)
                continue
            total -= s.size
        cutoff = time.time() - STALE_TMP_SECONDS
        for name, st in temporaries:
            if st.st_mtime < cutoff:
                try:
                    os.unlink(os.path.join(self.path, name))
                except OSError:
                    pass
        if deleted:
            _log.info("disk cache: evicted %d least recently used entries (limit %d bytes)", deleted,
                      self.max_bytes)
        return deleted

    # ---- listing -----------------------------------------------------------------------------------------------
    def _scan(self) -> tuple[list[tuple[str, os.stat_result]], list[tuple[str, os.stat_result]]]:
        """(name, lstat) of the entry files and of the temp files, in one pass over the directory, skipping what
        vanishes meanwhile."""
        entries: list[tuple[str, os.stat_result]] = []
        temporaries: list[tuple[str, os.stat_result]] = []
        try:
            it = os.scandir(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return entries, temporaries
        with it:
            for d in it:
                name = d.name
                into = temporaries if name.startswith(TMP_PREFIX) else entries if _ENTRY_NAME.fullmatch(name) else None
                if into is None:
                    continue
                try:
                    into.append((name, d.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    continue
        return entries, temporaries

    def _stored(self, scanned: list[tuple[str, os.stat_result]]) -> list[Stored]:
        out = [Stored(os.path.join(self.path, n), st.st_size, st.st_mtime_ns / 1e9) for n, st in scanned]
        return sorted(out, key=lambda s: (s.last_used, s.path))

    def entries(self) -> list[Stored]:
        """The entry files (not read), least recently used first."""
        return self._stored(self._scan()[0])

    def size(self) -> int:
        """Total bytes of the entry files."""
        return sum(s.size for s in self.entries())

    def verify(self) -> list[tuple[str, str]]:
        """(file, problem) for each entry that ``get`` would drop (nothing is deleted)."""
        problems = []
        for s in self.entries():
            digest = os.path.basename(s.path)[: -len(SUFFIX)]
            try:
                data, _ = _read(s.path)
                decode(data, None, digest)
            except FileNotFoundError:
                continue
            except (_Refused, EntryProblem, SerializedJSONError, OSError) as e:
                problems.append((s.path, " ".join(str(e).split())))
        return problems

    def clear(self) -> int:
        """Delete every entry (and temp file); the number of entries deleted."""
        n = 0
        entries, temporaries = self._scan()
        for temporary, scanned in ((False, entries), (True, temporaries)):
            for name, st in scanned:
                path = os.path.join(self.path, name)
                try:
                    if stat.S_ISDIR(st.st_mode):
                        os.rmdir(path)
                    else:
                        os.unlink(path)
                    n += not temporary
                except FileNotFoundError:
                    pass
                except OSError as e:
                    _log.warning("disk cache: cannot delete %s (%s)", path, e.strerror or e)
        return n


_Refused = cache_home.Refused


def _read(path: str) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most MAX_ENTRY_BYTES, never following a symbolic link nor blocking."""
    return cache_home.read_regular(path, MAX_ENTRY_BYTES, "an entry file", "an entry")
