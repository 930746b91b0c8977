"""Convolution fprop / dgrad / wgrad on the CPU: the classic overloads, inference and the shape checks the official
frontend skips, deviceless validation against the real cuDNN (what the descriptors carry), and the float64
reference against direct loops (fprop) and the adjoint identities (dgrad, wgrad). GPU runs: tests/test_gpu_conv.py."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.enums import convolution_mode

H, F, D = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.DOUBLE
RNG = np.random.default_rng(11)


def nhwc(dims):
    n, c, *sp = dims
    strides, acc = {}, 1
    for axis in [1] + list(range(len(dims) - 1, 1, -1)) + [0]:
        strides[axis], acc = acc, acc * dims[axis]
    return [strides[i] for i in range(len(dims))]


def direct_fprop(x, w, pre, stride, dil, out, groups, flip=False):
    if flip:
        w = w[(slice(None), slice(None)) + (slice(None, None, -1),) * (w.ndim - 2)]
    y = np.zeros(out)
    kg, cg = w.shape[0] // groups, w.shape[1]
    for n, k, *o in itertools.product(*(range(d) for d in out)):
        g, acc = k // kg, 0.0
        for c, *r in itertools.product(range(cg), *(range(d) for d in w.shape[2:])):
            pos = [oi * s + ri * d - p for oi, ri, s, d, p in zip(o, r, stride, dil, pre)]
            if all(0 <= q < x.shape[2 + i] for i, q in enumerate(pos)):
                acc += x[(n, g * cg + c, *pos)] * w[(k, c, *r)]
        y[(n, k, *o)] = acc
    return y


CASES = [  # (x dims, w dims, pre, post, stride, dilation)
    ([2, 4, 7, 6], [6, 2, 3, 2], [1, 0], [1, 0], [2, 1], [1, 2]),  # grouped (2 groups), strided, dilated
    ([1, 3, 5, 5], [3, 1, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1]),  # depthwise
    ([2, 2, 4, 5, 4], [3, 2, 2, 3, 2], [0, 1, 1], [1, 0, 1], [1, 2, 1], [1, 1, 2]),  # 3-D
]


@pytest.mark.parametrize("case", CASES, ids=["grouped", "depthwise", "3d"])
@pytest.mark.parametrize("mode", [convolution_mode.CROSS_CORRELATION, convolution_mode.CONVOLUTION])
def test_reference_matches_direct_loops_and_adjoints(case, mode):
    xd, wd, pre, post, stride, dil = case
    groups = xd[1] // wd[1]
    kw = dict(pre_padding=pre, post_padding=post, stride=stride, dilation=dil, convolution_mode=mode)

    def run(build, inputs):
        g = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine()])
        ins, out = build(g)
        g.validate_ir()
        result = np.zeros(tuple(out.get_dim()))
        g.execute({**dict(zip(ins, inputs)), out: result})
        return result

    x, w = RNG.standard_normal(xd), RNG.standard_normal(wd)

    def fprop(g):
        X, W = g.tensor(xd, name="x"), g.tensor(wd, name="w")
        return [X, W], g.conv_fprop(X, W, **kw).set_output(True)

    y = run(fprop, [x, w])
    ref = direct_fprop(np.pad(x, [(0, 0), (0, 0)] + list(zip(pre, post))), w, [0] * len(pre), stride, dil,
                       y.shape, groups, flip=mode is convolution_mode.CONVOLUTION)
    np.testing.assert_allclose(y, ref, atol=1e-12)
    dy = RNG.standard_normal(y.shape)

    def dgrad(g):
        DY, W = g.tensor(list(y.shape), name="dy"), g.tensor(wd, name="w")
        return [DY, W], g.conv_dgrad(DY, W, **kw, out_dims=xd).set_output(True)

    def wgrad(g):
        X, DY = g.tensor(xd, name="x"), g.tensor(list(y.shape), name="dy")
        return [X, DY], g.conv_wgrad(X, DY, **kw, out_dims=wd).set_output(True)

    dx, dw = run(dgrad, [dy, w]), run(wgrad, [x, dy])
    assert abs((y * dy).sum() - (x * dx).sum()) < 1e-9  # <conv(x, w), dy> = <x, dgrad(dy, w)>
    assert abs((y * dy).sum() - (w * dw).sum()) < 1e-9  # = <w, wgrad(x, dy)>


def test_overloads_inference_and_defaults():
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([4, 16, 8, 8], nhwc([4, 16, 8, 8]), name="x")
    w = g.tensor([32, 16, 3, 3], nhwc([32, 16, 3, 3]), name="w")
    y = g.conv_fprop(x, w, padding=[1, 1], stride=[2, 2], dilation=[1, 1], name="c")
    y2 = g.conv_fprop(x, w, [0, 0], [1, 1], [1, 1], [1, 1])  # positional: the pre/post overload
    y.set_output(True)
    y2.set_output(True)
    g.validate()
    assert y.name == "c::Y" and list(y.dim) == [4, 32, 4, 4] and list(y.stride) == nhwc([4, 32, 4, 4])
    assert list(y2.dim) == [4, 32, 7, 7]
    p = g.nodes[0].params
    assert (p["pre_padding"], p["post_padding"], p["convolution_mode"]) == ([1, 1], [1, 1],
                                                                            convolution_mode.CROSS_CORRELATION)
    conv = g.session.lowered.operations[0].attributes["CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC"]
    assert conv.endswith("CONVOLUTION")  # the CONVOLUTION descriptor is referenced
    kinds = {d.kind.name for d in g.session.lowered.operations}
    assert kinds == {"CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR"}


def test_dgrad_and_wgrad_lower_deviceless():
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    dy = g.tensor([4, 32, 8, 8], nhwc([4, 32, 8, 8]), name="dy")
    w = g.tensor([32, 16, 3, 3], nhwc([32, 16, 3, 3]), name="w")
    g.conv_dgrad(dy, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], out_dims=[4, 16, 8, 8]).set_output(True)
    g.validate()
    g2 = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x = g2.tensor([4, 16, 8, 8], nhwc([4, 16, 8, 8]), name="x")
    dy2 = g2.tensor([4, 32, 8, 8], nhwc([4, 32, 8, 8]), name="dy")
    g2.conv_wgrad(x, dy2, padding=[1, 1], stride=[1, 1], dilation=[1, 1], out_dims=[32, 16, 3, 3]).set_output(True)
    g2.validate()
    assert g.session.lowered.operation_graph.finalized and g2.session.lowered.operation_graph.finalized


def test_checks_the_official_frontend_skips():
    g = cudnn.pygraph(io_data_type=H)
    x, w = g.tensor([4, 16, 8, 8], name="x"), g.tensor([32, 5, 3, 3], name="w")
    g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="c").set_output(True)
    with pytest.raises(ValueError, match=r"conv_fprop node 'c': tensor 'w' \(uid \d+\): input channels 5 do not "
                                         r"divide the image's channels 16"):
        g.validate()
    g = cudnn.pygraph(io_data_type=H)
    g.conv_fprop(g.tensor([4, 16, 8, 8], name="x"), g.tensor([32, 16, 3, 3], name="w"), padding=[1, 1],
                 stride=[1, 1], dilation=[1, 1], out_dims=[4, 32, 9, 9], name="c").set_output(True)
    with pytest.raises(ValueError, match=r"do not match the convolution's \[4, 32, 8, 8\]"):
        g.validate()
    g = cudnn.pygraph(io_data_type=H)
    g.conv_dgrad(g.tensor([4, 32, 8, 8], name="dy"), g.tensor([32, 16, 3, 3], name="w"), padding=[1, 1],
                 stride=[1, 1], dilation=[1, 1], name="d").set_output(True)
    with pytest.raises(ValueError, match="output dimension inferencing is not possible"):
        g.validate()
    g = cudnn.pygraph(io_data_type=H)
    with pytest.raises(ValueError, match="stride, dilation must be given"):
        g.conv_fprop(g.tensor([4, 16, 8, 8]), g.tensor([32, 16, 3, 3]), padding=[1, 1])
    with pytest.raises(ValueError, match="not both"):
        g.conv_fprop(g.tensor([4, 16, 8, 8]), g.tensor([32, 16, 3, 3]), padding=[1, 1], pre_padding=[1, 1],
                     stride=[1, 1], dilation=[1, 1])
    with pytest.raises(ValueError, match="one value per spatial dimension"):
        g.conv_fprop(g.tensor([4, 16, 8, 8]), g.tensor([32, 16, 3, 3]), padding=[1], stride=[1, 1],
                     dilation=[1, 1])
