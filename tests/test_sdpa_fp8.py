"""Per-tensor FP8 attention on the CPU: the classic surface of sdpa_fp8 / sdpa_fp8_backward, the validation rules,
deviceless finalization on cuDNN 9.28 and the decompositions in the frontend's order, and the decompositions
(``ReferenceEngine(program=True)``) against the float64 definition (``ReferenceEngine()``), itself checked against
an independent numpy FP8 attention with its own E4M3 table."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.families.attention_fp8 import reference as fp8_reference
from cudnn_py.ir.passes import PassOptions, prepare

E4, E5, F, H, D, I32 = (cudnn.data_type.FP8_E4M3, cudnn.data_type.FP8_E5M2, cudnn.data_type.FLOAT,
                        cudnn.data_type.HALF, cudnn.data_type.DOUBLE, cudnn.data_type.INT32)
FWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
BWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s", "descale_dP", "scale_s",
              "scale_dQ", "scale_dK", "scale_dV", "scale_dP")


def e4m3_values() -> np.ndarray:
    """Every finite E4M3 value from its bit patterns (bias 7, subnormals, no infinities, S.1111.111 is NaN)."""
    out = []
    for bits in range(256):
        sign, exp, man = -1.0 if bits & 0x80 else 1.0, (bits >> 3) & 0xF, bits & 0x7
        if exp == 0xF and man == 0x7:
            continue
        out.append(sign * (man / 8 * 2.0 ** -6 if exp == 0 else (1 + man / 8) * 2.0 ** (exp - 7)))
    return np.unique(out)


E4M3 = e4m3_values()


def to_e4m3(x: np.ndarray) -> np.ndarray:
    """Nearest E4M3 value (saturating), by table lookup: independent of the reference's rounding."""
    x = np.clip(x, E4M3[0], E4M3[-1])
    i = np.clip(np.searchsorted(E4M3, x), 1, len(E4M3) - 1)
    lo, hi = E4M3[i - 1], E4M3[i]
    return np.where(x - lo <= hi - x, lo, hi)


def graph():
    return cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)


def qkv(g, b=2, h_q=4, h_k=2, s_q=12, s_kv=20, d=16, d_v=None, dt=E4):
    return (g.tensor([b, h_q, s_q, d], data_type=dt, name="q"), g.tensor([b, h_k, s_kv, d], data_type=dt, name="k"),
            g.tensor([b, h_k, s_kv, d_v or d], data_type=dt, name="v"))


def scales(g, names):
    return [g.tensor([1, 1, 1, 1], data_type=F, name=n) for n in names]


def running(feature, at_least=0):
    return versions.available(feature) and versions.runtime_version() >= at_least


# ---- surface ---------------------------------------------------------------------------------------------------
def test_forward_returns_o_stats_and_both_amax_with_the_frontend_names():
    g = graph()
    q, k, v = qkv(g, s_q=40, s_kv=72, d=64)
    o, stats, amax_s, amax_o = g.sdpa_fp8(q, k, v, *scales(g, FWD_SCALES), False, 0.125, name="attn")  # is_inference, attn_scale
    assert [t.name for t in (o, stats, amax_s, amax_o)] == ["attn::O", "attn::Stats", "attn::Amax_S", "attn::Amax_O"]
    o.set_output(True).set_data_type(E4)
    g.validate_ir()
    assert o.dim == [2, 4, 40, 64] and stats.dim == [2, 4, 40, 1]
    assert amax_s.dim == amax_o.dim == [1, 1, 1, 1]
    assert amax_s.data_type is amax_o.data_type is stats.data_type is F
    out = g.sdpa_fp8(q, g.tensor([2, 2, 72, 64], data_type=E4), g.tensor([2, 2, 72, 64], data_type=E4),
                     *scales(g, FWD_SCALES), generate_stats=False)
    assert len(out) == 4 and out[1] is None and out[2] is not None


def test_backward_returns_the_gradients_and_four_amax():
    g = graph()
    q, k, v = qkv(g, d=32)
    o, d_o = g.tensor([2, 4, 12, 32], data_type=E4, name="o"), g.tensor([2, 4, 12, 32], data_type=E4, name="dO")
    stats = g.tensor([2, 4, 12, 1], data_type=F, name="stats")
    out = g.sdpa_fp8_backward(q, k, v, o, d_o, stats, *scales(g, BWD_SCALES), 0.125, name="bwd")
    assert [t.name for t in out] == ["bwd::dQ", "bwd::dK", "bwd::dV", "bwd::Amax_dQ", "bwd::Amax_dK", "bwd::Amax_dV",
                                     "bwd::Amax_dP"]
    for t in out[:3]:
        t.set_output(True).set_data_type(E4)
    g.validate_ir()
    assert out[1].dim == [2, 2, 20, 32] and out[6].dim == [1, 1, 1, 1] and out[6].data_type is F


