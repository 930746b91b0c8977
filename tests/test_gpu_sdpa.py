"""GPU: scaled dot-product attention forward (composite and unified) against a float64 attention written here,
itself cross-checked against torch's SDPA in float64. Outputs are NaN-poisoned before each run; fresh random
inputs; fp16 and bf16, head dims 64 and 128, sequence lengths that are not multiples of 64. (Written without a
GPU; first run on the device by the lead.)"""
from __future__ import annotations

import math

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from tests.support.refusals import expect_refusal, xfail_refused

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
F, I32 = cudnn.data_type.FLOAT, cudnn.data_type.INT32
AI = cudnn.attention_implementation
DTYPES = {"fp16": (torch.float16, cudnn.data_type.HALF, 1e-2), "bf16": (torch.bfloat16, cudnn.data_type.BFLOAT16, 2e-2)}
STATS_TOL = 2e-3


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    assert torch.isfinite(out).all(), "not every element was written (NaN poison left) or the result is not finite"
    return ((out - ref).norm() / ref.norm()).item()


def poisoned(t, dtype):
    """NaN-filled device memory laid out as the graph tensor ``t`` (its dims and strides); filled in float32 and
    cast, which FP8 types take too (E4M3 has a NaN: 0x7f)."""
    dims, strides = tuple(t.get_dim()), tuple(t.get_stride())
    size = 1 + sum((d - 1) * st for d, st in zip(dims, strides))
    return torch.full((size,), float("nan"), device="cuda", dtype=torch.float32).to(dtype).as_strided(dims, strides)


def alibi_slopes(heads):
    """ALiBi's head slopes (Press et al.; the frontend's get_alibi_slope): n = 2^floor(log2 heads), 2^(-8 x / n)
    for x = 1..n, then x = 0.5, 1.5, ... for the heads past n."""
    n = 2 ** int(math.floor(math.log2(heads)))
    xs = [x + 1.0 for x in range(n)] + [x + 0.5 for x in range(heads - n)]
    return torch.tensor([2.0 ** (-8.0 * x / n) for x in xs], dtype=torch.float64, device="cuda")


