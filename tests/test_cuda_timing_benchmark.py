"""benchmarks/cuda_timing.py (the benchmark scripts' one CUDA-event loop) on the CPU, with a torch stand-in whose
events read a clock the callables advance: each contender's time per call, the warm-up kept out of the
measurement, the rounds interleaved, and the end event waited for before it is read."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("cuda_timing", ROOT / "benchmarks" / "cuda_timing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Clock:
    """A GPU stand-in: calls advance ``now`` (ms); an event records it; elapsed_time needs both synchronized."""

    def __init__(self):
        self.now, self.log = 0.0, []

    def torch(self):
        clock = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.at, self.done = None, False

            def record(self):
                self.at = clock.now

            def synchronize(self):
                self.done = True

            def elapsed_time(self, end):
                assert end.done, "the end event is read before it is waited for"
                return end.at - self.at

        return SimpleNamespace(cuda=SimpleNamespace(Event=Event, synchronize=lambda: clock.log.append("sync")))

    def work(self, name, ms):
        def fn():
            self.now += ms
            self.log.append(name)
        return fn


def test_per_call_ms_divides_the_bracketed_time_by_the_calls():
    clock = _Clock()
    assert _module().per_call_ms(clock.torch(), clock.work("a", 0.25), calls=8) == 0.25
    assert clock.log == ["a"] * 8


def test_interleaved_ms_warms_up_then_measures_round_by_round():
    clock = _Clock()
    times = iter([1.0, 3.0, 2.0, 9.0, 1.5])  # a's per-call times over the rounds: warm-up excluded, median taken

    def a():
        clock.now += next(times)
        clock.log.append("a")

    medians = _module().interleaved_ms(clock.torch(), {"a": a, "b": clock.work("b", 0.5)}, rounds=4, calls=1,
                                       warmup=1)
    assert medians == {"a": (2.0 + 3.0) / 2, "b": 0.5}
    assert clock.log == ["a", "b", "sync"] + ["a", "b"] * 4
