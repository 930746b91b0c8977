"""SDPA block masks on the CPU: the classic argument, its validation, the implementation choice (UNIFIED only:
COMPOSITE refuses, AUTO takes UNIFIED or says which option conflicts), what reaches cuDNN (finalized deviceless on
9.28), the float64 reference against a hand-written loop, and the SM10x erratum (cuDNN < 9.26)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.errors import BadParamError
from cudnn_py.ir.passes import PassOptions, prepare
from cudnn_py.plans import device_gates, errata

H, F, D = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.DOUBLE
I8, I32 = cudnn.data_type.INT8, cudnn.data_type.INT32
AI = cudnn.attention_implementation
ERRATUM = "sdpa-block-mask-sm10x-before-9.26"


def graph(io=H):
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=F, compute_data_type=F)


def tiles(n):
    return -(-n // 128)


def build(g, b=2, h=4, s_q=200, s_kv=300, d=64, mask_dims=None, mask_type=I8, **kw):
    q, k, v = g.tensor([b, h, s_q, d], name="q"), g.tensor([b, h, s_kv, d], name="k"), g.tensor([b, h, s_kv, d])
    mask = g.tensor(mask_dims or [b, h, tiles(s_q), tiles(s_kv)], data_type=mask_type, name="bm")
    kw.setdefault("generate_stats", True)
    o, st = g.sdpa(q, k, v, attn_scale=0.125, block_mask=mask, **kw)
    o.set_output(True)
    if st is not None:
        st.set_output(True).set_data_type(F)
    return SimpleNamespace(q=q, k=k, v=v, mask=mask, o=o, stats=st)


def running(feature, at_least=0):
    return versions.available(feature) and versions.runtime_version() >= at_least


def up_to(version):
    """The passes' view of a cuDNN of ``version`` (features of the catalog that exist there)."""
    return lambda feature, at_least=0: versions.since(feature) <= version and at_least <= version


def seq_lens(g, b):
    return dict(use_padding_mask=True, seq_len_q=g.tensor([b, 1, 1, 1], data_type=I32, name="slq"),
                seq_len_kv=g.tensor([b, 1, 1, 1], data_type=I32, name="slkv"))


# ---- surface ----------------------------------------------------------------------------------------------------
def test_block_mask_is_the_seventh_positional_argument_and_a_node_input():
    g = graph()
    q, k, v = g.tensor([1, 2, 130, 64]), g.tensor([1, 2, 260, 64]), g.tensor([1, 2, 260, 64])
    mask = g.tensor([1, 2, 2, 3], data_type=I8, name="bm")
    o, stats = g.sdpa(q, k, v, None, 0.125, None, mask, generate_stats=True)  # q, k, v, is_inference, scale, bias
    node = g.nodes[0]
    assert node.inputs["BLOCK_MASK"] is mask and "BIAS" not in node.inputs
    assert stats is not None and o.name.endswith("::O")


def test_sdpa_backward_has_no_block_mask_argument():
    """The classic sdpa_backward takes no block mask: an unknown keyword, not stored."""
    g = graph()
    q, k, v = (g.tensor([1, 2, 128, 64]) for _ in range(3))
    o, d_o, stats = g.tensor([1, 2, 128, 64]), g.tensor([1, 2, 128, 64]), g.tensor([1, 2, 128, 1], data_type=F)
    with pytest.raises(TypeError, match="block_mask"):
        g.sdpa_backward(q, k, v, o, d_o, stats, block_mask=g.tensor([1, 2, 1, 1], data_type=I8))


