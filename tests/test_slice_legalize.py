"""The slice view's rewrite lives in the legalize pass (its output non-virtual, with the alignment the offset
leaves), so lowering is a pure function of the program: lowering it changes none of its tensors."""
from __future__ import annotations

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.ir.passes import PassOptions, prepare
from cudnn_py.lowering import lower_program

F = cudnn.data_type.FLOAT


def _graph():
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([2, 8, 9], name="x")  # Y = X[:, 2:6, 1:]: 2 * 9 + 1 = 19 elements = 76 bytes into X
    y = g.slice(x, [slice(None), slice(2, 6), slice(1, None)], name="s")  # left virtual by the user
    g.matmul(y, g.tensor([2, 8, 4], name="b"), name="mm").set_output(True)
    g.validate_ir()
    return g, y


def test_legalize_makes_the_view_non_virtual_with_the_offsets_alignment():
    g, y = _graph()
    program = prepare(g, PassOptions(available=versions.available))
    view = program.tensors[y.uid]
    assert view.is_virtual is False and view.alignment == 4  # 76 bytes: 4-byte aligned
    assert y.is_virtual is True  # the user's graph keeps what the user chose


def test_lowering_leaves_the_program_as_it_found_it():
    if not versions.available("CUDNN_BACKEND_OPERATION_SLICE_DESCRIPTOR"):
        pytest.skip("the SLICE op needs cuDNN 9.22")
    g, _ = _graph()
    program = prepare(g, PassOptions(available=versions.available))
    before = program.to_dict()
    lower_program(program)
    assert program.to_dict() == before