def reference_attention(q, k, v, scale, bias=None, causal=False, bottom_right=False, window=None, seq_q=None,
                        seq_kv=None, drop_mask=None, drop_scale=1.0, sink=None, alibi=False):
    """float64 attention from the definition: O and Stats = max + ln Σ exp over the masked, scaled scores."""
    q, k, v = q.double(), k.double(), v.double()  # (a no-op on float64 leaves: autograd reaches them)
    h = q.shape[1]
    k = k.repeat_interleave(h // k.shape[1], dim=1)
    v = v.repeat_interleave(h // v.shape[1], dim=1)
    s = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        s = s + bias.double()
    s_q, s_kv = s.shape[-2:]
    i = torch.arange(s_q, device=s.device).view(-1, 1)
    j = torch.arange(s_kv, device=s.device).view(1, -1)
    if alibi:
        s = s + alibi_slopes(h).view(1, -1, 1, 1) * (j - i)
    keep = torch.ones_like(s, dtype=torch.bool)
    shift = s_kv - s_q if bottom_right else 0
    if bottom_right and seq_q is not None:  # the diagonal ends at each batch's last valid query and key
        shift = (seq_kv - seq_q).view(-1, 1, 1, 1).to(s.device)
    if causal or bottom_right:
        keep &= j <= i + shift
    if window is not None:
        keep &= j > i + shift - window
    if seq_q is not None:
        keep &= (i < seq_q.view(-1, 1, 1, 1).to(s.device)) & (j < seq_kv.view(-1, 1, 1, 1).to(s.device))
    s = s.masked_fill(~keep, float("-inf"))
    dead = ~keep.any(dim=-1, keepdim=True)  # fully masked rows (padding): P = 0, no NaN into autograd
    if sink is not None:  # one more logit per head in every row's normalisation (no row is fully masked)
        logits = torch.cat([s, sink.double().expand(s.shape[0], -1, s.shape[2], 1)], dim=-1)
        stats = torch.logsumexp(logits, dim=-1, keepdim=True)
        p = torch.exp(s - stats)
    else:
        s = s.masked_fill(dead, 0.0)
        p = torch.softmax(s, dim=-1).masked_fill(dead, 0.0)
        stats = torch.logsumexp(s, dim=-1, keepdim=True).masked_fill(dead, float("-inf"))
    if drop_mask is not None:
        p = p * drop_mask.double() * drop_scale
    return p @ v, stats


def test_reference_matches_torch_sdpa_in_float64():
    q, k, v = (torch.randn(2, 4, 37, 64, device="cuda", dtype=torch.float64) for _ in range(3))
    bias = torch.randn(1, 4, 37, 37, device="cuda", dtype=torch.float64)
    f = torch.nn.functional.scaled_dot_product_attention
    for causal in (False, True):
        ours, _ = reference_attention(q, k, v, 0.125, causal=causal)
        assert torch.allclose(ours, f(q, k, v, scale=0.125, is_causal=causal), atol=1e-10)
    ours, _ = reference_attention(q, k, v, 0.125, bias=bias)
    assert torch.allclose(ours, f(q, k, v, attn_mask=bias, scale=0.125), atol=1e-10)
    i, j = torch.arange(37, device="cuda").view(-1, 1), torch.arange(37, device="cuda").view(1, -1)
    alibi = (alibi_slopes(4).view(1, -1, 1, 1) * (j - i)).masked_fill(j > i, float("-inf"))
    ours, _ = reference_attention(q, k, v, 0.125, alibi=True, causal=True)
    assert torch.allclose(ours, f(q, k, v, attn_mask=alibi, scale=0.125), atol=1e-10)


def run_sdpa(dtype, impl, b=2, h_q=4, h_k=4, s_q=100, s_kv=150, d=64, bshd=False, **opts):
    """Build, plan and run one sdpa graph; returns (O, Stats, the inputs, the reference's keywords)."""
    tdtype, cdtype, _ = DTYPES[dtype]

    def make(h, s, dim):
        if bshd:
            return torch.randn(b, s, h, dim, device="cuda", dtype=tdtype).transpose(1, 2)
        return torch.randn(b, h, s, dim, device="cuda", dtype=tdtype)

    q, k, v = make(h_q, s_q, d), make(h_k, s_kv, d), make(h_k, s_kv, d)
    scale = 1 / math.sqrt(d)
    g = cudnn.pygraph(io_data_type=cdtype, intermediate_data_type=F, compute_data_type=F)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    feeds, kw, ref = {Q: q, K: k, V: v}, {}, {}
    if opts.get("bias"):
        bias = torch.randn(1, h_q, s_q, s_kv, device="cuda", dtype=tdtype)
        kw["bias"] = B = g.tensor_like(bias)
        feeds[B] = ref["bias"] = bias
    if opts.get("padding"):
        lq = torch.randint(1, s_q + 1, (b, 1, 1, 1), dtype=torch.int32, device="cuda")
        lkv = torch.randint(1, s_kv + 1, (b, 1, 1, 1), dtype=torch.int32, device="cuda")
        lq[0], lkv[0] = s_q, s_kv
        if opts.get("bottom_right"):  # every valid query keeps a key: no fully masked row inside seq_len_q
            lkv = torch.maximum(lkv, lq)
        SQ, SKV = g.tensor_like(lq), g.tensor_like(lkv)
        feeds.update({SQ: lq, SKV: lkv})
        kw.update(use_padding_mask=True, seq_len_q=SQ, seq_len_kv=SKV)
        ref.update(seq_q=lq, seq_kv=lkv)
    for flag, key in (("causal", "use_causal_mask"), ("bottom_right", "use_causal_mask_bottom_right"),
                      ("alibi", "use_alibi_mask")):
        if opts.get(flag):
            kw[key] = True
            ref[flag] = True
    if opts.get("window"):
        kw["sliding_window_length"] = ref["window"] = opts["window"]
    if opts.get("sink"):
        sink = torch.randn(1, h_q, 1, 1, device="cuda", dtype=torch.float32)
        kw["sink_token"] = SINK = g.tensor_like(sink)
        feeds[SINK] = ref["sink"] = sink
    dump = None
    if opts.get("drop_mask"):
        mask = (torch.rand(b, h_q, s_q, s_kv, device="cuda") > 0.2).to(tdtype)
        dscale = torch.full((1, 1, 1, 1), 1 / 0.8, dtype=torch.float32)  # host scalar: pass-by-value
        M, DS = g.tensor_like(mask), g.tensor_like(dscale)
        feeds.update({M: mask, DS: dscale})
        kw["dropout"] = (M, DS)
        ref.update(drop_mask=mask, drop_scale=1 / 0.8)
    if opts.get("drop_p"):
        seed = torch.full((1, 1, 1, 1), 123456, dtype=torch.int64, device="cuda")
        offset = torch.full((1, 1, 1, 1), 7, dtype=torch.int64, device="cuda")
        SEED, OFF = g.tensor_like(seed), g.tensor_like(offset)
        dump = torch.full((b, h_q, s_q, s_kv), float("nan"), device="cuda", dtype=torch.float32)
        DUMP = g.tensor_like(dump)
        feeds.update({SEED: seed, OFF: offset, DUMP: dump})
        kw.update(dropout=(opts["drop_p"], SEED, OFF), rng_dump=DUMP)
        ref.update(drop_mask=dump, drop_scale=1 / (1 - opts["drop_p"]))
    if opts.get("drop_zero"):  # probability 0: no RNG runs, yet the seed and offset are the caller's to pass
        seed, offset = (torch.full((1, 1, 1, 1), v, dtype=torch.int64, device="cuda") for v in (99, 3))
        SEED, OFF = g.tensor_like(seed), g.tensor_like(offset)
        feeds.update({SEED: seed, OFF: offset})
        kw["dropout"] = (0.0, SEED, OFF)
    if opts.get("unfuse_fma"):
        kw["unfuse_fma"] = True
    O, STATS = g.sdpa(Q, K, V, generate_stats=True, attn_scale=scale, implementation=impl, **kw)
    O.set_output(True)
    STATS.set_output(True).set_data_type(F)
    g.validate()
    o, stats = poisoned(O, tdtype), poisoned(STATS, torch.float32)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({**feeds, O: o, STATS: stats}, None)
    torch.cuda.synchronize()
    return o, stats, (q, k, v, scale), ref


def check(dtype, o, stats, inputs, ref):
    o_ref, stats_ref = reference_attention(*inputs, **ref)
    tol = DTYPES[dtype][2]
    if "seq_q" in ref:  # rows past a batch's query length are padding: not compared
        valid = torch.arange(o.shape[2], device="cuda").view(1, 1, -1, 1) < ref["seq_q"].view(-1, 1, 1, 1)
        o, o_ref = o.masked_fill(~valid, 0), o_ref.masked_fill(~valid, 0)
        stats, stats_ref = stats.masked_fill(~valid, 0), stats_ref.masked_fill(~valid, 0)
    assert rel_err(o, o_ref) < tol
    assert rel_err(stats, stats_ref) < STATS_TOL


def _unified_available():
    return versions.available("CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR") and versions.runtime_version() >= 91301


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("impl", [AI.COMPOSITE, AI.UNIFIED])
def test_plain_forward(dtype, d, impl):
    if impl is AI.UNIFIED and not _unified_available():
        pytest.skip("the unified op needs cuDNN >= 9.13.1")
    o, stats, inputs, ref = run_sdpa(dtype, impl, d=d)
    check(dtype, o, stats, inputs, ref)


CASES = {
    "causal": dict(causal=True),
    "causal-gqa": dict(causal=True, h_q=8, h_k=2),
    "mqa-bshd": dict(h_q=4, h_k=1, bshd=True),
    "bottom_right": dict(bottom_right=True, s_q=70, s_kv=150),
    "sliding_window": dict(causal=True, window=33, s_q=150, s_kv=150),
    "bias": dict(bias=True),
    "padding": dict(padding=True),
    "padding-causal-gqa": dict(padding=True, causal=True, h_q=8, h_k=2),
    "dropout-mask-bias": dict(drop_mask=True, bias=True),
    "decode": dict(s_q=1, s_kv=200),
    "sink-causal": dict(sink=True, causal=True),
    "bottom_right-padding": dict(bottom_right=True, padding=True, s_q=70, s_kv=150),
    "bottom_right-window-padding": dict(bottom_right=True, window=20, padding=True, s_q=70, s_kv=150),
    "alibi-causal": dict(alibi=True, causal=True),
    "alibi-causal-6heads-padding": dict(alibi=True, causal=True, h_q=6, h_k=6, padding=True),
}


# seen wrong (or without an engine) on the H200 with cuDNN 9.19: refused by the errata table (cudnn_py/plans/errata.py)
REFUSED: dict[str, str] = {}  # the composite sliding windows were our decomposition's fault (fixed)
# dropout-mask: wrong in the official frontend too (fuzz/errata_probe); sink-causal (dSink left unwritten) was our
# decomposition's fault (fixed)
REFUSED_BACKWARD = {"dropout-mask": "sdpa-backward-dropout-mask"}


@pytest.mark.parametrize("case", list(CASES))
def test_composite_forward_options(case):
    if case in REFUSED:
        expect_refusal(lambda: run_sdpa("fp16", AI.COMPOSITE, **CASES[case]), f"erratum {REFUSED[case]}",
                       f"composite sdpa {case} (erratum)", report=xfail_refused)
    o, stats, inputs, ref = run_sdpa("fp16", AI.COMPOSITE, **CASES[case])
    check("fp16", o, stats, inputs, ref)


def test_dropout_with_rng_dump():
    """The RNG's bits cannot be recomputed: the mask it dumps (0 / 1 at the right rate) is applied in the
    reference."""
    o, stats, inputs, ref = run_sdpa("bf16", AI.COMPOSITE, drop_p=0.2, s_q=128, s_kv=128)
    mask = ref["drop_mask"]
    assert torch.isfinite(mask).all() and ((mask == 0) | (mask == 1)).all()
    assert abs(mask.mean().item() - 0.8) < 0.02
    check("bf16", o, stats, inputs, ref)


@pytest.mark.parametrize("impl", [AI.COMPOSITE, AI.AUTO])
def test_dropout_probability_zero_drops_nothing(impl):
    o, stats, inputs, ref = run_sdpa("fp16", impl, drop_zero=True, causal=True)
    check("fp16", o, stats, inputs, ref)


@pytest.mark.parametrize("case", ["plain", "padding"])
def test_unified_and_auto_agree_with_composite(case):
    if not _unified_available():
        pytest.skip("the unified op needs cuDNN >= 9.13.1")
    if case == "padding" and versions.runtime_version() < 91500:
        pytest.skip("the unified padding mask needs cuDNN >= 9.15")
    opts = dict(padding=True) if case == "padding" else {}
    torch.manual_seed(11)
    o_composite, stats_composite, _, _ = run_sdpa("fp16", AI.COMPOSITE, **opts)
    for impl in (AI.UNIFIED, AI.AUTO):
        torch.manual_seed(11)  # the same inputs
        o, stats, inputs, ref = run_sdpa("fp16", impl, **opts)
        check("fp16", o, stats, inputs, ref)
        if case == "plain":  # every row is defined: the two implementations agree elementwise
            assert rel_err(o, o_composite) < 1e-2 and rel_err(stats, stats_composite) < STATS_TOL


# ---- backward ---------------------------------------------------------------------------------------------------
def run_sdpa_backward(dtype, b=2, h_q=4, h_k=4, s_q=100, s_kv=150, d=64, **opts):
    """The forward in float64 (torch autograd gives the reference gradients), then cudnn_py's backward from the
    forward's O (in the I/O type) and Stats."""
    tdtype, cdtype, tol = DTYPES[dtype]
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=tdtype)
               for h, s in ((h_q, s_q), (h_k, s_kv), (h_k, s_kv)))
    d_o = torch.randn(b, h_q, s_q, d, device="cuda", dtype=tdtype)
    scale = 1 / math.sqrt(d)
    ref, feeds_extra, kw = {}, {}, {}
    g = cudnn.pygraph(io_data_type=cdtype, intermediate_data_type=F, compute_data_type=F)
    bias = None
    if opts.get("bias"):
        bias = torch.randn(1, h_q, s_q, s_kv, device="cuda", dtype=tdtype)
        B = g.tensor_like(bias)
        DB = g.tensor_like(bias)
        feeds_extra[B] = bias
        kw.update(bias=B, dBias=DB)
    if opts.get("padding"):
        lq = torch.randint(1, s_q + 1, (b, 1, 1, 1), dtype=torch.int32, device="cuda")
        lkv = torch.randint(1, s_kv + 1, (b, 1, 1, 1), dtype=torch.int32, device="cuda")
        lq[0], lkv[0] = s_q, s_kv
        SQ, SKV = g.tensor_like(lq), g.tensor_like(lkv)
        feeds_extra.update({SQ: lq, SKV: lkv})
        kw.update(use_padding_mask=True, seq_len_q=SQ, seq_len_kv=SKV)
        ref.update(seq_q=lq, seq_kv=lkv)
    if opts.get("causal"):
        kw["use_causal_mask"] = ref["causal"] = True
    if opts.get("alibi"):
        kw["use_alibi_mask"] = ref["alibi"] = True
    if opts.get("drop_mask"):
        mask = (torch.rand(b, h_q, s_q, s_kv, device="cuda") > 0.2).to(tdtype)
        sc = torch.full((1, 1, 1, 1), 1 / 0.8, dtype=torch.float32)
        inv = torch.full((1, 1, 1, 1), 0.8, dtype=torch.float32)
        M, SC, INV = g.tensor_like(mask), g.tensor_like(sc), g.tensor_like(inv)
        feeds_extra.update({M: mask, SC: sc, INV: inv})
        kw["dropout"] = (M, SC, INV)
        ref.update(drop_mask=mask, drop_scale=1 / 0.8)
    sink64 = None
    if opts.get("sink"):
        sink = torch.randn(1, h_q, 1, 1, device="cuda", dtype=torch.float32)
        SINK, DSINK = g.tensor_like(sink), g.tensor_like(sink)
        feeds_extra[SINK] = sink
        kw.update(sink_token=SINK, dSink_token=DSINK)
        sink64 = sink.double().requires_grad_(True)
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    bias64 = bias.double().requires_grad_(True) if bias is not None else None
    o64, stats64 = reference_attention(*leaves, scale, bias=bias64, sink=sink64, **ref)
    valid = None
    if "seq_q" in ref:
        valid = torch.arange(s_q, device="cuda").view(1, 1, -1, 1) < lq.view(-1, 1, 1, 1)
        o64 = o64.masked_fill(~valid, 0)
    (o64 * d_o.double()).sum().backward()
    o = o64.detach().to(tdtype).contiguous()
    stats = stats64.detach().float().masked_fill(~torch.isfinite(stats64.detach()), 0).contiguous()
    Q, K, V, O, DO, ST = (g.tensor_like(t) for t in (q, k, v, o, d_o, stats))
    grads = g.sdpa_backward(Q, K, V, O, DO, ST, attn_scale=scale, **kw)
    outs = list(grads) + [kw[x] for x in ("dBias", "dSink_token") if x in kw]
    for t in outs:
        t.set_output(True)
    g.validate()
    bufs = [poisoned(t, torch.float32 if t is kw.get("dSink_token") else tdtype) for t in outs]
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({Q: q, K: k, V: v, O: o, DO: d_o, ST: stats, **feeds_extra, **dict(zip(outs, bufs))}, None)
    torch.cuda.synchronize()
    expected = [t.grad for t in leaves] + [t.grad for t in (bias64, sink64) if t is not None]
    names = ["dQ", "dK", "dV"] + [n for n, t in (("dBias", bias64), ("dSink", sink64)) if t is not None]
    for i, (got, want) in enumerate(zip(bufs, expected)):
        if valid is not None and names[i] in ("dQ", "dBias"):  # padded query rows are undefined
            rows = valid if names[i] == "dQ" else valid[:1]
            got, want = got.masked_fill(~rows, 0), want.masked_fill(~rows, 0)
        assert rel_err(got, want) < 2 * tol, names[i]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
