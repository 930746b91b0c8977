"""``cudnn.ops``: the public namespace of the official module's torch-facing operators (``cudnn.ops.norm`` and
its kin), for code written for the official ``cudnn`` module.

It holds no operator yet: each is added here as it is built over cudnn_py's graphs. The internal op families (a
spec, lowering and float64 reference per family) are ``cudnn_py.families``, not this namespace.
"""
from __future__ import annotations

__all__: list[str] = []
