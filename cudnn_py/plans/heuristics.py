"""Heuristics queries (``graph_flow.md`` §1.3, §2.2): one ENGINEHEUR per mode, in the order given; configs are
deduplicated by name, keeping the first (best) rank — unlike the C++ frontend, which builds duplicate plans. A
name is engine index plus knob choices, so only configs of an engine already seen have their knobs read here.
A failing mode is recorded, not fatal: the caller decides when *no* mode produced anything."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..backend import Descriptor
from ..errors import CudnnError
from .engine_config import EngineConfig, KnobReader

_heur_b_lock = threading.Lock()  # mode B's finalize is not thread-safe (the frontend serialises it too)


@dataclass
class HeuristicsResult:
    configs: list[EngineConfig] = field(default_factory=list)
    per_mode: list[tuple[str, str]] = field(default_factory=list)  # (mode, "N configs" or the error)
    # (mode, the configs it returned, best first: duplicates of an earlier one as that one); names when asked
    ranked: list[tuple[str, list[EngineConfig]]] = field(default_factory=list)


def query(operation_graph: Descriptor, modes: list[str], sm_count: int | None = None,
          device_properties: Descriptor | None = None) -> HeuristicsResult:
    """``modes``: backend heuristics mode C names ("CUDNN_HEUR_MODE_A", ...). ``device_properties``: a finalized
    DEVICEPROP descriptor to rank engines for (deviceless planning, ``ENGINEHEUR_DEVICEPROP``)."""
    result = HeuristicsResult()
    by_engine: dict[int, list[EngineConfig]] = {}  # the configs kept so far, by engine index
    reader = KnobReader()
    for mode in modes:
        try:
            heur = Descriptor("CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR")
            heur.set("CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH", operation_graph)
            heur.set("CUDNN_ATTR_ENGINEHEUR_MODE", mode)
            if device_properties is not None:
                heur.set("CUDNN_ATTR_ENGINEHEUR_DEVICEPROP", device_properties)
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
        result.per_mode.append((mode, f"{len(cfgs)} config(s), {kept} new"))
        result.ranked.append((mode, ranked))
        heur.destroy()
    return result