@pytest.mark.parametrize("case, match", [
    ("tiles_q", r"tensor 'bm'.*ceil\(s_q / 128\).*\[2, 4, 2, 3\].*got \[2, 4, 1, 3\]"),
    ("tiles_kv", r"tensor 'bm'.*\[2, 4, 2, 3\] \(INT8\) or, packed 8 tiles a byte, \[2, 4, 2, 1\].*got \[2, 4, 2, 4\]"),
    ("broadcast_batch", r"tensor 'bm'.*no broadcasting.*got \[1, 4, 2, 3\]"),
    ("broadcast_heads", r"tensor 'bm'.*no broadcasting.*got \[2, 1, 2, 3\]"),
    ("rank", r"tensor 'bm'.*got \[2, 4, 6\]"),
    ("int32", r"tensor 'bm'.*must be INT8 \(or UINT8, packed\), got INT32"),
    ("bool", r"tensor 'bm'.*must be INT8 \(or UINT8, packed\), got BOOLEAN"),
    ("not_set", r"tensor 'bm'.*must be INT8 \(set data_type=INT8\), got NOT_SET"),
])
def test_validation_names_the_tensor_and_the_rule(case, match):
    g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)  # no io type: a NOT_SET mask stays unset
    kw = {"tiles_q": dict(mask_dims=[2, 4, 1, 3]), "tiles_kv": dict(mask_dims=[2, 4, 2, 4]),
          "broadcast_batch": dict(mask_dims=[1, 4, 2, 3]), "broadcast_heads": dict(mask_dims=[2, 1, 2, 3]),
          "rank": dict(mask_dims=[2, 4, 6]), "int32": dict(mask_type=I32),
          "bool": dict(mask_type=cudnn.data_type.BOOLEAN), "not_set": dict(mask_type=cudnn.data_type.NOT_SET)}[case]
    t = build(g, **kw)
    for x in (t.q, t.k, t.v):
        x.set_data_type(H)
    # a layout or type cuDNN does not run is the official module's "not supported" (not a ValueError); an unset
    # type stays a ValueError
    exc = ValueError if case == "not_set" else cudnn.cudnnGraphNotSupportedError
    with pytest.raises(exc, match=match) as info:
        g.validate_ir()
    assert case == "not_set" or not isinstance(info.value, ValueError)


def test_tile_counts_round_up_including_decode():
    g = graph()
    build(g, s_q=128, s_kv=129, mask_dims=[2, 4, 1, 2])
    g.validate_ir()
    g2 = graph()
    build(g2, s_q=1, s_kv=128, mask_dims=[2, 4, 1, 1], generate_stats=False)  # decode: one row of tiles
    g2.validate_ir()


# ---- implementation choice ------------------------------------------------------------------------------------------
def test_auto_keeps_the_unified_op_and_lowering_sets_the_block_mask_deviceless():
    from cudnn_py.families.attention.lowering import lower
    from cudnn_py.lowering import TensorTable

    g = graph()
    t = build(g, **seq_lens(g, 2))
    g.validate()  # the unified SDPA_FWD with its block mask finalizes without a GPU on cuDNN 9.28
    program = g._session.program
    assert [n.op for n in program.nodes] == ["sdpa"]
    (op,) = lower(program.nodes[0], TensorTable())
    desc = op.get("CUDNN_ATTR_OPERATION_SDPA_FWD_BLOCK_MASK_DESC")
    assert desc.get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [2, 4, 2, 3]
    assert desc.get("CUDNN_ATTR_TENSOR_DATA_TYPE").name == "CUDNN_DATA_INT8"
    assert desc.get("CUDNN_ATTR_TENSOR_UNIQUE_ID") == t.mask.uid
    for attr in ("STATSDESC", "SCALEDESC", "SEQ_LEN_QDESC", "SEQ_LEN_KVDESC"):
        assert op.get(f"CUDNN_ATTR_OPERATION_SDPA_FWD_{attr}") is not None
    assert t.mask.uid in g._session.executor._slot_by_key  # an operand of execute


def test_cudnn_itself_refuses_a_broadcast_batch_deviceless(monkeypatch):
    """Why no broadcast is accepted: with cudnn_py's check bypassed, cuDNN 9.28's finalize rejects a block mask
    of batch 1 (it checks b and h_q, not the tile counts nor the type: those are cudnn_py's checks alone)."""
    from cudnn_py.families.attention import spec as attention

    monkeypatch.setattr(attention, "_check_block_mask", lambda node, d: None)
    g = graph()
    build(g, mask_dims=[1, 4, 2, 3])
    # (cuDNN 9.28's words; 9.19 says "blockMaskDim[0] != b")
    with pytest.raises(BadParamError, match=r"Block mask tensor dimensions \[0\] and \[1\] must be \(b, h_q\)|"
                                            r"blockMaskDim\[0\] != b"):
        g.validate()


