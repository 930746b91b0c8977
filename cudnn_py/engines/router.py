"""The Router: turns registered python engines plus the cuDNN backend into one ranked plan list.

Policy of the default router: python engines that accept the graph come first, in registration order (a user
who registers an engine wants it used), then the backend delegating entry. A custom router is any object with
`plan(graph, engines) -> list[PlanConfig]` (or a plain callable with that signature); pygraph checks its output.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import cudnnGraphNotSupportedError
from .base import BACKEND_PLAN, BaseEngine, PlanConfig

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Router:
    include_backend: bool = True  # False: python engines only (no cuDNN fallback)
    backend_first: bool = False  # True: cuDNN ranks above every python engine

    def plan(self, graph: Any, engines: Sequence[BaseEngine]) -> list[PlanConfig]:
        python_plans: list[PlanConfig] = []
        for engine in engines:
            try:
                engine.check_support(graph)
            except cudnnGraphNotSupportedError as why:
                _log.debug("engine %r skipped: %s", engine, why)
                continue
            python_plans.extend(engine.plan_configs(graph))
        backend = [BACKEND_PLAN] if self.include_backend else []
        return backend + python_plans if self.backend_first else python_plans + backend


default_router = Router()


def route(router: Any, graph: Any, engines: Sequence[BaseEngine]) -> list[PlanConfig]:
    """Call a router object or a bare callable."""
    plan = getattr(router, "plan", None)
    return list(plan(graph, engines) if plan is not None else router(graph, engines))
