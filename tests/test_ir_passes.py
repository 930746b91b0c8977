"""The IR passes and the op-spec architecture on the CPU: every spec has a lowering and a float64 reference, the
decompose pass (the diagonal band mask, composite and unified) against the definition, the legalize pass, and the
user's graph left as built. Lowerings finalize against the real cuDNN (deviceless, with the test libcuda stub)."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import REFERENCES, ReferenceEngine
from cudnn_py.ir.passes import PassOptions, prepare
from cudnn_py.ir.spec import SPECS
from cudnn_py.lowering import LOWERINGS

H, F, D = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.DOUBLE
AI, DA = cudnn.attention_implementation, cudnn.diagonal_alignment
RNG = np.random.default_rng(7)
NOTHING_NEW = PassOptions(available=lambda feature, at_least=0: False)


def test_every_spec_has_a_lowering_or_an_expansion_and_a_reference():
    for method, spec in SPECS.items():
        assert spec.kind in LOWERINGS or spec.expand is not None, f"{method}: no lowering for kind {spec.kind!r}"
        assert spec.kind in REFERENCES, f"{method}: no float64 reference for kind {spec.kind!r}"
        for feature in spec.requires:
            assert versions.since(feature) >= 90000, (method, feature)  # every gate is in the generated catalog
        if spec.public:
            assert callable(getattr(cudnn.pygraph, method)), method


def band_graph(shape=(2, 3, 8, 12), **kw):
    g = cudnn.pygraph(io_data_type=D, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor(list(shape), name="x")
    y = g.diagonal_band_mask(x, **kw).set_output(True)
    return g, x, y


def band_expected(x, right=None, left=None, bottom_right=False, fill=-np.inf):
    """The mask from numpy's triangle helpers (independent of both the reference and the decomposition)."""
    s_q, s_kv = x.shape[-2:]
    shift = s_kv - s_q if bottom_right else 0
    keep = np.ones((s_q, s_kv), bool)
    if right is not None:
        keep &= np.tril(np.ones((s_q, s_kv), bool), k=shift + right)
    if left is not None:
        keep &= np.triu(np.ones((s_q, s_kv), bool), k=shift - left + 1)
    return np.where(keep, x, fill)


BANDS = [dict(right_bound=0), dict(right_bound=2), dict(left_bound=3), dict(left_bound=4, right_bound=1),
         dict(right_bound=0, diagonal_alignment=DA.BOTTOM_RIGHT), dict(left_bound=2, diagonal_alignment=DA.BOTTOM_RIGHT),
         dict(right_bound=0, fill_value=-5.0)]


@pytest.mark.parametrize("kw", BANDS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
@pytest.mark.parametrize("program", [False, True], ids=["definition", "decomposed"])
@pytest.mark.parametrize("impl", [AI.COMPOSITE, AI.UNIFIED])
def test_band_mask_reference_and_decompositions_agree_with_numpy(kw, program, impl):
    for shape in ((2, 3, 8, 12), (1, 1, 12, 8)):  # s_kv > s_q and s_kv < s_q
        g, x, y = band_graph(shape, implementation=impl, **kw)
        g.register_backend(ReferenceEngine(program=program))
        xs = RNG.standard_normal(shape)
        out = np.full(shape, np.nan)
        g.execute({x: xs, y: out})
        expected = band_expected(xs, kw.get("right_bound"), kw.get("left_bound"),
                                 kw.get("diagonal_alignment") is DA.BOTTOM_RIGHT, kw.get("fill_value", -np.inf))
        np.testing.assert_array_equal(out, expected)


def test_decomposition_chooses_per_option_and_version():
    g, x, y = band_graph(left_bound=4, right_bound=1)
    g.validate_ir()
    composite = prepare(g, NOTHING_NEW)
    methods = [n.spec.method for n in composite.nodes]
    assert methods == ["gen_index", "gen_index", "add", "cmp_ge", "binary_select", "add", "cmp_gt", "binary_select"]
    assert any("decompose" in line for line in composite.log)
    unified = prepare(g, PassOptions(available=lambda feature, at_least=0: True))
    assert [n.spec.method for n in unified.nodes] == ["diagonal_band_mask_op"] * 2
    # the composite's own output is written by the last node; every intermediate is virtual, with a fresh uid
    user_uids = {t.uid for t in g.all_tensors()}
    for p in (composite, unified):
        assert p.nodes[-1].outputs["Y" if p is unified else "OUT_0"].uid == y.uid
        added = [t for t in p.tensors.values() if t.uid not in user_uids]
        assert added and all(t.is_virtual or t.is_pass_by_value for t in added)
        assert len({t.uid for t in p.tensors.values()}) == len(p.tensors)
    assert [n.spec.method for n in g.nodes] == ["diagonal_band_mask"]  # the user's graph is as built


@pytest.mark.parametrize("impl", [AI.COMPOSITE, AI.UNIFIED, AI.AUTO])
def test_band_mask_lowers_on_the_running_cudnn(impl):
    g, x, y = band_graph(left_bound=4, right_bound=1, implementation=impl)
    if impl is AI.UNIFIED and versions.runtime_version() < 92100:
        with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"needs cuDNN 9\.21\.0"):
            g.validate()
        return
    g.validate()
    kinds = {d.kind.name for d in g.session.lowered.operations}
    unified = impl is AI.UNIFIED or (impl is AI.AUTO and versions.runtime_version() >= 92100)
    assert kinds == ({"CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR"} if unified else
                     {"CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR"})
    assert g.session.lowered.operation_graph.finalized


