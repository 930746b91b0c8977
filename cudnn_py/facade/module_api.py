"""1.32's module-level graph helpers: the ``cudnn.graph`` context manager, the ``cudnn.jit`` and
``cudnn.graph_cache`` decorators, and ``sdpa_capabilities()``.

``graph`` only makes the graph: it yields ``(graph, [])`` and does nothing on exit (nothing is validated or
built there); ``jit`` builds what the function returns (``build(heur_modes)``: validate, operation graph, plans
for those heuristic modes, support check, plan build) unless it has plans already, and turns the tensors returned
into their uids; ``graph_cache`` memoizes by a key function, evicting the oldest entry (FIFO) when full.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..enums import data_type, heur_mode
from .pygraph import pygraph


def graph_cache(key_fn: Callable[..., Any], maxsize: int = 256) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Memoize a graph-making function by ``key_fn(*args, **kwargs)``: a hit returns the very object made the
    first time (the function body does not run); at ``maxsize`` entries the oldest one is dropped first."""

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        cache: dict[Any, Any] = {}

        @functools.wraps(func)
        def cached(*args: Any, **kwargs: Any) -> Any:
            key = key_fn(*args, **kwargs)
            if key in cache:
                return cache[key]
            result = func(*args, **kwargs)
            if len(cache) >= maxsize:
                cache.pop(next(iter(cache)))  # insertion order: the oldest entry
            cache[key] = result
            return result

        return cached

    return decorator


def jit(heur_modes: Any = heur_mode.A, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a function returning ``(graph, [tensors])``: the graph is built with the heuristic modes
    ``heur_modes`` (one mode or a list) unless it already has execution plans, and ``(graph, [uids])`` is
    returned. Other keywords are accepted and unused, as in 1.32."""
    modes = heur_modes if isinstance(heur_modes, list) else [heur_modes]

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def built(*args: Any, **kwargs: Any) -> tuple[Any, list[int]]:
            g, tensors = func(*args, **kwargs)
            if g.get_execution_plan_count() <= 0:
                g.build(modes)
            return g, [t.get_uid() for t in tensors]

        return built

    return decorator


@contextmanager
def graph(handle: object, name: str = "cudnn_graph", io_data_type: Any = data_type.HALF,
          intermediate_data_type: Any = data_type.FLOAT, compute_data_type: Any = data_type.FLOAT,
          **graph_kwargs: Any) -> Iterator[tuple[pygraph, list]]:
    """``with cudnn.graph(handle) as (g, tensors):`` a :class:`pygraph` on ``handle`` with these data types (the
    other keywords go to ``pygraph``), and an empty list for the caller's tensors. Nothing happens on exit."""
    g = pygraph(handle=handle, name=name, io_data_type=io_data_type, intermediate_data_type=intermediate_data_type,
                compute_data_type=compute_data_type, **graph_kwargs)
    yield g, []


def sdpa_capabilities() -> frozenset:
    """The SDPA binding capabilities (``supports_<cap>`` flags of 1.32's native packed-SDPA binder). cudnn_py has
    no such binder: empty, as 1.32 answers on a build without it."""
    return frozenset()
