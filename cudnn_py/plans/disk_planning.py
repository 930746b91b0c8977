"""Planning's use of the disk cache (issue #29): a graph planned by an earlier process is rebuilt from what that
process stored, without heuristics queries and without compiling kernels.

**On by default** (``CUDNN_PY_CACHE=0`` / ``off`` / ``false`` / ``no`` turns it off; read at each build): a cold
first build in a fresh process costs hundreds of ms to seconds (cuDNN compiles attention and fused kernels with
NVRTC), and a hit replaces all of it with a file read and a plan rebuilt from JSON. What the cache adds to a build
that misses is small against that (the operation graph's fingerprint, which the in-process plan cache computes
anyway, a sha256, one failed ``open``, and after the build one write of the entry: about a millisecond for an
attention plan's 75 KB of JSON) and is paid once per graph per process: a graph planned before in the same process
is answered by the in-process caches (``heuristics.py``, ``plan_cache.py``) and never reaches the disk, so the
steady state reads and writes nothing. A directory that cannot be written, or is not this user's and cudnn_py's
(``docs/security.md``), turns the store off with one warning (``disk_cache.py``). ``docs/performance.md`` has the
cold / warm measurements.

**The key** (:func:`make_key`): the operation graph's fingerprint made portable (:func:`portable_fingerprint`:
every attribute set on the graph, its operations and tensors - dims, strides, uids, data types, alignments,
modes, scalars by value - as canonical JSON, hashed; the planning handle left out, and a graph that holds a
pointer has none), the cuDNN version, the device's compute capability and SM count (a plan serves any GPU of the
same kind: the handle it is rebuilt with picks the device), and the options that change the answer: the
heuristics modes asked, the SM count target (``pygraph(sm_count=)``), the cudnn_py version (a new release starts
cold rather than trust what an older one read back) and the fingerprint's format. Filters, ``build_plans``'
policy and explicit configs are not in it: the stored plan is used only for the engine config being built when its
engine and knob choices are the record's, so they can only turn a plan hit into a build.

**What is used from an entry.** Only for a graph planned on a device with heuristics (``create_execution_plans``),
without a kernel cache, device properties (deviceless planning), dynamic or override shapes: those plans hold more
than their JSON (the same rule as the in-process plan cache). On a hit:

* the heuristics answer seeds the process's query cache (``heuristics.seed``), so the query is answered from it:
  no ENGINEHEUR is made (a trace of the build shows none). Its configs are rebuilt from engine index and knobs
  for this graph's operation graph, and one that does not build is handled as any cached answer's
  (``cached_planning.query_afresh``: cuDNN asked afresh; the entry is then dropped);
* the plan record, when its JSON carries compiled kernels, is rebuilt from that JSON with the planning handle
  (``plan_cache.checked_rebuild``: what ``deserialize`` does) and must have the recorded engine, knob choices
  and workspace; cuDNN's plan JSON carries the compiled kernels of runtime-compiled engines
  (``engine.payload.kernels[].cubin``), so nothing is compiled. The rebuilt plan is also handed to the
  in-process plan cache. A plan whose JSON carries no kernels (a precompiled engine's) is finalized from its
  config instead (:func:`carries_kernels`): the JSON saves nothing then, and cuDNN parses it more slowly;
* the entry's kernel-cache JSON is not written nor read: it serves graphs with a kernel cache (dynamic shapes),
  which this cache leaves alone, and a static graph's kernels already travel in its plan's JSON.

Anything that fails - the entry's checks (``disk_cache.decode``), a heuristics answer naming modes not asked, a
plan cuDNN refuses to rebuild or rebuilds differently - deletes the entry with a logged reason (a warning), is
shown by ``explain()`` (``disk cache:`` line) and recorded in the trace, and the graph is built as if there were no
cache, then stored afresh.

**On a miss** the graph is built normally; after ``build_plans`` made a default plan, the entry (heuristics answer,
the default plan's JSON, engine, knobs and cuDNN workspace) is written once per key per process.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction
from typing import Any

from .. import cache_home
from .._generated.names import attr, desc
from .._version import __version__
from ..backend import trace
from ..errors import CudnnError, CudnnPyError, InvalidTypeError, InvalidValueError
from . import disk_cache, heuristics, plan_cache
from .disk_cache import DiskCache, Entry, Key, PlanRecord
from .engine_config import EngineConfig
from .plan import ExecutionPlan

_log = logging.getLogger(__name__)

ENV = cache_home.SWITCH_ENV
FINGERPRINT_FORMAT = 1  # bump when portable_fingerprint changes what it writes: old entries then never match
DISK = "rebuilt from the disk cache (the JSON of a plan an earlier process built)"
HEURISTICS_ORIGIN = "from the disk cache"
TRACE_FN = "cudnn_py.disk_cache"  # the trace's record of a lookup / store (replay skips it: not a cuDNN call)
_HANDLE_ATTRIBUTE = attr.OPERATIONGRAPH_HANDLE


def off_reason() -> str | None:
    """``"CUDNN_PY_CACHE=0"`` (or the value given) when the environment turns planning's use of the disk cache
    off, else None."""
    return cache_home.switched_off(ENV)


_stores: dict[tuple[str, int], DiskCache] = {}
_stored: set[str] = set()  # key digests this process wrote: each written once, the steady state writes nothing
_lock = threading.Lock()


def store() -> DiskCache:
    """The store of the directory and size the environment names now (one object per pair, per process)."""
    where = (disk_cache.default_dir(), disk_cache.default_max_bytes())
    with _lock:
        s = _stores.get(where)
        if s is None:
            s = _stores[where] = DiskCache(*where)
        return s


def forget_stored() -> None:
    """Forget which keys this process wrote (tests: a key written before may be written again)."""
    with _lock:
        _stored.clear()


# ---- the key -----------------------------------------------------------------------------------------------------
class NotPortable(CudnnPyError):
    """The operation graph's fingerprint depends on this process (a pointer, a value without a stable text)."""