def test_the_fp8_argument_names():
    g = graph()
    q, k, v = qkv(g)
    sc = scales(g, FWD_SCALES)
    g.sdpa_fp8(q, k, v, *sc, generate_stats=True, sliding_window=4, use_causal_mask=True)
    g.sdpa_fp8(q, k, v, *sc, generate_stats=True, left_bound=4, right_bound=0)
    with pytest.raises(TypeError, match="sliding_window_length"):
        g.sdpa_fp8(q, k, v, *sc, generate_stats=True, sliding_window_length=4)
    with pytest.raises(TypeError, match="score_mod"):
        g.sdpa_fp8(q, k, v, *sc, generate_stats=True, score_mod=lambda gr, s: s)
    # the frontend's precedence, accepted by the builder: left_bound over sliding_window, causal over right_bound
    o = g.sdpa_fp8(q, k, v, *sc, generate_stats=True, sliding_window=3, left_bound=5, use_causal_mask=True,
                   right_bound=1)[0]
    node = next(n for n in g._nodes if o in n.outputs.values())
    assert (node.params["diagonal_band_left_bound"], node.params["diagonal_band_right_bound"]) == (5, 0)
    with pytest.raises(ValueError, match="sdpa_fp8\\(\\): give exactly one of generate_stats and is_inference"):
        g.sdpa_fp8(q, k, v, *sc)
    g2 = graph()  # paging (no longer refused) follows sdpa's rules
    q2, k2, v2 = qkv(g2)
    o2 = g2.sdpa_fp8(q2, k2, v2, *scales(g2, FWD_SCALES), generate_stats=True,
                     paged_attention_k_table=g2.tensor([2, 1, 4, 1], data_type=I32))[0]
    o2.set_output(True).set_data_type(E4)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="paged attention needs seq_len_q and seq_len_kv"):
        g2.validate_ir()
    with pytest.raises(TypeError, match="sdpa_fp8_backward\\(\\): dropout must be"):
        g.sdpa_fp8_backward(q, k, v, q, q, g.tensor([2, 4, 12, 1]), *scales(g, BWD_SCALES), dropout=0.1)
    with pytest.raises(TypeError, match="sliding_window"):  # the FP8 backward has no sliding window argument
        g.sdpa_fp8_backward(q, k, v, q, q, g.tensor([2, 4, 12, 1]), *scales(g, BWD_SCALES), sliding_window=2)


# ---- validation ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case, match", [
    ("half_q", r"tensor 'q'.*must be FP8_E4M3 or FP8_E5M2"),
    ("head_dim", r"tensor 'q'.*head dim 24 must be a multiple of 16"),
    ("head_dim_large", r"tensor 'q'.*head dim 272 .* at most 256"),
    ("scale_dims", r"tensor 'descale_q'.*needs dims \[1, 1, 1, 1\]"),
    ("scale_type", r"tensor 'scale_o'.*must be FLOAT, got HALF"),
    ("bias", r"sdpa_fp8 node .*no bias"),
    ("amax_dims", r"tensor 'sdpa_fp8::Amax_O'.*amax output has dims"),
    ("o_type", r"tensor 'sdpa_fp8::O'.*must be FP8_E4M3 / FP8_E5M2.*got FLOAT"),
    ("kv_heads", r"sdpa_fp8 node.*tensor 'k'.*3 heads do not divide q's 4 heads"),
    ("head_dims_differ", r"tensor 'k'.*head dim 32 differs from q's 16"),
])
def test_forward_validation_names_the_tensor_and_rule(case, match):
    g = graph()
    d = {"head_dim": 24, "head_dim_large": 272}.get(case, 16)
    q, k, v = qkv(g, d=d, dt=H if case == "half_q" else E4)
    if case == "kv_heads":
        k = g.tensor([2, 3, 20, 16], data_type=E4, name="k")
    if case == "head_dims_differ":
        k = g.tensor([2, 2, 20, 32], data_type=E4, name="k")
    sc = scales(g, FWD_SCALES)
    if case == "scale_dims":
        sc[0] = g.tensor([2, 1, 1, 1], data_type=F, name="descale_q")
    if case == "scale_type":
        sc[5] = g.tensor([1, 1, 1, 1], data_type=H, name="scale_o")
    kw = {"bias": g.tensor([1, 4, 12, 20], data_type=F, name="bias")} if case == "bias" else {}
    o, _, _, amax_o = g.sdpa_fp8(q, k, v, *sc, generate_stats=True, name="sdpa_fp8", **kw)
    o.set_output(True).set_data_type(F if case == "o_type" else E4)
    if case == "amax_dims":
        amax_o.set_dim([1, 1, 1, 2])
    not_supported = case in ("head_dim", "head_dim_large", "bias", "kv_heads")  # the frontend's GRAPH_NOT_SUPPORTED
    with pytest.raises(cudnn.cudnnGraphNotSupportedError if not_supported else ValueError, match=match):
        g.validate_ir()


def test_backward_validation():
    g = graph()
    q, k, v = qkv(g)
    o, d_o = g.tensor([2, 4, 12, 16], data_type=E4, name="o"), g.tensor([2, 4, 12, 16], data_type=H, name="dO")
    g.sdpa_fp8_backward(q, k, v, o, d_o, g.tensor([2, 4, 12, 1], data_type=F), *scales(g, BWD_SCALES))
    with pytest.raises(ValueError, match=r"sdpa_fp8_backward node.*tensor 'dO'.*must be FP8"):
        g.validate_ir()
    g2 = graph()
    q, k, v = qkv(g2)
    o, d_o = g2.tensor([2, 4, 12, 16], data_type=E4, name="o"), g2.tensor([2, 4, 12, 16], data_type=E4, name="dO")
    g2.sdpa_fp8_backward(q, k, v, o, d_o, g2.tensor([2, 4, 12, 1], data_type=H, name="st"), *scales(g2, BWD_SCALES))
    with pytest.raises(ValueError, match=r"tensor 'st'.*statistics are FLOAT"):
        g2.validate_ir()
    g3 = graph()
    q, k, v = qkv(g3)
    o, d_o = g3.tensor([2, 4, 12, 16], data_type=E4, name="o"), g3.tensor([2, 4, 11, 16], data_type=E4, name="dO")
    g3.sdpa_fp8_backward(q, k, v, o, d_o, g3.tensor([2, 4, 12, 1], data_type=F), *scales(g3, BWD_SCALES))
    with pytest.raises(ValueError, match=r"sdpa_fp8_backward node.*tensor 'dO'.*not the forward's"):
        g3.validate_ir()


