"""The placement table: which candidates come first before anything is measured (issue #38 item 5).

Per (op, I/O data type, compute capability) the table says whether cudnn_py's own engine or cuDNN's plan is
expected to be faster; :func:`ours_first` answers it for a graph the norm engine accepted. Measurement
(``selection.py``: ``build_plans(ALL)`` and the internal autotune) overrides the table for the graph it timed; the
table only orders the candidates before that, and breaks ties of a measurement.

The figures behind each row: ``benchmarks/results/norm-engines-2026-12-06-h100.md`` (H100 80GB HBM3, cuDNN 9.19,
bf16, medians of 7 CUDA graphs of 10 calls): layernorm, our engine (elems=16) faster at 3 of 5 shapes
(8192x4096: 2614 GB/s against cuDNN's 2264; 65536x2048: 2826 against 2355; 16384x12288: 2894 against 2789);
rmsnorm, cuDNN faster at 4 of 5 (8192x4096: 2881 against 2629). Rows without a measurement are absent: there
cuDNN comes first.
"""
from __future__ import annotations

from typing import Any

OURS, CUDNN = "ours", "cudnn"

# (op, I/O data type, compute capability) -> who comes first; each row cites its benchmark result (see above)
TABLE: dict[tuple[str, str, int], str] = {
    ("layernorm", "bf16", 90): OURS,  # norm-engines-2026-12-06-h100.md: ours faster at 3 of 5 shapes
    ("rmsnorm", "bf16", 90): CUDNN,  # norm-engines-2026-12-06-h100.md: cuDNN faster at 4 of 5 shapes
}

_CTYPES = {"bf16_t": "bf16", "f16_t": "fp16", "float": "fp32"}


def lookup(op: str, dtype: str, cc: int) -> str:
    """Who comes first for ``op`` on ``dtype`` at compute capability ``cc``: :data:`OURS` or :data:`CUDNN` (the
    default where the table has no row)."""
    return TABLE.get((op, dtype, cc), CUDNN)


def norm_key(problem: Any, cc: int) -> tuple[str, str, int]:
    """The table's key of a norm problem (``norms.match.NormProblem``)."""
    return ("rmsnorm" if problem.rms else "layernorm", _CTYPES.get(problem.x.ctype, problem.x.ctype), cc)


def ours_first(problem: Any, cc: int) -> bool:
    return lookup(*norm_key(problem, cc)) == OURS
