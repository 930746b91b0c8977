"""Whether a cache directory is cudnn_py's to use, and how its files are read, written and deleted (issue #37; the
threat model is ``docs/security.md``). The loader's kept verdicts (``backend/vetting.py``) and planning's disk cache
(``plans/disk_cache.py``) reach their directory only through :func:`home`.

cudnn_py uses a cache directory only if it is this user's and cudnn_py's: a real directory owned by the effective
user, not writable by group or others, reached through no other user's symbolic link, carrying the marker
(:data:`MARKER`) that cudnn_py writes into a directory it made (or found empty). Directories it makes are 0700 at
every level. The marker (0600) also holds the directory's key, a secret of this user's with which every entry and
kept record is sealed (HMAC-SHA256), so that a file someone else wrote, or copied from another directory, fails its
check instead of being used. A directory failing a check is not used in this process, with one
:class:`CacheWarning`; nothing raises out of the cache for it.

:class:`Home` holds the checked directory open, and every file operation is relative to that descriptor, following
no symbolic link: it reads only regular files of this user (no FIFO blocked on, bounded), writes through a temp file
of a name only cudnn_py makes (:func:`temporary_name`) renamed into place (a reader never sees half a file;
processes writing at once leave one whole file), replaces and deletes only regular files of this user.
:func:`read_record` and :func:`write_record` are the quiet forms for small sealed records (a verdict): a record
that cannot be kept only costs the work it would have saved.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import os
import re
import secrets
import stat
import sys
import threading
import time
import warnings
from collections.abc import Callable

from . import bounded_read
from .cache_home import Refused, directory

TMP_PREFIX = ".cudnn_py-tmp-"  # a file being written (renamed into place when whole): temporary_name()
MARKER = ".cudnn_py-cache"
_MARKER_HEAD = "cudnn_py cache directory"
_MARKER_TEXT = (_MARKER_HEAD + ": made by cudnn_py, which uses a directory only with this file in it, and seals what "
                "it keeps here with this key (keep it private: mode 0600).\nkey {key}\n")
_MARKER_KEY = re.compile(r"^key ([0-9a-f]{64})$", re.MULTILINE)
MARKER_LIMIT = 4096
_TMP_NAME = re.compile(re.escape(TMP_PREFIX) + r"([0-9]{1,10})-[0-9a-f]{16}\.part")
TMP_GRACE_SECONDS = 10.0  # a temp file of a writer that is gone (no such pid here) is removed after this
STALE_TMP_SECONDS = 3600.0  # ... and any temp file of this user's cudnn_py after this (a writer in another pid space)
MAX_LINKS = 40
_NOFOLLOW = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class CacheWarning(UserWarning):
    """A cache directory, or a file in it, is not used: not cudnn_py's, not this user's, writable by others, reached
    through another user's symbolic link, or failing its keyed checksum."""


class NotOurs(OSError):
    """A cache directory cudnn_py does not use (the message says why); the cache is off for it in this process."""


def _euid() -> int:
    return os.geteuid()


