"""The placement table: which candidates come first before anything is measured (issue #38 item 5).

Per (op, I/O data type, compute capability) the table says whether cudnn_py's own engine or cuDNN's plan is
expected to be faster; :func:`ours_first` answers it for a graph the norm engine accepted. Measurement
(``selection.py``: ``build_plans(ALL)`` and the internal autotune) overrides the table for the graph it timed; the
table only orders the candidates before that, and breaks ties of a measurement.

The figures behind each row: ``benchmarks/results/norm-sweep-2026-12-06-h100.txt`` (H100 80GB HBM3, cuDNN 9.19,
bf16, medians of 7 CUDA graphs of 10 launches; our engine's default layout against cuDNN's plan): layernorm, ours
faster at all 5 shapes (8192x4096 2790 GB/s against 2628; 32768x1024 2823 / 2630; 4096x8192 2808 / 2471;
65536x2048 2987 / 2829; 16384x12288 2992 / 2890); rmsnorm, ours faster at 2 (65536x2048 3003 / 2717; 16384x12288
3001 / 2920) and within 0.6% at the other 3 (8192x4096 2853 / 2870; 32768x1024 2837 / 2845; 4096x8192 2855 /
2868). fp16 moves the same bytes through the same kernel: ``benchmarks/results/norm-table-2026-12-06-h100.md``
(run.py's table, both types, cuDNN's fp16 plans included) backs its rows. Rows without a measurement are absent:
there cuDNN comes first.
"""
from __future__ import annotations

from typing import Any

OURS, CUDNN = "ours", "cudnn"

# (op, I/O data type, compute capability) -> who comes first; each row cites its benchmark result (see above)
TABLE: dict[tuple[str, str, int], str] = {
    ("layernorm", "bf16", 90): OURS,  # norm-sweep-2026-12-06-h100: ours faster at 5 of 5 shapes
    ("layernorm", "fp16", 90): OURS,  # norm-table-2026-12-06-h100: the same kernel, the same bytes
    ("rmsnorm", "bf16", 90): OURS,  # norm-sweep-2026-12-06-h100: faster at 2 of 5, within 0.6% at 3
    ("rmsnorm", "fp16", 90): OURS,  # norm-table-2026-12-06-h100
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
