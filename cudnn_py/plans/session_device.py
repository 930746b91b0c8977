"""The planning session's device: the handle's device and CUDA context it plans on, the device gates and the errata of
some GPUs, the operation graph with a handle and the classic queries it answers (engine count, knobs), and the
deviceless targets (device properties, kernel cache) given to cuDNN's planning calls.

A mixin of :class:`~cudnn_py.plans.session.PlanningSession` (a base class of it): the attributes it reads and
writes are made by ``PlanningSession.__init__``; the phase transition that calls it (``build_operation_graph``)
stays in ``session.py``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backend import Descriptor, versions
from ..backend.handle import placement_of
from ..cuda import context as cuda_context
from ..ir.program import Program
from ..lowering import LoweredGraph
from . import device_gates, errata
from .engine_config import make_engine
from .execute import Executor
from .phase import Phase, SessionOptions
from .plan_list import knobs_of


class DeviceSteps:
    """The device a session plans on, and what is asked of it (see the module's docstring)."""

    options: SessionOptions
    program: Program | None
    lowered: LoweredGraph | None
    executor: Executor | None
    device: int | None
    context: int | None
    _need: Callable[[Phase, str], None]

    def _check_errata_of_some_gpus(self) -> None:
        """The errata of some GPUs only: the GPU (or the sm_version planned for) is read when one matches."""
        assert self.program is not None
        version = versions.runtime_version()
        if errata.on_device(self.program, version):
            cc = self.options.sm_version
            if cc is None:
                cc = device_gates.compute_capability(device_gates.device_of_handle(self.options.handle))
            errata.check_on_device(self.program, version, cc)

    def _device_properties(self) -> Descriptor | None:
        dp = self.options.device_properties
        return dp.descriptor if dp is not None else None

    def _kernel_cache(self) -> Descriptor | None:
        kc = self.options.kernel_cache
        return kc.descriptor if kc is not None else None

    # The keyword arguments of heuristics.query / EngineConfig.explicit and of ExecutionPlan.build, given only when
    # set: the plain calls (and the test doubles written for them) stay as they were.
    def _for_device(self) -> dict[str, Descriptor]:
        dp = self._device_properties()
        return {"device_properties": dp} if dp is not None else {}

    def _with_cache(self) -> dict[str, Descriptor]:
        kc = self._kernel_cache()
        return {"kernel_cache": kc} if kc is not None else {}

    def _bind_device(self, handle: Any) -> None:
        self.device, self.context = placement_of(handle)  # one read of the handle registry
        if self.executor is not None:
            self.executor.set_device(self.device)

    def on_device(self) -> cuda_context.bound:
        """``with session.on_device():`` runs cuDNN calls with the planning handle's context current."""
        return cuda_context.bound(self.context)

    @property
    def operation_graph(self) -> Descriptor:
        self._need(Phase.OPERATION_GRAPH, "operation_graph")
        assert self.lowered is not None and self.lowered.operation_graph is not None
        return self.lowered.operation_graph

    def get_engine_count(self) -> int:
        self._need(Phase.OPERATION_GRAPH, "get_engine_count")
        assert self.lowered is not None
        return self.lowered.engine_count()

    def get_knobs_for_engine(self, engine_id: int) -> list:
        self._need(Phase.OPERATION_GRAPH, "get_knobs_for_engine")
        with self.on_device():
            engine = make_engine(self.operation_graph, int(engine_id), self._device_properties())
        return knobs_of(engine)
