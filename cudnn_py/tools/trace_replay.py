"""Replay the descriptor calls of a trace file (``CUDNN_PY_TRACE``, see :mod:`.trace`) against the loaded cuDNN and
report every call whose status differs from the recorded one — or the call at which the replay crashed.

``python -m cudnn_py replay FILE`` (and :func:`replay`) replays in a **child process**: a trace that crashes cuDNN
kills only the child, and the parent reports the record it died at, e.g.::

    replay of calls.jsonl crashed at record 7 (line 15: cudnnBackendFinalize CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR
    desc #3) with signal SIGSEGV; the traced process died at the same call

The child gets the parent's libcudnn (and libcuda, when one is mapped), and no ``CUDNN_PY_TRACE``.

Before any backend call the whole file is read and every record checked: malformed JSON, unknown functions'
fields, attributes that do not belong to the descriptor kind, types the catalog does not accept for the attribute,
counts that do not match the values given, values of the wrong type or out of range — each an error naming the
file and line, and nothing is replayed (exit status 2). A truncated last line (a process that died mid-write) is
reported and everything before it replayed.

The calls then go through the checked layer (:class:`~cudnn_py.backend.Descriptor`), not raw ctypes, so a crafted
trace meets the same checks as a program would (element kinds, finalized elements, settable/readable attributes,
versions); a record they refuse is reported as refused. Descriptor ids are remapped to the new descriptors and
handles to handles created here; pointers of the traced process that cuDNN would dereference outside execute
(``CUDNN_ATTR_TENSOR_CONSTANT_VALUE``: replaced by a zeroed scratch value; override shapes/strides: skipped) are
never passed on. Calls that need live device memory or streams (execute, set stream) are skipped and counted.

Exit status: 0 every replayed status matched; 1 some differed or were refused; 2 the trace is malformed (nothing
replayed); 3 the replay crashed (child process killed by a signal).
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any

from .._generated.attributes import ATTRIBUTES, AttributeSpec
from .._generated.names import attr
from ..backend import loader
from ..backend import trace as trace_module
from ..backend.descriptor import Descriptor
from ..backend.encoding import (  # the names compared per record, bound once (a module-global read)
    A_TENSOR_CONSTANT_VALUE,
    T_BACKEND_DESCRIPTOR,
    T_BOOLEAN,
    T_CHAR,
    T_FLOATS,
    T_FRACTION,
    T_HANDLE,
    T_INT64,
    T_POINTERS,
    T_VOID_PTR,
)
from ..backend.enums import enum_class
from ..backend.handle import create_handle, destroy_handle
from ..backend.types import ENUM_OF_TYPE, INT_RANGE
from ..bounded_read import file_kind, read_regular
from ..errors import CudnnError, DescriptorError, FileRefusedError, status_name

MAX_COUNT = 1 << 20  # elements in one record; more is refused as malformed
MAX_DESCRIPTORS = 1 << 12  # descriptor elements in one record (a Get creates that many)
_DESCRIPTOR_FNS = ("cudnnBackendCreateDescriptor", "cudnnBackendSetAttribute", "cudnnBackendGetAttribute",
                   "cudnnBackendFinalize", "cudnnBackendDestroyDescriptor")
_SKIPPED_FNS = {"cudnnBackendExecute": "needs the traced process's device memory",
                "cudnnSetStream": "needs the traced process's streams"}
_HOST_POINTERS_SKIPPED = (attr.VARIANT_PACK_OVERRIDE_SHAPES, attr.VARIANT_PACK_OVERRIDE_STRIDES)
# the C integer types' ranges as _int takes them (an exclusive upper bound)
_INT_RANGE = {name: (lo, hi + 1) for name, (lo, hi) in INT_RANGE.items()}


class TraceError(ValueError):
    """The trace file is malformed; ``messages`` are ``FILE:LINE: ...`` lines."""

    def __init__(self, messages: list[str]):
        super().__init__("\n".join(messages))
        self.messages = messages


class _Bad(Exception):
    pass


@dataclass
class Record:
    """One call of the trace (its begin and end records merged)."""

    line: int
    run: int
    seq: int
    fn: str
    fields: dict[str, Any]
    status: int | None = None  # None: no end record
    done: bool = False  # an end record was seen

    def describe(self) -> str:
        parts = [self.fn, self.fields.get("kind", ""), self.fields.get("attr", "")]
        if "desc" in self.fields:
            parts.append(f"desc #{self.fields['desc']}")
        return f"line {self.line}: " + " ".join(p for p in parts if p)


@dataclass
class Trace:
    path: str
    records: list[Record] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    crashed_at: Record | None = None  # the call the traced process died in (last open call of a run never stopped)


# ---------------------------------------------------------------------------------------------------- reading
def _int(v: Any, what: str, lo: int | None = None, hi: int | None = None) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise _Bad(f"{what} must be an integer, not {json.dumps(v)[:40]}")
    if (lo is not None and v < lo) or (hi is not None and v >= hi):
        raise _Bad(f"{what} {v} is out of range")
    return v


def _str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise _Bad(f"{what} must be a string, not {json.dumps(v)[:40]}")
    return v


def _pointer(v: Any, what: str) -> int:
    if not isinstance(v, str):
        raise _Bad(f"{what} must be a hex string, not {json.dumps(v)[:40]}")
    try:
        p = int(v, 16)
    except ValueError:
        raise _Bad(f"{what} {v!r} is not a hex pointer") from None
    if not 0 <= p < 1 << 64:
        raise _Bad(f"{what} {v!r} is out of range")
    return p


def _enum_value(enum_name: str, v: Any, what: str) -> Any:
    if isinstance(v, str):
        if v.startswith("UNKNOWN_") and v[8:].isdigit():
            return int(v[8:])
        if v in enum_class(enum_name).__members__:
            return v
        raise _Bad(f"{what} {v!r} is not a member of {enum_name}")
    return _int(v, what, -(1 << 31), 1 << 31)


def _check_values(spec: AttributeSpec, type_name: str, count: int, values: Any) -> list[Any] | str:
    """The record's values as Descriptor.set takes them, checked against type and count."""
    where = f"{spec.name} ({type_name})"
    if type_name == T_CHAR:
        s = _str(values, f"values of {where}")
        if len(s.encode()) != count:
            raise _Bad(f"count {count} but {len(s.encode())} byte(s) given for {where}")
        return s
    if not isinstance(values, list):
        raise _Bad(f"values of {where} must be a list")
    if len(values) != count:
        raise _Bad(f"count {count} but {len(values)} value(s) given for {where}")
    out: list[Any] = []
    for i, v in enumerate(values):
        what = f"{where} element {i}"
        if type_name in _INT_RANGE:
            out.append(_int(v, what, *_INT_RANGE[type_name]))
        elif type_name == T_BOOLEAN:
            if not isinstance(v, bool) and v not in (0, 1):
                raise _Bad(f"{what} must be true/false")
            out.append(bool(v))
        elif type_name in T_FLOATS:
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise _Bad(f"{what} must be a number")
            out.append(float(v))
        elif type_name in ENUM_OF_TYPE:
            out.append(_enum_value(ENUM_OF_TYPE[type_name], v, what))
        elif type_name in T_POINTERS:
            out.append(_pointer(v, what))
        elif type_name == T_FRACTION:
            if not (isinstance(v, list) and len(v) == 2):
                raise _Bad(f"{what} must be [numerator, denominator]")
            num, den = _int(v[0], what, *_INT_RANGE[T_INT64]), _int(v[1], what, *_INT_RANGE[T_INT64])
            if den == 0:
                raise _Bad(f"{what} has denominator 0")
            out.append((num, den))
        elif type_name == T_BACKEND_DESCRIPTOR:
            if not isinstance(v, dict) or "desc" not in v:
                raise _Bad(f'{what} must be {{"desc": id}}')
            out.append(None if v["desc"] is None else _int(v["desc"], f"{what} desc id", 0))
        else:
            raise _Bad(f"type {type_name} has no replay conversion")
    return out