# ---- what reaches cuDNN ----------------------------------------------------------------------------------------
def _forward_graph(causal=True, padding=False, h_k=2):
    g = graph()
    q, k, v = qkv(g, b=2, h_q=4, h_k=h_k, s_q=64, s_kv=64, d=64)
    kw = dict(use_causal_mask=causal)
    if padding:
        kw.update(use_padding_mask=True, seq_len_q=g.tensor([2, 1, 1, 1], data_type=I32),
                  seq_len_kv=g.tensor([2, 1, 1, 1], data_type=I32))
    o, st, amax_s, amax_o = g.sdpa_fp8(q, k, v, *scales(g, FWD_SCALES), generate_stats=True, attn_scale=0.125,
                                       name="fp8", **kw)
    o.set_output(True).set_data_type(E4)
    for t in (st, amax_s, amax_o):
        t.set_output(True)
    return g, (q, k, v), o


@pytest.mark.parametrize("causal, padding", [(False, False), (True, False), (True, True)])
def test_forward_finalizes_deviceless_in_the_frontends_order(causal, padding):
    g, (q, k, v), o = _forward_graph(causal, padding)
    g.validate()  # the composite operation graph, finalized without a device by cuDNN 9.28
    nodes = prepare(g, PassOptions(available=running)).nodes
    methods = [n.spec.method for n in nodes]
    head = ["matmul", "mul", "mul", "mul"]  # bmm1, attn_scale, descale_q, descale_k
    tail = ["reduction", "sub", "exp", "reduction", "log", "add", "div",  # softmax with its stats branch
            "reduction", "mul",  # Amax_S, scale_s
            "matmul", "mul", "mul", "reduction", "mul"]  # MatmulFP8: bmm2, descale_s, descale_v, Amax_O, scale_o
    assert methods[:4] == head and methods[-len(tail):] == tail
    amax_s, s8, bmm2, amax_o = nodes[-7], nodes[-6], nodes[-5], nodes[-2]
    assert amax_s.params["mode"] is amax_o.params["mode"] is cudnn.reduction_mode.AMAX
    assert s8.outputs["OUT_0"].data_type is E4 and bmm2.inputs["A"] is s8.outputs["OUT_0"]  # bmm2's A in Q's type
    assert nodes[-1].outputs["OUT_0"].uid == o.uid
    if padding:
        assert {"M_OVERRIDE", "K_OVERRIDE"} <= set(bmm2.inputs)
    assert k.dim == [2, 2, 64, 64]  # the user's K is untouched (the program's copy is transposed)


def _backward_graph(h_k=2, causal=True, d=64):
    g = graph()
    q, k, v = qkv(g, b=2, h_q=4, h_k=h_k, s_q=64, s_kv=64, d=d)
    o = g.tensor([2, 4, 64, d], data_type=E4, name="o")
    d_o = g.tensor([2, 4, 64, d], data_type=E4, name="dO")
    st = g.tensor([2, 4, 64, 1], data_type=F, name="stats")
    out = g.sdpa_fp8_backward(q, k, v, o, d_o, st, *scales(g, BWD_SCALES), attn_scale=0.125,
                              use_causal_mask=causal, name="fp8_bwd")
    for t in out[:3]:
        t.set_output(True).set_data_type(E4)
    for t in out[3:]:
        t.set_output(True)
    return g, out


@pytest.mark.parametrize("h_k", [4, 2])
def test_backward_finalizes_deviceless_in_the_frontends_order(h_k):
    g, out = _backward_graph(h_k)
    g.validate()
    nodes = prepare(g, PassOptions(available=running)).nodes
    methods = [n.spec.method for n in nodes]
    assert methods[:4] == ["mul", "reduction", "mul", "mul"]  # D = rowsum(dO ∘ O) · descale_dO · descale_o
    views = [i for i, m in enumerate(methods) if m == "attention_view"]
    assert len(views) == 3  # S_transpose, K back, dP_T
    matmuls = [n for n in nodes if n.op == "matmul"]
    assert len(matmuls) == 5  # Q·Kᵀ, S8ᵀ·dO, dO·Vᵀ, dP8·K, dP8ᵀ·Q
    s8_t, dp8, dp8_t = matmuls[1].inputs["A"], matmuls[3].inputs["A"], matmuls[4].inputs["A"]
    assert s8_t.data_type is E4 and dp8.data_type is dp8_t.data_type is E4
    assert matmuls[3].inputs["B"].data_type is F  # K viewed back from Kᵀ in FLOAT, as the frontend's API log has it
    amax = [n for n in nodes if n.op == "reduction" and n.params["mode"] is cudnn.reduction_mode.AMAX]
    assert {n.outputs["Y"].uid for n in amax} == {t.uid for t in out[3:]}
    grouped = [n for n in nodes if n.spec.method == "grouped_reduction"]
    assert len(grouped) == (0 if h_k == 4 else 2)  # GQA: dV and dK summed per kv head inside their MatmulFP8


