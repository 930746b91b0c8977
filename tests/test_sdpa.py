"""Scaled dot-product attention on the CPU: the classic surface, every validation rule, what reaches cuDNN
(the composite and the unified graph finalize deviceless on cuDNN 9.28), and the composite decomposition
(``ReferenceEngine(program=True)``) against the definition (``ReferenceEngine()``) and against an independent
numpy attention over a seeded sweep of small shapes and options."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.families.attention.reference import alibi_slopes
from cudnn_py.ir.passes import PassOptions, prepare

H, F, D, I32 = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.DOUBLE, cudnn.data_type.INT32
AI = cudnn.attention_implementation
NOTHING_NEW = PassOptions(available=lambda feature, at_least=0: False)


def qkv(g, b=2, h_q=4, h_k=2, s_q=12, s_kv=20, d=16, d_v=None):
    q = g.tensor([b, h_q, s_q, d], name="q")
    k = g.tensor([b, h_k, s_kv, d], name="k")
    v = g.tensor([b, h_k, s_kv, d_v or d], name="v")
    return q, k, v


def half_graph():
    return cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)


# ---- surface ---------------------------------------------------------------------------------------------------
def test_sdpa_returns_o_and_stats_with_the_frontend_names_and_dims():
    g = half_graph()
    q, k, v = qkv(g, s_q=40, s_kv=72, d=64)
    o, stats = g.sdpa(q, k, v, generate_stats=True, attn_scale=0.125, name="attn")
    assert (o.name, stats.name) == ("attn::O", "attn::Stats")
    o.set_output(True)
    g.validate_ir()
    assert o.dim == [2, 4, 40, 64] and o.stride == [4 * 40 * 64, 40 * 64, 64, 1]
    assert stats.dim == [2, 4, 40, 1] and stats.stride == [160, 40, 1, 1]
    o2, none = g.sdpa(q, g.tensor([2, 2, 72, 64]), g.tensor([2, 2, 72, 64]), is_inference=True)
    assert none is None


def test_o_follows_a_bshd_q():
    g = half_graph()
    b, s, h, d = 2, 16, 4, 32
    q = g.tensor([b, h, s, d], [s * h * d, d, h * d, 1], name="q")  # BSHD memory
    k = g.tensor([b, h, s, d], [s * h * d, d, h * d, 1], name="k")
    v = g.tensor([b, h, s, d], [s * h * d, d, h * d, 1], name="v")
    o, _ = g.sdpa(q, k, v, generate_stats=False)
    o.set_output(True)
    g.validate_ir()
    assert o.stride == [s * h * d, d, h * d, 1]


def test_exactly_one_of_generate_stats_and_is_inference():
    g = half_graph()
    q, k, v = qkv(g)
    with pytest.raises(ValueError, match="exactly one of generate_stats and is_inference"):
        g.sdpa(q, k, v)
    with pytest.raises(ValueError, match="exactly one"):
        g.sdpa(q, k, v, generate_stats=True, is_inference=False)


# The exception contract (the frontend's SDPA pre-validation): every builder call below is accepted, as the
# official builder accepts it; validate() then refuses what the frontend does not support with
# cudnnGraphNotSupportedError (callers catch it to skip a configuration) and ill-formed values with ValueError.
NS, VE = cudnn.cudnnGraphNotSupportedError, ValueError
MASK_CONTRACT = [
    ("alibi without a causal mask", dict(use_alibi_mask=True), {}, NS, "use_alibi_mask needs a causal mask"),
    ("alibi with a right bound 2", dict(use_alibi_mask=True, diagonal_band_right_bound=2), {}, NS, "alibi"),
    ("bottom-right with bias", dict(use_causal_mask_bottom_right=True, bias="bias"), {}, NS, "bottom-right"),
    ("bottom-right with alibi", dict(use_causal_mask_bottom_right=True, use_alibi_mask=True), {}, NS, "bottom-right"),
    ("bottom-right with dropout", dict(use_causal_mask_bottom_right=True, dropout="p"), {}, NS, "bottom-right"),
    ("bottom-right, s_q > s_kv", dict(use_causal_mask_bottom_right=True), dict(s_q=24, s_kv=16), NS, "s_q <= s_kv"),
    ("window, s_q > s_kv", dict(diagonal_band_left_bound=4), dict(s_q=24, s_kv=16), NS, "s_q <= s_kv"),
    ("head dim not a multiple of 8", {}, dict(d=12), NS, "multiple of 8"),
    ("heads that do not divide", {}, dict(h_q=4, h_k=3), NS, "do not divide"),
    ("stride of the head dim", dict(q_strides=True), {}, NS, "innermost"),
    ("score_mod with a causal mask", dict(use_causal_mask=True, score_mod=lambda g, s: s), {}, NS, "score_mod"),
    ("max_seq_len_kv without pages", dict(paged_attention_max_seq_len_kv=20), {}, NS, "page table"),
    ("a right bound below 0", dict(diagonal_band_right_bound=-1), {}, VE, ">= 0"),
    ("a window of 0", dict(sliding_window_length=0), {}, VE, ">= 1"),
    ("padding without lengths", dict(use_padding_mask=True), {}, VE, "needs both seq_len_q and seq_len_kv"),
    # the frontend's precedence: accepted, no conflict
    ("causal and bottom-right: bottom-right wins", dict(use_causal_mask=True, use_causal_mask_bottom_right=True),
     {}, None, "BOTTOM_RIGHT"),
    ("causal pins the right bound to 0", dict(use_causal_mask=True, diagonal_band_right_bound=2), {}, None, "0"),
    ("the left bound wins over its alias", dict(sliding_window_length=3, diagonal_band_left_bound=5), {}, None, "5"),
]


def _contract_graph(kw, shape):
    g = half_graph()
    kw = dict(kw)
    if kw.pop("q_strides", False):
        b, h, s, d = 2, 4, 12, 16
        q = g.tensor([b, h, s, d], [h * s * d * 2, s * d * 2, d * 2, 2], name="q")
        _, k, v = qkv(g)
    else:
        q, k, v = qkv(g, **shape)
    b, h_q, s_q, s_kv = q.dim[0], q.dim[1], q.dim[2], k.dim[2]
    if kw.get("bias") == "bias":
        kw["bias"] = g.tensor([1, h_q, s_q, s_kv], name="bias")
    if kw.get("dropout") == "p":
        kw["dropout"] = (0.1, g.tensor([1, 1, 1, 1], data_type=cudnn.data_type.INT64, name="seed"),
                         g.tensor([1, 1, 1, 1], data_type=cudnn.data_type.INT64, name="offset"))
    o, st = g.sdpa(q, k, v, generate_stats=True, implementation=AI.COMPOSITE, **kw)  # the builder never refuses
    o.set_output(True)
    st.set_output(True).set_data_type(F)
    return g, o.name.split("::")[0]


@pytest.mark.parametrize("what, kw, shape, error, match", MASK_CONTRACT, ids=[c[0] for c in MASK_CONTRACT])
def test_sdpa_refusals_have_the_frontends_class_and_moment(what, kw, shape, error, match):
    g, node = _contract_graph(kw, shape)
    if error is None:
        g.validate_ir()
        p = next(n for n in g._nodes if n.name == node).params
        assert match in {str(p["diagonal_band_right_bound"]), str(p["diagonal_band_left_bound"]),
                         p["diagonal_alignment"].name}
        return
    with pytest.raises(error, match=match) as info:
        g.validate()
    if error is NS:
        assert not isinstance(info.value, ValueError), "a configuration the frontend does not support is no ValueError"
        assert node in str(info.value)  # names the node


def _unfuse_fma_graph(impl, **kw):
    g = half_graph()
    q, k, v = qkv(g, s_q=40, s_kv=72, d=64)
    o, st = g.sdpa(q, k, v, generate_stats=True, unfuse_fma=True, implementation=impl, **kw)
    o.set_output(True)
    st.set_output(True).set_data_type(F)
    return g


def test_unfuse_fma_is_the_unified_ops_and_never_dropped():
    """unfuse_fma sets SDPA_FWD's UNFUSE_FMA (cuDNN >= 9.22): the composite has no counterpart, so neither
    COMPOSITE nor AUTO's fallback may quietly drop it."""
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"unfuse_fma=True .*unified SDPA_FWD op only.*"
                                                                 r"implementation=COMPOSITE"):
        _unfuse_fma_graph(AI.COMPOSITE).validate()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"unfuse_fma=True .*the unified op cannot run: .*bias"):
        g2 = half_graph()
        q, k, v = qkv(g2, s_q=40, s_kv=72, d=64)
        g2.sdpa(q, k, v, generate_stats=True, unfuse_fma=True, bias=g2.tensor([1, 4, 40, 72]))[0].set_output(True)
        g2.validate()
    on_919 = lambda f, at_least=0: versions.since(f) <= 91900 and at_least <= 91900  # noqa: E731
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"unfuse_fma needs cuDNN >= 9\.22"):
        g = _unfuse_fma_graph(AI.AUTO)
        g.validate()  # 9.28 here: unified, with the attribute
        _program(g, on_919)
    if versions.available("CUDNN_ATTR_OPERATION_SDPA_FWD_UNFUSE_FMA"):
        from cudnn_py.families.attention.lowering import lower
        from cudnn_py.lowering import TensorTable

        g = _unfuse_fma_graph(AI.UNIFIED)
        g.validate()  # finalized deviceless with the attribute set
        (op,) = lower(_program(g).nodes[0], TensorTable())
        assert op.get("CUDNN_ATTR_OPERATION_SDPA_FWD_UNFUSE_FMA") is True