def test_backward_plain(dtype, d):
    run_sdpa_backward(dtype, d=d)


BACKWARD_CASES = {
    "causal-gqa": dict(causal=True, h_q=8, h_k=2),
    "padding-causal": dict(padding=True, causal=True),
    "bias-dbias": dict(bias=True, s_q=128, s_kv=128),
    "dropout-mask": dict(drop_mask=True),
    "sink-causal": dict(sink=True, causal=True),
    "sink": dict(sink=True),
    "alibi-causal-6heads": dict(alibi=True, causal=True, h_q=6, h_k=3),
}


@pytest.mark.parametrize("case", list(BACKWARD_CASES))
def test_backward_options(case):
    if case in REFUSED_BACKWARD:
        expect_refusal(lambda: run_sdpa_backward("fp16", **BACKWARD_CASES[case]), f"erratum {REFUSED_BACKWARD[case]}",
                       f"sdpa backward {case} (erratum)", report=xfail_refused)
    run_sdpa_backward("fp16", **BACKWARD_CASES[case])


@pytest.mark.parametrize("impl", [AI.COMPOSITE, AI.AUTO])
def test_forward_with_padded_head_and_sequence_strides(impl):
    """Non-dense q / k / v (a padded head stride and a padded sequence stride): another project saw such strides
    corrupt attention silently."""
    b, h, s_q, s_kv, d = 2, 4, 96, 160, 64
    tdtype, cdtype, tol = DTYPES["fp16"]

    def padded(s, extra_d, extra_s):
        base = torch.randn(b, h, s + extra_s, d + extra_d, device="cuda", dtype=tdtype)
        return base[:, :, :s, :d]  # strides keep the padding

    q, k, v = padded(s_q, 8, 0), padded(s_kv, 0, 16), padded(s_kv, 16, 8)
    scale = 1 / math.sqrt(d)
    g = cudnn.pygraph(io_data_type=cdtype, intermediate_data_type=F, compute_data_type=F)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    assert Q.get_stride()[2] == d + 8
    O, STATS = g.sdpa(Q, K, V, generate_stats=True, attn_scale=scale, implementation=impl)
    O.set_output(True)
    STATS.set_output(True).set_data_type(F)
    g.validate()
    o, stats = poisoned(O, tdtype), poisoned(STATS, torch.float32)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({Q: q, K: k, V: v, O: o, STATS: stats}, None)
    torch.cuda.synchronize()
    check("fp16", o, stats, (q, k, v, scale), {})


