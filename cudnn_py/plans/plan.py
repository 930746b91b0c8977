"""Execution plans: finalize an EXECUTION_PLAN from an engine config — where support is
really decided and the kernel is compiled — and read its workspace size back."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from .._generated.names import attr, desc
from ..backend import Descriptor
from ..errors import UsageError
from .engine_config import EngineConfig


@dataclass
class ExecutionPlan:
    plan: Descriptor
    config: EngineConfig
    workspace: int
    ptr: ctypes.c_void_p = field(init=False, repr=False)  # converted once for the execute hot path
    id: int = field(init=False, repr=False)
    # how it was made: "finalized" from its engine config, "deserialized" (from_json), or plan_cache.REBUILT
    source: str = field(default="finalized", init=False)

    def __post_init__(self) -> None:
        self.ptr = ctypes.c_void_p(self.plan.ptr)
        self.id = self.plan.id

    @property
    def name(self) -> str:
        return self.config.name

    @classmethod
    def build(cls, config: EngineConfig, kernel_cache: Descriptor | None = None) -> ExecutionPlan:
        """Finalize a plan for ``config`` (no handle: the frontend sets none either). ``kernel_cache``: a finalized
        KERNEL_CACHE the plan takes its kernel from, or adds it to (``EXECUTION_PLAN_KERNEL_CACHE``)."""
        plan = Descriptor(desc.EXECUTION_PLAN_DESCRIPTOR)
        plan.set(attr.EXECUTION_PLAN_ENGINE_CONFIG, config.cfg)
        if kernel_cache is not None:
            plan.set(attr.EXECUTION_PLAN_KERNEL_CACHE, kernel_cache)
        plan.finalize()
        ws = int(plan.get(attr.EXECUTION_PLAN_WORKSPACE_SIZE))
        if ws < 0:
            raise UsageError(f"plan {config.name}: cuDNN reported a negative workspace size ({ws})")
        return cls(plan, config, ws)

    @classmethod
    def from_json(cls, text: str, handle: int, json_checked: bool = False) -> ExecutionPlan:
        """Rebuild a plan from its JSON representation (set JSON_REPRESENTATION and HANDLE,
        finalize); the engine config is read back from the plan. ``json_checked``: the caller checked ``text``
        with ``json_check.check_execution_plan`` already, or cuDNN wrote it in this process (``Descriptor.set``)."""
        plan = Descriptor(desc.EXECUTION_PLAN_DESCRIPTOR)
        plan.set(attr.EXECUTION_PLAN_JSON_REPRESENTATION, text, json_checked=json_checked)
        plan.set(attr.EXECUTION_PLAN_HANDLE, int(handle))
        plan.finalize()
        cfg = plan.get(attr.EXECUTION_PLAN_ENGINE_CONFIG)
        ws = int(plan.get(attr.EXECUTION_PLAN_WORKSPACE_SIZE))
        built = cls(plan, EngineConfig.from_descriptor(cfg, "deserialized"), ws)
        built.source = "deserialized"
        return built

    def to_json(self) -> str:
        """The plan's ``EXECUTION_PLAN_JSON_REPRESENTATION`` (serialisable, engine and knobs)."""
        return self.plan.get(attr.EXECUTION_PLAN_JSON_REPRESENTATION)
