"""The norm forward engine (NVRTC): layernorm / rmsnorm forward with the residual-add and SiLU fusions.

``match.py`` says which graphs it runs, ``variants.py`` how a row is laid out over threads, ``source.py`` is the
kernel, ``engine.py`` the engine and its plan."""
from .engine import NormForwardEngine, NormPlan

__all__ = ["NormForwardEngine", "NormPlan"]