def test_backward_dsink_is_the_reduction_into_dsink():
    """dSink as the frontend builds it (sdpa_fp8_bwd.h; its API log on cuDNN 9.19 and 9.28): REDUCE_ADD of
    exp(sink - Stats) · D straight into the user's dSink, the engine negating it; no NEG of ours after it (see
    tests/test_sdpa.py::test_backward_dsink_is_the_reduction_into_dsink)."""
    g = graph()
    q, k, v = qkv(g, b=2, h_q=4, h_k=4, s_q=64, s_kv=64, d=128)
    o, d_o = (g.tensor([2, 4, 64, 128], data_type=E4, name=n) for n in ("o", "dO"))
    st = g.tensor([2, 4, 64, 1], data_type=F, name="stats")
    sink, d_sink = (g.tensor([1, 4, 1, 1], data_type=F, name=n) for n in ("sink", "dSink"))
    out = g.sdpa_fp8_backward(q, k, v, o, d_o, st, *scales(g, BWD_SCALES), attn_scale=0.125, use_causal_mask=True,
                              sink_token=sink, dSink_token=d_sink)
    for t in out[:3]:
        t.set_output(True).set_data_type(E4)
    for t in out[3:] + [d_sink]:
        t.set_output(True)
    g.validate()
    nodes = prepare(g, PassOptions(available=running)).nodes
    producer = {t.uid: n for n in nodes for t in n.outputs.values()}
    red = producer[d_sink.uid]
    assert red.op == "reduction" and red.params["mode"] is cudnn.reduction_mode.ADD
    assert list(red.inputs["X"].dim) == [2, 4, 64, 1]
    assert not any(d_sink.uid in {t.uid for t in n.inputs.values()} for n in nodes)
    mul = producer[red.inputs["X"].uid]
    assert [producer[mul.inputs[x].uid].spec.method for x in ("IN_0", "IN_1")] == ["exp", "mul"]  # D descaled


def test_fp8_attention_errata():
    from types import SimpleNamespace

    from cudnn_py.plans import errata

    g, _, _ = _forward_graph()
    g.validate_ir()
    program = SimpleNamespace(source=g, nodes=[])
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="sdpa-fp8-9.10.0.*validate_sdpa_support_surface"):
        errata.check(program, 91000)
    assert "sdpa-fp8-9.10.0" not in {e.id for e in errata.applicable(91900)}
    # the composite causal mask's GEN_INDEX is the attention pattern, not the batched-matmul-epilogue erratum
    assert "fp8::" in errata._decomposed_attention(program)


# ---- the decompositions against the definition, and the definition against numpy -----------------------------
SHAPES = [(1, 1, 1, 16, 16, 16, 16), (2, 4, 2, 12, 20, 16, 32), (1, 2, 1, 9, 33, 32, 16)]
OPTIONS = [dict(), dict(causal=True), dict(seq=True), dict(seq=True, causal=True), dict(dropout=True),
           dict(window=3, causal=True), dict(sink=True), dict(alibi=True, causal=True), dict(fn=True),
           dict(bottom_right=True)]


def softcap(graph, score):
    return graph.mul(graph.tanh(graph.div(score, 4.0)), 4.0)
FWD_VALUES = dict(descale_q=0.5, descale_k=0.75, descale_v=1.25, descale_s=1 / 448, scale_s=448.0, scale_o=2.0)
BWD_VALUES = dict(descale_q=0.5, descale_k=0.75, descale_v=1.25, descale_o=1.0, descale_dO=0.5, descale_s=1 / 448,
                  descale_dP=1 / 64, scale_s=448.0, scale_dQ=2.0, scale_dK=0.5, scale_dV=1.0, scale_dP=64.0)


def draw(shape, seed):
    """FP8-representable q, k, v, o, dO; sequence lengths (one full batch), a dropout mask, sink logits."""
    b, h_q, h_k, s_q, s_kv, d, d_v = shape
    rng = np.random.default_rng(seed)
    lens = (rng.integers(1, s_q + 1, b), rng.integers(1, s_kv + 1, b))
    lens[0][0], lens[1][0] = s_q, s_kv
    return {"q": to_e4m3(2 * rng.standard_normal((b, h_q, s_q, d))),
            "k": to_e4m3(rng.standard_normal((b, h_k, s_kv, d))),
            "v": to_e4m3(rng.standard_normal((b, h_k, s_kv, d_v))),
            "o": to_e4m3(rng.standard_normal((b, h_q, s_q, d_v))),
            "dO": to_e4m3(2 * rng.standard_normal((b, h_q, s_q, d_v))),
            "lens": lens, "mask": (rng.random((b, h_q, s_q, s_kv)) > 0.25).astype(float),
            "sink": rng.standard_normal((1, h_q, 1, 1))}


def _options(g, opt, data, feeds, b, backward=False):
    kw = {}
    if opt.get("seq"):
        sq_t, skv_t = g.tensor([b, 1, 1, 1], data_type=I32), g.tensor([b, 1, 1, 1], data_type=I32)
        feeds[sq_t], feeds[skv_t] = data["lens"][0].reshape(b, 1, 1, 1), data["lens"][1].reshape(b, 1, 1, 1)
        kw.update(use_padding_mask=True, seq_len_q=sq_t, seq_len_kv=skv_t)
    if opt.get("dropout"):
        m_t, sc_t = g.tensor(list(data["mask"].shape), name="dm"), g.tensor([1, 1, 1, 1], name="ds")
        feeds[m_t], feeds[sc_t] = data["mask"], np.full((1, 1, 1, 1), 4 / 3)
        kw["dropout"] = (m_t, sc_t)
        if backward:
            inv_t = g.tensor([1, 1, 1, 1], name="ds_inv")
            feeds[inv_t] = np.full((1, 1, 1, 1), 0.75)
            kw["dropout"] = (m_t, sc_t, inv_t)
    if opt.get("causal"):
        kw["use_causal_mask"] = True
    if opt.get("bottom_right"):
        kw["use_causal_mask_bottom_right"] = True
    if opt.get("alibi"):
        kw["use_alibi_mask"] = True
    if opt.get("fn"):
        kw["fn"] = softcap
    if opt.get("window"):
        kw["sliding_window"] = opt["window"]
    if opt.get("sink"):
        sink = g.tensor([1, data["sink"].shape[1], 1, 1], name="sink")
        feeds[sink] = data["sink"]
        kw["sink_token"] = sink
    return kw


