"""``pygraph``'s ``serialize`` / ``deserialize``: the built default cuDNN plan as a blob (``plans/serialize.py``),
and a fresh graph loaded from one, ready to execute.

A mixin of :class:`~cudnn_py.facade.pygraph.pygraph` (a base class of it): the attributes and steps it uses are
``pygraph``'s.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..engines.base import BACKEND_PLAN, BaseEngine, PlanConfig
from ..errors import InvalidTypeError, NotImplementedOptionError, PhaseError, UsageError
from ..plans.phase import Phase, SessionOptions
from .serial import one_at_a_time

if TYPE_CHECKING:
    from ..plans.session import PlanningSession


class Serialization:
    """``serialize`` and ``deserialize`` of a ``pygraph`` (see the module's docstring)."""

    _handle: Any
    _nodes: list
    _session: PlanningSession | None
    _is_validated: bool
    _plans: list[PlanConfig]
    _plan_index: int
    drop_fast_path: Callable[[], None]
    inspect: Callable[[], dict[str, Any]]
    _freeze: Callable[[], None]
    _at: Callable[[Phase], PlanningSession]
    _require_planned: Callable[[str], None]
    _session_options: Callable[[Any], SessionOptions]

    if TYPE_CHECKING:  # pygraph's properties
        @property
        def _planning_done(self) -> bool: ...

        @property
        def _is_built(self) -> bool: ...

        @property
        def selected_engine(self) -> BaseEngine | None: ...

    @one_at_a_time
    def serialize(self, *, as_bytes: bool = False, include_kernels: bool = True) -> Any:
        """The built default cuDNN plan with everything needed to execute it again (``plans/serialize.py``): a
        list of byte values, as the classic API returns, or ``bytes`` with ``as_bytes=True``."""
        if not include_kernels:
            raise NotImplementedOptionError("serialize(include_kernels=False) is not implemented yet in cudnn_py")
        self._require_planned("serialize")
        if self.selected_engine is not None:
            raise UsageError(f"serialize(): the selected plan runs on the python engine {self.selected_engine!r}; "
                               "only cuDNN plans serialize")
        if not self._is_built:
            raise PhaseError("call build_plans() before serialize()")
        blob = self._at(Phase.EXECUTABLE).serialize(self.inspect())
        return blob if as_bytes else list(blob)

    @one_at_a_time
    def deserialize(self, *args: Any, **kwargs: Any) -> None:
        """Load a serialized plan into this (empty) graph, classic ``deserialize(blob)`` or ``(handle, blob)``; the
        graph can execute at once, with operands keyed by uid or name."""
        if kwargs or not 1 <= len(args) <= 2:
            raise InvalidTypeError("deserialize() takes (blob) or (handle, blob)")
        if self._nodes or self._planning_done:
            raise UsageError("deserialize() needs a fresh pygraph (this one already has nodes or plans)")
        handle = args[0] if len(args) == 2 else self._handle
        load_with = handle
        if load_with is None:  # this thread's default handle; like a graph built without a handle it executes on
            # the framework's current stream (not on whatever stream the default handle was bound to last)
            from ..backend.handle import default_handle

            load_with = default_handle()
        self._handle = handle
        from ..plans.session import PlanningSession

        session = PlanningSession.deserialized(self, self._session_options(handle), args[-1], int(load_with),
                                               self.drop_fast_path)
        self._freeze()
        self._session = session
        self._is_validated = True
        self._plans, self._plan_index = [BACKEND_PLAN], 0  # planned, and built (the session is EXECUTABLE)
