"""Paged KV caches and ragged (THD) attention on the CPU: what reaches cuDNN (the composite's PAGED_CACHE_LOAD
ops and the unified op's page tables, finalized deviceless on cuDNN 9.28), the validation rules naming the tensor
and the rule, and the composite decomposition (``ReferenceEngine(program=True)``) against the definition
(``ReferenceEngine()``) and an independent numpy attention over the unpaged, unpacked tensors."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.ir.passes import PassOptions, prepare
from tests.test_sdpa import numpy_attention

H, F, D = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.DOUBLE
I32, I64 = cudnn.data_type.INT32, cudnn.data_type.INT64
AI = cudnn.attention_implementation


def running(feature, at_least=0):
    return versions.available(feature) and versions.runtime_version() >= at_least


def half_graph():
    return cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)


def paged_case(g, b=2, h_q=4, h_k=2, s_q=1, block=16, pages=3, d=64, num_blocks=8, **kw):
    """A paged sdpa: K / V page containers (num_blocks, h_k, block, d), INT32 page tables (b, 1, pages, 1)."""
    q = g.tensor([b, h_q, s_q, d], name="q")
    kc = g.tensor([num_blocks, h_k, block, d], name="k_pages")
    vc = g.tensor([num_blocks, h_k, block, d], name="v_pages")
    tk = g.tensor([b, 1, pages, 1], data_type=I32, name="k_table")
    tv = g.tensor([b, 1, pages, 1], data_type=I32, name="v_table")
    sq = g.tensor([b, 1, 1, 1], data_type=I32, name="seq_q")
    skv = g.tensor([b, 1, 1, 1], data_type=I32, name="seq_kv")
    args = dict(generate_stats=False, attn_scale=1 / math.sqrt(d), use_padding_mask=True, seq_len_q=sq,
                seq_len_kv=skv, paged_attention_k_table=tk, paged_attention_v_table=tv)
    args.update(kw)
    o, _ = g.sdpa(q, kc, vc, **args)
    o.set_output(True)
    return SimpleTensors(q=q, kc=kc, vc=vc, tk=tk, tv=tv, sq=sq, skv=skv, o=o)


class SimpleTensors(dict):
    __getattr__ = dict.__getitem__


# ---- what reaches cuDNN --------------------------------------------------------------------------------------
def test_composite_paged_attention_loads_k_and_v_through_paged_cache_load_deviceless():
    from cudnn_py.families.paged_cache.lowering import lower
    from cudnn_py.lowering import TensorTable

    g = half_graph()
    t = paged_case(g, s_q=1, implementation=AI.COMPOSITE)
    g.validate()  # finalized without a device on this machine's cuDNN (9.28)
    p = prepare(g, PassOptions(available=running))
    ops = [n.op for n in p.nodes]
    assert ops[0] == "paged_cache_load" and ops[-2:] == ["paged_cache_load", "matmul"]
    k_load, v_load = p.nodes[0], p.nodes[-2]
    assert k_load.inputs["CONTAINER"].uid == t.kc.uid and k_load.inputs["PAGE_TABLE"].uid == t.tk.uid
    assert k_load.inputs["SEQ_LEN"].uid == t.skv.uid and v_load.inputs["PAGE_TABLE"].uid == t.tv.uid
    k_cache, v_cache = k_load.outputs["Y"], v_load.outputs["Y"]
    s_kv = 3 * 16
    assert k_cache.is_virtual and k_cache.dim == [2, 2, 64, s_kv] and k_cache.stride == [64 * s_kv * 2, 64 * s_kv, 1, 64]
    assert v_cache.dim == [2, 2, s_kv, 64] and v_cache.stride == [64 * s_kv * 2, 64 * s_kv, 64, 1]
    assert p.nodes[1].op == "matmul" and p.nodes[1].inputs["B"] is k_cache
    assert p.nodes[-1].inputs["B"] is v_cache
    (op,) = lower(k_load, TensorTable())
    for attr in ("CONTAINER_DESC", "PAGE_TABLE_DESC", "SEQUENCE_DESC", "YDESC"):
        assert op.get(f"CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_{attr}") is not None


def test_unified_paged_attention_attaches_the_page_tables_deviceless():
    if versions.runtime_version() < 91500:
        pytest.skip("needs cuDNN >= 9.15 on this machine")
    from cudnn_py.families.attention.lowering import lower
    from cudnn_py.lowering import TensorTable

    g = half_graph()
    t = paged_case(g, s_q=7, h_q=8, h_k=2, implementation=AI.UNIFIED, paged_attention_max_seq_len_kv=40)
    g.validate()
    (node,) = prepare(g, PassOptions(available=running)).nodes
    (op,) = lower(node, TensorTable())
    prefix = "CUDNN_ATTR_OPERATION_SDPA_FWD_"
    assert op.get(prefix + "KDESC").get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [8, 2, 16, 64]  # the container
    assert op.get(prefix + "PAGE_TABLE_KDESC").get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [2, 1, 3, 1]
    assert op.get(prefix + "PAGE_TABLE_VDESC") is not None and op.get(prefix + "SEQ_LEN_KVDESC") is not None
    assert t.o.dim == [2, 8, 7, 64]


def test_auto_before_9_15_takes_paged_attention_to_the_composite():
    g = half_graph()
    paged_case(g, s_q=1)
    g.validate_ir()
    on_914 = prepare(g, PassOptions(available=lambda f, at_least=0: versions.since(f) <= 91400 and at_least <= 91400))
    assert [n.op for n in on_914.nodes][0] == "paged_cache_load"
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="UNIFIED is not supported.*needs cuDNN >= 9.15"):
        g2 = half_graph()
        paged_case(g2, s_q=1, implementation=AI.UNIFIED)
        g2.validate_ir()
        prepare(g2, PassOptions(available=lambda f, at_least=0: versions.since(f) <= 91400 and at_least <= 91400))


def test_ragged_offsets_reach_the_tensor_descriptors_of_the_unified_and_composite_graphs():
    from cudnn_py.lowering import TensorTable

    for impl in (AI.COMPOSITE, AI.UNIFIED):
        g = half_graph()
        t = ragged_graph(g, b=2, h=2, s_q=40, s_kv=72, d=64, impl=impl, generate_stats=True)
        g.validate()  # deviceless finalize of the whole operation graph
        p = prepare(g, PassOptions(available=running))
        table = TensorTable()
        for name in ("q", "k", "v", "o"):
            desc = table(p.tensors[t[name].uid])
            assert desc.attributes["CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC"], (impl, name)
        assert [n.op for n in p.nodes][0] == ("sdpa" if impl is AI.UNIFIED else "matmul")


# ---- validation -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case, match", [
    ("table_dims", r"tensor 'k_table'.*\[b, 1, ceil\(s_kv / block_size\), 1\] = \[2, 1, 3, 1\].*got \[2, 1, 4, 1\]"),
    ("table_dtype", r"tensor 'k_table'.*page table must be INT32, got FLOAT"),
    ("no_padding", r"paged attention needs seq_len_q and seq_len_kv"),
    ("max_without_paging", r"paged_attention_max_seq_len_kv is only read with a page table"),
    ("max_too_long", r"tensor 'v_table'.*\[2, 1, 4, 1\].*s_kv 60.*got \[2, 1, 3, 1\]"),
    ("container_heads", r"tensor 'k_pages'.*3 heads do not divide q's 4"),
    ("ragged_container", r"tensor 'k_pages'.*page container cannot be ragged"),
])
def test_paged_validation_names_the_tensor_and_rule(case, match):
    g = half_graph()
    b, d = 2, 64
    q = g.tensor([b, 4, 1, d], name="q")
    kc = g.tensor([8, 3 if case == "container_heads" else 2, 16, d], name="k_pages")
    vc = g.tensor([8, 2, 16, d], name="v_pages")
    if case == "ragged_container":
        kc.set_ragged_offset(g.tensor([9, 1, 1, 1], data_type=I32, name="off"))
    tk = g.tensor([b, 1, 4 if case in ("table_dims", "max_too_long") else 3, 1],
                  data_type=F if case == "table_dtype" else I32, name="k_table")
    tv = g.tensor([b, 1, 3, 1], data_type=I32, name="v_table")
    seq = dict(use_padding_mask=True, seq_len_q=g.tensor([b, 1, 1, 1], data_type=I32),
               seq_len_kv=g.tensor([b, 1, 1, 1], data_type=I32))
    kw = dict(paged_attention_k_table=tk, paged_attention_v_table=tv, **seq)
    if case == "no_padding":
        kw = dict(paged_attention_k_table=tk, paged_attention_v_table=tv)
    if case == "max_without_paging":
        kc, vc = g.tensor([b, 2, 48, d], name="k"), g.tensor([b, 2, 48, d], name="v")
        kw = dict(paged_attention_max_seq_len_kv=48)
    if case == "max_too_long":
        kw["paged_attention_max_seq_len_kv"] = 60
    o, _ = g.sdpa(q, kc, vc, generate_stats=False, **kw)
    o.set_output(True)
    not_supported = case in ("no_padding", "max_without_paging", "container_heads")  # the frontend's classes
    with pytest.raises(cudnn.cudnnGraphNotSupportedError if not_supported else ValueError, match=match):
        g.validate_ir()


def test_paged_with_lengths_read_by_score_mod_needs_no_padding_mask():
    """The frontend pages K / V up to seq_len_kv whenever both lengths are given: a score_mod that builds its own
    masks from them needs no use_padding_mask (a flexible-attention decode)."""
    g = half_graph()
    b, d = 2, 64
    q, kc, vc = g.tensor([b, 4, 1, d], name="q"), g.tensor([8, 2, 16, d], name="k_pages"), \
        g.tensor([8, 2, 16, d], name="v_pages")
    tk, tv = (g.tensor([b, 1, 3, 1], data_type=I32, name=n) for n in ("k_table", "v_table"))
    slq, slkv = (g.tensor([b, 1, 1, 1], data_type=I32, name=n) for n in ("slq", "slkv"))

    def mask(graph, s):
        col = graph.gen_index(s, axis=3, compute_data_type=I32)
        col.set_data_type(I32)
        keep = graph.cmp_lt(col, slkv, compute_data_type=cudnn.data_type.BOOLEAN)
        keep.set_data_type(cudnn.data_type.BOOLEAN)
        return graph.binary_select(s, g.tensor([1, 1, 1, 1], data_type=F, is_pass_by_value=True), keep)

    o, _ = g.sdpa(q, kc, vc, seq_len_q=slq, seq_len_kv=slkv, generate_stats=False, paged_attention_k_table=tk,
                  paged_attention_v_table=tv, paged_attention_max_seq_len_kv=48, score_mod=mask)
    o.set_output(True)
    g.validate_ir()


def test_max_seq_len_kv_must_be_a_positive_int():
    g = half_graph()
    q, k, v = (g.tensor([1, 2, 8, 16]) for _ in range(3))
    with pytest.raises(ValueError, match=">= 1"):
        g.sdpa(q, k, v, generate_stats=False, paged_attention_max_seq_len_kv=0)
    with pytest.raises(TypeError, match="needs an int"):
        g.sdpa(q, k, v, generate_stats=False, paged_attention_max_seq_len_kv=2.5)


@pytest.mark.parametrize("case, match", [
    ("dtype", r"tensor 'dq'.*ragged offset 'off_q' must be INT32 or INT64, got FLOAT"),
    ("length", r"tensor 'q'.*ragged offset 'off_q' needs dims \[b \+ 1, 1, 1, 1\] = \[2, 1, 1, 1\]"),
])
def test_ragged_offsets_checked_in_the_backward_too(case, match):
    g = half_graph()
    b, h, s, d = 1, 2, 8, 16
    off = g.tensor([b + (1 if case == "dtype" else 2), 1, 1, 1], data_type=F if case == "dtype" else I32,
                   name="off_q")
    q = g.tensor([b, h, s, d], [s * h * d, d, h * d, 1], name="q")
    if case == "length":
        q.set_ragged_offset(off)
    k, v, o, d_o = (g.tensor([b, h, s, d], [s * h * d, d, h * d, 1], name=n) for n in "kvoO")
    stats = g.tensor([b, h, s, 1], data_type=F, name="stats")
    lens = [g.tensor([b, 1, 1, 1], data_type=I32) for _ in range(2)]
    dq, dk, dv = g.sdpa_backward(q, k, v, o, d_o, stats, use_padding_mask=True, seq_len_q=lens[0],
                                 seq_len_kv=lens[1])
    dq.set_name("dq")
    if case == "dtype":
        dq.set_ragged_offset(off)
    for t in (dq, dk, dv):
        t.set_output(True)
    with pytest.raises(ValueError, match=match):
        g.validate_ir()


# ---- the decomposition against the definition and numpy --------------------------------------------------------
def paged_data(rng, b, h_k, block, pages, d, num_blocks, lens):
    """Random page containers and page tables (distinct pages in a random order) and the dense caches they hold."""
    kc = rng.standard_normal((num_blocks, h_k, block, d))
    vc = rng.standard_normal((num_blocks, h_k, block, d))
    order = rng.permutation(num_blocks)[: b * pages].reshape(b, pages)
    s_kv = block * pages
    k = np.zeros((b, h_k, s_kv, d))
    v = np.zeros((b, h_k, s_kv, d))
    for n in range(b):
        for s in range(s_kv):
            k[n, :, s] = kc[order[n, s // block], :, s % block]
            v[n, :, s] = vc[order[n, s // block], :, s % block]
    return kc, vc, order.reshape(b, 1, pages, 1).astype(np.int32), k, v


PAGED = [  # (b, h_q, h_k, s_q, block, pages, d, num_blocks, options)
    (2, 4, 2, 1, 8, 3, 16, 8, {}),  # decode, GQA
    (3, 2, 2, 1, 4, 5, 8, 16, {}),
    (2, 4, 1, 6, 8, 2, 16, 5, {"bottom_right": True}),  # prefill, MQA, causal from the cache's end
    (2, 4, 2, 5, 8, 3, 8, 7, {"max": 20}),  # max_seq_len_kv shorter than the pages
]


@pytest.mark.parametrize("case", PAGED, ids=lambda c: "b{}h{}k{}q{}bs{}p{}".format(*c[:6]))
def test_paged_decomposition_and_definition_agree_with_numpy(case):
    b, h_q, h_k, s_q, block, pages, d, num_blocks, opt = case
    rng = np.random.default_rng(sum(case[:8]))
    s_kv = opt.get("max", block * pages)
    lens_kv = rng.integers(max(1, s_q), s_kv + 1, b)
    lens_kv[0] = s_kv
    lens_q = np.full(b, s_q)
    kc, vc, table, k, v = paged_data(rng, b, h_k, block, pages, d, num_blocks, lens_kv)
    q = rng.standard_normal((b, h_q, s_q, d))
    scale = 1 / math.sqrt(d)
    expected, lse = numpy_attention(q, k[:, :, :s_kv], v[:, :, :s_kv], scale, seq=(lens_q, lens_kv),
                                    bottom_right=opt.get("bottom_right", False))
    for program in (False, True):
        g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
        kw = {"use_causal_mask_bottom_right": True} if opt.get("bottom_right") else {}
        if "max" in opt:
            kw["paged_attention_max_seq_len_kv"] = opt["max"]
        t = paged_case(g, b=b, h_q=h_q, h_k=h_k, s_q=s_q, block=block, pages=pages, d=d, num_blocks=num_blocks,
                       implementation=AI.COMPOSITE, generate_stats=True, **kw)
        g.register_backend(ReferenceEngine(program=program))
        out = np.full((b, h_q, s_q, d), np.nan)
        g.execute({t.q: q, t.kc: kc, t.vc: vc, t.tk: table, t.tv: table.copy(), t.sq: lens_q.reshape(b, 1, 1, 1),
                   t.skv: lens_kv.reshape(b, 1, 1, 1), t.o: out})
        np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-10, err_msg=f"program={program}")
    assert np.isfinite(lse).all()


def ragged_graph(g, b, h, s_q, s_kv, d, impl=AI.COMPOSITE, generate_stats=False, **kw):
    """THD q / k / v / o: dims (b, h, s, d) with BSHD strides, each batch at its ragged offset."""
    def tensor(s, name, offset):
        return g.tensor([b, h, s, d], [s * h * d, d, h * d, 1], name=name, ragged_offset=offset)

    off_q = g.tensor([b + 1, 1, 1, 1], data_type=I64, name="off_q")
    off_kv = g.tensor([b + 1, 1, 1, 1], data_type=I32, name="off_kv")
    q, k, v = tensor(s_q, "q", off_q), tensor(s_kv, "k", off_kv), tensor(s_kv, "v", off_kv)
    sq, skv = g.tensor([b, 1, 1, 1], data_type=I32, name="sq"), g.tensor([b, 1, 1, 1], data_type=I32, name="skv")
    o, st = g.sdpa(q, k, v, generate_stats=generate_stats, attn_scale=1 / math.sqrt(d), use_padding_mask=True,
                   seq_len_q=sq, seq_len_kv=skv, implementation=impl, **kw)
    o.set_output(True).set_ragged_offset(off_q)
    if st is not None:
        st.set_output(True).set_data_type(F)
    return SimpleTensors(q=q, k=k, v=v, o=o, stats=st, off_q=off_q, off_kv=off_kv, sq=sq, skv=skv)


def pack(x, lens):
    """(b, h, s, d) dense -> the flat THD buffer of the first lens[b] rows of each batch."""
    return np.concatenate([np.transpose(x[n, :, : lens[n]], (1, 0, 2)).reshape(-1) for n in range(x.shape[0])])


def unpack(flat, lens, h, s, d):
    out = np.zeros((len(lens), h, s, d))
    start = 0
    for n, ln in enumerate(lens):
        out[n, :, :ln] = np.transpose(flat[start:start + ln * h * d].reshape(ln, h, d), (1, 0, 2))
        start += ln * h * d
    return out


def prefix(lens, h, d):
    return (np.concatenate([[0], np.cumsum(lens)]) * h * d).reshape(-1, 1, 1, 1)


@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_ragged_forward_decomposition_and_definition_agree_with_numpy(causal):
    b, h, s_q, s_kv, d = 3, 2, 9, 11, 8
    rng = np.random.default_rng(7 + causal)
    lq, lkv = rng.integers(1, s_q + 1, b), rng.integers(1, s_kv + 1, b)
    lq[0], lkv[0] = s_q, s_kv
    lkv = np.maximum(lkv, lq)  # causal: every valid query keeps a key
    q, k, v = (rng.standard_normal((b, h, s, d)) for s in (s_q, s_kv, s_kv))
    expected, lse = numpy_attention(q, k, v, 1 / math.sqrt(d), seq=(lq, lkv), causal=causal)
    for program in (False, True):
        g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
        t = ragged_graph(g, b, h, s_q, s_kv, d, generate_stats=True, use_causal_mask=causal)
        g.register_backend(ReferenceEngine(program=program))
        out = np.full(int(lq.sum()) * h * d, np.nan)
        stats = np.full((b, h, s_q, 1), np.nan)
        g.execute({t.q: pack(q, lq), t.k: pack(k, lkv), t.v: pack(v, lkv), t.off_q: prefix(lq, h, d),
                   t.off_kv: prefix(lkv, h, d), t.sq: lq.reshape(-1, 1, 1, 1), t.skv: lkv.reshape(-1, 1, 1, 1),
                   t.o: out, t.stats: stats})
        assert np.isfinite(out).all()  # every packed row written, nothing past the end
        np.testing.assert_allclose(unpack(out, lq, h, s_q, d), np.where(
            np.arange(s_q).reshape(1, 1, -1, 1) < lq.reshape(-1, 1, 1, 1), expected, 0.0), rtol=1e-10, atol=1e-10)
        for n in range(b):
            np.testing.assert_allclose(stats[n, :, : lq[n]], lse[n, :, : lq[n]], rtol=1e-10, atol=1e-10)


def test_ragged_backward_decomposition_and_definition_agree_with_the_dense_padded_backward():
    b, h, s_q, s_kv, d = 2, 2, 7, 9, 8
    rng = np.random.default_rng(11)
    lq, lkv = np.array([s_q, 4]), np.array([s_kv, 6])
    q, d_o = (rng.standard_normal((b, h, s_q, d)) for _ in range(2))
    k, v = (rng.standard_normal((b, h, s_kv, d)) for _ in range(2))
    for n in range(b):  # the padded rows are zero, as the packed layout reads them
        q[n, :, lq[n]:], d_o[n, :, lq[n]:] = 0, 0
        k[n, :, lkv[n]:], v[n, :, lkv[n]:] = 0, 0
    o, lse = numpy_attention(q, k, v, 1 / math.sqrt(d), seq=(lq, lkv), causal=True)
    o = np.nan_to_num(o)
    lse = np.where(np.isfinite(lse), lse, 0.0)

    def backward(ragged, program):
        g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
        offs = {}

        def tensor(s, name, off_name):
            t = g.tensor([b, h, s, d], [s * h * d, d, h * d, 1], name=name)
            if ragged:
                offs.setdefault(off_name, g.tensor([b + 1, 1, 1, 1], data_type=I32, name=off_name))
                t.set_ragged_offset(offs[off_name])
            return t

        Q, O, DO = (tensor(s_q, n, "off_q") for n in ("q", "o", "do"))
        K, V = (tensor(s_kv, n, "off_kv") for n in ("k", "v"))
        ST = g.tensor([b, h, s_q, 1], data_type=F, name="stats")
        SQ, SKV = (g.tensor([b, 1, 1, 1], data_type=I32) for _ in range(2))
        grads = g.sdpa_backward(Q, K, V, O, DO, ST, attn_scale=1 / math.sqrt(d), use_padding_mask=True,
                                seq_len_q=SQ, seq_len_kv=SKV, use_causal_mask=True)
        for grad, like in zip(grads, (Q, K, V)):
            grad.set_output(True)
            if ragged:
                grad.set_ragged_offset(like.get_ragged_offset())
        g.register_backend(ReferenceEngine(program=program))
        lens = (lq, lkv, lkv)

        def buf(x, ln):
            return pack(x, ln) if ragged else x

        outs = [np.full(int(ln.sum()) * h * d, np.nan) if ragged else np.full(x.shape, np.nan)
                for x, ln in zip((q, k, v), lens)]
        feeds = {Q: buf(q, lq), K: buf(k, lkv), V: buf(v, lkv), O: buf(o, lq), DO: buf(d_o, lq), ST: lse,
                 SQ: lq.reshape(-1, 1, 1, 1), SKV: lkv.reshape(-1, 1, 1, 1)}
        if ragged:
            feeds[offs["off_q"]], feeds[offs["off_kv"]] = prefix(lq, h, d), prefix(lkv, h, d)
        g.execute({**feeds, **dict(zip(grads, outs))})
        if not ragged:
            return outs
        return [unpack(x, ln, h, s, d) for x, ln, s in zip(outs, lens, (s_q, s_kv, s_kv))]

    dense = backward(False, False)
    for program in (False, True):
        for got, want, ln in zip(backward(True, program), dense, (lq, lkv, lkv)):
            for n in range(b):
                np.testing.assert_allclose(got[n, :, : ln[n]], want[n, :, : ln[n]], rtol=1e-9, atol=1e-10,
                                           err_msg=f"program={program}")


# ---- max_total_seq_len_q / _kv (the backward's ragged workspace) ------------------------------------------------
def ragged_backward_graph(g, b=2, h=2, h_k=None, s_q=40, s_kv=72, d=64, ragged_stats=True, **kw):
    h_k = h_k or h

    def tensor(heads, s, name, offset):
        return g.tensor([b, heads, s, d], [s * heads * d, d, heads * d, 1], name=name, ragged_offset=offset)

    off_q, off_kv = (g.tensor([b + 1, 1, 1, 1], data_type=I32, name=n) for n in ("off_q", "off_kv"))
    off_st = g.tensor([b + 1, 1, 1, 1], data_type=I32, name="off_stats")
    q, o, d_o = (tensor(h, s_q, n, off_q) for n in ("q", "o", "do"))
    k, v = (tensor(h_k, s_kv, n, off_kv) for n in ("k", "v"))
    stats = g.tensor([b, h, s_q, 1], [s_q * h, 1, h, 1], data_type=F, name="stats",
                     ragged_offset=off_st if ragged_stats else None)
    lens = [g.tensor([b, 1, 1, 1], data_type=I32) for _ in range(2)]
    dq, dk, dv = g.sdpa_backward(q, k, v, o, d_o, stats, attn_scale=0.125, use_padding_mask=True,
                                 seq_len_q=lens[0], seq_len_kv=lens[1], use_causal_mask=True, **kw)
    for grad, off in ((dq, off_q), (dk, off_kv), (dv, off_kv)):
        grad.set_output(True).set_ragged_offset(off)
    return SimpleTensors(stats=stats, dq=dq, off_q=off_q, off_st=off_st)


def test_max_total_seq_len_q_lays_softmax_sum_and_the_dq_accumulator_out_packed_deviceless():
    g = half_graph()
    t = ragged_backward_graph(g, max_total_seq_len_q=50, max_total_seq_len_kv=100)
    g.validate()  # finalized without a device on cuDNN 9.28
    p = prepare(g, PassOptions(available=running))
    by_name = {x.name.split("::")[-1]: x for x in p.tensors.values() if x.uid in p.scratch}
    softmax_sum, accum = by_name["softmax_sum"], by_name["dQ_accum"]
    assert softmax_sum.stride == t.stats.stride and softmax_sum.ragged_offset.uid == t.off_st.uid
    assert p.scratch[softmax_sum.uid] == 50 * 2 * 4  # max_total rows of Stats' row stride, FLOAT
    assert accum.stride == t.dq.stride and accum.ragged_offset.uid == t.off_q.uid
    assert p.scratch[accum.uid] == 50 * 2 * 64 * 4
    plain = half_graph()
    ragged_backward_graph(plain)
    plain.validate_ir()
    q_plain = prepare(plain, PassOptions(available=running))
    sizes = {x.name.split("::")[-1]: q_plain.scratch[x.uid] for x in q_plain.tensors.values() if x.uid in q_plain.scratch}
    assert sizes == {"softmax_sum": 2 * 2 * 40 * 4, "dQ_accum": 2 * 2 * 40 * 64 * 4}  # dense without the bound
    on_95 = prepare(g, PassOptions(available=lambda f, at_least=0: versions.since(f) <= 90500 and at_least <= 90500))
    assert all(x.ragged_offset is None for x in on_95.tensors.values() if x.uid in on_95.scratch)  # dropped < 9.6


def test_max_total_seq_len_above_b_times_s_is_accepted():
    """The frontend accepts a bound above b · s (it only sizes the ragged intermediates larger)."""
    g = half_graph()
    ragged_backward_graph(g, max_total_seq_len_q=81)
    g.validate_ir()


@pytest.mark.parametrize("case, exc, match", [
    ("not_ragged", cudnn.cudnnGraphNotSupportedError, r"max_total_seq_len_q is only supported with ragged q tensors"),
    ("not_positive", ValueError, r">= 1"),
])
def test_max_total_seq_len_rules(case, exc, match):
    g = half_graph()
    with pytest.raises(exc, match=match):
        if case == "not_ragged":
            b, h, s, d = 1, 2, 8, 16
            q, k, v, o, d_o = (g.tensor([b, h, s, d]) for _ in range(5))
            stats = g.tensor([b, h, s, 1], data_type=F)
            grads = g.sdpa_backward(q, k, v, o, d_o, stats, max_total_seq_len_q=4)
        else:
            ragged_backward_graph(g, max_total_seq_len_q=0)
        if case == "not_ragged":
            for grad in grads:
                grad.set_output(True)
        g.validate_ir()


def test_a_packed_operand_is_not_held_to_the_padded_shape_of_its_ragged_tensor():
    from cudnn_py.interop import OperandInfo
    from cudnn_py.plans.execute import _check_operand

    g = half_graph()
    off = g.tensor([3, 1, 1, 1], data_type=I32, name="off")
    thd = g.tensor([2, 4, 16, 8], [16 * 4 * 8, 8, 4 * 8, 1], name="q", ragged_offset=off)
    dense = g.tensor([2, 4, 16, 8], [16 * 4 * 8, 8, 4 * 8, 1], name="q_dense", data_type=cudnn.data_type.HALF)
    packed_buffer = OperandInfo(ptr=256, shape=(20, 4, 8), strides=(32, 8, 1), dtype=(2, 16), device_type=2,
                                device_id=0)
    _check_operand(thd, packed_buffer)  # 20 packed rows of a (2, 4, 16, 8) ragged tensor
    with pytest.raises(ValueError, match="expected shape.*holds 1280 bytes.*spans 2048"):
        _check_operand(dense, packed_buffer)  # read as a buffer, too small for the dense tensor's 32 rows


# ---- packed page tables -------------------------------------------------------------------------------------------
def packed_tables(table: np.ndarray, lens: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Each batch's page indices, only as many as its sequence needs, back to back; the offsets (b + 1)."""
    counts = [-(-int(n) // block) for n in lens]
    flat = np.concatenate([table[n, 0, :c, 0] for n, c in enumerate(counts)]).astype(np.int32)
    return flat, np.concatenate([[0], np.cumsum(counts)]).astype(np.int32).reshape(-1, 1, 1, 1)


def packed_case(g, b=2, pages=3, **kw):
    offsets = {n: g.tensor([b + 1, 1, 1, 1], data_type=I32, name=f"{n}_off") for n in ("k", "v")}
    t = paged_case(g, b=b, pages=pages, **kw)
    for n in ("k", "v"):
        t[f"t{n}"].set_ragged_offset(offsets[n])
    t.update(ok=offsets["k"], ov=offsets["v"])
    return t


@pytest.mark.parametrize("impl", [AI.COMPOSITE, AI.UNIFIED])
def test_packed_page_tables_reach_cuDNN_with_their_offsets_deviceless(impl):
    if impl is AI.UNIFIED and versions.runtime_version() < 91500:
        pytest.skip("needs cuDNN >= 9.15 on this machine")
    from cudnn_py.lowering import TensorTable
    from cudnn_py.lowering.registry import LOWERINGS

    g = half_graph()
    packed_case(g, s_q=5, implementation=impl, paged_attention_max_seq_len_kv=48)
    g.validate()  # finalized deviceless on cuDNN 9.28
    program = prepare(g, PassOptions(available=running))
    tables = TensorTable()
    for node in program.nodes:
        LOWERINGS[node.op](node, tables)
    k_table = next(t for t in program.tensors.values() if t.name == "k_table")
    desc = tables(k_table)
    assert desc.get("CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC").get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [3, 1, 1, 1]


@pytest.mark.parametrize("case, match", [
    ("offset_dims", r"tensor 'k_table'.*ragged offset 'k_off' needs dims \[b \+ 1, 1, 1, 1\] = \[3, 1, 1, 1\]"),
    ("table_batch", r"tensor 'k_table'.*packed page table needs dims \[b, 1, pages, 1\] with b = 2"),
])
def test_packed_page_table_rules(case, match):
    g = half_graph()
    b = 2
    t = paged_case(g, b=b)
    off = g.tensor([b if case == "offset_dims" else b + 1, 1, 1, 1], data_type=I32, name="k_off")
    if case == "table_batch":
        t.tk.set_dim([b + 1, 1, 3, 1]).set_stride([3, 3, 1, 1])
    t.tk.set_ragged_offset(off)
    with pytest.raises(ValueError, match=match):
        g.validate_ir()


def test_packed_page_tables_need_9_10_2(monkeypatch):
    monkeypatch.setattr(versions, "runtime_version", lambda: 91001)
    g = half_graph()
    packed_case(g)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"packed page tables .* need cuDNN >= 9\.10\.2"):
        g.validate_ir()


def test_packed_page_tables_decomposition_and_definition_agree_with_numpy():
    b, h_q, h_k, s_q, block, pages, d, num_blocks = 3, 4, 2, 3, 8, 4, 16, 16
    rng = np.random.default_rng(7)
    s_kv = block * pages
    lens_kv = np.array([s_kv, 9, 20])  # 4, 2 and 3 pages
    lens_q = np.full(b, s_q)
    kc, vc, table, k, v = paged_data(rng, b, h_k, block, pages, d, num_blocks, lens_kv)
    flat, offsets = packed_tables(table, lens_kv, block)
    q = rng.standard_normal((b, h_q, s_q, d))
    expected, _ = numpy_attention(q, k, v, 1 / math.sqrt(d), seq=(lens_q, lens_kv))
    for program in (False, True):
        g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
        t = packed_case(g, b=b, h_q=h_q, h_k=h_k, s_q=s_q, block=block, pages=pages, d=d, num_blocks=num_blocks,
                        implementation=AI.COMPOSITE, paged_attention_max_seq_len_kv=s_kv)
        g.register_backend(ReferenceEngine(program=program))
        out = np.full((b, h_q, s_q, d), np.nan)
        g.execute({t.q: q, t.kc: kc, t.vc: vc, t.tk: flat, t.tv: flat.copy(), t.ok: offsets, t.ov: offsets.copy(),
                   t.sq: lens_q.reshape(b, 1, 1, 1), t.skv: lens_kv.reshape(b, 1, 1, 1), t.o: out})
        np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-10, err_msg=f"program={program}")
    short = offsets.copy()
    short[2:] -= 1  # batch 1 now owns one page too few for its 9 rows (the last graph: the decomposition)
    with pytest.raises(ValueError, match=r"batch 1 reads 2 page\(s\) for its 9 rows, but its packed page-table "
                                         r"entries \(offsets\) hold 1"):
        g.execute({t.q: q, t.kc: kc, t.vc: vc, t.tk: flat, t.tv: flat.copy(), t.ok: short, t.ov: short.copy(),
                   t.sq: lens_q.reshape(b, 1, 1, 1), t.skv: lens_kv.reshape(b, 1, 1, 1), t.o: out})


