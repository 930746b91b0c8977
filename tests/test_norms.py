"""layernorm / rmsnorm forward on the CPU: the classic return lists (statistics only in TRAINING), inference and
the scale/bias shape checks, deviceless lowering to one NORM_FORWARD, and the float64 reference against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.engines.reference import ReferenceEngine

H, F, D = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.DOUBLE
P = cudnn.norm_forward_phase
RNG = np.random.default_rng(3)


def test_layernorm_training_returns_stats_and_lowers_deviceless():
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([4, 64, 1, 1], [64, 1, 64, 64], name="x")
    s = g.tensor([1, 64, 1, 1], [64, 1, 64, 64], name="scale")
    b = g.tensor([1, 64, 1, 1], [64, 1, 64, 64], name="bias")
    eps = g.tensor([1, 1, 1, 1], data_type=F, is_pass_by_value=True, name="eps")
    y, mean, inv = g.layernorm(P.TRAINING, x, s, b, eps, name="ln")
    for t in (y, mean, inv):
        t.set_output(True)
    g.validate()
    assert (y.name, mean.name, inv.name) == ("ln::Y", "ln::MEAN", "ln::INV_VARIANCE")
    assert list(mean.dim) == [4, 1, 1, 1] and mean.data_type is F
    attrs = g.session.lowered.operations[0].attributes
    assert g.session.lowered.operations[0].kind.name == "CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR"
    assert attrs["CUDNN_ATTR_OPERATION_NORM_FWD_MODE"].endswith("CUDNN_LAYER_NORM")
    assert attrs["CUDNN_ATTR_OPERATION_NORM_FWD_PHASE"].endswith("CUDNN_NORM_FWD_TRAINING")


def test_inference_has_no_statistics_and_rmsnorm_bias_is_optional():
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x, s = g.tensor([4, 64, 1, 1], [64, 1, 64, 64], name="x"), g.tensor([1, 64, 1, 1], [64, 1, 64, 64], name="s")
    y, inv = g.rmsnorm(P.INFERENCE, x, s, None, 1e-5)
    assert inv is None and g.nodes[0].outputs.keys() == {"Y"}
    y.set_output(True)
    g.validate()


def test_shape_checks():
    g = cudnn.pygraph(io_data_type=H)
    x = g.tensor([4, 64, 1, 1], name="x")
    g.layernorm(P.TRAINING, x, g.tensor([1, 64, 1, 1], name="s"), g.tensor([1, 32, 1, 1], name="b"), 1e-5,
                name="ln")[0].set_output(True)
    with pytest.raises(ValueError, match=r"layernorm node 'ln': tensor 'b'.*do not fit X"):
        g.validate_ir()
    with pytest.raises(TypeError, match="norm_forward_phase"):
        g.layernorm(P.NOT_SET, x, x, x, 1e-5)


@pytest.mark.parametrize("method", ["layernorm", "rmsnorm"])
def test_reference_matches_numpy(method):
    xs = RNG.standard_normal((3, 8, 2, 2))
    ss, bs = RNG.standard_normal((1, 8, 2, 2)), RNG.standard_normal((1, 8, 2, 2))
    g = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine()])
    x, s, b = g.tensor([3, 8, 2, 2], name="x"), g.tensor([1, 8, 2, 2], name="s"), g.tensor([1, 8, 2, 2], name="b")
    outs = getattr(g, method)(P.TRAINING, x, s, b, 1e-3)
    for t in outs:
        t.set_output(True)
    g.validate_ir()
    bufs = {t: np.zeros(tuple(t.dim)) for t in outs}
    g.execute({x: xs, s: ss, b: bs, **bufs})
    axes = (1, 2, 3)
    mean = xs.mean(axis=axes, keepdims=True) if method == "layernorm" else 0.0
    inv = 1 / np.sqrt(((xs - mean) ** 2).mean(axis=axes, keepdims=True) + 1e-3)
    np.testing.assert_allclose(bufs[outs[0]], (xs - mean) * inv * ss + bs, rtol=1e-12)
    np.testing.assert_allclose(bufs[outs[-1]], inv, rtol=1e-12)
    if method == "layernorm":
        np.testing.assert_allclose(bufs[outs[1]], mean, rtol=1e-12)


def _forward(method, xs, ss, bs, eps=1e-3):
    axes = (1, 2)
    mean = xs.mean(axis=axes, keepdims=True) if method == "layernorm" else 0.0
    inv = 1 / np.sqrt(((xs - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    return (xs - mean) * inv * ss + bs, mean, inv


@pytest.mark.parametrize("method", ["layernorm", "rmsnorm"])
def test_backward_reference_matches_finite_differences(method):
    xs, dys = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 3, 4))
    ss, bs = RNG.standard_normal((1, 3, 4)), RNG.standard_normal((1, 3, 4))
    _, mean, inv = _forward(method, xs, ss, bs)
    g = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine()])
    dy, x, s = g.tensor([2, 3, 4], name="dy"), g.tensor([2, 3, 4], name="x"), g.tensor([1, 3, 4], name="s")
    iv = g.tensor([2, 1, 1], name="iv")
    if method == "layernorm":
        m = g.tensor([2, 1, 1], name="m")
        outs = g.layernorm_backward(dy, x, s, m, iv)
        feed = {m: np.broadcast_to(mean, (2, 1, 1)).copy()}
    else:
        outs = g.rmsnorm_backward(dy, x, s, iv, True)
        feed = {}
    for t in outs:
        t.set_output(True)
    g.validate_ir()
    bufs = {t: np.zeros(tuple(t.dim)) for t in outs}
    g.execute({dy: dys, x: xs, s: ss, iv: inv, **feed, **bufs})
    dx, dscale, dbias = (bufs[t] for t in outs)

    def loss(xv=xs, sv=ss, bv=bs):
        return float((_forward(method, xv, sv, bv)[0] * dys).sum())

    h = 1e-6
    for arr, grad, name in ((xs, dx, "x"), (ss, dscale, "scale"), (bs, dbias, "bias")):
        num = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            up, dn = arr.copy(), arr.copy()
            up[idx] += h
            dn[idx] -= h
            kw = {"x": "xv", "scale": "sv", "bias": "bv"}[name]
            num[idx] = (loss(**{kw: up}) - loss(**{kw: dn})) / (2 * h)
        np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-7, err_msg=name)


def test_batchnorm_inference_and_backward_lower_deviceless():
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([4, 64, 8, 8], name="x")
    stats = [g.tensor([1, 64, 1, 1], [64, 1, 64, 64], data_type=F, name=n) for n in ("m", "iv", "s", "b")]
    y = g.batchnorm_inference(x, *stats).set_output(True)
    # decomposed into pointwise ops (cuDNN's NORM_FORWARD has no batch-norm INFERENCE engine), whose per-channel
    # broadcast over three axes hits the pointwise-broadcast erratum of cuDNN >= 9.19: refused, not wrong
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"erratum pointwise-broadcast.*sub_0.*'m'"):
        g.validate()
    assert list(y.dim) == [4, 64, 8, 8]
    g2 = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x2, dy2 = g2.tensor([4, 64, 1, 1], [64, 1, 64, 64], name="x"), g2.tensor([4, 64, 1, 1], [64, 1, 64, 64], name="dy")
    s2 = g2.tensor([1, 64, 1, 1], [64, 1, 64, 64], name="s")
    iv2 = g2.tensor([4, 1, 1, 1], data_type=F, name="iv")
    dx, ds, db = g2.rmsnorm_backward(dy2, x2, s2, iv2, False)
    assert db is None
    dx.set_output(True)
    ds.set_output(True)
    g2.validate()
    kinds = [d.kind.name for d in g2.session.lowered.operations]
    assert kinds == ["CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR"]


def test_batchnorm_inference_before_drelu_dbn_lowers_as_the_frontend_does():
    """BN inference -> relu_backward -> batchnorm_backward (the official test_bn_infer_drelu_dbn): cuDNN's fused dBN
    engine matches the frontend's form only, one NORM_FORWARD in phase INFERENCE reading MEAN / INV_VARIANCE (the
    pointwise decomposition found no engine on the H200 / 9.19), and DScale / DBias with the frontend's NHWC
    per-channel strides (dbn.h), not the scale's."""
    n, c, h, w = 4, 16, 56, 56
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    nhwc = [h * w * c, 1, w * c, c]
    x, dy = g.tensor([n, c, h, w], nhwc, data_type=H, name="x"), g.tensor([n, c, h, w], nhwc, data_type=H, name="dy")
    scale, bias, mean, inv = (g.tensor([1, c, 1, 1], [c, 1, 1, 1], data_type=F, name=k) for k in ("s", "b", "m", "iv"))
    y = g.batchnorm_inference(input=x, mean=mean, inv_variance=inv, scale=scale, bias=bias)
    grad = g.relu_backward(loss=dy, input=y)
    grad.set_data_type(H)
    dx, dscale, dbias = g.batchnorm_backward(grad=grad, input=x, scale=scale, mean=mean, inv_variance=inv, name="DBN")
    dx.set_output(True)
    dscale.set_output(True).set_data_type(F)
    dbias.set_output(True).set_data_type(F)
    g.validate()
    ops = g.session.lowered.operations
    assert [d.kind.name for d in ops] == ["CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR",
                                          "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR",
                                          "CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR"]
    fwd = ops[0].attributes
    assert fwd["CUDNN_ATTR_OPERATION_NORM_FWD_MODE"].endswith("CUDNN_BATCH_NORM")
    assert fwd["CUDNN_ATTR_OPERATION_NORM_FWD_PHASE"].endswith("CUDNN_NORM_FWD_INFERENCE")
    assert {"CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC", "CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC"} <= fwd.keys()
    by_uid = g.session.lowered.tensors.by_uid
    for t in (dscale, dbias):
        assert by_uid[t.uid].get("CUDNN_ATTR_TENSOR_STRIDES") == [c, 1, c, c]


