"""The op families: one folder per family, holding its ``spec`` (the :class:`~cudnn_py.ir.spec.OpSpec` s and their
inference), its ``lowering`` (``@lowers(kind)``: IR node -> backend descriptors) and its float64 ``reference``
(``@reference(kind)``), side by side. These are internal; the public operator namespace is ``cudnn_py.ops``.

:data:`FAMILIES` is the one registration list. The generic cores (the IR, ``cudnn_py.lowering``, the reference
engine) sit below this package and never import it: each owns a :class:`~cudnn_py.registry.Registry`, and
importing this package hands :mod:`cudnn_py.registry` the filler (:func:`load`) that imports one facet of every
family when its registry is first read. The specs are loaded here at once (the builder methods of ``Graph`` are
made from them); the lowerings when the first graph is lowered; the references (numpy) when the reference engine
first looks one up. The facade imports this package, so ``import cudnn_py as cudnn; cudnn.pygraph()`` has every
op. A family without a facet says so here; an op without a lowering of its own says so on its spec
(``decomposed=True``). ``tests/test_op_families.py`` checks that every registered op has all its facets, in its
family's folder. ARCHITECTURE.md ("How to add an op") walks through a new one.
"""
from __future__ import annotations

from importlib import import_module

from ..registry import FACETS, LOWERING, REFERENCE, SPEC, fill_with

ALL = FACETS

# family -> the facets its folder has (spec always). In import order: the registration order of the specs (the
# order of the builder methods and of SPECS) follows it.
FAMILIES: dict[str, tuple[str, ...]] = {
    "attention": ALL,  # sdpa: the unified SDPA_FWD op or the composite
    "attention_backward": ALL,  # sdpa_backward (composite) and its attention_view
    "attention_fp8": (SPEC, REFERENCE),  # sdpa_fp8 / sdpa_fp8_backward: composites only
    "attention_mxfp8": (SPEC, REFERENCE),  # sdpa_mxfp8 / sdpa_mxfp8_backward: composites only
    "conv": ALL,
    "layout_ops": ALL,  # reshape, transpose, slice, concatenate
    "masks": ALL,  # the diagonal band mask composite and its op
    "matmul": ALL,
    "moe": ALL,
    "norms": ALL,
    "paged_cache": ALL,
    "pointwise": ALL,
    "quantize": ALL,
    "reduction": ALL,
    "rng": ALL,
    "rope": ALL,
}

_loaded: set[str] = set()


def load(facet: str) -> None:
    """Import the ``facet`` module of every family that has one (its decorators and ``register`` calls fill the
    core's registry), once."""
    if facet in _loaded:
        return
    for family, facets in FAMILIES.items():
        if facet in facets:
            import_module(module(family, facet))
    _loaded.add(facet)


def module(family: str, facet: str) -> str:
    """The module of a family's facet."""
    return f"{__name__}.{family}.{facet}"


def _register() -> None:
    from ..ir import Graph, install_builders

    fill_with(load)
    load(SPEC)
    install_builders(Graph)  # one builder method per public spec, made on its first read


_register()

__all__ = ["FAMILIES", "LOWERING", "REFERENCE", "SPEC", "load", "module"]
