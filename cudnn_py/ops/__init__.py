"""The op families: one folder per family, holding its ``spec`` (the :class:`~cudnn_py.ir.spec.OpSpec` s and their
inference), its ``lowering`` (``@lowers(kind)``: IR node -> backend descriptors) and its float64 ``reference``
(``@reference(kind)``), side by side.

:data:`FAMILIES` is the one registration list: each generic core imports its facet of every family through
:func:`load` (the IR the specs, ``cudnn_py.lowering`` the lowerings, the reference engine the references) and no
core imports a family module by name (an import-linter contract keeps it so). A family without a facet says so
here; an op without a lowering of its own says so on its spec (``decomposed=True``). ``tests/test_op_families.py``
checks that every registered op has all its facets, in its family's folder. ARCHITECTURE.md ("How to add an op")
walks through a new one.
"""
from __future__ import annotations

from importlib import import_module

SPEC, LOWERING, REFERENCE = "spec", "lowering", "reference"
ALL = (SPEC, LOWERING, REFERENCE)

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
    core's table), once."""
    if facet in _loaded:
        return
    for family, facets in FAMILIES.items():
        if facet in facets:
            import_module(module(family, facet))
    _loaded.add(facet)


def module(family: str, facet: str) -> str:
    """The module of a family's facet."""
    return f"{__name__}.{family}.{facet}"


__all__ = ["FAMILIES", "LOWERING", "REFERENCE", "SPEC", "load", "module"]