def test_composite_refuses_a_block_mask_in_the_frontends_words():
    g = graph()
    build(g, implementation=AI.COMPOSITE)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError,
                       match=r"Composite SDPA node doesn't support Block_mask input.*block_mask="):
        g.validate()


@pytest.mark.parametrize("case, match", [
    ("causal", r"block_mask= needs the unified SDPA_FWD op.*causal / band masks"),
    ("bias", r"block_mask= needs the unified SDPA_FWD op.*bias"),
    ("dropout_mask", r"block_mask= needs the unified SDPA_FWD op.*custom dropout mask"),
    ("half_compute", r"block_mask= needs the unified SDPA_FWD op.*computes in FLOAT"),
    ("float_io", r"block_mask= needs the unified SDPA_FWD op.*HALF / BFLOAT16"),
])
def test_auto_with_a_block_mask_names_the_conflicting_option(case, match):
    g = cudnn.pygraph(io_data_type=F if case == "float_io" else H, intermediate_data_type=F,
                      compute_data_type=H if case == "half_compute" else F)
    kw = {"causal": dict(use_causal_mask=True), "half_compute": {}, "float_io": {},
          "bias": dict(bias=g.tensor([1, 4, 200, 300], name="bias")),
          "dropout_mask": dict(dropout=(g.tensor([2, 4, 200, 300]), g.tensor([1, 1, 1, 1], data_type=F)),
                               generate_stats=False)}[case]
    build(g, **kw)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=match):
        g.validate()


def test_version_gates_of_the_block_mask():
    g = graph()
    build(g)
    g.validate_ir()
    assert [n.op for n in prepare(g, PassOptions(available=up_to(91400))).nodes] == ["sdpa"]
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"block_mask= needs.*block mask needs cuDNN >= 9.14.0"):
        prepare(g, PassOptions(available=up_to(91301)))
    g2 = graph()
    build(g2, implementation=AI.UNIFIED)
    g2.validate_ir()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError,
                       match=r"implementation=UNIFIED is not supported: the unified op's block mask needs cuDNN >= 9.14"):
        prepare(g2, PassOptions(available=up_to(91301)))
    g3 = graph()
    build(g3, **seq_lens(g3, 2))
    g3.validate_ir()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"padding mask .* needs cuDNN >= 9.15.0"):
        prepare(g3, PassOptions(available=up_to(91400)))  # a block mask with padding: 9.15


def test_auto_does_not_fall_back_to_the_composite_when_the_unified_op_finds_no_engine(monkeypatch):
    from cudnn_py.plans import session as session_module

    g = graph()
    build(g, generate_stats=False)
    g.validate()
    s = g._session

    def query(op_graph, modes, sm_count, defer=False):  # heuristics need a GPU: no engine for the unified graph
        return session_module.heuristics.HeuristicsResult(per_mode=[("CUDNN_HEUR_MODE_A", "0 configs")])

    monkeypatch.setattr(session_module.heuristics, "query", query)
    monkeypatch.setattr(s, "planning_handle", lambda: None)
    s._advance(session_module.Phase.OPERATION_GRAPH)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="No valid engine configs"):
        s.create_execution_plans([cudnn.heur_mode.A])
    assert [n.op for n in s.program.nodes] == ["sdpa"]  # still the unified op: the composite takes no block mask


