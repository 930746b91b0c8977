"""Block-scale quantize / dequantize and MoE grouped matmul on the CPU: inference and its refusals, deviceless
lowering against the real cuDNN (what reached the backend: the recorded attributes and tensor descriptors read
back), the device gates, and the float64 references against independent numpy computations (the FP8 / FP4 grids
enumerated from their bit patterns, per-block and per-expert loops)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.errors import NotImplementedOptionError
from cudnn_py.families.quantize.reference import GRIDS, tile_positions
from cudnn_py.plans import device_gates

D = cudnn.data_type
F, H, BF, DBL = D.FLOAT, D.HALF, D.BFLOAT16, D.DOUBLE
F8_128x4 = cudnn.tensor_reordering.F8_128x4
MODE = cudnn.moe_grouped_matmul_mode
RNG = np.random.default_rng(8)
HAS_BLOCK_SCALE = versions.available("CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR")
HAS_MOE = versions.runtime_version() >= 91800
HAS_MOE_BWD = versions.available("CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_BWD_DESCRIPTOR")


# ---- the element grids, enumerated from the bit patterns ----------------------------------------------------------
def _positive_values(exp_bits: int, man_bits: int, bias: int, drop_top: int) -> np.ndarray:
    """Every non-negative finite value of a small float format in code order (``drop_top`` codes at the top are
    NaN / inf)."""
    out = []
    for e in range(2 ** exp_bits):
        for m in range(2 ** man_bits):
            out.append(m / 2 ** man_bits * 2.0 ** (1 - bias) if e == 0 else (1 + m / 2 ** man_bits) * 2.0 ** (e - bias))
    return np.array(out[: len(out) - drop_top])


ENUMERATED = {D.FP8_E4M3: _positive_values(4, 3, 7, 1), D.FP8_E5M2: _positive_values(5, 2, 15, 4),
              D.FP4_E2M1: _positive_values(2, 1, 1, 0)}


def _nearest_even(x: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Round to the nearest listed value, ties to the even code, saturating."""
    a = np.minimum(np.abs(x), values[-1])
    dist = np.abs(a[..., None] - values)
    best = dist.min(axis=-1, keepdims=True)
    tied = np.isclose(dist, best, rtol=0, atol=0)
    codes = np.arange(len(values))
    pick = np.where(tied & (codes % 2 == 0), codes, len(values)).min(axis=-1)
    pick = np.where(pick == len(values), dist.argmin(axis=-1), pick)
    return np.sign(x) * values[pick]


@pytest.mark.parametrize("dt", [D.FP8_E4M3, D.FP8_E5M2, D.FP4_E2M1])
def test_element_grid_matches_the_enumerated_format(dt):
    values = ENUMERATED[dt]
    assert GRIDS[dt].max_normal == values[-1]
    # every grid value, every midpoint (the ties), random values across the range and beyond it (saturation)
    mids = (values[1:] + values[:-1]) / 2
    x = np.concatenate([values, mids, RNG.uniform(0, values[-1] * 1.5, 4000), [values[1] / 3]])
    x = np.concatenate([x, -x])
    np.testing.assert_array_equal(GRIDS[dt].round(x), _nearest_even(x, values))


# ---- quantize: inference and lowering ------------------------------------------------------------------------------
def _quantize_graph(dims, block=32, axis=None, transpose=False, reorder=True, y_type=D.FP8_E4M3,
                    scale_type=D.FP8_E8M0, **graph):
    g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F, **graph)
    x = g.tensor(dims, name="x", data_type=BF)
    y, s = g.block_scale_quantize(x, block, axis, transpose, name="q")
    y.set_output(True).set_data_type(y_type)
    s.set_output(True).set_data_type(scale_type)
    if reorder:
        s.set_reordering_type(F8_128x4)
    return g, x, y, s


def test_quantize_infers_y_and_the_tile_padded_scale():
    g, x, y, s = _quantize_graph([200, 96], reorder=False)
    g.validate_ir()
    assert (y.get_dim(), y.get_stride(), s.get_dim(), s.get_stride()) == ([200, 96], [96, 1], [200, 3], [3, 1])
    assert [str(t.name) for t in (y, s)] == ["q::Y", "q::scale"]
    g, x, y, s = _quantize_graph([200, 96])  # F8_128x4: rows to a multiple of 128, blocks to a multiple of 4
    g.validate_ir()
    assert s.get_dim() == [256, 4]
    g, x, y, s = _quantize_graph([2, 128, 64], axis=1, transpose=True)  # blocks down the rows, rows fastest
    g.validate_ir()
    assert y.get_stride() == [8192, 1, 128] and s.get_dim() == [2, 4, 128] and s.get_stride() == [512, 1, 4]


