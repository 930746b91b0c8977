"""CPU: cudnn_py's runtime-compiled norm forward engine (cudnn_py/engines/norms, engines/runtime, engines/builtin).

No GPU: the graph matcher's accepts and declines, the variant choice, every variant the chooser can produce
compiled by the pip NVRTC for sm_80, sm_90a and sm_100a with no spill (ptxas' report), the version tied to the
kernel source, the cubin keys and store, and the routing of heur_mode.OPENSOURCE with a stand-in device."""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import ProcessPoolExecutor

import pytest

import cudnn_py as cudnn
from cudnn_py.engines import builtin, placement
from cudnn_py.engines.base import EngineIdentity
from cudnn_py.engines.engine_ids import NORM_FORWARD_ENGINE_ID, is_python_engine, is_runtime_engine
from cudnn_py.engines.norms import NormForwardEngine, source, variants
from cudnn_py.engines.norms.match import NormProblem, Operand, match
from cudnn_py.engines.runtime import Target, modules, nvrtc
from cudnn_py.engines.runtime.store import MemoryCubinStore
from cudnn_py.errors import cudnnGraphNotSupportedError

DT = cudnn.data_type
P = cudnn.norm_forward_phase
H100 = Target(90, 132)
TOOLCHAIN = nvrtc.Toolchain((12, 9), (80, 86, 89, 90, 100))

needs_nvrtc = pytest.mark.skipif(isinstance(nvrtc.toolchain(), str), reason="no usable NVRTC here")


def norm_graph(rows=8, n=64, io=DT.BFLOAT16, rms=False, phase=P.TRAINING, bias=True, residual=False, silu=False,
               y_out=None, alignment=None, wdt=DT.FLOAT):
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    X = g.tensor(dim=[rows, n, 1, 1], stride=[n, 1, n, n], data_type=io)
    if alignment:
        X.set_alignment(alignment)
    S = g.tensor(dim=[1, n, 1, 1], stride=[n, 1, n, n], data_type=wdt)
    B = g.tensor(dim=[1, n, 1, 1], stride=[n, 1, n, n], data_type=wdt) if bias or not rms else None
    eps = g.tensor(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.FLOAT, is_pass_by_value=True)
    h = X
    if residual:
        R = g.tensor_like(X)
        h = g.add(X, R)
        h.set_output(True)
    if rms:
        y, *stats = g.rmsnorm(phase, h, S, B, eps)
    else:
        y, *stats = g.layernorm(phase, h, S, B, eps)
    out = y
    if silu:
        out = g.swish(y)
        if y_out:
            y.set_output(True)
    out.set_output(True)
    for s in stats:
        if s is not None:
            s.set_output(True)
    g.validate_ir()
    return g


# ---- identity -------------------------------------------------------------------------------------------------------
def test_identity_and_version_follow_the_source():
    assert source.VERSION == hashlib.sha256(source.SOURCE.encode()).hexdigest()[:16]
    e = NormForwardEngine(target=H100, toolchain=TOOLCHAIN)
    assert e.engine_id == NORM_FORWARD_ENGINE_ID and is_python_engine(e.engine_id) and is_runtime_engine(e.engine_id)
    g = norm_graph()
    ident = e.identity(e.plan_configs(g)[0])
    assert ident == EngineIdentity(NORM_FORWARD_ENGINE_ID, "norm_forward", source.VERSION, (("elems", 32),))
    assert ident.as_dict()["knobs"] == {"elems": 32} and source.VERSION in str(ident)


# ---- matching --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [
    {}, {"rms": True}, {"rms": True, "bias": False}, {"phase": P.INFERENCE}, {"residual": True},
    {"rms": True, "silu": True}, {"rms": True, "silu": True, "residual": True, "y_out": True},
    {"io": DT.HALF, "wdt": DT.HALF}, {"io": DT.FLOAT},
])
def test_accepts(kw):
    p = match(norm_graph(**kw))
    assert p.n == 64 and p.rows == 8
    assert p.rms == kw.get("rms", False) and p.train == (kw.get("phase", P.TRAINING) is P.TRAINING)
    assert (p.r is not None) == kw.get("residual", False) and (p.s is not None) == kw.get("residual", False)
    assert (p.z is not None) == kw.get("silu", False)
    assert (p.y is not None) == (not kw.get("silu") or bool(kw.get("y_out")))
    assert (p.mean is not None) == (p.train and not p.rms) and (p.rstd is not None) == p.train


def _declines(g, words):
    with pytest.raises(cudnnGraphNotSupportedError, match=words):
        match(g)