def test_dropout_tuples():
    g = half_graph()
    q, k, v = qkv(g)
    with pytest.raises(TypeError, match="dropout must be"):
        g.sdpa(q, k, v, generate_stats=True, dropout=0.1)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        g.sdpa(q, k, v, generate_stats=True, dropout=(1.0, g.tensor([1, 1, 1, 1]), g.tensor([1, 1, 1, 1])))


# ---- validation: what the official validate() lets through ---------------------------------------------------
def _validate(build):
    g = half_graph()
    q, k, v = qkv(g)
    build(g, q, k, v)
    g.validate_ir()


NOT_SUPPORTED_CASES = ("kv_heads", "head_dim_8", "bottom_right_s_q")  # the frontend's GRAPH_NOT_SUPPORTED


@pytest.mark.parametrize("case, match", [
    ("head_dims", r"tensor 'k'.*head dim 32 differs from q's 16"),
    ("kv_heads", r"tensor 'k'.*3 heads do not divide q's 4 heads"),
    ("seq_len_shape", r"tensor 'slq'.*\[b, 1, 1, 1\]"),
    ("seq_len_dtype", r"tensor 'slq'.*must be INT32"),
    ("seq_len_without_padding", r"only read with use_padding_mask"),
    ("padding_without_seq_len", r"needs both seq_len_q and seq_len_kv"),
    ("bias_broadcast", r"tensor 'bias'.*do not broadcast to the scores"),
    ("ragged_dtype", r"ragged offset 'off'.*INT32 or INT64"),
    ("ragged_length", r"ragged offset 'off'.*\[b \+ 1, 1, 1, 1\]"),
    ("head_dim_8", r"not a multiple of 8"),
    ("bottom_right_s_q", r"bottom-right causal mask needs s_q <= s_kv"),
    ("rng_dump_shape", r"tensor 'dump'.*scores' dims"),
])
def test_validate_refuses_and_names_the_tensor_and_rule(case, match):
    def build(g, q, k, v):
        seq = dict(seq_len_q=g.tensor([2, 1, 1, 1], data_type=I32, name="slq"),
                   seq_len_kv=g.tensor([2, 1, 1, 1], data_type=I32, name="slkv"))
        if case == "head_dims":
            g.sdpa(q, g.tensor([2, 2, 20, 32], name="k"), g.tensor([2, 2, 20, 32]), generate_stats=True)
        elif case == "kv_heads":
            g.sdpa(q, g.tensor([2, 3, 20, 16], name="k"), g.tensor([2, 3, 20, 16]), generate_stats=True)
        elif case == "seq_len_shape":
            g.sdpa(q, k, v, generate_stats=True, use_padding_mask=True,
                   seq_len_q=g.tensor([2, 1, 1], data_type=I32, name="slq"), seq_len_kv=seq["seq_len_kv"])
        elif case == "seq_len_dtype":
            g.sdpa(q, k, v, generate_stats=True, use_padding_mask=True,
                   seq_len_q=g.tensor([2, 1, 1, 1], data_type=F, name="slq"), seq_len_kv=seq["seq_len_kv"])
        elif case == "seq_len_without_padding":
            g.sdpa(q, k, v, generate_stats=True, **seq)
        elif case == "padding_without_seq_len":
            g.sdpa(q, k, v, generate_stats=True, use_padding_mask=True)
        elif case == "bias_broadcast":
            g.sdpa(q, k, v, generate_stats=True, bias=g.tensor([1, 3, 12, 20], name="bias"))
        elif case in ("ragged_dtype", "ragged_length"):
            dims, dt = ([3, 1, 1, 1], F) if case == "ragged_dtype" else ([2, 1, 1, 1], cudnn.data_type.INT64)
            off = g.tensor(dims, data_type=dt, name="off")
            rq = g.tensor([2, 4, 12, 16], name="rq", ragged_offset=off)
            g.sdpa(rq, k, v, generate_stats=True, use_padding_mask=True, **seq)
        elif case == "head_dim_8":
            g.sdpa(g.tensor([2, 4, 12, 12]), g.tensor([2, 2, 20, 12]), g.tensor([2, 2, 20, 12]), generate_stats=True)
        elif case == "bottom_right_s_q":
            g.sdpa(g.tensor([2, 4, 24, 16]), k, v, generate_stats=True, use_causal_mask_bottom_right=True)
        elif case == "rng_dump_shape":
            g.sdpa(q, k, v, generate_stats=True, rng_dump=g.tensor([2, 4, 12, 19], name="dump"),
                   dropout=(0.1, g.tensor([1, 1, 1, 1], data_type=cudnn.data_type.INT64),
                            g.tensor([1, 1, 1, 1], data_type=cudnn.data_type.INT64)))
    error = cudnn.cudnnGraphNotSupportedError if case in NOT_SUPPORTED_CASES else ValueError
    with pytest.raises(error, match=match):
        _validate(build)


def test_unified_where_unsupported_names_the_rule():
    g = half_graph()
    q, k, v = qkv(g)
    g.sdpa(q, k, v, generate_stats=True, bias=g.tensor([1, 4, 12, 20]), implementation=AI.UNIFIED)[0].set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"implementation=UNIFIED.*bias.*subgraph"):
        g.validate()
    g2 = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=H)
    q2, k2, v2 = qkv(g2)
    g2.sdpa(q2, k2, v2, generate_stats=False, implementation=AI.UNIFIED)[0].set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="computes in FLOAT"):
        g2.validate()


# ---- what reaches cuDNN ----------------------------------------------------------------------------------------
def running(feature, at_least=0):
    return versions.available(feature) and versions.runtime_version() >= at_least


def _program(g, available=None):
    return prepare(g, PassOptions(available=available or running))


