"""The plan list: one graph's engine configs in plan-index order, what the filters bar, the plans built from them
and the index queries of the classic API (``get_execution_plan_count``, ``get_plan_name_at_index``, ...).

The planning session (``session.py``) owns one and gates it by phase: the session's methods of the same names check
that engine configs exist (``PhaseError`` otherwise) and call these, which assume they do. The configs come from
heuristics queries (``take``); a query may leave modes for later (``heuristics.py``, deferred modes), which
``configs`` (the whole list: the plan count, an index past the configs so far, a filter, explain) queries first,
while the build reads ``_configs``, the configs so far. Plan indices are config indices: ``plans``, ``failures``
(why a plan did not build) and ``barred`` (why a filter or an erratum bars a config) are keyed by them, and
``candidate`` is the default plan's.
"""
from __future__ import annotations

import functools
import json
import logging
import time
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .. import enums
from .. import frontend_log as _fe
from .._generated.names import attr, desc
from ..backend import versions
from ..backend.enums import enum_class
from ..errors import UsageError, cudnnGraphNotSupportedError
from . import errata, heuristics
from .engine_config import EngineConfig
from .plan import ExecutionPlan

if TYPE_CHECKING:
    from .phase import Phase

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


class PlanListOwner(Protocol):
    """What a plan list reads of its owner (the planning session), and nothing else: the device context a deferred
    query runs in, the graph's name for the logs, and the engine errata the program matches."""

    @property
    def graph(self) -> Any: ...

    engine_errata: list[tuple[errata.Erratum, str]]

    def on_device(self) -> AbstractContextManager[Any]: ...


class PhaseGated(Protocol):
    """What a phase-gated method needs of its owner: the phase check and the plan list."""

    plan_list: PlanList

    def _need(self, phase: Phase, method: str) -> None: ...