@pytest.mark.parametrize("program", [False, True])
def test_batchnorm_inference_reference_and_its_decomposition(program):
    g = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine(program=program)])
    x = g.tensor([2, 8, 3, 3], name="x")
    stats = [g.tensor([1, 8, 1, 1], name=n) for n in ("m", "iv", "s", "b")]
    y = g.batchnorm_inference(x, *stats).set_output(True)
    g.validate_ir()
    xs = RNG.standard_normal((2, 8, 3, 3))
    vals = [RNG.standard_normal((1, 8, 1, 1)) for _ in stats]
    out = np.full((2, 8, 3, 3), np.nan)
    g.execute({x: xs, **dict(zip(stats, vals)), y: out})
    m, iv, sc, b = vals
    np.testing.assert_allclose(out, (xs - m) * iv * sc + b, rtol=1e-12)


def test_batchnorm_inference_refuses_a_set_output_of_other_dims():
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([4, 64, 8, 8], name="x")
    stats = [g.tensor([1, 64, 1, 1], [64, 1, 64, 64], data_type=F, name=n) for n in ("m", "iv", "s", "b")]
    g.batchnorm_inference(x, *stats, name="bn").set_output(True).set_dim([4, 64, 8, 4])
    with pytest.raises(ValueError, match=r"batchnorm_inference.*bn.*\[4, 64, 8, 4\] differ from X"):
        g.validate()


