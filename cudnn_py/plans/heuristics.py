"""Heuristics queries (``graph_flow.md`` §1.3, §2.2): one ENGINEHEUR per mode, in the order given; configs are
deduplicated across modes by name, keeping the first (best) rank — unlike the C++ frontend, which builds
duplicate plans. A failing mode is recorded, not fatal: the caller decides when *no* mode produced anything."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..backend import Descriptor
from ..errors import CudnnError
from .engine_config import KNOB_READ, EngineConfig, knob_choice_pool

_heur_b_lock = threading.Lock()  # mode B's finalize is not thread-safe (the frontend serialises it too)


@dataclass
class HeuristicsResult:
    configs: list[EngineConfig] = field(default_factory=list)
    per_mode: list[tuple[str, str]] = field(default_factory=list)  # (mode, "N configs" or the error)
    # (mode, the names of the configs it returned, best first: duplicates of an earlier mode's included)
    ranked: list[tuple[str, list[str]]] = field(default_factory=list)


def query(operation_graph: Descriptor, modes: list[str], sm_count: int | None = None) -> HeuristicsResult:
    """``modes``: backend heuristics mode C names ("CUDNN_HEUR_MODE_A", ...)."""
    result = HeuristicsResult()
    seen: set[str] = set()
    pool = knob_choice_pool(KNOB_READ)
    for mode in modes:
        try:
            heur = Descriptor("CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR")
            heur.set("CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH", operation_graph)
            heur.set("CUDNN_ATTR_ENGINEHEUR_MODE", mode)
            if sm_count is not None and sm_count > 0:
                heur.set("CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET", int(sm_count))
            if mode == "CUDNN_HEUR_MODE_B":
                with _heur_b_lock:
                    heur.finalize()
            else:
                heur.finalize()
            cfgs = heur.get("CUDNN_ATTR_ENGINEHEUR_RESULTS")
        except CudnnError as e:
            result.per_mode.append((mode, f"failed: {e}"))
            continue
        kept, names = 0, []
        for cfg in cfgs:
            try:
                ec = EngineConfig.from_descriptor(cfg, mode, pool)
            except CudnnError as e:
                result.per_mode.append((mode, f"config read-back failed: {e}"))
                continue
            names.append(ec.name)
            if ec.name in seen:
                cfg.destroy()
                continue
            seen.add(ec.name)
            result.configs.append(ec)
            kept += 1
        result.per_mode.append((mode, f"{len(cfgs)} config(s), {kept} new"))
        result.ranked.append((mode, names))
        heur.destroy()
    return result