@pytest.mark.parametrize("kwargs, match", [
    ({"dims": [128, 48]}, r"dim 1 \(48\) is not a multiple of block_size 32"),
    ({"dims": [128, 64], "axis": 2}, r"axis 2 is outside \[0, 1\]"),
    ({"dims": [128, 64, 64], "axis": 0}, "F8_128x4 scale needs the block axis among the last two"),
])
def test_quantize_shape_errors_name_the_node_and_tensor(kwargs, match):
    dims = kwargs.pop("dims")
    g, *_ = _quantize_graph(dims, **kwargs)
    with pytest.raises(ValueError, match=r"block_scale_quantize node 'q': tensor 'x'.*" + match):
        g.validate_ir()


def test_quantize_argument_checks():
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([128, 64], name="x")
    for bad, exc in ((0, ValueError), (True, TypeError), (2.5, TypeError)):
        with pytest.raises(exc, match="block_scale_quantize.*block_size"):
            g.block_scale_quantize(x, bad)
    with pytest.raises(TypeError, match="transpose"):
        g.block_scale_quantize(x, 32, None, 1)


@pytest.mark.skipif(not HAS_BLOCK_SCALE, reason="needs cuDNN >= 9.7")
def test_quantize_lowers_deviceless():
    g, x, y, s = _quantize_graph([256, 128])
    g.validate()  # deviceless: cuDNN finalizes the tensors, the op and the operation graph
    (op,) = g.session.lowered.operations
    assert op.kind.name == "CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR"
    attrs = op.attributes
    assert attrs["CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_BLOCK_SIZE"] == 32
    assert attrs["CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_MATH_PREC"] == "CUDNN_DATA_FLOAT"
    scale_desc = g.session.lowered.tensors.by_uid[s.uid]
    assert scale_desc.get("CUDNN_ATTR_TENSOR_REORDERING_MODE") == 3  # F8_128x4
    assert scale_desc.get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [1, 256, 4]
    assert scale_desc.get("CUDNN_ATTR_TENSOR_DATA_TYPE").name == "CUDNN_DATA_FP8_E8M0"
    g, *_ = _quantize_graph([128, 128], block=16, y_type=D.FP4_E2M1, scale_type=D.FP8_E4M3)  # NVFP4
    g.validate()


@pytest.mark.skipif(not HAS_BLOCK_SCALE, reason="needs cuDNN >= 9.7")
def test_quantize_without_a_swizzled_scale_is_refused_with_a_hint():
    g, *_ = _quantize_graph([128, 64], reorder=False)
    with pytest.raises(RuntimeError, match=r"(?s)lowering block_scale_quantize node 'q'.*hint: .*F8_128x4"):
        g.validate()