def test_instancenorm_normalizes_each_sample_and_channel():
    xs = RNG.standard_normal((2, 3, 4, 5))
    ss, bs = RNG.standard_normal((1, 3, 1, 1)), RNG.standard_normal((1, 3, 1, 1))
    g = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine()])
    x, s, b = g.tensor([2, 3, 4, 5], name="x"), g.tensor([1, 3, 1, 1], name="s"), g.tensor([1, 3, 1, 1], name="b")
    y, mean, inv = g.instancenorm(P.TRAINING, x, s, b, 1e-3)
    for t in (y, mean, inv):
        t.set_output(True)
    g.validate_ir()
    assert list(mean.dim) == [2, 3, 1, 1]
    bufs = {t: np.zeros(tuple(t.dim)) for t in (y, mean, inv)}
    g.execute({x: xs, s: ss, b: bs, **bufs})
    m = xs.mean(axis=(2, 3), keepdims=True)
    iv = 1 / np.sqrt(((xs - m) ** 2).mean(axis=(2, 3), keepdims=True) + 1e-3)
    np.testing.assert_allclose(bufs[y], (xs - m) * iv * ss + bs, rtol=1e-12)
    np.testing.assert_allclose(bufs[mean], m, rtol=1e-12)
    g2 = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x2 = g2.tensor([2, 32, 8, 8], [2048, 1, 256, 32], name="x")
    s2, b2 = (g2.tensor([1, 32, 1, 1], [32, 1, 32, 32], data_type=F, name=n) for n in ("s", "b"))
    outs = g2.instancenorm(P.TRAINING, x2, s2, b2, 1e-5)
    for t in outs:
        t.set_output(True)
    g2.validate()  # one NORM_FORWARD, deviceless


