"""Backend-call tracing: one JSON line per cuDNN call, complete enough to replay the calls.

Turn it on for the whole process with ``CUDNN_PY_TRACE=/path/file.jsonl``, or for a block::

    with cudnn_py.backend.tracing("calls.jsonl"):
        ...

Each line: ``seq``, ``fn`` (C function), ``desc`` (descriptor id, stable for the process), ``kind``, ``attr``,
``type``, ``count``, ``values`` (pointers as hex strings, descriptors as ``{"desc": id}``), ``status``,
``status_name``, ``us`` (duration). Off by default: the hot paths test one module global (``active``) and do
nothing else when it is None.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

active: Tracer | None = None


class Tracer:
    """Writes trace records to a text stream, thread-safe, with a process-wide sequence number.

    Re-entrant on purpose: garbage collection can run a descriptor's finalizer (which records its destroy call)
    in the middle of recording another call, on the same thread. Such a nested record is queued and written by
    the outer one right after its own line, instead of deadlocking on the lock or re-entering the stream."""

    def __init__(self, stream: IO[str], owns: bool):
        self._stream = stream
        self._owns = owns
        self._lock = threading.RLock()
        self._seq = itertools.count(1)
        self._writing = False
        self._pending: list[str] = []

    def record(self, fn: str, status: int | None, t0: float, **fields: Any) -> None:
        us = (time.perf_counter() - t0) * 1e6
        rec = {"seq": next(self._seq), "fn": fn, **{k: v for k, v in fields.items() if v is not None}}
        if status is not None:
            from ..errors import status_name

            rec["status"] = status
            rec["status_name"] = status_name(status)
        rec["us"] = round(us, 2)
        line = json.dumps(rec, separators=(",", ":")) + "\n"
        with self._lock:
            if self._writing:  # nested (a finalizer ran while this thread was writing): the outer call writes it
                self._pending.append(line)
                return
            self._writing = True
            try:
                self._stream.write(line)
                while self._pending:
                    self._stream.write(self._pending.pop(0))
                self._stream.flush()
            finally:
                self._writing = False

    def close(self) -> None:
        if self._owns:
            self._stream.close()


def start(target: str | os.PathLike | IO[str]) -> Tracer:
    """Start tracing to a path (appended) or an open text stream, for the whole process; returns the tracer."""
    global active
    if isinstance(target, (str, os.PathLike)):
        tracer = Tracer(open(target, "a", encoding="utf-8"), owns=True)
    elif hasattr(target, "write"):
        tracer = Tracer(target, owns=False)
    else:
        raise TypeError(f"trace target must be a path or a text stream, not {type(target).__name__}")
    active = tracer
    return tracer


def stop() -> None:
    global active
    if active is not None:
        active.close()
    active = None


@contextlib.contextmanager
def tracing(target: str | os.PathLike | IO[str]) -> Iterator[Tracer]:
    """Trace every backend call made inside the block (all threads) to ``target``."""
    global active
    previous = active
    tracer = start(target)
    try:
        yield tracer
    finally:
        tracer.close()
        active = previous


def hexptr(p: int | None) -> str:
    return hex(p or 0)


if os.environ.get("CUDNN_PY_TRACE"):
    start(os.environ["CUDNN_PY_TRACE"])
