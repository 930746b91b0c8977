"""Where compiled cubins are kept between compiles: get / put bytes by key (issue #38 item 3).

:data:`STORE` (a :class:`TieredCubinStore`) answers from a bounded in-process map first, then from the kernel files
of the cache directory (:class:`DiskCubinStore`); a compile puts its cubin in both, so a warm process compiles
nothing. The key (``modules.cubin_key``) is a hash of the source, the options, the exact architecture, the NVRTC
version and this package's version: a kernel file is never reused across any of them.

**The kernel files** live in ``kernels/`` of the cache directory (``CUDNN_PY_CACHE_DIR``, ...), under the trust rules
of ``docs/security.md`` (``cudnn_py/cache_trust.py``): the directory is used only when it is this user's and
cudnn_py's; ``kernels/`` is made 0700 and must be this user's, not writable by others; a file is read only when it
is a regular file of this user, not writable by others, of at most :data:`MAX_CUBIN_BYTES` plus its seal (the
bounded reader, no link followed, no FIFO blocked on). Each file, ``<64 hex digits>.cubin`` (a name only cudnn_py
makes), is one line holding the keyed checksum (HMAC-SHA256 with the directory's key) of ``kernels/<name>``, a NUL
and the cubin, then the cubin: a file another user planted, copied from another directory or cut short fails it.
What passes must still look like a cubin for a CUDA GPU (:func:`check_cubin`: ELF magic, 64-bit little-endian,
machine ``EM_CUDA``, bounded size) before it is handed to the driver, which parses it. A file failing any check is
a miss (compiled again), logged on one line (logger ``cudnn_py.engines.runtime.store``) with one
:class:`~cudnn_py.cache_trust.CacheWarning` per directory per process; this user's file is deleted, anything else
left in place and never replaced.

Writes go through a temp file renamed into place (``Home.write``); a hit bumps the file's mtime (its last use);
past :func:`max_bytes` (``CUDNN_PY_KERNEL_CACHE_MAX_BYTES``, default 256 MiB) the least recently used kernel files
are deleted. Only this user's regular files of a kernel file's name, and the temp files of writers that are gone,
are ever deleted. ``CUDNN_PY_CACHE=0`` turns the kernel files off (read at each use: the map still serves).
``python -m cudnn_py cache show|verify|clear`` lists, checks and deletes them (:class:`KernelFiles`).
"""
from __future__ import annotations

import logging
import os
import re
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from ... import cache_home, cache_trust
from ...cache_trust import Home
from ...errors import InvalidValueError

_log = logging.getLogger(__name__)

SUBDIR = "kernels"
SUFFIX = ".cubin"
MAX_CUBIN_BYTES = 16 << 20  # far over any kernel of ours (tens of KiB): a bound for what the driver is given
_SEAL_BYTES = 96  # "hmac-sha256:" + 64 hex digits + newline, with room
MAX_BYTES_ENV = "CUDNN_PY_KERNEL_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 256 << 20
_NAME = re.compile(r"([0-9a-f]{64})" + re.escape(SUFFIX))
_KEY = re.compile(r"[0-9a-f]{64}")
EM_CUDA = 190


def check_cubin(data: bytes) -> str | None:
    """Why ``data`` is not a cubin the driver may be given (a 64-bit little-endian ELF image for machine EM_CUDA of
    a bounded size), or None."""
    if len(data) > MAX_CUBIN_BYTES:
        return f"{len(data)} bytes, over the {MAX_CUBIN_BYTES}-byte bound of a cubin"
    if len(data) < 64 or data[:4] != b"\x7fELF":
        return "not an ELF image (no ELF magic)"
    if data[4] != 2 or data[5] != 1:
        return "not a 64-bit little-endian ELF image"
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != EM_CUDA:
        return f"an ELF image for machine {machine}, not EM_CUDA ({EM_CUDA})"
    return None


class CubinStore(Protocol):
    def get(self, key: str, problems: list[str] | None = None) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...