# ---- the reference against a hand-written loop --------------------------------------------------------------------
def loop_attention(q, k, v, scale, mask, lens=None):
    """Attention row by row: score (i, j) is kept where its tile mask[b, h, i // 128, j // 128] is nonzero (and
    inside the sequence lengths); a row without a kept score gives O = 0, Stats = -inf."""
    b, h, s_q, _ = q.shape
    s_kv = k.shape[2]
    o, stats = np.zeros((b, h, s_q, v.shape[3])), np.full((b, h, s_q, 1), -np.inf)
    for n in range(b):
        lq, lkv = (s_q, s_kv) if lens is None else (lens[0][n], lens[1][n])
        for x in range(h):
            for i in range(lq):
                kept = [j for j in range(lkv) if mask[n, x, i // 128, j // 128] != 0]
                if not kept:
                    continue
                row = np.array([q[n, x, i] @ k[n, x, j] * scale for j in kept])
                top = row.max()
                weights = np.exp(row - top)
                o[n, x, i] = weights @ v[n, x, kept] / weights.sum()
                stats[n, x, i, 0] = top + np.log(weights.sum())
    return o, stats


@pytest.mark.parametrize("padding", [False, True], ids=["plain", "padding"])
def test_reference_follows_the_tiles_and_keeps_fully_masked_rows_defined(padding):
    rng = np.random.default_rng(20261201 + padding)
    b, h, s_q, s_kv, d = 2, 2, 150, 290, 8  # 2 x 3 tiles, both partial at the end
    mask = (rng.random((b, h, 2, 3)) > 0.4).astype(np.int8)
    mask[0, 0, 0, :] = 0  # rows 0..127 of (0, 0) see no key
    mask[0, 1] = 1
    mask[1, 0, 1, :] = [0, 0, 5]  # only the last (partial) key tile, with a value other than 1
    mask[1, 1, :, 0] = -3  # negative values keep too (nonzero)
    g = graph(D)
    q, k, v = g.tensor([b, h, s_q, d]), g.tensor([b, h, s_kv, d]), g.tensor([b, h, s_kv, d])
    bm = g.tensor([b, h, 2, 3], data_type=I8)
    kw, feeds, lens = {}, {}, None
    if padding:
        lens = (np.array([s_q, 140]), np.array([s_kv, 200]))  # batch 1: the third key tile is padding
        sq, skv = g.tensor([b, 1, 1, 1], data_type=I32), g.tensor([b, 1, 1, 1], data_type=I32)
        kw.update(use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv)
        feeds.update({sq: lens[0].reshape(b, 1, 1, 1), skv: lens[1].reshape(b, 1, 1, 1)})
    o, st = g.sdpa(q, k, v, generate_stats=True, attn_scale=0.3, block_mask=bm, **kw)
    o.set_output(True)
    st.set_output(True)
    g.register_backend(ReferenceEngine())
    g.validate_ir()
    data = {q: rng.standard_normal(q.dim), k: rng.standard_normal(k.dim), v: rng.standard_normal(v.dim)}
    out, stats = np.full(o.dim, np.nan), np.full(st.dim, np.nan)
    g.execute({**data, **feeds, bm: mask, o: out, st: stats})
    o_ref, stats_ref = loop_attention(data[q], data[k], data[v], 0.3, mask, lens)
    assert np.isfinite(out).all() and not np.isnan(stats).any()
    np.testing.assert_allclose(out, o_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(np.isinf(stats), np.isinf(stats_ref))
    finite = np.isfinite(stats_ref)
    np.testing.assert_allclose(stats[finite], stats_ref[finite], rtol=1e-10)
    assert np.all(out[0, 0, :128] == 0) and np.all(stats[0, 0, :128] == -np.inf)  # the fully masked rows
    if padding:  # (1, 0) rows 128..139 keep only the third key tile, which is all padding: fully masked too
        assert np.all(out[1, 0, 128:140] == 0) and np.all(stats[1, 0, 128:140] == -np.inf)


# ---- the SM10x erratum ------------------------------------------------------------------------------------------------
def _validated(**kw):
    g = graph()
    build(g, **kw)
    g.validate()
    return g


def test_sm10x_erratum_is_data_with_its_gpus_and_source():
    (e,) = [x for x in errata.ERRATA if x.id == ERRATUM]
    assert (e.first, e.last, e.compute_capabilities) == (91400, 92599, (100, 109))
    assert "sdpa_support_surface.h" in e.source and "9.26.0" in e.workaround
    assert ERRATUM in {x.id for x in errata.applicable(92500)}
    assert ERRATUM not in {x.id for x in errata.applicable(92600)}
    assert e.on_gpu(100) and e.on_gpu(103) and not e.on_gpu(90) and not e.on_gpu(120) and e.on_gpu(0)


def test_sm10x_erratum_refuses_on_blackwell_only():
    g = _validated()  # kept: the program refers to its graph weakly
    program = g._session.program
    errata.check(program, 91900)  # deviceless: the GPU is not known, so the erratum waits for planning
    errata.check_on_device(program, 91900, 90)  # an H200: not refused
    errata.check_on_device(program, 92600, 100)  # fixed in 9.26
    with pytest.raises(cudnn.cudnnGraphNotSupportedError,
                       match=rf"{ERRATUM}.*compute capability 10.0 - 10.9 only, this GPU: compute capability 10.0.*"
                             r"block mask 'bm'.*cuDNN >= 9.26.0"):
        errata.check_on_device(program, 92500, 100)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"compute capability unreadable"):
        errata.check_on_device(program, 91900, 0)  # unreadable: refused, not risked
    g = graph()
    q, k, v = g.tensor([1, 2, 128, 64]), g.tensor([1, 2, 128, 64]), g.tensor([1, 2, 128, 64])
    g.sdpa(q, k, v, generate_stats=False)[0].set_output(True)
    g.validate()
    errata.check_on_device(g._session.program, 91900, 100)  # no block mask: not refused


def test_planning_checks_the_sm10x_erratum_when_it_meets_the_gpu(monkeypatch):
    from cudnn_py.plans import session as session_module

    monkeypatch.setattr(versions, "runtime_version", lambda: 91900)
    g = _validated()
    s = g._session
    assert any(ERRATUM in line and "refused when planning meets such a GPU" for line in s.deferred_checks)
    assert f"erratum {ERRATUM} matches this graph (on compute capability 10.0 - 10.9 only)" in g.explain()
    finalized = []
    monkeypatch.setattr(s, "planning_handle", lambda: 1)  # a handle, never used: binding and finalize are stubbed
    monkeypatch.setattr(s, "_bind_device", lambda handle: None)
    monkeypatch.setattr(session_module, "finalize_operation_graph", lambda lowered, handle: finalized.append(handle))
    monkeypatch.setattr(device_gates, "device_of_handle", lambda handle: 0)
    monkeypatch.setattr(device_gates, "compute_capability", lambda device: 100)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=rf"erratum {ERRATUM}"):
        s.build_operation_graph()
    assert finalized == []
    monkeypatch.setattr(device_gates, "compute_capability", lambda device: 90)
    s.build_operation_graph()
    assert finalized == [1]


def test_info_names_the_gpus_of_the_erratum():
    from cudnn_py.__main__ import errata_lines

    (line,) = [x for x in errata_lines(91900, "9.19.0", [(9, 0)]) if ERRATUM in x]
    assert "compute capability 10.0 - 10.9 only" in line


@pytest.mark.parametrize("which,lengths", [("seq_len_kv", (8, 12)), ("seq_len_q", (3, -1))],
                         ids=["kv-past-its-dim", "q-negative"])
def test_reference_refuses_sequence_lengths_outside_their_dim(which, lengths):
    """A padding mask's length past its dim is undefined in cuDNN (bottom-right would start past the tensor): the
    float64 oracle refuses it, naming the tensor, rather than guess an answer a GPU result could be matched to."""
    b, h, s_q, s_kv, d = 2, 1, 6, 10, 8
    g = graph(D)
    q, k, v = g.tensor([b, h, s_q, d]), g.tensor([b, h, s_kv, d]), g.tensor([b, h, s_kv, d])
    sq = g.tensor([b, 1, 1, 1], data_type=I32, name="seq_len_q")
    skv = g.tensor([b, 1, 1, 1], data_type=I32, name="seq_len_kv")
    o, _ = g.sdpa(q, k, v, generate_stats=False, attn_scale=0.3, use_padding_mask=True, seq_len_q=sq,
                  seq_len_kv=skv, use_causal_mask_bottom_right=True)
    o.set_output(True)
    g.register_backend(ReferenceEngine())
    g.validate_ir()
    rng = np.random.default_rng(7)
    feeds = {sq: np.array([s_q, 5]).reshape(b, 1, 1, 1), skv: np.array([s_kv, 9]).reshape(b, 1, 1, 1)}
    feeds[sq if which == "seq_len_q" else skv] = np.array(lengths).reshape(b, 1, 1, 1)
    with pytest.raises(ValueError, match=rf"tensor '{which}' \(uid \d+\) holds sequence length\(s\) "
                                         rf"\[{max(lengths) if which == 'seq_len_kv' else min(lengths)}\] outside"):
        g.execute({q: rng.standard_normal(q.dim), k: rng.standard_normal(k.dim), v: rng.standard_normal(v.dim),
                   **feeds, o: np.full(o.dim, np.nan)})


# ---- the frontend's packed layout (8 tiles a byte along s_kv) -----------------------------------------------------
U8 = cudnn.data_type.UINT8


@pytest.mark.parametrize("mask_type", [U8, I8], ids=["uint8", "int8"])
def test_the_packed_layout_is_accepted_and_reaches_cudnn_deviceless(mask_type):
    """s_kv 1100 is 9 key tiles, packed into 2 bytes a row of tiles: accepted in UINT8 or INT8, finalized by cuDNN
    9.28 without a GPU, the descriptor carrying the packed dims."""
    from cudnn_py.families.attention.lowering import lower
    from cudnn_py.families.attention.spec import block_mask_packed
    from cudnn_py.lowering import TensorTable

    g = graph()
    t = build(g, s_kv=1100, mask_dims=[2, 4, 2, 2], mask_type=mask_type, **seq_lens(g, 2))
    g.validate()
    node = g._session.program.nodes[0]
    assert node.op == "sdpa" and block_mask_packed(node)
    (op,) = lower(node, TensorTable())
    assert op.get("CUDNN_ATTR_OPERATION_SDPA_FWD_BLOCK_MASK_DESC").get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [2, 4, 2, 2]
    assert t.mask.uid in g._session.executor._slot_by_key


def test_a_uint8_mask_in_the_unpacked_dims_is_not_supported():
    g = graph()
    build(g, s_kv=1100, mask_dims=[2, 4, 2, 9], mask_type=U8)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"packed 8 tiles a byte, \[2, 4, 2, 2\].*got "
                                                                r"\[2, 4, 2, 9\]"):
        g.validate_ir()


def test_the_reference_declines_a_packed_mask_rather_than_guess_its_bit_order():
    """Which bit of a packed byte is which key tile is not verified against cuDNN yet (no engine for block masks
    on the GPU we have): the float64 engine declines such a graph with the reason, and still runs the unpacked
    layout."""
    b, h, s_q, s_kv, d = 1, 2, 130, 1100, 8  # 2 x 9 tiles: 2 bytes a row when packed
    for dims, dt, declined in (([b, h, 2, 9], I8, False), ([b, h, 2, 2], U8, True)):
        g = graph(D)
        q, k, v = g.tensor([b, h, s_q, d]), g.tensor([b, h, s_kv, d]), g.tensor([b, h, s_kv, d])
        bm = g.tensor(dims, data_type=dt)
        o, st = g.sdpa(q, k, v, generate_stats=True, attn_scale=0.3, block_mask=bm)
        o.set_output(True)
        st.set_output(True)
        engine = ReferenceEngine()
        g.validate_ir()
        if declined:
            with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="packed layout"):
                engine.check_support(g)
        else:
            engine.check_support(g)
