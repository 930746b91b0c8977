"""Heuristics queries: one ENGINEHEUR per mode, in the order given; configs are
deduplicated by name, keeping the first (best) rank — unlike the C++ frontend, which builds duplicate plans. A
name is engine index plus knob choices, so only configs of an engine already seen have their knobs read here.
A failing mode is recorded, not fatal: the caller decides when *no* mode produced anything.

**Deferred modes.** ``query(..., defer=True)`` stops after the first mode that returned a config and leaves the
rest pending (``HeuristicsResult.pending``); :func:`resume` queries them later, deduplicated against every config
already returned, as one query of all the modes would have. A planner asks for [A, FALLBACK] and almost always
builds A's first config: FALLBACK's query (2-3 ms of an SDPA build on the H200) is then never needed. The
session resumes as soon as anything needs the whole list (``plans/session.py``).

**The query cache.** Heuristics rank engines for an operation graph on one device; the same graph on the same device
and cuDNN gets the same answer, so a query given a ``cache_key`` (``PlanningSession``: the graph's ``key()``, the
lowering, the device, the cuDNN version, the modes, the SM count target) is answered from the process's cache when
that key was queried before: its configs are rebuilt from their engine index and knob choices, each when first
needed (a graph usually builds only its first: :class:`~.engine_config.CachedEngineConfig`). A hit cannot compute
anything else than a fresh query would: every plan is built from *this* graph's operation graph, and a config
that does not fit it fails to build like any other (``PlanningSession`` then queries afresh, and says so). Only
queries that returned configs are kept; ``HEURISTICS_CACHE_SIZE`` of them, the least recently used dropped first.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .. import frontend_log as _fe
from .._generated.names import HeurMode, attr, desc
from ..backend import Descriptor
from ..errors import CudnnError, InvalidValueError
from .engine_config import CachedEngineConfig, EngineConfig, KnobReader
from .lru import LruCache

HEURISTICS_CACHE_SIZE = 256

_heur_b_lock = threading.Lock()  # mode B's finalize is not thread-safe (the frontend serialises it too)


@dataclass
class HeuristicsResult:
    configs: list[EngineConfig] = field(default_factory=list)
    per_mode: list[tuple[str, str]] = field(default_factory=list)  # (mode, "N configs" or the error)
    # (mode, the configs it returned, best first: duplicates of an earlier one as that one); names when asked
    ranked: list[tuple[str, list[EngineConfig]]] = field(default_factory=list)
    cached: bool = False  # answered from the query cache
    pending: list[str] = field(default_factory=list)  # modes not queried yet (query(defer=True)): resume() them
    # what resume() needs: (operation graph, sm_count, device properties, cache key)
    _resume_with: tuple | None = field(default=None, repr=False)


@dataclass(frozen=True)
class _Answer:
    """What a query returned, without descriptors: (engine index, knob choices, mode) per config, the per-mode
    report, and each mode's ranking as indices into the configs."""

    configs: tuple[tuple[int, tuple[tuple[int, int], ...], str], ...]
    per_mode: tuple[tuple[str, str], ...]
    ranked: tuple[tuple[str, tuple[int, ...]], ...]
    pending: tuple[str, ...] = ()  # modes a deferred query had not asked yet
    origin: str = "cached"  # what the reports say of a hit: "cached", or where a seeded answer was read


_cache = LruCache()  # cache key -> _Answer


def forget(cache_key: Any) -> None:
    """Drop one cached answer (its configs did not build for a graph of that key)."""
    _cache.drop(cache_key)


def clear_cache() -> None:
    _cache.empty()


def has(cache_key: Any) -> bool:
    """Whether the query cache holds an answer for ``cache_key`` (not counted as a use)."""
    with _cache.lock:
        return cache_key in _cache


