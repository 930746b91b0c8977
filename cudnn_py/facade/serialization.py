"""``pygraph``'s ``serialize`` / ``deserialize``: the built default plan as a blob (``plans/serialize.py``), and a
fresh graph loaded from one, ready to execute.

Two kinds of plan serialize: cuDNN's (its execution plan JSON, loaded back into the same cuDNN), and plans of
cudnn_py's runtime-compiled engines (the engine's identity and its record of the problem: the graph is rebuilt with
the builders, matched again and its plan built, the kernel compiled or found in the kernel files; the engine's
version, a hash of its kernel source, must be this package's). The float64 reference and other python engines'
plans do not serialize.

A mixin of :class:`~cudnn_py.facade.pygraph.pygraph` (a base class of it): the attributes and steps it uses are
``pygraph``'s.
"""
from __future__ import annotations

from typing import Any

from ..engines.base import BACKEND_PLAN, BaseEngine
from ..enums import heur_mode
from ..errors import InvalidTypeError, InvalidValueError, NotImplementedOptionError, PhaseError, UsageError
from ..plans import serialize as plan_serial
from ..plans.phase import Phase
from .graph_state import GraphState
from .serial import one_at_a_time


class Serialization(GraphState):
    """``serialize`` and ``deserialize`` of a ``pygraph`` (see the module's docstring)."""

    @one_at_a_time
    def serialize(self, *, as_bytes: bool = False, include_kernels: bool = True) -> Any:
        """The built default plan with everything needed to execute it again (``plans/serialize.py``): cuDNN's, or
        one of cudnn_py's runtime-compiled engines' (docs/engines.md); a list of byte values, as the classic API
        returns, or ``bytes`` with ``as_bytes=True``."""
        if not include_kernels:
            raise NotImplementedOptionError("serialize(include_kernels=False) is not implemented yet in cudnn_py")
        self._require_planned("serialize")
        if self.selected_engine is not None:
            blob = self._serialize_engine_plan(self.selected_engine)
        else:
            if not self._is_built:
                raise PhaseError("call build_plans() before serialize()")
            blob = self._at(Phase.EXECUTABLE).serialize(self.inspect())
        return blob if as_bytes else list(blob)

    def _serialize_engine_plan(self, engine: BaseEngine) -> bytes:
        record_of = getattr(engine, "plan_record", None)
        if record_of is None:
            raise UsageError(f"serialize(): the selected plan runs on the python engine {engine.name!r}; only "
                             "cuDNN's plans and those of cudnn_py's runtime-compiled engines serialize")
        plan = self._compiled.get(self._plan_index)
        if plan is None:
            raise PhaseError("call build_plans() before serialize()")
        record = record_of(plan)
        if record is None or plan.identity is None:
            raise UsageError(f"serialize(): the plans of engine {engine.name!r} do not serialize")
        tensors = [t for t in self._by_uid.values() if not t.is_virtual]
        return plan_serial.dump_engine(plan.identity.as_dict(), record, tensors, self.inspect())

    @one_at_a_time
    def deserialize(self, *args: Any, **kwargs: Any) -> None:
        """Load a serialized plan into this (empty) graph, classic ``deserialize(blob)`` or ``(handle, blob)``; the
        graph can execute at once, with operands keyed by uid or name."""
        if kwargs or not 1 <= len(args) <= 2:
            raise InvalidTypeError("deserialize() takes (blob) or (handle, blob)")
        if self._nodes or self._planning_done:
            raise UsageError("deserialize() needs a fresh pygraph (this one already has nodes or plans)")
        handle = args[0] if len(args) == 2 else self._handle
        doc = plan_serial.parse(args[-1])
        self._handle = handle
        if "engine" in doc:  # a plan of one of cudnn_py's engines: no cuDNN plan, no handle needed
            self._deserialize_engine_plan(plan_serial.load_engine(doc))
            return
        load_with = handle
        if load_with is None:  # this thread's default handle; like a graph built without a handle it executes on
            # the framework's current stream (not on whatever stream the default handle was bound to last)
            from ..backend.handle import default_handle

            load_with = default_handle()
        from ..plans.session import PlanningSession

        session = PlanningSession.deserialized(self, self._session_options(handle), doc, int(load_with),
                                               self.drop_fast_path)
        self._freeze()
        self._session = session
        self._is_validated = True
        self._plans, self._plan_index = [BACKEND_PLAN], 0  # planned, and built (the session is EXECUTABLE)

    def _deserialize_engine_plan(self, doc: plan_serial.EngineDoc) -> None:
        """The graph of a serialized engine plan rebuilt into this one, planned on that engine alone and built."""
        from ..engines import builtin

        engine = next((e for e in builtin.runtime_engines() if e.engine_id == doc.engine_id), None)
        if engine is None:
            raise InvalidValueError(f"serialized plan: engine {doc.engine_id} ({doc.name!r}) is not one of this "
                                    "cudnn_py's engines")
        if doc.version != engine.version:
            raise InvalidValueError(f"serialized plan: made by engine {engine.name!r} version {doc.version}; this "
                                    f"cudnn_py's is {engine.version} (its kernel changed): build the graph and "
                                    "serialize it again")
        engine.rebuild(self, doc.record, doc.tensors)
        self.create_execution_plans([heur_mode.OPENSOURCE])
        index = next((i for i, p in enumerate(self._plans)
                      if p.engine_id == doc.engine_id and dict(p.knobs) == doc.knobs), None)
        if index is None:
            raise InvalidValueError(f"serialized plan: engine {engine.name!r} has no plan with knobs {doc.knobs}")
        self.select_plan(index)
        self.build_plans()