def test_unified_gate_names_the_version(monkeypatch):
    monkeypatch.setattr(versions, "runtime_version", lambda: 91900)
    g, x, y = band_graph(right_bound=0, implementation=AI.UNIFIED)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError) as e:
        g.validate()
    assert "9.21.0" in str(e.value) and "9.19.0" in str(e.value) and "diagonal_band_mask_op" in str(e.value)
    g2, _, _ = band_graph(right_bound=0)  # AUTO on an old cuDNN: composite
    g2.validate_ir()
    from cudnn_py.plans.session import versions_available

    assert [n.op for n in prepare(g2, PassOptions(available=versions_available)).nodes][-1] == "pointwise"


def test_band_mask_argument_checks():
    g = cudnn.pygraph(io_data_type=H)
    x = g.tensor([4, 4], name="x")
    with pytest.raises(ValueError, match="left_bound, right_bound or both"):
        g.diagonal_band_mask(x)
    with pytest.raises(ValueError, match=">= 0"):
        g.diagonal_band_mask(x, right_bound=-1)
    with pytest.raises(TypeError, match="attention_implementation"):
        g.diagonal_band_mask(x, right_bound=0, implementation="COMPOSITE")
    g.diagonal_band_mask(g.tensor([4], name="v"), right_bound=0, name="m")
    with pytest.raises(ValueError, match=r"diagonal_band_mask node 'm'.*rank >= 2"):
        g.validate_ir()


def test_legalize_pads_ranks_folds_long_vectors_and_keeps_the_user_graph():
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([3, 40], name="x")
    i = g.gen_index(x, axis=1).set_output(True).set_data_type(cudnn.data_type.INT32)
    g.validate_ir()
    p = prepare(g, NOTHING_NEW)
    assert p.tensors[x.uid].dim == [1, 3, 40] and p.tensors[x.uid].stride == [120, 40, 1]
    assert p.nodes[0].params["axis"] == 2 and g.nodes[0].params["axis"] == 1
    assert list(x.dim) == [3, 40] and list(i.dim) == [3, 40]
    n = 1 << 20
    g2 = cudnn.pygraph(io_data_type=F)
    a, b = g2.tensor([n], name="a"), g2.tensor([n], name="b")
    c = g2.add(g2.mul(a, 2.0), b).set_output(True)
    g2.validate_ir()
    p2 = prepare(g2, NOTHING_NEW)
    assert all(p2.tensors[t.uid].dim == [1, 1024, 1024] for t in (a, b, c))
    assert any("folded" in line for line in p2.log)
    g3 = cudnn.pygraph(io_data_type=F)  # a broadcast graph is not folded
    a3 = g3.tensor([n], name="a")
    g3.add(a3, g3.tensor([1], name="b")).set_output(True)
    g3.validate_ir()
    assert prepare(g3, NOTHING_NEW).tensors[a3.uid].dim == [1, 1, n]