def _instancenorm(xs, ss, bs, eps=1e-3):
    mean = xs.mean(axis=(2, 3), keepdims=True)
    inv = 1 / np.sqrt(((xs - mean) ** 2).mean(axis=(2, 3), keepdims=True) + eps)
    return (xs - mean) * inv * ss + bs, mean, inv


def test_instancenorm_backward_reference_matches_finite_differences_and_lowers_deviceless():
    xs, dys = RNG.standard_normal((2, 3, 2, 3)), RNG.standard_normal((2, 3, 2, 3))
    ss, bs = RNG.standard_normal((1, 3, 1, 1)), RNG.standard_normal((1, 3, 1, 1))
    _, mean, inv = _instancenorm(xs, ss, bs)
    g = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine()])
    dy, x = g.tensor([2, 3, 2, 3], name="dy"), g.tensor([2, 3, 2, 3], name="x")
    s, m, iv = g.tensor([1, 3, 1, 1], name="s"), g.tensor([2, 3, 1, 1], name="m"), g.tensor([2, 3, 1, 1], name="iv")
    outs = g.instancenorm_backward(dy, x, s, m, iv)
    for t in outs:
        t.set_output(True)
    g.validate_ir()
    assert [list(t.dim) for t in outs] == [[2, 3, 2, 3], [1, 3, 1, 1], [1, 3, 1, 1]]
    bufs = {t: np.zeros(tuple(t.dim)) for t in outs}
    g.execute({dy: dys, x: xs, s: ss, m: mean, iv: inv, **bufs})
    grads = dict(zip(("x", "s", "b"), (bufs[t] for t in outs)))
    h = 1e-6
    for name, arr in (("x", xs), ("s", ss), ("b", bs)):
        num = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            vals = {"x": xs, "s": ss, "b": bs}
            up, dn = arr.copy(), arr.copy()
            up[idx] += h
            dn[idx] -= h
            f_up = (_instancenorm(**{"xs": vals["x"], "ss": vals["s"], "bs": vals["b"], f"{name}s": up})[0] * dys).sum()
            f_dn = (_instancenorm(**{"xs": vals["x"], "ss": vals["s"], "bs": vals["b"], f"{name}s": dn})[0] * dys).sum()
            num[idx] = (f_up - f_dn) / (2 * h)
        np.testing.assert_allclose(grads[name], num, rtol=1e-5, atol=1e-7, err_msg=name)
    # statistics of the wrong shape (layer-norm statistics) are refused with the tensor named
    g_bad = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine()])
    args = [g_bad.tensor([2, 3, 2, 3], name=n) for n in ("dy", "x")]
    bad = g_bad.instancenorm_backward(*args, g_bad.tensor([1, 3, 1, 1], name="s"), g_bad.tensor([2, 1, 1, 1], name="m"),
                                      g_bad.tensor([2, 3, 1, 1], name="iv"))
    for t in bad:
        t.set_output(True)
    with pytest.raises(ValueError, match=r"tensor 'm' .*not the statistics' \[2, 3, 1, 1\]"):
        g_bad.validate_ir()
    # without the statistics (the classic defaults) the IR says what is missing before cuDNN's finalize would
    g_none = cudnn.pygraph(io_data_type=D, compute_data_type=D)
    args = [g_none.tensor([2, 3, 2, 3], name=n) for n in ("dy", "x")]
    for t in g_none.instancenorm_backward(*args, g_none.tensor([1, 3, 1, 1], name="s")):
        t.set_output(True)
    with pytest.raises(ValueError, match="instancenorm_backward .*needs the forward's mean and inv_variance"):
        g_none.validate()
    # on cuDNN: one NORM_BACKWARD in INSTANCE_NORM mode, finalized deviceless
    g2 = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    dy2, x2 = (g2.tensor([2, 32, 8, 8], [2048, 1, 256, 32], name=n) for n in ("dy", "x"))
    s2 = g2.tensor([1, 32, 1, 1], [32, 1, 32, 32], data_type=F, name="s")
    m2, iv2 = (g2.tensor([2, 32, 1, 1], [32, 1, 32, 32], data_type=F, name=n) for n in ("m", "iv"))
    for t in g2.instancenorm_backward(dy2, x2, s2, m2, iv2):
        t.set_output(True)
    g2.validate()
    op = g2.session.lowered.operations[0]
    assert op.kind.name == "CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR"
    assert op.attributes["CUDNN_ATTR_OPERATION_NORM_BWD_MODE"].endswith("CUDNN_INSTANCE_NORM")


