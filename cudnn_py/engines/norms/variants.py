"""The compile-time variants of the norm forward kernel, and which one a problem gets.

A variant is the kernel's layout (``source.py``): ``vec`` elements per access, ``tpr`` threads per row, ``rpc``
rows per CTA, ``iters`` accesses per thread per row (the row held in ``iters * vec`` registers per thread), or
``looped`` (three passes over global memory) for rows wider than the registers hold.

The one public knob is ``elems``: the elements per thread the layout aims for (32, 16 or 8; 32 by default). Fewer
spread a row over more threads (more loads in flight per row, more reduction work); more keep more of the row per
thread. The default and the cache hints come from ``benchmarks/norm_sweep.py`` on an H100 (bf16, the five shapes of
``benchmarks/norm_table.py``, every layout with and without hints, persistent and full grids): 32 elements per
thread and one CTA per row group, with the hints on CTAs of at most 256 threads, was within 2.5% of the best
layout measured at each of the 10 (op, shape) cases, and within 0.5% at 9 of them
(``benchmarks/results/norm-sweep-2026-12-06-h100.txt``).
:func:`choose` turns (row width, vector width, ``elems``) into a layout:

* ``tpr`` is the power of two (1 to :data:`MAX_TPR`) that gives each thread about ``elems`` elements;
* narrow rows share a CTA (``rpc = 256 / tpr``: a CTA of 256 threads), wide ones take a CTA of ``tpr`` threads;
* a row that would need more than :data:`MAX_ELEMS` registers per thread even at 512 threads is ``looped``.

Every variant compiles for sm_80, sm_90a and sm_100a with no spill and no stack frame
(``tests/test_norm_engines.py`` reads ptxas' report); 1024-thread CTAs spilled (64 registers a thread).

The 16-byte path (``vec`` = 16 / sizeof(X)) needs the row width divisible by ``vec`` and every tensor declared
aligned to its access (``NormProblem`` operands' alignment); otherwise ``vec`` is 1 (any width, any alignment).
"""
from __future__ import annotations

from dataclasses import dataclass

from .match import NormProblem

ELEMS_CHOICES = (32, 16, 8)  # the knob's values; the first is the default
MAX_ELEMS = 32  # row elements per thread held in registers
MAX_SCALAR_ITERS = 16  # the same for the scalar path (24 single accesses spilled on sm_100a)
CTA_THREADS = 256  # the CTA size of narrow rows
MAX_TPR = 512  # threads per row at most: 1024-thread CTAs cap registers at 64 a thread, and spilled


@dataclass(frozen=True)
class Variant:
    vec: int
    tpr: int
    rpc: int
    iters: int
    looped: bool
    hints: bool = False  # streamed tensors read without L1 allocation and written evict-first (16-byte path)

    @property
    def threads(self) -> int:
        return self.tpr * self.rpc

    def label(self) -> str:
        return (f"v{self.vec}_t{self.tpr}_r{self.rpc}_" + ("looped" if self.looped else f"i{self.iters}")
                + ("_hints" if self.hints else ""))


def _pow2_at_least(v: int) -> int:
    p = 1
    while p < v:
        p *= 2
    return p


def vector_width(problem: NormProblem) -> int:
    """16 bytes of X per access where the row width and every tensor's declared alignment allow it, else 1."""
    vec = 16 // problem.x.size
    if problem.n % vec:
        return 1
    for o in problem.operands():
        if o.alignment % min(16, vec * o.size):
            return 1
    return vec


def choose(n: int, vec: int, elems: int = ELEMS_CHOICES[0]) -> Variant:
    chunks = -(-n // vec)
    per_thread = max(1, elems // vec)
    tpr = min(MAX_TPR, _pow2_at_least(-(-chunks // per_thread)))
    iters = -(-chunks // tpr)
    looped = iters * vec > (MAX_ELEMS if vec > 1 else MAX_SCALAR_ITERS)
    if looped:
        iters = 1
    rpc = max(1, CTA_THREADS // tpr)
    # (the hints slowed 512-thread CTAs by up to 25% in the sweep, and sped the others by 0-3%)
    return Variant(vec, tpr, rpc, iters, looped, hints=vec > 1 and tpr * rpc <= CTA_THREADS)


def options(problem: NormProblem, v: Variant) -> tuple[str, ...]:
    """The ``-D`` macros that specialise ``source.SOURCE`` for ``problem`` laid out as ``v``."""
    p = problem

    def t(o: object) -> str:
        return o.ctype if o is not None else "float"  # type: ignore[attr-defined]

    macros = {
        "TX": t(p.x), "TR": t(p.r), "TS": t(p.s), "TW": t(p.w), "TB": t(p.b), "TY": t(p.y), "TZ": t(p.z),
        "VEC": v.vec, "TPR": v.tpr, "RPC": v.rpc, "ITERS": v.iters, "LOOPED": int(v.looped), "HINTS": int(v.hints),
        "HAS_RES": int(p.r is not None), "WRITE_SUM": int(p.s is not None), "HAS_BIAS": int(p.b is not None),
        "RMS": int(p.rms), "TRAIN": int(p.train), "WRITE_Y": int(p.y is not None), "SILU": int(p.z is not None),
    }
    return tuple(f"-D{k}={val}" for k, val in macros.items())
