"""Selection by measurement on a planned graph (issue #38 item 5): every built candidate, cudnn_py's engines' and
cuDNN's, timed on the caller's buffers, the fastest made the default, the winner remembered on disk.

* :func:`autotune` (internal: the official 1.32 ``pygraph`` has no autotune entry point, so neither has ours) builds
  every candidate of a planned graph, times each with a timer (``engines/selection.py``; the default
  ``selection.TIMER`` uses CUDA events on the stream the plan runs on; tests pass fake timings), selects the
  fastest and remembers it.
* ``build_plans(ALL)`` on a graph whose routed plans include one of our engines' (:func:`build_all`) builds them
  all, cuDNN's too, and takes a remembered winner when there is one; else the next ``execute`` measures on its
  buffers first (:func:`run_pending`), once.

Before any measurement the order is the placement table's (``engines/placement.py``), which also breaks ties.

Candidates are measured only where running a plan several times on the caller's buffers is harmless: no two
operands may share memory (an output written over an input would change what the next run reads). cuDNN's plans
are candidates only within the workspace the caller gave (none given: the executor allocates what each needs).

**Remembered winners** are sealed records (``cudnn_py/cache_trust.py``: ``choices/<sha256>.json``, HMAC with the
cache directory's key) named by the graph's disk-cache key (operation graph fingerprint, cuDNN version, device
compute capability and SM count, modes, package version; ``plans/disk_planning.py``), so none exists where the disk
cache is off (``CUDNN_PY_CACHE=0``) or the graph has no key. A record names its winner by identity (our engine's
id, version and knobs; or cuDNN's engine id and knobs); one naming nothing among the graph's built candidates is
ignored.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from .. import cache_home, cache_trust, interop
from ..engines import selection
from ..engines.base import ExecutionContext
from ..engines.selection import CUDNN, OURS, Candidate, Measured
from ..errors import CudnnPyError, PhaseError
from ..plans import cached_planning
from ..plans.phase import Phase

_log = logging.getLogger(__name__)
RECORDS = "choices"
RECORD_FORMAT = 1
_PENDING = "_autotune_pending"


@dataclass
class Result:
    """What a measurement did: each candidate's time, the winner (None: nothing measured; ``reason`` says why)."""

    measured: list[Measured] = field(default_factory=list)
    winner: Measured | None = None
    skipped: list[str] = field(default_factory=list)
    reason: str | None = None
    remembered: bool = False

    def lines(self) -> list[str]:
        out = [m.line() + ("  <- chosen" if m is self.winner else "") for m in self.measured]
        return out + [f"not a candidate: {s}" for s in self.skipped] + ([self.reason] if self.reason else [])


# ---- candidates -----------------------------------------------------------------------------------------------------
def _engine(graph: Any, engine_id: int) -> Any:
    return next((e for e in graph._engines if e.engine_id == engine_id), None)


def _ours(graph: Any, ctx: ExecutionContext, skipped: list[str]) -> list[tuple[int, Any, dict[str, Any]]]:
    """(routed index, built plan, identity) of each of our engines' routed plans that builds."""
    out = []
    for i, cfg in enumerate(graph._plans):
        engine = _engine(graph, cfg.engine_id)
        if engine is None:
            continue
        try:
            plan = graph._compiled.get(i)
            if plan is None:
                plan = graph._compiled[i] = engine.build_plan(graph, cfg, ctx)
        except CudnnPyError as e:
            skipped.append(f"{cfg.name}: {e}")
            continue
        ident = getattr(plan, "identity", None)
        out.append((i, plan, ident.as_dict() if ident is not None else
                    {"engine_id": cfg.engine_id, "name": cfg.name, "version": "", "knobs": dict(cfg.knobs)}))
    return out


def _cudnn(graph: Any, skipped: list[str]) -> list[tuple[int, int, dict[str, Any]]]:
    """(cuDNN plan index, workspace, identity) of every cuDNN plan behind the cuDNN entry that builds."""
    if not any(p.is_backend for p in graph._plans):
        return []
    try:
        session = graph._at(Phase.ENGINE_CONFIGS)
        session.build_plans(build_all=True)
        return [(e["index"], session.plan(e["index"]).workspace,
                 {"engine_id": e["engine_id"], "name": e["name"], "knobs": {str(k): v for k, v in e["knobs"].items()}})
                for e in session.plan_entries() if e["built"]]
    except CudnnPyError as e:
        skipped.append(f"cuDNN's plans: {e}")
        return []


