"""Backend-call tracing: JSON lines, written ahead of each cuDNN call, complete enough to replay the calls.

Turn it on for the whole process with ``CUDNN_PY_TRACE=/path/file.jsonl`` (appended), or for a block::

    with cudnn_py.backend.tracing("calls.jsonl"):   # a path (appended) or an open text stream
        ...

**Record format** (one JSON object per line; ``seq`` numbers the calls of one traced run, from 1):

* ``{"phase":"start","seq":0,"pid":…,"cudnn_py":"0.1.0"}`` — written before the first call of a run (one per
  tracer, and again in a forked child). A run is (pid, the start record): its ``seq`` and descriptor ids are its
  own; lines of several processes appending to one file may interleave, and ``pid`` sorts them out.
* ``{"seq":N,"phase":"begin","pid":…,"fn":…, <inputs>}`` — written **and flushed before** the C function is
  entered, with every input: ``desc`` (descriptor id, stable for the process), ``kind``, ``attr``, ``type``, ``count``,
  ``values`` (pointers as hex strings, descriptors as ``{"ptr":…, "desc": id}``), ``handle``, ``plan``, ….
* ``{"seq":N,"phase":"end","pid":…,"fn":…,"status":…,"status_name":…,"us":…, <outputs>}`` — written (and flushed) when
  the call returns: the status, the duration in µs, and what the call produced (``ptr`` of a created descriptor
  or handle; ``returned`` and ``values`` of a Get).
* ``{"phase":"stop","seq":N,"pid":…,"open":[…]}`` — written when a tracer stops (the ``tracing()`` block exits,
  ``stop()``, or interpreter exit); ``open`` lists the seqs of calls still running in other threads.

So the trace of a process that crashed in a cuDNN call ends with that call's ``begin`` record and no ``stop``;
``python -m cudnn_py replay`` says so, and replays in a child process to see whether the crash reproduces.
:func:`calls` (or :func:`read`) merges the lines back into one dict per call (the begin fields plus the end
fields, ``"open": True`` when there was no end). Lines of different threads interleave; ``seq`` pairs them.

**Never in the way.** Tracing cannot make importing or using cudnn_py fail or hang: ``CUDNN_PY_TRACE`` naming
something that is not a regular file (a FIFO, a directory, a device) or cannot be opened is refused with one
``RuntimeWarning`` naming the variable and the reason, and the process runs untraced (the path is opened with
``O_NONBLOCK``, so a FIFO cannot block it). A write that fails (disk full, a closed stream, a stream whose
``write`` raises) stops that tracer with one ``RuntimeWarning``; the traced call itself completes normally.
Blocks may exit in any order: the innermost open one is the active tracer, and a closed one is never re-activated.

Off by default: the hot paths test one module global (``active``) and do nothing else when it is None::

    call = None if trace.active is None else trace.begin("cudnnBackendFinalize", desc=d.id, kind=...)
    status = lib().cudnnBackendFinalize(ptr)
    if call is not None:
        call.end(status)

A field given as a callable is evaluated inside the tracer (so converting it for the trace cannot raise into the
traced call).
"""
from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

from .. import bounded_read
from ..errors import InvalidTypeError
from ..errors import warn_quietly as _warn
from . import loader

active: Tracer | None = None
_stack: list[Tracer] = []  # started tracers, innermost last; `active` is the last one while it is alive
_stack_lock = threading.Lock()


def _evaluate(v: Any) -> Any:
    """A field's value; a callable field is called, and if that fails the record says so instead."""
    if not callable(v):
        return v
    try:
        return v()
    except Exception as e:
        return f"<not recorded: {type(e).__name__}: {e}>"


def _refresh() -> None:
    global active
    top = _stack[-1] if _stack else None
    active = top if top is not None and top.alive else None


class Call:
    """One traced call between its begin and end records."""

    __slots__ = ("tracer", "seq", "fn", "t0")

    def __init__(self, tracer: Tracer, seq: int, fn: str):
        self.tracer, self.seq, self.fn = tracer, seq, fn
        self.t0 = 0.0

    def end(self, status: int | None, **outputs: Any) -> None:
        """Write the end record. Never raises."""
        self.tracer._end(self, status, outputs)