def test_max_total_seq_len_kv_with_gqa_lays_the_full_head_gradients_out_packed_deviceless():
    """As the frontend: dK / dV of all q heads in the workspace, in the gradients' packed layout widened to h_q
    heads (batch and sequence strides times h_q / h_kv), sharing the gradients' ragged offset (cuDNN scales it)."""
    g = half_graph()
    ragged_backward_graph(g, h_k=1, max_total_seq_len_kv=100)
    g.validate()  # finalized without a device on cuDNN 9.28
    p = prepare(g, PassOptions(available=running))
    by_name = {x.name.split("::")[-1]: x for x in p.tensors.values() if x.uid in p.scratch}
    dk_full, dv_full = by_name["dK_fullhead"], by_name["dV_fullhead"]
    user = {t.name: t for t in g.tensors.values()}
    for full in (dk_full, dv_full):
        grad = next(t for n, t in user.items() if n.endswith("::" + full.name.split("::")[-1][:2]))
        assert full.dim[1] == 2 and full.is_virtual is False and full.data_type is H
        assert full.stride == [grad.stride[0] * 2, grad.stride[1], grad.stride[2] * 2, grad.stride[3]]
        assert full.ragged_offset.uid == grad.ragged_offset.uid
        s = full.stride
        assert p.scratch[full.uid] == ((100 - 1) * s[2] + (2 - 1) * s[1] + (64 - 1) * s[3] + 1) * 2  # HALF bytes
    plain = half_graph()
    ragged_backward_graph(plain, h_k=1)
    plain.validate_ir()
    names = {x.name.split("::")[-1] for x in prepare(plain, PassOptions(available=running)).tensors.values()
             if x.name.endswith("_fullhead")}
    assert names == {"dK_fullhead", "dV_fullhead"}  # without the bound: virtual, dense BHSD