def is_ours(st: os.stat_result) -> bool:
    """A regular file of the effective user (what cudnn_py may delete or replace in its directory)."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == _euid()


def trusted(st: os.stat_result) -> bool:
    """A regular file of the effective user that no one else can write."""
    return is_ours(st) and _writable_by_others(st) is None


def _kind(st: os.stat_result) -> str:
    m = st.st_mode
    return ("a regular file" if stat.S_ISREG(m) else "a directory" if stat.S_ISDIR(m) else "a symbolic link"
            if stat.S_ISLNK(m) else "a FIFO" if stat.S_ISFIFO(m) else "a socket" if stat.S_ISSOCK(m) else
            "a device")


def _writable_by_others(st: os.stat_result) -> str | None:
    who = [w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    return f"writable by {' and '.join(who)} (mode {stat.S_IMODE(st.st_mode):04o})" if who else None


def _foreign(st: os.stat_result) -> str | None:
    """Why a file or directory of the cache is not trusted (another owner, writable by others), or None."""
    if st.st_uid != _euid():
        return f"owned by uid {st.st_uid}, not by this user (uid {_euid()})"
    return _writable_by_others(st)


def temporary_name() -> str:
    """A name only cudnn_py makes: prefix, this pid, a random token, suffix."""
    return f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(8)}.part"


def is_temporary_name(name: str) -> bool:
    return _TMP_NAME.fullmatch(name) is not None


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (EPERM: a process of another user has it)
        return True
    return True


def stale_temporary(name: str, st: os.stat_result, now: float | None = None) -> bool:
    """Whether ``name`` is a temp file cudnn_py may remove: a regular file of this user with a name only cudnn_py
    makes, left by a writer that is gone (its pid not running, older than TMP_GRACE_SECONDS) or older than
    STALE_TMP_SECONDS."""
    m = _TMP_NAME.fullmatch(name)
    if m is None or not is_ours(st):
        return False
    age = (time.time() if now is None else now) - st.st_mtime
    return age > STALE_TMP_SECONDS or (age > TMP_GRACE_SECONDS and not _pid_alive(int(m.group(1))))


def owned_oldest_first(scanned: list[tuple[str, os.stat_result]]) -> list[tuple[str, os.stat_result]]:
    """The regular files of this user among ``scanned`` (name, stat), least recently used (oldest mtime) first."""
    return sorted(((n, st) for n, st in scanned if is_ours(st)), key=lambda x: (x[1].st_mtime_ns, x[0]))


def evict(scanned: list[tuple[str, os.stat_result]], temporaries: list[tuple[str, os.stat_result]], limit: int,
          remove: Callable[[str, os.stat_result], int],
          refused: Callable[[str, OSError], None] = lambda name, e: None) -> int:
    """What the stores' eviction shares: this user's files among ``scanned`` deleted through ``remove(name, st)``
    (the store's ``Home.remove``: what it returns is counted), least recently used first, until they total at most
    ``limit`` bytes, then the temporaries of writers that are gone (``stale_temporary``). A file ``remove`` cannot
    delete (it vanished meanwhile, or changed) is skipped, ``refused`` told. The number of files deleted."""
    owned = owned_oldest_first(scanned)
    total, deleted = sum(st.st_size for _, st in owned), 0
    for name, st in owned:
        if total <= limit:
            break
        try:
            deleted += remove(name, st)
        except OSError as e:
            refused(name, e)
            continue
        total -= st.st_size
    now = time.time()
    for name, st in temporaries:
        if stale_temporary(name, st, now):
            try:
                remove(name, st)
            except OSError:
                pass
    return deleted


class Home:
    """A cache directory checked to be this user's and cudnn_py's, held open (``fd``, for the process's life): every
    file operation is relative to it and follows no symbolic link, so what was checked is what is used. ``key``:
    the directory's secret, which seals entries and records (:meth:`mac`)."""

    def __init__(self, path: str, fd: int, key: bytes):
        self.path, self.fd, self.key = path, fd, key
        self._subdirs: dict[str, int] = {}
        self._lock = threading.Lock()

    def mac(self, data: bytes) -> str:
        return "hmac-sha256:" + hmac.new(self.key, data, hashlib.sha256).hexdigest()

    def sealed(self, data: bytes, mac: bytes) -> bool:
        """Whether ``mac`` (as :meth:`mac` writes it, in bytes) is ``data``'s with this directory's key."""
        return hmac.compare_digest(self.mac(data).encode(), mac)

    def subdir(self, name: str, create: bool) -> int | None:
        """A directory in this one (made 0700 when ``create``), checked as the home itself; None: absent."""
        fd = self._subdirs.get(name)
        if fd is not None:
            return fd
        with self._lock:
            if name in self._subdirs:
                return self._subdirs[name]
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=self.fd)
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=self.fd)
            except FileNotFoundError:
                return None
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise NotOurs(f"{os.path.join(self.path, name)} is not a directory (a link or a file)") from None
                raise
            why = _foreign(os.fstat(fd))
            if why is not None:
                os.close(fd)
                raise NotOurs(f"{os.path.join(self.path, name)} is {why}")
            self._subdirs[name] = fd
            return fd

    def read(self, name: str, limit: int, what: str = "a file", holder: str = "a file",
             where: int | None = None) -> tuple[bytes, os.stat_result]:
        """The bytes of ``name``: a regular file of this user, not writable by others, of at most ``limit`` bytes,
        opened relative to the directory held open, without following a link nor blocking (the package's bounded
        reader, ``cudnn_py/bounded_read.py``); :class:`Refused` else (``holder``: kept for the callers' messages)."""
        return bounded_read.read_regular(name, limit, what, dir_fd=self.fd if where is None else where,
                                         refuse=_foreign)

    def write(self, name: str, data: bytes, where: int | None = None) -> None:
        """Write ``data`` to ``name`` through a temp file renamed into place (a reader sees the old file or the new
        one, never a part; the last of several writers wins). Refused when ``name`` holds something that is not a
        regular file of this user (left in place); OSError as raised; no temp file is left behind."""
        folder = self.fd if where is None else where
        tmp = temporary_name()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=folder)
        done = False
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                now = time.time_ns()
                os.utime(fd, ns=(now, now))
            finally:
                os.close(fd)
            try:
                there = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if not is_ours(there):
                    why = _foreign(there) if stat.S_ISREG(there.st_mode) else _kind(there)
                    raise _refused(f"{name} is {why}: not replaced", name, there)
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
            done = True
        finally:
            if not done:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=folder)

    def probe(self) -> None:
        """OSError unless a file can be created (and removed) here."""
        tmp = temporary_name()
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=self.fd))
        os.unlink(tmp, dir_fd=self.fd)

    def remove(self, name: str, expected: os.stat_result | None = None, where: int | None = None) -> bool:
        """Delete ``name`` if it is a regular file of this user (and still the file ``expected``, when given): True;
        False when it is gone already; Refused (left in place) when it is not one; OSError when it cannot be."""
        folder = self.fd if where is None else where
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if not is_ours(st):
            why = _foreign(st) if stat.S_ISREG(st.st_mode) else _kind(st)
            raise _refused(f"{why}: not cudnn_py's to delete", name, st)
        if expected is not None and (st.st_ino, st.st_dev) != (expected.st_ino, expected.st_dev):
            return False  # replaced meanwhile by a writer: the new file is not the one found bad
        try:
            os.unlink(name, dir_fd=folder)
        except FileNotFoundError:
            return False
        return True

    def scan(self, where: int | None = None) -> list[tuple[str, os.stat_result]]:
        """(name, lstat) of everything in the directory, skipping what vanishes meanwhile (a descriptor of its own:
        a listing shares no position with another thread's)."""
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0),
                     dir_fd=self.fd if where is None else where)
        out = []
        try:
            with os.scandir(fd) as it:
                for d in it:
                    try:
                        out.append((d.name, d.stat(follow_symlinks=False)))
                    except FileNotFoundError:
                        continue
        finally:
            os.close(fd)
        return out


