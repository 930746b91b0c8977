"""``score_mod`` / ``score_mod_bprop`` in ``sdpa_backward`` on the CPU: the composite decomposition
(``ReferenceEngine(program=True)``) and the definition (``ReferenceEngine()``) against an independent numpy softcap
attention and its hand-derived gradients (checked by central differences), the rules, and the deviceless
finalization of the graph that reaches cuDNN."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.ir.passes import PassOptions, prepare

H, F, D = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.DOUBLE
CAP = 3.0


class Softcap:
    """score -> cap · tanh(score / cap); its bprop reads the pre-tanh value its forward built (the frontend's
    pattern: one object, forward then backward on the same graph)."""

    def __init__(self, cap=CAP):
        self.cap = cap
        self.pre_tanh = None

    def forward(self, graph, score):
        self.pre_tanh = graph.div(score, self.cap)
        return graph.mul(graph.tanh(self.pre_tanh), self.cap)

    def backward(self, graph, d_score):
        return graph.tanh_backward(d_score, self.pre_tanh)


def softcap_attention(q, k, v, d_o, scale, cap=CAP, bias=None):
    """O, Stats and (dQ, dK, dV[, dBias]) of softmax(cap · tanh(scale · Q Kᵀ / cap) + bias) V, by hand (GQA: kv
    heads repeated, then their gradients summed per group; dBias summed over the axes the bias broadcasts)."""
    group = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    pre = scale * q @ np.swapaxes(kr, -1, -2) / cap
    s = cap * np.tanh(pre) + (0.0 if bias is None else bias)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ vr
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True)) + s.max(-1, keepdims=True)
    d_v = np.swapaxes(p, -1, -2) @ d_o
    d_p = d_o @ np.swapaxes(vr, -1, -2)
    d_biased = p * (d_p - (d_p * p).sum(-1, keepdims=True))
    d_s = d_biased * (1.0 - np.tanh(pre) ** 2)
    d_q = scale * d_s @ kr
    d_k = scale * np.swapaxes(d_s, -1, -2) @ q

    def per_kv_head(x):
        return x.reshape(x.shape[0], k.shape[1], group, *x.shape[2:]).sum(axis=2)
    grads = (d_q, per_kv_head(d_k), per_kv_head(d_v))
    if bias is not None:
        grads += (d_biased.sum(axis=0, keepdims=True),)  # a (1, h, s_q, s_kv) bias
    return o, lse, grads


def _graph(io=D):
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=F, compute_data_type=F)


def _backward_graph(g, shape, scale, mod, with_bias=False):
    b, h_q, h_k, s_q, s_kv, d = shape
    q, k, v = (g.tensor(dims, name=n) for n, dims in (("q", [b, h_q, s_q, d]), ("k", [b, h_k, s_kv, d]),
                                                     ("v", [b, h_k, s_kv, d])))
    o, d_o = g.tensor([b, h_q, s_q, d], name="o"), g.tensor([b, h_q, s_q, d], name="dO")
    stats = g.tensor([b, h_q, s_q, 1], data_type=F, name="stats")
    kw, ins = {}, [q, k, v, o, d_o, stats]
    if with_bias:
        kw["bias"], kw["dBias"] = g.tensor([1, h_q, s_q, s_kv], name="bias"), g.tensor([1, h_q, s_q, s_kv])
        ins.append(kw["bias"])
    grads = g.sdpa_backward(q, k, v, o, d_o, stats, attn_scale=scale, score_mod=mod.forward,
                            score_mod_bprop=mod.backward, name="bwd", **kw)
    grads = list(grads) + ([kw["dBias"]] if with_bias else [])
    for t in grads:
        t.set_output(True)
    return ins, grads


SHAPES = [(1, 2, 2, 5, 7, 8), (2, 4, 2, 6, 9, 16)]


@pytest.mark.parametrize("with_bias", [False, True], ids=["softcap", "softcap-bias"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_softcap_backward_decomposition_and_definition_agree_with_the_hand_gradients(shape, with_bias):
    """With a bias, dBias is the gradient of the biased scores: taken before score_mod_bprop."""
    b, h_q, h_k, s_q, s_kv, d = shape
    rng = np.random.default_rng(sum(shape))
    q, k, v = (rng.standard_normal(x) * 2 for x in ((b, h_q, s_q, d), (b, h_k, s_kv, d), (b, h_k, s_kv, d)))
    d_o = rng.standard_normal((b, h_q, s_q, d))
    bias = rng.standard_normal((1, h_q, s_q, s_kv)) if with_bias else None
    scale = 1 / math.sqrt(d)
    o, lse, expected = softcap_attention(q, k, v, d_o, scale, bias=bias)
    values = (q, k, v, o, d_o, lse) + ((bias,) if with_bias else ())
    for program in (False, True):
        g = _graph()
        ins, grads = _backward_graph(g, shape, scale, Softcap(), with_bias)
        g.register_backend(ReferenceEngine(program=program))
        g.validate_ir()
        bufs = [np.full(t.dim, np.nan) for t in grads]
        g.execute({**dict(zip(ins, values)), **dict(zip(grads, bufs))})
        assert len(bufs) == len(expected)
        for name, got, want in zip(("dQ", "dK", "dV", "dBias"), bufs, expected):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"{name}, program={program}")


def test_the_hand_gradients_are_the_softcap_attentions():
    """The oracle above, by central differences of its own forward (so the test cannot pass on a shared
    mistake of the decomposition and the definition)."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(x) for x in ((1, 2, 3, 8), (1, 1, 4, 8), (1, 1, 4, 8)))
    d_o = rng.standard_normal((1, 2, 3, 8))
    _, _, grads = softcap_attention(q, k, v, d_o, 0.7)
    eps = 1e-6
    for i, (x, grad) in enumerate(zip((q, k, v), grads)):
        fd = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            up, down = [y.copy() for y in (q, k, v)], [y.copy() for y in (q, k, v)]
            up[i][idx] += eps
            down[i][idx] -= eps
            fd[idx] = (np.sum(softcap_attention(*up, d_o, 0.7)[0] * d_o)
                       - np.sum(softcap_attention(*down, d_o, 0.7)[0] * d_o)) / (2 * eps)
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8, err_msg=f"grad {i}")


