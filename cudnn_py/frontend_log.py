"""The official frontend's log: ``CUDNN_FRONTEND_LOG_INFO`` and ``CUDNN_FRONTEND_LOG_FILE``.

Users of the official ``cudnn`` module debug with ``CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=stderr``; the
same variables work here, with the same semantics: any integer above 0 in ``CUDNN_FRONTEND_LOG_INFO`` turns the log
on, ``CUDNN_FRONTEND_LOG_FILE`` says where (``stdout``, ``stderr`` or a file path, truncated when opened), and with
``CUDNN_FRONTEND_LOG_FILE`` unset nothing is logged at all. Both are read once, when this module is first imported
(the first graph that validates imports it), and :data:`ENABLED` keeps the answer.

Every line starts with ``[cudnn_frontend] ``. What is written, at the matching moment of cudnn_py's flow: the
validation banner and the graph's JSON (cudnn_py's graph JSON, ``pygraph.inspect()`` as one compact JSON document on
one line: not byte-identical to the C++ frontend's), each backend tensor as it is created and described, the
operation graph, each heuristics query and engine config, the filters, ``check_support``, each plan built or not,
the candidate, workspace sizes, and ``Executing`` / ``Executed`` around each execute; and every record of the
``cudnn_py`` logger at INFO and above (builds, heuristics, plan choices, cache hits), through a handler attached
here. The application's own handlers see no more of ``cudnn_py``'s records than before.

A file destination is opened once, with ``O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK`` and
checked with ``fstat``: a FIFO, a device, a directory or a symbolic link is refused without blocking. A log that
cannot be opened or written never stops the program: one ``RuntimeWarning``, and logging is off from then on.

The execute hot path never looks at this module: while the log is on, ``Executor.fast`` hands every call to the
checked ``Executor.execute`` (``plans/execute.py``), which logs.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
from typing import Any

from .bounded_read import describe, open_for_writing
from .errors import warn_quietly as _warn

LOG_INFO_ENV = "CUDNN_FRONTEND_LOG_INFO"
LOG_FILE_ENV = "CUDNN_FRONTEND_LOG_FILE"
PREFIX = "[cudnn_frontend] "
BANNER_RULE = "=" * 128

_lock = threading.RLock()  # (a warning issued while writing may come back here through logging)
_fd: int | None = None  # the file destination's descriptor
_stream_name: str | None = None  # "stdout" / "stderr": written through sys.stdout / sys.stderr as they are then
_where = ""
_handler: logging.Handler | None = None
_said_versions = False


def destination(environ: Any = None) -> str | None:
    """Where the variables say the log goes, or None when they leave it off (LOG_INFO not an integer > 0, or
    LOG_FILE unset or empty)."""
    environ = os.environ if environ is None else environ
    try:
        level = int(str(environ.get(LOG_INFO_ENV, "0")).strip() or "0")
    except ValueError:
        level = 0
    dest = environ.get(LOG_FILE_ENV)
    return dest if level > 0 and dest else None


def open_log_file(path: str) -> int:
    """Open ``path`` for the log (created 0600, truncated) without ever blocking; anything but a regular file is
    refused (OSError naming it), a symbolic link included."""
    return open_for_writing(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)


def _turn_off(why: str) -> None:
    global ENABLED, _fd
    ENABLED = False
    fd, _fd = _fd, None
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
    if _handler is not None:
        logging.getLogger("cudnn_py").removeHandler(_handler)
    _warn(f"cudnn_py: {LOG_FILE_ENV}: {why}; the frontend log is off")


def write(text: str) -> None:
    """Write ``text``, each of its lines with the prefix. A write that fails turns the log off (one warning)."""
    if not ENABLED:
        return
    data = "".join(PREFIX + part + "\n" for part in str(text).split("\n"))
    with _lock:
        if not ENABLED:
            return
        try:
            if _fd is not None:
                view = memoryview(data.encode("utf-8", "replace"))
                while view:
                    view = view[os.write(_fd, view):]
            else:
                stream = sys.stdout if _stream_name == "stdout" else sys.stderr
                stream.write(data)
                stream.flush()
        except Exception as e:
            _turn_off(f"writing to {_where} failed ({describe(e) if isinstance(e, OSError) else e})")


def banner(text: str) -> None:
    write(f"{BANNER_RULE}\n||| === {text} === |||\n{BANNER_RULE}")


# ---- what the flow logs (each a no-op while the log is off) ----------------------------------------------------------
def validating(graph: Any, runtime_version: int | None = None) -> None:
    """The validation banner, the cuDNN versions where they differ (once), and the graph's JSON on one line."""
    global _said_versions
    if not ENABLED:
        return
    banner("VALIDATING GRAPH")
    if runtime_version is not None and not _said_versions:
        _said_versions = True
        from ._generated import HEADER_VERSION

        if int(runtime_version) != HEADER_VERSION:
            write(f"INFO: The cuDNN version used at compilation ({HEADER_VERSION}) and the one used at runtime "
                  f"({int(runtime_version)}) differ.")
    try:
        doc = json.dumps(graph.inspect(), default=str, separators=(",", ":"))
    except Exception as e:  # the log never stops a graph
        doc = f"<the graph's JSON could not be made: {type(e).__name__}: {e}>"
    write(f"INFO: graph {getattr(graph, 'name', '')!r} (cudnn_py's graph JSON): {doc}")