def answer_document(cache_key: Any) -> dict | None:
    """The cached answer of ``cache_key`` as plain JSON values (``disk_cache.check_heuristics_answer``'s schema:
    what the disk cache stores), or None: no answer."""
    with _cache.lock:
        answer = _cache.get(cache_key)
    if answer is None:
        return None
    return {"configs": [{"engine": e, "knobs": [list(k) for k in knobs], "mode": mode}
                        for e, knobs, mode in answer.configs],
            "per_mode": [list(row) for row in answer.per_mode],
            "ranked": [[m, list(order)] for m, order in answer.ranked],
            "pending": list(answer.pending)}


def seed(cache_key: Any, doc: dict, modes: list[str], note: str) -> None:
    """Put an answer read elsewhere (the disk cache: ``doc`` already checked against
    ``check_heuristics_answer``'s schema) into the query cache under ``cache_key``, as if a query of ``modes`` had
    returned it; ``note`` replaces "cached" in each mode's report (``explain()`` says where it came from). An
    answer that does not fit ``modes`` (a mode not asked, nothing to build) raises InvalidValueError and is not
    kept."""
    configs = tuple((int(c["engine"]), tuple((int(t), int(v)) for t, v in c["knobs"]), str(c["mode"]))
                    for c in doc["configs"])
    asked = set(modes)
    used = {m for _, _, m in configs} | {m for m, _ in doc["per_mode"]} | {m for m, _ in doc["ranked"]} | \
        set(doc["pending"])
    if not configs:
        raise InvalidValueError("the stored heuristics answer has no engine config")
    if not used <= asked:
        raise InvalidValueError(f"the stored heuristics answer names modes {sorted(used - asked)} that were not "
                                f"asked ({sorted(asked)})")
    answer = _Answer(configs, tuple((str(m), str(r)) for m, r in doc["per_mode"]),
                     tuple((str(m), tuple(int(i) for i in order)) for m, order in doc["ranked"]),
                     tuple(str(m) for m in doc["pending"]), origin=note)
    _cache.store(cache_key, answer, HEURISTICS_CACHE_SIZE)


def _answered(operation_graph: Descriptor, answer: _Answer) -> HeuristicsResult:
    configs: list[EngineConfig] = [CachedEngineConfig(operation_graph, index, list(knobs), source)
                                   for index, knobs, source in answer.configs]
    return HeuristicsResult(configs=configs, per_mode=[(m, f"{r} ({answer.origin})") for m, r in answer.per_mode],
                            ranked=[(m, [configs[i] for i in order]) for m, order in answer.ranked], cached=True,
                            pending=list(answer.pending))


def _remember(cache_key: Any, result: HeuristicsResult) -> None:
    position = {id(c): i for i, c in enumerate(result.configs)}
    answer = _Answer(tuple((c.engine_index, tuple(c.knobs), c.source) for c in result.configs),
                     tuple(result.per_mode),
                     tuple((m, tuple(position[id(c)] for c in ranked)) for m, ranked in result.ranked),
                     tuple(result.pending))
    _cache.store(cache_key, answer, HEURISTICS_CACHE_SIZE)


def query(operation_graph: Descriptor, modes: list[str], sm_count: int | None = None,
          device_properties: Descriptor | None = None, cache_key: Any = None,
          defer: bool = False) -> HeuristicsResult:
    """``modes``: backend heuristics mode C names ("CUDNN_HEUR_MODE_A", ...). ``device_properties``: a finalized
    DEVICEPROP descriptor to rank engines for (deviceless planning, ``ENGINEHEUR_DEVICEPROP``; never cached).
    ``cache_key``: answer from / into the query cache (see the module's docstring); None: query cuDNN.
    ``defer``: leave the modes after the first that returned a config pending (see the module's docstring)."""
    if device_properties is not None:
        cache_key = None  # deviceless answers are for the properties given: not kept
    result = None
    if cache_key is not None:
        answer = _cache.lookup(cache_key)
        if answer is not None:
            result = _answered(operation_graph, answer)
            if _fe.ENABLED:
                _fe.write(f"INFO: Heuristic query answered from cudnn_py's cache: {len(result.configs)} configurations")
    if result is None:
        if defer:
            result = HeuristicsResult(pending=list(modes))
            while result.pending and not result.configs:
                _merge(result, _query(operation_graph, [result.pending.pop(0)], sm_count, device_properties,
                                      result.configs))
        else:
            result = _query(operation_graph, modes, sm_count, device_properties)
        if cache_key is not None and result.configs:
            _remember_if_readable(cache_key, result)
    result._resume_with = (operation_graph, sm_count, device_properties, cache_key)
    if result.pending and not defer:
        resume(result)
    return result


