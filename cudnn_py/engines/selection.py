"""Selection by measurement (issue #38 item 5): time every candidate plan of a graph, ours and cuDNN's, and pick
the fastest.

A :class:`Candidate` is one built plan and a function that runs it once on the caller's buffers, on the stream it
would run on. A *timer* times such a function: ``timer(run, stream) -> milliseconds per call``. The real one
(:func:`cuda_event_timer`) runs it a few times to warm up, then N times between CUDA events recorded on that
stream (``cuda.bindings.driver``), and answers the median; tests pass a fake one (a timer is a plain callable, and
:data:`TIMER` is the default the facade uses). :func:`measure` times every candidate (one that fails is left out,
with its error); :func:`fastest` picks the least time, ties going to the earlier candidate (the placement table's
order: ``placement.py``).

Nothing here knows about graphs or the disk: the facade (``facade/autotune.py``) makes the candidates, applies the
winner and remembers it.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import CudaDriverError

OURS, CUDNN = "ours", "cudnn"
Timer = Callable[[Callable[[], None], Any], float]


@dataclass(frozen=True)
class Candidate:
    """One built plan: ``kind`` :data:`OURS` (``index``: its routed plan index) or :data:`CUDNN` (``index``: the
    cuDNN plan index behind the cuDNN entry); ``identity`` names it stably (what the disk remembers)."""

    label: str
    kind: str
    index: int
    identity: dict[str, Any]
    run: Callable[[], None]


@dataclass(frozen=True)
class Measured:
    candidate: Candidate
    ms: float | None  # None: it failed (``error``)
    error: str | None = None

    def line(self) -> str:
        return (f"{self.candidate.label}: {self.ms:.4f} ms" if self.ms is not None else
                f"{self.candidate.label}: failed ({self.error})")


def measure(candidates: Sequence[Candidate], timer: Timer, stream: Any) -> list[Measured]:
    """Every candidate timed by ``timer`` on ``stream`` (in order); a candidate whose run raises is kept with its
    error and no time."""
    out = []
    for c in candidates:
        try:
            ms = float(timer(c.run, stream))
        except Exception as e:  # (a plan that cannot run on these buffers is no candidate)
            out.append(Measured(c, None, f"{type(e).__name__}: {e}"))
            continue
        out.append(Measured(c, ms if ms == ms and ms >= 0 else None, None if ms == ms and ms >= 0 else
                            f"the timer answered {ms!r}"))
    return out


def fastest(measured: Sequence[Measured]) -> Measured | None:
    """The measured candidate of least time (the earliest of equal ones); None when none was timed."""
    timed = [(m.ms, i, m) for i, m in enumerate(measured) if m.ms is not None]
    return min(timed, key=lambda t: (t[0], t[1]))[2] if timed else None  # (the first of equal times)


def median_of(times: Sequence[float]) -> float:
    return float(statistics.median(times))


def _ok(result: Any, what: str) -> Any:
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise CudaDriverError(f"{what} failed: {err!r}")
    return rest[0] if len(rest) == 1 else None


def capturing(stream: Any) -> bool:
    """Whether ``stream`` is being captured into a CUDA graph (nothing may be timed or synchronised there)."""
    try:
        from cuda.bindings import driver as cu

        status = _ok(cu.cuStreamIsCapturing(cu.CUstream(int(stream or 0))), "cuStreamIsCapturing")
    except Exception:  # (no driver bindings, no device: nothing is captured)
        return False
    return int(status) != 0


def cuda_event_timer(warmup: int = 3, iters: int = 10) -> Timer:
    """A timer of CUDA events (``cuda.bindings.driver``): ``warmup`` runs, then ``iters`` runs each between two
    events recorded on the stream, synchronised once; the median of the ``iters`` elapsed times, in ms."""

    def timer(run: Callable[[], None], stream: Any) -> float:
        from cuda.bindings import driver as cu

        elapsed = getattr(cu, "cuEventElapsedTime_v2", None) or cu.cuEventElapsedTime
        s = cu.CUstream(int(stream or 0))
        if capturing(stream):
            raise CudaDriverError("the stream is being captured into a CUDA graph: nothing is timed there")
        for _ in range(warmup):
            run()
        events = [(_ok(cu.cuEventCreate(0), "cuEventCreate"), _ok(cu.cuEventCreate(0), "cuEventCreate"))
                  for _ in range(iters)]
        try:
            for start, end in events:
                _ok(cu.cuEventRecord(start, s), "cuEventRecord")
                run()
                _ok(cu.cuEventRecord(end, s), "cuEventRecord")
            _ok(cu.cuEventSynchronize(events[-1][1]), "cuEventSynchronize")
            return median_of([float(_ok(elapsed(a, b), "cuEventElapsedTime")) for a, b in events])
        finally:
            for pair in events:
                for ev in pair:
                    cu.cuEventDestroy(ev)

    return timer


TIMER: Timer = cuda_event_timer()
