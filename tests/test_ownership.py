"""Ownership on the CPU: graphs of every kind the fuzzers make (attention forward and backward, every option;
convolutions; normalizations), validated (and explained) or refused, leave no graph, planning session or
descriptor in cyclic garbage. A graph, its session and what they lowered go by reference counting when the caller
drops them (tests of single graphs: test_graph_ir.py, test_execute_correctness.py, test_engines.py; with plans and
replays: test_gpu_replay.py)."""
from __future__ import annotations

import gc
from collections import Counter

import pytest

from fuzz import conv_fuzz, norm_fuzz, sdpa_fuzz
from tests.support.collector import collector_off

OWNED = ("pygraph", "PlanningSession", "Program", "Descriptor", "Executor")


def _validated_and_explained(fuzzer, spec: dict) -> str:
    """The fuzzer's deviceless run, then what a user looks at on such a graph: explain() (text and JSON), repr."""
    import cudnn_py as cudnn
    from cudnn_py.errors import CudnnError

    if fuzzer is conv_fuzz:
        return fuzzer.run_case_deviceless(spec)["outcome"]
    g = sdpa_fuzz.build_graph(cudnn, spec)[0] if fuzzer is sdpa_fuzz else norm_fuzz.build(spec)
    try:
        g.validate()
    except (cudnn.cudnnGraphNotSupportedError, CudnnError, ValueError, TypeError):
        return "refused"
    assert g.explain() and g.explain(format="json") and repr(g)
    return "validated"


@pytest.mark.parametrize("fuzzer, cases", [(sdpa_fuzz, 60), (conv_fuzz, 40), (norm_fuzz, 40)],
                         ids=["sdpa", "conv", "norms"])
def test_fuzzed_graphs_leave_no_cyclic_garbage(fuzzer, cases):
    flags = gc.get_debug()
    with collector_off():
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable stays in gc.garbage, to be counted
        try:
            outcomes = Counter(_validated_and_explained(fuzzer, fuzzer.make_case(4242, i)) for i in range(cases))
            gc.collect()
            left = Counter(type(o).__name__ for o in gc.garbage if type(o).__name__ in OWNED)
        finally:
            gc.set_debug(flags)
            gc.garbage.clear()
    assert outcomes["validated"] > cases // 2, outcomes
    assert not left, f"in cyclic garbage after {dict(outcomes)}: {dict(left)}"
