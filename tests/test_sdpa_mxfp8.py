"""MXFP8 attention on the CPU: the classic surface of sdpa_mxfp8 / sdpa_mxfp8_backward, the validation rules
(E8M0 + F8_128x4 descales with their tile dims, head dims, GQA), the version and device gates, the decompositions
(dequantize per operand, Kᵀ and its descale swapped, {1, 32} sent to the backend) finalized deviceless by the real
cuDNN, the decompositions (``ReferenceEngine(program=True)``) against the float64 definition (``ReferenceEngine()``),
and the definition against an independent numpy computation with its own F8_128x4 swizzle."""
from __future__ import annotations

import inspect
import math
from types import SimpleNamespace

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.errors import FeatureVersionError, NotImplementedOptionError
from cudnn_py.ir.passes import PassOptions, prepare
from cudnn_py.ir.spec import SPECS
from cudnn_py.plans import device_gates

E4, F, H, BF, D, E8, I32 = (cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT, cudnn.data_type.HALF,
                            cudnn.data_type.BFLOAT16, cudnn.data_type.DOUBLE, cudnn.data_type.FP8_E8M0,
                            cudnn.data_type.INT32)
F8_128x4 = cudnn.tensor_reordering.F8_128x4
HAS_MXFP8 = versions.runtime_version() >= 92100
needs_mxfp8 = pytest.mark.skipif(not HAS_MXFP8, reason="MXFP8 attention needs cuDNN >= 9.21")


def running(feature, at_least=0):
    return versions.available(feature) and versions.runtime_version() >= at_least


RUNNING = PassOptions(available=running, require=versions.require)


