"""transpose and concatenate on the CPU: inference and checks (a permutation that is not one; concatenation infers
its output dims), deviceless lowering where the running cuDNN has the op, and the float64 reference."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import ReferenceEngine

F, D = cudnn.data_type.FLOAT, cudnn.data_type.DOUBLE
RNG = np.random.default_rng(5)


def test_transpose_is_a_view_and_checks_the_permutation():
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([2, 3, 4], name="x")
    y = g.transpose(x, [2, 0, 1], name="t").set_output(True)
    g.validate_ir()
    assert list(y.dim) == [4, 2, 3] and list(y.stride) == [1, 12, 4]
    g2 = cudnn.pygraph(io_data_type=F)
    g2.transpose(g2.tensor([2, 3, 4], name="x"), [0, 0, 1], name="t").set_output(True)
    with pytest.raises(ValueError, match=r"transpose node 't'.*permutation \[0, 0, 1\] is not a permutation"):
        g2.validate_ir()
    if versions.runtime_version() >= versions.since("CUDNN_BACKEND_OPERATION_TRANSPOSE_DESCRIPTOR"):
        g.validate()
        assert {d.kind.name for d in g.session.lowered.operations} == {"CUDNN_BACKEND_OPERATION_TRANSPOSE_DESCRIPTOR"}


def test_concatenate_infers_its_output_and_checks_its_inputs():
    g = cudnn.pygraph(io_data_type=F)
    a, b = g.tensor([2, 3, 4], name="a"), g.tensor([2, 5, 4], name="b")
    y = g.concatenate([a, b], 1, name="cat").set_output(True)
    g.validate_ir()
    assert list(y.dim) == [2, 8, 4] and g.nodes[0].inputs == {"X_0": a, "X_1": b}
    g.validate()  # cuDNN finalizes it (deviceless on 9.28)
    assert {d.kind.name for d in g.session.lowered.operations} == {"CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR"}
    g2 = cudnn.pygraph(io_data_type=F)
    g2.concatenate([g2.tensor([2, 3, 4], name="a"), g2.tensor([2, 5, 6], name="b")], 1, name="cat").set_output(True)
    with pytest.raises(ValueError, match=r"concatenate node 'cat': tensor 'b'.*differ from \[2, 3, 4\] outside axis 1"):
        g2.validate_ir()
    with pytest.raises(TypeError, match="list of tensors"):
        cudnn.pygraph().concatenate(g2.tensor([1]), 0)


def test_layout_references():
    g = cudnn.pygraph(io_data_type=D, backends=[ReferenceEngine()])
    a, b = g.tensor([2, 3, 4], name="a"), g.tensor([2, 2, 4], name="b")
    y = g.transpose(g.concatenate([a, b], 1), [2, 1, 0]).set_output(True)
    g.validate_ir()
    xa, xb = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 2, 4))
    out = np.zeros(tuple(y.dim))
    g.execute({a: xa, b: xb, y: out})
    np.testing.assert_array_equal(out, np.transpose(np.concatenate([xa, xb], 1), [2, 1, 0]))
