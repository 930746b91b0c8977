"""cudnn_py's own engines beside cuDNN's plans, and where ``heur_mode.OPENSOURCE`` puts them.

The official frontend's ``OPENSOURCE`` mode never reaches cuDNN: it asks for the frontend's own NVRTC engines.
cudnn_py maps it onto its runtime-compiled engines (:func:`runtime_engines`):

* ``[OPENSOURCE]`` alone: only ours; ``cudnnGraphNotSupportedError`` (every engine's reason) if none accepts;
* ``OPENSOURCE`` before a cuDNN mode (``[OPENSOURCE, A]``): ours first, then the cuDNN entry;
* a cuDNN mode first (``[A, OPENSOURCE]``): the cuDNN entry first, ours after it (offered, so ``select_plan``
  can pick them; the default stays cuDNN's until measurement ranks them);
* no ``OPENSOURCE`` at all (the default modes ``[A, FALLBACK]``): the placement table decides
  (``placement.py``, :meth:`RuntimeEngine.preferred`): ours first where its measured row says ours is faster on
  this op, data type and architecture, else the cuDNN entry first and ours after it. Either way every candidate
  stays in the list, and measurement (``build_plans(ALL)``) overrides the table for the graph it timed.

``CUDNN_PY_ENGINES=0`` turns our engines off (docs/environment.md); ``[OPENSOURCE]`` alone then declines. Without
``OPENSOURCE`` an engine is asked only when it :meth:`claims <RuntimeEngine.claims>` the graph (a cheap look at
its node kinds), so graphs it cannot run never probe NVRTC or the device.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..enums import heur_mode
from ..errors import cudnnGraphNotSupportedError
from .base import PlanConfig
from .runtime.engine import RuntimeEngine

ENV = "CUDNN_PY_ENGINES"
_engines: list[RuntimeEngine] | None = None


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def runtime_engines() -> list[RuntimeEngine]:
    """The process's runtime-compiled engines (made once)."""
    global _engines
    if _engines is None:
        from .norms import NormForwardEngine

        _engines = [NormForwardEngine()]
    return list(_engines)


@dataclass
class Placement:
    cudnn_modes: list[Any]  # the modes left for cuDNN's heuristics
    engines: list[RuntimeEngine] = field(default_factory=list)  # those that accepted the graph
    plans: list[PlanConfig] = field(default_factory=list)
    first: bool = False  # ours before the cuDNN entry
    only: bool = False  # no cuDNN entry
    report: list[dict[str, Any]] = field(default_factory=list)  # per engine: accepted or the reason (explain())


def place(graph: Any, modes: list[Any], engines: list[RuntimeEngine] | None = None,
          taken: set[int] | frozenset[int] = frozenset()) -> Placement:
    """Where our engines go for ``modes`` (``taken``: engine ids the caller registered already)."""
    opensource = heur_mode.OPENSOURCE in modes
    cudnn_modes = [m for m in modes if m is not heur_mode.OPENSOURCE]
    p = Placement(cudnn_modes, only=opensource and not cudnn_modes,
                  first=opensource and modes.index(heur_mode.OPENSOURCE) == 0)
    if not enabled():
        if p.only:
            raise cudnnGraphNotSupportedError(f"heur_mode.OPENSOURCE: cudnn_py's engines are turned off ({ENV}=0)")
        return p
    for engine in runtime_engines() if engines is None else engines:
        if engine.engine_id in taken or not (opensource or engine.claims(graph)):
            continue
        entry: dict[str, Any] = {"engine": engine.name, "engine_id": engine.engine_id, "version": engine.version}
        try:
            checked = engine.check_support(graph)
        except cudnnGraphNotSupportedError as why:
            entry["declined"] = str(why)
        else:
            configs = engine.plan_configs(graph)
            entry["plans"] = [c.name for c in configs]
            if not opensource and engine.preferred(graph, checked):
                p.first = True
                entry["first"] = "the placement table: faster than cuDNN's plan where measured"

            p.engines.append(engine)
            p.plans.extend(configs)
        p.report.append(entry)
    if p.only and not p.plans:
        reasons = "; ".join(e["declined"] for e in p.report) or "no engine of cudnn_py claims this graph"
        raise cudnnGraphNotSupportedError(f"heur_mode.OPENSOURCE: no cudnn_py engine supports the graph: {reasons}")
    return p


def combine(routed: list[PlanConfig], p: Placement) -> list[PlanConfig]:
    """The routed list with our plans placed (the cuDNN entry dropped when OPENSOURCE is alone)."""
    if p.only:
        routed = [c for c in routed if not c.is_backend]
    return p.plans + routed if p.first else routed + p.plans