def _refused(reason: str, name: str, st: os.stat_result) -> Refused:
    """A file of the store left in place: not this user's regular file to replace or delete."""
    return Refused(errno.EPERM, reason, name, st)


def _read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``fd`` (one more than allowed tells the caller it is over)."""
    chunks, left = [], limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _resolve(path: str) -> str:
    """``path`` with its symbolic links resolved, refusing (NotOurs) a link owned by another user than this one or
    root; the part that does not exist yet is kept as written."""
    uid, done, links = _euid(), "/", 0
    parts = [p for p in path.split("/") if p]
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            done = os.path.dirname(done)
            continue
        step = os.path.join(done, part)
        try:
            st = os.lstat(step)
        except FileNotFoundError:
            return os.path.join(step, *parts)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (uid, 0):
                raise NotOurs(f"{step} is a symbolic link owned by uid {st.st_uid}, not by this user (uid {uid}) "
                              f"or root")
            links += 1
            if links > MAX_LINKS:
                raise NotOurs(f"{path}: more than {MAX_LINKS} symbolic links")
            target = os.readlink(step)
            if target.startswith("/"):
                done = "/"
            parts = [p for p in target.split("/") if p] + parts
            continue
        done = step
    return done


def _make_dirs(real: str) -> None:
    """Create the missing directories of ``real``, each 0700."""
    missing, p = [], real
    while p != os.path.dirname(p):
        try:
            os.lstat(p)
            break
        except FileNotFoundError:
            missing.append(p)
            p = os.path.dirname(p)
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)


def _empty(fd: int) -> bool:
    """Nothing in the directory but cudnn_py's temp files (a marker being written by another process)."""
    fd2 = os.open(".", os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0), dir_fd=fd)
    try:
        return all(is_temporary_name(n) for n in os.listdir(fd2))
    finally:
        os.close(fd2)