def _adaln(xs, ss, bs, eps=1e-3):
    mean = xs.mean(axis=2, keepdims=True)
    inv = 1 / np.sqrt(((xs - mean) ** 2).mean(axis=2, keepdims=True) + eps)
    return (xs - mean) * inv * ss + bs, mean, inv


def test_adalayernorm_per_sample_scale_forward_backward_and_lowering():
    xs, dys = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 3, 4))
    ss, bs = RNG.standard_normal((2, 1, 4)), RNG.standard_normal((2, 1, 4))  # per sample: the batch axis is kept
    g = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine()])
    x, s, b = g.tensor([2, 3, 4], name="x"), g.tensor([2, 1, 4], name="s"), g.tensor([2, 1, 4], name="b")
    y, mean, inv = g.adalayernorm(P.TRAINING, x, s, b, 1e-3)
    for t in (y, mean, inv):
        t.set_output(True)
    g.validate_ir()
    assert list(mean.dim) == [2, 3, 1]
    bufs = {t: np.zeros(tuple(t.dim)) for t in (y, mean, inv)}
    g.execute({x: xs, s: ss, b: bs, **bufs})
    y_ref, m_ref, iv_ref = _adaln(xs, ss, bs)
    np.testing.assert_allclose(bufs[y], y_ref, rtol=1e-12)
    np.testing.assert_allclose(bufs[mean], m_ref, rtol=1e-12)
    np.testing.assert_allclose(bufs[inv], iv_ref, rtol=1e-12)

    gb = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine()])
    dy, xb, sb = gb.tensor([2, 3, 4], name="dy"), gb.tensor([2, 3, 4], name="x"), gb.tensor([2, 1, 4], name="s")
    mb, ivb = gb.tensor([2, 3, 1], name="m"), gb.tensor([2, 3, 1], name="iv")
    outs = gb.adalayernorm_backward(dy, xb, sb, mb, ivb)
    for t in outs:
        t.set_output(True)
    gb.validate_ir()
    assert [list(t.dim) for t in outs] == [[2, 3, 4], [2, 1, 4], [2, 1, 4]]
    gbufs = {t: np.zeros(tuple(t.dim)) for t in outs}
    gb.execute({dy: dys, xb: xs, sb: ss, mb: m_ref, ivb: iv_ref, **gbufs})
    h = 1e-6
    for k, (name, arr) in enumerate((("xs", xs), ("ss", ss), ("bs", bs))):
        num = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            up, dn = arr.copy(), arr.copy()
            up[idx] += h
            dn[idx] -= h
            base = {"xs": xs, "ss": ss, "bs": bs}
            num[idx] = ((_adaln(**{**base, name: up})[0] - _adaln(**{**base, name: dn})[0]) * dys).sum() / (2 * h)
        np.testing.assert_allclose(gbufs[outs[k]], num, rtol=1e-5, atol=1e-7, err_msg=name)

    # on cuDNN 9.28 (>= 9.9.0, the frontend's gate): one NORM_FORWARD / NORM_BACKWARD in ADA_LAYER_NORM mode
    for backward in (False, True):
        g2 = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
        x2 = g2.tensor([2, 128, 64], name="x")
        s2 = g2.tensor([2, 1, 64], data_type=F, name="s")
        if backward:
            stats = [g2.tensor([2, 128, 1], data_type=F, name=n) for n in ("m", "iv")]
            outs2 = g2.adalayernorm_backward(g2.tensor([2, 128, 64], name="dy"), x2, s2, *stats)
        else:
            eps = g2.tensor([1, 1, 1], data_type=F, is_pass_by_value=True, name="eps")
            outs2 = g2.adalayernorm(P.TRAINING, x2, s2, g2.tensor([2, 1, 64], data_type=F, name="b"), eps)
        for t in outs2:
            t.set_output(True)
        g2.validate()
        op = g2.session.lowered.operations[0]
        assert op.attributes[f"CUDNN_ATTR_OPERATION_NORM_{'BWD' if backward else 'FWD'}_MODE"].endswith(
            "CUDNN_ADA_LAYER_NORM")