class _FdStream:
    """An O_APPEND file descriptor written with os.write: one syscall per record, nothing buffered in Python."""

    def __init__(self, fd: int, after_partial_line: bool = False):
        self.fd = fd
        self.after_partial_line = after_partial_line  # the file ends mid-line (a process died writing it)

    def write(self, s: str) -> int:
        data = s.encode("utf-8")
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        return len(s)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def open_trace_file(path: str | os.PathLike) -> _FdStream:
    """Open ``path`` for appending without ever blocking; refuse anything but a regular file (OSError, naming it),
    a symbolic link included (``O_NOFOLLOW``: the tracer never appends to a link's target)."""
    fd = bounded_read.open_for_writing(os.fspath(path), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666,
                                       link="a symbolic link; traces are written to regular files only")
    try:
        size = os.fstat(fd).st_size
        partial = False
        if size:
            with contextlib.suppress(OSError):
                partial = os.pread(fd, 1, size - 1) != b"\n"
    except BaseException:
        os.close(fd)
        raise
    return _FdStream(fd, partial)


class Tracer:
    """Writes trace records to a text stream, thread-safe, with a per-run sequence number.

    Re-entrant on purpose: garbage collection can run a descriptor's finalizer (which traces its destroy call)
    in the middle of writing another record, on the same thread. Such a nested record is queued and written by
    the outer write right after its own line, instead of deadlocking on the lock or re-entering the stream.
    Any failure to write stops this tracer (one warning) and never reaches the traced call."""

    def __init__(self, stream: IO[str] | _FdStream, owns: bool, name: str = ""):
        self._stream = stream
        self._owns = owns
        self.name = name or repr(stream)
        self.alive = True
        self._started = False
        self._open: set[int] = set()
        self._reset()

    def _reset(self) -> None:  # also in a forked child: fresh lock (another thread may hold it), a new run
        self._lock = threading.RLock()
        self._seq = itertools.count(1)
        self._writing = False
        self._pending: list[str] = []
        self._started = False
        self._open = set()
        self._pid = os.getpid()

    # ---------------------------------------------------------------------------------------------- records
    def begin(self, fn: str, **fields: Any) -> Call | None:
        """Write (and flush) the begin record of a call about to be made. Never raises; None when not tracing."""
        if not self.alive:
            return None
        try:
            if loader.loaded() is None:
                # the call will load libcudnn first; if that fails it never reaches cuDNN: trace nothing
                loader.load_library()
            seq = next(self._seq)
            rec: dict[str, Any] = {"seq": seq, "phase": "begin", "pid": self._pid, "fn": fn}
            for k, v in fields.items():
                v = _evaluate(v)
                if v is not None:
                    rec[k] = v
            line = json.dumps(rec, separators=(",", ":"), default=str) + "\n"
        except Exception:
            return None
        call = Call(self, seq, fn)
        self._open.add(seq)
        self._write(line)
        call.t0 = time.perf_counter()
        return call

    def _end(self, call: Call, status: int | None, outputs: dict[str, Any]) -> None:
        us = (time.perf_counter() - call.t0) * 1e6
        self._open.discard(call.seq)
        if not self.alive:
            return
        try:
            rec: dict[str, Any] = {"seq": call.seq, "phase": "end", "pid": self._pid, "fn": call.fn}
            if status is not None:
                from ..errors import status_name

                rec["status"] = status
                rec["status_name"] = status_name(status)
            rec["us"] = round(us, 2)
            for k, v in outputs.items():
                v = _evaluate(v)
                if v is not None:
                    rec[k] = v
            line = json.dumps(rec, separators=(",", ":"), default=str) + "\n"
        except Exception as e:
            self._fail(e)
            return
        self._write(line)

    def _write(self, line: str) -> None:
        with self._lock:
            if not self.alive:
                return
            if self._writing:  # nested (a finalizer ran while this thread was writing): the outer write does it
                self._pending.append(line)
                return
            self._writing = True
            try:
                if not self._started:
                    self._started = True
                    version = getattr(sys.modules.get("cudnn_py"), "__version__", None)
                    head = {"phase": "start", "seq": 0, "pid": self._pid, "cudnn_py": version}
                    sep = "\n" if getattr(self._stream, "after_partial_line", False) else ""
                    self._stream.write(sep + json.dumps(head, separators=(",", ":")) + "\n")
                self._stream.write(line)
                while self._pending:
                    self._stream.write(self._pending.pop(0))
                self._stream.flush()
            except Exception as e:
                self._fail(e)
            finally:
                self._writing = False

    def _fail(self, e: BaseException) -> None:
        if not self.alive:
            return
        self.alive = False
        self._pending.clear()
        with _stack_lock:
            _refresh()
        _warn(f"cudnn_py: tracing to {self.name} stopped ({type(e).__name__}: {e}); calls now run untraced")

    # ---------------------------------------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Write the stop record (if anything was traced), then close the stream if this tracer opened it."""
        with self._lock:
            if self.alive and self._started:
                stop = {"phase": "stop", "seq": next(self._seq) - 1, "pid": self._pid, "open": sorted(self._open)}
                line = json.dumps(stop, separators=(",", ":")) + "\n"
                try:
                    self._stream.write(line)
                    self._stream.flush()
                except Exception as e:
                    self._fail(e)
            self.alive = False
            if self._owns:
                with contextlib.suppress(Exception):
                    self._stream.close()