def test_auto_picks_unified_for_plain_attention_and_composite_for_a_custom_dropout_mask():
    g = half_graph()
    q, k, v = qkv(g, s_q=40, s_kv=72, d=64)
    o, st = g.sdpa(q, k, v, generate_stats=True, attn_scale=0.125)
    o.set_output(True)
    st.set_output(True).set_data_type(F)
    g.validate()  # finalized deviceless on cuDNN 9.28
    assert [n.op for n in _program(g).nodes] == ["sdpa"]  # this machine's cuDNN (9.28) has the unified op
    on_919 = _program(g, lambda f, at_least=0: versions.since(f) <= 91900 and at_least <= 91900)
    assert [n.op for n in on_919.nodes] == ["sdpa"]  # 9.19: still unified (no masks)
    g2 = half_graph()
    q2, k2, v2 = qkv(g2, s_q=40, s_kv=72, d=64)
    o2, _ = g2.sdpa(q2, k2, v2, generate_stats=False, dropout=(g2.tensor([2, 4, 40, 72], name="dm"),
                                                                  g2.tensor([1, 1, 1, 1], data_type=F, name="ds")))
    o2.set_output(True)
    g2.validate()
    assert "matmul" in [n.op for n in _program(g2).nodes]


def test_composite_forward_in_the_frontends_order_finalizes_deviceless():
    g = half_graph()
    q, k, v = qkv(g, b=1, h_q=2, h_k=2, s_q=40, s_kv=72, d=64)
    o, st = g.sdpa(q, k, v, generate_stats=True, attn_scale=0.125, use_padding_mask=True,
                   seq_len_q=g.tensor([1, 1, 1, 1], data_type=I32), seq_len_kv=g.tensor([1, 1, 1, 1], data_type=I32),
                   implementation=AI.COMPOSITE, name="sdpa")
    o.set_output(True)
    st.set_output(True).set_data_type(F)
    g.validate()
    p = _program(g)
    methods = [n.spec.method for n in p.nodes]
    assert methods == ["matmul", "mul", "gen_index", "gen_index", "cmp_lt", "cmp_lt", "logical_and", "binary_select",
                       "reduction", "sub", "exp", "reduction", "log", "add", "div", "matmul"]
    bmm1, bmm2 = p.nodes[0], p.nodes[-1]
    assert p.tensors[k.uid].dim == [1, 2, 64, 72] and p.tensors[k.uid].stride == [2 * 72 * 64, 72 * 64, 1, 64]
    assert set(bmm1.inputs) == {"A", "B", "M_OVERRIDE", "N_OVERRIDE"}
    assert set(bmm2.inputs) == {"A", "B", "M_OVERRIDE", "K_OVERRIDE"}
    assert bmm2.inputs["A"].data_type is H  # bmm2's A in Q's type
    assert k.dim == [1, 2, 72, 64]  # the user's K is untouched


def test_composite_dropout_uses_an_rng_op_writing_rng_dump():
    g = half_graph()
    q, k, v = qkv(g, b=1, h_q=2, h_k=2, s_q=64, s_kv=64, d=64)
    i64 = cudnn.data_type.INT64
    dump = g.tensor([1, 2, 64, 64], data_type=F, name="dump")
    o, st = g.sdpa(q, k, v, generate_stats=True, rng_dump=dump,
                   dropout=(0.25, g.tensor([1, 1, 1, 1], data_type=i64, name="seed"),
                            g.tensor([1, 1, 1, 1], data_type=i64, name="offset")))
    o.set_output(True)
    st.set_output(True).set_data_type(F)
    g.validate()
    p = _program(g)
    rng = next(n for n in p.nodes if n.op == "rng")
    assert rng.outputs["Y"].uid == dump.uid and rng.params["bernoulli_probability"] == 0.75
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="Philox"):
        ReferenceEngine(program=True).check_support(g)


def test_unified_lowering_sets_the_sdpa_fwd_attributes():
    if versions.runtime_version() < 91500:
        pytest.skip("needs cuDNN >= 9.15 on this machine")
    from cudnn_py.families.attention.lowering import lower
    from cudnn_py.lowering import TensorTable

    g = half_graph()
    q, k, v = qkv(g, s_q=40, s_kv=72, d=64)
    o, st = g.sdpa(q, k, v, generate_stats=True, attn_scale=0.125, use_padding_mask=True,
                   seq_len_q=g.tensor([2, 1, 1, 1], data_type=I32), seq_len_kv=g.tensor([2, 1, 1, 1], data_type=I32),
                   implementation=AI.UNIFIED)
    o.set_output(True)
    st.set_output(True).set_data_type(F)
    g.validate()
    node = _program(g).nodes[0]
    (op,) = lower(node, TensorTable())
    assert op.get("CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC").get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [2, 2, 72, 64]
    for attr in ("STATSDESC", "SCALEDESC", "SEQ_LEN_QDESC", "SEQ_LEN_KVDESC"):
        assert op.get(f"CUDNN_ATTR_OPERATION_SDPA_FWD_{attr}") is not None