def resume(result: HeuristicsResult) -> HeuristicsResult:
    """Query ``result``'s pending modes now; add what they return to ``result`` (and to the cache entry it came
    from or went into) and return just that: the new configs, the modes' reports and rankings."""
    if not result.pending or result._resume_with is None:
        return HeuristicsResult()
    operation_graph, sm_count, device_properties, cache_key = result._resume_with
    modes, result.pending = result.pending, []
    added = _query(operation_graph, modes, sm_count, device_properties, result.configs)
    added.per_mode = [(m, f"{r} (deferred: queried when first needed)") for m, r in added.per_mode]
    _merge(result, added)
    if cache_key is not None and result.configs:
        _remember_if_readable(cache_key, result)  # the whole answer now replaces the partial one
    return added


def _merge(result: HeuristicsResult, more: HeuristicsResult) -> None:
    result.configs.extend(more.configs)
    result.per_mode.extend(more.per_mode)
    result.ranked.extend(more.ranked)


def _remember_if_readable(cache_key: Any, result: HeuristicsResult) -> None:
    try:
        _remember(cache_key, result)
    except CudnnError:  # a config whose knobs cannot be read back is simply not cached
        pass


def _query(operation_graph: Descriptor, modes: list[str], sm_count: int | None,
           device_properties: Descriptor | None, seen: list[EngineConfig] | None = None) -> HeuristicsResult:
    """One ENGINEHEUR per mode; ``seen``: configs an earlier query returned (a config equal to one of them is
    that one, as within one query)."""
    result = HeuristicsResult()
    by_engine: dict[int, list[EngineConfig]] = {}  # the configs kept so far, by engine index
    for c in seen or ():
        by_engine.setdefault(c.engine_index, []).append(c)
    reader = KnobReader()
    for mode in modes:
        try:
            heur = Descriptor(desc.ENGINEHEUR_DESCRIPTOR)
            heur.set(attr.ENGINEHEUR_OPERATION_GRAPH, operation_graph)
            heur.set(attr.ENGINEHEUR_MODE, mode)
            if device_properties is not None:
                heur.set(attr.ENGINEHEUR_DEVICEPROP, device_properties)
            if sm_count is not None and sm_count > 0:
                heur.set(attr.ENGINEHEUR_SM_COUNT_TARGET, int(sm_count))
            if mode == HeurMode.MODE_B:
                with _heur_b_lock:
                    heur.finalize()
            else:
                heur.finalize()
            cfgs = heur.get(attr.ENGINEHEUR_RESULTS)
        except CudnnError as e:
            result.per_mode.append((mode, f"failed: {e}"))
            if _fe.ENABLED:
                _fe.write(f"WARN: Heuristic query for mode {mode} failed: {e}")
            continue
        if _fe.ENABLED:
            _fe.heuristics(mode, len(cfgs))
        kept, ranked = 0, []
        for cfg in cfgs:
            try:
                ec = EngineConfig.from_descriptor(cfg, mode, reader)
                same_engine = by_engine.setdefault(ec.engine_index, [])
                twin = next((c for c in same_engine if c.knobs == ec.knobs), None) if same_engine else None
            except CudnnError as e:
                result.per_mode.append((mode, f"config read-back failed: {e}"))
                continue
            ranked.append(twin or ec)
            if twin is not None:
                cfg.destroy()
                continue
            same_engine.append(ec)
            result.configs.append(ec)
            kept += 1
            if _fe.ENABLED:
                _fe.engine_config(ec)
        result.per_mode.append((mode, f"{len(cfgs)} config(s), {kept} new"))
        result.ranked.append((mode, ranked))
        heur.destroy()
    return result
