"""What the ``pygraph`` mixins (``routing.py``, ``executing.py``, ``serialization.py``) read of the graph they are
mixed into, declared once: the attributes and methods ``pygraph`` and its ``Graph`` base define, and its properties.
Annotations only (no values): for readers and the type checker; at run time each is the pygraph's own."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engines.base import BaseEngine, CompiledPlan, ExecutionContext, PlanConfig
    from ..ir import Tensor
    from ..plans.phase import Phase, SessionOptions
    from ..plans.session import PlanningSession


class GraphState:
    """The pygraph state and methods its mixins use (see the module's docstring)."""

    # state (made by pygraph.__init__ and Graph.__init__)
    _handle: Any
    _nodes: list
    _session: PlanningSession | None
    _is_validated: bool
    _engines: list[BaseEngine]
    _router: Any
    _plans: list[PlanConfig]
    _plan_index: int
    _compiled: dict[int, CompiledPlan]
    _data_bindings: dict[int, Any]
    _by_uid: dict[int, Tensor]
    # methods of pygraph and its other mixins
    create_execution_plans: Callable[..., Any]
    check_support: Callable[[], None]
    build_plans: Callable[..., Any]
    select_plan: Callable[[int], Any]
    find_tensor: Callable[[str], Tensor | None]
    inspect: Callable[[], dict[str, Any]]
    drop_fast_path: Callable[[], None]
    _drop_session: Callable[[], None]
    _freeze: Callable[[], None]
    _at: Callable[[Phase], PlanningSession]
    _compile: Callable[[ExecutionContext | None], CompiledPlan]
    _require_planned: Callable[[str], None]
    _use_fast_execute: Callable[[Any], None]
    _session_options: Callable[[Any], SessionOptions]

    if TYPE_CHECKING:  # pygraph's properties
        @property
        def _planning_done(self) -> bool: ...

        @property
        def _is_built(self) -> bool: ...

        @property
        def _fast_execute(self) -> Any: ...

        @property
        def selected_engine(self) -> BaseEngine | None: ...
