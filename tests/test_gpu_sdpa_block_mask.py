"""GPU: the unified attention forward with a block mask (one INT8 entry per 128 x 128 tile of the scores) against
a float64 attention written here. cuDNN documents the mask's shape, not its values: cudnn_py reads nonzero as "keep
the tile" and zero as "mask it"; every test also scores cuDNN's output against the opposite reading and puts both
errors in its assertion message and in its ``OUTCOME:`` line (run with ``-s`` or ``-rA``), so a disagreement says
which reading the GPU followed. Rows whose tiles are all masked are defined as in cudnn_py's reference (O = 0,
Stats = -inf, no NaN). Outputs are NaN-poisoned; fresh random inputs; s_q / s_kv not multiples of 128; fp16 and
bf16. Where cuDNN (or the erratum table) refuses the graph on this GPU, the test asserts the refusal is the expected
one and is reported skipped or xfailed with its words (tests/support/refusals.py), never passed."""
from __future__ import annotations

import math

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.plans.device_gates import compute_capability
from tests.support.refusals import expect_refusal, xfail_refused

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
F = cudnn.data_type.FLOAT
AI = cudnn.attention_implementation
DTYPES = {"fp16": (torch.float16, cudnn.data_type.HALF, 1e-2), "bf16": (torch.bfloat16, cudnn.data_type.BFLOAT16, 2e-2)}
STATS_TOL = 2e-3
TILE = 128
ERRATUM = "sdpa-block-mask-sm10x-before-9.26"


def outcome(text: str) -> None:
    print(f"\nOUTCOME: {text}")


def poisoned(t, dtype):
    """NaN-filled device memory laid out as the graph tensor ``t`` (its dims and strides)."""
    dims, strides = tuple(t.get_dim()), tuple(t.get_stride())
    size = 1 + sum((d - 1) * st for d, st in zip(dims, strides))
    return torch.full((size,), float("nan"), device="cuda", dtype=dtype).as_strided(dims, strides)


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def tiles_kept(mask, s_q, s_kv, keep_nonzero):
    """(b, h, s_q, s_kv) booleans of the scores kept by a (b, h, ceil(s_q / 128), ceil(s_kv / 128)) block mask."""
    tile = ((mask != 0) if keep_nonzero else (mask == 0)).to(torch.uint8)
    return tile.repeat_interleave(TILE, dim=2).repeat_interleave(TILE, dim=3)[:, :, :s_q, :s_kv].bool()