def _marker_key(fd: int, path: str, create: bool) -> bytes | None:
    """The directory's key from its marker; writes the marker (and a new key) into an empty directory when
    ``create``; None: an empty directory without one (not ``create``). NotOurs: a directory with files but no
    marker, or a marker not this user's, readable by others or damaged."""
    where = os.path.join(path, MARKER)
    try:
        mfd = os.open(MARKER, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=fd)
    except FileNotFoundError:
        if not _empty(fd):
            raise NotOurs(f"{path} is not empty and has no {MARKER} marker: not a cudnn_py cache directory (cudnn_py "
                          "uses only a directory it made, or an empty one; point CUDNN_PY_CACHE_DIR to one of its "
                          "own)") from None
        return _write_marker(fd, path) if create else None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise NotOurs(f"{where} is not a regular file") from None
        raise
    try:
        st = os.fstat(mfd)
        why = _foreign(st) if stat.S_ISREG(st.st_mode) else _kind(st)
        if why is None and stat.S_IMODE(st.st_mode) & 0o077:
            why = f"readable by others (mode {stat.S_IMODE(st.st_mode):04o}): its key is no longer a secret"
        if why is not None:
            raise NotOurs(f"{where} is {why}")
        text = _read_fd(mfd, MARKER_LIMIT).decode("utf-8", "replace")  # (opened, fstat-ed and checked above)
    finally:
        os.close(mfd)
    found = _MARKER_KEY.search(text)
    if not text.startswith(_MARKER_HEAD) or found is None:
        raise NotOurs(f"{where} is damaged (not cudnn_py's marker): remove the directory")
    return bytes.fromhex(found.group(1))


def _write_marker(fd: int, path: str) -> bytes:
    """Write the marker with a new key, whole (a temp file linked into place: of processes racing, the first wins
    and the others read its key)."""
    key = secrets.token_bytes(32)
    tmp = temporary_name()
    mfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=fd)
    try:
        try:
            os.write(mfd, _MARKER_TEXT.format(key=key.hex()).encode())
            os.fsync(mfd)
        finally:
            os.close(mfd)
        try:
            os.link(tmp, MARKER, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
        except FileExistsError:
            return _marker_key(fd, path, False) or key  # (another process was first: its key)
        except OSError:  # (a file system without hard links: a rename, which a racing writer may overwrite)
            os.rename(tmp, MARKER, src_dir_fd=fd, dst_dir_fd=fd)
        return key
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=fd)


