"""Engine configurations: heuristics results or explicit (engine id, knobs) configs, with their name, notes and
workspace read back from cuDNN."""
from __future__ import annotations

import functools
import threading

from .._generated.names import attr, desc
from ..backend import Descriptor
from ..backend.descriptor import ScalarReader
from ..backend.enums import enum_class
from ..errors import CudnnError

KNOB_READ = 8  # knob choices read per config at first; a config with more is read again with room for all
# read for every config heuristics return (hundreds per graph): resolved once
_engine_index = ScalarReader(attr.ENGINE_GLOBAL_INDEX)
_knob_type = ScalarReader(attr.KNOB_CHOICE_KNOB_TYPE)
_knob_value = ScalarReader(attr.KNOB_CHOICE_KNOB_VALUE)


def knob_choice_pool(n: int | None = None) -> list[Descriptor]:
    """KNOB_CHOICE descriptors to read a config's knob choices into (default: one per knob type the loaded
    cuDNN can name, plus a margin for newer ones)."""
    n = n if n is not None else len(enum_class("cudnnBackendKnobType_t")) + 8
    return [Descriptor(desc.KNOB_CHOICE_DESCRIPTOR) for _ in range(n)]


class KnobReader:
    """Reads configs' knob choices into one shared set of KNOB_CHOICE descriptors (a count query returns 0 for
    KNOB_CHOICES, so the array must exist up front; the frontend creates one per knob type for every config).
    Shared by the configs of one heuristics query, which read their knobs when first asked; a lock keeps two
    threads from reading into the pool at once. The pool is created on the first read."""

    def __init__(self) -> None:
        self._pool: list[Descriptor] | None = None
        self._lock = threading.Lock()

    def read(self, cfg: Descriptor) -> list[tuple[int, int]]:
        with self._lock:
            if self._pool is None:
                self._pool = knob_choice_pool(KNOB_READ)
            choices = cfg.get(attr.ENGINECFG_KNOB_CHOICES, into=self._pool)
            if len(choices) == len(self._pool):  # maybe more than fit: read again with room for every knob type
                choices = cfg.get(attr.ENGINECFG_KNOB_CHOICES, into=knob_choice_pool())
            return [(int(_knob_type(c)), int(_knob_value(c))) for c in choices]


