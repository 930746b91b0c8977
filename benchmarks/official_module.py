"""The official nvidia-cudnn-frontend module beside cudnn_py in one benchmark process, or why it is not there.

Import it before cudnn_py (as benchmarks/run.py does): cudnn_py then uses the libcudnn the official module loaded.
"""
from __future__ import annotations

import importlib
from typing import Any


def official(part: str = "", *names: str) -> tuple[Any, str | None]:
    """(the official module's ``cudnn.<part>`` (``cudnn`` itself for ""), None) or (None, why not). ``names`` are
    read from it here (its lazily exported implementations import torch: they fail here, not mid-benchmark)."""
    try:
        import cudnn
    except Exception as exc:  # not installed, or its extension does not load here
        return None, f"the official module is not importable as `cudnn` ({type(exc).__name__}: {exc})"
    if not hasattr(cudnn, "backend_version") or cudnn.__name__ != "cudnn" or "cudnn_py" in repr(cudnn):
        return None, f"`cudnn` is not the official module ({cudnn!r})"
    where = f"cudnn.{part}" if part else "cudnn"
    try:
        module = importlib.import_module(where)
        for name in names:
            getattr(module, name)
    except Exception as exc:
        return None, f"{where} does not import here ({type(exc).__name__}: {str(exc)[:300]})"
    return module, None