def _check_record(r: dict[str, Any], kinds: dict[int, str]) -> tuple[str, dict[str, Any]]:
    """Validate a begin (or old one-line) record; returns (fn, normalized fields)."""
    fn = _str(r.get("fn"), "fn")
    f: dict[str, Any] = {}
    if fn in _DESCRIPTOR_FNS:
        desc = f["desc"] = _int(r.get("desc"), "desc", 0)
        kind = _str(r.get("kind"), "kind")
        if kind not in enum_class("cudnnBackendDescriptorType_t").__members__:
            raise _Bad(f"unknown descriptor kind {kind!r}")
        f["kind"] = kind
        if fn == "cudnnBackendCreateDescriptor":
            kinds[desc] = kind
        elif desc in kinds and kinds[desc] != kind:
            raise _Bad(f"descriptor #{desc} was created as {kinds[desc]}, not {kind}")
        if fn in ("cudnnBackendSetAttribute", "cudnnBackendGetAttribute"):
            attr = _str(r.get("attr"), "attr")
            spec = ATTRIBUTES.get(attr)
            if spec is None:
                raise _Bad(f"unknown attribute {attr!r} (not in the catalog)")
            if spec.owner != kind:
                raise _Bad(f"{attr} belongs to {spec.owner}, not to {kind}")
            type_name = _str(r.get("type"), "type")
            accepted = spec.types if fn == "cudnnBackendSetAttribute" else \
                tuple(spec.types) + ((spec.get_type,) if spec.get_type else ())
            if type_name not in accepted:
                raise _Bad(f"{attr} does not take {type_name} (the catalog accepts {', '.join(accepted)})")
            most = MAX_DESCRIPTORS if type_name == T_BACKEND_DESCRIPTOR else MAX_COUNT
            count = _int(r.get("count"), "count", 0, most + 1)
            f.update(attr=attr, type=type_name, count=count, spec=spec)
            if fn == "cudnnBackendSetAttribute":
                f["values"] = _check_values(spec, type_name, count, r.get("values"))
    elif fn == "cudnnCreate":
        pass  # the handle pointer comes with the end record
    elif fn == "cudnnDestroy":
        f["handle"] = _pointer(r.get("handle"), "handle")
    return fn, f