class PlanList:
    """The engine configs of one planning session, their filters, plans and index queries."""

    def __init__(self, session: PlanListOwner) -> None:
        # the session owning this list, weakly (it owns the list): its device context (a deferred query runs
        # there), its graph's name (logs) and the program's engine errata
        self._session = weakref.ref(session)
        self._configs: list[EngineConfig] = []  # read through .configs, which first queries the deferred modes
        self._deferred: heuristics.HeuristicsResult | None = None  # a query whose later modes wait until needed
        self.plans: dict[int, ExecutionPlan] = {}
        self.failures: dict[int, str] = {}  # config index -> why its plan did not build
        self.barred: dict[int, str] = {}  # config index -> why a filter bars it
        self.candidate: int | None = None  # the default plan
        self.heuristics_report: list[tuple] = []
        self.heuristics_ranked: list[tuple[str, list[Any]]] = []  # (mode, its EngineConfigs best first)

    def _owner(self) -> PlanListOwner:
        session = self._session()
        if session is None:
            raise UsageError("the planning session this plan list belongs to was garbage-collected")
        return session

    @property
    def configs(self) -> list[EngineConfig]:
        """Every engine config, in plan-index order: heuristics modes a query deferred are queried first (the
        build itself reads ``_configs``, the configs so far, and asks for the rest only when none of them built)."""
        if self._deferred is not None:
            self.resolve_deferred()
        return self._configs

    @configs.setter
    def configs(self, configs: list[EngineConfig]) -> None:
        self._configs, self._deferred = configs, None

    # ---- filling it: heuristics answers -----------------------------------------------------------------------------
    def resolve_deferred(self) -> bool:
        """Query the modes a query deferred (heuristics.resume) and add their configs; True if that added any."""
        res, self._deferred = self._deferred, None
        if res is None:
            return False
        session = self._owner()
        t0 = time.perf_counter()
        with session.on_device():
            added = heuristics.resume(res)
        if _log.isEnabledFor(logging.INFO):
            _log.info("graph %r: deferred heuristics in %.2f ms: %s", session.graph.name,
                      (time.perf_counter() - t0) * 1e3, "; ".join(f"{m}: {r}" for m, r in added.per_mode))
        self.take(added)
        return bool(added.configs)

    def take(self, res: heuristics.HeuristicsResult) -> None:
        """Add a query's configs (and its report, its ranking) to the graph's, barring those errata bar; a query
        with modes still pending becomes the deferred one (callers resolve the one before first)."""
        self.heuristics_report.extend(res.per_mode)
        self.heuristics_ranked.extend(res.ranked)
        self._configs.extend(res.configs)
        self._deferred = res if res.pending else None
        self.bar_erratic_engines()

    def bar_erratic_engines(self) -> None:
        """Bar the configs of engines an engine-level erratum says are wrong on this program."""
        session = self._owner()
        version = versions.runtime_version()
        for e, where in session.engine_errata:
            why = errata.engine_reason(e, where, version)
            for i, c in enumerate(self._configs):
                if i not in self.barred and c.engine_index in e.engines:
                    self.barred[i] = why
                    _log.info("graph %r: engine config %s barred: %s", session.graph.name, c.name, why)
                    _fe.deselected(i, why)

    # ---- the classic filters ----------------------------------------------------------------------------------------
    def _bar(self, predicate: Callable[[EngineConfig], bool], why: str) -> None:
        for i, c in enumerate(self.configs):
            if i not in self.barred and predicate(c):
                self.barred[i] = why
                _fe.deselected(i, why)

    def deselect_engines(self, names: list) -> None:
        names = list(names)
        self._bar(lambda c: any(c.name == n or c.name.startswith(n + "_") for n in names), "deselected by name")

    def select_numeric_notes(self, notes: list) -> None:
        want = {_note_name(n) for n in notes}
        self._bar(lambda c: not want <= {n.name for n in c.numerical_notes}, "lacks a selected numerical note")

    def deselect_numeric_notes(self, notes: list) -> None:
        bad = {_note_name(n) for n in notes}
        self._bar(lambda c: bool(bad & {n.name for n in c.numerical_notes}), "has a deselected numerical note")

    def select_behavior_notes(self, notes: list) -> None:
        want = {_note_name(n) for n in notes}
        self._bar(lambda c: not want <= {n.name for n in c.behavior_notes}, "lacks a selected behavior note")

    def deselect_behavior_notes(self, notes: list) -> None:
        bad = {_note_name(n) for n in notes}
        self._bar(lambda c: bool(bad & {n.name for n in c.behavior_notes}), "has a deselected behavior note")

    def deselect_workspace_greater_than(self, limit: int) -> None:
        self._bar(lambda c: c.workspace > int(limit), f"needs more than {limit} bytes of workspace")

    def check_support(self) -> None:
        if not self.any_unbarred():
            self.resolve_deferred()  # every config so far is filtered out: the deferred modes' may not be
        if self.any_unbarred():
            if _fe.ENABLED:
                _fe.supported(self._configs, self.barred)
            return
        raise cudnnGraphNotSupportedError(
            "No execution plans support the graph: every engine config was filtered out ("
            + "; ".join(f"{self.configs[i].name}: {w}" for i, w in self.barred.items()) + ")")

    def any_unbarred(self) -> bool:
        return any(i not in self.barred for i in range(len(self._configs)))

    # ---- index queries ----------------------------------------------------------------------------------------------
    def get_execution_plan_count(self) -> int:
        return len(self.configs)

    def index(self, index: int) -> int:
        """``index`` checked against the configs (the deferred modes' too when it is past the configs so far)."""
        i = int(index)
        if i >= len(self._configs):
            self.resolve_deferred()  # an index past the configs so far
        if not 0 <= i < len(self._configs):
            raise IndexError(f"plan index {index} out of range: this graph has {len(self.configs)} engine config(s)")
        return i

    def get_plan_name_at_index(self, index: int) -> str:
        return self.configs[self.index(index)].name

    def get_engine_and_knobs_at_index(self, index: int) -> tuple:
        """(engine id, {knob_type: value}) of config ``index``; knobs the classic enum cannot name keep their
        backend member."""
        c = self.configs[self.index(index)]
        knob_enum = enum_class("cudnnBackendKnobType_t")
        return c.engine_index, {classic_knob(knob_enum(t)): v for t, v in c.knobs}

    def get_behavior_notes_for_plan_at_index(self, index: int) -> list:
        return classic_behavior(self.configs[self.index(index)].behavior_notes)

    def get_numerical_notes_for_plan_at_index(self, index: int) -> list:
        return list(self.configs[self.index(index)].numerical_notes)

    def plan_entries(self) -> list[dict[str, Any]]:
        """One dict per engine config: index, name, engine id, knobs, the heuristics mode it came from, workspace,
        and whether its plan built, failed (with the backend's reason) or was filtered out (and why)."""
        out = []
        for i, c in enumerate(self.configs):
            out.append({"index": i, "name": c.name, "engine_id": c.engine_index, "knobs": dict(c.knobs),
                        "source": c.source, "workspace": c.workspace, "built": i in self.plans,
                        "failure": self.failures.get(i), "barred": self.barred.get(i), "default": i == self.candidate})
        return out

    def built(self, index: int) -> ExecutionPlan:
        """The built plan ``index`` (UsageError: it did not build, or was not built)."""
        i = self.index(index)
        if i not in self.plans:
            raise UsageError(f"Plan index {i} did not build" + (f": {self.failures[i]}" if i in self.failures else
                                                                   " (call build_plan_at_index first)"))
        return self.plans[i]


