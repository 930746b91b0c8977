"""``pygraph``'s engines and routing: the python engines registered on a graph, the router, and the routed plan
list (python engines and at most one cuDNN entry) with its selection.

A mixin of :class:`~cudnn_py.facade.pygraph.pygraph` (a base class of it): the attributes it reads are made by
``pygraph.__init__``, and ``create_execution_plans`` (the routing itself) stays there, with the other steps that
move the graph between phases. Two plan index spaces are kept apart on purpose: the routed plans (``plans``,
``select_plan``) and the cuDNN plans behind the cuDNN entry (the classic ``get_execution_plan_count`` /
``*_at_index`` API, answered by the planning session).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engines.base import BaseEngine, PlanConfig
from ..engines.engine_ids import is_backend_sentinel, is_python_engine
from ..errors import InvalidTypeError, InvalidValueError, PhaseError, UsageError, cudnnGraphNotSupportedError
from .graph_state import GraphState
from .serial import one_at_a_time

if TYPE_CHECKING:
    # The steps that return the graph say so with its class's name, as the official signatures (and docs/api.md)
    # show them; this module sits below that class and cannot import it, so to the type checker it is Any.
    pygraph = Any


class Routing(GraphState):
    """The engines and the routed plans of a ``pygraph`` (see the module's docstring)."""

    @one_at_a_time
    def register_backend(self, engine: BaseEngine) -> pygraph:
        """Add a python engine as a candidate; it joins the plan list at create_execution_plans() if it
        accepts the graph."""
        eid = getattr(engine, "engine_id", None)
        if not is_python_engine(eid):
            raise InvalidValueError(f"engine {engine!r} must declare an int engine_id >= PYTHON_ENGINE_ID_BASE, got "
                                    f"{eid!r}")
        if any(e.engine_id == eid for e in self._engines):
            raise InvalidValueError(f"engine_id {eid} is already registered on this graph")
        if self._planning_done:
            raise UsageError("cannot register an engine after create_execution_plans(); build a new graph")
        self._engines.append(engine)
        self._drop_session()  # a python-engine graph is lowered only if the cuDNN plan is used
        return self

    @one_at_a_time
    def set_router(self, router: Any) -> pygraph:
        if self._planning_done:
            raise UsageError("cannot set a router after create_execution_plans(); build a new graph")
        self._router = router
        return self

    @property
    def backends(self) -> list[BaseEngine]:
        return list(self._engines)

    @property
    def plans(self) -> list[PlanConfig]:
        """The routed plan list (python engines and at most one cuDNN entry); select with select_plan()."""
        return list(self._plans)

    @property
    def selected_engine(self) -> BaseEngine | None:
        """The python engine of the selected plan, or None for the cuDNN plan / before planning."""
        if not self._plans:
            return None
        eid = self._plans[self._plan_index].engine_id
        return next((e for e in self._engines if e.engine_id == eid), None)

    @one_at_a_time
    def select_plan(self, index: int) -> pygraph:
        self._require_planned("select_plan")
        if not 0 <= index < len(self._plans):
            raise IndexError(f"plan index {index} is out of range for {len(self._plans)} routed plan(s)")
        self._plan_index = index
        self.drop_fast_path()
        return self

    def _check_routed(self, plans: list[PlanConfig]) -> None:
        """A custom router must not smuggle in unregistered engines or several cuDNN entries."""
        if not plans:
            raise cudnnGraphNotSupportedError("no engine supports the graph (the router returned no plans)")
        registered = {e.engine_id for e in self._engines}
        backend_entries = 0
        for p in plans:
            if not isinstance(p, PlanConfig):
                raise InvalidTypeError(f"router returned {p!r}; expected PlanConfig entries")
            if is_backend_sentinel(p.engine_id):
                backend_entries += 1
            elif not is_python_engine(p.engine_id) or p.engine_id not in registered:
                raise InvalidValueError(f"router returned a plan for unknown engine_id {p.engine_id}")
        if backend_entries > 1:
            raise InvalidValueError("router returned more than one cuDNN entry")

    def _require_planned(self, what: str) -> None:
        if not self._planning_done:
            raise PhaseError(f"call create_execution_plans() before {what}()")
