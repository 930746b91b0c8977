"""GPU: per-tensor FP8 attention (sdpa_fp8, sdpa_fp8_backward) against a float64 reference written here that
rounds the intermediates the definition quantizes (P · scale_s, dP · scale_dP) to E4M3 as torch's cast does;
the reference itself is cross-checked against torch's SDPA in float64 with the rounding off. E4M3 q, k, v, o, dO
with non-trivial descales, b=2 h=4 s=128, d 64 / 128, causal and not; fresh random inputs; every output
NaN-poisoned before the run. (Written without a GPU; first run on the device by the lead.)

Tolerances (relative Frobenius error against the float64 reference):
* O, dQ, dK, dV: ``FP8_TOL = 0.08``. The GPU writes them in E4M3 (3 mantissa bits): round to nearest changes each
  element by at most half a step, 2^-4 = 0.0625 of its magnitude (normal range; the scales put the amax near the
  top of the range), so the final rounding alone is bounded by 0.0625 in norm (about 0.025 typical). The rounded
  intermediates (S8, dP8) are emulated by the reference; the GPU's float32 values differ from float64 by ~1e-6
  relative, which flips the rounding of a negligible fraction of elements by one step. 0.08 leaves room for those
  flips and the float32 accumulation over s = 128.
* Stats (FLOAT, from the descaled scores): ``STATS_TOL = 2e-3``, as for fp16 attention.
* Amax_S and Amax_dP are maxima of float32 values before any rounding: ``AMAX_TOL = 0.02`` relative.
  Amax_O / dQ / dK / dV are maxima of matmuls over the rounded S8 / dP8, and the kernel need not round the same
  values the reference rounds (a flash kernel rounds exp(s - running max) and normalizes after the matmul), so
  each weight of the max element may differ by up to one E4M3 step, 2^-4 relative:
  ``AMAX_MATMUL_TOL = 0.0625`` (the H200 showed 0.025 on Amax_O, d 64).
"""
from __future__ import annotations

import math

import pytest

import cudnn_py as cudnn
from tests.support.refusals import expect_refusal
from tests.test_gpu_sdpa import poisoned, rel_err  # (that module skips itself without torch, and so this one)

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
F = cudnn.data_type.FLOAT
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
FP8_TOL, STATS_TOL, AMAX_TOL, AMAX_MATMUL_TOL = 0.08, 2e-3, 0.02, 0.0625
B, H, S = 2, 4, 128




def fp8(x):
    """Round to E4M3 as the GPU does when it writes an FP8 intermediate (nearest even, saturating)."""
    return x.clamp(-FP8_MAX, FP8_MAX).to(FP8).double()


def quantized(shape, spread):
    """An E4M3 tensor holding spread · N(0, 1) (its descale is 1 / spread)."""
    return (torch.randn(*shape, device="cuda") * spread).to(FP8)


def scalar(value):
    return torch.full((1, 1, 1, 1), float(value), device="cuda", dtype=torch.float32)


def power_of_two_scale(amax, top=256.0):
    """The scale putting ``amax`` just under ``top`` (headroom below E4M3's 448), a power of two."""
    return 2.0 ** math.floor(math.log2(top / float(amax)))


def probabilities(q, k, sc, attn_scale, causal):
    q, k = q.double(), k.double()
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    s = q @ k.transpose(-1, -2) * attn_scale * sc["descale_q"] * sc["descale_k"]
    if causal:
        keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1), torch.logsumexp(s, dim=-1, keepdim=True)


def reference_forward(q, k, v, sc, attn_scale, causal, rounding=True):
    """O, Stats, Amax_S, Amax_O of the definition in float64."""
    p, stats = probabilities(q, k, sc, attn_scale, causal)
    v = v.double().repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    s8 = fp8(p * sc["scale_s"]) if rounding else p * sc["scale_s"]
    o = s8 @ v * sc["descale_s"] * sc["descale_v"]
    return o * sc["scale_o"], stats, p.abs().max(), o.abs().max()