def test_adalayernorm_gate_names_the_frontends_minimum(monkeypatch):
    from cudnn_py.backend import versions

    monkeypatch.setattr(versions, "runtime_version", lambda: 90800)  # has the enum (9.7) but not the frontend's 9.9
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x, s = g.tensor([2, 128, 64], name="x"), g.tensor([2, 1, 64], data_type=F, name="s")
    eps = g.tensor([1, 1, 1], data_type=F, is_pass_by_value=True, name="eps")
    for t in g.adalayernorm(P.TRAINING, x, s, None, eps):
        if t is not None:
            t.set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError) as e:
        g.validate()
    assert "9.9.0" in str(e.value) and "adalayernorm" in str(e.value)


def test_genstats_per_channel_sums_and_lowering():
    xs = RNG.standard_normal((2, 3, 4, 5))
    g = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine()])
    x = g.tensor([2, 3, 4, 5], name="x")
    total, sq = g.genstats(x, name="gs")
    assert (total.name, sq.name) == ("gs_sum_output", "gs_sq_sum_output")  # the frontend's labels
    total.set_output(True)
    sq.set_output(True)
    g.validate_ir()
    assert list(total.dim) == [1, 3, 1, 1]
    bufs = {t: np.zeros((1, 3, 1, 1)) for t in (total, sq)}
    g.execute({x: xs, **bufs})
    np.testing.assert_allclose(bufs[total].reshape(-1), [xs[:, c].sum() for c in range(3)], rtol=1e-12)
    np.testing.assert_allclose(bufs[sq].reshape(-1), [(xs[:, c] ** 2).sum() for c in range(3)], rtol=1e-12)
    bad = cudnn.pygraph(io_data_type=D, compute_data_type=D)
    s_bad, _ = bad.genstats(bad.tensor([2, 3, 4, 5], name="x"))
    s_bad.set_dim([1, 4, 1, 1])
    with pytest.raises(ValueError, match=r"\[1, 4, 1, 1\] differ from the per-channel dims for X.*: \[1, 3, 1, 1\]"):
        bad.validate_ir()
    # on cuDNN 9.28: conv-output statistics as the frontend's conv_genstats sample builds them, deviceless
    g2 = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x2 = g2.tensor([4, 64, 16, 16], [16384, 1, 1024, 64], name="x")
    outs = g2.genstats(x2)
    for t in outs:
        t.set_output(True).set_data_type(F)
    g2.validate()
    op = g2.session.lowered.operations[0]
    assert op.kind.name == "CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR"
    assert op.attributes["CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC"].endswith("CUDNN_DATA_HALF")