def test_declines_other_graphs():
    g = cudnn.pygraph(io_data_type=DT.HALF, compute_data_type=DT.FLOAT)
    A = g.tensor(dim=[1, 8, 8], stride=[64, 8, 1], data_type=DT.HALF)
    g.matmul(A, A).set_output(True)
    g.validate_ir()
    _declines(g, "exactly one")
    # a pointwise op other than the add / SiLU
    g = cudnn.pygraph(io_data_type=DT.HALF, compute_data_type=DT.FLOAT)
    X = g.tensor(dim=[4, 32, 1, 1], stride=[32, 1, 32, 32], data_type=DT.HALF)
    S = g.tensor(dim=[1, 32, 1, 1], stride=[32, 1, 32, 32], data_type=DT.FLOAT)
    eps = g.tensor(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.FLOAT, is_pass_by_value=True)
    y, _ = g.rmsnorm(P.TRAINING, g.mul(X, X), S, None, eps)
    y.set_output(True)
    g.validate_ir()
    _declines(g, "not a residual add")


def test_declines_layouts():
    # normalized axis not innermost: channels-first with spatial dims, scale over C only
    g = cudnn.pygraph(io_data_type=DT.HALF, compute_data_type=DT.FLOAT)
    X = g.tensor(dim=[2, 8, 4, 4], stride=[128, 16, 4, 1], data_type=DT.HALF)
    S = g.tensor(dim=[1, 8, 1, 1], stride=[8, 1, 1, 1], data_type=DT.FLOAT)
    B = g.tensor(dim=[1, 8, 1, 1], stride=[8, 1, 1, 1], data_type=DT.FLOAT)
    eps = g.tensor(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.FLOAT, is_pass_by_value=True)
    y, m, v = g.layernorm(P.TRAINING, X, S, B, eps)
    for t in (y, m, v):
        t.set_output(True)
    g.validate_ir()
    _declines(g, "innermost")
    # padded rows
    g = cudnn.pygraph(io_data_type=DT.HALF, compute_data_type=DT.FLOAT)
    X = g.tensor(dim=[4, 32, 1, 1], stride=[40, 1, 32, 32], data_type=DT.HALF)
    S = g.tensor(dim=[1, 32, 1, 1], stride=[32, 1, 32, 32], data_type=DT.FLOAT)
    eps = g.tensor(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.FLOAT, is_pass_by_value=True)
    y, _ = g.rmsnorm(P.TRAINING, X, S, None, eps)
    y.set_output(True)
    g.validate_ir()
    _declines(g, "not packed")


def test_declines_data_types():
    g = norm_graph(io=DT.FP8_E4M3) if hasattr(DT, "FP8_E4M3") else None
    if g is not None:
        _declines(g, "data type")


# ---- variants --------------------------------------------------------------------------------------------------------
def test_vector_width_follows_width_and_alignment():
    for n, vec in ((64, 8), (4096, 8), (4097, 1), (3, 1), (1, 1)):
        assert variants.vector_width(match(norm_graph(n=n))) == vec
    assert variants.vector_width(match(norm_graph(n=64, alignment=2))) == 1
    assert variants.vector_width(match(norm_graph(n=64, io=DT.FLOAT))) == 4


@pytest.mark.parametrize("n", [1, 3, 127, 1000, 1024, 2048, 4096, 4097, 8192, 12288, 16384, 65536, 1 << 20])
@pytest.mark.parametrize("vec", [8, 4, 1])
@pytest.mark.parametrize("elems", variants.ELEMS_CHOICES)
def test_choose_covers_the_row(n, vec, elems):
    v = variants.choose(n, vec, elems)
    assert v.tpr & (v.tpr - 1) == 0 and v.tpr <= variants.MAX_TPR and v.threads >= 32 or v.tpr * v.rpc >= 32
    if not v.looped:
        assert v.iters * v.tpr * vec >= n and v.iters * vec <= variants.MAX_ELEMS and (vec > 1 or v.iters <= 16)
    assert v.threads <= 1024


def test_shapes_of_the_benchmark():
    """The default layouts of the benchmark's widths: those the sweep measured within 2.5% of the best."""
    got = {n: variants.choose(n, 8).label() for n in (1024, 2048, 4096, 8192, 12288)}
    assert got == {1024: "v8_t32_r8_i4_hints", 2048: "v8_t64_r4_i4_hints", 4096: "v8_t128_r2_i4_hints",
                   8192: "v8_t256_r1_i4_hints", 12288: "v8_t512_r1_i3"}