class MemoryCubinStore:
    """A bounded in-process map (least recently used dropped first)."""

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, problems: list[str] | None = None) -> bytes | None:
        with self._lock:
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)
            return data

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self._items[key] = bytes(data)
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def max_bytes() -> int:
    """``CUDNN_PY_KERNEL_CACHE_MAX_BYTES`` (a positive integer; anything else: the default, logged), else 256 MiB."""
    return cache_home.size_limit(MAX_BYTES_ENV, DEFAULT_MAX_BYTES)


def file_name(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise InvalidValueError(f"a cubin key is 64 hex digits, not {key!r}")
    return key + SUFFIX


def _seal(h: Home, name: str, cubin: bytes) -> bytes:
    return h.mac(f"{SUBDIR}/{name}".encode() + b"\0" + cubin).encode() + b"\n" + cubin


def unseal(h: Home, name: str, data: bytes) -> bytes:
    """The cubin of a kernel file's bytes; ValueError (why) when its seal or its cubin fails a check."""
    head, newline, body = data.partition(b"\n")
    if not newline or len(head) >= _SEAL_BYTES or not h.sealed(f"{SUBDIR}/{name}".encode() + b"\0" + body, head):
        raise InvalidValueError("its keyed checksum does not match (not written by this user's cudnn_py for this "
                         "directory, or damaged)")
    why = check_cubin(body)
    if why:
        raise InvalidValueError(f"not a cubin: {why}")
    return body


def _read(h: Home, where: int, name: str) -> tuple[bytes, os.stat_result]:
    return h.read(name, MAX_CUBIN_BYTES + _SEAL_BYTES, "a kernel file", "a kernel file", where)


class DiskCubinStore:
    """The kernel files of the cache directory (``path``; None: ``CUDNN_PY_CACHE_DIR``, ... at each use). Never
    raises for the directory or what is in it: a file that cannot be used is a miss, one that cannot be written is
    not kept."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path

    def _home(self, create: bool) -> tuple[Home, int] | None:
        if cache_home.switched_off() is not None:
            return None
        try:
            h = cache_trust.home(self.path, create=create)
            where = h.subdir(SUBDIR, create=create) if h is not None else None
        except cache_trust.NotOurs as e:  # (the directory: warned by home(); kernels/ itself: warned here)
            cache_trust.warn_once(f"kernels of {self.path or cache_home.directory()}",
                                  f"the kernel files are not used in this process: {e}")
            return None
        except OSError as e:
            _log.info("kernel files: cache directory not usable (%s)", e)
            return None
        return None if h is None or where is None else (h, where)

    def get(self, key: str, problems: list[str] | None = None) -> bytes | None:
        found = self._home(create=False)
        if found is None:
            return None
        h, where = found
        name = file_name(key)
        st = None
        try:
            data, st = _read(h, where, name)
            cubin = unseal(h, name, data)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            self._drop(h, where, name, str(e), getattr(e, "st", None) if isinstance(e, OSError) else st, problems)
            return None
        now = time.time_ns()
        try:
            os.utime(name, ns=(now, now), dir_fd=where, follow_symlinks=False)
        except OSError:
            pass
        return cubin

    def _drop(self, h: Home, where: int, name: str, why: str, st: os.stat_result | None,
              problems: list[str] | None) -> None:
        why = " ".join(why.split())
        try:
            if st is not None and cache_trust.is_ours(st):
                h.remove(name, st, where)
            else:
                why += "; left in place"
        except OSError as e:
            why += f"; left in place ({e})"
        if problems is not None:
            problems.append(f"kernel file {name}: {why}")
        _log.warning("kernel files: dropped %s: %s", name, why)
        cache_trust.warn_once(f"kernel files of {h.path}", f"kernel file {os.path.join(h.path, SUBDIR, name)} is not "
                              f"used: {why} (further ones are logged)")

    def put(self, key: str, data: bytes) -> None:
        if check_cubin(data) is not None:
            return
        found = self._home(create=True)
        if found is None:
            return
        h, where = found
        try:
            h.write(file_name(key), _seal(h, file_name(key), data), where)
        except OSError as e:
            _log.info("kernel files: %s not kept (%s)", file_name(key), e)
            return
        KernelFiles(h.path).evict(max_bytes(), h, where)


class TieredCubinStore:
    """The in-process map in front of the kernel files."""

    def __init__(self, memory: MemoryCubinStore | None = None, disk: DiskCubinStore | None = None) -> None:
        self.memory = MemoryCubinStore() if memory is None else memory
        self.disk = DiskCubinStore() if disk is None else disk

    def get(self, key: str, problems: list[str] | None = None) -> bytes | None:
        data = self.memory.get(key)
        if data is None:
            data = self.disk.get(key, problems)
            if data is not None:
                self.memory.put(key, data)
        return data

    def put(self, key: str, data: bytes) -> None:
        self.memory.put(key, data)
        self.disk.put(key, data)


@dataclass(frozen=True)
class KernelFile:
    path: str
    size: int
    last_used: float


class KernelFiles:
    """Listing, checking and deleting the kernel files of the cache directory ``path`` (for ``python -m cudnn_py
    cache``): nothing is created; ``NotOurs`` for a directory (or ``kernels/``) that is not cudnn_py's."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _open(self) -> tuple[Home, int] | None:
        h = cache_trust.home(self.path, create=False, warn=False)
        where = h.subdir(SUBDIR, create=False) if h is not None else None
        return None if h is None or where is None else (h, where)

    @staticmethod
    def _scan(h: Home, where: int) -> tuple[list[tuple[str, os.stat_result]], list[tuple[str, os.stat_result]]]:
        files, temporaries = [], []
        for name, st in h.scan(where):
            if _NAME.fullmatch(name):
                files.append((name, st))
            elif cache_trust.is_temporary_name(name):
                temporaries.append((name, st))
        return files, temporaries

    def files(self) -> list[KernelFile]:
        """This user's kernel files (not read), least recently used first."""
        found = self._open()
        if found is None:
            return []
        owned = cache_trust.owned_oldest_first(self._scan(*found)[0])
        return [KernelFile(os.path.join(self.path, SUBDIR, n), st.st_size, st.st_mtime_ns / 1e9) for n, st in owned]

    def verify(self) -> list[tuple[str, str]]:
        """(file, problem) for each file of a kernel file's name that would not be used (nothing is deleted)."""
        found = self._open()
        if found is None:
            return []
        h, where = found
        problems = []
        for name, _ in sorted(self._scan(h, where)[0]):
            try:
                unseal(h, name, _read(h, where, name)[0])
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as e:
                problems.append((os.path.join(self.path, SUBDIR, name), " ".join(str(e).split())))
        return problems

    def clear(self, left: list[tuple[str, str]] | None = None) -> int:
        """Delete this user's kernel files and its dead writers' temp files in ``kernels/``; the number of kernel
        files deleted. What has a kernel file's name but cannot be deleted is appended to ``left``."""
        found = self._open()
        if found is None:
            return 0
        h, where = found
        files, temporaries = self._scan(h, where)
        now, n = time.time(), 0
        for name, st in files + [t for t in temporaries if cache_trust.stale_temporary(t[0], t[1], now)]:
            try:
                if h.remove(name, st, where) and _NAME.fullmatch(name):
                    n += 1
            except OSError as e:
                if left is not None:
                    left.append((os.path.join(self.path, SUBDIR, name), str(e)))
        return n

    def evict(self, limit: int, h: Home | None = None, where: int | None = None) -> int:
        """Delete the least recently used kernel files until they total at most ``limit`` bytes (and the temp files
        of writers that are gone); the number deleted."""
        if h is None or where is None:
            found = self._open()
            if found is None:
                return 0
            h, where = found
        files, temporaries = self._scan(h, where)
        home, folder = h, where
        deleted = cache_trust.evict(files, temporaries, limit, lambda name, st: home.remove(name, st, folder))
        if deleted:
            _log.info("kernel files: evicted %d least recently used (limit %d bytes)", deleted, limit)
        return deleted


STORE: CubinStore = TieredCubinStore()