def test_batchnorm_training_running_statistics_and_backward():
    xs = RNG.standard_normal((4, 3, 2, 5))
    ss, bs = RNG.standard_normal((1, 3, 1, 1)), RNG.standard_normal((1, 3, 1, 1))
    rm, rv = RNG.standard_normal((1, 3, 1, 1)), RNG.uniform(0.5, 2.0, (1, 3, 1, 1))
    g = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine()])
    x, s, b = g.tensor([4, 3, 2, 5], name="x"), g.tensor([1, 3, 1, 1], name="s"), g.tensor([1, 3, 1, 1], name="b")
    trm, trv = g.tensor([1, 3, 1, 1], name="rm"), g.tensor([1, 3, 1, 1], name="rv")
    outs = g.batchnorm(x, s, b, trm, trv, 1e-3, 0.1, name="bn")
    assert [t.name for t in outs] == ["bn::Y", "bn::MEAN", "bn::INV_VARIANCE", "bn::NEXT_RUNNING_MEAN",
                                      "bn::NEXT_RUNNING_VAR"]
    for t in outs:
        t.set_output(True)
    g.validate_ir()
    bufs = {t: np.zeros(tuple(t.dim)) for t in outs}
    g.execute({x: xs, s: ss, b: bs, trm: rm, trv: rv, **bufs})
    mean = xs.mean(axis=(0, 2, 3), keepdims=True)
    var = xs.var(axis=(0, 2, 3), keepdims=True)
    inv = 1 / np.sqrt(var + 1e-3)
    want = [(xs - mean) * inv * ss + bs, mean, inv, 0.9 * rm + 0.1 * mean, 0.9 * rv + 0.1 * var * 40 / 39]
    for t, w in zip(outs, want):
        np.testing.assert_allclose(bufs[t], w, rtol=1e-12, err_msg=t.name)

    # without the running inputs there are no running outputs; a partial set is refused, not dropped
    g_plain = cudnn.pygraph(io_data_type=D, compute_data_type=D)
    xp = g_plain.tensor([4, 3, 2, 5], name="x")
    sp, bp = g_plain.tensor([1, 3, 1, 1], name="s"), g_plain.tensor([1, 3, 1, 1], name="b")
    assert g_plain.batchnorm(xp, sp, bp, None, None, 1e-3, None)[3:] == [None, None]
    g_part = cudnn.pygraph(io_data_type=D, compute_data_type=D)
    xq = g_part.tensor([4, 3, 2, 5], name="x")
    sq, bq, rq = (g_part.tensor([1, 3, 1, 1], name=n) for n in ("s", "b", "rm"))
    for t in g_part.batchnorm(xq, sq, bq, rq, None, 1e-3, 0.1):
        if t is not None:
            t.set_output(True)
    with pytest.raises(ValueError, match="need in_running_mean, in_running_var and momentum together"):
        g_part.validate_ir()

    # backward against finite differences of the forward's Y
    dys = RNG.standard_normal(xs.shape)
    gb = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[ReferenceEngine()])
    dy, xb, sb = gb.tensor([4, 3, 2, 5], name="dy"), gb.tensor([4, 3, 2, 5], name="x"), gb.tensor([1, 3, 1, 1], name="s")
    mb, ivb = gb.tensor([1, 3, 1, 1], name="m"), gb.tensor([1, 3, 1, 1], name="iv")
    grads = gb.batchnorm_backward(dy, xb, sb, mb, ivb)
    for t in grads:
        t.set_output(True)
    gb.validate_ir()
    gbufs = {t: np.zeros(tuple(t.dim)) for t in grads}
    gb.execute({dy: dys, xb: xs, sb: ss, mb: mean, ivb: inv, **gbufs})

    def y_of(xv, sv, bv):
        m = xv.mean(axis=(0, 2, 3), keepdims=True)
        return (xv - m) / np.sqrt(xv.var(axis=(0, 2, 3), keepdims=True) + 1e-3) * sv + bv

    h = 1e-6
    for k, arr in enumerate((xs, ss, bs)):
        num = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            up, dn = [xs, ss, bs], [xs, ss, bs]
            up[k], dn[k] = arr.copy(), arr.copy()
            up[k][idx] += h
            dn[k][idx] -= h
            num[idx] = ((y_of(*up) - y_of(*dn)) * dys).sum() / (2 * h)
        np.testing.assert_allclose(gbufs[grads[k]], num, rtol=1e-5, atol=1e-7, err_msg=str(k))


def test_batchnorm_training_and_backward_lower_deviceless():
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([4, 32, 16, 16], [8192, 1, 512, 32], name="x")
    per_c = [1, 32, 1, 1], [32, 1, 32, 32]
    s, b, rm, rv = (g.tensor(*per_c, data_type=F, name=n) for n in ("s", "b", "rm", "rv"))
    eps, mom = (g.tensor([1, 1, 1, 1], data_type=F, is_pass_by_value=True, name=n) for n in ("eps", "mom"))
    for t in g.batchnorm(x, s, b, rm, rv, eps, mom):
        t.set_output(True)
    g.validate()
    attrs = g.session.lowered.operations[0].attributes
    for attr in ("EXP_AVG_FACTOR_DESC", "INPUT_RUNNING_MEAN_DESC", "OUTPUT_RUNNING_VAR_DESC"):
        assert f"CUDNN_ATTR_OPERATION_NORM_FWD_{attr}" in attrs
    gb = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    dy, xb = (gb.tensor([4, 32, 16, 16], [8192, 1, 512, 32], name=n) for n in ("dy", "x"))
    sb, mb, ivb = (gb.tensor(*per_c, data_type=F, name=n) for n in ("s", "m", "iv"))
    for t in gb.batchnorm_backward(dy, xb, sb, mb, ivb):
        t.set_output(True)
    gb.validate()
    assert gb.session.lowered.operations[0].attributes["CUDNN_ATTR_OPERATION_NORM_BWD_MODE"].endswith(
        "CUDNN_BATCH_NORM")