def _target_name(target: Any) -> str:
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    return getattr(target, "name", None) or repr(target)


def _make(target: str | os.PathLike | IO[str]) -> Tracer:
    if isinstance(target, (str, os.PathLike)):
        return Tracer(open_trace_file(target), owns=True, name=os.fspath(target))
    if hasattr(target, "write"):
        return Tracer(target, owns=False, name=_target_name(target))
    raise InvalidTypeError(f"trace target must be a path or a text stream, not {type(target).__name__}")


def start(target: str | os.PathLike | IO[str]) -> Tracer:
    """Start tracing to a path (appended; it must be a regular file or not exist) or an open text stream, for the
    whole process, until :func:`stop`. Raises OSError for a path that cannot be traced to."""
    tracer = _make(target)
    with _stack_lock:
        _stack.append(tracer)
        _refresh()
    return tracer


def _remove(tracer: Tracer) -> None:
    with _stack_lock:
        if any(t is tracer for t in _stack):
            _stack[:] = [t for t in _stack if t is not tracer]
        _refresh()


def stop() -> None:
    """Stop the innermost tracer; the one below it (if still alive) becomes active again."""
    with _stack_lock:
        tracer = _stack.pop() if _stack else None
        _refresh()
    if tracer is not None:
        tracer.close()


@contextlib.contextmanager
def tracing(target: str | os.PathLike | IO[str]) -> Iterator[Tracer]:
    """Trace every backend call made inside the block (all threads) to ``target``."""
    tracer = start(target)
    try:
        yield tracer
    finally:
        _remove(tracer)
        tracer.close()


def begin(fn: str, **fields: Any) -> Call | None:
    """The begin record of a call on the active tracer (None when tracing is off or the tracer fails)."""
    tracer = active
    return tracer.begin(fn, **fields) if tracer is not None else None


def hexptr(p: int | None) -> str:
    return hex(p or 0)


