"""GPU: MXFP8 attention (sdpa_mxfp8, sdpa_mxfp8_backward) against the float64 definition (the reference engine),
on the same MX operands: random float32 tensors quantized here by the OCP MX rule (E8M0 scale 2^(floor(log2 amax)
- 8) per block of 32, elements rounded to E4M3 by torch's cast), scales laid out in F8_128x4 tiles. b=2, h 4 (and
GQA with 2 kv heads), s 128, d 128 and 64, causal and not; every output NaN-poisoned before the run.

MXFP8 attention is Blackwell-only (compute capability major 10, cuDNN >= 9.21): anywhere else every test asserts
the clear refusal instead - a cudnnGraphNotSupportedError saying MXFP8 attention is Blackwell-only (from
validate() when the cuDNN is older than 9.21, from build() otherwise) - and is reported skipped with it
(tests/support/refusals.py). A test that computed prints one ``OUTCOME:`` line (run with ``-s`` or ``-rA``).
(Written without a GPU; the refusal path is what an H200 runs; the Blackwell path has never run.)

Tolerances (relative Frobenius error against the float64 definition, which takes the MX operands exactly):
* O: ``O_TOL = 0.1``. The graph types the softmax output as E4M3 (bmm2's A in Q's type, as the backend wants it)
  and the definition keeps P exact (how the fused kernel quantizes P is undocumented): one E4M3 rounding of P is up
  to 2^-4 relative per element for normal values, more for probabilities in E4M3's subnormal range (< 2^-6, most
  of them at s_kv = 128), then BF16 output rounding (2^-9). 0.1 bounds that with room; the OUTCOME line gives the
  error seen.
* Stats (FLOAT, from float32 scores of exact operands): ``STATS_TOL = 2e-3``; Amax_O follows O: ``O_TOL``.
* dQ, dK, dV (BF16; P and dS FLOAT in the graph): ``GRAD_TOL = 0.05`` (float32 accumulation and BF16 output are
  ~1e-2 at most; the rest allows a kernel that requantizes P / dS into MXFP8 internally); Amax_d*: ``GRAD_TOL``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.families.quantize.reference import tile_positions
from cudnn_py.plans.device_gates import compute_capability
from tests.support.refusals import expect_refusal
from tests.test_gpu_sdpa import poisoned  # (that module skips itself without torch, and so this one)

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
D = cudnn.data_type
F8_128x4 = cudnn.tensor_reordering.F8_128x4
HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
O_TOL, STATS_TOL, GRAD_TOL = 0.1, 2e-3, 0.05
B, H, S = 2, 4, 128
FWD_ALONG = {"q": "d", "k": "d", "v": "s"}
BWD_ALONG = {"q": "d", "q_T": "s", "k": "d", "k_T": "s", "v": "d", "dO": "d", "dO_T": "s"}
BWD_NAMES = ("q", "q_T", "k", "k_T", "v", "dO", "dO_T")


def cc() -> int:
    return compute_capability(torch.cuda.current_device())


def runs_here() -> bool:
    return cc() // 10 == 10 and versions.runtime_version() >= 92100


def outcome(text: str) -> None:
    print(f"\nOUTCOME: {text}")


def expect_blackwell_refusal(build, what: str) -> None:
    """Not on Blackwell with cuDNN >= 9.21: refused clearly (validate or build), the test reported skipped."""
    expect_refusal(build, r"(?s)MXFP8 attention.*Blackwell-only.*compute capability 10\.x", f"{what} (Blackwell only)")


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    assert np.isfinite(out).all(), "not every element was written (NaN poison left) or the result is not finite"
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def host(t) -> np.ndarray:
    return t.float().cpu().numpy().astype(np.float64)


def pad(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def mx_quantize(x, along: str, transposed_storage: bool = False):
    """(E4M3 elements, the row-major host memory of their F8_128x4 E8M0 descale) of a float32 (b, h, s, d) tensor,
    blocks of 32 along d or s. ``transposed_storage``: the elements s-fastest (a _T operand)."""
    axis = 3 if along == "d" else 2
    blocks = x.unflatten(axis, (x.shape[axis] // 32, 32))
    amax = blocks.abs().amax(dim=axis + 1, keepdim=True).clamp_min(2.0 ** -100)
    scale = torch.exp2(torch.floor(torch.log2(amax)) - 8).clamp(2.0 ** -127, 2.0 ** 127)
    values = (blocks / scale).clamp(-448.0, 448.0).flatten(axis, axis + 1)
    if transposed_storage:
        values = values.transpose(2, 3).contiguous().transpose(2, 3)
    elements = values.to(torch.float8_e4m3fn)  # (the strides are preserved)
    scales = scale.squeeze(axis + 1).double().cpu().numpy()
    logical = scales if along == "d" else np.swapaxes(scales, 2, 3)  # (b, h, rows, blocks)
    b, h, n_rows, n_blocks = logical.shape
    rows, cols = pad(n_rows, 128), pad(n_blocks, 4)
    full = np.ones((b, h, rows, cols))  # the padding: any finite scale (never read for the valid elements)
    full[:, :, :n_rows, :n_blocks] = logical
    memory = np.empty((b, h, rows * cols))
    memory[:, :, tile_positions(rows, cols).reshape(-1)] = full.reshape(b, h, -1)
    return elements, memory.reshape((b, h, rows, cols) if along == "d" else (b, h, cols, rows))


def device_descale(memory: np.ndarray):
    """The descale on the device, E8M0 (powers of two: exact); made only where the graph runs."""
    return torch.from_numpy(memory).float().cuda().to(torch.float8_e8m0fnu)


def graph(io, backends=None):
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=D.FLOAT, compute_data_type=D.FLOAT,
                         **({"backends": backends} if backends else {}))


def element_tensor(g, x, name):
    return g.tensor(list(x.shape), stride=list(x.stride()), data_type=D.FP8_E4M3, name=name)


def descale_tensor(g, memory, name):
    return g.tensor(list(memory.shape), data_type=D.FP8_E8M0, name=name).set_reordering_type(F8_128x4)


# ---- forward ------------------------------------------------------------------------------------------------------
def forward_graph(io, mx, attn_scale, causal, backends=None):
    g = graph(io, backends)
    ts = {n: element_tensor(g, mx[n][0], n) for n in FWD_ALONG}
    ds = {n: descale_tensor(g, mx[n][1], f"descale_{n}") for n in FWD_ALONG}
    o, stats, amax = g.sdpa_mxfp8(ts["q"], ts["k"], ts["v"], ds["q"], ds["k"], ds["v"], attn_scale=attn_scale,
                                  use_causal_mask=causal, generate_stats=True, name="mx")
    o.set_output(True).set_data_type(D.BFLOAT16)
    stats.set_output(True).set_data_type(D.FLOAT)
    amax.set_output(True).set_data_type(D.FLOAT)
    return g, ts, ds, (o, stats, amax)


def forward_data(d, h_k):
    real = {"q": torch.randn(B, H, S, d, device="cuda") * 2, "k": torch.randn(B, h_k, S, d, device="cuda"),
            "v": torch.randn(B, h_k, S, d, device="cuda")}
    return {n: mx_quantize(real[n], FWD_ALONG[n]) for n in FWD_ALONG}


def reference_forward(mx, attn_scale, causal):
    g, ts, ds, outs = forward_graph(D.DOUBLE, mx, attn_scale, causal, [ReferenceEngine()])
    g.validate_ir()
    feeds = {ts[n]: host(mx[n][0]) for n in FWD_ALONG}
    feeds.update({ds[n]: mx[n][1] for n in FWD_ALONG})
    bufs = [np.full(t.dim, np.nan) for t in outs]
    g.execute({**feeds, **dict(zip(outs, bufs))})
    return bufs


@pytest.mark.parametrize("h_k", [H, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_sdpa_mxfp8_forward(d, causal, h_k):
    mx = forward_data(d, h_k)
    attn_scale = 1 / math.sqrt(d)
    g, ts, ds, outs = forward_graph(D.BFLOAT16, mx, attn_scale, causal)
    if not runs_here():  # validate (cuDNN < 9.21) or build (not SM10x): the refusal must come from one of them
        expect_blackwell_refusal(lambda: (g.validate(), g.build(HEUR)), "sdpa_mxfp8")
    g.validate()
    g.build(HEUR)
    o, stats, amax = outs
    bufs = {o: poisoned(o, torch.bfloat16), stats: poisoned(stats, torch.float32),
            amax: poisoned(amax, torch.float32)}
    feeds = {**{ts[n]: mx[n][0] for n in FWD_ALONG}, **{ds[n]: device_descale(mx[n][1]) for n in FWD_ALONG}}
    g.execute({**feeds, **bufs}, None)
    torch.cuda.synchronize()
    want = reference_forward(mx, attn_scale, causal)
    errs = [rel_err(host(bufs[t]), w) for t, w in zip(outs, want)]
    outcome(f"computed on compute capability {cc() / 10:.1f}: O {errs[0]:.2e}, Stats {errs[1]:.2e}, Amax_O "
            f"{errs[2]:.2e}")
    assert errs[0] < O_TOL and errs[1] < STATS_TOL and errs[2] < O_TOL


# ---- backward -----------------------------------------------------------------------------------------------------
def backward_graph(io, mx, f16, attn_scale, causal, backends=None):
    g = graph(io, backends)
    ts = {n: element_tensor(g, mx[n][0], n) for n in BWD_NAMES}
    ds = {n: descale_tensor(g, mx[n][1], f"descale_{n}") for n in BWD_NAMES}
    o16, do16, stats = (g.tensor(list(f16[n].shape), stride=list(f16[n].stride()), data_type=dt, name=n)
                        for n, dt in (("o_f16", D.BFLOAT16), ("dO_f16", D.BFLOAT16), ("stats", D.FLOAT)))
    grads = g.sdpa_mxfp8_backward(ts["q"], ts["q_T"], ts["k"], ts["k_T"], ts["v"], o16, do16, ts["dO"], ts["dO_T"],
                                  stats, *(ds[n] for n in BWD_NAMES), attn_scale=attn_scale, use_causal_mask=causal,
                                  name="mxb")
    for t in grads[:3]:
        t.set_output(True).set_data_type(D.BFLOAT16)
    for t in grads[3:]:
        t.set_output(True).set_data_type(D.FLOAT)
    return g, ts, ds, {"o_f16": o16, "dO_f16": do16, "stats": stats}, grads


def backward_data(d, h_k, attn_scale, causal):
    real = {"q": torch.randn(B, H, S, d, device="cuda") * 2, "k": torch.randn(B, h_k, S, d, device="cuda"),
            "v": torch.randn(B, h_k, S, d, device="cuda"), "dO": torch.randn(B, H, S, d, device="cuda")}
    mx = {n: mx_quantize(real[n.removesuffix("_T")], BWD_ALONG[n], n.endswith("_T")) for n in BWD_NAMES}
    # the forward over the dequantized q, k, v (float64): O and its statistics
    deq = {}
    for n in ("q", "k", "v"):
        elements, memory = mx[n]
        deq[n] = torch.from_numpy(_dequantized_host(host(elements), memory, BWD_ALONG[n])).cuda()
    rep = H // h_k
    k, v = (deq[n].repeat_interleave(rep, dim=1) for n in ("k", "v"))
    s = deq["q"] @ k.transpose(-1, -2) * attn_scale
    if causal:
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool, device="cuda").tril(), float("-inf"))
    f16 = {"o_f16": (torch.softmax(s, dim=-1) @ v).to(torch.bfloat16), "dO_f16": real["dO"].to(torch.bfloat16),
           "stats": torch.logsumexp(s, dim=-1, keepdim=True).float()}
    return mx, f16


def _dequantized_host(elements: np.ndarray, memory: np.ndarray, along: str) -> np.ndarray:
    """The real values of an MX operand from its host descale memory (the layout mx_quantize wrote)."""
    b, h = memory.shape[:2]
    rows, cols = (memory.shape[2], memory.shape[3]) if along == "d" else (memory.shape[3], memory.shape[2])
    logical = memory.reshape(b, h, -1)[:, :, tile_positions(rows, cols).reshape(-1)].reshape(b, h, rows, cols)
    if along == "d":
        scales = logical[:, :, :elements.shape[2], :elements.shape[3] // 32]
        return elements * np.repeat(scales, 32, axis=3)
    scales = np.swapaxes(logical[:, :, :elements.shape[3], :elements.shape[2] // 32], 2, 3)
    return elements * np.repeat(scales, 32, axis=2)


def reference_backward(mx, f16, attn_scale, causal):
    g, ts, ds, extra, grads = backward_graph(D.DOUBLE, mx, f16, attn_scale, causal, [ReferenceEngine()])
    g.validate_ir()
    feeds = {ts[n]: host(mx[n][0]) for n in BWD_NAMES}
    feeds.update({ds[n]: mx[n][1] for n in BWD_NAMES})
    feeds.update({extra[n]: host(f16[n]) for n in extra})
    bufs = [np.full(t.dim, np.nan) for t in grads]
    g.execute({**feeds, **dict(zip(grads, bufs))})
    return bufs


@pytest.mark.parametrize("h_k", [H, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_sdpa_mxfp8_backward(d, causal, h_k):
    attn_scale = 1 / math.sqrt(d)
    mx, f16 = backward_data(d, h_k, attn_scale, causal)
    g, ts, ds, extra, grads = backward_graph(D.BFLOAT16, mx, f16, attn_scale, causal)
    if not runs_here():
        expect_blackwell_refusal(lambda: (g.validate(), g.build(HEUR)), "sdpa_mxfp8_backward")
    g.validate()
    g.build(HEUR)
    bufs = {t: poisoned(t, torch.bfloat16 if i < 3 else torch.float32) for i, t in enumerate(grads)}
    g.execute({**{ts[n]: mx[n][0] for n in BWD_NAMES}, **{ds[n]: device_descale(mx[n][1]) for n in BWD_NAMES},
               **{extra[n]: f16[n] for n in extra}, **bufs}, None)
    torch.cuda.synchronize()
    want = reference_backward(mx, f16, attn_scale, causal)
    names = ("dQ", "dK", "dV", "Amax_dQ", "Amax_dK", "Amax_dV")
    errs = {n: rel_err(host(bufs[t]), w) for n, t, w in zip(names, grads, want)}
    outcome(f"computed on compute capability {cc() / 10:.1f}: " + ", ".join(f"{n} {e:.2e}" for n, e in errs.items()))
    bad = {n: e for n, e in errs.items() if not e < GRAD_TOL}
    assert not bad, f"relative errors above {GRAD_TOL}: {bad}"
