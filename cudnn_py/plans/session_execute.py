"""The planning session's EXECUTABLE work: executing the default plan or a built one by index (the checked call,
then each plan's bound execute, made once), and recording the default plan into a caller's CUDA graph.

A mixin of :class:`~cudnn_py.plans.session.PlanningSession` (a base class of it): the attributes it reads are
made by ``PlanningSession.__init__``; ``plan()``, which says which plan executes, is the session's.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backend.handle import context_of
from ..cuda import context as cuda_context
from . import cuda_graph
from .execute import Executor
from .plan import ExecutionPlan


class ExecuteSteps:
    """Execute and the CUDA-graph methods of a session (see the module's docstring)."""

    executor: Executor | None
    graph_packs: dict[int, Any]
    _fast_by_plan: dict[int, Callable[..., None]]
    plan: Callable[..., ExecutionPlan]

    def fast_path(self, classic: Callable[..., None] | None = None) -> Callable[..., None]:
        """``execute`` for the default plan with every indirection bound (``Executor.fast``). With ``classic``
        (the classic ``pygraph.execute``, for the keywords the bound execute does not handle) a new one, which the
        graph installs as its ``execute``; without, the one ``execute_plan_at_index`` shares."""
        plan = self.plan()
        if classic is None:
            return self._fast(plan)
        assert self.executor is not None
        return self.executor.fast(plan, classic)

    def _fast(self, plan: ExecutionPlan) -> Callable[..., None]:
        """``plan``'s bound execute, made once per plan (the default plan's and ``execute_plan_at_index``'s)."""
        fast = self._fast_by_plan.get(plan.id)
        if fast is None:
            assert self.executor is not None
            fast = self._fast_by_plan[plan.id] = self.executor.fast(plan)
        return fast

    def execute(self, variant_pack: dict, workspace: Any = None, handle: Any = None) -> None:
        assert self.executor is not None
        self.executor.execute(self.plan(), variant_pack, workspace, handle)

    def execute_plan_at_index(self, variant_pack: dict, workspace: Any, index: int, handle: Any = None) -> None:
        """Plan ``index``'s execute: the checked call first, then that plan's bound fast path (``Executor.fast``),
        as ``execute`` does for the default plan (autotuning loops call each plan many times in a row)."""
        assert self.executor is not None
        plan = self.plan(index)
        fast = self._fast_by_plan.get(plan.id)
        if fast is not None:
            return fast(variant_pack, workspace, handle)
        self.executor.execute(plan, variant_pack, workspace, handle)
        self._fast(plan)
        return None

    # ---- CUDA graphs (plans/cuda_graph.py) ---------------------------------------------------------------------
    def populate_cuda_graph(self, handle: int, variant_pack: dict, workspace: Any, graph: Any) -> None:
        assert self.executor is not None
        with cuda_context.bound(context_of(handle)):
            vp = cuda_graph.populate(handle, self.plan(), self.executor, variant_pack, workspace, graph)
        self.graph_packs[cuda_graph.graph_handle(graph)] = vp  # kept alive as long as the graph may run

    def update_cuda_graph(self, handle: int, variant_pack: dict, workspace: Any, graph: Any) -> None:
        assert self.executor is not None
        with cuda_context.bound(context_of(handle)):
            vp = cuda_graph.update(handle, self.plan(), self.executor, variant_pack, workspace, graph)
        self.graph_packs[cuda_graph.graph_handle(graph)] = vp