class OnPlanList(Generic[_T]):
    """A session attribute that is its plan list's (read and written there)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, session: Any, owner: type | None = None) -> _T:
        if session is None:  # (on the class)
            return self  # type: ignore[return-value]
        return getattr(session.plan_list, self.name)

    def __set__(self, session: Any, value: _T) -> None:
        setattr(session.plan_list, self.name, value)


def gated(phase: Phase, method: Callable[..., _T]) -> Callable[..., _T]:
    """The plan list's ``method`` as a session method of the same name and signature: ``PhaseError`` before
    ``phase``, then the plan list's answer."""
    name = method.__name__

    @functools.wraps(method)
    def gated(self: PhaseGated, *args: Any, **kwargs: Any) -> _T:
        self._need(phase, name)
        return getattr(self.plan_list, name)(*args, **kwargs)

    return gated


class knob:
    """An engine knob's range: the classic ``cudnn.knob`` (what ``get_knobs_for_engine`` returns), with read-only
    ``type``, ``max_value``, ``min_value`` and ``stride`` and a JSON ``repr``."""

    __slots__ = ("_type", "_max_value", "_min_value", "_stride")
    _type: Any
    _max_value: Any
    _min_value: Any
    _stride: Any

    def __init__(self, knob_type: Any = enums.knob_type.NOT_SET, max_value: Any = None, min_value: Any = None,
                 stride: Any = None) -> None:
        for slot, value in (("_type", knob_type), ("_max_value", max_value), ("_min_value", min_value),
                            ("_stride", stride)):
            object.__setattr__(self, slot, value)

    type = property(lambda self: self._type)
    max_value = property(lambda self: self._max_value)
    min_value = property(lambda self: self._min_value)
    stride = property(lambda self: self._stride)

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError(f"knob.{attr} is read-only")

    def __repr__(self) -> str:
        return json.dumps({"type": str(self._type), "max_value": self._max_value, "min_value": self._min_value,
                           "stride": self._stride})


def knobs_of(engine: Any) -> list[knob]:
    """The knob ranges of an ENGINE descriptor, as the classic ``get_knobs_for_engine`` returns them."""
    out = []
    for info in engine.get(attr.ENGINE_KNOB_INFO, kind=desc.KNOB_INFO_DESCRIPTOR, count=64):
        out.append(knob(classic_knob(info.get(attr.KNOB_INFO_TYPE)),
                        int(info.get(attr.KNOB_INFO_MAXIMUM_VALUE)),
                        int(info.get(attr.KNOB_INFO_MINIMUM_VALUE)),
                        int(info.get(attr.KNOB_INFO_STRIDE))))
    return out


def _note_name(note: Any) -> str:
    """Backend C name of a classic numerical/behavior note (or of a backend member / C name)."""
    if isinstance(note, str):
        return note
    if isinstance(note, enums.numerical_note):
        return enums.to_backend_numerical_note(note)
    if isinstance(note, enums.behavior_note):
        return enums.to_backend_behavior_note(note)
    return note.name


def knob_value(knob: Any) -> int:
    """Backend knob type value of a classic knob_type, a backend member or an int."""
    if isinstance(knob, enums.knob_type):
        return int(enum_class("cudnnBackendKnobType_t")[enums.to_backend_knob_type(knob)])
    return int(knob)


def classic_behavior(notes: list) -> list:
    return [enums.behavior_note_from_backend(n.name) for n in notes]


def classic_knob(backend_member: Any) -> Any:
    try:
        return enums.knob_type_from_backend(backend_member.name)
    except (KeyError, ValueError):  # a knob the classic enum cannot name (SWAP_AB, TMA knobs): the backend member
        return backend_member