# ---- dequantize ---------------------------------------------------------------------------------------------------
def _dequantize_matmul_graph(m=128, k=64, n=32, negative=False, reorder=True):
    g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    a = g.tensor([1, m, k], data_type=D.FP8_E4M3, name="a")
    b = g.tensor([1, k, n], stride=[k * n, 1, k], data_type=D.FP8_E4M3, name="b")
    pad = (lambda d, q: -(-d // q) * q) if reorder else (lambda d, q: d)
    sa = g.tensor([1, pad(m, 128), pad(k // 32, 4)], data_type=D.FP8_E8M0, name="sa")
    sb = g.tensor([1, pad(k // 32, 4), pad(n, 128)], stride=[pad(k // 32, 4) * pad(n, 128), 1, pad(k // 32, 4)],
                  data_type=D.FP8_E8M0, name="sb")
    if reorder:
        sa.set_reordering_type(F8_128x4)
        sb.set_reordering_type(F8_128x4)
    da = g.block_scale_dequantize(a, sa, [1, 32], negative, name="da")
    db = g.block_scale_dequantize(b, sb, [32, 1], name="db")
    c = g.matmul(da, db, name="mm").set_output(True).set_data_type(BF)
    return g, (a, b, sa, sb, da, db, c)


def test_dequantize_checks_its_descale_and_keeps_y_virtual():
    g, (a, b, sa, sb, da, db, c) = _dequantize_matmul_graph(reorder=False)
    g.validate_ir()
    assert da.get_dim() == [1, 128, 64] and da.get_data_type() is F and da.is_virtual
    g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([1, 128, 64], data_type=D.FP8_E4M3, name="x")
    g.block_scale_dequantize(x, g.tensor([1, 128, 4], data_type=D.FP8_E8M0, name="s"), [1, 32], name="dq")
    with pytest.raises(ValueError, match=r"block_scale_dequantize node 'dq': tensor 's'.*expected \[1, 128, 2\]"):
        g.validate_ir()
    g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([1, 128, 64], data_type=D.FP8_E4M3, name="x")
    g.block_scale_dequantize(x, g.tensor([1, 128, 2], data_type=D.FP8_E8M0, name="s"), [1, 32], name="dq"
                             ).set_output(True)
    with pytest.raises(ValueError, match="dq.*must stay virtual"):
        g.validate_ir()
    with pytest.raises(ValueError, match="block_size"):
        g.block_scale_dequantize(x, x, [])


@pytest.mark.skipif(not HAS_BLOCK_SCALE, reason="needs cuDNN >= 9.7")
@pytest.mark.parametrize("negative", [False, True])
def test_dequantize_matmul_lowers_deviceless(negative):
    g, _ = _dequantize_matmul_graph(negative=negative)
    g.validate()
    ops = g.session.lowered.operations
    assert [o.kind.name for o in ops] == ["CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR"] * 2 + [
        "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR"]
    assert ops[0].attributes["CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE"] == [1, 32]
    assert ops[1].attributes["CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE"] == [32, 1]
    # cuDNN >= 9.14: NEG_SCALE is always set, as the frontend does
    assert ops[0].attributes["CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_NEG_SCALE"] is negative


def test_negative_scale_before_9_14_is_refused_not_dropped(monkeypatch):
    monkeypatch.setattr(versions, "runtime_version", lambda: 91300)
    g, _ = _dequantize_matmul_graph(negative=True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"is_negative_scale=True.*needs cuDNN 9\.14\.0"):
        g.validate()


def test_block_scale_gate_names_the_version(monkeypatch):
    monkeypatch.setattr(versions, "runtime_version", lambda: 90600)
    g, *_ = _quantize_graph([128, 64])
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"block_scale_quantize\(\) \(node 'q'\).*9\.7\.0"):
        g.validate()


# ---- the references -----------------------------------------------------------------------------------------------
def _mx_blocks_by_loop(x: np.ndarray, block: int, element, emax: int):
    """MX quantization along the last axis, one block at a time."""
    y, scales = np.zeros_like(x), np.zeros(x.shape[:-1] + (x.shape[-1] // block,))
    for idx in np.ndindex(x.shape[:-1]):
        for j in range(x.shape[-1] // block):
            v = x[idx][j * block:(j + 1) * block]
            amax = np.abs(v).max()
            scale = 2.0 ** (np.floor(np.log2(amax)) - emax) if amax > 0 else 2.0 ** -127
            scales[idx + (j,)] = scale
            y[idx + (slice(j * block, (j + 1) * block),)] = _nearest_even(v / scale, ENUMERATED[element])
    return y, scales


@pytest.mark.parametrize("element, emax", [(D.FP8_E4M3, 8), (D.FP8_E5M2, 15), (D.FP4_E2M1, 2)])
def test_quantize_reference_is_mx_block_scaling(element, emax):
    x = RNG.standard_normal((6, 64)) * np.exp2(RNG.integers(-8, 8, (6, 1)))
    x[2, :32] = 0.0  # an all-zero block: the smallest scale, zeros out
    g = cudnn.pygraph(io_data_type=DBL, intermediate_data_type=DBL, compute_data_type=F, backends=[ReferenceEngine()])
    X = g.tensor([6, 64], name="x")
    y, s = g.block_scale_quantize(X, 32, name="q")
    y.set_output(True).set_data_type(element)
    s.set_output(True).set_data_type(D.FP8_E8M0)
    g.validate_ir()
    yb, sb = np.full((6, 64), np.nan), np.full((6, 2), np.nan)
    g.execute({X: x, y: yb, s: sb})
    want_y, want_s = _mx_blocks_by_loop(x, 32, element, emax)
    np.testing.assert_array_equal(sb, want_s)
    np.testing.assert_array_equal(yb, want_y)
    # dequantized, the error is at most half a step of the element grid (no block saturates: amax < 2^(emax+1))
    assert np.all(np.abs(yb * np.repeat(sb, 32, axis=1) - x) <= np.abs(x) * 2.0 ** -(GRIDS[element].mantissa_bits)
                  + np.repeat(sb, 32, axis=1) * ENUMERATED[element][1])


def test_nvfp4_reference_scale_is_amax_over_six_on_the_e4m3_grid():
    x = RNG.standard_normal((2, 32))
    g = cudnn.pygraph(io_data_type=DBL, compute_data_type=F, backends=[ReferenceEngine()])
    X = g.tensor([2, 32], name="x")
    y, s = g.block_scale_quantize(X, 16, name="q")
    y.set_output(True).set_data_type(D.FP4_E2M1)
    s.set_output(True).set_data_type(D.FP8_E4M3)
    g.validate_ir()
    yb, sb = np.zeros((2, 32)), np.zeros((2, 2))
    g.execute({X: x, y: yb, s: sb})
    amax = np.abs(x.reshape(2, 2, 16)).max(axis=2)
    np.testing.assert_array_equal(sb, _nearest_even(amax / 6, ENUMERATED[D.FP8_E4M3]))
    np.testing.assert_array_equal(yb, _nearest_even(x / np.repeat(sb, 16, axis=1), ENUMERATED[D.FP4_E2M1]))


def test_f8_128x4_tile_layout():
    pos = tile_positions(256, 8)
    assert sorted(pos.reshape(-1)) == list(range(256 * 8))  # a permutation
    assert pos[0, 0] == 0 and pos[0, 1] == 1 and pos[1, 0] == 16 and pos[32, 0] == 4 and pos[33, 1] == 21
    assert pos[0, 4] == 512 and pos[128, 0] == 1024  # tiles: row tiles major, 4-block tiles minor


def test_quantize_then_dequantize_matmul_through_the_swizzled_scales():
    """quantize writes its scales in the F8_128x4 layout and dequantize reads them back: the reference matmul
    of the dequantized operands equals the matmul of Y * scale computed here."""
    m, k, n = 130, 64, 20  # rows not a multiple of 128, blocks not of 4: padding on both axes
    a, b = RNG.standard_normal((m, k)), RNG.standard_normal((k, n))
    g = cudnn.pygraph(io_data_type=DBL, intermediate_data_type=DBL, compute_data_type=F, backends=[ReferenceEngine()])
    A, B = g.tensor([m, k], name="a"), g.tensor([k, n], name="b")
    qa, sa = g.block_scale_quantize(A, 32, name="qa")
    qb, sb = g.block_scale_quantize(B, 32, 0, True, name="qb")  # blocks down K, K fastest
    for t in (qa, qb):
        t.set_output(True).set_data_type(D.FP8_E4M3)
    for t in (sa, sb):
        t.set_output(True).set_data_type(D.FP8_E8M0).set_reordering_type(F8_128x4)
    g.validate_ir()
    assert sa.get_dim() == [256, 4] and sb.get_dim() == [4, 128]
    bufs = {t: np.full(tuple(t.get_dim()), np.nan) for t in (qa, sa, qb, sb)}
    g.execute({A: a, B: b, **bufs})
    want_qa, want_sa = _mx_blocks_by_loop(a, 32, D.FP8_E4M3, 8)
    want_qbt, want_sbt = _mx_blocks_by_loop(b.T.copy(), 32, D.FP8_E4M3, 8)
    np.testing.assert_array_equal(bufs[qa], want_qa)
    np.testing.assert_array_equal(bufs[qb], want_qbt.T)
    # the stored scales are the loop's, at their tile positions
    flat = bufs[sa].reshape(-1)
    np.testing.assert_array_equal(flat[tile_positions(256, 4)[:m, :2]], want_sa)

    g2 = cudnn.pygraph(io_data_type=D.FP8_E4M3, intermediate_data_type=DBL, compute_data_type=F,
                       backends=[ReferenceEngine()])
    QA, QB = g2.tensor([m, k], name="qa"), g2.tensor([k, n], stride=[1, k], name="qb")
    SA = g2.tensor([256, 4], data_type=D.FP8_E8M0, name="sa").set_reordering_type(F8_128x4)
    SB = g2.tensor([4, 128], stride=[1, 4], data_type=D.FP8_E8M0, name="sb").set_reordering_type(F8_128x4)
    C = g2.matmul(g2.block_scale_dequantize(QA, SA, [1, 32]), g2.block_scale_dequantize(QB, SB, [32, 1])
                  ).set_output(True).set_data_type(DBL)
    g2.validate_ir()
    out = np.full((m, n), np.nan)
    g2.execute({QA: bufs[qa], QB: bufs[qb], SA: bufs[sa], SB: bufs[sb], C: out})
    np.testing.assert_allclose(out, (want_qa * np.repeat(want_sa, 32, 1)) @ (want_qbt * np.repeat(want_sbt, 32, 1)).T,
                               rtol=1e-12, atol=1e-12)


def test_reference_refuses_the_negative_scale():
    g = cudnn.pygraph(io_data_type=D.FP8_E4M3, intermediate_data_type=DBL, compute_data_type=F,
                      backends=[ReferenceEngine()])
    x, s = g.tensor([128, 64], name="x"), g.tensor([128, 2], data_type=D.FP8_E8M0, name="s")
    g.matmul(g.block_scale_dequantize(x, s, [1, 32], True, name="dq"), g.tensor([64, 8], name="b")
             ).set_output(True).set_data_type(DBL)
    g.validate_ir()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"reference engine: .*is_negative_scale=True.*'dq'"):
        ReferenceEngine().check_support(g)


# ---- MoE ----------------------------------------------------------------------------------------------------------
def _moe_graph(mode=MODE.NONE, t=256, k=64, n=32, e=4, m=None, top_k=0, with_ks=None, **kw):
    g = cudnn.pygraph(io_data_type=H, compute_data_type=H, **kw)
    tok, w = g.tensor([1, t, k], name="tok"), g.tensor([e, k, n], name="w")
    off = g.tensor([e, 1, 1], data_type=D.INT32, name="off")
    idx = g.tensor([1, m or t, 1], data_type=D.INT32, name="idx") if mode is not MODE.NONE else None
    ks = g.tensor([1, t, 1], data_type=D.INT32, name="ks") if (with_ks if with_ks is not None else mode is MODE.SCATTER) \
        else None
    out = g.moe_grouped_matmul(tok, w, off, idx, ks, mode, top_k=top_k, name="moe")
    out.set_output(True)
    return g, out


def test_moe_signature_and_defaults():
    sig = inspect.signature(cudnn.pygraph.moe_grouped_matmul)
    # the official wrapper shows (*args, name="", ...); cudnn_py spells the parameters out (the stub's first form)
    assert list(sig.parameters)[1:4] == ["token", "weight", "first_token_offset"]
    assert sig.parameters["name"].default == "" and sig.parameters["top_k"].default == 0
    g, out = _moe_graph()
    g.validate_ir()
    assert out.name == "moe::Output" and out.get_dim() == [1, 256, 32] and out.get_stride() == [8192, 32, 1]
    # the classic default compute type is FLOAT, whatever the graph's
    assert g.nodes[0].params["compute_data_type"] is F
    g = cudnn.pygraph(io_data_type=H)
    tok, w, off = g.tensor([1, 8, 4], name="t"), g.tensor([2, 4, 3], name="w"), g.tensor([2, 1, 1], data_type=D.INT32)
    # positional in the classic order: ..., mode, compute_data_type, top_k, name
    g.moe_grouped_matmul(tok, w, off, None, None, MODE.NONE, H, 0, "named").set_output(True)
    g.validate_ir()
    assert g.nodes[0].name == "named" and g.nodes[0].params["compute_data_type"] is H


@pytest.mark.parametrize("build, match", [
    (lambda: _moe_graph(MODE.GATHER, m=300), r"token_index rows \(300\) to be a multiple of the token rows \(256\)"),
    (lambda: _moe_graph(MODE.SCATTER, top_k=0), "SCATTER mode needs token_ks and top_k > 0"),
    (lambda: _moe_graph(MODE.NONE, with_ks=True), "token_ks and top_k are only used in SCATTER mode"),
    (lambda: _moe_graph(MODE.GATHER, top_k=2), "token_ks and top_k are only used in SCATTER mode"),
    (lambda: _moe_graph(MODE.SCATTER, t=255, top_k=2), r"the 255 token rows must be a multiple of top_k = 2"),
])
def test_moe_refuses_what_a_mode_would_not_lower(build, match):
    g, _ = build()
    with pytest.raises(ValueError, match="moe_grouped_matmul node 'moe'.*" + match):
        g.validate_ir()


@pytest.mark.parametrize("which", ["off", "idx", "ks"])
def test_moe_index_inputs_must_be_int32(which):
    g, _ = _moe_graph(MODE.SCATTER, top_k=2)
    {t.name: t for t in g.tensors.values()}[which].set_data_type(F)
    with pytest.raises(ValueError, match=rf"moe_grouped_matmul node 'moe'.*'{which}'.*must be INT32, got FLOAT"):
        g.validate_ir()


def test_moe_shape_errors():
    g = cudnn.pygraph(io_data_type=H)
    tok, w = g.tensor([1, 8, 4], name="t"), g.tensor([2, 5, 3], name="w")
    g.moe_grouped_matmul(tok, w, g.tensor([2, 1, 1], data_type=D.INT32, name="off"), name="m1")
    with pytest.raises(ValueError, match=r"m1.*'w'.*do not take tokens of width 4"):
        g.validate_ir()
    g = cudnn.pygraph(io_data_type=H)
    g.moe_grouped_matmul(g.tensor([1, 8, 4]), g.tensor([2, 4, 3]), g.tensor([2], data_type=D.INT32, name="off"),
                         name="m2")
    with pytest.raises(ValueError, match=r"m2.*'off'.*must be one offset per expert, \[2, 1, 1\]"):
        g.validate_ir()
    g = cudnn.pygraph(io_data_type=H)
    g.moe_grouped_matmul(g.tensor([2, 8, 4], name="t"), g.tensor([2, 4, 3]), g.tensor([2, 1, 1], data_type=D.INT32),
                         name="m3")
    with pytest.raises(ValueError, match=r"m3.*'t'.*must be \[1, T, K\]"):
        g.validate_ir()
    g = cudnn.pygraph(io_data_type=H)
    t = g.tensor([1, 8, 4])
    with pytest.raises(NotImplementedOptionError, match="COMBINE"):
        g.moe_grouped_matmul(t, g.tensor([2, 4, 3]), g.tensor([2, 1, 1]), mode=MODE.COMBINE)
    with pytest.raises(TypeError, match="mode"):
        g.moe_grouped_matmul(t, g.tensor([2, 4, 3]), g.tensor([2, 1, 1]), mode=1)


@pytest.mark.skipif(not HAS_MOE, reason="needs cuDNN >= 9.18")
@pytest.mark.parametrize("mode", [MODE.NONE, MODE.GATHER, MODE.SCATTER])
def test_moe_lowers_deviceless(mode):
    g, out = _moe_graph(mode, m=512 if mode is MODE.GATHER else None, top_k=2 if mode is MODE.SCATTER else 0)
    g.validate()
    (op,) = g.session.lowered.operations
    attrs = op.attributes
    prefix = "CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_"
    assert attrs[prefix + "MODE"] == f"CUDNN_MOE_GROUPED_MATMUL_MODE_{mode.name}"
    assert attrs[prefix + "MATH_PREC"] == "CUDNN_DATA_FLOAT"  # the classic default, over the graph's HALF
    assert (prefix + "TOKEN_INDEX_DESC" in attrs) is (mode is not MODE.NONE)
    assert (prefix + "TOKEN_KS_DESC" in attrs) is (mode is MODE.SCATTER)
    assert attrs.get(prefix + "TOP_K") == (2 if mode is MODE.SCATTER else None)
    assert g.session.lowered.tensors.by_uid[out.uid].get("CUDNN_ATTR_TENSOR_DIMENSIONS") == \
        [1, 512 if mode is MODE.GATHER else 256, 32]


def test_moe_gate_is_the_frontends_9_18(monkeypatch):
    monkeypatch.setattr(versions, "runtime_version", lambda: 91700)  # has the descriptor (9.15), not 9.18
    g, _ = _moe_graph()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"moe_grouped_matmul\(\) \(node 'moe'\).*9\.18\.0"):
        g.validate()


def _bwd_graph(t=64, k=16, n=8, e=3):
    g = cudnn.pygraph(io_data_type=H, compute_data_type=H)
    dout, tok = g.tensor([1, t, n], name="dout"), g.tensor([1, t, k], name="tok")
    off = g.tensor([e, 1, 1], data_type=D.INT32, name="off")
    dw = g.moe_grouped_matmul_bwd(dout, tok, off, name="bwd").set_output(True)
    return g, dw


def test_moe_bwd_infers_a_column_major_dweight():
    g, dw = _bwd_graph()
    g.validate_ir()
    assert dw.name == "bwd::DWeight" and dw.get_dim() == [3, 16, 8] and dw.get_stride() == [128, 1, 16]
    assert g.nodes[0].params["compute_data_type"] is F
    if HAS_MOE_BWD:
        g.validate()
        (op,) = g.session.lowered.operations
        assert op.kind.name == "CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_BWD_DESCRIPTOR"
        assert op.attributes["CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_BWD_MATH_PREC"] == "CUDNN_DATA_FLOAT"
    g = cudnn.pygraph(io_data_type=H)
    g.moe_grouped_matmul_bwd(g.tensor([1, 60, 8], name="dout"), g.tensor([1, 64, 16]), g.tensor([3, 1, 1]),
                             name="bwd")
    with pytest.raises(ValueError, match=r"bwd.*'dout'.*60 rows, token 64"):
        g.validate_ir()


def _offsets(e: int, rows: int) -> np.ndarray:
    cuts = np.sort(RNG.choice(np.arange(1, rows), e - 1, replace=False))
    cuts[0] = cuts[1]  # an expert with no rows
    return np.concatenate([[0], cuts]).astype(np.int32).reshape(e, 1, 1)


@pytest.mark.parametrize("mode", [MODE.NONE, MODE.GATHER])
def test_moe_reference_per_expert(mode):
    t, k, n, e, m = 24, 8, 5, 4, 48
    tok, w = RNG.standard_normal((1, t, k)), RNG.standard_normal((e, k, n))
    rows = m if mode is MODE.GATHER else t
    off = _offsets(e, rows)
    idx = RNG.integers(0, t, (1, m, 1)).astype(np.int32)
    g = cudnn.pygraph(io_data_type=DBL, backends=[ReferenceEngine()])
    T, W = g.tensor([1, t, k], name="tok"), g.tensor([e, k, n], name="w")
    O = g.tensor([e, 1, 1], data_type=D.INT32, name="off")
    I = g.tensor([1, m, 1], data_type=D.INT32, name="idx") if mode is MODE.GATHER else None
    out = g.moe_grouped_matmul(T, W, O, I, mode=mode).set_output(True)
    g.validate_ir()
    buf = np.full((1, rows, n), np.nan)
    g.execute({T: tok, W: w, O: off, **({I: idx} if I is not None else {}), out: buf})
    want = np.zeros((rows, n))
    starts = list(off.reshape(-1)) + [rows]
    for r in range(rows):
        expert = max(j for j in range(e) if starts[j] <= r)  # the last expert whose range has begun
        src = idx.reshape(-1)[r] if mode is MODE.GATHER else r
        want[r] = tok[0, src] @ w[expert]
    np.testing.assert_allclose(buf[0], want, rtol=1e-13, atol=1e-13)


def test_moe_bwd_reference_sums_outer_products():
    t, k, n, e = 20, 6, 4, 3
    tok, dout = RNG.standard_normal((1, t, k)), RNG.standard_normal((1, t, n))
    off = _offsets(e, t)
    g = cudnn.pygraph(io_data_type=DBL, backends=[ReferenceEngine()])
    T, DO = g.tensor([1, t, k], name="tok"), g.tensor([1, t, n], name="dout")
    O = g.tensor([e, 1, 1], data_type=D.INT32, name="off")
    dw = g.moe_grouped_matmul_bwd(DO, T, O).set_output(True)
    g.validate_ir()
    buf = np.full((e, k, n), np.nan)
    g.execute({T: tok, DO: dout, O: off, dw: buf})
    starts = list(off.reshape(-1)) + [t]
    want = np.zeros((e, k, n))
    for j in range(e):
        for r in range(starts[j], starts[j + 1]):
            want[j] += np.outer(tok[0, r], dout[0, r])
    np.testing.assert_allclose(buf, want, rtol=1e-13, atol=1e-13)


def test_moe_reference_refuses_bad_offsets():
    g = cudnn.pygraph(io_data_type=DBL, backends=[ReferenceEngine()])
    T, W = g.tensor([1, 8, 4], name="tok"), g.tensor([2, 4, 3], name="w")
    O = g.tensor([2, 1, 1], data_type=D.INT32, name="off")
    out = g.moe_grouped_matmul(T, W, O, name="moe").set_output(True)
    g.validate_ir()
    bufs = {T: np.ones((1, 8, 4)), W: np.ones((2, 4, 3)), out: np.zeros((1, 8, 3))}
    with pytest.raises(ValueError, match=r"moe_grouped_matmul node 'moe': first_token_offset \[0, 9\].*at most the 8 rows"):
        g.execute({**bufs, O: np.array([0, 9]).reshape(2, 1, 1)})


def _scatter_reference_graph(t, k, n, e, top_k):
    g = cudnn.pygraph(io_data_type=DBL, backends=[ReferenceEngine()])
    T, W = g.tensor([1, t, k], name="tok"), g.tensor([e, k, n], name="w")
    O, I, KS = (g.tensor([*dims, 1], data_type=D.INT32, name=nm) for dims, nm in
                (([e, 1], "off"), ([1, t], "idx"), ([1, t], "ks")))
    out = g.moe_grouped_matmul(T, W, O, I, KS, MODE.SCATTER, top_k=top_k, name="moe").set_output(True)
    g.validate_ir()
    return g, (T, W, O, I, KS, out)


def test_moe_reference_scatter_places_rows_by_token_and_slot():
    t, k, n, e, top_k = 24, 8, 5, 4, 3
    tok, w, off = RNG.standard_normal((1, t, k)), RNG.standard_normal((e, k, n)), _offsets(e, t)
    dest = RNG.permutation(t)  # row r (sorted by expert) belongs to token dest // top_k, choice dest % top_k
    idx, ks = (x.astype(np.int32).reshape(1, t, 1) for x in (dest // top_k, dest % top_k))
    g, (T, W, O, I, KS, out) = _scatter_reference_graph(t, k, n, e, top_k)
    buf = np.full((1, t, n), np.nan)
    g.execute({T: tok, W: w, O: off, I: idx, KS: ks, out: buf})
    starts = list(off.reshape(-1)) + [t]
    want = np.full((t, n), np.nan)
    for r in range(t):
        expert = max(j for j in range(e) if starts[j] <= r)
        want[idx[0, r, 0] * top_k + ks[0, r, 0]] = tok[0, r] @ w[expert]
    np.testing.assert_allclose(buf[0], want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("idx, ks, match", [
    ([0, 0, 1, 1], [0, 0, 0, 1], "must reach each of the 4 output rows once"),  # two rows in slot 0
    ([0, 2, 1, 1], [0, 1, 0, 1], r"token_index values must be integers in \[0, 2\)"),
    ([0, 0, 1, 1], [0, 2, 0, 1], r"token_ks values must be integers in \[0, 2\)"),
])
def test_moe_reference_scatter_refuses_unspecified_slots(idx, ks, match):
    g, (T, W, O, I, KS, out) = _scatter_reference_graph(4, 3, 2, 2, 2)
    feeds = {T: np.ones((1, 4, 3)), W: np.ones((2, 3, 2)), O: np.array([0, 2]).reshape(2, 1, 1),
             I: np.array(idx).reshape(1, 4, 1), KS: np.array(ks).reshape(1, 4, 1), out: np.zeros((1, 4, 2))}
    with pytest.raises(ValueError, match="moe_grouped_matmul node 'moe': .*" + match):
        g.execute(feeds)


# ---- device gates -------------------------------------------------------------------------------------------------
class _Node:
    def __init__(self, spec, name="n"):
        self.spec, self.name = spec, name


def test_device_gates_name_what_is_needed(monkeypatch):
    from cudnn_py.ir.spec import SPECS

    monkeypatch.setattr(device_gates, "compute_capability", lambda device: 90)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError,
                       match=r"block_scale_quantize\(\) \(node 'q'\) needs a GPU of compute capability 10\.0 or newer.*"
                             r"device 0 is 9\.0"):
        device_gates.check([_Node(SPECS["block_scale_quantize"], "q")], None)
    device_gates.check([_Node(SPECS["moe_grouped_matmul"])], None)  # no gate for the forward
    monkeypatch.setattr(device_gates, "compute_capability", lambda device: 100)
    device_gates.check([_Node(SPECS["block_scale_dequantize"])], None)
    monkeypatch.setattr(device_gates, "cublaslt_version", lambda: 120903)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"needs cuBLASLt 13\.5\.0 or newer.*12\.9\.3"):
        device_gates.check([_Node(SPECS["moe_grouped_matmul_bwd"])], None)
    monkeypatch.setattr(device_gates, "cublaslt_version", lambda: 0)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="none could be loaded"):
        device_gates.check([_Node(SPECS["moe_grouped_matmul_bwd"])], None)


def test_cublaslt_probe_does_not_crash():
    device_gates.cublaslt_version.cache_clear()
    v = device_gates.cublaslt_version()
    assert isinstance(v, int) and v >= 0


def test_planning_checks_the_device_gates_before_the_operation_graph_meets_the_gpu(monkeypatch):
    from cudnn_py.plans.session import PlanningSession

    if not HAS_BLOCK_SCALE:
        pytest.skip("needs cuDNN >= 9.7")
    g, *_ = _quantize_graph([128, 64])
    g.validate()  # deviceless: no gate yet
    monkeypatch.setattr(PlanningSession, "planning_handle", lambda self: 0xDEAD)  # as if a GPU were there
    monkeypatch.setattr(device_gates, "compute_capability", lambda device: 90)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"node 'q'\) needs a GPU of compute capability 10\.0"):
        g.build_operation_graph()