def test_legalize_merges_leading_axes_of_rank4_pointwise_graphs():
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([2, 4, 8, 12], name="x")
    bias = g.tensor([1, 1, 1, 12], name="bias")
    g.diagonal_band_mask(g.add(x, bias), right_bound=0, implementation=AI.COMPOSITE).set_output(True)
    g.validate_ir()
    p = prepare(g, NOTHING_NEW)
    assert p.tensors[x.uid].dim == [8, 8, 12] and p.tensors[x.uid].stride == [96, 12, 1]
    assert p.tensors[bias.uid].dim == [1, 8, 12] or p.tensors[bias.uid].dim == [1, 1, 12]
    assert [n.params["axis"] for n in p.nodes if n.spec.method == "gen_index"] == [1, 2]
    g2 = cudnn.pygraph(io_data_type=F)  # broadcast over a leading axis: left alone
    a = g2.tensor([2, 4, 8, 12], name="a")
    g2.add(a, g2.tensor([1, 4, 1, 1], name="b")).set_output(True)
    g2.validate_ir()
    assert prepare(g2, NOTHING_NEW).tensors[a.uid].dim == [2, 4, 8, 12]
    # the merged graph computes the same: the reference engine on the program against numpy
    g3, x3, y3 = band_graph((2, 3, 8, 12), right_bound=1, implementation=AI.COMPOSITE)
    g3.register_backend(ReferenceEngine(program=True))
    xs = RNG.standard_normal((2, 3, 8, 12))
    out = np.full((2, 3, 8, 12), np.nan)
    g3.execute({x3: xs, y3: out})
    np.testing.assert_array_equal(out, band_expected(xs, right=1))


def _scores(batch, impl):
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    q = g.tensor([batch, 64, 32], name="q")
    kt = g.tensor([batch, 32, 96], name="kt")
    g.diagonal_band_mask(g.matmul(q, kt), right_bound=0, implementation=impl).set_output(True).set_data_type(F)
    return g


def test_errata_refuse_what_cudnn_gets_wrong_and_name_it():
    with pytest.raises(cudnn.cudnnGraphNotSupportedError,
                       match=r"erratum gen-index-in-batched-matmul-epilogue .*batched matmul .*Way around"):
        _scores(2, AI.COMPOSITE).validate()
    _scores(1, AI.COMPOSITE).validate()  # batch 1 is right on the GPU
    if versions.runtime_version() >= 92100:
        _scores(2, AI.UNIFIED).validate()  # no GEN_INDEX: not refused
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    a = g.tensor([1, 16, 30], name="a", data_type=cudnn.data_type.INT8)
    b = g.tensor([1, 30, 8], name="b", data_type=H)
    wide = g.identity(a).set_data_type(H)
    g.matmul(wide, b).set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"matmul-widening-cast-unaligned.*K = 30"):
        g.validate()


@pytest.mark.parametrize("layout, refused", [("padded", True), ("padded_2x", False), ("colmajor", False),
                                            ("overlapping", False), ("packed", False)])
def test_a_cast_into_a_matmul_is_refused_only_over_padded_strides(layout, refused):
    """The erratum matmul-cast-of-strided-input (reproduced with the official frontend on the H200) holds for an
    operand whose padded rows start off the 16-byte grid (INT8 rows padded by 3); rows padded to twice their length
    (the official test_matmul_fuzzer's), a column-major or an overlapping operand (its test_mixed_precision_matmul's
    B) are right in both libraries and are accepted."""
    b, k, n = 2, 64, 32
    strides = {"padded": [k * (n + 3), n + 3, 1], "padded_2x": [k * n * 2, n * 2, 1], "colmajor": [k * n, 1, k],
               "overlapping": [k * n, 1, n], "packed": [k * n, n, 1]}[layout]
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    a = g.tensor([b, 16, k], name="a", data_type=H)
    src = g.tensor([b, k, n], strides, name="src", data_type=cudnn.data_type.INT8)
    g.matmul(a, g.identity(src).set_data_type(H)).set_output(True)
    if refused:
        with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"matmul-cast-of-strided-input.*16-byte grid"):
            g.validate_ir() or g.validate()
    else:
        g.validate()


def test_errata_table_is_data_with_sources():
    from cudnn_py.plans import errata

    assert len({e.id for e in errata.ERRATA}) == len(errata.ERRATA)
    for e in errata.ERRATA:
        assert e.first >= 90000 and e.last >= e.first and e.source and e.effect and e.workaround
    assert {e.id for e in errata.applicable(91900)} >= {"gen-index-in-batched-matmul-epilogue"}
    assert "gen-index-in-batched-matmul-epilogue" not in {e.id for e in errata.applicable(91800)}