# ---- decomposition against the definition ----------------------------------------------------------------------
def numpy_attention(q, k, v, scale=1.0, bias=None, causal=False, bottom_right=False, window=None, seq=None,
                    alibi=False, dropout=None, sink=None):
    """An independent attention (einsum, explicit loops over masks), float64."""
    b, h, s_q, _ = q.shape
    s_kv = k.shape[2]
    k = np.repeat(k, h // k.shape[1], axis=1)
    v = np.repeat(v, h // v.shape[1], axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if bias is not None:
        s = s + bias
    if alibi:
        slopes = alibi_slopes(h)
        s = s + slopes[None, :, None, None] * (np.arange(s_kv)[None, :] - np.arange(s_q)[:, None])
    allowed = np.ones(s.shape, bool)
    for n in range(b):
        # bottom-right: the diagonal ends at the batch's last valid query and key
        shift = ((seq[1][n] - seq[0][n]) if seq is not None else s_kv - s_q) if bottom_right else 0
        for i in range(s_q):
            for j in range(s_kv):
                if (causal or bottom_right) and j > i + shift:
                    allowed[n, :, i, j] = False
                if window is not None and j <= i + shift - window:
                    allowed[n, :, i, j] = False
    if seq is not None:
        for n in range(b):
            allowed[n, :, seq[0][n]:, :] = False
            allowed[n, :, :, seq[1][n]:] = False
    s = np.where(allowed, s, -np.inf)
    with np.errstate(invalid="ignore"):  # fully masked rows are NaN; the tests leave them out
        lse = np.log(np.sum(np.exp(s - s.max(-1, keepdims=True)), -1, keepdims=True)) + s.max(-1, keepdims=True)
        if sink is not None:  # one more logit per head in every row's normalisation
            lse = np.logaddexp(lse, sink)
        p = np.exp(s - lse)
    if dropout is not None:
        p = p * dropout[0] * dropout[1]
    return np.einsum("bhqk,bhkd->bhqd", p, v), lse


OPTIONS = [dict(), dict(causal=True), dict(bottom_right=True), dict(window=4, causal=True), dict(bias=True),
           dict(seq=True), dict(seq=True, causal=True), dict(alibi=True, causal=True), dict(dropout=True),
           dict(window=3, causal=True, bias=True, seq=True), dict(bottom_right=True, seq=True),
           dict(bottom_right=True, window=3, seq=True), dict(sink=True), dict(sink=True, causal=True, seq=True)]


def _run(shape, opt, program, rng_seed):
    b, h_q, h_k, s_q, s_kv, d, d_v = shape
    rng = np.random.default_rng(rng_seed)
    g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
    q, k, v = qkv(g, b, h_q, h_k, s_q, s_kv, d, d_v)
    data = {q: rng.standard_normal((b, h_q, s_q, d)), k: rng.standard_normal((b, h_k, s_kv, d)),
            v: rng.standard_normal((b, h_k, s_kv, d_v))}
    kw, ref = {}, {}
    if opt.get("bias"):
        bias = g.tensor([1, h_q, s_q, s_kv], name="bias")
        data[bias] = ref["bias"] = rng.standard_normal((1, h_q, s_q, s_kv))
        kw["bias"] = bias
    if opt.get("seq"):
        lens = (rng.integers(1, s_q + 1, b), rng.integers(1, s_kv + 1, b))
        lens[0][0], lens[1][0] = s_q, s_kv  # one full batch
        sq_t, skv_t = g.tensor([b, 1, 1, 1], data_type=I32), g.tensor([b, 1, 1, 1], data_type=I32)
        data[sq_t], data[skv_t] = lens[0].reshape(b, 1, 1, 1), lens[1].reshape(b, 1, 1, 1)
        kw.update(use_padding_mask=True, seq_len_q=sq_t, seq_len_kv=skv_t)
        ref["seq"] = lens
    if opt.get("dropout"):
        mask = (rng.random((b, h_q, s_q, s_kv)) > 0.25).astype(np.float64)
        m_t, sc_t = g.tensor([b, h_q, s_q, s_kv], name="dm"), g.tensor([1, 1, 1, 1], name="ds")
        data[m_t], data[sc_t] = mask, np.full((1, 1, 1, 1), 1 / 0.75)
        kw["dropout"] = (m_t, sc_t)
        ref["dropout"] = (mask, 1 / 0.75)
    if opt.get("causal"):
        kw["use_causal_mask"] = True
    if opt.get("bottom_right"):
        kw["use_causal_mask_bottom_right"] = True
    if opt.get("window"):
        kw["sliding_window_length"] = opt["window"]
    if opt.get("alibi"):
        kw["use_alibi_mask"] = True
    if opt.get("sink"):
        sink = g.tensor([1, h_q, 1, 1], name="sink")
        data[sink] = ref["sink"] = rng.standard_normal((1, h_q, 1, 1))
        kw["sink_token"] = sink
    scale = 1 / math.sqrt(d)
    o, st = g.sdpa(q, k, v, generate_stats=True, attn_scale=scale, implementation=AI.COMPOSITE, **kw)
    o.set_output(True)
    st.set_output(True)
    g.register_backend(ReferenceEngine(program=program))
    out, stats = np.full((b, h_q, s_q, d_v), np.nan), np.full((b, h_q, s_q, 1), np.nan)
    g.execute({**data, o: out, st: stats})
    expected = numpy_attention(data[q], data[k], data[v], scale, causal=opt.get("causal", False),
                               bottom_right=opt.get("bottom_right", False), window=opt.get("window"),
                               alibi=opt.get("alibi", False), **ref)
    return (out, stats), expected, ref.get("seq")


SHAPES = [(1, 1, 1, 8, 8, 8, 8), (2, 4, 2, 12, 20, 16, 8), (2, 4, 1, 17, 9, 8, 16), (1, 2, 2, 1, 33, 8, 8),
          (1, 6, 3, 10, 14, 8, 8)]  # 6 heads: alibi's slope list takes its second series


@pytest.mark.parametrize("opt", OPTIONS, ids=lambda o: "-".join(sorted(o)) or "plain")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_decomposition_and_definition_agree_with_numpy(shape, opt):
    if opt.get("bottom_right") or opt.get("window"):
        if shape[3] > shape[4] and not opt.get("seq"):
            pytest.skip("bottom-right / sliding window need s_q <= s_kv")
    if opt.get("sink") and shape[3] == 1:
        pytest.skip("no sink token in decode")
    for program in (False, True):
        (out, stats), (o_ref, lse_ref), lens = _run(shape, opt, program, rng_seed=hash(str((shape, opt))) % 2**32)
        valid = np.isfinite(lse_ref)  # fully masked rows (padding) are undefined: compared elsewhere
        if lens is not None:
            for n in range(shape[0]):
                valid[n, :, lens[0][n]:, :] = False
        rows = np.broadcast_to(valid, out.shape)
        np.testing.assert_allclose(out[rows], o_ref[rows], rtol=1e-10, atol=1e-10, err_msg=f"program={program}")
        np.testing.assert_allclose(stats[valid], lse_ref[valid], rtol=1e-10, atol=1e-10, err_msg=f"program={program}")


def test_alibi_slopes_are_the_frontends():
    assert np.allclose(alibi_slopes(8), [2 ** (-x) for x in range(1, 9)])
    n = 4  # 6 heads: 1..4 then 0.5, 1.5 of the base 4 series
    assert np.allclose(alibi_slopes(6), [2 ** (-8 * x / n) for x in (1, 2, 3, 4, 0.5, 1.5)])


def test_attention_errata_are_in_the_table_with_sources():
    from types import SimpleNamespace

    from cudnn_py.plans import errata

    g = half_graph()
    q, k, v = qkv(g, s_q=16, s_kv=2048, d=64)
    g.sdpa(q, k, v, generate_stats=False, sliding_window_length=64)[0].set_output(True)
    g.validate_ir()
    program = SimpleNamespace(source=g, nodes=[])
    hits = {e.id for e in errata.ERRATA if e.match(program) is not None}
    assert {"sdpa-half-9.10.0", "sdpa-sliding-window-long-kv-9.14.0"} <= hits
    assert {e.id for e in errata.applicable(91400)} >= {"sdpa-sliding-window-long-kv-9.14.0"}
    assert "sdpa-half-9.10.0" not in {e.id for e in errata.applicable(91002)}
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="sdpa-half-9.10.0.*scaled_dot_product_flash_attention.h"):
        errata.check(program, 91001)


# ---- backward -------------------------------------------------------------------------------------------------
def _backward(shape, opt, program, seed):
    b, h_q, h_k, s_q, s_kv, d, d_v = shape
    rng = np.random.default_rng(seed)
    data = {"q": rng.standard_normal((b, h_q, s_q, d)), "k": rng.standard_normal((b, h_k, s_kv, d)),
            "v": rng.standard_normal((b, h_k, s_kv, d_v)), "dO": rng.standard_normal((b, h_q, s_q, d_v))}
    ref = {}
    if opt.get("bias"):
        ref["bias"] = rng.standard_normal((1, h_q, s_q, s_kv))
    if opt.get("seq"):
        lens = (rng.integers(1, s_q + 1, b), rng.integers(1, s_kv + 1, b))
        lens[0][0], lens[1][0] = s_q, s_kv
        ref["seq"] = lens
    if opt.get("dropout"):
        ref["dropout"] = ((rng.random((b, h_q, s_q, s_kv)) > 0.25).astype(np.float64), 1 / 0.75)
    if opt.get("sink"):
        ref["sink"] = rng.standard_normal((1, h_q, 1, 1))
    flags = dict(causal=opt.get("causal", False), bottom_right=opt.get("bottom_right", False),
                 window=opt.get("window"), alibi=opt.get("alibi", False))
    scale = 1 / math.sqrt(d)
    o, lse = numpy_attention(data["q"], data["k"], data["v"], scale, **flags, **ref)
    g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
    q, k, v = qkv(g, b, h_q, h_k, s_q, s_kv, d, d_v)
    o_t, do_t, st_t = g.tensor(list(o.shape), name="o"), g.tensor(list(o.shape), name="dO"), g.tensor(list(lse.shape))
    feeds = {q: data["q"], k: data["k"], v: data["v"], o_t: np.nan_to_num(o), do_t: data["dO"],
             st_t: np.nan_to_num(lse, neginf=0.0)}
    kw = {}
    if "bias" in ref:
        bias, dbias = g.tensor([1, h_q, s_q, s_kv], name="bias"), g.tensor([1, h_q, s_q, s_kv], name="dBias")
        feeds[bias] = ref["bias"]
        kw.update(bias=bias, dBias=dbias)
    if "sink" in ref:
        sink, dsink = g.tensor([1, h_q, 1, 1], name="sink"), g.tensor([1, h_q, 1, 1], name="dSink")
        feeds[sink] = ref["sink"]
        kw.update(sink_token=sink, dSink_token=dsink)
    if "seq" in ref:
        sq_t, skv_t = g.tensor([b, 1, 1, 1], data_type=I32), g.tensor([b, 1, 1, 1], data_type=I32)
        feeds[sq_t], feeds[skv_t] = ref["seq"][0].reshape(b, 1, 1, 1), ref["seq"][1].reshape(b, 1, 1, 1)
        kw.update(use_padding_mask=True, seq_len_q=sq_t, seq_len_kv=skv_t)
    if "dropout" in ref:
        m_t, sc_t, inv_t = g.tensor([b, h_q, s_q, s_kv], name="dm"), g.tensor([1, 1, 1, 1]), g.tensor([1, 1, 1, 1])
        feeds[m_t], feeds[sc_t], feeds[inv_t] = ref["dropout"][0], np.full((1, 1, 1, 1), 1 / 0.75), \
            np.full((1, 1, 1, 1), 0.75)
        kw["dropout"] = (m_t, sc_t, inv_t)
    for flag, key in (("causal", "use_causal_mask"), ("bottom_right", "use_causal_mask_bottom_right"),
                      ("alibi", "use_alibi_mask")):
        if flags[flag]:
            kw[key] = True
    if flags["window"]:
        kw["sliding_window_length"] = flags["window"]
    grads = g.sdpa_backward(q, k, v, o_t, do_t, st_t, attn_scale=scale, **kw)
    assert len(grads) == 3
    outs = list(grads) + [kw[x] for x in ("dBias", "dSink_token") if x in kw]
    for t in outs:
        t.set_output(True)
    g.register_backend(ReferenceEngine(program=program))
    g.validate_ir()
    bufs = [np.full(t.dim, np.nan) for t in outs]
    g.execute({**feeds, **dict(zip(outs, bufs))})
    return bufs, data, ref, flags, scale


def finite_differences(data, ref, flags, scale, eps=1e-6):
    """d(sum(O ∘ dO)) by central differences of the independent numpy attention (q, k, v, then bias and sink
    where the case has them)."""
    def loss(**change):
        args = {**data, **change}
        r = {**ref, **{key: change[key] for key in ("bias", "sink") if key in change}}
        o, _ = numpy_attention(args["q"], args["k"], args["v"], scale, **flags, **r)
        return float(np.nansum(o * data["dO"]))

    names = ["q", "k", "v"] + [key for key in ("bias", "sink") if key in ref]
    out = []
    for name in names:
        base = ref[name] if name in ("bias", "sink") else data[name]
        grad = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            up, down = base.copy(), base.copy()
            up[idx] += eps
            down[idx] -= eps
            grad[idx] = (loss(**{name: up}) - loss(**{name: down})) / (2 * eps)
        out.append(grad)
    return out


BACKWARD_OPTIONS = [dict(), dict(causal=True), dict(bias=True), dict(seq=True), dict(dropout=True),
                    dict(window=3, causal=True), dict(alibi=True, causal=True), dict(bottom_right=True),
                    dict(bias=True, causal=True, seq=True, dropout=True), dict(sink=True, causal=True),
                    dict(sink=True, bias=True)]
BACKWARD_SHAPES = [(1, 2, 1, 5, 7, 8, 8), (2, 4, 2, 6, 6, 8, 16)]


@pytest.mark.parametrize("opt", BACKWARD_OPTIONS, ids=lambda o: "-".join(sorted(o)) or "plain")
@pytest.mark.parametrize("shape", BACKWARD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_decomposition_and_definition_agree_with_finite_differences(shape, opt):
    seed = hash(str((shape, opt))) % 2**32
    definition, data, ref, flags, scale = _backward(shape, opt, False, seed)
    decomposed, *_ = _backward(shape, opt, True, seed)
    fd = finite_differences(data, ref, flags, scale)
    valid_q = np.ones(data["q"].shape, bool)
    if "seq" in ref:  # gradients of padded query rows are undefined
        for n in range(shape[0]):
            valid_q[n, :, ref["seq"][0][n]:, :] = False
    for i, (a, b_, expected) in enumerate(zip(definition, decomposed, fd)):
        sel = valid_q if i == 0 else np.isfinite(expected)
        if i == 3 and "seq" in ref:  # dBias rows of padded queries: undefined as well
            sel = np.broadcast_to(valid_q[:1, :, :, :1], expected.shape)
        np.testing.assert_allclose(a[sel], expected[sel], rtol=1e-5, atol=1e-6, err_msg=f"definition, grad {i}")
        np.testing.assert_allclose(b_[sel], a[sel], rtol=1e-9, atol=1e-9, err_msg=f"decomposition, grad {i}")


def test_backward_surface_and_what_reaches_cudnn():
    g = half_graph()
    q, k, v = qkv(g, b=1, h_q=4, h_k=2, s_q=64, s_kv=128, d=64)
    o, d_o = g.tensor([1, 4, 64, 64], name="o"), g.tensor([1, 4, 64, 64], name="dO")
    stats = g.tensor([1, 4, 64, 1], data_type=F, name="stats")
    dq, dk, dv = g.sdpa_backward(q, k, v, o, d_o, stats, attn_scale=0.125, use_causal_mask=True, name="bwd")
    assert (dq.name, dk.name, dv.name) == ("bwd::dQ", "bwd::dK", "bwd::dV")
    for t in (dq, dk, dv):
        t.set_output(True)
    g.validate()  # the composite backward finalizes deviceless on cuDNN 9.28
    assert dk.dim == [1, 2, 128, 64] and dv.stride == v.stride
    methods = [n.spec.method for n in _program(g).nodes]
    assert methods.count("matmul") == 5 and methods.count("attention_view") == 3
    assert methods.count("reduction") == 1 and methods.count("grouped_reduction") == 2  # D; dK, dV head sums
    with pytest.raises(ValueError, match="score_mod needs score_mod_bprop"):
        g.sdpa_backward(q, k, v, o, d_o, stats, score_mod=lambda graph, s: s)
    gm = half_graph()  # max_total_seq_len_q is read with ragged tensors only (tests/test_sdpa_paged.py)
    qm, km, vm = qkv(gm, b=1, h_q=4, h_k=2, s_q=64, s_kv=128, d=64)
    om, dom = gm.tensor([1, 4, 64, 64], name="o"), gm.tensor([1, 4, 64, 64], name="dO")
    for t in gm.sdpa_backward(qm, km, vm, om, dom, gm.tensor([1, 4, 64, 1], data_type=F), max_total_seq_len_q=64):
        t.set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="max_total_seq_len_q is only supported with ragged q"):
        gm.validate_ir()
    with pytest.raises(TypeError, match=r"\(mask, scale, scale_inv\)"):
        g.sdpa_backward(q, k, v, o, d_o, stats, dropout=(g.tensor([1, 4, 64, 128]), g.tensor([1, 1, 1, 1])))
    g2 = half_graph()
    q2, k2, v2 = qkv(g2)
    with pytest.raises(ValueError, match=r"tensor 'o'.*forward's \[2, 4, 12, 16\]"):
        g2.sdpa_backward(q2, k2, v2, g2.tensor([2, 4, 12, 8], name="o"), g2.tensor([2, 4, 12, 16]),
                         g2.tensor([2, 4, 12, 1]))[0].set_output(True)
        g2.validate_ir()


def test_backward_errata():
    from types import SimpleNamespace

    from cudnn_py.plans import errata

    g = half_graph()
    q, k, v = qkv(g, b=1, h_q=2, h_k=2, s_q=64, s_kv=100, d=64)
    padded = g.tensor([1, 2, 64, 64], [2 * 64 * 80, 64 * 80, 80, 1], name="o_padded")
    g.sdpa_backward(q, k, v, padded, g.tensor([1, 2, 64, 64]), g.tensor([1, 2, 64, 1], data_type=F))[0].set_output(True)
    g.validate_ir()
    program = SimpleNamespace(source=g, nodes=[])
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"sdpa-backward-unaligned-kv.*s_kv = 100"):
        errata.check(program, 91500)
    errata.check(program, 92800)  # padded strides: the official frontend's operation graph, no erratum


