"""Execution engines beside cuDNN: the engine contract, the id regions, the Router, and the reference engine."""
from .base import BACKEND_PLAN, BaseEngine, CompiledPlan, ExecutionContext, PlanConfig
from .engine_ids import (
    BACKEND_HEURISTIC_ENGINE_ID,
    PYTHON_ENGINE_ID_BASE,
    REFERENCE_ENGINE_ID,
    is_backend_sentinel,
    is_python_engine,
)
from .router import Router, default_router

__all__ = [
    "BACKEND_PLAN", "BaseEngine", "CompiledPlan", "ExecutionContext", "PlanConfig", "BACKEND_HEURISTIC_ENGINE_ID",
    "PYTHON_ENGINE_ID_BASE", "REFERENCE_ENGINE_ID", "is_backend_sentinel", "is_python_engine", "Router",
    "default_router", "ReferenceEngine",
]


def __getattr__(name):  # the reference engine pulls in numpy: load it on first use
    if name == "ReferenceEngine":
        from .reference import ReferenceEngine

        return ReferenceEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