def _order(graph: Any) -> bool:
    """Whether the placement table puts ours before cuDNN's for this graph (the first runtime engine's answer)."""
    for engine in graph._engines:
        preferred = getattr(engine, "preferred", None)
        if preferred is None:
            continue
        try:
            return bool(preferred(graph))
        except (CudnnPyError, AttributeError):
            continue
    return False


def _aliased(pack: dict[int, Any]) -> str | None:
    seen: dict[int, int] = {}
    for uid, data in pack.items():
        try:
            ptr = interop.data_ptr(data)
        except Exception:  # a host scalar, a value: nothing a run writes
            continue
        if ptr and ptr in seen:
            return f"tensors uid {seen[ptr]} and uid {uid} share memory: running a plan again would change its input"
        seen[ptr] = uid
    return None


def _nbytes(workspace: Any) -> int | None:
    try:
        info = interop.operand_info(workspace)
    except Exception:
        return None
    if info.nbytes is not None:
        return info.nbytes
    if info.shape is not None and info.dtype is not None:
        return functools.reduce(lambda a, b: a * b, info.shape, 1) * max(1, info.dtype[1] // 8)
    return None


def _stream(graph: Any, pack: dict[int, Any], handle: Any) -> int:
    h = handle if handle is not None else graph._handle
    if h is not None:  # (the stream set on the handle, as execute uses it)
        from ..backend.handle import get_stream

        return interop.stream_ptr(get_stream(h))
    for data in pack.values():
        try:
            info = interop.operand_info(data)
        except Exception:
            continue
        place = interop.placement_of(data, info) if not info.on_host else None
        if place is not None:
            return interop.stream_ptr(place.current_stream())
    return 0


# ---- measuring ----------------------------------------------------------------------------------------------------
def autotune(graph: Any, tensor_dict: Any, workspace: Any = None, handle: Any = None, *, tensor_uids: Any = None,
             timer: selection.Timer | None = None, remember: bool = True) -> Result:
    """Time every candidate plan of the planned ``graph`` on these buffers, make the fastest the default and (with
    ``remember``) keep it on disk. Nothing is selected when nothing could be measured (``Result.reason``)."""
    if not graph._planning_done:
        raise PhaseError("call create_execution_plans() before autotune")
    with graph._lock:
        result = Result()
        ctx = graph._exec_context(handle, workspace)
        ours = _ours(graph, ctx, result.skipped)
        cudnn = _cudnn(graph, result.skipped)
        pack = graph._variant_pack(tensor_dict, tensor_uids)
        result.reason = _aliased(pack)
        if result.reason:
            return result
        limit = None if workspace is None else _nbytes(workspace)  # (None given: the executor allocates)
        if workspace is not None and limit is None and graph._session is not None \
                and graph._session.phase >= Phase.EXECUTABLE:
            limit = graph._session.get_workspace_size()
        classic = dict(zip(tensor_uids, tensor_dict)) if tensor_uids is not None else tensor_dict
        c_ours = [Candidate(graph._plans[i].name, OURS, i, ident, functools.partial(plan.execute, graph, pack, ctx))
                  for i, plan, ident in ours]
        c_cudnn = []
        for j, ws, ident in cudnn:
            if limit is not None and ws > limit:
                result.skipped.append(f"cuDNN plan {j} ({ident['name']}): needs {ws} workspace bytes, over {limit}")
                continue
            run = functools.partial(graph._session.execute_plan_at_index, classic, workspace, j, handle)
            c_cudnn.append(Candidate(f"cuDNN plan {j} ({ident['name']})", CUDNN, j, ident, run))
        candidates = c_ours + c_cudnn if _order(graph) else c_cudnn + c_ours
        if not candidates:
            result.reason = "no candidate plan built"
            return result
        result.measured = selection.measure(candidates, selection.TIMER if timer is None else timer,
                                            _stream(graph, pack, handle))
        result.winner = selection.fastest(result.measured)
        if result.winner is None:
            result.reason = "no candidate could be timed"
            return result
        _select(graph, result.winner.candidate)
        if remember:
            result.remembered = _remember(graph, result)
        _log.info("graph %r: measured %d candidates; the default is now %s", graph.name, len(result.measured),
                  result.winner.line())
        graph.__dict__["_autotune_result"] = result  # (explain() and tests read it)
        return result


def _select(graph: Any, c: Candidate) -> None:
    if c.kind == OURS:
        graph._plan_index = c.index
    else:
        graph._plan_index = next(i for i, p in enumerate(graph._plans) if p.is_backend)
        graph._session.select_default(c.index)
    graph.drop_fast_path()


# ---- remembered winners ---------------------------------------------------------------------------------------------
def _record_name(graph: Any) -> str | None:
    if cache_home.switched_off() is not None:
        return None
    session = graph._session
    key = getattr(getattr(session, "disk", None), "key", None)
    if key is None and session is not None and session.query_modes and session.lowered is not None:
        # the in-process caches answered this graph (no disk lookup made its key): the same key, made here
        try:
            key = cached_planning.disk_key(session, session.query_modes)
        except (CudnnPyError, OSError, ValueError):  # (not portable; the device's facts)
            return None
    if key is None:
        return None
    return hashlib.sha256(f"choice-{RECORD_FORMAT}\0{key.digest()}".encode()).hexdigest() + ".json"


def _remember(graph: Any, result: Result) -> bool:
    name = _record_name(graph)
    if name is None or result.winner is None:
        return False
    w = result.winner.candidate
    text = json.dumps({"format": RECORD_FORMAT, "kind": w.kind, "identity": w.identity,
                       "times_ms": {m.candidate.label: m.ms for m in result.measured}}, sort_keys=True)
    return cache_trust.write_record(RECORDS, name, text)


def recalled(graph: Any) -> dict[str, Any] | None:
    """The remembered winner of this graph (``kind``, ``identity``), or None."""
    name = _record_name(graph)
    text = cache_trust.read_record(RECORDS, name) if name is not None else None
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("format") != RECORD_FORMAT or doc.get("kind") not in (OURS, CUDNN) \
            or not isinstance(doc.get("identity"), dict):
        return None
    return doc


def _apply(graph: Any, doc: dict[str, Any], ours: list[tuple[int, Any, dict[str, Any]]],
           cudnn: list[tuple[int, int, dict[str, Any]]]) -> bool:
    want = doc["identity"]
    pool = [(OURS, i, ident) for i, _, ident in ours] if doc["kind"] == OURS else \
        [(CUDNN, j, ident) for j, _, ident in cudnn]
    for kind, index, ident in pool:
        same = all(ident.get(k) == want.get(k) for k in ("engine_id", "knobs") + (("version",) if kind == OURS else ()))
        if same:
            _select(graph, Candidate(ident.get("name", ""), kind, index, ident, lambda: None))
            return True
    return False


def build_all(graph: Any, ctx: ExecutionContext | None) -> bool:
    """``build_plans(ALL)`` for a graph offering one of our engines' plans: build every candidate, take the
    remembered winner, else measure at the next execute. False: not such a graph (the classic path builds)."""
    if not any(_engine(graph, p.engine_id) is not None for p in graph._plans):
        return False
    skipped: list[str] = []
    ours = _ours(graph, ctx or graph._exec_context(None), skipped)
    cudnn = _cudnn(graph, skipped)
    for line in skipped:
        _log.info("graph %r: build_plans(ALL): %s", graph.name, line)
    if not ours and not cudnn:
        return False  # (the classic path raises with its reasons)
    doc = recalled(graph)
    if doc is not None and _apply(graph, doc, ours, cudnn):
        _log.info("graph %r: the default plan is the remembered winner %s", graph.name, doc["identity"])
        graph.__dict__.pop(_PENDING, None)
        return True
    if len(ours) + len(cudnn) > 1:
        graph.__dict__[_PENDING] = True
    if _engine(graph, graph._plans[graph._plan_index].engine_id) is None and not cudnn:
        graph._plan_index = ours[0][0]  # (the cuDNN entry built nothing: ours serve)
    return True


def run_pending(graph: Any, tensor_dict: Any, workspace: Any, handle: Any, tensor_uids: Any) -> None:
    """The measurement ``build_plans(ALL)`` left for the first execute (once; a failure keeps the default)."""
    if not graph.__dict__.get(_PENDING):
        return
    if selection.capturing(_stream(graph, graph._variant_pack(tensor_dict, tensor_uids), handle)):
        return  # (a capture: measured at a later execute outside it)
    graph.__dict__.pop(_PENDING, None)
    try:
        result = autotune(graph, tensor_dict, workspace, handle, tensor_uids=tensor_uids)
    except CudnnPyError as e:
        _log.info("graph %r: no measurement (%s); the default plan stays", graph.name, e)
        return
    if result.winner is None:
        _log.info("graph %r: no measurement (%s); the default plan stays", graph.name, result.reason)