def _forward_case(shape, opt, data):
    b, h_q, h_k, s_q, s_kv, d, d_v = shape
    g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
    q, k, v = qkv(g, b, h_q, h_k, s_q, s_kv, d, d_v)
    sc = scales(g, FWD_SCALES)
    feeds = {q: data["q"], k: data["k"], v: data["v"]}
    feeds.update({t: np.full((1, 1, 1, 1), FWD_VALUES[t.name]) for t in sc})
    kw = _options(g, opt, data, feeds, b)
    outs = g.sdpa_fp8(q, k, v, *sc, generate_stats=True, attn_scale=1 / math.sqrt(d), **kw)
    for t in outs:
        t.set_output(True)
    outs[0].set_data_type(E4)  # the buffers are float64: the reference writes its unrounded values
    return g, feeds, outs


def _backward_case(shape, opt, data, stats, values=None):
    values = values or BWD_VALUES
    b, h_q, h_k, s_q, s_kv, d, d_v = shape
    g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
    q, k, v = qkv(g, b, h_q, h_k, s_q, s_kv, d, d_v)
    o_t = g.tensor([b, h_q, s_q, d_v], data_type=E4, name="o")
    do_t = g.tensor([b, h_q, s_q, d_v], data_type=E4, name="dO")
    st_t = g.tensor([b, h_q, s_q, 1], data_type=F, name="stats")
    sc = scales(g, BWD_SCALES)
    feeds = {q: data["q"], k: data["k"], v: data["v"], o_t: data["o"], do_t: data["dO"],
             st_t: np.nan_to_num(stats, neginf=0.0)}  # a fully masked row: P = exp(-inf - 0) = 0
    feeds.update({t: np.full((1, 1, 1, 1), values[t.name]) for t in sc})
    kw = _options(g, opt, data, feeds, b, backward=True)
    extra = []
    if opt.get("sink"):
        extra.append(g.tensor([1, h_q, 1, 1], name="dSink"))
        kw["dSink_token"] = extra[0]
    outs = g.sdpa_fp8_backward(q, k, v, o_t, do_t, st_t, *sc, attn_scale=1 / math.sqrt(d), **kw) + extra
    for t in outs:
        t.set_output(True)
    for t in outs[:3]:
        t.set_data_type(E4)
    return g, feeds, outs


def _execute(g, feeds, outs, engine):
    g.register_backend(engine)
    g.validate_ir()  # the output dims are inferred
    bufs = [np.full(t.dim, np.nan) for t in outs]
    g.execute({**feeds, **dict(zip(outs, bufs))})
    return bufs


def _valid_rows(shape, opt, data, stats):
    valid = np.isfinite(stats)  # fully masked rows (padding) are undefined in the composite
    if opt.get("seq"):
        for n in range(shape[0]):
            valid[n, :, data["lens"][0][n]:, :] = False
    return valid


def _unrounded(monkeypatch):
    monkeypatch.setattr(fp8_reference, "_rounder", lambda dt: (lambda x: x))


def _seed(*key):
    return hash(str(key)) % 2**32


