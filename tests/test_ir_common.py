"""The helpers every op family's spec and inference share (``cudnn_py/ir/ops/common.py``)."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.ir.ops.common import int_at_least

F = cudnn.data_type.FLOAT


def test_int_at_least_accepts_ints_and_numpy_ints_and_refuses_the_rest():
    positive = int_at_least(1)
    assert positive(3) == 3 and positive(np.int64(4)) == 4 and type(positive(np.int64(4))) is int
    with pytest.raises(ValueError, match=r"needs an int >= 1, got 0"):
        positive(0)
    for bad in (True, 2.0, "2", None):
        with pytest.raises(TypeError, match=r"needs an int >= 1, got"):
            positive(bad)
    assert int_at_least(None)(-3) == -3
    assert int_at_least(0, optional=True)(None) is None


def test_int_params_name_the_op_the_argument_and_the_value():
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([1, 4, 4], name="x")
    with pytest.raises(ValueError, match=r"diagonal_band_mask\(\): argument 'right_bound': needs an int >= 0, got -1"):
        g.diagonal_band_mask(x, right_bound=-1)
    with pytest.raises(ValueError, match=r"block_scale_quantize\(\): argument 'block_size': needs an int >= 1, got 0"):
        g.block_scale_quantize(x, 0)
    with pytest.raises(TypeError, match=r"concatenate\(\): argument 'axis': needs an int, got True"):
        g.concatenate([x, x], True)
    with pytest.raises(TypeError, match=r"gen_index\(\): argument 'axis': needs an int, got 1.5"):
        g.gen_index(x, 1.5)