def reference_backward(q, k, v, o, d_o, sc, attn_scale, causal):
    """dQ, dK, dV (scaled) and Amax_dQ, Amax_dK, Amax_dV, Amax_dP of the definition in float64; D from the given O."""
    h, h_k = q.shape[1], k.shape[1]
    p, _ = probabilities(q, k, sc, attn_scale, causal)
    q, k, v, o, d_o = (x.double() for x in (q, k, v, o, d_o))
    k_full, v_full = (x.repeat_interleave(h // h_k, dim=1) for x in (k, v))

    def per_kv_head(x):
        return x.reshape(x.shape[0], h_k, h // h_k, *x.shape[2:]).sum(dim=2)

    s8 = fp8(p * sc["scale_s"])
    d_v = per_kv_head(s8.transpose(-1, -2) @ d_o) * sc["descale_s"] * sc["descale_dO"]
    d_row = (d_o * o).sum(dim=-1, keepdim=True) * sc["descale_dO"] * sc["descale_o"]
    d_p = d_o @ v_full.transpose(-1, -2) * sc["descale_dO"] * sc["descale_v"]
    d_s = attn_scale * p * (d_p - d_row)
    dp8 = fp8(d_s * sc["scale_dP"])
    d_q = dp8 @ k_full * sc["descale_dP"] * sc["descale_k"]
    d_k = per_kv_head(dp8.transpose(-1, -2) @ q) * sc["descale_dP"] * sc["descale_q"]
    grads = (d_q * sc["scale_dQ"], d_k * sc["scale_dK"], d_v * sc["scale_dV"])
    return grads, tuple(x.abs().max() for x in (d_q, d_k, d_v, d_s))


def test_reference_without_rounding_is_torch_sdpa():
    q, k, v = (torch.randn(2, 4, 37, 64, device="cuda", dtype=torch.float64) for _ in range(3))
    unit = dict(descale_q=1.0, descale_k=1.0, descale_v=1.0, descale_s=1.0, scale_s=1.0, scale_o=1.0)
    f = torch.nn.functional.scaled_dot_product_attention
    for causal in (False, True):
        o = reference_forward(q, k, v, unit, 0.125, causal, rounding=False)[0]
        assert torch.allclose(o, f(q, k, v, scale=0.125, is_causal=causal), atol=1e-10)


FWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
SPREAD = dict(q=4.0, k=2.0, v=2.0, o=1.0, dO=2.0)  # E4M3 holds spread · N(0, 1): descale = 1 / spread


def run_forward(d, causal, h_k=H, block=None, max_seq_len_only=False):
    """``block``: K and V read from shuffled page containers of that block size through page tables (every
    sequence full length, so the dense reference applies). ``max_seq_len_only``: dense K / V given
    ``paged_attention_max_seq_len_kv`` and no page tables (the official module accepts it; it changes nothing)."""
    q, k, v = quantized((B, H, S, d), SPREAD["q"]), quantized((B, h_k, S, d), SPREAD["k"]), \
        quantized((B, h_k, S, d), SPREAD["v"])
    sc = dict(descale_q=1 / SPREAD["q"], descale_k=1 / SPREAD["k"], descale_v=1 / SPREAD["v"],
              descale_s=1 / FP8_MAX, scale_s=FP8_MAX, scale_o=16.0)
    attn_scale = 1 / math.sqrt(d)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=F, compute_data_type=F)
    Q = g.tensor_like(q)
    feeds, kw = {Q: q}, {}
    if block is None:
        K, V = g.tensor_like(k), g.tensor_like(v)
        feeds.update({K: k, V: v})
        if max_seq_len_only:
            kw = dict(paged_attention_max_seq_len_kv=S)
    else:
        pages = S // block
        order = torch.randperm(B * pages + 3, device="cuda")[: B * pages].view(B, 1, pages, 1).to(torch.int32)
        containers = []
        for x in (k, v):  # page order[b, j] holds rows j·block .. (j + 1)·block of sequence b
            raw = x.view(torch.uint8)  # (moved as bytes: indexing FP8 tensors is not implemented everywhere)
            c = torch.zeros(B * pages + 3, h_k, block, d, device="cuda", dtype=torch.uint8)
            c[order.view(-1).long()] = raw.view(B, h_k, pages, block, d).transpose(1, 2).reshape(B * pages, h_k,
                                                                                                   block, d)
            containers.append(c.view(x.dtype))
        lens = torch.full((B, 1, 1, 1), S, dtype=torch.int32, device="cuda")
        K, V, TK, TV, SQ, SKV = (g.tensor_like(x) for x in (*containers, order, order, lens, lens))
        feeds.update({K: containers[0], V: containers[1], TK: order, TV: order, SQ: lens, SKV: lens})
        kw = dict(use_padding_mask=True, seq_len_q=SQ, seq_len_kv=SKV, paged_attention_k_table=TK,
                  paged_attention_v_table=TV, paged_attention_max_seq_len_kv=S)
    scales = {name: scalar(sc[name]) for name in FWD_SCALES}
    S_T = {name: g.tensor_like(t) for name, t in scales.items()}
    O, STATS, AMAX_S, AMAX_O = g.sdpa_fp8(Q, K, V, *(S_T[n] for n in FWD_SCALES), generate_stats=True,
                                          attn_scale=attn_scale, use_causal_mask=causal, name="fp8", **kw)
    O.set_output(True).set_data_type(cudnn.data_type.FP8_E4M3)
    for t in (STATS, AMAX_S, AMAX_O):
        t.set_output(True).set_data_type(F)
    g.validate()
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    outs = {O: poisoned(O, FP8), STATS: poisoned(STATS, torch.float32), AMAX_S: poisoned(AMAX_S, torch.float32),
            AMAX_O: poisoned(AMAX_O, torch.float32)}
    g.execute({**feeds, **{S_T[n]: scales[n] for n in FWD_SCALES}, **outs}, None)
    torch.cuda.synchronize()
    return [outs[t] for t in (O, STATS, AMAX_S, AMAX_O)], (q, k, v, sc, attn_scale)


@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_forward(d, causal):
    (o, stats, amax_s, amax_o), (q, k, v, sc, attn_scale) = run_forward(d, causal)
    o_ref, stats_ref, amax_s_ref, amax_o_ref = reference_forward(q, k, v, sc, attn_scale, causal)
    assert rel_err(o.float(), o_ref) < FP8_TOL
    assert rel_err(stats, stats_ref) < STATS_TOL
    assert rel_err(amax_s, amax_s_ref.reshape(1, 1, 1, 1)) < AMAX_TOL
    assert rel_err(amax_o, amax_o_ref.reshape(1, 1, 1, 1)) < AMAX_MATMUL_TOL


def test_forward_gqa_causal():
    (o, stats, _, amax_o), (q, k, v, sc, attn_scale) = run_forward(128, True, h_k=2)
    o_ref, stats_ref, _, amax_o_ref = reference_forward(q, k, v, sc, attn_scale, True)
    assert rel_err(o.float(), o_ref) < FP8_TOL
    assert rel_err(stats, stats_ref) < STATS_TOL
    assert rel_err(amax_o, amax_o_ref.reshape(1, 1, 1, 1)) < AMAX_MATMUL_TOL


def test_max_seq_len_kv_without_page_tables_changes_nothing():
    """#39 item 6: an fp8 forward given paged_attention_max_seq_len_kv and no page tables builds and computes the
    dense attention, as the official module accepts it."""
    (o, stats, _, amax_o), (q, k, v, sc, attn_scale) = run_forward(64, True, max_seq_len_only=True)
    o_ref, stats_ref, _, amax_o_ref = reference_forward(q, k, v, sc, attn_scale, True)
    assert rel_err(o.float(), o_ref) < FP8_TOL
    assert rel_err(stats, stats_ref) < STATS_TOL
    assert rel_err(amax_o, amax_o_ref.reshape(1, 1, 1, 1)) < AMAX_MATMUL_TOL


def test_paged_forward():
    """sdpa_fp8 over paged K / V caches (the composite's PAGED_CACHE_LOAD ops), GQA, causal."""
    (o, stats, _, amax_o), (q, k, v, sc, attn_scale) = run_forward(64, True, h_k=2, block=32)
    o_ref, stats_ref, _, amax_o_ref = reference_forward(q, k, v, sc, attn_scale, True)
    assert rel_err(o.float(), o_ref) < FP8_TOL
    assert rel_err(stats, stats_ref) < STATS_TOL
    assert rel_err(amax_o, amax_o_ref.reshape(1, 1, 1, 1)) < AMAX_MATMUL_TOL


BWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s", "descale_dP", "scale_s",
              "scale_dQ", "scale_dK", "scale_dV", "scale_dP")


def run_backward(d, causal, h_k=H):
    q, k, v = quantized((B, H, S, d), SPREAD["q"]), quantized((B, h_k, S, d), SPREAD["k"]), \
        quantized((B, h_k, S, d), SPREAD["v"])
    attn_scale = 1 / math.sqrt(d)
    fwd = dict(descale_q=1 / SPREAD["q"], descale_k=1 / SPREAD["k"], descale_v=1 / SPREAD["v"],
               descale_s=1 / FP8_MAX, scale_s=FP8_MAX, scale_o=1.0)
    o_ref, stats_ref, _, amax_o = reference_forward(q, k, v, fwd, attn_scale, causal)
    scale_o = power_of_two_scale(amax_o)
    o = fp8(o_ref * scale_o).to(FP8)  # the forward's O as training stores it, E4M3 with its scale
    d_o = quantized((B, H, S, d), SPREAD["dO"])
    stats = stats_ref.float()
    sc = dict(fwd, descale_o=1 / scale_o, descale_dO=1 / SPREAD["dO"], descale_dP=1.0, scale_dQ=1.0, scale_dK=1.0,
              scale_dV=1.0, scale_dP=1.0)
    _, amax = reference_backward(q, k, v, o, d_o, sc, attn_scale, causal)  # unit scales: the amax to scale by
    sc.update(scale_dP=power_of_two_scale(amax[3]), scale_dQ=power_of_two_scale(amax[0]),
              scale_dK=power_of_two_scale(amax[1]), scale_dV=power_of_two_scale(amax[2]))
    sc["descale_dP"] = 1 / sc["scale_dP"]
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=F, compute_data_type=F)
    Q, K, V, O, DO, STATS = (g.tensor_like(t) for t in (q, k, v, o, d_o, stats))
    scales = {name: scalar(sc[name]) for name in BWD_SCALES}
    S_T = {name: g.tensor_like(t) for name, t in scales.items()}
    grads = g.sdpa_fp8_backward(Q, K, V, O, DO, STATS, *(S_T[n] for n in BWD_SCALES), attn_scale=attn_scale,
                                use_causal_mask=causal, name="fp8_bwd")
    for t in grads[:3]:
        t.set_output(True).set_data_type(cudnn.data_type.FP8_E4M3)
    for t in grads[3:]:
        t.set_output(True).set_data_type(F)
    g.validate()
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    outs = {t: poisoned(t, FP8 if i < 3 else torch.float32) for i, t in enumerate(grads)}
    g.execute({Q: q, K: k, V: v, O: o, DO: d_o, STATS: stats, **{S_T[n]: scales[n] for n in BWD_SCALES}, **outs},
              None)
    torch.cuda.synchronize()
    want = reference_backward(q, k, v, o, d_o, sc, attn_scale, causal)
    return [outs[t] for t in grads], want


def check_backward(got, want):
    (d_q, d_k, d_v, *amax), (grads, amax_ref) = got, want
    for name, out, ref in zip(("dQ", "dK", "dV"), (d_q, d_k, d_v), grads):
        err = rel_err(out.float(), ref)
        assert err < FP8_TOL, f"{name}: relative error {err:.3g}"
    for name, out, ref in zip(("Amax_dQ", "Amax_dK", "Amax_dV", "Amax_dP"), amax, amax_ref):
        err = rel_err(out, ref.reshape(1, 1, 1, 1))
        tol = AMAX_TOL if name == "Amax_dP" else AMAX_MATMUL_TOL
        assert err < tol, f"{name}: relative error {err:.3g}"


@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_backward(d, causal):
    hopper = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9  # (False in a CPU dry run)
    if d != 128 and hopper:  # the frontend's SM9x rule (d_qk == d_v == 128): refused when planning
        expect_refusal(lambda: run_backward(d, causal), "d_qk == d_v == 128", f"fp8 sdpa backward d={d} on SM9x "
                       "(the frontend's rule)")
    check_backward(*run_backward(d, causal))


def test_backward_gqa_causal():
    check_backward(*run_backward(128, True, h_k=2))
