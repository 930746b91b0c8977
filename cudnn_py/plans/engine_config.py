"""Engine configurations: heuristics results or explicit (engine id, knobs) configs, with their name, notes and
workspace read back once (``graph_flow.md`` §1.4, §1.5, §2.4)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..backend import Descriptor
from ..backend.enums import enum_class
from ..backend.errors import CudnnError


def knob_choice_pool() -> list[Descriptor]:
    """One KNOB_CHOICE descriptor per knob type the loaded cuDNN can name: room for any config's choices."""
    n = len(enum_class("cudnnBackendKnobType_t")) + 8  # margin for knob types newer than the generated table
    return [Descriptor("CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR") for _ in range(n)]


@dataclass
class EngineConfig:
    """One ENGINECFG and what the planner needs to know about it."""

    cfg: Descriptor
    engine_index: int
    knobs: list[tuple[int, int]]  # (backend knob type value, value), in the order cuDNN returns them
    numerical_notes: list = field(default_factory=list)  # backend enum members
    behavior_notes: list = field(default_factory=list)
    workspace: int = 0  # ENGINECFG_WORKSPACE_SIZE (cuDNN >= 9.2), before any plan is built
    source: str = ""  # "heur_mode.A", "explicit", ...

    @property
    def name(self) -> str:
        """``eng<id>`` then ``_k<knob type>=<value>`` per knob: the frontend's config name."""
        return f"eng{self.engine_index}" + "".join(f"_k{t}={v}" for t, v in self.knobs)

    @classmethod
    def from_descriptor(cls, cfg: Descriptor, source: str, knob_pool: "list[Descriptor] | None" = None) -> "EngineConfig":
        """Read a finalized config back. ``knob_pool``: KNOB_CHOICE descriptors to read the knob choices into,
        shared across configs (a count query returns 0 for KNOB_CHOICES, so one slot per knob type is needed;
        the frontend creates that many for every config, which dominates its read-back time)."""
        engine = cfg.get("CUDNN_ATTR_ENGINECFG_ENGINE")
        index = int(engine.get("CUDNN_ATTR_ENGINE_GLOBAL_INDEX"))
        pool = knob_pool if knob_pool is not None else knob_choice_pool()
        knobs = [(int(c.get("CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE")), int(c.get("CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE")))
                 for c in cfg.get("CUDNN_ATTR_ENGINECFG_KNOB_CHOICES", into=pool)]
        numerical = engine.get("CUDNN_ATTR_ENGINE_NUMERICAL_NOTE",
                               count=len(enum_class("cudnnBackendNumericalNote_t")))
        behavior = engine.get("CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE", count=len(enum_class("cudnnBackendBehaviorNote_t")))
        engine.destroy()
        try:
            workspace = int(cfg.get("CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE"))
        except CudnnError:
            workspace = 0
        return cls(cfg, index, knobs, [n for n in numerical if not n.name.endswith("TYPE_COUNT")],
                   [n for n in behavior if not n.name.endswith("TYPE_COUNT")], workspace, source)

    @classmethod
    def explicit(cls, operation_graph: Descriptor, engine_index: int, knobs: dict[int, int]) -> "EngineConfig":
        """Build a config for a given engine id and knob choices (no heuristics)."""
        engine = Descriptor("CUDNN_BACKEND_ENGINE_DESCRIPTOR")
        engine.set("CUDNN_ATTR_ENGINE_OPERATION_GRAPH", operation_graph)
        engine.set("CUDNN_ATTR_ENGINE_GLOBAL_INDEX", int(engine_index))
        engine.finalize()
        choices = []
        for knob_type, value in knobs.items():
            c = Descriptor("CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR")
            c.set("CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE", int(knob_type))
            c.set("CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE", int(value))
            choices.append(c.finalize())
        cfg = Descriptor("CUDNN_BACKEND_ENGINECFG_DESCRIPTOR")
        cfg.set("CUDNN_ATTR_ENGINECFG_ENGINE", engine)
        cfg.set("CUDNN_ATTR_ENGINECFG_KNOB_CHOICES", choices)
        cfg.finalize()
        return cls.from_descriptor(cfg, "explicit")