def tensor_creating(t: Any) -> None:
    write(f"INFO: Backend Tensor named '{t.name}' with UID {t.uid} being created")


def tensor_created(t: Any, alignment: int) -> None:
    write(f"INFO: CUDNN_BACKEND_TENSOR_DESCRIPTOR : Datatype: {getattr(t.data_type, 'name', t.data_type)} "
          f"Id: {t.uid} nDims {len(t.dim)} VectorCount: {int(getattr(t, 'vector_count', 1) or 1)} Dim "
          f"{list(t.dim)} Str {list(t.stride)} isVirtual: {int(bool(t.is_virtual))} isByValue: "
          f"{int(bool(t.is_pass_by_value))} Alignment: {alignment}")


def operation_graph(op_names: list[str], handle: int | None) -> None:
    tag = "_".join(dict.fromkeys(op_names)) or "empty"
    where = f"with handle 0x{handle:x}" if handle else "without a handle"
    write(f"INFO: CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR has {len(op_names)} operations; tag: {tag} "
          f"(finalized {where})")


def heuristics(mode: str, count: int) -> None:
    write(f"INFO: CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR : mode {mode}")
    write(f"INFO: Heuristic query for mode {mode} has {count} configurations")


def engine_config(config: Any) -> None:
    try:
        write(f"INFO: CUDNN_BACKEND_ENGINECFG_DESCRIPTOR : {config.name} with {len(config.knobs)} knob(s)")
    except Exception as e:  # (reading the knobs back is a backend call)
        write(f"INFO: CUDNN_BACKEND_ENGINECFG_DESCRIPTOR : engine {config.engine_index} ({type(e).__name__})")


def deselected(index: int, why: str) -> None:
    write(f"INFO: Deselecting execution plan at position {index} ({why})")


def supported(configs: list[Any], barred: dict[int, str]) -> None:
    for i, c in enumerate(configs):
        if i not in barred:
            write(f"INFO: Check support for index {i} passed with cfg {c.name}")


def plan_built(index: int, plan: Any) -> None:
    if not ENABLED:
        return
    try:
        numerical = [getattr(n, "name", str(n)) for n in plan.config.numerical_notes]
        behavior = [getattr(n, "name", str(n)) for n in plan.config.behavior_notes]
    except Exception:
        numerical = behavior = ["?"]
    write(f"INFO: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : Tag: {plan.name} numerical notes: {numerical} "
          f"behavior notes: {behavior} workspace: {plan.workspace}")
    write(f"INFO: Plan at index {index} ({plan.name}) built; workspace size {plan.workspace} bytes")


def plan_failed(index: int, error: Any) -> None:
    write(f"WARN: Failed to build plan at {index}: {error}")


# ---- the cudnn_py logger's records -----------------------------------------------------------------------------------
class _Handler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:
            text = str(record.msg)
        write(f"{record.levelname}: {record.name}: {text}")


class _Forward(logging.Handler):
    """The application's handlers (the root logger's) get what they would have got had the ``cudnn_py`` logger
    kept its level: a record at least as severe as the level its own logger (below ``cudnn_py``) or the root has."""

    def emit(self, record: logging.LogRecord) -> None:
        logger: Any = logging.getLogger(record.name)
        level = logging.NOTSET
        while logger is not None and logger.name != "cudnn_py" and not level:
            level = logger.level
            logger = logger.parent if logger.propagate else None
        if logger is None:
            return
        if not level and logger.level != logging.INFO:  # the application set the cudnn_py logger's level since
            level = logger.level
        if record.levelno >= (level or logging.getLogger().getEffectiveLevel()):
            logging.getLogger().handle(record)


def _attach() -> None:
    global _handler
    logger = logging.getLogger("cudnn_py")
    _handler = _Handler(logging.INFO)
    logger.addHandler(_handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
        if logger.propagate:
            logger.propagate = False
            logger.addHandler(_Forward())


def _start() -> bool:
    global _fd, _stream_name, _where
    dest = destination()
    if dest is None:
        return False
    if dest in ("stdout", "stderr"):
        _stream_name, _where = dest, dest
        return True
    _where = dest
    try:
        _fd = open_log_file(dest)
    except OSError as e:
        _warn(f"cudnn_py: {LOG_FILE_ENV}={dest!r} cannot be written ({describe(e)}); the frontend log is off")
        return False
    return True


ENABLED: bool = _start()  # read once per process; False again if a write fails
if ENABLED:
    _attach()
