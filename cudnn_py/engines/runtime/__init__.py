"""Runtime-compiled engines: the contract (``engine.py``), NVRTC (``nvrtc.py``), compiled and loaded modules
(``modules.py``) and the cubin store (``store.py``: in memory, then the kernel files of the cache directory)."""
from .engine import RuntimeEngine, RuntimePlan
from .modules import Target

__all__ = ["RuntimeEngine", "RuntimePlan", "Target"]