# ---- compiling: every variant, three architectures, no spill ------------------------------------------------------
def _problem(ctype, size, n, full):
    def o(u):
        return Operand(u, ctype, size, 16)

    w = Operand(3, "float", 4, 16)
    return NormProblem(False, True, n, 64, o(1), w, o(2) if full else None, o(5) if full else None,
                       w if full else None, o(6), o(8) if full else None, 10, 11, 4)


def _variant_cases():
    """Each layout the chooser makes for the benchmark's widths and the odd ones, once per dtype family: bf16 with
    every fusion (the most registers), fp32 with every fusion (4-element vectors), fp16 plain."""
    cases = {}
    for ctype, size, full in (("bf16_t", 2, True), ("float", 4, True), ("f16_t", 2, False)):
        for n in (1, 127, 1000, 4096, 12288, 1 << 20):
            for elems in variants.ELEMS_CHOICES if ctype == "bf16_t" else variants.ELEMS_CHOICES[:1]:
                for vec in (16 // size, 1):
                    v = variants.choose(n, vec, elems)
                    cases[(ctype, v)] = (ctype, size, n, v, full)
    return list(cases.values())


def _compile_case(case):
    ctype, size, n, v, full = case
    out = []
    for cc in (80, 90, 100):
        cubin, log = nvrtc.compile_cubin(source.SOURCE, "norm_fwd.cu", variants.options(_problem(ctype, size, n, full),
                                                                                      v), cc)
        out.append((cc, len(cubin), nvrtc.resources(log)))
    return out


@needs_nvrtc
def test_every_variant_compiles_without_spills():
    cases = _variant_cases()
    with ProcessPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        results = list(pool.map(_compile_case, cases))
    bad = []
    for case, res in zip(cases, results):
        for cc, size, r in res:
            assert size > 0
            if r.spill_stores or r.spill_loads or r.stack_bytes:
                bad.append((case[0], case[3].label(), cc, r))
    assert not bad, bad


def test_resources_parse():
    log = ("ptxas info    : Function properties for norm_fwd\nptxas         .     8 bytes stack frame, 4 bytes spill "
           "stores, 4 bytes spill loads\nptxas info    : Used 64 registers, used 1 barriers, 64 bytes smem\n")
    assert nvrtc.resources(log) == nvrtc.Resources(64, 8, 4, 4)
    with pytest.raises(ValueError):
        nvrtc.resources("nothing")


# ---- the cubin store and keys --------------------------------------------------------------------------------------
def test_cubin_keys_are_stable_and_complete():
    k = modules.cubin_key("src", ("-DA=1",), 90, (12, 9))
    assert k == modules.cubin_key("src", ("-DA=1",), 90, (12, 9)) and len(k) == 64
    assert len({k, modules.cubin_key("src2", ("-DA=1",), 90, (12, 9)), modules.cubin_key("src", ("-DA=2",), 90,
                (12, 9)), modules.cubin_key("src", ("-DA=1",), 100, (12, 9)),
                modules.cubin_key("src", ("-DA=1",), 90, (12, 8))}) == 5


@needs_nvrtc
def test_compiled_uses_the_store():
    store = MemoryCubinStore()
    opts = variants.options(_problem("bf16_t", 2, 64, False), variants.choose(64, 8))
    before = modules.COMPILES["count"]
    a = modules.compiled(source.SOURCE, "norm_fwd.cu", opts, 90, store)
    b = modules.compiled(source.SOURCE, "norm_fwd.cu", opts, 90, store)
    assert modules.COMPILES["count"] == before + 1 and a.cubin == b.cubin and a.key == b.key and len(store) == 1
    assert "Used" in a.log and b.log == ""


def test_memory_store_is_bounded():
    s = MemoryCubinStore(capacity=2)
    for i in range(3):
        s.put(str(i), b"x")
    assert s.get("0") is None and s.get("2") == b"x" and len(s) == 2


# ---- the toolchain and target declines -----------------------------------------------------------------------------
def test_declines_without_toolchain_or_device():
    g = norm_graph()
    with pytest.raises(cudnnGraphNotSupportedError, match="NVRTC is not available"):
        NormForwardEngine(target=H100, toolchain="NVRTC is not available: test").check_support(g)
    with pytest.raises(cudnnGraphNotSupportedError, match="compute capability 8.0"):
        NormForwardEngine(target=Target(75, 40), toolchain=TOOLCHAIN).check_support(g)
    with pytest.raises(cudnnGraphNotSupportedError, match="cannot compile for sm_120"):
        NormForwardEngine(target=Target(120, 84), toolchain=TOOLCHAIN).check_support(g)
    NormForwardEngine(target=H100, toolchain=TOOLCHAIN).check_support(g)
    assert nvrtc.Toolchain((12, 4), (90, 100)).supports(100)  # sm_100 needs NVRTC 12.8


# ---- routing: heur_mode.OPENSOURCE and the switch ------------------------------------------------------------------
@pytest.fixture
def fake_engines(monkeypatch):
    monkeypatch.setattr(builtin, "_engines", [NormForwardEngine(target=H100, toolchain=TOOLCHAIN)])
    monkeypatch.delenv(builtin.ENV, raising=False)


def _modes(g, modes):
    from cudnn_py.facade.options import heuristic_list

    return builtin.place(g, heuristic_list(modes))


def test_opensource_alone_is_only_ours(fake_engines):
    p = _modes(norm_graph(), [cudnn.heur_mode.OPENSOURCE])
    assert p.only and p.first and p.cudnn_modes == [] and [c.knobs["elems"] for c in p.plans] == [32, 16, 8]
    routed = builtin.combine([cudnn.engines.BACKEND_PLAN], p) if hasattr(cudnn, "engines") else None
    from cudnn_py.engines.base import BACKEND_PLAN

    assert builtin.combine([BACKEND_PLAN], p) == p.plans
    assert routed is None or routed == p.plans


def test_opensource_order(fake_engines):
    from cudnn_py.engines.base import BACKEND_PLAN

    g = norm_graph()
    first = _modes(g, [cudnn.heur_mode.OPENSOURCE, cudnn.heur_mode.A])
    assert first.first and not first.only and first.cudnn_modes == [cudnn.heur_mode.A]
    assert builtin.combine([BACKEND_PLAN], first)[-1] == BACKEND_PLAN
    after = _modes(g, [cudnn.heur_mode.A, cudnn.heur_mode.OPENSOURCE])
    assert builtin.combine([BACKEND_PLAN], after)[0] == BACKEND_PLAN



@pytest.mark.parametrize("row", [placement.OURS, placement.CUDNN])
def test_default_modes_follow_the_placement_table(fake_engines, monkeypatch, row):
    """Without OPENSOURCE the table's row for (op, dtype, cc) decides who comes first; ours stay offered."""
    from cudnn_py.engines.base import BACKEND_PLAN

    g = norm_graph(rms=True)
    monkeypatch.setitem(placement.TABLE, ("rmsnorm", "bf16", 90), row)
    default = _modes(g, None)
    order = builtin.combine([BACKEND_PLAN], default)
    assert default.plans and default.first == (row == placement.OURS)
    assert (order[0] == BACKEND_PLAN) == (row == placement.CUDNN) and BACKEND_PLAN in order
    assert ("first" in default.report[0]) == (row == placement.OURS)
    monkeypatch.delitem(placement.TABLE, ("rmsnorm", "bf16", 90))  # no row: cuDNN first
    assert not _modes(g, None).first


def test_opensource_alone_declines_what_no_engine_runs(fake_engines):
    g = cudnn.pygraph(io_data_type=DT.HALF, compute_data_type=DT.FLOAT)
    A = g.tensor(dim=[1, 8, 8], stride=[64, 8, 1], data_type=DT.HALF)
    g.matmul(A, A).set_output(True)
    g.validate_ir()
    with pytest.raises(cudnnGraphNotSupportedError, match="no cudnn_py engine supports the graph.*exactly one"):
        _modes(g, [cudnn.heur_mode.OPENSOURCE])
    assert _modes(g, None).report == []  # not claimed: not even asked without OPENSOURCE


def test_switch_turns_our_engines_off(fake_engines, monkeypatch):
    monkeypatch.setenv(builtin.ENV, "0")
    g = norm_graph()
    assert _modes(g, None).plans == []
    with pytest.raises(cudnnGraphNotSupportedError, match="CUDNN_PY_ENGINES=0"):
        _modes(g, [cudnn.heur_mode.OPENSOURCE])


def test_pygraph_routes_opensource(fake_engines):
    g = norm_graph(rms=True, silu=True)
    g.create_execution_plans([cudnn.heur_mode.OPENSOURCE])
    assert [p.engine_id for p in g.plans] == [NORM_FORWARD_ENGINE_ID] * 3
    assert g.selected_engine is not None and g.selected_engine.engine_id == NORM_FORWARD_ENGINE_ID
    text = g.explain()
    assert "cudnn_py engines" in text and "norm_forward[elems=32]" in text


def test_pygraph_explains_a_decline(monkeypatch):
    monkeypatch.setattr(builtin, "_engines", [NormForwardEngine(target=H100, toolchain="NVRTC is not available: x")])
    g = norm_graph()
    with pytest.raises(cudnnGraphNotSupportedError, match="NVRTC is not available"):
        g.create_execution_plans([cudnn.heur_mode.OPENSOURCE])