def test_backward_keeps_softmax_sum_and_the_dq_accumulator_in_the_workspace():
    g = half_graph()
    b, h, s_q, s_kv, d = 1, 2, 64, 128, 64
    q, k, v = qkv(g, b, h, h, s_q, s_kv, d)
    o, d_o = g.tensor([b, h, s_q, d]), g.tensor([b, h, s_q, d])
    dq, dk, dv = g.sdpa_backward(q, k, v, o, d_o, g.tensor([b, h, s_q, 1], data_type=F), attn_scale=0.125)
    for t in (dq, dk, dv):
        t.set_output(True)
    g.validate()
    session = g._session
    names = {session.program.tensors[uid].name: n for uid, n in session.program.scratch.items()}
    assert names == {"0::softmax_sum": b * h * s_q * 4, "0::dQ_accum": b * h * s_q * d * 4}
    executor = session.executor
    assert executor.scratch_bytes == 512 + b * h * s_q * d * 4  # 256-byte aligned, in uid order
    assert not set(session.program.scratch) & set(executor._uids)  # no caller provides them
    methods = [n.spec.method for n in session.program.nodes]
    assert methods[-1] == "identity" and session.program.nodes[-1].outputs["OUT_0"].uid == dq.uid


def test_fully_masked_rows_are_defined_in_the_reference():
    """Query rows past a batch's seq_len_q have no key to attend to: O = 0 and zero gradients, never NaN."""
    g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
    q, k, v = qkv(g, 2, 2, 2, 6, 5, 8)
    sq, skv = g.tensor([2, 1, 1, 1], data_type=I32), g.tensor([2, 1, 1, 1], data_type=I32)
    o, st = g.sdpa(q, k, v, generate_stats=True, use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv)
    o.set_output(True)
    st.set_output(True)
    g.register_backend(ReferenceEngine())
    g.validate_ir()
    rng = np.random.default_rng(3)
    out, stats = np.full(o.dim, np.nan), np.full(st.dim, np.nan)
    g.execute({q: rng.standard_normal(q.dim), k: rng.standard_normal(k.dim), v: rng.standard_normal(v.dim),
               sq: np.array([6, 2]).reshape(2, 1, 1, 1), skv: np.array([5, 3]).reshape(2, 1, 1, 1), o: out, st: stats})
    assert np.all(out[1, :, 2:] == 0) and np.isfinite(out).all()
    assert np.all(stats[1, :, 2:] == -np.inf) and np.isfinite(stats[0]).all()


