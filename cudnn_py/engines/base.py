"""The contract between the graph and a python execution engine.

Life cycle of a python plan (driven by pygraph):
  1. create_execution_plans: the Router asks each registered engine `check_support(graph)`; an engine that does
     not raise contributes `plan_configs(graph)` (default: one PlanConfig) to the ranked plan list.
  2. build_plans: `build_plan(graph, config, ctx)` compiles once and returns a CompiledPlan, cached on the graph.
  3. execute: `CompiledPlan.execute(graph, buffers, ctx)` with buffers keyed by tensor uid; outputs are written
     in place into the caller's buffers.
The graph is frozen from step 1 on, so an engine may cache anything it derives from it.
"""
from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import cudnnGraphNotSupportedError
from .engine_ids import BACKEND_HEURISTIC_ENGINE_ID


@dataclass(frozen=True)
class PlanConfig:
    """One entry of the routed plan list."""

    engine_id: int
    name: str = ""
    knobs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_backend(self) -> bool:
        return self.engine_id == BACKEND_HEURISTIC_ENGINE_ID


BACKEND_PLAN = PlanConfig(BACKEND_HEURISTIC_ENGINE_ID, "cudnn")


@dataclass(frozen=True)
class EngineIdentity:
    """What a python plan *is*, stably across processes: its engine id (from the fixed blocks of
    ``engine_ids.py``), the engine's version (for a runtime-compiled engine a hash of its kernel source, so it
    changes whenever the kernel does) and the public knobs of its config. ``explain()``, the logs and (later) the
    plan caches and serialization key on it; two plans of one identity compute the same thing the same way."""

    engine_id: int
    name: str
    version: str = ""
    knobs: tuple[tuple[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"engine_id": self.engine_id, "name": self.name, "version": self.version, "knobs": dict(self.knobs)}

    def __str__(self) -> str:
        knobs = ",".join(f"{k}={v}" for k, v in self.knobs)
        return f"{self.name}#{self.engine_id}@{self.version or '-'}" + (f"[{knobs}]" if knobs else "")


class ExecutionContext:
    """What a plan may need from the caller at build or execute time.

    `stream` is resolved lazily (via `stream_resolver`, e.g. cudnnGetStream on the handle): most python engines
    never ask, and the query is a library call. None means "the engine picks", e.g. torch's current stream."""

    def __init__(self, handle: Any = None, stream: Any = None, workspace: Any = None,
                 override_uids: Sequence[int] | None = None,
                 override_shapes: Sequence[Sequence[int]] | None = None,
                 override_strides: Sequence[Sequence[int]] | None = None,
                 stream_resolver: Callable[[], Any] | None = None) -> None:
        self.handle = handle
        self.workspace = workspace
        self.override_uids = override_uids
        self.override_shapes = override_shapes
        self.override_strides = override_strides
        self._stream = stream
        self._resolver = stream_resolver if stream is None else None

    @property
    def stream(self) -> Any:
        if self._resolver is not None:
            self._stream, self._resolver = self._resolver(), None
        return self._stream

    def __repr__(self) -> str:
        return f"ExecutionContext(handle={self.handle!r}, workspace={self.workspace!r})"


class CompiledPlan(abc.ABC):
    """A built python plan. Subclasses implement `execute`; the rest has sensible defaults."""

    engine_id: int = 0
    name: str = ""
    workspace_size: int = 0
    behavior_notes: Sequence[Any] = ()
    identity: EngineIdentity | None = None  # set by engines with a stable identity (runtime-compiled ones)
    # The uids of the buffers a device kernel of the plan dereferences: the facade checks each of them at every
    # execute as it checks a cuDNN plan's operands (shape, strides, dtype, size, alignment, device memory, the
    # device), before execute() sees them. Empty: the plan checks what it reads itself (the reference engine).
    device_operands: tuple[int, ...] = ()
    operand_checks: Any = None  # the facade's OperandSlots of device_operands, made at the first execute

    @abc.abstractmethod
    def execute(self, graph: Any, buffers: dict[int, Any], ctx: ExecutionContext) -> None:
        """Run the graph. `buffers` maps uid -> caller data (framework tensors, arrays, host scalars)."""

    def pointer_launcher(self, slot_uids: Sequence[int]) -> Any:
        """For a plan that reads nothing but :attr:`device_operands` (checked by the facade) and scalars it carries:
        ``launch(pointers, stream)``, the plan's execute from the device pointers of ``slot_uids`` (in that order,
        already checked) on the ``cudaStream_t`` ``stream``. The facade's bound execute calls it after the first
        execute, skipping the general path's variant pack and context. None (the default): every execute takes
        the general path."""
        return None

    def get_workspace_size(self) -> int:
        return self.workspace_size


class BaseEngine(abc.ABC):
    """A python execution engine. `engine_id` must be a stable int >= PYTHON_ENGINE_ID_BASE."""

    engine_id: int = -1
    name: str = ""
    version: str = ""  # bumped whenever what the engine computes or how changes (see EngineIdentity)

    def identity(self, config: PlanConfig) -> EngineIdentity:
        return EngineIdentity(self.engine_id, self.name or type(self).__name__, self.version,
                              tuple(sorted(config.knobs.items())))

    @abc.abstractmethod
    def check_support(self, graph: Any) -> None:
        """Raise cudnnGraphNotSupportedError (with the reason) if this engine cannot run the graph."""

    def plan_configs(self, graph: Any) -> list[PlanConfig]:
        return [PlanConfig(self.engine_id, self.name or type(self).__name__)]

    @abc.abstractmethod
    def build_plan(self, graph: Any, config: PlanConfig, ctx: ExecutionContext) -> CompiledPlan:
        """Compile the graph for `config`."""

    def supports(self, graph: Any) -> bool:
        try:
            self.check_support(graph)
        except cudnnGraphNotSupportedError:
            return False
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(engine_id={self.engine_id})"
