"""CPU: every cuDNN graph of ``examples/data_parallel_mlp.py`` passes cuDNN's own validation (deviceless), for the
local batch of one and of two ranks — the transposed-stride views of its wgrad / dgrad matmuls included."""
from __future__ import annotations

import importlib
import os
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def load_example():
    """The example as the module ``data_parallel_mlp`` (importable by that name, as spawned ranks need)."""
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    return importlib.import_module("data_parallel_mlp")


@pytest.mark.parametrize("world_size", [1, 2])
def test_every_graph_of_the_example_validates(world_size):
    ex = load_example()
    shapes = ex.Shapes()
    graphs = ex.MLPGraphs(shapes.n_total // world_size, shapes)
    graphs.validate()
    assert len(graphs.graphs()) == 9
    g, XT, DZ, DW = graphs.layer1.wgrad
    assert list(XT.get_stride()) == [shapes.n_total // world_size * shapes.d_in, 1, shapes.d_in]
    assert list(DW.get_dim()) == [1, shapes.d_in, shapes.hidden]


def test_the_example_imports_without_torch():
    if "torch" in sys.modules:
        pytest.skip("torch is already imported in this process")
    load_example()
    assert "torch" not in sys.modules