def test_score_mod_backward_rules():
    g = _graph()
    q, k, v = g.tensor([1, 2, 4, 8]), g.tensor([1, 2, 6, 8]), g.tensor([1, 2, 6, 8])
    o, d_o, stats = g.tensor([1, 2, 4, 8]), g.tensor([1, 2, 4, 8]), g.tensor([1, 2, 4, 1], data_type=F)
    mod = Softcap()
    with pytest.raises(ValueError, match="score_mod needs score_mod_bprop"):
        g.sdpa_backward(q, k, v, o, d_o, stats, score_mod=mod.forward)
    with pytest.raises(ValueError, match="score_mod_bprop needs score_mod"):
        g.sdpa_backward(q, k, v, o, d_o, stats, score_mod_bprop=mod.backward)
    with pytest.raises(TypeError, match="callable"):
        g.sdpa_backward(q, k, v, o, d_o, stats, score_mod=mod.forward, score_mod_bprop=2.0)
    gc = _graph()  # accepted by the builder, not supported at validate (the frontend's rule and moment)
    for t in gc.sdpa_backward(gc.tensor([1, 2, 4, 8]), gc.tensor([1, 2, 6, 8]), gc.tensor([1, 2, 6, 8]),
                              gc.tensor([1, 2, 4, 8]), gc.tensor([1, 2, 4, 8]), gc.tensor([1, 2, 4, 1], data_type=F),
                              score_mod=mod.forward, score_mod_bprop=mod.backward, use_causal_mask=True):
        t.set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="score_mod excludes a causal mask"):
        gc.validate_ir()
    g2 = _graph()
    q2, k2, v2 = g2.tensor([1, 2, 4, 8]), g2.tensor([1, 2, 6, 8]), g2.tensor([1, 2, 6, 8])
    args = (g2.tensor([1, 2, 4, 8]), g2.tensor([1, 2, 4, 8]), g2.tensor([1, 2, 4, 1], data_type=F))
    grads = g2.sdpa_backward(q2, k2, v2, *args, score_mod=mod.forward, name="bad",
                             score_mod_bprop=lambda graph, d_s: graph.reciprocal(q2))
    for t in grads:
        t.set_output(True)
    g2.validate_ir()
    with pytest.raises(ValueError, match=r"sdpa_backward node 'bad': score_mod_bprop returned dims \[1, 2, 4, 8\]"):
        prepare(g2, PassOptions(available=lambda f, at_least=0: False))  # the decompose pass runs the callbacks


def test_softcap_backward_finalizes_deviceless_with_the_bprop_before_the_scale():
    g = _graph(H)
    mod = Softcap()
    _, grads = _backward_graph(g, (1, 2, 2, 64, 128, 64), 0.125, mod)
    g.validate()  # the composite backward with both callbacks finalizes on cuDNN 9.28 without a device
    program = prepare(g, PassOptions(available=lambda f, at_least=0: versions.available(f)
                                     and versions.runtime_version() >= at_least))
    modes = [n.params.get("mode") for n in program.nodes if n.op == "pointwise"]
    pw = "CUDNN_POINTWISE_"
    assert modes.index(pw + "TANH_FWD") < modes.index(pw + "TANH_BWD")
    # dS = bprop(dS) · attn_scale: the scale multiply follows the TANH_BWD
    assert modes[modes.index(pw + "TANH_BWD") + 1] == pw + "MUL"
    assert [t.dim for t in grads] == [[1, 2, 64, 64], [1, 2, 128, 64], [1, 2, 128, 64]]