def test_auto_falls_back_to_the_composite_when_the_unified_graph_finds_no_engine(monkeypatch):
    from types import SimpleNamespace

    from cudnn_py.plans import session as session_module

    g = half_graph()
    q, k, v = qkv(g, s_q=64, s_kv=128, d=64)
    o, _ = g.sdpa(q, k, v, generate_stats=False, name="attn")
    o.set_output(True)
    g.validate()
    s = g._session
    assert [n.op for n in s.program.nodes] == ["sdpa"]
    asked = []

    def query(op_graph, modes, sm_count, defer=False):  # heuristics need a GPU: the unified graph gets none, the composite one
        asked.append(op_graph)
        configs = [] if len(asked) == 1 else [SimpleNamespace(name="fake", engine_index=0, source="A")]
        return session_module.heuristics.HeuristicsResult(configs=configs, ranked=[],
                                                          per_mode=[("CUDNN_HEUR_MODE_A", f"{len(configs)} configs")])

    monkeypatch.setattr(session_module.heuristics, "query", query)
    monkeypatch.setattr(s, "planning_handle", lambda: None)
    s._advance(session_module.Phase.OPERATION_GRAPH)
    s.create_execution_plans([cudnn.heur_mode.A])
    assert len(asked) == 2 and "matmul" in [n.op for n in s.program.nodes]
    assert any("AUTO fell back to the composite attention" in line and "'attn'" in line for line in s.program.log)


def test_score_max_and_sum_exp_outputs():
    g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
    q, k, v = qkv(g, 2, 4, 2, 12, 20, 16)
    mx, se = g.tensor([2, 4, 12, 1], name="max"), g.tensor([2, 4, 12, 1], name="sum_exp")
    with pytest.raises(ValueError, match="score_max with score_sum_exp"):
        g2 = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
        q2, k2, v2 = qkv(g2, 2, 4, 2, 12, 20, 16)
        g2.sdpa(q2, k2, v2, generate_stats=True, score_max=g2.tensor([2, 4, 12, 1]),
                score_sum_exp=g2.tensor([2, 4, 12, 1]))[0].set_output(True)
        g2.validate_ir()
    o, none = g.sdpa(q, k, v, generate_stats=False, use_causal_mask=True, score_max=mx, score_sum_exp=se,
                     implementation=AI.AUTO)
    assert none is None
    o.set_output(True)
    g.validate()
    assert "matmul" in [n.op for n in _program(g).nodes]  # the unified op's softmax descriptor is not built: composite
    rng = np.random.default_rng(5)
    data = {q: rng.standard_normal(q.dim), k: rng.standard_normal(k.dim), v: rng.standard_normal(v.dim)}
    _, lse = numpy_attention(data[q], data[k], data[v], 1.0, causal=True)
    for program in (False, True):
        g3 = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
        q3, k3, v3 = qkv(g3, 2, 4, 2, 12, 20, 16)
        mx3, se3 = g3.tensor([2, 4, 12, 1]), g3.tensor([2, 4, 12, 1])
        o3, _ = g3.sdpa(q3, k3, v3, generate_stats=False, use_causal_mask=True, score_max=mx3, score_sum_exp=se3,
                        implementation=AI.COMPOSITE)
        o3.set_output(True)
        g3.register_backend(ReferenceEngine(program=program))
        g3.validate_ir()
        m_out, z_out = np.full(mx3.dim, np.nan), np.full(se3.dim, np.nan)
        g3.execute({q3: data[q], k3: data[k], v3: data[v], o3: np.full(o3.dim, np.nan), mx3: m_out, se3: z_out})
        np.testing.assert_allclose(m_out + np.log(z_out), lse, rtol=1e-12, err_msg=f"program={program}")
        s = np.einsum("bhqd,bhkd->bhqk", data[q], np.repeat(data[k], 2, axis=1))
        s = np.where(np.tril(np.ones((12, 20), bool)), s, -np.inf)
        np.testing.assert_allclose(m_out, s.max(-1, keepdims=True), rtol=1e-12)


def softcap(graph, score):
    return graph.mul(graph.tanh(graph.div(score, 4.0)), 4.0)


def causal_in_callback(graph, score):
    row = graph.gen_index(score, 2, compute_data_type=I32)
    col = graph.gen_index(score, 3, compute_data_type=I32)
    keep = graph.cmp_ge(row, col, compute_data_type=cudnn.data_type.BOOLEAN)
    return graph.binary_select(score, -math.inf, keep)


@pytest.mark.parametrize("fn", [softcap, causal_in_callback], ids=lambda f: f.__name__)
def test_score_mod_callbacks(fn):
    rng = np.random.default_rng(8)
    b, h, s_q, s_kv, d = 2, 2, 9, 13, 8
    data = [rng.standard_normal((b, h, s_q, d)), rng.standard_normal((b, h, s_kv, d)),
            rng.standard_normal((b, h, s_kv, d))]
    s = np.einsum("bhqd,bhkd->bhqk", data[0], data[1]) * 0.5
    s = 4.0 * np.tanh(s / 4.0) if fn is softcap else np.where(np.tril(np.ones((s_q, s_kv), bool)), s, -np.inf)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True)) + s.max(-1, keepdims=True)
    expected = np.einsum("bhqk,bhkd->bhqd", np.exp(s - lse), data[2])
    for program in (False, True):
        g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
        q, k, v = qkv(g, b, h, h, s_q, s_kv, d)
        o, st = g.sdpa(q, k, v, generate_stats=True, attn_scale=0.5, score_mod=fn, implementation=AI.AUTO)
        o.set_output(True)
        st.set_output(True)
        g.register_backend(ReferenceEngine(program=program))
        g.validate_ir()
        out, stats = np.full(o.dim, np.nan), np.full(st.dim, np.nan)
        g.execute({q: data[0], k: data[1], v: data[2], o: out, st: stats})
        np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12, err_msg=f"program={program}")
        np.testing.assert_allclose(stats, lse, rtol=1e-10, err_msg=f"program={program}")