def padded_backward(dtype, b=2, h=4, s_q=96, s_kv=160, d=64):
    """sdpa_backward over non-dense q, k, v, O, dO into non-dense, NaN-poisoned dQ, dK, dV (padded head and
    sequence strides). Returns a run() that builds and executes it and checks the gradients against float64
    autograd and that the padding between rows stayed untouched."""
    tdtype, cdtype, tol = DTYPES[dtype]

    def padded(s, extra_d, extra_s, fill=None):
        shape = (b, h, s + extra_s, d + extra_d)
        base = torch.randn(shape, device="cuda", dtype=tdtype) if fill is None else \
            torch.full(shape, fill, device="cuda", dtype=tdtype)
        return base, base[:, :, :s, :d]  # the view keeps the padding in its strides

    (_, q), (_, k), (_, v), (_, d_o) = padded(s_q, 8, 0), padded(s_kv, 0, 16), padded(s_kv, 16, 8), padded(s_q, 8, 4)
    scale = 1 / math.sqrt(d)
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    o64, stats64 = reference_attention(*leaves, scale, causal=True)
    (o64 * d_o.double()).sum().backward()
    _, o = padded(s_q, 16, 8, 0.0)
    o.copy_(o64.detach())
    stats = stats64.detach().float().contiguous()
    g = cudnn.pygraph(io_data_type=cdtype, intermediate_data_type=F, compute_data_type=F)
    Q, K, V, O, DO, ST = (g.tensor_like(t) for t in (q, k, v, o, d_o, stats))
    grads = g.sdpa_backward(Q, K, V, O, DO, ST, attn_scale=scale, use_causal_mask=True)
    bases, outs = [], []
    for t, rows, (extra_d, extra_s) in zip(grads, (s_q, s_kv, s_kv), ((8, 8), (16, 0), (0, 16))):
        base, view = padded(rows, extra_d, extra_s, float("nan"))  # poisoned, padding included
        t.set_output(True).set_dim(list(view.shape)).set_stride(list(view.stride()))
        bases.append(base)
        outs.append(view)

    def run():
        g.validate()
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.execute({Q: q, K: k, V: v, O: o, DO: d_o, ST: stats, **dict(zip(grads, outs))}, None)
        torch.cuda.synchronize()
        errors = {}
        for name, leaf, base, view in zip(("dQ", "dK", "dV"), leaves, bases, outs):
            untouched = torch.ones_like(base, dtype=torch.bool)
            untouched[:, :, :view.shape[2], :view.shape[3]] = False
            assert torch.isnan(base[untouched]).all(), f"{name}: the padding between rows was written"
            errors[name] = rel_err(view, leaf.grad)
        return errors, 2 * tol

    return run