def reference(q, k, v, scale, mask, keep_nonzero=True, seq_q=None, seq_kv=None):
    """float64 O and Stats (max + ln Σ exp) of softmax(padding_mask(block_mask(Q Kᵀ) · scale)) V; a row with no
    kept score has O = 0 and Stats = -inf. Returns (O, Stats, the fully masked rows (b, h, s_q, 1))."""
    q, k, v = q.double(), k.double(), v.double()
    h = q.shape[1]
    k = k.repeat_interleave(h // k.shape[1], dim=1)
    v = v.repeat_interleave(h // v.shape[1], dim=1)
    s = q @ k.transpose(-1, -2) * scale
    s_q, s_kv = s.shape[-2:]
    keep = tiles_kept(mask, s_q, s_kv, keep_nonzero)
    if seq_q is not None:
        i = torch.arange(s_q, device=s.device).view(-1, 1)
        j = torch.arange(s_kv, device=s.device).view(1, -1)
        keep = keep & (i < seq_q.view(-1, 1, 1, 1)) & (j < seq_kv.view(-1, 1, 1, 1))
    dead = ~keep.any(dim=-1, keepdim=True)
    s = s.masked_fill(~keep, float("-inf")).masked_fill(dead, 0.0)
    p = torch.softmax(s, dim=-1).masked_fill(dead, 0.0)
    stats = torch.logsumexp(s, dim=-1, keepdim=True).masked_fill(dead, float("-inf"))
    return p @ v, stats, dead


def block_mask(b, h, s_q, s_kv):
    """Random INT8 tiles (values 0 and 1..99) with chosen patterns: about half the rows of tiles lose their first
    key tile while their last one is kept (the case the SM10x erratum is about), (0, 1) keeps everything, and
    (0, 0) masks its first row of tiles entirely (fully masked rows)."""
    t_q, t_kv = -(-s_q // TILE), -(-s_kv // TILE)
    keep = torch.rand(b, h, t_q, t_kv, device="cuda") > 0.4
    values = torch.randint(1, 100, (b, h, t_q, t_kv), device="cuda", dtype=torch.int8)
    mask = torch.where(keep, values, torch.zeros_like(values))
    first_masked = torch.rand(b, h, t_q, device="cuda") > 0.5
    mask[..., 0] = torch.where(first_masked, torch.zeros_like(mask[..., 0]), mask[..., 0])
    mask[..., -1] = torch.where(mask[..., -1] == 0, torch.ones_like(mask[..., -1]), mask[..., -1])
    if h > 1:
        mask[0, 1] = 1
    mask[0, 0, 0, :] = 0
    return mask


def _block_mask_available():
    return versions.available("CUDNN_ATTR_OPERATION_SDPA_FWD_BLOCK_MASK_DESC") and versions.runtime_version() >= 91400


def _sm10x_erratum():
    cc = compute_capability(torch.cuda.current_device())
    return 100 <= cc <= 109 and versions.runtime_version() < 92600


def run(dtype, impl=AI.AUTO, b=2, h_q=4, h_k=4, s_q=200, s_kv=300, d=64, padding=False, generate_stats=True):
    """Build, plan and run one sdpa graph with a block mask; returns (O, Stats or None, inputs, reference keywords)."""
    tdtype, cdtype, _ = DTYPES[dtype]
    q = torch.randn(b, h_q, s_q, d, device="cuda", dtype=tdtype)
    k, v = (torch.randn(b, h_k, s_kv, d, device="cuda", dtype=tdtype) for _ in range(2))
    mask = block_mask(b, h_q, s_q, s_kv)
    scale = 1 / math.sqrt(d)
    g = cudnn.pygraph(io_data_type=cdtype, intermediate_data_type=F, compute_data_type=F)
    Q, K, V, M = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v), g.tensor_like(mask)
    assert M.get_data_type() is cudnn.data_type.INT8
    feeds, kw, ref = {Q: q, K: k, V: v, M: mask}, {}, {}
    if padding:
        lq = torch.randint(1, s_q + 1, (b, 1, 1, 1), dtype=torch.int32, device="cuda")
        lkv = torch.randint(TILE + 1, s_kv + 1, (b, 1, 1, 1), dtype=torch.int32, device="cuda")  # past tile 0
        lq[0], lkv[0] = s_q, s_kv
        SQ, SKV = g.tensor_like(lq), g.tensor_like(lkv)
        feeds.update({SQ: lq, SKV: lkv})
        kw.update(use_padding_mask=True, seq_len_q=SQ, seq_len_kv=SKV)
        ref.update(seq_q=lq, seq_kv=lkv)
    O, STATS = g.sdpa(Q, K, V, generate_stats=generate_stats, attn_scale=scale, block_mask=M, implementation=impl,
                      **kw)
    O.set_output(True)
    if STATS is not None:
        STATS.set_output(True).set_data_type(F)
    g.validate()
    o = poisoned(O, tdtype)
    stats = poisoned(STATS, torch.float32) if STATS is not None else None
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({**feeds, O: o, **({STATS: stats} if STATS is not None else {})}, None)
    torch.cuda.synchronize()
    return o, stats, (q, k, v, scale, mask), ref


def check(dtype, o, stats, inputs, ref, label):
    """O (and Stats) against the nonzero-keeps reading; the opposite reading's errors go into the message."""
    q, k, v, scale, mask = inputs
    tol = DTYPES[dtype][2]
    valid = torch.ones(o.shape[:3] + (1,), dtype=torch.bool, device="cuda")
    if "seq_q" in ref:  # rows past a batch's query length are padding: not written, not compared
        valid = torch.arange(o.shape[2], device="cuda").view(1, 1, -1, 1) < ref["seq_q"].view(-1, 1, 1, 1)
    errs, dead = {}, None
    for reading, keep_nonzero in (("nonzero keeps", True), ("zero keeps", False)):
        o_ref, stats_ref, dead_rows = reference(q, k, v, scale, mask, keep_nonzero, **ref)
        if keep_nonzero:
            dead = dead_rows & valid
        o_cmp = o.double().masked_fill(~valid, 0)
        errs[reading] = rel_err(o_cmp, o_ref.masked_fill(~valid, 0))
        if stats is not None:
            live = valid & ~dead_rows
            errs[f"stats, {reading}"] = rel_err(stats.double().masked_fill(~live, 0), stats_ref.masked_fill(~live, 0))
    assert dead is not None and bool(dead.any()), "the mask pattern should leave some rows fully masked"
    finite = torch.isfinite(o.masked_fill(~valid, 0)).all().item()
    dead_o = o.double()[dead.expand_as(o)]
    dead_stats = stats[dead].tolist()[:4] if stats is not None else []
    note = (f"{label} on compute capability {compute_capability(torch.cuda.current_device()) / 10:.1f}, cuDNN "
            f"{cudnn.backend_version()}: " + ", ".join(f"rel err ({r}) {e:.2e}" for r, e in errs.items()) +
            f"; fully masked rows: {int(dead.sum())}, their O all zero: {bool((dead_o == 0).all())}, "
            f"NaN in them: {bool(dead_o.isnan().any())}, Stats there: {dead_stats}")
    outcome(note)
    assert finite, f"O is not finite everywhere (NaN poison left, or NaN / inf computed): {note}"
    assert errs["nonzero keeps"] < tol, note
    if stats is not None:
        assert not stats[valid.expand_as(stats)].isnan().any(), f"Stats has NaN: {note}"
        assert errs["stats, nonzero keeps"] < STATS_TOL, note


def _run_or_no_engine(dtype, **kw):
    """run(); where cuDNN has no block-mask engine for this GPU (on the H200, SM 9.0, cuDNN 9.19's unified engines
    turn the pattern down and the Blackwell one is the only other) the test is reported xfailed with cuDNN's
    reasons. That refusal must be cuDNN's own (a cudnnGraphNotSupportedError with its reasons), and is accepted
    below compute capability 10.0 only."""
    try:
        return run(dtype, **kw)
    except cudnn.cudnnGraphNotSupportedError as e:
        cc = compute_capability(torch.cuda.current_device())
        if cc >= 100 or "No valid engine configs" not in str(e):
            raise
        xfail_refused("sdpa with a block mask (no engine for it here)", e)


def _expect_refusal_or_skip(padding=False):
    """cuDNN too old for the block mask (or its padding), or the SM10x erratum: the graph must be refused
    clearly, and the test is reported skipped (the version) or xfailed (the erratum) with the refusal."""
    if not _block_mask_available():
        expect_refusal(lambda: run("fp16"), r"block_mask= needs the unified SDPA_FWD op",
                       "sdpa with a block mask (needs cuDNN 9.14)")
    if padding and versions.runtime_version() < 91500:
        pytest.skip(f"the unified padding mask needs cuDNN >= 9.15; this is {versions.runtime_version()}")
    if _sm10x_erratum():
        expect_refusal(lambda: run("fp16", padding=padding), f"erratum {ERRATUM}",
                       f"sdpa with a block mask (erratum {ERRATUM})", report=xfail_refused)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
def test_block_mask_forward_with_stats(dtype, d):
    _expect_refusal_or_skip()
    o, stats, inputs, ref = _run_or_no_engine(dtype, d=d)
    check(dtype, o, stats, inputs, ref, f"{dtype} d={d}")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_block_mask_inference(dtype):
    _expect_refusal_or_skip()
    o, stats, inputs, ref = _run_or_no_engine(dtype, generate_stats=False, s_q=257, s_kv=129)
    assert stats is None
    check(dtype, o, None, inputs, ref, f"{dtype} inference s_q=257 s_kv=129")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_block_mask_with_padding(dtype):
    _expect_refusal_or_skip(padding=True)
    o, stats, inputs, ref = _run_or_no_engine(dtype, padding=True, s_q=300, s_kv=333)
    check(dtype, o, stats, inputs, ref, f"{dtype} padding")


def test_block_mask_gqa_explicit_unified():
    _expect_refusal_or_skip()
    o, stats, inputs, ref = _run_or_no_engine("fp16", impl=AI.UNIFIED, h_q=8, h_k=2, s_q=130, s_kv=390)
    check("fp16", o, stats, inputs, ref, "fp16 gqa 8/2 UNIFIED")


def test_block_mask_with_causal_is_refused_clearly():
    """A causal mask goes through the unified op's score subgraph, which cudnn_py does not build yet, and the
    composite takes no block mask: refused at validate(), naming both."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=F, compute_data_type=F)
    q = torch.randn(1, 2, 200, 64, device="cuda", dtype=torch.float16)
    Q, K, V = (g.tensor_like(q) for _ in range(3))
    M = g.tensor_like(block_mask(1, 2, 200, 200))
    g.sdpa(Q, K, V, generate_stats=True, block_mask=M, use_causal_mask=True)[0].set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"block_mask= needs the unified.*causal / band masks"):
        g.validate()