class EngineConfig:
    """One ENGINECFG and what the planner needs to know about it.

    The engine index is read at once. The knob choices (and so the name), the notes and the workspace size are
    read when first asked for (deduplication across heuristics modes compares the names of configs of one
    engine only; filters, queries), which keeps planning's read-back to a few calls per config.
    """

    def __init__(self, cfg: Descriptor, engine: Descriptor, engine_index: int,
                 knobs: list[tuple[int, int]] | KnobReader, source: str = ""):
        self.cfg = cfg
        self.engine = engine
        self.engine_index = engine_index
        self._knobs = knobs  # the choices, or the reader that reads them when first asked for
        self.source = source  # "CUDNN_HEUR_MODE_A", "explicit", ...

    @property
    def knobs(self) -> list[tuple[int, int]]:
        """(backend knob type value, value) pairs, in the order cuDNN returns them."""
        if isinstance(self._knobs, KnobReader):
            self._knobs = self._knobs.read(self.cfg)
        return self._knobs

    @property
    def name(self) -> str:
        """``eng<id>`` then ``_k<knob type>=<value>`` per knob: the frontend's config name."""
        return f"eng{self.engine_index}" + "".join(f"_k{t}={v}" for t, v in self.knobs)

    def __repr__(self) -> str:
        return f"EngineConfig({self.name}, from {self.source})"

    @functools.cached_property
    def numerical_notes(self) -> list:
        count = len(enum_class("cudnnBackendNumericalNote_t"))
        notes = self.engine.get(attr.ENGINE_NUMERICAL_NOTE, count=count)
        return [n for n in notes if not n.name.endswith("TYPE_COUNT")]

    @functools.cached_property
    def behavior_notes(self) -> list:
        notes = self.engine.get(attr.ENGINE_BEHAVIOR_NOTE, count=len(enum_class("cudnnBackendBehaviorNote_t")))
        return [n for n in notes if not n.name.endswith("TYPE_COUNT")]

    @functools.cached_property
    def workspace(self) -> int:
        """ENGINECFG_WORKSPACE_SIZE (cuDNN >= 9.2): known before any plan is built."""
        try:
            return int(self.cfg.get(attr.ENGINECFG_WORKSPACE_SIZE))
        except CudnnError:
            return 0

    @classmethod
    def from_descriptor(cls, cfg: Descriptor, source: str, knob_reader: KnobReader | None = None) -> EngineConfig:
        """Read a finalized config back: its engine and index now, its knob choices when first asked for
        (through ``knob_reader``, shared by the configs of one query; read at once without one)."""
        engine = cfg.get(attr.ENGINECFG_ENGINE)
        index = int(_engine_index(engine))
        if knob_reader is None:
            return cls(cfg, engine, index, KnobReader().read(cfg), source)
        return cls(cfg, engine, index, knob_reader, source)

    @classmethod
    def explicit(cls, operation_graph: Descriptor, engine_index: int, knobs: dict[int, int],
                 device_properties: Descriptor | None = None) -> EngineConfig:
        """Build a config for a given engine id and knob choices (no heuristics)."""
        engine = make_engine(operation_graph, engine_index, device_properties)
        choices = []
        for knob_type, value in knobs.items():
            c = Descriptor(desc.KNOB_CHOICE_DESCRIPTOR)
            c.set(attr.KNOB_CHOICE_KNOB_TYPE, int(knob_type))
            c.set(attr.KNOB_CHOICE_KNOB_VALUE, int(value))
            choices.append(c.finalize())
        cfg = Descriptor(desc.ENGINECFG_DESCRIPTOR)
        cfg.set(attr.ENGINECFG_ENGINE, engine)
        cfg.set(attr.ENGINECFG_KNOB_CHOICES, choices)
        cfg.finalize()
        return cls.from_descriptor(cfg, "explicit")


class CachedEngineConfig(EngineConfig):
    """A config of a cached heuristics answer (``heuristics.py``): engine index, knob choices and source are
    known; its ENGINE and ENGINECFG descriptors are built for this operation graph (as :meth:`EngineConfig.explicit`
    builds them) when first needed - engine finalize costs about a millisecond for attention graphs, so the configs
    a graph never builds a plan from, nor asks about, cost nothing."""

    def __init__(self, operation_graph: Descriptor, engine_index: int, knobs: list[tuple[int, int]], source: str):
        self._operation_graph = operation_graph
        self._made: EngineConfig | None = None
        self.engine_index = engine_index
        self._knobs = knobs
        self.source = source

    def _make(self) -> EngineConfig:
        if self._made is None:
            self._made = EngineConfig.explicit(self._operation_graph, self.engine_index, dict(self.knobs))
        return self._made

    @property  # a read-only view of the attribute EngineConfig sets
    def cfg(self) -> Descriptor:  # type: ignore[override]
        return self._make().cfg

    @property
    def engine(self) -> Descriptor:  # type: ignore[override]
        return self._make().engine


def make_engine(operation_graph: Descriptor, engine_index: int,
                device_properties: Descriptor | None = None) -> Descriptor:
    """A finalized ENGINE; ``device_properties``: a DEVICEPROP descriptor to build it
    for (``ENGINE_DEVICEPROP``, deviceless planning)."""
    engine = Descriptor(desc.ENGINE_DESCRIPTOR)
    engine.set(attr.ENGINE_OPERATION_GRAPH, operation_graph)
    engine.set(attr.ENGINE_GLOBAL_INDEX, int(engine_index))
    if device_properties is not None:
        engine.set(attr.ENGINE_DEVICEPROP, device_properties)
    return engine.finalize()