def test_score_mod_reaches_cudnn_and_refuses_what_the_frontend_does():
    g = half_graph()
    q, k, v = qkv(g, b=1, h_q=2, h_k=2, s_q=64, s_kv=128, d=64)
    cap = g.tensor([1, 1, 1, 1], data_type=F, name="cap")
    o, _ = g.sdpa(q, k, v, generate_stats=False, score_mod=lambda graph, s: graph.mul(graph.tanh(graph.div(s, cap)),
                                                                                         cap))
    o.set_output(True)
    g.validate()  # composite (the unified op's score subgraph is not built), finalized deviceless
    modes = [n.params.get("mode") for n in _program(g).nodes if n.op == "pointwise"]
    assert modes[:3] == ["CUDNN_POINTWISE_DIV", "CUDNN_POINTWISE_TANH_FWD", "CUDNN_POINTWISE_MUL"]
    assert cap.uid in g._session.executor._slot_by_key  # the callback's tensor is an operand of the graph
    gc = half_graph()  # accepted by the builder, not supported at validate (the frontend's rule and moment)
    qc, kc, vc = qkv(gc)
    gc.sdpa(qc, kc, vc, generate_stats=False, score_mod=softcap, use_causal_mask=True)[0].set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="score_mod excludes a causal mask"):
        gc.validate_ir()
    with pytest.raises(TypeError, match="callable"):
        g.sdpa(q, k, v, generate_stats=False, score_mod=3)
    g2 = half_graph()
    q2, k2, v2 = qkv(g2)
    g2.sdpa(q2, k2, v2, generate_stats=False, score_mod=lambda graph, s: graph.matmul(s, s))[0].set_output(True)
    with pytest.raises(AttributeError, match="pointwise ops only; 'matmul'"):
        g2.validate()


def test_attention_errata_seen_on_the_h200():
    """A composite sliding window and the backward with dropout or a sink token, wrong on the H200 with cuDNN 9.19,
    are not refused: they were our decomposition's faults (test_composite_band_masks_are_the_frontends,
    test_backward_dq_reads_k_in_float, test_backward_dsink_is_the_reduction_into_dsink)."""
    g = half_graph()
    q, k, v = qkv(g, b=1, h_q=2, h_k=2, s_q=64, s_kv=128, d=64)
    g.sdpa(q, k, v, generate_stats=True, use_causal_mask=True, sliding_window_length=33,
           implementation=AI.COMPOSITE)[0].set_output(True)
    g.validate()

    def backward(**kw):
        g = half_graph()
        q, k, v = qkv(g, b=1, h_q=2, h_k=2, s_q=64, s_kv=128, d=64)
        o, d_o = g.tensor([1, 2, 64, 64], name="o"), g.tensor([1, 2, 64, 64], name="dO")
        stats = g.tensor([1, 2, 64, 1], data_type=F, name="stats")
        if kw.pop("mask", False):
            kw["dropout"] = (g.tensor([1, 2, 64, 128], name="dm"), g.tensor([1, 1, 1, 1]), g.tensor([1, 1, 1, 1]))
        if kw.pop("sink", False):
            kw.update(sink_token=g.tensor([1, 2, 1, 1], data_type=F), dSink_token=g.tensor([1, 2, 1, 1], data_type=F))
        for t in g.sdpa_backward(q, k, v, o, d_o, stats, use_causal_mask=True, **kw):
            t.set_output(True)
        return g

    backward().validate()  # the plain backward is not refused
    # a dropout mask: wrong in the official frontend too, on the same engine (fuzz/errata_probe, 2026-12-03)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"sdpa-backward-dropout-mask"):
        backward(mask=True).validate()
    backward(sink=True).validate()  # nor with a sink token (dSink was NEGated after its reduction, see below)
    g = half_graph()
    seed = [g.tensor([1, 1, 1, 1], data_type=cudnn.data_type.INT64, name=n) for n in ("seed", "offset")]
    q, k, v = qkv(g, b=1, h_q=2, h_k=2, s_q=64, s_kv=128, d=64)
    o, d_o = g.tensor([1, 2, 64, 64], name="o"), g.tensor([1, 2, 64, 64], name="dO")
    for t in g.sdpa_backward(q, k, v, o, d_o, g.tensor([1, 2, 64, 1], data_type=F), dropout=(0.0, *seed)):
        t.set_output(True)
    g.validate()  # probability 0 drops nothing: the dropout erratum does not apply


def test_dropout_probability_zero_is_no_dropout_for_the_unified_gates():
    g = half_graph()
    q, k, v = qkv(g, s_q=40, s_kv=72, d=64)
    seed, offset = (g.tensor([1, 1, 1, 1], data_type=cudnn.data_type.INT64, name=n) for n in ("seed", "offset"))
    o, st = g.sdpa(q, k, v, generate_stats=True, dropout=(0.0, seed, offset))
    o.set_output(True)
    st.set_output(True).set_data_type(F)
    g.validate()
    on_919 = _program(g, lambda f, at_least=0: versions.since(f) <= 91900 and at_least <= 91900)
    assert [n.op for n in on_919.nodes] == ["sdpa"]  # not sent to the composite for a dropout of nothing


def test_o_takes_q_layout_where_batch_is_not_outermost():
    """SBHD q / k / v (strides [h*d, d, b*h*d, 1]): O is inferred in Q's layout, not refused."""
    b, h, s, d = 2, 4, 12, 16
    g = half_graph()
    q, k, v = (g.tensor([b, h, s, d], [h * d, d, b * h * d, 1], name=n) for n in ("q", "k", "v"))
    o, _ = g.sdpa(q, k, v, generate_stats=False)
    o.set_output(True)
    g.validate_ir()
    assert list(o.stride) == [h * d, d, b * h * d, 1]


def test_rng_dump_with_dropout_probability_zero_is_refused():
    """p = 0 builds no RNG, so an rng_dump would never be written: refused rather than left unwritten."""
    g = half_graph()
    q, k, v = qkv(g)
    seed, offset = (g.tensor([1, 1, 1, 1], data_type=cudnn.data_type.INT64) for _ in range(2))
    with pytest.raises(ValueError, match="rng_dump needs a dropout probability above 0"):
        g.sdpa(q, k, v, generate_stats=False, dropout=(0.0, seed, offset), rng_dump=g.tensor([2, 4, 12, 20]))
    o, d_o = g.tensor([2, 4, 12, 16], name="o"), g.tensor([2, 4, 12, 16], name="dO")
    stats = g.tensor([2, 4, 12, 1], data_type=F, name="stats")
    with pytest.raises(ValueError, match=r"sdpa_backward\(\): rng_dump needs a dropout probability above 0"):
        g.sdpa_backward(q, k, v, o, d_o, stats, dropout=(0.0, seed, offset), rng_dump=g.tensor([2, 4, 12, 20]))


def _on_919(feature, at_least=0):
    return versions.since(feature) <= 91900 and at_least <= 91900


