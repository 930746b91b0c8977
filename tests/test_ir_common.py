"""The helpers every op family's spec and inference share (``cudnn_py/ir/inference.py``)."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.ir.inference import int_at_least

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


def test_a_set_output_of_other_dims_is_refused_naming_the_op_node_and_the_expected_dims():
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([2, 3, 4], name="x")
    g.transpose(x, [2, 0, 1], name="t").set_output(True).set_dim([4, 3, 2])
    with pytest.raises(ValueError, match=r"transpose node 't'.*dims \[4, 3, 2\] differ from X's \[2, 3, 4\] "
                                         r"permuted by \[2, 0, 1\]: \[4, 2, 3\]"):
        g.validate_ir()
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([2, 3, 4], name="x")
    g.concatenate([x, x], 1, name="cat").set_output(True).set_dim([2, 3, 4])
    with pytest.raises(ValueError, match=r"concatenate node 'cat'.*differ from the concatenation's \[2, 6, 4\]"):
        g.validate_ir()
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([1, 4, 4], name="x")
    g.diagonal_band_mask(x, right_bound=0, name="band").set_output(True).set_dim([1, 4, 3])
    with pytest.raises(ValueError, match=r"diagonal_band_mask node 'band'.*differ from the input's \[1, 4, 4\]"):
        g.validate_ir()


def _layernorm_backward():
    g = cudnn.pygraph(io_data_type=F)
    dy, x, s = g.tensor([2, 3, 4], name="dy"), g.tensor([2, 3, 4], name="x"), g.tensor([1, 3, 4], name="s")
    m, iv = g.tensor([2, 1, 1], name="m"), g.tensor([2, 1, 1], name="iv")
    grads = g.layernorm_backward(dy, x, s, m, iv, name="lnb")
    for t in grads:
        t.set_output(True)
    return g, grads


def test_a_norm_gradient_of_other_dims_than_its_operand_is_refused():
    g, (_, ds, _) = _layernorm_backward()
    ds.set_dim([1, 3, 5])
    with pytest.raises(ValueError, match=r"layernorm_backward node 'lnb'.*dims \[1, 3, 5\] differ from scale's "
                                         r"\[1, 3, 4\]"):
        g.validate_ir()
    g, (dx, ds, db) = _layernorm_backward()
    g.validate_ir()
    assert list(dx.dim) == [2, 3, 4] and list(ds.dim) == list(db.dim) == [1, 3, 4]


def test_nhwc_strides_are_channels_last_and_row_major_below_rank_3():
    from cudnn_py.ir.layout import nhwc_strides

    assert nhwc_strides([2, 3, 4, 5]) == [60, 1, 15, 3]
    assert nhwc_strides([2, 3, 4, 5, 6]) == [360, 1, 90, 18, 3]
    assert nhwc_strides([3, 4]) == [4, 1]


def test_an_adopted_output_exists_only_when_its_argument_is_given():
    from cudnn_py.ir.spec import Output

    out = Output("RNG_DUMP", adopt="rng_dump")
    assert out.given == ("rng_dump",)
    assert not out.exists({}, {"rng_dump": None}) and not out.exists({}, None)
    assert out.exists({}, {"rng_dump": object()})
    assert Output("D", given=("d",), adopt="d").given == ("d",)  # not twice


def test_the_ir_has_one_integer_check():
    """Op arguments (int_at_least) and tensor attributes (set_alignment, ...) go through tensor.checked_int: the
    same refusals, the same words."""
    from cudnn_py.ir.tensor import checked_int

    assert checked_int(np.int32(5), 0, 8) == 5 and checked_int(-7) == -7
    for value, low, high, error, message in [(8, 0, 8, ValueError, r"needs an int in \[0, 8\), got 8"),
                                             (-1, 0, None, ValueError, "needs an int >= 0, got -1"),
                                             (2**31, None, 2**31, ValueError, r"needs an int < 2\*\*31, got 2147483648"),
                                             (1.0, None, None, TypeError, "needs an int, got 1.0")]:
        with pytest.raises(error, match=f"^{message}$"):
            checked_int(value, low, high)
    with pytest.raises(TypeError, match=r"^tensor alignment needs an int in \[1, 2\*\*31\), got True$"):
        cudnn.pygraph(io_data_type=F).tensor([4], name="x").set_alignment(True)
    with pytest.raises(TypeError, match=r"^needs an int >= 1, got True$"):
        int_at_least(1)(True)