def _plain(v: Any) -> Any:
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, Enum):  # (before int: an IntEnum member by name, which does not depend on the binding's order)
        return {"enum": type(v).__name__, "name": v.name}
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return {"float": v.hex()}
    if isinstance(v, Fraction):
        return {"fraction": [v.numerator, v.denominator]}
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    raise NotPortable(f"a value of type {type(v).__name__} has no text that is the same in every process")


def portable_fingerprint(fingerprint: tuple | None) -> str:
    """``Descriptor.fingerprint()`` of an operation graph as a string that is the same in every process building
    the same graph: canonical JSON of every descriptor's attributes (descriptors by their position in the tree,
    uids as set, enums by name, floats by bits), the planning handle left out, hashed (``og1-<sha256>``).
    NotPortable: no fingerprint (a descriptor cuDNN filled in, a constant by address) or one holding a pointer."""
    if fingerprint is None:
        raise NotPortable("the operation graph has no fingerprint (a descriptor cuDNN filled in, or a constant "
                          "given by address)")
    out = []
    for kind, items in fingerprint:
        kept = []
        for item in items:
            name, how = item[0], item[1]
            if name == _HANDLE_ATTRIBUTE:
                continue  # the process's handle: a plan is rebuilt with the handle of the process using it
            if how == "shown":  # a pointer or a handle as text: an address of this process
                raise NotPortable(f"{name} holds an address of this process")
            kept.append(_plain(item))
        out.append([kind, kept])
    text = json.dumps(out, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return f"og{FINGERPRINT_FORMAT}-" + hashlib.sha256(text.encode()).hexdigest()


def device_facts(device: int) -> tuple[int, int]:
    """(compute capability as major * 10 + minor, SM count) of CUDA device ``device`` (read once per device)."""
    from ..backend.device import device_info

    info = device_info(device)
    return info.sm_version, info.sm_count


def make_key(fingerprint: str, cudnn_version: int, device: int, modes: list[str],
             sm_count_target: int | None) -> Key:
    cc, sms = device_facts(device)
    return Key(fingerprint, cudnn_version, cc, sms,
               (("modes", ",".join(modes)), ("sm_count_target", sm_count_target), ("cudnn_py", __version__),
                ("fingerprint_format", FINGERPRINT_FORMAT)))


# ---- a session's use -----------------------------------------------------------------------------------------------
@dataclass
class DiskUse:
    """What one planning session did with the disk cache (``explain()`` shows ``lines``)."""

    key: Key | None = None  # the key looked up (None: not looked up, see lines)
    heuristics_key: Any = None  # the query-cache key the entry's answer seeded (or the one to store)
    plan: PlanRecord | None = None  # the entry's plan, until a config of its engine and knobs is built
    from_disk: bool = False  # the heuristics answer came from the entry
    store_after_build: bool = False  # a miss (or a dropped entry): write the entry once the graph built
    lines: list[str] = field(default_factory=list)

    def note(self, line: str) -> None:
        self.lines.append(line)


def _trace(event: str, key: Key | None, detail: str = "") -> None:
    if trace.active is None:
        return
    call = trace.begin(TRACE_FN, event=event, key=key.digest() if key is not None else None, detail=detail or None)
    if call is not None:
        call.end(None)


def not_used(use: DiskUse, why: str) -> None:
    use.note(f"not used: {why}")
    _log.debug("disk cache: not used: %s", why)


def lookup(use: DiskUse, key: Key, heuristics_key: Any, modes: list[str]) -> None:
    """Read ``key``'s entry: seed the query cache with its heuristics answer and keep its plan for the build. A
    miss (or an entry that does not fit) marks the session to store its entry after the build."""
    use.key, use.heuristics_key = key, heuristics_key
    s = store()
    if not s.usable():  # (checked once per directory per process: docs/security.md)
        not_used(use, f"the cache directory {s.path} is off in this process: {s.disabled}")
        return
    problems: list[str] = []
    entry = s.get(key, problems)  # checked in full; a bad entry is dropped (and logged) by the store: a miss
    if entry is None:
        for why in problems:
            use.note(f"dropped: {why}; the graph is built as if there were no cache")
            _trace("dropped", key, why)
        use.note(f"miss ({key.digest()[:16]} in {s.path})")
        use.store_after_build = True
        _trace("miss", key)
        return
    if entry.heuristics_doc is not None:  # (the answer as decode parsed it to check it)
        try:
            heuristics.seed(heuristics_key, entry.heuristics_doc, modes, HEURISTICS_ORIGIN)
            use.from_disk = True
        except (CudnnPyError, ValueError, TypeError, KeyError) as e:  # (the schema was checked: belt and braces)
            drop(use, f"its heuristics answer does not fit this query: {e}")
            return
    use.plan = entry.plan
    what = " and ".join(x for x, have in (("heuristics answer", use.from_disk), ("plan", entry.plan is not None))
                        if have)
    use.note(f"hit ({key.digest()[:16]}): {what}")
    _trace("hit", key, what)
    if not use.from_disk:
        use.store_after_build = True  # an entry without an answer (none was readable then): complete it


def drop(use: DiskUse, why: str) -> None:
    """The entry turned out bad after it was read: delete it (logged as a warning), say so, store afresh."""
    if use.key is None:
        return
    store().discard(use.key, why)
    use.note(f"dropped: {why}; the graph is built as if there were no cache")
    _trace("dropped", use.key, why)
    use.plan = None
    use.store_after_build = True
    with _lock:
        _stored.discard(use.key.digest())


def _io(pairs: Any) -> dict[int, tuple[str, int, int]]:
    """uid -> (data type, elements, element span) of the tensors in memory (not virtual, not by value), from
    (uid, dims, strides, data type, virtual, by value) rows: what a plan reads and writes, independent of how a
    rank is padded."""
    out = {}
    for uid, dims, strides, data_type, virtual, by_value in pairs:
        if virtual or by_value:
            continue
        count, span = 1, 1
        for d, st in zip(dims, strides):
            count *= int(d)
            span += (int(d) - 1) * int(st)
        out[int(uid)] = (str(getattr(data_type, "name", data_type)), count, span)
    return out


def graph_io(fingerprint: tuple | None) -> dict[int, tuple[str, int, int]] | None:
    """The in-memory tensors of an operation graph (``_io``), from its fingerprint; None: no fingerprint."""
    if fingerprint is None:
        return None
    rows = []
    for kind, items in fingerprint:
        if kind != desc.TENSOR_DESCRIPTOR:
            continue
        a = {item[0]: item[2] for item in items}
        rows.append((_one(a, "UNIQUE_ID", -1), a.get(attr.TENSOR_DIMENSIONS, ()),
                     a.get(attr.TENSOR_STRIDES, ()), _one(a, "DATA_TYPE", "?"),
                     bool(_one(a, "IS_VIRTUAL", False)), bool(_one(a, "IS_BY_VALUE", False))))
    return _io(rows)


def _one(attributes: dict[str, Any], name: str, default: Any) -> Any:
    """The single value of tensor attribute ``CUDNN_ATTR_TENSOR_<name>`` in a fingerprint (default: not set)."""
    v = attributes.get("CUDNN_ATTR_TENSOR_" + name)
    return v[0] if isinstance(v, tuple) and len(v) == 1 else default


def plan_io(doc: dict) -> dict[int, tuple[str, int, int]]:
    """The in-memory tensors a plan JSON (parsed, already through ``json_check``'s schema) describes (``_io``)."""
    tensors = doc["operationGraph"]["tensors"]
    return _io((t["name"], t["dim"], t["stride"], t["dataType"], t.get("isVirtual", False), t.get("isByValue", False))
               for t in tensors)


def carries_kernels(doc: dict) -> bool:
    """Whether a plan JSON (parsed, already through ``json_check``'s schema) holds compiled kernels
    (``engine.payload.kernels``): those of a runtime-compiled engine, which a rebuild from it does not compile."""
    engine = doc.get("engine")
    payload = engine.get("payload") if isinstance(engine, dict) else None
    return isinstance(payload, dict) and bool(payload.get("kernels"))


def rebuild(use: DiskUse, config: EngineConfig, handle: int, fingerprint: tuple | None = None) -> ExecutionPlan | None:
    """The entry's plan for ``config``, rebuilt from its JSON and checked (engine, knobs, workspace); None: no plan
    for this config's engine and knobs, a JSON without compiled kernels (the config is to be finalized), or it
    failed (the entry is then dropped, and the plan is to be built).
    ``fingerprint``: the operation graph's (``Descriptor.fingerprint``); a plan JSON describing other in-memory
    tensors than the graph's (:func:`graph_io`, derived only for a plan about to be rebuilt) is refused before cuDNN
    sees it (the checksum catches corruption, not a plan of another graph put there on purpose: that one
    would read and write other sizes than the operands have)."""
    record = use.plan
    if record is None:
        return None
    want = dict(record.knobs)
    if (config.engine_index, plan_cache.chosen(config.knobs)) != (record.engine, want):
        return None  # a plan of another config (a filter, build_plans(ALL), an explicit config): not this one's
    use.plan = None  # used once: the config's plan is then the session's
    doc = record.doc
    assert doc is not None  # (an entry read back: decode parsed the plan's JSON to check it)
    if not carries_kernels(doc):
        # Nothing compiled to save: the JSON would only name the engine and knobs the config already has, and a
        # rebuild from it makes cuDNN parse it and rebuild the operation graph it describes besides finalizing,
        # where the config is finalized on the operation graph the session has already built. (H200, 9.19, conv +
        # bias + relu, fresh processes: from JSON 130 / 135 ms against 87-146 ms cold in one run, 67 against 73 in
        # another; from the config 99 / 92 against 94 / 125 cold.) The query is still answered from the entry.
        use.note(f"plan {config.name} finalized from its config (its JSON carries no compiled kernels)")
        return None
    io = graph_io(fingerprint)
    if io is not None:
        theirs = plan_io(doc)
        if theirs != io:
            diff = sorted(set(theirs.items()) ^ set(io.items()))[:4]
            drop(use, f"its plan describes other tensors than this graph's (uid, data type, elements, span "
                      f"differing: {diff})")
            return None
    try:
        plan = plan_cache.checked_rebuild(record.json, record.engine, want, record.workspace, handle,
                                          json_checked=record.doc is not None)  # (decode checked it into doc)
    except (CudnnError, ValueError) as e:
        drop(use, f"its plan {config.name} did not rebuild as recorded: {e}")
        return None
    plan.config = config  # the graph's own config object (its notes, its source): the same engine and knobs
    plan.source = DISK
    use.note(f"plan {config.name} rebuilt from the entry")
    return plan


def remember(use: DiskUse, plan: ExecutionPlan, cudnn_workspace: int) -> None:
    """After a build that missed: write the entry (the heuristics answer of the session's query, ``plan``'s JSON,
    engine, knobs and cuDNN workspace), once per key per process. A plan without a JSON representation is stored
    without a plan; failures to write are the store's (logged, not raised)."""
    key = use.key
    if key is None or not use.store_after_build:
        return
    use.store_after_build = False
    digest = key.digest()
    with _lock:
        if digest in _stored:
            return
        _stored.add(digest)
    doc = heuristics.answer_document(use.heuristics_key)
    answer = json.dumps(doc, separators=(",", ":")) if doc is not None and doc["configs"] else None
    record = None
    try:
        knobs = tuple(plan_cache.chosen(plan.config.knobs).items())
        record = PlanRecord(plan.to_json(), plan.config.engine_index, knobs, cudnn_workspace)
    except (CudnnError, InvalidValueError, InvalidTypeError) as e:
        _log.info("disk cache: plan %s has no storable JSON (%s); the entry holds the heuristics answer only",
                  plan.name, e)
    if answer is None and record is None:
        use.note("not stored: neither a heuristics answer nor a plan to store")
        return
    ok = store().put(key, Entry(heuristics=answer, plan=record))
    use.note(f"stored ({digest[:16]})" if ok else "not stored (see the log)")
    _trace("stored" if ok else "not stored", key)
