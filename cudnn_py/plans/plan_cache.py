"""The plan cache: an execution plan built before in this process, for the same operation graph and engine config,
is rebuilt from its JSON instead of being finalized afresh.

Why: finalizing an attention plan costs 40-60 ms on the H200 even when cuDNN has its kernel compiled already;
rebuilding one from ``EXECUTION_PLAN_JSON_REPRESENTATION`` (what ``deserialize()`` does)
costs 2-4 ms (a probe of this session, not committed). Building the same graph again (one per thread, per request, per
training step of a framework that rebuilds) is common.

What makes a hit the same plan:

* the key is the operation graph's **fingerprint** (``Descriptor.fingerprint``: every attribute set on the graph,
  its operations and tensors: dims, strides, uids, data types, modes, scalars by value), the engine (global index)
  and knob choices, the SM count target, the device and the handle the graph was finalized with; the plan's JSON
  is cuDNN's own description of that graph and config. A graph with anything cuDNN filled in, or a constant given
  by address, has no fingerprint and is not cached;
* the rebuilt plan is checked before use: its engine, knob choices and workspace size must be the ones recorded
  when the entry was made. A rebuild that fails or differs drops the entry, is logged, and the plan is finalized
  as if there were no cache (the normal path, not a fallback that hides anything: the plan built is the one asked
  for either way);
* what a plan holds beyond its JSON (a kernel cache, device properties for deviceless planning) is never cached:
  ``PlanningSession`` asks only for plans of graphs planned on a device without a kernel cache and without
  dynamic shapes (whose rebuilt plans were never run on the GPU).

Entries are made for graphs whose heuristics query was answered from the query cache (a graph key seen before,
``heuristics.py``), so a graph built once pays nothing: the second build finalizes and records its plan, later ones
rebuild it. ``PLAN_CACHE_SIZE`` entries (JSON of tens of KB each), least recently used dropped first;
``CUDNN_PY_PLAN_CACHE=0`` (read per build) turns it off; ``clear_cache()`` empties it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..errors import CudnnError, InvalidValueError
from .engine_config import EngineConfig
from .lru import LruCache
from .plan import ExecutionPlan
from .switches import switched_off

_log = logging.getLogger(__name__)

PLAN_CACHE_SIZE = 128
PLAN_CACHE_ENV = "CUDNN_PY_PLAN_CACHE"
REBUILT = "rebuilt from the JSON of the same plan built earlier in this process (plan cache)"


@dataclass(frozen=True)
class _Entry:
    json: str
    engine_index: int
    knobs: dict[int, int]  # as applied (chosen)
    workspace: int  # cuDNN's, without the program's workspace-resident intermediates


_cache = LruCache()  # cache key -> _Entry
stats = {"hits": 0, "entries_made": 0, "rebuilds_refused": 0}  # counted under _cache.lock


def enabled() -> bool:
    return switched_off(PLAN_CACHE_ENV) is None


def clear_cache() -> None:
    _cache.empty()


def key(fingerprint: tuple | None, config: EngineConfig, sm_count: int | None, device: int | None,
        handle: int) -> tuple | None:
    """The cache key of a plan for ``config`` over an operation graph of ``fingerprint``; None: not cacheable."""
    if fingerprint is None or device is None:
        return None
    return (fingerprint, config.engine_index, tuple(config.knobs), sm_count, device, handle)


def chosen(knobs: Any) -> dict[int, int]:
    """Knob choices as cuDNN applies them: a plan read back from JSON also lists the engine's other knobs at -1 (its
    default; seen on the H200 for engines 6 and 7: ``k14=-1``, ``k17=-1``), which a heuristics config leaves out."""
    return {t: v for t, v in knobs if v != -1}


def checked_rebuild(text: str, engine_index: int, knobs: dict[int, int], workspace: int, handle: int,
                    json_checked: bool = False) -> ExecutionPlan:
    """A plan rebuilt from ``text`` (its JSON) that must have the recorded engine, knob choices (as applied,
    :func:`chosen`) and cuDNN workspace size: the check of this cache and of the disk cache (``disk_planning``).
    ``json_checked``: ``text`` passed ``json_check.check_execution_plan`` already, or cuDNN wrote it in this
    process (``ExecutionPlan.from_json``). Raises CudnnError (cuDNN refused the JSON) or InvalidValueError (the
    plan differs)."""
    plan = ExecutionPlan.from_json(text, handle, json_checked)
    got = (plan.config.engine_index, chosen(plan.config.knobs), plan.workspace)
    want = (engine_index, knobs, workspace)
    if got != want:
        raise InvalidValueError(f"the rebuilt plan has (engine, knobs, workspace) {got}, the entry {want}")
    return plan


def rebuild(cache_key: tuple, config: EngineConfig, handle: int) -> ExecutionPlan | None:
    """The plan of an entry, rebuilt from its JSON and checked against it; None: no entry, or it was dropped."""
    entry = _cache.lookup(cache_key)
    if entry is None:
        return None
    try:
        # an entry's JSON was written by cuDNN in this process (remember) or checked by the disk cache's decode
        # (remember_json): its schema is not checked again on every build of the key
        plan = checked_rebuild(entry.json, entry.engine_index, entry.knobs, entry.workspace, handle,
                               json_checked=True)
    except (CudnnError, ValueError) as e:
        _cache.drop(cache_key)
        with _cache.lock:
            stats["rebuilds_refused"] += 1
        _log.warning("plan cache: the entry for %s could not be rebuilt (%s); dropped, the plan is finalized afresh",
                     config.name, e)
        return None
    with _cache.lock:
        stats["hits"] += 1
    plan.config = config  # the graph's own config object (its notes, its source), the same engine and knobs
    plan.source = REBUILT
    return plan


def remember(cache_key: tuple, plan: ExecutionPlan) -> None:
    """Record a plan just finalized for ``cache_key`` (its ``workspace`` still cuDNN's: the session adds its
    intermediates afterwards); a plan cuDNN cannot write as JSON is simply not cached."""
    try:
        text = plan.to_json()
    except CudnnError as e:
        _log.info("plan cache: plan %s has no JSON representation (%s); not cached", plan.name, e)
        return
    remember_json(cache_key, text, plan.config.engine_index, chosen(plan.config.knobs), plan.workspace)


def remember_json(cache_key: tuple, text: str, engine_index: int, knobs: dict[int, int], workspace: int) -> None:
    """Record a plan by its JSON (the disk cache hands over the JSON a plan was just rebuilt from and checked
    against, so the graph's next build in this process is served from here without reading the disk). ``text``
    must be JSON cuDNN wrote in this process or one that passed ``json_check.check_execution_plan``: a hit
    rebuilds from it without checking it again."""
    _cache.store(cache_key, _Entry(text, engine_index, dict(knobs), workspace), PLAN_CACHE_SIZE)
    with _cache.lock:
        stats["entries_made"] += 1
