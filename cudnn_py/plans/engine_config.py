"""Engine configurations: heuristics results or explicit (engine id, knobs) configs, with their name, notes and
workspace read back from cuDNN (``graph_flow.md`` §1.4, §1.5, §2.4)."""
from __future__ import annotations

import functools

from ..backend import Descriptor
from ..backend.descriptor import ScalarReader
from ..backend.enums import enum_class
from ..errors import CudnnError

KNOB_READ = 8  # knob choices read per config at first; a config with more is read again with room for all
# read for every config heuristics return (hundreds per graph): resolved once
_engine_index = ScalarReader("CUDNN_ATTR_ENGINE_GLOBAL_INDEX")
_knob_type = ScalarReader("CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE")
_knob_value = ScalarReader("CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE")


def knob_choice_pool(n: int | None = None) -> list[Descriptor]:
    """KNOB_CHOICE descriptors to read a config's knob choices into (default: one per knob type the loaded
    cuDNN can name, plus a margin for newer ones)."""
    n = n if n is not None else len(enum_class("cudnnBackendKnobType_t")) + 8
    return [Descriptor("CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR") for _ in range(n)]


class EngineConfig:
    """One ENGINECFG and what the planner needs to know about it.

    The name (engine index and knob choices) is read at once: deduplication across heuristics modes needs it.
    Notes and workspace size are read when first asked for (filters, queries), which keeps planning's
    read-back to a few calls per config.
    """

    def __init__(self, cfg: Descriptor, engine: Descriptor, engine_index: int, knobs: list[tuple[int, int]],
                 source: str = ""):
        self.cfg = cfg
        self.engine = engine
        self.engine_index = engine_index
        self.knobs = knobs  # (backend knob type value, value), in the order cuDNN returns them
        self.source = source  # "CUDNN_HEUR_MODE_A", "explicit", ...

    @property
    def name(self) -> str:
        """``eng<id>`` then ``_k<knob type>=<value>`` per knob: the frontend's config name."""
        return f"eng{self.engine_index}" + "".join(f"_k{t}={v}" for t, v in self.knobs)

    def __repr__(self) -> str:
        return f"EngineConfig({self.name}, from {self.source})"

    @functools.cached_property
    def numerical_notes(self) -> list:
        count = len(enum_class("cudnnBackendNumericalNote_t"))
        notes = self.engine.get("CUDNN_ATTR_ENGINE_NUMERICAL_NOTE", count=count)
        return [n for n in notes if not n.name.endswith("TYPE_COUNT")]

    @functools.cached_property
    def behavior_notes(self) -> list:
        notes = self.engine.get("CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE", count=len(enum_class("cudnnBackendBehaviorNote_t")))
        return [n for n in notes if not n.name.endswith("TYPE_COUNT")]

    @functools.cached_property
    def workspace(self) -> int:
        """ENGINECFG_WORKSPACE_SIZE (cuDNN >= 9.2): known before any plan is built."""
        try:
            return int(self.cfg.get("CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE"))
        except CudnnError:
            return 0

    @classmethod
    def from_descriptor(cls, cfg: Descriptor, source: str, knob_pool: list[Descriptor] | None = None) -> EngineConfig:
        """Read a finalized config back. ``knob_pool``: KNOB_CHOICE descriptors to read the knob choices into,
        shared across configs (a count query returns 0 for KNOB_CHOICES, so the array must be there up front;
        the frontend creates one per knob type for every config)."""
        engine = cfg.get("CUDNN_ATTR_ENGINECFG_ENGINE")
        index = int(_engine_index(engine))
        pool = knob_pool if knob_pool is not None else knob_choice_pool(KNOB_READ)
        choices = cfg.get("CUDNN_ATTR_ENGINECFG_KNOB_CHOICES", into=pool)
        if len(choices) == len(pool):  # maybe more than fit: read again with room for every knob type
            choices = cfg.get("CUDNN_ATTR_ENGINECFG_KNOB_CHOICES", into=knob_choice_pool())
        knobs = [(int(_knob_type(c)), int(_knob_value(c))) for c in choices]
        return cls(cfg, engine, index, knobs, source)

    @classmethod
    def explicit(cls, operation_graph: Descriptor, engine_index: int, knobs: dict[int, int]) -> EngineConfig:
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
