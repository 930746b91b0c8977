"""GPU: block-scale quantize / dequantize (MXFP8) and MoE grouped matmul against the float64 reference engine.

Block scaling has cuDNN engines only on Blackwell (compute capability 10.x): on any other GPU the tests assert the
clear refusal (a cudnnGraphNotSupportedError naming the compute capability) and are reported skipped with it. The
MoE grouped matmul may or may not be supported by the device's cuDNN: the test checks the numbers when it builds,
and is reported xfailed with cuDNN's refusal otherwise (tests/support/refusals.py: a refusal is never a pass). A
test that computed prints one ``OUTCOME:`` line with its error (run with ``-s`` or ``-rA`` to see them)."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.families.quantize.reference import tile_positions
from cudnn_py.plans.device_gates import compute_capability
from tests.support.refusals import expect_refusal, skip_refused, xfail_refused

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
D = cudnn.data_type
F8_128x4 = cudnn.tensor_reordering.F8_128x4
MODE = cudnn.moe_grouped_matmul_mode
HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]


def cc() -> int:
    return compute_capability(torch.cuda.current_device())


def outcome(text: str) -> None:
    print(f"\nOUTCOME: {text}")


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    assert np.isfinite(out).all(), "not every element was written"
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def poisoned(t, dtype):
    """NaN-filled device memory laid out as graph tensor ``t`` (E8M0 has a NaN too: 0xFF)."""
    dims, strides = tuple(t.get_dim()), tuple(t.get_stride())
    size = 1 + sum((d - 1) * st for d, st in zip(dims, strides))
    return torch.full((size,), float("nan"), device="cuda", dtype=torch.float32).to(dtype).as_strided(dims, strides)


def host(t) -> np.ndarray:
    return t.float().cpu().numpy().astype(np.float64)


def expect_block_scale_refusal(build, what: str) -> None:
    """Below compute capability 10.0 building must be refused clearly, by the device gate: reported skipped."""
    expect_refusal(build, r"compute capability 10\.0", f"{what} (Blackwell only)")


def _quantize_graph(io_type, backends=None):
    g = cudnn.pygraph(io_data_type=io_type, intermediate_data_type=D.FLOAT, compute_data_type=D.FLOAT,
                      **({"backends": backends} if backends else {}))
    X = g.tensor([256, 128], name="x")
    Y, S = g.block_scale_quantize(X, 32, name="q")
    Y.set_output(True).set_data_type(D.FP8_E4M3)
    S.set_output(True).set_data_type(D.FP8_E8M0).set_reordering_type(F8_128x4)
    return g, X, Y, S


def test_block_scale_quantize_mxfp8():
    x = (torch.randn(256, 128, device="cuda") * torch.exp2(torch.randint(-6, 6, (256, 1), device="cuda"))).to(
        torch.bfloat16)
    g, X, Y, S = _quantize_graph(D.BFLOAT16)
    if cc() < 100:  # validate (deviceless) and build: the refusal may come from neither as anything else
        expect_block_scale_refusal(lambda: (g.validate(), g.build(HEUR)), "block_scale_quantize")
    g.build(HEUR)
    y, s = poisoned(Y, torch.float8_e4m3fn), poisoned(S, torch.float8_e8m0fnu)
    g.execute({X: x, Y: y, S: s}, None)
    torch.cuda.synchronize()
    ref_g, RX, RY, RS = _quantize_graph(D.DOUBLE, [ReferenceEngine()])
    ref_g.validate_ir()
    ry, rs = np.full((256, 128), np.nan), np.full(tuple(S.get_dim()), np.nan)
    ref_g.execute({RX: host(x), RY: ry, RS: rs})
    valid = tile_positions(256, 4)[:, :4].reshape(-1)  # 256 rows, 128/32 = 4 blocks: no padding here
    scale_err = rel_err(host(s).reshape(-1)[valid], rs.reshape(-1)[valid])
    y_err = rel_err(host(y), ry)
    outcome(f"computed on compute capability {cc() / 10:.1f}: scale rel err {scale_err:.2e}, Y rel err {y_err:.2e}")
    assert scale_err == 0.0, "E8M0 scales differ from floor(log2 amax) - 8 (the OCP MX rule)"
    assert y_err < 1e-2


def test_block_scale_dequantize_matmul_mxfp8():
    m, k, n = 128, 64, 128
    gen = np.random.default_rng(11)
    # operands on the FP8 grid with their MX scales, made by the reference quantizer from random data
    qg = cudnn.pygraph(io_data_type=D.DOUBLE, compute_data_type=D.FLOAT, backends=[ReferenceEngine()])
    A, B = qg.tensor([m, k], name="a"), qg.tensor([n, k], name="bt")
    qa, sa = qg.block_scale_quantize(A, 32)
    qb, sb = qg.block_scale_quantize(B, 32)
    for t in (qa, qb):
        t.set_output(True).set_data_type(D.FP8_E4M3)
    for t in (sa, sb):
        t.set_output(True).set_data_type(D.FP8_E8M0).set_reordering_type(F8_128x4)
    qg.validate_ir()
    bufs = {t: np.full(tuple(t.get_dim()), np.nan) for t in (qa, sa, qb, sb)}
    qg.execute({A: gen.standard_normal((m, k)), B: gen.standard_normal((n, k)), **bufs})

    g = cudnn.pygraph(io_data_type=D.FP8_E4M3, intermediate_data_type=D.FLOAT, compute_data_type=D.FLOAT)
    QA = g.tensor([1, m, k], name="qa")
    QB = g.tensor([1, k, n], stride=[k * n, 1, k], name="qb")  # B stored as Bᵀ rows: K fastest
    SA = g.tensor([1, m, 4], data_type=D.FP8_E8M0, name="sa").set_reordering_type(F8_128x4)
    SB = g.tensor([1, 4, n], stride=[4 * n, 1, 4], data_type=D.FP8_E8M0, name="sb").set_reordering_type(F8_128x4)
    C = g.matmul(g.block_scale_dequantize(QA, SA, [1, 32]), g.block_scale_dequantize(QB, SB, [32, 1]))
    C.set_output(True).set_data_type(D.BFLOAT16)
    if cc() < 100:
        expect_block_scale_refusal(lambda: (g.validate(), g.build(HEUR)), "block_scale_dequantize + matmul")
    g.build(HEUR)
    dev = {t: torch.from_numpy(bufs[src]).to("cuda").float() for t, src in ((QA, qa), (QB, qb), (SA, sa), (SB, sb))}
    qa_d = dev[QA].to(torch.float8_e4m3fn).reshape(1, m, k)
    qb_d = dev[QB].to(torch.float8_e4m3fn).reshape(1, n, k).transpose(1, 2)  # dims [1, K, N], K fastest
    sa_d = dev[SA].to(torch.float8_e8m0fnu).reshape(1, m, 4)
    sb_d = dev[SB].to(torch.float8_e8m0fnu).reshape(1, n, 4).transpose(1, 2)
    c = poisoned(C, torch.bfloat16)
    g.execute({QA: qa_d, QB: qb_d, SA: sa_d, SB: sb_d, C: c}, None)
    torch.cuda.synchronize()
    real_a = bufs[qa] * np.repeat(bufs[sa].reshape(-1)[tile_positions(m, 4)[:, :2]], 32, axis=1)
    real_b = bufs[qb] * np.repeat(bufs[sb].reshape(-1)[tile_positions(n, 4)[:, :2]], 32, axis=1)
    err = rel_err(host(c)[0], real_a @ real_b.T)
    outcome(f"computed on compute capability {cc() / 10:.1f}: rel err {err:.2e}")
    assert err < 1e-2


# ---- MoE ----------------------------------------------------------------------------------------------------------
def _moe(mode, tok, w, off, idx=None, ks=None, top_k=0):
    g = cudnn.pygraph(io_data_type=D.HALF, intermediate_data_type=D.FLOAT, compute_data_type=D.FLOAT)
    T, W = g.tensor_like(tok), g.tensor_like(w)
    O = g.tensor_like(off)
    I = g.tensor_like(idx) if idx is not None else None
    KS = g.tensor_like(ks) if ks is not None else None
    out = g.moe_grouped_matmul(T, W, O, I, KS, mode=mode, top_k=top_k, name="moe").set_output(True)
    return g, (T, W, O, I, KS, out)


def _build_or_xfail(g, what: str) -> None:
    """Build; a refusal (a cudnnGraphNotSupportedError with a reason) reports the test xfailed with its words."""
    try:
        g.build(HEUR)
    except cudnn.cudnnGraphNotSupportedError as e:
        xfail_refused(what, e)


def _moe_reference(mode, tok, w, off, idx, ks=None, top_k=0):
    rg = cudnn.pygraph(io_data_type=D.DOUBLE, backends=[ReferenceEngine()])
    T, W = rg.tensor(list(tok.shape), name="tok"), rg.tensor(list(w.shape), name="w")
    O = rg.tensor(list(off.shape), data_type=D.INT32, name="off")
    I = rg.tensor(list(idx.shape), data_type=D.INT32, name="idx") if idx is not None else None
    KS = rg.tensor(list(ks.shape), data_type=D.INT32, name="ks") if ks is not None else None
    out = rg.moe_grouped_matmul(T, W, O, I, KS, mode=mode, top_k=top_k).set_output(True)
    rg.validate_ir()
    buf = np.full(tuple(out.get_dim()), np.nan)
    feeds = {T: host(tok), W: host(w), O: host(off), out: buf}
    feeds.update({X: host(x) for X, x in ((I, idx), (KS, ks)) if X is not None})
    rg.execute(feeds)
    return buf


@pytest.mark.parametrize("mode", [MODE.NONE, MODE.GATHER, MODE.SCATTER])
def test_moe_grouped_matmul_forward(mode):
    t, k, n, e, top_k = 256, 128, 64, 4, 2
    tok = torch.randn(1, t, k, device="cuda", dtype=torch.half)
    w = torch.randn(e, k, n, device="cuda", dtype=torch.half) / k ** 0.5
    rows = t * top_k if mode is MODE.GATHER else t
    off = torch.tensor([0, 32, 32 + 96, rows - 64], device="cuda", dtype=torch.int32).reshape(e, 1, 1)
    idx = ks = None
    if mode is MODE.GATHER:
        idx = torch.randint(0, t, (1, rows, 1), device="cuda", dtype=torch.int32)
    if mode is MODE.SCATTER:  # row r goes to slot dest[r] = token * top_k + choice: every slot once
        dest = torch.randperm(t, device="cuda")
        idx, ks = (x.to(torch.int32).reshape(1, t, 1) for x in (dest // top_k, dest % top_k))
    scatter_k = top_k if mode is MODE.SCATTER else 0
    g, (T, W, O, I, KS, out) = _moe(mode, tok, w, off, idx, ks, scatter_k)
    g.validate()
    _build_or_xfail(g, f"moe_grouped_matmul {mode}")
    y = poisoned(out, torch.half)
    feeds = {T: tok, W: w, O: off, out: y}
    feeds.update({X: x for X, x in ((I, idx), (KS, ks)) if X is not None})
    g.execute(feeds, None)
    torch.cuda.synchronize()
    ref = _moe_reference(mode, tok, w, off, idx, ks, scatter_k)
    err = rel_err(host(y), ref)
    note = ""
    if err >= 5e-3 and mode is MODE.GATHER:  # say which reading of token_index the GPU followed, if another one
        for label, src in (("token[idx // top_k]", idx // top_k), ("token[idx % T]", idx % t)):
            alt = _moe_reference(mode, tok, w, off, src)
            note += f"; as {label}: rel err {rel_err(host(y), alt):.2e}"
    outcome(f"{mode} computed on compute capability {cc() / 10:.1f}: rel err {err:.2e}{note}")
    assert err < 5e-3, note


def test_moe_grouped_matmul_bwd():
    t, k, n, e = 256, 64, 32, 4
    tok = torch.randn(1, t, k, device="cuda", dtype=torch.half)
    dout = torch.randn(1, t, n, device="cuda", dtype=torch.half)
    off = torch.tensor([0, 64, 96, 160], device="cuda", dtype=torch.int32).reshape(e, 1, 1)
    g = cudnn.pygraph(io_data_type=D.HALF, intermediate_data_type=D.FLOAT, compute_data_type=D.FLOAT)
    T, DO, O = g.tensor_like(tok), g.tensor_like(dout), g.tensor_like(off)
    dw = g.moe_grouped_matmul_bwd(DO, T, O, name="bwd").set_output(True)
    try:
        g.validate()  # the version gate (cuDNN >= 9.22) is checked here
    except cudnn.cudnnGraphNotSupportedError as e:
        skip_refused("moe_grouped_matmul_bwd (needs cuDNN 9.22)", e)
    _build_or_xfail(g, "moe_grouped_matmul_bwd")  # the cuBLASLt >= 13.5 gate, then cuDNN's own support
    buf = poisoned(dw, torch.half)
    g.execute({T: tok, DO: dout, O: off, dw: buf}, None)
    torch.cuda.synchronize()
    starts = [0, 64, 96, 160, t]
    tk, dk = host(tok)[0], host(dout)[0]
    ref = np.stack([tk[starts[j]:starts[j + 1]].T @ dk[starts[j]:starts[j + 1]] for j in range(e)])
    err = rel_err(host(buf), ref)
    outcome(f"moe_grouped_matmul_bwd computed: rel err {err:.2e}")
    assert err < 5e-3
