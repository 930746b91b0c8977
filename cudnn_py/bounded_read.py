"""How cudnn_py reads every file it is given or keeps: one bounded reader, low in the package (it imports only
``errors``), so that every layer reads through it.

* regular files only: a FIFO, a device, a socket or a directory is refused, named, before anything is read; the
  path is ``stat``-ed first (opening some devices has effects of its own) and opened with ``O_NONBLOCK`` (a FIFO
  swapped in meanwhile cannot block the open), then ``fstat``-ed: what is read is what was checked;
* symbolic links: followed only where the caller says a link is fine (a path a user typed: ``follow_links=True``);
  the files of cudnn_py's own stores are opened with ``O_NOFOLLOW``;
* bounded: the size is checked against the caller's cap before reading (a sparse 8 GB file is refused unread), and
  at most cap + 1 bytes are read (a file that grows while read, or a ``/proc`` file that says size 0, cannot make a
  read run on).

A refusal is :class:`~cudnn_py.errors.FileRefusedError`, an ``OSError`` (errno ``EINVAL``, ``ELOOP`` or ``EFBIG``,
with ``filename``) as ``open()``'s own refusals are, so ``except OSError`` around a read catches every reason a file
cannot be read, and a ``CudnnPyError``. Its ``str()`` is the reason alone (``"a FIFO (named pipe), not a regular
file"``): the caller names the file.
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import FileRefusedError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISLNK, "a symbolic link"))


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, from its ``st_mode``: "a directory", "a FIFO (named pipe)", ..."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _not_regular(st: os.stat_result, path: str) -> FileRefusedError:
    return FileRefusedError(errno.EINVAL, f"{file_kind(st.st_mode)}, not a regular file", path, st)


def _link(path: str, what: str) -> FileRefusedError:
    return FileRefusedError(errno.ELOOP, f"a symbolic link, not followed for {what}", path)


Refusal = Callable[[os.stat_result], "str | None"]  # the caller's own rule on the opened file: why not, or None


@contextmanager
def opened(path: str | os.PathLike, limit: int, what: str = "a file", *, follow_links: bool = False,
           dir_fd: int | None = None, refuse: Refusal | None = None) -> Iterator[tuple[int, os.stat_result]]:
    """``(fd, fstat)`` of the regular file at ``path`` of at most ``limit`` bytes, opened read-only (blocking
    reads once checked), closed on leaving; :class:`~cudnn_py.errors.FileRefusedError` (naming ``what`` the file
    was read as) for anything else, OSError as raised (``FileNotFoundError``, ``PermissionError``, ...).
    ``dir_fd``: ``path`` is relative to that open directory (a store held open, so a path swapped meanwhile is not
    followed); ``refuse(fstat)``: the caller's own rule on the opened file (the cache's owner and mode), a reason
    to refuse it (errno EPERM) or None."""
    p = os.fspath(path)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    try:
        st = os.stat(p, dir_fd=dir_fd, follow_symlinks=follow_links)
    except OSError as e:
        if e.filename is None:
            e.filename = p
        raise
    if stat.S_ISLNK(st.st_mode):
        raise _link(p, what)
    if not stat.S_ISREG(st.st_mode):  # before the open: opening a device can have effects of its own
        raise _not_regular(st, p)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(p, flags, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_links:  # a link swapped in since the lstat
            raise _link(p, what) from None
        if e.errno in (errno.ENXIO, errno.EISDIR):  # a socket or a directory swapped in
            raise FileRefusedError(errno.EINVAL, "not a regular file", p) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped in between the stat and the open
            raise _not_regular(st, p)
        if st.st_size > limit:
            raise FileRefusedError(errno.EFBIG, f"{st.st_size} bytes, over the limit of {limit} bytes for {what}", p,
                                   st)
        why = refuse(st) if refuse is not None else None
        if why is not None:
            raise FileRefusedError(errno.EPERM, f"{what} {why}", p, st)
        os.set_blocking(fd, True)
        yield fd, st
    finally:
        os.close(fd)


def read_regular(path: str | os.PathLike, limit: int, what: str = "a file", *, follow_links: bool = False,
                 dir_fd: int | None = None, refuse: Refusal | None = None) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at ``path`` (of at most ``limit`` bytes; at most ``limit`` + 1 are ever read)
    and its ``fstat``: see :func:`opened` for what is refused."""
    with opened(path, limit, what, follow_links=follow_links, dir_fd=dir_fd, refuse=refuse) as (fd, st):
        chunks, left = [], limit + 1
        ask = st.st_size + 1 if st.st_size else 1 << 16  # the whole file and its end at once, if it holds still
        while left > 0:
            chunk = os.read(fd, min(left, ask, 1 << 24))
            ask = 1 << 20
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:  # it grew while read (or a /proc file, whose size says 0)
            raise FileRefusedError(errno.EFBIG, f"over the limit of {limit} bytes for {what} (read past it)",
                              os.fsdecode(os.fspath(path)), st)
        return data, st


def open_for_writing(path: str, flags: int, mode: int, link: str = "a symbolic link, not a regular file") -> int:
    """A descriptor of the regular file at ``path``, opened with the caller's ``flags`` (``O_WRONLY`` / ``O_RDWR``
    with ``O_CREAT``, ``O_TRUNC`` or ``O_APPEND``) and created with ``mode``, never following a link nor blocking:
    a FIFO, a device or a directory is refused before the open (opening a device has effects of its own) and
    again after it, in case one was swapped in (``O_NONBLOCK``: a FIFO cannot block the open). The outputs a user
    names: the trace file, the frontend log. OSError naming what is there otherwise (``link``: for a link)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, link, path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, f"{file_kind(st.st_mode)}, not a regular file", path)
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:  # a link swapped in since the lstat
            raise OSError(errno.ELOOP, link, path) from None
        if e.errno == errno.ENXIO:  # a FIFO with no reader, swapped in since the lstat
            raise OSError(errno.EINVAL, "a FIFO (named pipe), not a regular file", path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{file_kind(st.st_mode)}, not a regular file", path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_regular(path: str | os.PathLike, limit: int, what: str = "a file", *, follow_links: bool = False) -> None:
    """What :func:`read_regular` checks before reading, without reading (OSError as it raises)."""
    with opened(path, limit, what, follow_links=follow_links):
        pass


def describe(e: OSError) -> str:
    """An OSError as one line naming the file: ``"PATH: reason"`` (``"PATH: No such file or directory"``)."""
    reason = e.strerror or str(e) or type(e).__name__
    name = e.filename
    return f"{os.fsdecode(name)}: {reason}" if name is not None else reason


__all__ = ["FileRefusedError", "check_regular", "describe", "file_kind", "open_for_writing", "opened", "read_regular"]