@pytest.mark.parametrize("dt", ["fp16", "bf16"])
def test_backward_with_padded_strides(dt):
    """Padded (non-dense) strides in the attention backward (seen corrupting gradients with CUDA.jl, never here;
    the operation graph is the official frontend's, so no erratum refuses it): gradients right, padding untouched."""
    errors, tol = padded_backward(dt)()
    assert all(e < tol for e in errors.values()), errors


def test_score_max_and_sum_exp():
    b, h, s_q, s_kv, d = 2, 4, 100, 150, 64
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for s in (s_q, s_kv, s_kv))
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=F, compute_data_type=F)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    MX = g.tensor([b, h, s_q, 1], data_type=F)
    SE = g.tensor([b, h, s_q, 1], data_type=F)
    O, _ = g.sdpa(Q, K, V, generate_stats=False, attn_scale=0.125, use_causal_mask=True, score_max=MX,
                  score_sum_exp=SE)
    O.set_output(True)
    g.validate()
    o, mx, se = poisoned(O, torch.float16), poisoned(MX, torch.float32), poisoned(SE, torch.float32)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({Q: q, K: k, V: v, O: o, MX: mx, SE: se}, None)
    torch.cuda.synchronize()
    o_ref, stats_ref = reference_attention(q, k, v, 0.125, causal=True)
    assert rel_err(o, o_ref) < DTYPES["fp16"][2]
    assert rel_err(mx + torch.log(se), stats_ref) < STATS_TOL