def _check_end(rec: Record, r: dict[str, Any]) -> None:
    if "status" in r:
        rec.status = _int(r["status"], "status")
    rec.done = True
    if rec.fn == "cudnnCreate" and "ptr" in r:
        rec.fields["handle"] = _pointer(r["ptr"], "ptr")
    if rec.fn == "cudnnBackendGetAttribute" and rec.fields.get("type") == T_BACKEND_DESCRIPTOR:
        vals = r.get("values", [])
        if not isinstance(vals, list) or len(vals) > rec.fields["count"]:
            raise _Bad(f"returned values of {rec.fields['attr']} must be a list of at most count elements")
        ids = []
        for i, v in enumerate(vals):
            if not isinstance(v, dict) or "desc" not in v:
                raise _Bad(f'returned element {i} must be {{"desc": id}}')
            ids.append(None if v["desc"] is None else _int(v["desc"], f"returned element {i} desc id", 0))
        rec.fields["into"] = ids


def load(path: str) -> Trace:
    """Read and check a trace file (no backend call). Raises :class:`TraceError` listing every problem."""
    trace = Trace(path)
    errors: list[str] = []
    raw = trace_module.read_file(path)  # a regular file of at most MAX_TRACE_BYTES (OSError otherwise)
    lines = raw.split(b"\n")
    last = max((i for i, b in enumerate(lines, 1) if b.strip()), default=0)
    if last == 0:  # as trace summary says it: a traced process writes its start record first
        raise TraceError([f"{path}:1: no trace record (an empty file, or not a trace)"])
    runs = 0
    current: dict[Any, int] = {}  # pid -> its current run (runs are numbered from 1 in file order)
    open_by_seq: dict[int, dict[int, Record]] = {}  # run -> its begun calls by seq
    kinds: dict[int, dict[int, str]] = {}  # run -> descriptor id -> kind
    stopped: dict[int, bool] = {}

    def run_of(pid: Any, new: bool = False) -> int:
        nonlocal runs
        if new or pid not in current:
            runs += 1
            current[pid] = runs
            open_by_seq[runs], kinds[runs], stopped[runs] = {}, {}, False
        return current[pid]

    for i, b in enumerate(lines, 1):
        if not b.strip():
            continue
        try:
            r = json.loads(b.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            if i == last and not raw.endswith(b"\n"):
                trace.notes.append(f"{path}:{i}: the last line is truncated (the traced process died while writing "
                                   "it?); replaying everything before it")
                break
            if i < len(lines) and lines[i].startswith(b'{"phase":"start"'):
                trace.notes.append(f"{path}:{i}: a truncated line ends the run before the next start record; "
                                   "skipped")
                continue
            errors.append(f"{path}:{i}: not valid JSON ({e})")
            continue
        try:
            if not isinstance(r, dict):
                raise _Bad("a record must be a JSON object")
            phase = r.get("phase")
            pid = r.get("pid")
            if pid is not None:
                _int(pid, "pid", 0)
            if phase == "start":
                run_of(pid, new=True)
            elif phase == "stop":
                stopped[run_of(pid)] = True
            elif phase in ("begin", None):
                run = run_of(pid)
                seq = _int(r.get("seq"), "seq", 0)
                if phase == "begin" and seq in open_by_seq[run]:
                    raise _Bad(f"a second begin record for seq {seq}")
                fn, fields = _check_record(r, kinds[run])
                rec = Record(line=i, run=run, seq=seq, fn=fn, fields=fields)
                trace.records.append(rec)
                if phase is None:  # the older one-line-per-call format: begin and end in one
                    _check_end(rec, r)
                else:
                    open_by_seq[run][seq] = rec
            elif phase == "end":
                seq = _int(r.get("seq"), "seq", 0)
                begun = open_by_seq[run_of(pid)].pop(seq, None)
                if begun is None:
                    raise _Bad(f"end record for seq {seq} without its begin record")
                _check_end(begun, r)
            else:
                raise _Bad(f"unknown phase {phase!r}")
        except _Bad as e:
            errors.append(f"{path}:{i}: {e}")
        if len(errors) >= 20:
            errors.append(f"{path}: stopped after 20 errors")
            break
    if errors:
        raise TraceError(errors)
    final: dict[int, Record] = {}
    for rec in trace.records:
        final[rec.run] = rec
    died = [rec for run, rec in final.items() if not rec.done and not stopped.get(run, False)]
    if died:  # a run that never stopped, whose last record is a begin: the process died in that call
        trace.crashed_at = max(died, key=lambda rec: rec.line)
    return trace


# ---------------------------------------------------------------------------------------------------- replaying
class _Replayer:
    def __init__(self, trace: Trace, out: IO[str], progress: int | None):
        self.trace, self.out, self.progress = trace, out, progress
        self.descs: dict[int, Descriptor] = {}
        self.handles: dict[int, Any] = {}
        self.runs: dict[int, tuple[dict[int, Descriptor], dict[int, Any]]] = {}  # per run: its descriptors, handles
        self.replayed = self.skipped = self.refused = 0
        self.mismatches: list[str] = []
        self.skips: dict[str, int] = {}
        self._scratch = (ctypes.c_double * 8)()  # zeroed stand-in for host values the trace cannot carry

    def skip(self, why: str) -> None:
        self.skipped += 1
        self.skips[why] = self.skips.get(why, 0) + 1

    def run_all(self) -> None:
        for index, rec in enumerate(self.trace.records):
            self.descs, self.handles = self.runs.setdefault(rec.run, ({}, {}))
            if self.progress is not None:
                os.pwrite(self.progress, f"{index:12d} {rec.line:12d}\n".encode(), 0)
            self.one(rec)

    def _desc(self, desc_id: int | None) -> Descriptor | None:
        return None if desc_id is None else self.descs.get(desc_id)

    def one(self, rec: Record) -> None:
        fn, f = rec.fn, rec.fields
        if fn in _SKIPPED_FNS:
            return self.skip(f"{fn}: {_SKIPPED_FNS[fn]}")
        if fn not in _DESCRIPTOR_FNS and fn not in ("cudnnCreate", "cudnnDestroy"):
            return self.skip(f"{fn}: not replayed")
        status: int | None
        try:
            if fn == "cudnnCreate":
                try:
                    h = create_handle()
                except CudnnError:
                    raise
                except Exception as e:
                    self.handles[f.get("handle", 0)] = None
                    return self.skip(f"cudnnCreate: no handle can be created here ({type(e).__name__})")
                self.handles[f.get("handle", 0)] = h
            elif fn == "cudnnDestroy":
                h = self.handles.pop(f["handle"], None)
                if h is None:
                    return self.skip("cudnnDestroy: of a handle not created by this replay")
                destroy_handle(h)
            elif fn == "cudnnBackendCreateDescriptor":
                self.descs[f["desc"]] = Descriptor(f["kind"])
            else:
                d = self.descs.get(f["desc"])
                if d is None:
                    return self.skip(f"{fn}: on a descriptor this replay did not create")
                if fn == "cudnnBackendSetAttribute":
                    value = self._set_value(f)
                    if value is None:
                        return
                    d.set(f["attr"], value, type=f["type"])
                elif fn == "cudnnBackendGetAttribute":
                    self._get(d, f)
                elif fn == "cudnnBackendFinalize":
                    d.finalize()
                else:
                    self.descs.pop(f["desc"])
                    d.destroy()
            status = 0
            detail = ""
        except CudnnError as e:
            status, detail = e.status, getattr(e, "last_error", "") or ""
        except (DescriptorError, ValueError, TypeError) as e:
            self.refused += 1
            self.mismatches.append(f"seq {rec.seq} ({rec.describe()}): refused by the checked layer: {e}")
            return None
        self.replayed += 1
        if rec.status is None:
            if rec is self.trace.crashed_at:
                print(f"seq {rec.seq} ({rec.describe()}): the traced process died in this call; here it returned "
                      f"{status_name(status)}", file=self.out)
            return None
        if status != rec.status:
            self.mismatches.append(f"seq {rec.seq} ({rec.describe()}): recorded {status_name(rec.status)}, now "
                                   f"{status_name(status)}" + (f" ({detail})" if detail else ""))
        return None

    def _set_value(self, f: dict[str, Any]) -> Any:
        type_name, attr, values = f["type"], f["attr"], f["values"]
        if type_name == T_BACKEND_DESCRIPTOR:
            descs = [self._desc(v) for v in values]
            if any(d is None for d in descs):
                self.skip(f"{attr}: names a descriptor this replay did not create")
                return None
            return descs
        if type_name == T_HANDLE:
            hs = [self.handles.get(p) for p in values]
            if any(h is None for h in hs):
                self.skip(f"{attr}: a handle that could not be created here")
                return None
            return [int(h) for h in hs if h is not None]
        if type_name == T_VOID_PTR:
            if attr == A_TENSOR_CONSTANT_VALUE:
                return [ctypes.addressof(self._scratch)]  # a host pointer of the traced process: never passed on
            if attr in _HOST_POINTERS_SKIPPED and any(values):
                self.skip(f"{attr}: host pointers of the traced process")
                return None
            return values  # device pointers: cuDNN keeps them for execute (which is skipped), never dereferences
        return values

    def _get(self, d: Descriptor, f: dict[str, Any]) -> None:
        spec: AttributeSpec = f["spec"]
        if f["type"] == T_BACKEND_DESCRIPTOR:
            into = [self._desc(i) for i in f.get("into", [])]
            if any(x is None for x in into):
                raise DescriptorError("the Get wrote into descriptors this replay did not create")
            n = 1 if spec.max_count == 1 and f["count"] else f["count"]
            kind = spec.element_kinds[0] if spec.element_kinds else None
            if len(into) < n and kind is None:
                raise DescriptorError(f"{spec.name}: the catalog does not say which descriptor kind it holds")
            pads = [Descriptor(kind) for _ in range(n - len(into))]
            try:
                d.get(spec.name, into=[x for x in into if x is not None] + pads)
            finally:
                for p in pads:
                    p.destroy()
        else:
            d.get(spec.name, type=f["type"], count=f["count"])

    def report(self) -> int:
        for line in self.mismatches:
            print(line, file=self.out)
        for why, n in self.skips.items():
            print(f"skipped {n}: {why}", file=self.out)
        differ = len(self.mismatches) - self.refused
        print(f"replayed {self.replayed} call(s), skipped {self.skipped}, refused {self.refused}, "
              f"{differ} status mismatch(es)", file=self.out)
        return 1 if self.mismatches else 0


def _crash_note(trace: Trace) -> str:
    c = trace.crashed_at
    return "" if c is None else f"the trace ends inside seq {c.seq} ({c.describe()}): the traced process died there"


def replay_in_process(path: str, out: IO[str] = sys.stdout, progress: str | None = None) -> int:
    """Replay in this process (a crash kills it: :func:`replay` isolates). ``progress``: a file where the index and
    line of the record about to be replayed are kept (for the parent to name the record a crash happened at)."""
    try:
        trace = load(path)
    except TraceError as e:
        for m in e.messages:
            print(m, file=out)
        print(f"{path}: malformed trace, nothing replayed", file=out)
        return 2
    except OSError as e:
        print(f"{path}: cannot read the trace: {e.strerror or e}", file=sys.stderr)
        return 2
    for note in trace.notes:
        print(note, file=out)
    if trace.crashed_at is not None:
        print(_crash_note(trace), file=out)
    fd = _progress_file(progress) if progress else None
    try:
        r = _Replayer(trace, out, fd)
        r.run_all()
        return r.report()
    finally:
        if fd is not None:
            os.close(fd)


def _progress_file(path: str) -> int:
    """The progress file, opened for writing: a new or regular file only, never a link followed, never blocking (a
    FIFO given as --progress is refused, not waited on). OSError naming it otherwise."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(st.st_mode):  # named, before an open that would fail less clearly (ENXIO, ELOOP)
            raise FileRefusedError(errno.EINVAL, f"{file_kind(st.st_mode)}, not a regular file", path, st)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o600)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # swapped in since the lstat
        os.close(fd)
        raise FileRefusedError(errno.EINVAL, f"{file_kind(st.st_mode)}, not a regular file", path, st)
    return fd


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CUDNN_PY_TRACE", None)  # never trace the replay (least of all into the file being replayed)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    lib = loader.loaded()
    if lib is not None:  # the same libcudnn, already vetted here
        env["CUDNN_PY_LIBRARY"] = lib.path
        env["CUDNN_PY_LIBRARY_VETTED"] = "1"
    cuda = loader.loaded_path_of("libcuda.so.1")
    if cuda and os.path.isfile(cuda) and cuda not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = cuda + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    return env


def replay(path: str, out: IO[str] = sys.stdout, *, isolate: bool = True) -> int:
    """Replay ``path``; with ``isolate`` (the default) in a child process, reporting a crash instead of dying."""
    if not isolate:
        return replay_in_process(path, out)
    try:  # here first: the child must not block on a FIFO or read a device
        trace_module.check_file(path)
    except OSError as e:
        print(f"{path}: cannot read the trace: {e.strerror or e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="cudnn_py_replay_") as tmp:
        progress = os.path.join(tmp, "progress")
        cmd = [sys.executable, "-u", "-m", "cudnn_py", "replay", "--in-process", "--progress", progress, path]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=_child_env(), errors="replace")
        except OSError as e:
            print(f"replay of {path}: cannot start the replay process ({e})", file=out)
            return 2
        out.write(r.stdout)
        if r.stderr:
            sys.stderr.write(r.stderr)
        if r.returncode >= 0:
            return r.returncode
        try:  # what the child wrote: two small ints
            data, _ = read_regular(progress, 64, "the replay's progress file")
            index, _line = (int(x) for x in data.split())
        except (OSError, ValueError):
            index = -1
        print(_crash_report(path, -r.returncode, index), file=out)
        return 3


def _crash_report(path: str, signum: int, index: int) -> str:
    sig = loader.signal_name(signum)
    try:
        trace = load(path)
    except (TraceError, OSError):
        return f"replay of {path} crashed with signal {sig}"
    if not 0 <= index < len(trace.records):
        return f"replay of {path} crashed with signal {sig} before replaying any record"
    rec = trace.records[index]
    head = f"replay of {path} crashed at record {rec.seq} ({rec.describe()}) with signal {sig}"
    c = trace.crashed_at
    if c is rec:
        return head + "; the traced process died at the same call"
    if c is not None:
        return head + f"; the traced process died elsewhere, at record {c.seq} ({c.describe()})"
    if rec.status is not None:
        return head + f"; in the traced process this call returned {status_name(rec.status)}"
    return head + "; the traced process did not crash"