# --------------------------------------------------------------------------------------------------- reading
def read(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Merge trace lines into one dict per call, in begin order (markers and unparsable lines are dropped).
    A call with no end record gets ``"open": True``. Also reads the older one-line-per-call format."""
    calls: list[dict[str, Any]] = []
    runs: dict[Any, dict[Any, dict[str, Any]]] = {}  # pid -> the begun calls of its current run, by seq
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if not isinstance(r, dict):
            continue
        phase = r.get("phase")
        pid = r.get("pid")
        if phase == "start":
            runs[pid] = {}
        elif phase == "begin":
            rec = {k: v for k, v in r.items() if k != "phase"}
            rec["open"] = True
            runs.setdefault(pid, {})[r.get("seq")] = rec
            calls.append(rec)
        elif phase == "end":
            begun = runs.get(pid, {}).get(r.get("seq"))
            if begun is not None:
                begun.pop("open", None)
                begun.update({k: v for k, v in r.items() if k not in ("phase", "seq", "fn", "pid")})
        elif phase is None and "fn" in r:
            calls.append(r)
    return calls


def calls(source: str | os.PathLike) -> list[dict[str, Any]]:
    """:func:`read` of a trace file, or of the trace text itself when ``source`` contains a newline."""
    if isinstance(source, str) and "\n" in source:
        return read(source.splitlines())
    return read(read_file(source).decode("utf-8", "replace").splitlines())


MAX_TRACE_BYTES = 1 << 30  # the largest trace file the readers (trace summary, replay) read


def check_file(path: str | os.PathLike) -> None:
    """What :func:`read_file` checks before reading (OSError naming the file), without reading."""
    bounded_read.check_regular(path, MAX_TRACE_BYTES, "a trace file", follow_links=True)


def read_file(path: str | os.PathLike) -> bytes:
    """The bytes of a trace file, through the package's bounded reader (``cudnn_py/bounded_read.py``): a regular
    file only (a FIFO, a device or a directory is refused without blocking on it; a link the user gave is
    followed), of at most MAX_TRACE_BYTES. OSError naming the file otherwise (``FileRefusedError`` for those)."""
    return bounded_read.read_regular(path, MAX_TRACE_BYTES, "a trace file", follow_links=True)[0]


class TraceFormatError(ValueError):
    """A file that is not a well-formed trace; the message names the file and line."""


_PHASES = (None, "start", "begin", "end", "stop")
_STR_FIELDS = ("fn", "kind", "attr", "status_name", "message", "cudnn_py")
_INT_FIELDS = ("seq", "pid", "status", "desc")


def read_checked(path: str | os.PathLike) -> list[dict[str, Any]]:
    """:func:`read` of a trace file, every line checked first: JSON objects with the fields a tracer writes, of
    their types. TraceFormatError naming ``file:line`` otherwise (and for a file with no trace record at all);
    OSError for a file that cannot be read (:func:`read_file`)."""
    name = os.fspath(path)
    lines = read_file(path).split(b"\n")
    records = 0
    for no, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{name}:{no}"
        try:
            r = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise TraceFormatError(f"{where}: not a JSON trace record ({str(e)[:120]})") from None
        if not isinstance(r, dict):
            raise TraceFormatError(f"{where}: a JSON {type(r).__name__}, not a trace record (an object)")
        phase = r.get("phase")
        if phase not in _PHASES:
            raise TraceFormatError(f"{where}: phase {str(phase)[:40]!r} is not one of start, begin, end, stop")
        if phase in (None, "begin", "end") and not isinstance(r.get("fn"), str):
            raise TraceFormatError(f"{where}: a call record without a function name (\"fn\")")
        for key in _STR_FIELDS:
            if r.get(key) is not None and not isinstance(r[key], str):
                raise TraceFormatError(f"{where}: {key} must be a string, not {type(r[key]).__name__}")
        for key in _INT_FIELDS:
            v = r.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or abs(v) >= 1 << 63):
                raise TraceFormatError(f"{where}: {key} must be an integer, not {str(v)[:40]}")
        us = r.get("us")
        if us is not None and (isinstance(us, bool) or not isinstance(us, (int, float)) or not 0 <= us < 1e18):
            raise TraceFormatError(f"{where}: us must be a non-negative number of microseconds, not {str(us)[:40]}")
        if "open" in r and not (isinstance(r["open"], bool) if phase is None else isinstance(r["open"], list)):
            raise TraceFormatError(f"{where}: open has the wrong type ({type(r['open']).__name__})")
        records += 1
    if not records:
        raise TraceFormatError(f"{name}:1: no trace record (an empty file, or not a trace)")
    return read(b.decode("utf-8") for b in lines if b.strip())


# --------------------------------------------------------------------------------------------------- process
def _after_fork_in_child() -> None:
    for tracer in list(_stack):
        tracer._reset()  # a new run: its own start record, seq from 1, a lock no other thread holds


def _at_exit() -> None:
    for tracer in reversed(list(_stack)):
        with contextlib.suppress(Exception):
            tracer.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_exit)


def _start_from_environment() -> None:
    path = os.environ.get("CUDNN_PY_TRACE")
    if not path:
        return
    try:
        start(path)
    except Exception as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        _warn(f"CUDNN_PY_TRACE={path!r} cannot be traced to ({reason}); cudnn_py runs untraced")


_start_from_environment()