def test_graphs_of_errata_the_official_frontend_does_not_reproduce_are_accepted():
    """An AMAX reducing nothing and a pointwise op over unit axes with non-packed strides were refused as errata
    found by the fuzzer; on the H200 (cuDNN 9.19, 2026-12-03, fuzz/errata_probe cases red-nothing-nhwc and
    pw-unit-axis) both libraries compute them right, so they are no errata and are accepted."""
    g = cudnn.pygraph(io_data_type=F, compute_data_type=F)
    x = g.tensor([1, 64, 1, 1], [64, 1, 64, 64], name="x")
    g.reduction(x, cudnn.reduction_mode.AMAX).set_output(True).set_dim([1, 64, 1, 1]).set_stride([64, 1, 64, 64])
    g.validate()
    g2 = cudnn.pygraph(io_data_type=F, compute_data_type=F)  # ADD over nothing is a copy: right, not refused
    x2 = g2.tensor([1, 64, 1, 1], [64, 1, 64, 64], name="x")
    g2.reduction(x2, cudnn.reduction_mode.ADD).set_output(True).set_dim([1, 64, 1, 1]).set_stride([64, 1, 64, 64])
    g2.validate()
    g3 = cudnn.pygraph(io_data_type=F, compute_data_type=F)
    x3 = g3.tensor([64, 1, 1], [1, 64, 64], name="x")
    g3.abs(x3).set_output(True)
    g3.validate()
    g4 = cudnn.pygraph(io_data_type=F, compute_data_type=F)  # packed unit strides: fine
    g4.abs(g4.tensor([64, 1, 1], name="x")).set_output(True)
    g4.validate()


def _wgrad(post):
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([3, 16, 4, 6, 7], [2688, 1, 672, 112, 16], name="x")
    d = 1 + (4 + post[0] - 3) // 2
    dy = g.tensor([3, 16, d, 3, 2], [96 * d, 1, 96, 32, 16], name="dy")
    dw = g.conv_wgrad(x, dy, pre_padding=[0, 0, 0], post_padding=post, stride=[2, 2, 2], dilation=[1, 2, 2],
                      name="wg")
    dw.set_output(True).set_dim([16, 16, 3, 1, 3]).set_stride([144, 1, 48, 48, 16])
    return g


def test_an_engine_erratum_bars_its_engines_and_keeps_the_graph():
    """wgrad with more post than pre padding: engines 1 and 20 are wrong on cuDNN 9.19; the graph is not refused, the
    configs of those engines are barred with the erratum as the reason, and the others stay."""
    from types import SimpleNamespace

    from cudnn_py.plans import errata

    g = _wgrad([1, 0, 0])
    g.validate()  # not refused
    (e, where), = errata.engine_errata(g.session.program, 91900)
    assert e.id == "wgrad-post-padding-engines-1-20" and e.engines == (1, 20) and "'wg'" in where
    assert errata.engine_errata(g.session.program, 91800) == []
    s = g.session
    s.configs = [SimpleNamespace(engine_index=i, name=f"eng{i}") for i in (20, 0, 1, 65)]
    s.plan_list.bar_erratic_engines()
    if versions.runtime_version() >= 91900:
        assert sorted(s.barred) == [0, 2] and "wgrad-post-padding-engines-1-20" in s.barred[0]
    sym = _wgrad([0, 0, 0])
    sym.validate()
    assert errata.engine_errata(sym.session.program, 91900) == []


def test_validate_says_what_it_could_not_check():
    """Deviceless validate() names the checks it leaves to later phases: engine support (a GPU), the engine-level
    errata of this program, the operands; explain shows them."""
    g = _wgrad([1, 0, 0])
    g.validate()
    deferred = g.session.deferred_checks
    assert deferred[0].startswith("engine support (cuDNN heuristics and plan builds need a GPU)")
    assert deferred[-1].startswith("the operands")
    if versions.runtime_version() >= 91900:
        assert any("erratum wgrad-post-padding-engines-1-20" in line for line in deferred)
    text = g.explain()
    assert "not checked by validate()" in text and "engine support" in text


def test_program_twins_carry_the_twin_of_their_ragged_offset():
    """A user tensor first met by a pass (a score_mod's operand, say) gets a twin whose ragged offset is the
    program's twin of the offset, never the user's tensor."""
    from cudnn_py.ir.program import Program

    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF)
    off = g.tensor([3, 1, 1, 1], data_type=cudnn.data_type.INT32, name="off")
    x = g.tensor([2, 4, 8, 16], name="x", ragged_offset=off)
    g.add(x, x).set_output(True)
    g.validate_ir()
    program = Program.from_graph(g)
    extra = g.tensor([2, 4, 8, 16], name="extra", ragged_offset=off)  # not in the program yet
    twin = program.own(extra)
    assert twin is not extra and twin.ragged_offset is program.tensors[off.uid] is not off
    assert program.own(x).ragged_offset is program.tensors[off.uid]
