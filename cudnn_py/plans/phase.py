"""The planning session's phases (``session.py``), the ``PhaseError`` of a call made too early, and the options.

    BUILT -> VALIDATED -> OPERATION_GRAPH -> ENGINE_CONFIGS -> PLANS -> EXECUTABLE
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NoReturn

from ..errors import PhaseError
from .device_properties import DeviceProperties
from .kernel_cache import KernelCache


class Phase(enum.IntEnum):
    BUILT = 0
    VALIDATED = 1
    OPERATION_GRAPH = 2
    ENGINE_CONFIGS = 3
    PLANS = 4
    EXECUTABLE = 5


# what to call to reach each phase (for the PhaseError message)
HOW = {Phase.VALIDATED: "validate()", Phase.OPERATION_GRAPH: "build_operation_graph()",
       Phase.ENGINE_CONFIGS: "create_execution_plans()", Phase.PLANS: "build_plans()",
       Phase.EXECUTABLE: "build_plans()"}


@dataclass(frozen=True)
class SessionOptions:
    """The graph-level options the cuDNN side uses."""

    handle: Any = None  # the graph's handle (classic pygraph(handle=)); None: this thread's default handle
    sm_count: int | None = None  # ENGINEHEUR_SM_COUNT_TARGET
    dynamic_shapes: bool = False  # OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED
    override_shapes: bool = False  # OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED (cuDNN >= 9.21)
    kernel_cache: KernelCache | None = None  # EXECUTION_PLAN_KERNEL_CACHE on every plan (kernel_cache.py)
    # deviceless (AoT) planning for these properties: no handle anywhere, ENGINEHEUR_ / ENGINE_DEVICEPROP
    device_properties: DeviceProperties | None = None
    sm_version: int | None = None  # the target architecture (90 = SM 9.0) the device rules are checked against


def need(now: Phase, phase: Phase, method: str) -> NoReturn:
    """The ``PhaseError`` of ``method()`` called at ``now``, before the ``phase`` it needs."""
    raise PhaseError(f"{method}() needs the {phase.name} phase, and the graph is at {now.name}: "
                     f"call {HOW[phase]} first")