def test_score_mod_softcap():
    """A score_mod callback (softcap: 30 · tanh(S / 30)) in the composite forward."""
    b, h, s_q, s_kv, d = 2, 4, 100, 150, 64
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for s in (s_q, s_kv, s_kv))
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=F, compute_data_type=F)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    O, STATS = g.sdpa(Q, K, V, generate_stats=True, attn_scale=0.125,
                      score_mod=lambda graph, s: graph.mul(graph.tanh(graph.div(s, 30.0)), 30.0))
    O.set_output(True)
    STATS.set_output(True).set_data_type(F)
    g.validate()
    o, stats = poisoned(O, torch.float16), poisoned(STATS, torch.float32)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({Q: q, K: k, V: v, O: o, STATS: stats}, None)
    torch.cuda.synchronize()
    s = q.double() @ k.double().transpose(-1, -2) * 0.125
    s = 30.0 * torch.tanh(s / 30.0)
    stats_ref = torch.logsumexp(s, dim=-1, keepdim=True)
    assert rel_err(o, torch.exp(s - stats_ref) @ v.double()) < DTYPES["fp16"][2]
    assert rel_err(stats, stats_ref) < STATS_TOL


class _Softcap:
    """cap · tanh(S / cap) and its bprop (tanh_backward of the pre-tanh value the forward callback built)."""

    def __init__(self, cap):
        self.cap, self.pre_tanh = cap, None

    def forward(self, graph, score):
        self.pre_tanh = graph.div(score, self.cap)
        return graph.mul(graph.tanh(self.pre_tanh), self.cap)

    def backward(self, graph, d_score):
        return graph.tanh_backward(d_score, self.pre_tanh)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_score_mod_softcap_forward_and_backward(dtype):
    """A training step with a softcap score_mod: cudnn_py's forward (O, Stats), then its backward from them with
    score_mod + score_mod_bprop, against float64 autograd of the softcap attention. cap = 2 keeps tanh far from
    linear on these scores."""
    b, h, s_q, s_kv, d, cap = 2, 4, 100, 150, 64, 2.0
    tdtype, cdtype, tol = DTYPES[dtype]
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=tdtype) for s in (s_q, s_kv, s_kv))
    d_o = torch.randn(b, h, s_q, d, device="cuda", dtype=tdtype)
    scale = 1 / math.sqrt(d)
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    s = cap * torch.tanh(leaves[0] @ leaves[1].transpose(-1, -2) * scale / cap)
    stats_ref = torch.logsumexp(s, dim=-1, keepdim=True)
    o_ref = torch.exp(s - stats_ref) @ leaves[2]
    (o_ref * d_o.double()).sum().backward()

    g = cudnn.pygraph(io_data_type=cdtype, intermediate_data_type=F, compute_data_type=F)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    O, STATS = g.sdpa(Q, K, V, generate_stats=True, attn_scale=scale, score_mod=_Softcap(cap).forward)
    O.set_output(True)
    STATS.set_output(True).set_data_type(F)
    g.validate()
    o, stats = poisoned(O, tdtype), poisoned(STATS, torch.float32)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({Q: q, K: k, V: v, O: o, STATS: stats}, None)
    torch.cuda.synchronize()
    assert rel_err(o, o_ref.detach()) < tol
    assert rel_err(stats, stats_ref.detach()) < STATS_TOL

    mod = _Softcap(cap)
    gb = cudnn.pygraph(io_data_type=cdtype, intermediate_data_type=F, compute_data_type=F)
    Qb, Kb, Vb, Ob, DOb, STb = (gb.tensor_like(t) for t in (q, k, v, o, d_o, stats))
    grads = gb.sdpa_backward(Qb, Kb, Vb, Ob, DOb, STb, attn_scale=scale, score_mod=mod.forward,
                             score_mod_bprop=mod.backward)
    for t in grads:
        t.set_output(True)
    gb.validate()
    bufs = [poisoned(t, tdtype) for t in grads]
    gb.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    gb.execute({Qb: q, Kb: k, Vb: v, Ob: o, DOb: d_o, STb: stats, **dict(zip(grads, bufs))}, None)
    torch.cuda.synchronize()
    for name, got, leaf in zip(("dQ", "dK", "dV"), bufs, leaves):
        assert rel_err(got, leaf.grad) < 2 * tol, name


def test_unfuse_fma_runs_on_the_unified_op_or_is_refused_with_the_version():
    """unfuse_fma is the unified op's (cuDNN >= 9.22): computed and checked there, refused clearly below."""
    if versions.runtime_version() < 92200:
        expect_refusal(lambda: run_sdpa("bf16", AI.AUTO, unfuse_fma=True), r"unfuse_fma needs cuDNN >= 9\.22",
                       "sdpa unfuse_fma (needs cuDNN 9.22)")
    o, stats, inputs, ref = run_sdpa("bf16", AI.UNIFIED, unfuse_fma=True)
    check("bf16", o, stats, inputs, ref)