@pytest.mark.parametrize("bottom_right", [False, True])
def test_composite_band_masks_are_the_frontends(bottom_right):
    """The composite causal + sliding-window masks as the frontend builds them (its API log on cuDNN 9.19): each bound
    indexes the scores it masks - the causal select's output for the window - with a GEN_INDEX pair of its own
    (row, then column), computed in FLOAT with INT32 indices. One pair shared by both bounds (indexing the scores
    before either select) found no engine (causal + window) or gave wrong results (bottom-right + window + padding)
    on the H200. The probabilities' tensor is made before the statistics' (its uid decides where cuDNN sorts the
    stats branch: before exp / sum and bmm2, as the frontend's)."""
    g = half_graph()
    s_q, s_kv = (70, 150) if bottom_right else (150, 150)
    q, k, v = qkv(g, b=2, h_q=4, h_k=4, s_q=s_q, s_kv=s_kv, d=64)
    kw = {}
    if bottom_right:
        kw = dict(diagonal_alignment=cudnn.diagonal_alignment.BOTTOM_RIGHT, use_padding_mask=True,
                  seq_len_q=g.tensor([2, 1, 1, 1], data_type=I32), seq_len_kv=g.tensor([2, 1, 1, 1], data_type=I32))
    o, st = g.sdpa(q, k, v, generate_stats=True, attn_scale=0.125, diagonal_band_left_bound=20 if bottom_right else 33,
                   diagonal_band_right_bound=0, implementation=AI.COMPOSITE, **kw)
    o.set_output(True)
    st.set_output(True).set_data_type(F)
    g.validate()  # deviceless: finalized on this machine's cuDNN
    p = _program(g, _on_919)  # the composite chain, as on cuDNN 9.19 (>= 9.21 has the band-mask op)
    nodes = p.nodes
    selects = [i for i, n in enumerate(nodes) if n.spec.method == "binary_select"]
    band = selects[-2:]  # the padding mask's select comes first
    start = selects[-3] + 1 if bottom_right else 2
    right_bound = [n.spec.method for n in nodes[start:band[0] + 1]]
    left_bound = [n.spec.method for n in nodes[band[0] + 1:band[1] + 1]]
    if bottom_right:
        assert right_bound == ["gen_index", "gen_index", "add", "sub", "cmp_ge", "binary_select"]
        assert left_bound == ["gen_index", "gen_index", "add", "sub", "add", "cmp_gt", "binary_select"]
    else:
        assert right_bound == ["gen_index", "gen_index", "cmp_ge", "binary_select"]
        assert left_bound == ["gen_index", "gen_index", "add", "cmp_gt", "binary_select"]
    for first, end in ((start, band[0]), (band[0] + 1, band[1])):
        row, col = nodes[first], nodes[first + 1]
        assert (row.params["axis"], col.params["axis"]) == (2, 3)
        masked = nodes[end].inputs["IN_0"]  # the scores this bound's select masks
        for n in (row, col):
            assert n.inputs["IN_0"].uid == masked.uid
            assert n.params["compute_data_type"] is F and n.outputs["OUT_0"].data_type is I32
    assert nodes[band[1]].inputs["IN_0"].uid == nodes[band[0]].outputs["OUT_0"].uid  # the window masks the causal output
    div = next(n for n in nodes if n.spec.method == "div")
    max_ = next(n for n in nodes if n.spec.method == "reduction")
    assert div.outputs["OUT_0"].uid < max_.outputs["Y"].uid


@pytest.mark.parametrize("dropout", [None, "mask", "rng"])
def test_backward_dq_reads_k_in_float(dropout, monkeypatch):
    """The backward as the frontend builds it (its API log on cuDNN 9.19): dQ = dS · K with K viewed back from Kᵀ
    as a FLOAT virtual tensor (ours was in K's HALF: a FLOAT x HALF matmul, and a wrong dQ with dropout on the
    H200), dO ∘ O with the frontend's strides (h·s·d, s·d, h·d, 1), and one by-value dropout scale shared by P's
    and dS's dropout."""
    g = half_graph()
    b, h, s, d = 2, 4, 128, 64
    q, k, v = qkv(g, b=b, h_q=h, h_k=h, s_q=s, s_kv=s, d=d)
    o, d_o = g.tensor([b, h, s, d], name="o"), g.tensor([b, h, s, d], name="dO")
    kw = {}
    if dropout == "mask":  # refused as an erratum on the GPU (cuDNN's bug): lifted here to read the decomposition
        from cudnn_py.plans import errata
        monkeypatch.setattr(errata, "ERRATA", tuple(e for e in errata.ERRATA if e.id != "sdpa-backward-dropout-mask"))
        kw["dropout"] = (g.tensor([b, h, s, s], name="dm"), g.tensor([1, 1, 1, 1], data_type=F),
                         g.tensor([1, 1, 1, 1], data_type=F))
    elif dropout == "rng":
        kw["dropout"] = (0.2, *(g.tensor([1, 1, 1, 1], data_type=cudnn.data_type.INT64, name=n) for n in ("sd", "of")))
    for t in g.sdpa_backward(q, k, v, o, d_o, g.tensor([b, h, s, 1], data_type=F), attn_scale=0.125,
                             use_causal_mask=True, **kw):
        t.set_output(True)
    g.validate()  # deviceless
    p = _program(g)
    matmuls = [n for n in p.nodes if n.spec.method == "matmul"]
    dq_mm = matmuls[-1]  # into the FLOAT dQ accumulator
    assert dq_mm.inputs["A"].data_type is F and dq_mm.inputs["B"].data_type is F
    assert list(dq_mm.inputs["B"].dim) == [b, h, s, d]
    d_o_o = next(n for n in p.nodes if n.spec.method == "mul" and {t.uid for t in n.inputs.values()} >= {d_o.uid, o.uid})
    assert list(d_o_o.outputs["OUT_0"].stride) == [h * s * d, s * d, h * d, 1]
    if dropout == "rng":
        by_value = [t.uid for n in p.nodes if n.spec.method == "mul" for t in n.inputs.values()
                    if t.is_pass_by_value and t.pass_by_value == pytest.approx(1 / 0.8)]
        assert len(by_value) == 2 and len(set(by_value)) == 1  # P's and dS's dropout read one scale


@pytest.mark.parametrize("causal", [True, False])
def test_backward_dsink_is_the_reduction_into_dsink(causal):
    """dSink as the frontend builds it (its API log on cuDNN 9.19 and 9.28): REDUCE_ADD(exp(sink - Stats) · D)
    over (b, s_q) straight into the user's dSink, which the fused backward engine negates itself. Ours reduced into
    a virtual tensor and NEGated that into dSink: the H200's engine (cuDNN 9.19, eng6) left dSink unwritten."""
    g = half_graph()
    b, h, s_q, s_kv, d = 2, 4, 100, 150, 64
    q, k, v = qkv(g, b=b, h_q=h, h_k=h, s_q=s_q, s_kv=s_kv, d=d)
    o, d_o = g.tensor([b, h, s_q, d], name="o"), g.tensor([b, h, s_q, d], name="dO")
    stats = g.tensor([b, h, s_q, 1], data_type=F, name="stats")
    sink, d_sink = g.tensor([1, h, 1, 1], data_type=F, name="sink"), g.tensor([1, h, 1, 1], data_type=F, name="dS")
    for t in g.sdpa_backward(q, k, v, o, d_o, stats, attn_scale=0.125, use_causal_mask=causal, sink_token=sink,
                             dSink_token=d_sink):
        t.set_output(True)
    d_sink.set_output(True)
    g.validate()  # not refused (deviceless, cuDNN 9.28)
    p = _program(g, lambda f, at_least=0: versions.since(f) <= 91900 and at_least <= 91900)  # as on the H200
    producer = {t.uid: n for n in p.nodes for t in n.outputs.values()}
    red = producer[d_sink.uid]
    assert red.op == "reduction" and red.params["mode"] is cudnn.reduction_mode.ADD
    assert red.params["compute_data_type"] is F and list(red.inputs["X"].dim) == [b, h, s_q, 1]
    assert not any(d_sink.uid in {t.uid for t in n.inputs.values()} for n in p.nodes)  # no NEG after it
    mul = producer[red.inputs["X"].uid]
    assert mul.spec.method == "mul"
    exp_sink, d_row = (producer[mul.inputs[x].uid] for x in ("IN_0", "IN_1"))
    assert exp_sink.spec.method == "exp" and d_row.op == "reduction"  # D = rowsum(dO ∘ O), before any scale
    sub = producer[exp_sink.inputs["IN_0"].uid]
    assert [sub.inputs[x].uid for x in ("IN_0", "IN_1")] == [sink.uid, stats.uid]
