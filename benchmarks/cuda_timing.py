"""GPU time of a callable by CUDA events, the one loop the benchmark scripts share.

``per_call_ms`` brackets ``calls`` back-to-back calls with two events on the current stream and waits for the
second: the GPU time per call where the calls keep the GPU busy, the host's pace where they do not (which is
what a host-bound contender costs). ``interleaved_ms`` measures several contenders round by round, so that clock
and thermal drift over the run hit every contender alike, and gives each one's median.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any


def per_call_ms(torch: Any, fn: Callable[[], Any], calls: int = 1) -> float:
    """Milliseconds per call of ``fn`` over ``calls`` calls between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def interleaved_ms(torch: Any, fns: dict, rounds: int, calls: int = 1, warmup: int = 3) -> dict:
    """{name: median over ``rounds`` of :func:`per_call_ms`} for each callable of ``fns``, after ``warmup`` calls
    of each; every round measures every contender once, in the order given."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times: dict = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            times[k].append(per_call_ms(torch, fn, calls))
    return {k: statistics.median(v) for k, v in times.items()}
