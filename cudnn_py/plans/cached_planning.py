"""Planning's caches, as the planning session (``session.py``) uses them: the heuristics query cache
(``heuristics.py``), the in-process plan cache (``plan_cache.py``) and the disk cache (``disk_planning.py``).

The functions take the session, as a :class:`CachingSession` (what they read and keep of it; this module does not
know the session class, which imports it): ``cached_queries`` (the queries the query cache
answered), ``disk`` (what the disk cache gave the graph) and the operation graph's fingerprint, computed once.

* ``query``: a heuristics query keyed by ``heuristics_key`` (at the first query of a graph this process has not
  planned, the disk cache is looked up first: ``disk_lookup``);
* ``query_afresh``: every config of cached answers failed to build: the answers are forgotten and cuDNN asked again;
* ``build_plan``: config ``i``'s plan, rebuilt from the plan cache's or the disk entry's JSON, or built;
* ``disk_store``: the disk entry of a graph built here.
"""
from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..backend import versions
from ..errors import CudnnPyError
from . import disk_planning, heuristics, plan_cache
from .engine_config import CachedEngineConfig
from .plan import ExecutionPlan
from .plan_list import PlanList


class CachingSession(Protocol):
    """The planning session's state that its caches read and keep (session.py says what each is)."""

    options: Any  # phase.SessionOptions
    lowered: Any  # the LoweredGraph, once lowered
    lowering: str
    device: int | None
    executor: Any
    plan_list: PlanList
    cached_queries: list[tuple[Any, list[str]]]
    query_modes: list[str]
    disk: disk_planning.DiskUse
    _fingerprint: tuple[Any, tuple | None] | None

    @property
    def graph(self) -> Any: ...

    @property
    def operation_graph(self) -> Any: ...

    def on_device(self) -> AbstractContextManager[Any]: ...

    def _alignments(self) -> dict[int, int]: ...

    def _for_device(self) -> dict[str, Any]: ...

    def _with_cache(self) -> dict[str, Any]: ...

_log = logging.getLogger(__name__)


def heuristics_key(s: CachingSession, modes: list[str]) -> tuple | None:
    """What decides a heuristics answer (heuristics.py, the query cache): the graph's key, how it was lowered
    (the same key lowers the same way on the same cuDNN, given the alignment of data bound at build time),
    the cuDNN version, the device, the SM count target and the modes. None: not cached (deviceless planning,
    no device known)."""
    if s.options.device_properties is not None or s.device is None:
        return None
    return (s.graph.key(), s.lowering, tuple(sorted(s._alignments().items())),
            versions.runtime_version(), s.device, s.options.sm_count, tuple(modes),
            bool(s.options.dynamic_shapes), bool(s.options.override_shapes))


def query(s: CachingSession, modes: list[str], defer: bool = False, disk: bool = True) -> heuristics.HeuristicsResult:
    key = heuristics_key(s, modes)
    s.query_modes = list(modes)
    if disk and key is not None and not s.plan_list._configs and not heuristics.has(key):
        # a graph this process has not planned: an earlier process may have (the in-process caches answer
        # the graphs planned here before, so the steady state never reaches the disk)
        disk_lookup(s, key, modes)
    kw: dict[str, Any] = s._for_device()
    if key is not None:  # (given only when set, as _for_device's)
        kw["cache_key"] = key
    res = heuristics.query(s.operation_graph, modes, s.options.sm_count, defer=defer, **kw)
    if res.cached:
        s.cached_queries.append((key, modes))
    return res


def _plans_are_their_json(s: CachingSession) -> bool:
    """Whether a plan of this graph is all its JSON says, the condition of both plan caches (in-process and disk):
    not with a kernel cache or dynamic / override shapes (their plans serve other shapes through the kernel cache;
    rebuilt ones were never run)."""
    return s.options.kernel_cache is None and not s.options.dynamic_shapes and not s.options.override_shapes


def disk_key(s: CachingSession, modes: list[str]) -> disk_planning.Key:
    """The graph's disk-cache key for ``modes`` (the operation graph's portable fingerprint, cuDNN version, device,
    modes, SM count target); NotPortable, or the device's errors, where it has none."""
    if s.device is None:
        raise disk_planning.NotPortable("no device")
    fingerprint = disk_planning.portable_fingerprint(operation_graph_fingerprint(s))
    return disk_planning.make_key(fingerprint, versions.runtime_version(), s.device, modes, s.options.sm_count)


def disk_lookup(s: CachingSession, heuristics_key: Any, modes: list[str]) -> None:
    """Look the graph up in the disk cache (``disk_planning.py``): a hit seeds the query cache under
    ``heuristics_key`` and keeps the entry's plan for the build; why it is not used goes to explain()."""
    use, lowered = s.disk, s.lowered
    off = disk_planning.off_reason()
    if off is not None:
        return disk_planning.not_used(use, f"off ({off})")
    if not _plans_are_their_json(s):
        return disk_planning.not_used(use, "a graph with a kernel cache or dynamic / override shapes (its plans "
                                           "hold more than their JSON)")
    if lowered is None or lowered.handle is None or lowered.operation_graph is None or s.device is None:
        return disk_planning.not_used(use, "no device handle on the operation graph")
    try:
        key = disk_key(s, modes)
    except disk_planning.NotPortable as e:
        return disk_planning.not_used(use, str(e))
    except (CudnnPyError, OSError) as e:  # the device's facts
        return disk_planning.not_used(use, f"the device's compute capability / SM count: {e}")
    disk_planning.lookup(use, key, heuristics_key, modes)
    return None