# ---- the F8_128x4 layout, written from the tile definition (independent of the reference's swizzle) -------------
def pad(n, multiple):
    return -(-n // multiple) * multiple


def descale_dims(dims, along):
    b, h, s, d = dims
    return [b, h, pad(s, 128), pad(d // 32, 4)] if along == "d" else [b, h, pad(s // 32, 4), pad(d, 128)]


def swizzled(scales, along):
    """The row-major feed of an F8_128x4 descale holding ``scales`` (b, h, rows-or-blocks, ...): per (b, h), the
    scale of (row r, block c) sits at ((r // 128) · (C / 4) + c // 4) · 512 + (r % 32) · 16 + (r % 128 // 32) · 4
    + c % 4, where rows are the non-block axis of the last two, padded to 128, and C the blocks padded to 4.
    Padding entries hold 2^-127."""
    b, h = scales.shape[:2]
    logical = scales if along == "d" else np.swapaxes(scales, 2, 3)  # (b, h, rows, blocks)
    rows, cols = pad(logical.shape[2], 128), pad(logical.shape[3], 4)
    full = np.full((b, h, rows, cols), 2.0 ** -127)
    full[:, :, :logical.shape[2], :logical.shape[3]] = logical
    memory = np.empty((b, h, rows * cols))
    for r in range(rows):
        for c in range(cols):
            pos = ((r // 128) * (cols // 4) + c // 4) * 512 + (r % 32) * 16 + (r % 128 // 32) * 4 + c % 4
            memory[:, :, pos] = full[:, :, r, c]
    dims = [b, h, rows, cols] if along == "d" else [b, h, cols, rows]
    return memory.reshape(dims)


E4M3_GRID = np.array([m / 8 * 2.0 ** -6 for m in range(1, 8)] +
                     [(1 + m / 8) * 2.0 ** e for e in range(-6, 9) for m in range(8)][:-1])


def mx_operand(rng, dims, along):
    """(elements on the E4M3 grid, E8M0 block scales (b, h, blocks...), the real values they encode)."""
    b, h, s, d = dims
    elements = rng.choice(E4M3_GRID, size=dims) * rng.choice([-1.0, 1.0], size=dims)
    blocks = (b, h, s, d // 32) if along == "d" else (b, h, s // 32, d)
    scales = np.exp2(rng.integers(-9, -5, size=blocks).astype(float))  # elements up to 448: values up to ~14
    axis = 3 if along == "d" else 2
    return elements, scales, elements * np.repeat(scales, 32, axis=axis)


# ---- graphs ----------------------------------------------------------------------------------------------------
def graph(io=H):
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=F, compute_data_type=F)


def mx_tensor(g, name, dims):
    return g.tensor(list(dims), data_type=E4, name=name)


def descale(g, name, dims, along):
    return g.tensor(descale_dims(dims, along), data_type=E8, name=name).set_reordering_type(F8_128x4)


FWD_ALONG = {"q": "d", "k": "d", "v": "s"}
BWD_ALONG = {"q": "d", "q_T": "s", "k": "d", "k_T": "s", "v": "d", "dO": "d", "dO_T": "s"}


def forward_graph(b=2, h_q=4, h_k=2, s_q=64, s_kv=96, d=64, d_v=None, io=H, **kw):
    g = graph(io)
    d_v = d_v or d
    dims = {"q": (b, h_q, s_q, d), "k": (b, h_k, s_kv, d), "v": (b, h_k, s_kv, d_v)}
    ts = {n: mx_tensor(g, n, dims[n]) for n in ("q", "k", "v")}
    ds = {n: descale(g, f"descale_{n}", dims[n], FWD_ALONG[n]) for n in ("q", "k", "v")}
    kw.setdefault("generate_stats", True)
    outs = g.sdpa_mxfp8(ts["q"], ts["k"], ts["v"], ds["q"], ds["k"], ds["v"], name="mx", **kw)
    return g, ts, ds, outs


def backward_operands(g, b, h_q, h_k, s_q, s_kv, d, d_v):
    """The backward's MXFP8 operands and their descales, the 16-bit o / dO and the statistics, declared on ``g``:
    (tensors by name, descales by name)."""
    dims = {"q": (b, h_q, s_q, d), "q_T": (b, h_q, s_q, d), "k": (b, h_k, s_kv, d), "k_T": (b, h_k, s_kv, d),
            "v": (b, h_k, s_kv, d_v), "dO": (b, h_q, s_q, d_v), "dO_T": (b, h_q, s_q, d_v)}
    ts = {n: mx_tensor(g, n, dims[n]) for n in dims}
    ds = {n: descale(g, f"descale_{n}", dims[n], BWD_ALONG[n]) for n in dims}
    ts["o_f16"] = g.tensor([b, h_q, s_q, d_v], data_type=BF, name="o_f16")
    ts["dO_f16"] = g.tensor([b, h_q, s_q, d_v], data_type=BF, name="dO_f16")
    ts["stats"] = g.tensor([b, h_q, s_q, 1], data_type=F, name="stats")
    return ts, ds


def call_backward(g, ts, ds, **kw):
    return g.sdpa_mxfp8_backward(ts["q"], ts["q_T"], ts["k"], ts["k_T"], ts["v"], ts["o_f16"], ts["dO_f16"], ts["dO"],
                                 ts["dO_T"], ts["stats"], *(ds[n] for n in BWD_ALONG), name="mxb", **kw)


def backward_graph(b=2, h_q=4, h_k=2, s_q=64, s_kv=96, d=64, d_v=None, io=H, **kw):
    g = graph(io)
    ts, ds = backward_operands(g, b, h_q, h_k, s_q, s_kv, d, d_v or d)
    return g, ts, ds, call_backward(g, ts, ds, **kw)


def set_outputs(outs, dt=BF):
    for t in outs:
        if t is not None:
            t.set_output(True)
    for t in outs[:3 if len(outs) >= 6 else 1]:
        t.set_data_type(dt)


# ---- surface ---------------------------------------------------------------------------------------------------
def test_signatures_positional_order_and_defaults():
    for method in ("sdpa_mxfp8", "sdpa_mxfp8_backward"):
        sig = inspect.signature(getattr(cudnn.pygraph, method))
        assert list(sig.parameters)[1:] == list(SPECS[method].order) + ["out_dims"], method  # the classic order
        assert sig.parameters["out_dims"].kind is inspect.Parameter.KEYWORD_ONLY
    fwd = SPECS["sdpa_mxfp8"]
    assert fwd.order == ("q", "k", "v", "descale_q", "descale_k", "descale_v", "attn_scale", "use_causal_mask",
                         "use_causal_mask_bottom_right", "diagonal_alignment", "diagonal_band_left_bound",
                         "diagonal_band_right_bound", "compute_data_type", "name", "generate_stats", "sink_token",
                         "unfuse_fma")
    bwd = SPECS["sdpa_mxfp8_backward"]
    assert bwd.order[:17] == ("q", "q_T", "k", "k_T", "v", "o_f16", "dO_f16", "dO", "dO_T", "stats", "descale_q",
                              "descale_q_T", "descale_k", "descale_k_T", "descale_v", "descale_dO", "descale_dO_T")
    assert bwd.order[17:] == ("attn_scale", "use_padding_mask", "seq_len_q", "seq_len_kv", "use_causal_mask",
                              "use_causal_mask_bottom_right", "diagonal_alignment", "left_bound", "right_bound",
                              "use_deterministic_algorithm", "dropout", "compute_data_type", "name", "sink_token",
                              "dSink_token")
    defaults = fwd._defaults()
    assert defaults["attn_scale"] is None and defaults["use_causal_mask"] is False and defaults["unfuse_fma"] is False
    assert defaults["diagonal_alignment"] is cudnn.diagonal_alignment.TOP_LEFT and "generate_stats" not in defaults


def test_forward_returns_o_stats_amax_o_with_the_frontend_names():
    g, ts, ds, outs = forward_graph()
    assert [t.name for t in outs] == ["mx::O", "mx::Stats", "mx::Amax_O"]
    set_outputs(outs)
    g.validate_ir()
    o, stats, amax = outs
    assert o.dim == [2, 4, 64, 64] and stats.dim == [2, 4, 64, 1] and amax.dim == [1, 1, 1, 1]
    assert stats.data_type is amax.data_type is F
    _, _, _, outs = forward_graph(generate_stats=False)
    assert len(outs) == 3 and outs[1] is None and outs[2] is not None
    # positionally: attn_scale, use_causal_mask, ..., compute_data_type, name, generate_stats
    g = graph()
    q, k, v = (mx_tensor(g, n, dims) for n, dims in (("q", (1, 1, 32, 32)), ("k", (1, 1, 32, 32)),
                                                       ("v", (1, 1, 32, 32))))
    sc = [descale(g, n, (1, 1, 32, 32), a) for n, a in (("sq", "d"), ("sk", "d"), ("sv", "s"))]
    outs = g.sdpa_mxfp8(q, k, v, *sc, 0.5, True, False, cudnn.diagonal_alignment.TOP_LEFT, None, None,
                        cudnn.data_type.FLOAT, "pos", False)
    assert outs[0].name == "pos::O" and outs[1] is None


def test_forward_argument_checks():
    g, ts, ds, _ = forward_graph()
    args = (ts["q"], ts["k"], ts["v"], ds["q"], ds["k"], ds["v"])
    with pytest.raises(TypeError, match=r"sdpa_mxfp8\(\) missing required arguments \['generate_stats'\]"):
        g.sdpa_mxfp8(*args)
    with pytest.raises(TypeError, match="missing required arguments"):
        g.sdpa_mxfp8(*args, generate_stats=None)
    with pytest.raises(NotImplementedOptionError, match=r"sdpa_mxfp8\(\): unfuse_fma=True"):
        g.sdpa_mxfp8(*args, generate_stats=True, unfuse_fma=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bias'"):
        g.sdpa_mxfp8(*args, generate_stats=True, bias=ts["q"])
    o = g.sdpa_mxfp8(*args, generate_stats=True, use_causal_mask=True, diagonal_band_right_bound=2)[0]
    node = next(n for n in g._nodes if o in n.outputs.values())  # the frontend's precedence: causal pins it to 0
    assert node.params["diagonal_band_right_bound"] == 0


def test_backward_returns_the_gradients_and_three_amax():
    g, ts, ds, outs = backward_graph()
    assert [t.name for t in outs] == ["mxb::dQ", "mxb::dK", "mxb::dV", "mxb::Amax_dQ", "mxb::Amax_dK",
                                      "mxb::Amax_dV"]
    set_outputs(outs)
    g.validate_ir()
    assert outs[1].dim == [2, 2, 96, 64] and outs[5].dim == [1, 1, 1, 1] and outs[5].data_type is F
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"sdpa_mxfp8_backward\(\): dropout is not supported"):
        backward_graph(dropout=(0.1, ts["stats"], ts["stats"]))
    with pytest.raises(TypeError, match="sliding_window"):
        backward_graph(sliding_window=3)


# ---- validation ------------------------------------------------------------------------------------------------
def _forward_case(case):
    """A forward graph with one thing wrong."""
    kw = {}
    if case == "head_dim":
        kw["d"] = 48
    if case == "head_dim_large":
        kw["d"] = 160
    if case == "kv_heads":
        kw["h_k"] = 3
    if case == "seq_blocks":
        kw["s_kv"] = 80
    if case == "head_dims_differ":
        g = graph()
        q, k, v = mx_tensor(g, "q", (2, 4, 64, 64)), mx_tensor(g, "k", (2, 2, 96, 32)), mx_tensor(g, "v", (2, 2, 96, 64))
        g.sdpa_mxfp8(q, k, v, descale(g, "dq", (2, 4, 64, 64), "d"), descale(g, "dk", (2, 2, 96, 32), "d"),
                     descale(g, "dv", (2, 2, 96, 64), "s"), generate_stats=True, name="mx")[0].set_output(True)
        return g
    g, ts, ds, outs = forward_graph(**kw)
    if case == "half_q":
        ts["q"].set_data_type(H)
    if case == "descale_type":
        ds["k"].set_data_type(F)
    if case == "descale_reordering":
        ds["q"].set_reordering_type(cudnn.tensor_reordering.NONE)
    if case == "descale_dims":
        ds["q"].set_dim([2, 4, 64, 4]).set_stride([1024, 256, 4, 1])
    if case == "descale_v_along_d":
        ds["v"].set_dim(descale_dims((2, 2, 96, 64), "d")).set_stride([256, 128, 1, 128 * 2])
    if case == "descale_stride":
        ds["k"].set_stride([512, 256, 1, 128])
    set_outputs(outs)
    return g


@pytest.mark.parametrize("case, match", [
    ("half_q", r"sdpa_mxfp8 node 'mx': tensor 'q'.*must be FP8_E4M3 or FP8_E5M2"),
    ("head_dim", r"tensor 'q'.*head dim 48 is not a multiple of 32"),
    ("head_dim_large", r"tensor 'q'.*d_qk 160, d_v 160: MXFP8 attention takes at most 128"),
    ("head_dims_differ", r"tensor 'k'.*head dim 32 differs from q's 64"),
    ("kv_heads", r"tensor 'k'.*3 heads do not divide q's 4 heads"),
    ("seq_blocks", r"tensor 'v'.*sequence length 80 is not a multiple of 32"),
    ("descale_type", r"tensor 'descale_k'.*must be FP8_E8M0 reordered F8_128x4 \(got FLOAT"),
    ("descale_reordering", r"tensor 'descale_q'.*reordering NONE"),
    ("descale_dims", r"tensor 'descale_q'.*not the F8_128x4 tiles of 'q' \[2, 4, 64, 64\] blocked along d by 32: "
                     r"expected \[2, 4, 128, 4\]"),
    ("descale_v_along_d", r"tensor 'descale_v'.*blocked along s by 32: expected \[2, 2, 4, 128\]"),
    ("descale_stride", r"tensor 'descale_k'.*stride\[3\] must be 1"),
])
def test_forward_validation_names_the_tensor_and_rule(case, match):
    g = _forward_case(case)
    error = cudnn.cudnnGraphNotSupportedError if case == "kv_heads" else ValueError  # the frontend's classes
    with pytest.raises(error, match=match):
        g.validate_ir()


def test_backward_validation_names_the_tensor_and_rule():
    g, ts, ds, outs = backward_graph()
    ts["o_f16"].set_data_type(E4)
    set_outputs(outs)
    with pytest.raises(ValueError, match=r"sdpa_mxfp8_backward node 'mxb': tensor 'o_f16'.*HALF, BFLOAT16 or FLOAT"):
        g.validate_ir()
    g, ts, ds, outs = backward_graph()
    ts["k_T"].set_dim([2, 2, 64, 64])
    set_outputs(outs)
    with pytest.raises(ValueError, match=r"tensor 'k_T'.*differ from 'k''s \[2, 2, 96, 64\]"):
        g.validate_ir()
    g, ts, ds, outs = backward_graph()
    ds["q_T"].set_dim(descale_dims((2, 4, 64, 64), "d")).set_stride([512, 128, 1, 128])
    set_outputs(outs)
    with pytest.raises(ValueError, match=r"tensor 'descale_q_T'.*blocked along s by 32: expected \[2, 4, 4, 128\]"):
        g.validate_ir()
    g, ts, ds, outs = backward_graph(s_q=48)
    set_outputs(outs)
    with pytest.raises(ValueError, match=r"tensor 'q_T'.*sequence length 48 is not a multiple of 32"):
        g.validate_ir()
    g, ts, ds, outs = backward_graph(h_k=3)
    set_outputs(outs)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"tensor 'k'.*3 heads do not divide q's 4 heads"):
        g.validate_ir()


# ---- gates -----------------------------------------------------------------------------------------------------
def test_version_gate_names_cudnn_9_21_and_blackwell(monkeypatch):
    monkeypatch.setattr(versions, "runtime_version", lambda: 91900)  # as on the H200
    for build in (forward_graph, backward_graph):
        g, _, _, outs = build()
        set_outputs(outs)
        with pytest.raises(FeatureVersionError, match=r"sdpa_mxfp8(_backward)?\(\) \(node 'mxb?'\): MXFP8 attention "
                           r".*needs cuDNN 9\.21\.0 or newer; the loaded cuDNN is 9\.19\.0.*Blackwell-only.*compute "
                           r"capability 10\.x \(major == 10 exactly"):
            g.validate()
    # the python engines interpret the decomposition whatever cuDNN is loaded: PassOptions gates nothing by default
    g, _, _, outs = forward_graph()
    set_outputs(outs)
    g.validate_ir()
    nodes = prepare(g, PassOptions(available=lambda feature, at_least=0: False)).nodes
    assert [n.op for n in nodes].count("block_scale_dequantize") == 3


def test_device_gate_is_compute_capability_major_10(monkeypatch):
    g, _, _, outs = forward_graph()
    set_outputs(outs)
    g.validate_ir()
    node = g.nodes[0]
    handle = SimpleNamespace(device=0)
    for cc in (90, 120, 80):
        monkeypatch.setattr(device_gates, "compute_capability", lambda device, cc=cc: cc)
        with pytest.raises(cudnn.cudnnGraphNotSupportedError,
                           match=rf"sdpa_mxfp8\(\) \(node 'mx'\) cannot run on device 0 \(compute capability "
                                 rf"{cc // 10}\.{cc % 10}\): MXFP8 attention is Blackwell-only: it needs a GPU of "
                                 r"compute capability 10\.x \(major == 10 exactly"):
            device_gates.check([node], handle)
    for cc in (100, 103):
        monkeypatch.setattr(device_gates, "compute_capability", lambda device, cc=cc: cc)
        device_gates.check([node], handle)


# ---- what reaches cuDNN ----------------------------------------------------------------------------------------
DEQ = "CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR"


def _block_sizes(g):
    ops = g.session.lowered.operations
    return [op.attributes["CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE"] for op in ops
            if op.kind.name == DEQ]


@needs_mxfp8
@pytest.mark.parametrize("causal", [False, True])
def test_forward_decomposition_finalizes_deviceless(causal):
    g, ts, ds, outs = forward_graph(attn_scale=0.125, use_causal_mask=causal)
    set_outputs(outs)
    g.validate()  # the composite operation graph, finalized without a device by cuDNN 9.28
    assert _block_sizes(g) == [[1, 32]] * 3  # what the frontend gives the backend, for Q, Kᵀ and V
    nodes = prepare(g, RUNNING).nodes
    methods = [n.spec.method for n in nodes]
    assert methods[:3] == ["block_scale_dequantize", "block_scale_dequantize", "matmul"]
    deq_k, deq_q, bmm1 = nodes[:3]  # Kᵀ first, then Q
    assert bmm1.inputs["A"] is deq_q.outputs["Y"] and bmm1.inputs["B"] is deq_k.outputs["Y"]
    # Kᵀ and its descale: axes 2 / 3 swapped (dims and strides) in the program, the user's tensors untouched
    assert deq_k.inputs["X"].dim == [2, 2, 64, 96] and deq_k.inputs["X"].stride == [12288, 6144, 1, 64]
    assert deq_k.inputs["SCALE"].dim == [2, 2, 4, 128] and deq_k.inputs["SCALE"].stride[2:] == [1, 4]
    assert ts["k"].dim == [2, 2, 96, 64] and ds["k"].dim == [2, 2, 128, 4]
    assert [n.params["block_size"] for n in nodes if n.op == "block_scale_dequantize"] == [[32, 1], [1, 32], [32, 1]]
    assert all(n.params["backend_block_size"] == [1, 32] for n in nodes if n.op == "block_scale_dequantize")
    assert methods[-4:] == ["div", "block_scale_dequantize", "matmul", "reduction"]  # softmax, V, bmm2, AMAX(O)
    div, deq_v, bmm2, amax = nodes[-4:]
    assert div.outputs["OUT_0"].data_type is E4  # bmm2's A in Q's type
    assert bmm2.inputs["A"] is div.outputs["OUT_0"] and bmm2.inputs["B"] is deq_v.outputs["Y"]
    assert deq_v.inputs["X"].uid == ts["v"].uid and bmm2.outputs["C"].uid == outs[0].uid
    assert amax.params["mode"] is cudnn.reduction_mode.AMAX and amax.inputs["X"].uid == outs[0].uid
    assert amax.outputs["Y"].uid == outs[2].uid
    band = ["diagonal_band_mask_op"] if causal else []  # the unified band-mask op of cuDNN >= 9.21
    softmax = ["reduction", "sub", "exp", "reduction", "log", "add", "div"]  # with its stats branch
    assert methods[3:-3] == ["mul"] + band + softmax  # attn_scale only: no descale MULs, no Amax_S / scale_s


@needs_mxfp8
@pytest.mark.parametrize("h_k", [4, 2])
def test_backward_decomposition_finalizes_deviceless(h_k):
    g, ts, ds, outs = backward_graph(h_k=h_k, attn_scale=0.125, use_causal_mask=True)
    set_outputs(outs)
    g.validate()
    assert _block_sizes(g) == [[1, 32]] * 7
    nodes = prepare(g, RUNNING).nodes
    deq = [n for n in nodes if n.op == "block_scale_dequantize"]
    by_operand = {n.inputs["X"].uid: n for n in deq}
    assert set(by_operand) == {ts[n].uid for n in ("q", "q_T", "k", "k_T", "v", "dO", "dO_T")}
    for name, block in (("q", [1, 32]), ("q_T", [32, 1]), ("k", [32, 1]), ("k_T", [32, 1]), ("v", [32, 1]),
                        ("dO", [1, 32]), ("dO_T", [32, 1])):
        assert by_operand[ts[name].uid].params["block_size"] == block, name
    assert by_operand[ts["k"].uid].inputs["X"].dim == [2, h_k, 64, 96]  # Kᵀ
    assert by_operand[ts["v"].uid].inputs["X"].dim == [2, h_k, 64, 96]  # Vᵀ
    matmuls = [n for n in nodes if n.op == "matmul"]
    assert len(matmuls) == 5  # Q·Kᵀ, Pᵀ·dO_T, dO·Vᵀ, dS·K_T, dSᵀ·Q_T
    assert [m.inputs["B"] for m in matmuls] == [by_operand[ts[n].uid].outputs["Y"]
                                                for n in ("k", "dO_T", "v", "k_T", "q_T")]
    assert matmuls[1].inputs["A"].data_type is F and matmuls[4].inputs["A"].data_type is F  # P and dS in FLOAT
    amax = [n for n in nodes if n.op == "reduction" and n.params["mode"] is cudnn.reduction_mode.AMAX]
    assert [(n.inputs["X"].uid, n.outputs["Y"].uid) for n in amax] == [
        (outs[2].uid, outs[5].uid), (outs[0].uid, outs[3].uid), (outs[1].uid, outs[4].uid)]
    grouped = [n for n in nodes if n.spec.method == "grouped_reduction"]
    assert len(grouped) == (0 if h_k == 4 else 2)
    d_o_o = nodes[0]
    assert {d_o_o.inputs["IN_0"].uid, d_o_o.inputs["IN_1"].uid} == {ts["dO_f16"].uid, ts["o_f16"].uid}


# ---- numbers: the decomposition against the definition, the definition against numpy ------------------------
SHAPES = [(1, 1, 1, 32, 32, 32, 32), (2, 4, 2, 40, 64, 64, 32), (1, 2, 1, 128, 160, 32, 64)]
FWD_OPTIONS = [dict(), dict(use_causal_mask=True), dict(use_causal_mask_bottom_right=True),
               dict(diagonal_band_left_bound=5, use_causal_mask=True), dict(sink=True)]


def draw_forward(shape, seed):
    b, h_q, h_k, s_q, s_kv, d, d_v = shape
    rng = np.random.default_rng(seed)
    out = {}
    for name, dims in (("q", (b, h_q, s_q, d)), ("k", (b, h_k, s_kv, d)), ("v", (b, h_k, s_kv, d_v))):
        out[name] = mx_operand(rng, dims, FWD_ALONG[name])
    out["sink"] = rng.standard_normal((1, h_q, 1, 1))
    return out


def run_forward(shape, opt, data, engine, io=D):
    b, h_q, h_k, s_q, s_kv, d, d_v = shape
    opt = dict(opt)
    g = graph(io)
    dims = {"q": (b, h_q, s_q, d), "k": (b, h_k, s_kv, d), "v": (b, h_k, s_kv, d_v)}
    ts = {n: mx_tensor(g, n, dims[n]) for n in dims}
    ds = {n: descale(g, f"descale_{n}", dims[n], FWD_ALONG[n]) for n in dims}
    feeds = {ts[n]: data[n][0] for n in dims}
    feeds.update({ds[n]: swizzled(data[n][1], FWD_ALONG[n]) for n in dims})
    if opt.pop("sink", False):
        sink = g.tensor([1, h_q, 1, 1], data_type=F, name="sink")
        feeds[sink] = data["sink"]
        opt["sink_token"] = sink
    outs = g.sdpa_mxfp8(ts["q"], ts["k"], ts["v"], ds["q"], ds["k"], ds["v"], attn_scale=1 / math.sqrt(d),
                        generate_stats=True, name="mx", **opt)
    set_outputs(outs)
    g.register_backend(engine)
    g.validate_ir()
    bufs = [np.full(t.dim, np.nan) for t in outs]
    g.execute({**feeds, **dict(zip(outs, bufs))})
    return bufs


def numpy_attention(q, k, v, scale, causal=False, sink=None):
    """O, Stats of attention over real values (GQA by repeating the kv heads), from the textbook formulas."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if sink is None else np.maximum(s.max(axis=-1, keepdims=True), sink)
    e = np.exp(s - m)
    z = e.sum(axis=-1, keepdims=True) + (0 if sink is None else np.exp(sink - m))
    return np.einsum("bhqk,bhkd->bhqd", e / z, v), m + np.log(z)


@pytest.mark.parametrize("opt", FWD_OPTIONS, ids=lambda o: "-".join(sorted(o)) or "plain")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_decomposition_is_the_definition(shape, opt):
    data = draw_forward(shape, seed=hash(str((shape, opt))) % 2**32)
    program = run_forward(shape, opt, data, ReferenceEngine(program=True))
    definition = run_forward(shape, opt, data, ReferenceEngine())
    for i, (got, want) in enumerate(zip(program, definition)):
        assert np.isfinite(want).all() and np.abs(want).max() > 0, i
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"output {i}")


@pytest.mark.parametrize("causal, sink", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_definition_is_attention_over_the_block_scaled_values(shape, causal, sink):
    data = draw_forward(shape, seed=3)
    opt = {"use_causal_mask": causal} if causal else {}
    if sink:
        opt["sink"] = True
    o, stats, amax = run_forward(shape, opt, data, ReferenceEngine())
    want_o, want_stats = numpy_attention(data["q"][2], data["k"][2], data["v"][2], 1 / math.sqrt(shape[5]), causal,
                                         data["sink"] if sink else None)
    np.testing.assert_allclose(o, want_o, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(stats, want_stats, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(amax.item(), np.abs(want_o).max(), rtol=1e-12)
    # the scales matter: attention over the bare elements differs
    bare = numpy_attention(data["q"][0], data["k"][0], data["v"][0], 1 / math.sqrt(shape[5]), causal)[0]
    assert np.linalg.norm(o - bare) > 0.1 * np.linalg.norm(o)


BWD_SHAPES = [(1, 1, 1, 32, 32, 32, 32), (2, 4, 2, 64, 96, 64, 32)]
BWD_OPTIONS = [dict(), dict(use_causal_mask=True), dict(padding=True), dict(sink=True)]


def draw_backward(shape, seed, consistent=False):
    """MX operands; ``consistent``: q_T, k_T, dO_T hold the real values of q, k, dO (quantized along s), else
    they are drawn independently (so a decomposition that reads one for the other cannot pass)."""
    b, h_q, h_k, s_q, s_kv, d, d_v = shape
    rng = np.random.default_rng(seed)
    dims = {"q": (b, h_q, s_q, d), "k": (b, h_k, s_kv, d), "v": (b, h_k, s_kv, d_v), "dO": (b, h_q, s_q, d_v)}
    out = {n: mx_operand(rng, dims[n], BWD_ALONG[n]) for n in dims}
    for n in ("q", "k", "dO"):
        if not consistent:
            out[f"{n}_T"] = mx_operand(rng, dims[n], "s")
            continue
        real = out[n][2]  # the same real tensor quantized along s: a different element / scale split
        b_, h_, s_, d_ = real.shape
        scales = np.exp2(np.ceil(np.log2(np.abs(real).reshape(b_, h_, s_ // 32, 32, d_).max(axis=3) / 448)))
        out[f"{n}_T"] = (real / np.repeat(scales, 32, axis=2), scales, real)
    out["o_f16"] = rng.standard_normal((b, h_q, s_q, d_v))
    out["sink"] = rng.standard_normal((1, h_q, 1, 1))
    out["lens"] = (np.array([s_q] + list(rng.integers(1, s_q + 1, b - 1))),
                   np.array([s_kv] + list(rng.integers(1, s_kv + 1, b - 1))))
    return out


def run_backward(shape, opt, data, engine, stats=None):
    b, h_q, h_k, s_q, s_kv, d, d_v = shape
    opt = dict(opt)
    g = graph(D)
    ts, ds = backward_operands(g, b, h_q, h_k, s_q, s_kv, d, d_v)
    feeds = {ts[n]: data[n][0] for n in BWD_ALONG}
    feeds.update({ds[n]: swizzled(data[n][1], BWD_ALONG[n]) for n in BWD_ALONG})
    feeds.update({ts["o_f16"]: data["o_f16"], ts["dO_f16"]: data["dO"][2], ts["stats"]: stats})
    extra = []
    if opt.pop("sink", False):
        sink = g.tensor([1, h_q, 1, 1], data_type=F, name="sink")
        feeds[sink] = data["sink"]
        extra.append(g.tensor([1, h_q, 1, 1], data_type=F, name="dSink"))
        opt.update(sink_token=sink, dSink_token=extra[0])
    if opt.pop("padding", False):
        sq, skv = g.tensor([b, 1, 1, 1], data_type=I32), g.tensor([b, 1, 1, 1], data_type=I32)
        feeds[sq], feeds[skv] = data["lens"][0].reshape(b, 1, 1, 1), data["lens"][1].reshape(b, 1, 1, 1)
        opt.update(use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv)
    outs = call_backward(g, ts, ds, attn_scale=1 / math.sqrt(d), **opt) + extra
    set_outputs(outs)
    g.register_backend(engine)
    g.validate_ir()
    bufs = [np.full(t.dim, np.nan) for t in outs]
    g.execute({**feeds, **dict(zip(outs, bufs))})
    return bufs


def forward_stats(shape, data, opt):
    """Stats of the forward over the backward's q, k (exact numpy, with the options' masks)."""
    q, k = data["q"][2], np.repeat(data["k"][2], shape[1] // shape[2], axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(shape[5])
    keep = np.ones(s.shape, dtype=bool)
    if opt.get("use_causal_mask"):
        keep &= np.tril(np.ones(s.shape[-2:], dtype=bool))
    if opt.get("padding"):
        rows, cols = np.arange(s.shape[2]).reshape(-1, 1), np.arange(s.shape[3]).reshape(1, -1)
        keep &= (rows < data["lens"][0].reshape(-1, 1, 1, 1)) & (cols < data["lens"][1].reshape(-1, 1, 1, 1))
    s = np.where(keep, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    if opt.get("sink"):
        m = np.maximum(m, data["sink"])
    z = np.exp(s - np.where(np.isfinite(m), m, 0)).sum(axis=-1, keepdims=True)
    if opt.get("sink"):
        z = z + np.exp(data["sink"] - m)
    with np.errstate(divide="ignore"):
        stats = m + np.log(z)
    return np.nan_to_num(stats, neginf=0.0)  # a fully masked row: P = exp(-inf - 0) = 0


@pytest.mark.parametrize("opt", BWD_OPTIONS, ids=lambda o: "-".join(sorted(o)) or "plain")
@pytest.mark.parametrize("shape", BWD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_decomposition_is_the_definition(shape, opt):
    data = draw_backward(shape, seed=hash(str((shape, opt))) % 2**32)
    stats = forward_stats(shape, data, opt)
    program = run_backward(shape, opt, data, ReferenceEngine(program=True), stats)
    definition = run_backward(shape, opt, data, ReferenceEngine(), stats)
    assert len(program) == (7 if opt.get("sink") else 6)
    for i, (got, want) in enumerate(zip(program, definition)):
        assert np.isfinite(got).all() and np.abs(want).max() > 0, f"output {i}"
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10, err_msg=f"output {i}")


def numpy_attention_backward(q, k, v, o, d_o, scale):
    """dQ, dK, dV of attention over real values (GQA: kv heads repeated, their gradients summed), with D from the
    given O (the textbook backward)."""
    rep = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, kr) * scale
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    d_v = np.einsum("bhqk,bhqd->bhkd", p, d_o)
    d_p = np.einsum("bhqd,bhkd->bhqk", d_o, vr)
    d_s = scale * p * (d_p - (d_o * o).sum(axis=-1, keepdims=True))
    d_q = np.einsum("bhqk,bhkd->bhqd", d_s, kr)
    d_k = np.einsum("bhqk,bhqd->bhkd", d_s, q)
    b, h_k = k.shape[:2]

    def fold(x):
        return x.reshape(b, h_k, rep, *x.shape[2:]).sum(axis=2)
    return d_q, fold(d_k), fold(d_v)


def test_backward_definition_is_the_attention_gradient_over_the_block_scaled_values():
    """With o the exact forward's O, the gradients are attention's (the _T operands hold the same real values)."""
    shape = (2, 4, 2, 64, 96, 64, 32)
    data = draw_backward(shape, seed=5, consistent=True)
    q, k, v = data["q"][2], data["k"][2], data["v"][2]
    scale = 1 / math.sqrt(shape[5])
    o, stats = numpy_attention(q, k, v, scale)
    data["o_f16"] = o
    d_q, d_k, d_v, amax_dq, amax_dk, amax_dv = run_backward(shape, {}, data, ReferenceEngine(), stats)
    for name, x in (("q", "q_T"), ("k", "k_T"), ("dO", "dO_T")):
        np.testing.assert_allclose(data[x][2], data[name][2], rtol=1e-12)
        assert not np.allclose(data[x][1].sum(), data[name][1].sum())  # quantized differently
    want = numpy_attention_backward(q, k, v, o, data["dO"][2], scale)
    for name, got, ref in zip(("dQ", "dK", "dV"), (d_q, d_k, d_v), want):
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-11, err_msg=name)
    np.testing.assert_allclose([amax_dq.item(), amax_dk.item(), amax_dv.item()], [np.abs(x).max() for x in want],
                               rtol=1e-10)


@needs_mxfp8
def test_planning_meets_the_composite_gate_before_its_dequantize_nodes(monkeypatch):
    """On an H200 the refusal names sdpa_mxfp8 and says Blackwell-only, not block_scale_dequantize's own gate."""
    g, _, _, outs = forward_graph()
    set_outputs(outs)
    g.validate()
    gated = g.session._gated_nodes()
    assert gated[0].spec.method == "sdpa_mxfp8" and {n.op for n in gated[1:]} >= {"block_scale_dequantize"}
    monkeypatch.setattr(device_gates, "compute_capability", lambda device: 90)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"sdpa_mxfp8\(\) \(node 'mx'\).*Blackwell-only"):
        device_gates.check(gated, SimpleNamespace(device=0))


def test_backward_definition_reads_each_operand_where_the_frontend_does():
    """Independent q_T, k_T, dO_T: S from q, k; dP from dO (MX) and v; D from dO_f16 and o_f16; dV from dO_T; dQ
    from k_T; dK from q_T, as numpy computes it here."""
    shape = (1, 2, 1, 64, 64, 32, 32)
    data = draw_backward(shape, seed=9)
    stats = forward_stats(shape, data, {})
    d_q, d_k, d_v, *_ = run_backward(shape, {}, data, ReferenceEngine(), stats)
    real = {n: data[n][2] for n in ("q", "q_T", "k", "k_T", "v", "dO", "dO_T")}
    scale = 1 / math.sqrt(shape[5])
    rep = shape[1] // shape[2]
    k, k_t, v = (np.repeat(real[n], rep, axis=1) for n in ("k", "k_T", "v"))
    s = np.einsum("bhqd,bhkd->bhqk", real["q"], k) * scale
    p = np.exp(s - stats)
    d_row = (data["dO"][2] * data["o_f16"]).sum(axis=-1, keepdims=True)  # dO_f16 is dO's real value here
    d_s = scale * p * (np.einsum("bhqd,bhkd->bhqk", real["dO"], v) - d_row)
    np.testing.assert_allclose(d_v, np.einsum("bhqk,bhqd->bhkd", p, real["dO_T"]).sum(axis=1, keepdims=True),
                               rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(d_q, np.einsum("bhqk,bhkd->bhqd", d_s, k_t), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(d_k, np.einsum("bhqk,bhqd->bhkd", d_s, real["q_T"]).sum(axis=1, keepdims=True),
                               rtol=1e-9, atol=1e-11)
