"""``pygraph``'s execution: ``execute`` (the first call builds what is missing, then installs the bound execute),
``execute_plan_at_index``, the variant pack of a python engine, and the session the CUDA-graph methods record.

A mixin of :class:`~cudnn_py.facade.pygraph.pygraph` (a base class of it): the attributes and the steps it calls
(``create_execution_plans``, ``build_plans``, ``_at``, ...) are ``pygraph``'s. The bound execute itself, which a
built cuDNN plan installs as the graph's ``execute`` (one Python frame per call), is ``plans/execute_fast.py``'s.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..cuda import context as cuda_context
from ..engines.base import ExecutionContext
from ..errors import InvalidTypeError, InvalidValueError, PhaseError, UsageError
from ..interop import stream_ptr
from ..ir import Tensor
from ..ir.tensor import declared_otherwise
from ..plans.execute_operands import OperandSlots
from ..plans.phase import Phase
from . import autotune
from .graph_state import GraphState
from .options import no_overrides
from .serial import one_at_a_time

if TYPE_CHECKING:
    from ..plans.session import PlanningSession


def _classic_execute(graph: Any) -> Callable[..., None]:
    """``pygraph.execute`` of ``graph``, held weakly: what the bound execute a graph installs as its ``execute``
    calls for the classic keywords it does not handle itself."""
    ref = weakref.ref(graph)

    def classic(*args: Any) -> None:
        g = ref()
        if g is None:
            raise UsageError("execute(): the graph this execute belonged to was destroyed")
        return type(g).execute(g, *args)  # the class's method, not the bound execute shadowing it on the instance

    return classic


class Executing(GraphState):
    """Execution of a ``pygraph`` (see the module's docstring)."""

    def execute(self, tensor_dict: Any, workspace: Any = None, handle: Any = None, override_uids: Any = None,
                override_shapes: Any = None, override_strides: Any = None, tensor_uids: Any = None) -> None:
        """Run the selected plan, building whatever is missing first. Keys: Tensor, uid or name (None keys are
        skipped); or pass buffers as a list with `tensor_uids`. Outputs are written into the given buffers."""
        fast = self._fast_execute
        if fast is not None and tensor_uids is None and override_uids is None and override_shapes is None \
                and override_strides is None:
            return fast(tensor_dict, workspace, handle)  # built cuDNN plan: keys resolved and cached there
        return self._execute_general(tensor_dict, workspace, handle, override_uids, override_shapes, override_strides,
                                     tensor_uids)

    @one_at_a_time
    def _execute_general(self, tensor_dict: Any, workspace: Any, handle: Any, override_uids: Any,
                         override_shapes: Any, override_strides: Any, tensor_uids: Any) -> None:
        """execute() before the bound fast path is installed (the first call; with tensor_uids or overrides, every
        call): builds what is missing, one thread at a time."""
        no_overrides("execute", override_uids, override_shapes, override_strides)
        if not self._planning_done:
            self.create_execution_plans()
        autotune.run_pending(self, tensor_dict, workspace, handle, tensor_uids)  # (after build_plans(ALL), once)
        engine = self.selected_engine
        if engine is not None:
            buffers = self._variant_pack(tensor_dict, tensor_uids)
            ctx = self._exec_context(handle, workspace)
            plan = self._compile(ctx)
            if plan.device_operands:
                placement = _check_device_operands(plan, buffers, self)
                if placement is not None and handle is None and self._handle is None:
                    # no handle: the stream of the first framework operand, as for a cuDNN plan (and the bound
                    # execute below)
                    ctx = ExecutionContext(handle=None, workspace=workspace, stream_resolver=placement.current_stream)
            plan.execute(self, buffers, ctx)
            if self._fast_execute is None and handle is None and self._handle is None and tensor_uids is None:
                fast = _python_plan_fast_execute(self, plan)
                if fast is not None:  # from now on skip this path's variant pack, context and dispatch
                    self._use_fast_execute(fast)
            return None
        if not self._is_built:
            self.check_support()
            self.build_plans()
        session = self._at(Phase.EXECUTABLE)
        pack = dict(zip(tensor_uids, tensor_dict)) if tensor_uids is not None else tensor_dict  # (keys: the executor's)
        session.execute(pack, workspace, handle)
        if self._fast_execute is None:  # (a call with tensor_uids comes here every time: bind once, keep its state)
            self._use_fast_execute(session.fast_path(_classic_execute(self)))  # from now on skip this dispatch
        return None

    def _trusted_execute(self, checked_keys: Any, trusted_keys: Any) -> Any:
        """For cudnn_py's own callers that guarantee some of their operands (the torch provider, for the outputs it
        allocates from the graph's layouts): the default cuDNN plan's bound execute taking the operands of
        ``checked_keys`` (re-checked as every call's are) then of ``trusted_keys`` (not re-checked) as one sequence
        (``Executor.fast_trusted``). None until execute has bound the plan (its first call checks every operand in
        full), on a python engine's plan, or where the executor cannot offer it. Dropped with the bound execute
        when the plan changes: a caller keeps using it only while ``execute`` is the bound execute it had then."""
        session = self._session
        if self._fast_execute is None or self.selected_engine is not None or session is None or \
                session.phase < Phase.EXECUTABLE or session.executor is None:
            return None  # (asks nothing of planning: what is not executable yet gets no split form)
        return session.executor.fast_trusted(session.plan(), tuple(checked_keys), tuple(trusted_keys))

    @one_at_a_time
    def execute_plan_at_index(self, tensor_dict: Any, workspace: Any = None, index: int = 0, handle: Any = None,
                              *args: Any, tensor_uids: Any = None, **kwargs: Any) -> None:
        """Run cuDNN plan `index` (classic index space). Trailing positionals: override uids/shapes/strides."""
        self._require_planned("execute_plan_at_index")
        names = ("override_uids", "override_shapes", "override_strides")
        given = dict(zip(names, args))
        given.update({k: kwargs.pop(k) for k in names if k in kwargs})
        if kwargs:
            raise InvalidTypeError(f"execute_plan_at_index() got unexpected keyword arguments {sorted(kwargs)}")
        no_overrides("execute_plan_at_index", *(given.get(n) for n in names))
        pack = dict(zip(tensor_uids, tensor_dict)) if tensor_uids is not None else tensor_dict
        self._at(Phase.ENGINE_CONFIGS).execute_plan_at_index(pack, workspace, index, handle)

    @one_at_a_time
    def _cuda_graph_session(self, what: str) -> PlanningSession:
        self._require_planned(what)
        if self.selected_engine is not None:
            raise UsageError(f"{what}(): the selected plan runs on a python engine; only cuDNN plans record "
                               "into CUDA graphs")
        if not self._is_built:
            raise PhaseError(f"call build_plans() before {what}()")
        return self._at(Phase.EXECUTABLE)

    def _graph_handle(self) -> int:
        if self._handle is not None:
            return int(self._handle)
        from ..backend.handle import default_handle

        # the default handle of the device the graph was planned for, not of whichever device is current now
        return int(default_handle(self._session.device if self._session is not None else None))

    def _variant_pack(self, tensor_dict: Any, tensor_uids: Any) -> dict[int, Any]:
        """uid -> buffer for python engines: data bound at build time first, the caller's buffers over it."""
        buffers = dict(self._data_bindings)
        items: Iterable = zip(tensor_uids, tensor_dict) if tensor_uids is not None else dict(tensor_dict).items()
        for key, data in items:
            if key is not None:
                buffers[self._uid_of(key)] = data
        return buffers

    def _uid_of(self, key: Any) -> int:
        if isinstance(key, Tensor):
            if key.owner is not self:  # another graph's: taken by its uid, as the executor takes it
                mine = self._by_uid.get(key.uid)
                conflict = None if mine is None else declared_otherwise(key, mine)
                if mine is None or conflict is not None:
                    why = "" if mine is None else (f": a tensor of another graph, taken by its uid for this graph's "
                                                   f"tensor {mine.name!r}, which has {conflict}")
                    raise InvalidValueError(f"variant pack key {key.name!r} (uid {key.uid}) is not a tensor of this "
                                            f"graph{why}")
            return key.uid
        if isinstance(key, int) and not isinstance(key, bool):
            if key not in self._by_uid:
                raise InvalidValueError(f"variant pack key: no tensor with uid {key}")
            return key
        if isinstance(key, str):
            t = self.find_tensor(key)
            if t is None:
                raise InvalidValueError(f"variant pack key: no tensor named {key!r}")
            return t.uid
        raise InvalidTypeError(f"variant pack keys must be tensors, uids or names, got {type(key).__name__}")

    def _exec_context(self, handle: Any, workspace: Any = None) -> ExecutionContext:
        h = handle if handle is not None else self._handle
        return ExecutionContext(handle=h, workspace=workspace, stream_resolver=lambda: _stream_of(h))


def _operand_slots(plan: Any, graph: Any) -> OperandSlots:
    """The one ``OperandSlots`` of a python plan's device operands (``plan.operand_checks``, made at its first
    execute), which the general path and the bound execute both check them with: slots for the operands, the
    graph's other tensors accepted as keys and skipped, the data bound at build time, and the device current at
    the first execute (where the plan's module was loaded)."""
    slots = plan.operand_checks
    if slots is None:
        device_operands = set(plan.device_operands)
        slots = OperandSlots(sorted(device_operands), graph._by_uid,
                             unread=[t for uid, t in graph._by_uid.items() if uid not in device_operands])
        slots.bind({uid: v for uid, v in graph._data_bindings.items() if uid in device_operands})
        slots.device = cuda_context.device_of_current()
        plan.operand_checks = slots
    return slots


def _check_device_operands(plan: Any, buffers: dict[int, Any], graph: Any) -> Any:
    """Check the buffers a python plan's device kernel dereferences (``plan.device_operands``) as a cuDNN plan's
    operands are checked (plans/execute_operands.py): in full at the first execute and whenever one differs from
    the last one checked for its tensor, else against that check. Returns the placement of the first framework
    operand (None where there is none), whose current stream a plan without a handle runs on."""
    return _operand_slots(plan, graph).checked({uid: buffers[uid] for uid in plan.device_operands if uid in buffers})[2]


def _python_plan_fast_execute(graph: Any, plan: Any) -> Callable[..., None] | None:
    """The bound execute of a python plan whose kernel reads only its device operands and scalars it carries
    (``plan.pointer_launcher``), for a graph planned without a handle (the stream is then the operands' framework's
    current one, as on the general path): the operands resolved and compared with their last full check by an
    ``OperandSlots`` (checked in full where one differs, as at the first execute), then the launch, under the graph's
    lock (the plan's launch parameters are one struct). The graph's other tensors are accepted as keys and skipped,
    as the general path skips them; a handle, overrides or ``tensor_uids`` go to the general path. None where the
    plan offers no launcher."""
    if not plan.device_operands:
        return None
    slots = _operand_slots(plan, graph)
    launch = plan.pointer_launcher(slots._uids)
    if launch is None:
        return None
    lock, checked, ref = graph._lock, slots.checked, weakref.ref(graph)  # (weakly: the graph holds run)

    def run(variant_pack: Any, workspace: Any = None, handle: Any = None, override_uids: Any = None,
            override_shapes: Any = None, override_strides: Any = None, tensor_uids: Any = None) -> None:
        if handle is not None or override_uids is not None or override_shapes is not None or \
                override_strides is not None or tensor_uids is not None or variant_pack.__class__ is not dict:
            g = ref()
            if g is None:
                raise UsageError("execute(): the graph this execute belonged to was destroyed")
            return g._execute_general(variant_pack, workspace, handle, override_uids, override_shapes,
                                      override_strides, tensor_uids)  # (not execute(): it would come back here)
        with lock:
            ptrs, _same, placement = checked(variant_pack)
            launch(ptrs, stream_ptr(placement.current_stream()) if placement is not None else 0)
        return None

    return run


def _stream_of(handle: Any) -> Any:
    """The stream set on a supplied handle (classic set_stream semantics); None when there is no handle."""
    if handle is None:
        return None
    from ..backend.handle import get_stream

    return get_stream(handle)