def query_afresh(s: CachingSession) -> bool:
    """Every config came from cached answers, every one failed to build and no filter barred any: forget the
    answers, query cuDNN again and start over (True), as a graph queried first would have. False: nothing to
    redo (a config cuDNN gave this graph, or one the caller chose, failed as well)."""
    plans = s.plan_list
    if not s.cached_queries or plans.barred or plans.plans or \
            not all(isinstance(c, CachedEngineConfig) for c in plans.configs):
        return False
    why = "; ".join(f"{plans.configs[i].name}: {f}" for i, f in plans.failures.items())
    _log.info("graph %r: the configs of a cached heuristics answer did not build (%s); querying cuDNN afresh",
              s.graph.name, why)
    queries, s.cached_queries = s.cached_queries, []
    plans.configs, plans.failures, plans.heuristics_ranked = [], {}, []
    plans.heuristics_report.append(("cache", f"cached configs did not build ({why}); queried afresh"))
    if s.disk.from_disk:  # the answer was the disk entry's: it goes too (cuDNN's answer is stored instead)
        s.disk.from_disk = False
        disk_planning.drop(s.disk, f"the configs of its heuristics answer did not build ({why})")
    with s.on_device():
        for key, modes in queries:
            heuristics.forget(key)
            plans.resolve_deferred()  # an earlier query's modes keep their place in the index space
            # cuDNN's answer, cached in place of the one forgotten
            plans.take(query(s, modes, defer=True, disk=False))
    return bool(plans._configs)


def plan_cache_key(s: CachingSession, i: int) -> tuple | None:
    """Config ``i``'s key in the plan cache (plan_cache.py), or None: not cached. Only a graph whose heuristics
    came from the query cache (its key was planned before) is fingerprinted, so a graph built once pays
    nothing; never with a kernel cache or device properties (a plan holds more than its JSON then), nor with
    dynamic shapes (their plans serve other shapes through the kernel cache; rebuilt ones were never run)."""
    lowered = s.lowered
    if not s.cached_queries or not _plans_are_their_json(s) or \
            lowered is None or lowered.handle is None or lowered.operation_graph is None or \
            not plan_cache.enabled():
        return None
    return plan_cache.key(operation_graph_fingerprint(s), s.plan_list._configs[i], s.options.sm_count, s.device,
                          lowered.handle)


def operation_graph_fingerprint(s: CachingSession) -> tuple | None:
    """``Descriptor.fingerprint`` of the operation graph, computed once per operation graph (the plan cache
    and the disk cache both key by it)."""
    assert s.lowered is not None and s.lowered.operation_graph is not None
    og = s.lowered.operation_graph
    if s._fingerprint is None or s._fingerprint[0] is not og:  # (lowered again, or finalized again)
        s._fingerprint = (og, og.fingerprint())
    return s._fingerprint[1]


def build_plan(s: CachingSession, i: int) -> ExecutionPlan:
    """Config ``i``'s plan (called with the planning context current): rebuilt from the plan cache's JSON, else
    from the disk entry's, else built (and remembered by the plan cache)."""
    config = s.plan_list._configs[i]
    cache_key, plan = plan_cache_key(s, i), None
    if cache_key is not None:
        assert s.lowered is not None and s.lowered.handle is not None
        plan = plan_cache.rebuild(cache_key, config, s.lowered.handle)
    record = s.disk.plan
    if plan is None and record is not None and s.lowered is not None and s.lowered.handle is not None:
        plan = disk_planning.rebuild(s.disk, config, s.lowered.handle, operation_graph_fingerprint(s))
        if plan is not None and cache_key is not None:  # the next build here: from memory
            plan_cache.remember_json(cache_key, record.json, record.engine, dict(record.knobs), record.workspace)
    if plan is None:
        plan = ExecutionPlan.build(config, **s._with_cache())
        if cache_key is not None:
            plan_cache.remember(cache_key, plan)
    return plan


def disk_store(s: CachingSession) -> None:
    """Write the disk cache's entry for this graph (a miss, or an entry dropped): its heuristics answer and
    default plan, with cuDNN's workspace (without the program's intermediates, which the session adds)."""
    candidate = s.plan_list.candidate
    assert candidate is not None
    plan = s.plan_list.plans[candidate]
    if plan.source not in ("finalized", plan_cache.REBUILT):
        return
    scratch = s.executor.scratch_bytes if s.executor is not None else 0
    t0 = time.perf_counter()
    with s.on_device():
        disk_planning.remember(s.disk, plan, plan.workspace - scratch)
    _log.info("graph %r: disk cache store: %s (%.2f ms)", s.graph.name,
              s.disk.lines[-1] if s.disk.lines else "nothing", (time.perf_counter() - t0) * 1e3)