def _open(path: str, create: bool) -> Home | None:
    if not path or not os.path.isabs(path):
        raise NotOurs(f"{path!r} is not an absolute path")
    real = _resolve(path)
    flags = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW
    try:
        fd = os.open(real, flags)
    except FileNotFoundError:
        if not create:
            return None
        _make_dirs(real)
        fd = os.open(real, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotOurs(f"{real} is a symbolic link (it was not one a moment before)") from None
        raise
    try:
        st = os.fstat(fd)
        why = _foreign(st)
        if why is not None:
            raise NotOurs(f"{path} is {why}")
        key = _marker_key(fd, path, create)
    except BaseException:
        os.close(fd)
        raise
    if key is None:
        os.close(fd)
        return None
    return Home(path, fd, key)


_homes: dict[str, Home] = {}
_refusals: dict[str, str] = {}
_warned: set[str] = set()
_homes_lock = threading.Lock()


def warn_once(topic: str, message: str) -> None:
    """One :class:`CacheWarning` per ``topic`` per process; never raises (warnings turned into errors: stderr)."""
    with _homes_lock:
        if topic in _warned:
            return
        _warned.add(topic)
    try:
        warnings.warn(message, CacheWarning, stacklevel=3)
    except Exception:
        with contextlib.suppress(Exception):
            sys.stderr.write(f"CacheWarning: {message}\n")


def home(path: str | None = None, create: bool = True, warn: bool = True) -> Home | None:
    """The cache directory ``path`` (None: :func:`directory`) checked (once per process), made 0700 with its marker
    when absent and ``create``; None: absent, or empty without a marker (not ``create``). NotOurs when cudnn_py
    must not use it (with one :class:`CacheWarning` per directory per process when ``warn``; the refusal then
    holds for the process); other OSError as raised (not kept: tried again next time)."""
    path = directory() if path is None else path
    h = _homes.get(path)
    if h is not None:
        return h
    why = _refusals.get(path)
    if why is not None:
        raise NotOurs(why)
    with _homes_lock:
        h = _homes.get(path)
        if h is not None:
            return h
        try:
            h = _open(path, create)
        except NotOurs as e:
            if not warn:
                raise
            _refusals[path] = str(e)
        else:
            if h is not None:
                _homes[path] = h
            return h
    warn_once(path, f"the cache directory is not used in this process: {_refusals[path]}")
    raise NotOurs(_refusals[path])


def forget(path: str, h: Home) -> None:
    """Drop a checked directory that went away (removed under this process): the next use checks it afresh. Its
    descriptor stays open: another thread may still hold it, and a closed number could be reused for another
    file."""
    with _homes_lock:
        if _homes.get(path) is h:
            del _homes[path]


# ---- small sealed records (the loader's kept verdicts) ------------------------------------------------------------
def read_record(subdir: str, name: str, limit: int = 16384) -> str | None:
    """The text of ``<directory>/<subdir>/<name>`` if this user's cudnn_py sealed it with this directory's key,
    else None: absent, or refused (a file not this user's or failing its keyed checksum: one
    :class:`CacheWarning`)."""
    try:
        h = home(create=False)
        where = h.subdir(subdir, create=False) if h is not None else None
        if h is None or where is None:
            return None
        data, _ = h.read(name, limit, "a record", "a record", where)
    except FileNotFoundError:
        return None
    except Refused as e:
        warn_once(f"record {subdir}/{name}", f"{os.path.join(directory(), subdir, name)} is not used: {e}")
        return None
    except OSError:  # (NotOurs: warned by home(); anything else: no record to use)
        return None
    head, newline, body = data.partition(b"\n")
    if not newline or not h.sealed(f"{subdir}/{name}".encode() + b"\0" + body, head):
        warn_once(f"record {subdir}/{name}", f"{os.path.join(h.path, subdir, name)} is not used: its keyed checksum "
                                             "does not match (not written by this user's cudnn_py for this directory)")
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def write_record(subdir: str, name: str, text: str) -> bool:
    """Seal ``text`` with the directory's key and write it to ``<directory>/<subdir>/<name>`` (made 0700); False
    where it cannot be (a record that cannot be kept only costs the work it would have saved)."""
    try:
        h = home(create=True)
        where = h.subdir(subdir, create=True) if h is not None else None
        if h is None or where is None:
            return False
        body = text.encode("utf-8")
        h.write(name, h.mac(f"{subdir}/{name}".encode() + b"\0" + body).encode() + b"\n" + body, where)
        return True
    except OSError:
        return False