@pytest.mark.parametrize("opt", OPTIONS, ids=lambda o: "-".join(sorted(o)) or "plain")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_decomposition_is_the_definition_without_rounding(shape, opt, monkeypatch):
    if (opt.get("window") or opt.get("bottom_right")) and shape[3] > shape[4]:
        pytest.skip("a sliding window / bottom-right causal mask needs s_q <= s_kv")
    data = draw(shape, _seed(shape, opt))
    program = _execute(*_forward_case(shape, opt, data), ReferenceEngine(program=True))
    _unrounded(monkeypatch)
    definition = _execute(*_forward_case(shape, opt, data), ReferenceEngine())
    valid = _valid_rows(shape, opt, data, definition[1])
    rows = np.broadcast_to(valid, definition[0].shape)
    np.testing.assert_allclose(program[0][rows], definition[0][rows], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(program[1][valid], definition[1][valid], rtol=1e-10, atol=1e-10)
    if valid.all():  # an amax over the NaN of the composite's fully masked rows is NaN
        for got, want in zip(program[2:], definition[2:]):  # Amax_S, Amax_O
            np.testing.assert_allclose(got, want, rtol=1e-10)


def numpy_fp8_attention(data, scale, v_scales, causal=False, round_s=True):
    """O, Amax_S, Amax_O of per-tensor FP8 attention with P · scale_s rounded to E4M3 (by table lookup)."""
    k = np.repeat(data["k"], data["q"].shape[1] // data["k"].shape[1], axis=1)
    v = np.repeat(data["v"], data["q"].shape[1] // data["v"].shape[1], axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", data["q"], k) * scale * v_scales["descale_q"] * v_scales["descale_k"]
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    s8 = to_e4m3(p * v_scales["scale_s"]) if round_s else p * v_scales["scale_s"]
    o = np.einsum("bhqk,bhkd->bhqd", s8, v) * v_scales["descale_s"] * v_scales["descale_v"]
    return o * v_scales["scale_o"], np.abs(p).max(), np.abs(o).max()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_definition_rounds_s_like_an_independent_numpy_fp8_attention(shape, causal):
    if causal and shape[3] > shape[4]:
        pytest.skip("top-left causal with s_q > s_kv leaves rows fully masked")
    data = draw(shape, seed=7)
    o, _, amax_s, amax_o = _execute(*_forward_case(shape, dict(causal=causal), data), ReferenceEngine())
    scale = 1 / math.sqrt(shape[5])
    want = numpy_fp8_attention(data, scale, FWD_VALUES, causal)
    np.testing.assert_allclose(o, want[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose([amax_s.item(), amax_o.item()], want[1:], rtol=1e-9)
    exact = numpy_fp8_attention(data, scale, FWD_VALUES, causal, round_s=False)[0]
    assert np.linalg.norm(o - exact) > 1e-4 * np.linalg.norm(exact)  # the rounding of S is there, not skipped


def test_e4m3_rounding_of_the_reference_is_the_format():
    from cudnn_py.families.quantize.reference import GRIDS

    rng = np.random.default_rng(3)
    x = rng.standard_normal(20000) * np.exp2(rng.integers(-12, 10, 20000))
    np.testing.assert_array_equal(GRIDS[E4].round(x), to_e4m3(x))
    assert set(np.unique(GRIDS[E4].round(x))) <= set(E4M3)


BWD_OPTIONS = [dict(), dict(causal=True), dict(seq=True), dict(seq=True, causal=True), dict(dropout=True),
               dict(sink=True)]


@pytest.mark.parametrize("opt", BWD_OPTIONS, ids=lambda o: "-".join(sorted(o)) or "plain")
@pytest.mark.parametrize("shape", SHAPES[:2] + [(1, 2, 1, 16, 33, 32, 16)], ids=lambda s: "x".join(map(str, s)))
def test_backward_decomposition_is_the_definition_without_rounding(shape, opt, monkeypatch):
    """The decomposition takes P from the given Stats, the definition recomputes the softmax: the Stats fed are
    the forward's, so both see one P."""
    data = draw(shape, _seed(shape, opt))
    _unrounded(monkeypatch)
    stats = _execute(*_forward_case(shape, {k: v for k, v in opt.items() if k != "dropout"}, data),
                     ReferenceEngine())[1]
    definition = _execute(*_backward_case(shape, opt, data, stats), ReferenceEngine())
    monkeypatch.undo()
    program = _execute(*_backward_case(shape, opt, data, stats), ReferenceEngine(program=True))
    assert len(program) == (8 if opt.get("sink") else 7)
    for i, (got, want) in enumerate(zip(program, definition)):
        assert np.isfinite(got).all() and np.abs(want).max() > 0, f"output {i}"
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10, err_msg=f"output {i}")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_without_rounding_and_with_unit_scales_is_sdpa_backward(shape, monkeypatch):
    """With every scale 1 and no rounding the FP8 gradients are attention's: checked against sdpa_backward's
    definition (itself checked against finite differences in tests/test_sdpa.py), with O the exact forward's."""
    _unrounded(monkeypatch)
    data = draw(shape, seed=11)
    d = shape[5]
    h = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
    q, k, v = (h.tensor(list(data[n].shape), name=n) for n in ("q", "k", "v"))
    fwd_o, st = h.sdpa(q, k, v, generate_stats=True, attn_scale=1 / math.sqrt(d))
    for t in (fwd_o, st):
        t.set_output(True)
    o, stats = _execute(h, {q: data["q"], k: data["k"], v: data["v"]}, [fwd_o, st], ReferenceEngine())
    fp8 = _execute(*_backward_case(shape, {}, {**data, "o": o}, stats, values=dict.fromkeys(BWD_SCALES, 1.0)),
                   ReferenceEngine())
    h2 = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
    q, k, v = (h2.tensor(list(data[n].shape), name=n) for n in ("q", "k", "v"))
    o_t, do_t, st_t = (h2.tensor(list(x.shape)) for x in (o, data["dO"], stats))
    grads = h2.sdpa_backward(q, k, v, o_t, do_t, st_t, attn_scale=1 / math.sqrt(d))
    for t in grads:
        t.set_output(True)
    want = _execute(h2, {q: data["q"], k: data["k"], v: data["v"], o_t: o, do_t: data["dO"], st_t: stats},
                    grads, ReferenceEngine())
    for name, got, ref in zip(("dQ", "dK", "dV"), fp8[:3], want):
        assert np.isfinite(got).all() and np.abs(ref).max() > 0, name
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-10, err_msg=name)
    np.testing.assert_allclose(fp8[3].item(), np.abs(want[0]).max(), rtol=1e-9)  # Amax_dQ with unit scales


def numpy_fp8_attention_backward(data, stats_free_scale, vals):
    """dQ, dK, dV, Amax_dP of per-tensor FP8 attention (h_k = h_q, no mask) with S8 and dP8 rounded to E4M3 by
    table lookup, D from the given O."""
    q, k, v, o, d_o = (data[n] for n in ("q", "k", "v", "o", "dO"))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * stats_free_scale * vals["descale_q"] * vals["descale_k"]
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    s8 = to_e4m3(p * vals["scale_s"])
    d_v = np.einsum("bhqk,bhqd->bhkd", s8, d_o) * vals["descale_s"] * vals["descale_dO"]
    d_row = (d_o * o).sum(axis=-1, keepdims=True) * vals["descale_dO"] * vals["descale_o"]
    d_p = np.einsum("bhqd,bhkd->bhqk", d_o, v) * vals["descale_dO"] * vals["descale_v"]
    d_s = stats_free_scale * p * (d_p - d_row)
    dp8 = to_e4m3(d_s * vals["scale_dP"])
    d_q = np.einsum("bhqk,bhkd->bhqd", dp8, k) * vals["descale_dP"] * vals["descale_k"]
    d_k = np.einsum("bhqk,bhqd->bhkd", dp8, q) * vals["descale_dP"] * vals["descale_q"]
    return d_q * vals["scale_dQ"], d_k * vals["scale_dK"], d_v * vals["scale_dV"], np.abs(d_s).max()


def test_backward_definition_rounds_s_and_dp_like_an_independent_numpy_fp8_backward():
    shape = (2, 2, 2, 12, 20, 16, 16)
    data = draw(shape, seed=5)
    fwd_graph = _forward_case(shape, {}, data)
    stats = _execute(*fwd_graph, ReferenceEngine())[1]
    d_q, d_k, d_v, _, _, _, amax_dp = _execute(*_backward_case(shape, {}, data, stats), ReferenceEngine())
    want = numpy_fp8_attention_backward(data, 1 / math.sqrt(shape[5]), BWD_VALUES)
    for name, got, ref in zip(("dQ", "dK", "dV"), (d_q, d_k, d_v), want):
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(amax_dp.item(), want[3], rtol=1e-9)


def test_device_rules_per_architecture(monkeypatch):
    """The frontend's per-architecture FP8 rules, checked when planning meets the
    GPU (device_gates; deviceless validation cannot know the architecture)."""
    from types import SimpleNamespace

    from cudnn_py.families.attention_fp8.spec import device_rules
    from cudnn_py.plans import device_gates

    g64, _ = _backward_graph(d=64)
    g128, _ = _backward_graph(d=128)
    for g in (g64, g128):
        g.validate_ir()
    bwd64, bwd128 = g64.nodes[0], g128.nodes[0]
    assert "d_qk == d_v == 128, got 64, 64" in device_rules(bwd64, 90, 91900)
    assert device_rules(bwd128, 90, 91900) is None and device_rules(bwd64, 100, 91900) is None
    g_fwd, _, o = _forward_graph()
    g_fwd.validate_ir()
    fwd_node = g_fwd.nodes[0]
    assert device_rules(fwd_node, 90, 91900) is None
    o.set_data_type(H)
    assert "HALF / BFLOAT16 O need SM >= 100" in device_rules(fwd_node, 90, 91900)
    assert device_rules(fwd_node, 100, 91300) is None
    g_br = graph()
    q, k, v = qkv(g_br, s_q=64, s_kv=64, d=64)
    g_br.sdpa_fp8(q, k, v, *scales(g_br, FWD_SCALES), generate_stats=False, use_causal_mask_bottom_right=True)[0] \
        .set_output(True).set_data_type(E4)
    g_br.validate_ir()
    assert "bottom-right" in device_rules(g_br.nodes[0], 90, 91900)
    assert "at most 128" in device_rules(_validated_forward(d=256).nodes[0], 100, 91900)
    handle = SimpleNamespace(device=0)
    monkeypatch.setattr(device_gates, "compute_capability", lambda device: 90)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"sdpa_fp8_backward\(\).*compute capability 9.0.*"
                       r"d_qk == d_v == 128"):
        device_gates.check([bwd64], handle)
    device_gates.check([bwd128], handle)
    monkeypatch.setattr(device_gates, "compute_capability", lambda device: 80)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="compute capability 9.0 or newer"):
        device_gates.check([bwd128], handle)


def _validated_forward(d):
    g = graph()
    q, k, v = qkv(g, d=d)
    g.sdpa_fp8(q, k, v, *scales(g, FWD_SCALES), generate_stats=False)[0].set_output(True).set_data_type(E4)
    g.validate_ir()
    return g


def test_score_max_and_sum_exp_and_an_e5m2_do():
    data = draw((2, 4, 2, 12, 20, 16, 16), seed=2)

    def build():
        g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
        q, k, v = qkv(g, 2, 4, 2, 12, 20, 16)
        mx, se = g.tensor([2, 4, 12, 1], name="max"), g.tensor([2, 4, 12, 1], name="sum_exp")
        sc = scales(g, FWD_SCALES)
        o, none, _, _ = g.sdpa_fp8(q, k, v, *sc, generate_stats=False, score_max=mx, score_sum_exp=se)
        assert none is None
        o.set_output(True).set_data_type(E4)
        g.validate()
        assert mx.data_type is se.data_type is F
        feeds = {q: data["q"], k: data["k"], v: data["v"], **{t: np.full((1, 1, 1, 1), FWD_VALUES[t.name]) for t in sc}}
        return g, feeds, [o, mx, se]

    results = [_execute(*build(), ReferenceEngine(program=program)) for program in (False, True)]
    s = np.einsum("bhqd,bhkd->bhqk", data["q"], np.repeat(data["k"], 2, axis=1)) * 0.5 * 0.75
    np.testing.assert_allclose(results[0][1], s.max(-1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(results[0][2], np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True),
                               rtol=1e-12)
    for got, want in zip(results[1][1:], results[0][1:]):
        np.testing.assert_allclose(got, want, rtol=1e-10)
    # an E5M2 dO (as training usually stores gradients): dP is quantized into E5M2
    g2 = graph()
    q, k, v = qkv(g2, b=2, h_q=4, h_k=4, s_q=64, s_kv=64, d=128)
    o_t, d_o = g2.tensor([2, 4, 64, 128], data_type=E4), g2.tensor([2, 4, 64, 128], data_type=E5)
    grads = g2.sdpa_fp8_backward(q, k, v, o_t, d_o, g2.tensor([2, 4, 64, 1], data_type=F), *scales(g2, BWD_SCALES))
    for t in grads[:3]:
        t.set_output(True).set_data_type(E5)
    g2.validate()
    matmuls = [n for n in prepare(g2, PassOptions(available=running)).nodes if n.op == "matmul"]
    assert matmuls[3].inputs["A"].data_type is E5 and matmuls[1].inputs["A"].data_type is E4  # dP8 in dO's, S8 Q's


def test_paged_fp8_forward_is_the_unpaged_one():
    """K / V read from page containers through page tables (loaded as sdpa loads them): the
    decomposition and the definition agree with the same case on dense K / V."""
    b, h_q, h_k, s_q, block, pages, d = 2, 4, 2, 5, 8, 3, 16
    s_kv, num_blocks = block * pages, 10
    shape = (b, h_q, h_k, s_q, s_kv, d, d)
    data = draw(shape, seed=11)
    data["lens"] = (np.full(b, s_q), np.array([s_kv, 13]))
    rng = np.random.default_rng(5)
    order = rng.permutation(num_blocks)[: b * pages].reshape(b, pages)
    kc, vc = (to_e4m3(rng.standard_normal((num_blocks, h_k, block, d))) for _ in range(2))
    for n in range(b):  # the dense caches the pages hold (zero past each sequence, as the load reads them)
        for row in range(s_kv):
            live = row < data["lens"][1][n]
            data["k"][n, :, row] = kc[order[n, row // block], :, row % block] if live else 0
            data["v"][n, :, row] = vc[order[n, row // block], :, row % block] if live else 0
    def paged(engine):
        g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
        q = g.tensor([b, h_q, s_q, d], data_type=E4, name="q")
        kp, vp = (g.tensor([num_blocks, h_k, block, d], data_type=E4, name=n) for n in ("k_pages", "v_pages"))
        tk, tv = (g.tensor([b, 1, pages, 1], data_type=I32, name=n) for n in ("k_table", "v_table"))
        sc = scales(g, FWD_SCALES)
        feeds = {q: data["q"], kp: kc, vp: vc, tk: order.reshape(b, 1, pages, 1), tv: order.reshape(b, 1, pages, 1)}
        feeds.update({t: np.full((1, 1, 1, 1), FWD_VALUES[t.name]) for t in sc})
        kw = _options(g, dict(seq=True), data, feeds, b)
        outs = g.sdpa_fp8(q, kp, vp, *sc, generate_stats=True, attn_scale=1 / math.sqrt(d),
                          paged_attention_k_table=tk, paged_attention_v_table=tv,
                          paged_attention_max_seq_len_kv=s_kv, **kw)
        for t in outs:
            t.set_output(True)
        outs[0].set_data_type(E4)
        return _execute(g, feeds, outs, engine)

    for program in (True, False):  # each against the same engine on dense K / V (the two round S differently)
        dense = _execute(*_forward_case(shape, dict(seq=True), data), ReferenceEngine(program=program))
        for x, want in zip(paged(ReferenceEngine(program=program)), dense):
            np.testing.assert_allclose(x, want, rtol=1e-10, atol=1e-10, err_msg=f"program={program}")


def test_paged_fp8_forward_finalizes_deviceless_with_its_cache_loads():
    g = graph()
    b, h_k, block, pages, d = 2, 2, 16, 4, 64
    q = g.tensor([b, 4, 1, d], data_type=E4, name="q")
    kp, vp = (g.tensor([12, h_k, block, d], data_type=E4, name=n) for n in ("k_pages", "v_pages"))
    tk, tv = (g.tensor([b, 1, pages, 1], data_type=I32, name=n) for n in ("k_table", "v_table"))
    seq = dict(use_padding_mask=True, seq_len_q=g.tensor([b, 1, 1, 1], data_type=I32),
               seq_len_kv=g.tensor([b, 1, 1, 1], data_type=I32))
    outs = g.sdpa_fp8(q, kp, vp, *scales(g, FWD_SCALES), generate_stats=True, attn_scale=0.125,
                      paged_attention_k_table=tk, paged_attention_v_table=tv, **seq)
    outs[0].set_output(True).set_data_type(E4)
    for t in outs[1:]:
        t.set_output(True)
    g.validate()  # finalized without a device by cuDNN 9.28
    methods = [n.spec.method for n in prepare(g, PassOptions(available=running)).nodes]
    assert methods[0] == "paged_cache_load" and methods.count("paged_cache_load") == 2


def test_paged_max_seq_len_kv_is_checked_as_in_sdpa():
    g = graph()
    q, k, v = qkv(g)
    for bad, exc in ((0, ValueError), (-3, ValueError), ("12", TypeError)):
        with pytest.raises(exc, match=r"sdpa_fp8\(\): argument 'paged_attention_max_seq_len_kv': needs an int >= 1"):
            g.sdpa_fp8(q, k, v, *scales(g, FWD_SCALES), generate_stats=True, paged_attention_max_seq_len_kv=bad)


@pytest.mark.parametrize("limit", [20, 64])
def test_max_seq_len_kv_without_page_tables_is_accepted_and_ignored(limit):
    """The frontend's fp8 forward has no "only with paging" rule (sdpa's fp16 / bf16 one): sdpa_fp8 given
    paged_attention_max_seq_len_kv without page tables validates, deviceless on cuDNN 9.28, with K's s_kv."""
    g = graph()
    q, k, v = qkv(g, s_kv=20)
    outs = g.sdpa_fp8(q, k, v, *scales(g, FWD_SCALES), generate_stats=True, attn_scale=0.25,
                      paged_attention_max_seq_len_kv=limit)
    outs[0].set_output(True).set_data_type(E4)
    for t in outs[1:]:
        t.set_output(True)
    g.validate()
    bmm1 = next(n for n in prepare(g, PassOptions(available=running)).nodes if n.op == "matmul")
    assert [int(x) for x in bmm1.outputs["C"].dim] == [2, 4, 12, 20]