def test_batchnorm_peer_stats_are_lowered_and_refused_by_the_reference():
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([4, 32, 16, 16], [8192, 1, 512, 32], name="x")
    s, b = (g.tensor([1, 32, 1, 1], [32, 1, 32, 32], data_type=F, name=n) for n in ("s", "b"))
    eps = g.tensor([1, 1, 1, 1], data_type=F, is_pass_by_value=True, name="eps")
    peers = [g.tensor([2, 128, 1, 1], [128, 1, 128, 128], data_type=F, name=f"peer{i}") for i in range(2)]
    outs = g.batchnorm(x, s, b, None, None, eps, None, peers)
    for t in outs[:3]:
        t.set_output(True)
    g.validate()
    descs = g.session.lowered.operations[0].attributes["CUDNN_ATTR_OPERATION_NORM_FWD_PEER_STAT_DESCS"]
    assert len(descs) == 2
    engine = ReferenceEngine()
    gr = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[engine])
    xr = gr.tensor([2, 3, 2, 2], name="x")
    sr, br = gr.tensor([1, 3, 1, 1], name="s"), gr.tensor([1, 3, 1, 1], name="b")
    outs = gr.batchnorm(xr, sr, br, None, None, 1e-3, None, [gr.tensor([2, 12, 1, 1], name="peer")])
    for t in outs[:3]:
        t.set_output(True)
    gr.validate_ir()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="reference engine: batchnorm: peer statistics "
                                                                 "come from other GPUs.*node"):
        engine.check_support(gr)  # at check_support, so that the Router routes around it
    from cudnn_py.engines.router import Router

    assert [p.engine_id for p in Router().plan(gr, [engine])] == [Router().plan(gr, [])[0].engine_id]  # cuDNN only


def test_forward_norms_take_the_classic_and_the_1_32_positional_orders():
    """1.23 (pybind): layernorm(phase, input, scale, bias, epsilon); the 1.32 module: the tensors first, the phase
    after them or by keyword. All three bind to the same node."""
    nodes = []
    for call in ("classic", "tensors_first", "phase_keyword"):
        g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
        x, s = g.tensor([4, 64, 1, 1], [64, 1, 64, 64], name="x"), g.tensor([1, 64, 1, 1], [64, 1, 64, 64], name="s")
        b, e = g.tensor([1, 64, 1, 1], [64, 1, 64, 64], name="b"), g.tensor([1, 1, 1, 1], name="eps")
        if call == "classic":
            outs = g.layernorm(P.TRAINING, x, s, b, e, name="ln")
        elif call == "tensors_first":
            outs = g.layernorm(x, s, b, e, P.TRAINING, name="ln")
        else:
            outs = g.layernorm(x, s, b, e, norm_forward_phase=P.TRAINING, name="ln")
        node = g.nodes[0]
        nodes.append(({p: t.name for p, t in node.inputs.items()}, node.params["norm_forward_phase"],
                      [t is not None for t in outs]))
    assert nodes[0] == nodes[1] == nodes[2] == ({"X": "x", "SCALE": "s", "BIAS": "b", "EPSILON": "eps"},
                                                P.TRAINING, [True, True, True])
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x, s = g.tensor([4, 64, 1, 1], [64, 1, 64, 64], name="x"), g.tensor([1, 64, 1, 1], [64, 1, 64, 64], name="s")
    y, inv = g.rmsnorm(x, s, None, 1e-5, P.INFERENCE)  # 1.32 order, no bias
    assert inv is None and "BIAS" not in g.nodes[0].inputs
