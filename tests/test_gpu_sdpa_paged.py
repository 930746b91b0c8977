"""GPU: paged KV caches and ragged (THD) attention against the float64 attention of ``test_gpu_sdpa`` (itself
checked against torch's SDPA there), cross-checked here against torch's SDPA per batch on the unpaged, unpacked
tensors. Fresh random inputs, NaN-poisoned outputs, modest sizes; composite, unified (where the running cuDNN
takes it) and AUTO. (Written without a GPU; first run on the device by the lead.)"""
from __future__ import annotations

import itertools
import math

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from tests.test_gpu_sdpa import DTYPES, STATS_TOL, poisoned, reference_attention, rel_err  # noqa: E402

F, I32 = cudnn.data_type.FLOAT, cudnn.data_type.INT32
AI = cudnn.attention_implementation
HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]


def _unified_paged():
    return versions.available("CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC") and \
        versions.runtime_version() >= 91500


def _skip_unavailable(impl):
    if impl is AI.UNIFIED and not _unified_paged():
        pytest.skip("the unified op's paging / padding needs cuDNN >= 9.15")


def torch_per_batch(q, k, v, lq, lkv, scale, bottom_right=False, causal=False):
    """torch's SDPA in float64 on each batch's valid rows (an independent check of the reference)."""
    f = torch.nn.functional.scaled_dot_product_attention
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    for n in range(q.shape[0]):
        a, c = int(lq[n]), int(lkv[n])
        qn, kn, vn = q[n:n + 1, :, :a].double(), k[n:n + 1, :, :c].double(), v[n:n + 1, :, :c].double()
        mask = None
        if bottom_right or causal:
            i = torch.arange(a, device=q.device).view(-1, 1)
            j = torch.arange(c, device=q.device).view(1, -1)
            mask = j <= i + (c - a if bottom_right else 0)
        out[n, :, :a] = f(qn, kn, vn, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    return out


def valid_rows(x, lq):
    keep = torch.arange(x.shape[2], device=x.device).view(1, 1, -1, 1) < lq.view(-1, 1, 1, 1)
    return x.double().masked_fill(~keep, 0)


# ---- paged -------------------------------------------------------------------------------------------------------
def run_paged(dtype, impl, b, h_q, h_k, s_q, block, pages, d, bottom_right=False, stats=False, packed_tables=False):
    """A paged sdpa: K / V in page containers with random page tables (distinct pages, shuffled); returns O,
    Stats, and the dense caches and lengths the reference reads."""
    tdtype, cdtype, _ = DTYPES[dtype]
    s_kv = block * pages
    num_blocks = b * pages + 3  # some pages no sequence uses
    k_pages = torch.randn(num_blocks, h_k, block, d, device="cuda", dtype=tdtype)
    v_pages = torch.randn(num_blocks, h_k, block, d, device="cuda", dtype=tdtype)
    order = torch.randperm(num_blocks, device="cuda")[: b * pages].view(b, 1, pages, 1).to(torch.int32)
    k_table, v_table = order.clone(), order.flip(2).contiguous()  # K and V pages in different orders
    lkv = torch.randint(max(s_q, 1), s_kv + 1, (b, 1, 1, 1), dtype=torch.int32, device="cuda")
    lkv[0] = s_kv
    lq = torch.full((b, 1, 1, 1), s_q, dtype=torch.int32, device="cuda")
    q = torch.randn(b, h_q, s_q, d, device="cuda", dtype=tdtype)
    scale = 1 / math.sqrt(d)
    g = cudnn.pygraph(io_data_type=cdtype, intermediate_data_type=F, compute_data_type=F)
    Q, KP, VP = g.tensor_like(q), g.tensor_like(k_pages), g.tensor_like(v_pages)
    TK, TV, SQ, SKV = (g.tensor_like(x) for x in (k_table, v_table, lq, lkv))
    table_feeds = {TK: k_table, TV: v_table}
    if packed_tables:  # each batch's page indices, only as many as its sequence needs, back to back
        counts = [-(-int(n) // block) for n in lkv.view(-1)]
        offsets = torch.tensor([0] + list(itertools.accumulate(counts)), dtype=torch.int32,
                               device="cuda").view(-1, 1, 1, 1)
        table_feeds = {}
        for T, table in ((TK, k_table), (TV, v_table)):
            OFF = g.tensor_like(offsets)
            T.set_ragged_offset(OFF)
            table_feeds[T] = torch.cat([table[n, 0, :c, 0] for n, c in enumerate(counts)]).contiguous()
            table_feeds[OFF] = offsets
    kw = dict(use_causal_mask_bottom_right=True) if bottom_right else {}
    O, STATS = g.sdpa(Q, KP, VP, generate_stats=stats, attn_scale=scale, use_padding_mask=True, seq_len_q=SQ,
                      seq_len_kv=SKV, paged_attention_k_table=TK, paged_attention_v_table=TV,
                      paged_attention_max_seq_len_kv=s_kv, implementation=impl, **kw)
    O.set_output(True)
    if stats:
        STATS.set_output(True).set_data_type(F)
    g.validate()  # output dims are inferred here: poison after it
    feeds = {Q: q, KP: k_pages, VP: v_pages, **table_feeds, SQ: lq, SKV: lkv}
    o = feeds[O] = poisoned(O, tdtype)
    st = None
    if stats:
        st = feeds[STATS] = poisoned(STATS, torch.float32)
    g.build(HEUR)
    g.execute(feeds, None)
    torch.cuda.synchronize()

    def dense(pages_t, table):  # (b, h, s_kv, d): each sequence's rows from its pages
        rows = torch.arange(s_kv, device="cuda")
        idx = table.view(b, pages).long()[:, rows // block]  # (b, s_kv) page per row
        return pages_t[idx, :, rows % block].permute(0, 2, 1, 3)

    return o, st, (q, dense(k_pages, k_table), dense(v_pages, v_table), scale), lq, lkv


def check_paged(dtype, o, st, inputs, lq, lkv, bottom_right=False):
    q, k, v, scale = inputs
    ref_o, ref_st = reference_attention(q, k, v, scale, bottom_right=bottom_right, seq_q=lq, seq_kv=lkv)
    assert rel_err(valid_rows(o, lq), valid_rows(ref_o, lq)) < DTYPES[dtype][2]
    torch_o = torch_per_batch(q, k, v, lq.view(-1), lkv.view(-1), scale, bottom_right=bottom_right)
    assert rel_err(valid_rows(ref_o, lq), torch_o) < 1e-6  # the reference and torch agree
    if st is not None:
        assert rel_err(valid_rows(st, lq), valid_rows(ref_st, lq)) < STATS_TOL


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("impl", [AI.COMPOSITE, AI.UNIFIED, AI.AUTO])
def test_paged_decode(dtype, impl):
    _skip_unavailable(impl)
    o, st, inputs, lq, lkv = run_paged(dtype, impl, b=3, h_q=8, h_k=8, s_q=1, block=32, pages=5, d=128)
    check_paged(dtype, o, st, inputs, lq, lkv)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("impl", [AI.COMPOSITE, AI.UNIFIED, AI.AUTO])
def test_paged_prefill_gqa(dtype, impl):
    """Prefill over a paged cache with GQA (8 q heads, 2 kv heads), Stats for training."""
    _skip_unavailable(impl)
    o, st, inputs, lq, lkv = run_paged(dtype, impl, b=2, h_q=8, h_k=2, s_q=64, block=64, pages=3, d=64,
                                       stats=True)
    check_paged(dtype, o, st, inputs, lq, lkv)


@pytest.mark.parametrize("impl", [AI.COMPOSITE, AI.UNIFIED, AI.AUTO])
def test_paged_decode_with_packed_page_tables(impl):
    """Packed page tables: each sequence lists only the pages it uses, found through the tables' offsets."""
    _skip_unavailable(impl)
    o, st, inputs, lq, lkv = run_paged("bf16", impl, b=3, h_q=4, h_k=2, s_q=1, block=16, pages=6, d=64,
                                       packed_tables=True)
    check_paged("bf16", o, st, inputs, lq, lkv)


def test_paged_prefill_gqa_bottom_right_causal():
    """Causal from the cache's end (the new tokens attend to the cache and to the earlier new tokens)."""
    o, st, inputs, lq, lkv = run_paged("fp16", AI.COMPOSITE, b=2, h_q=4, h_k=2, s_q=40, block=64, pages=2, d=64,
                                       bottom_right=True, stats=True)
    check_paged("fp16", o, st, inputs, lq, lkv, bottom_right=True)


# ---- ragged (THD) ------------------------------------------------------------------------------------------------
def packed(x, lens):
    """(b, h, s, d) -> the (Σ lens, h, d) THD buffer of each batch's first lens[b] rows."""
    return torch.cat([x[n, :, : int(lens[n])].transpose(0, 1) for n in range(x.shape[0])]).contiguous()


def unpacked(flat, lens, s):
    b, (_, h, d) = len(lens), flat.shape
    out = torch.zeros(b, h, s, d, dtype=flat.dtype, device=flat.device)
    start = 0
    for n in range(b):
        ln = int(lens[n])
        out[n, :, :ln] = flat[start:start + ln].transpose(0, 1)
        start += ln
    return out


def offsets(lens, h, d):
    return (torch.cat([torch.zeros(1, device="cuda", dtype=torch.int64), torch.cumsum(lens.view(-1).long(), 0)])
            * h * d).view(-1, 1, 1, 1).contiguous()


def ragged_lengths(b, s_q, s_kv):
    lq = torch.randint(1, s_q + 1, (b, 1, 1, 1), dtype=torch.int32, device="cuda")
    lkv = torch.randint(1, s_kv + 1, (b, 1, 1, 1), dtype=torch.int32, device="cuda")
    lq[0], lkv[0] = s_q, s_kv
    return lq, torch.maximum(lkv, lq)  # causal: every valid query keeps a key


def ragged_tensor(g, b, h, s, d, dt, offset):
    return g.tensor([b, h, s, d], [s * h * d, d, h * d, 1], data_type=dt, ragged_offset=offset)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("impl", [AI.COMPOSITE, AI.AUTO])
def test_ragged_causal_forward(dtype, impl):
    tdtype, cdtype, tol = DTYPES[dtype]
    b, h_q, h_k, s_q, s_kv, d = 3, 4, 2, 100, 130, 64
    lq, lkv = ragged_lengths(b, s_q, s_kv)
    q = torch.randn(b, h_q, s_q, d, device="cuda", dtype=tdtype)
    k, v = (torch.randn(b, h_k, s_kv, d, device="cuda", dtype=tdtype) for _ in range(2))
    scale = 1 / math.sqrt(d)
    g = cudnn.pygraph(io_data_type=cdtype, intermediate_data_type=F, compute_data_type=F)
    off_q, off_kv = offsets(lq, h_q, d), offsets(lkv, h_k, d)
    OFF_Q, OFF_KV = g.tensor_like(off_q), g.tensor_like(off_kv)
    Q = ragged_tensor(g, b, h_q, s_q, d, cdtype, OFF_Q)
    K, V = (ragged_tensor(g, b, h_k, s_kv, d, cdtype, OFF_KV) for _ in range(2))
    SQ, SKV = g.tensor_like(lq), g.tensor_like(lkv)
    O, STATS = g.sdpa(Q, K, V, generate_stats=True, attn_scale=scale, use_padding_mask=True, seq_len_q=SQ,
                      seq_len_kv=SKV, use_causal_mask=True, implementation=impl)
    O.set_output(True).set_ragged_offset(OFF_Q)
    STATS.set_output(True).set_data_type(F)
    total = int(lq.sum())
    o = torch.full((total, h_q, d), float("nan"), device="cuda", dtype=tdtype)
    g.validate()
    st = poisoned(STATS, torch.float32)
    g.build(HEUR)
    g.execute({Q: packed(q, lq), K: packed(k, lkv), V: packed(v, lkv), OFF_Q: off_q, OFF_KV: off_kv, SQ: lq,
               SKV: lkv, O: o, STATS: st}, None)
    torch.cuda.synchronize()
    ref_o, ref_st = reference_attention(q, k, v, scale, causal=True, seq_q=lq, seq_kv=lkv)
    assert rel_err(unpacked(o, lq.view(-1), s_q), valid_rows(ref_o, lq)) < tol  # every packed row written
    assert rel_err(valid_rows(st, lq), valid_rows(ref_st, lq)) < STATS_TOL
    torch_o = torch_per_batch(q, k, v, lq.view(-1), lkv.view(-1), scale, causal=True)
    assert rel_err(valid_rows(ref_o, lq), torch_o) < 1e-6


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("max_total", [False, True], ids=["dense_workspace", "max_total_seq_len"])
@pytest.mark.parametrize("h_k", [4, 2], ids=["mha", "gqa"])
def test_ragged_causal_backward(dtype, max_total, h_k):
    """dQ, dK, dV of packed q / k / v / o / dO against torch autograd of the float64 reference on the unpacked
    tensors (padded rows zero). GQA with max_total_seq_len_kv: the full-head dK / dV in the workspace, packed.
    (The GQA cases were written after the last device run: not yet run on a GPU.)"""
    tdtype, cdtype, tol = DTYPES[dtype]
    b, h, s_q, s_kv, d = 3, 4, 96, 120, 64
    lq, lkv = ragged_lengths(b, s_q, s_kv)
    scale = 1 / math.sqrt(d)

    def zero_pad(x, lens):
        keep = torch.arange(x.shape[2], device="cuda").view(1, 1, -1, 1) < lens.view(-1, 1, 1, 1)
        return x.masked_fill(~keep, 0)

    q, d_o = (zero_pad(torch.randn(b, h, s_q, d, device="cuda", dtype=tdtype), lq) for _ in range(2))
    k, v = (zero_pad(torch.randn(b, h_k, s_kv, d, device="cuda", dtype=tdtype), lkv) for _ in range(2))
    leaves = [x.double().requires_grad_() for x in (q, k, v)]
    ref_o, ref_st = reference_attention(*leaves, scale, causal=True, seq_q=lq, seq_kv=lkv)
    (valid_rows(ref_o, lq) * d_o.double()).sum().backward()
    o = ref_o.detach().to(tdtype)
    stats = ref_st.detach().float().nan_to_num(0.0, 0.0, 0.0).contiguous()
    g = cudnn.pygraph(io_data_type=cdtype, intermediate_data_type=F, compute_data_type=F)
    off_q, off_kv = offsets(lq, h, d), offsets(lkv, h_k, d)
    OFF_Q, OFF_KV = g.tensor_like(off_q), g.tensor_like(off_kv)
    Q, O, DO = (ragged_tensor(g, b, h, s_q, d, cdtype, OFF_Q) for _ in range(3))
    K, V = (ragged_tensor(g, b, h_k, s_kv, d, cdtype, OFF_KV) for _ in range(2))
    ST, SQ, SKV = g.tensor_like(stats), g.tensor_like(lq), g.tensor_like(lkv)
    kw = dict(max_total_seq_len_q=int(lq.sum()), max_total_seq_len_kv=int(lkv.sum())) if max_total else {}
    grads = g.sdpa_backward(Q, K, V, O, DO, ST, attn_scale=scale, use_padding_mask=True, seq_len_q=SQ,
                            seq_len_kv=SKV, use_causal_mask=True, **kw)
    lens = (lq, lkv, lkv)
    bufs = []
    for grad, off, ln, heads in zip(grads, (OFF_Q, OFF_KV, OFF_KV), lens, (h, h_k, h_k)):
        grad.set_output(True).set_ragged_offset(off)
        bufs.append(torch.full((int(ln.sum()), heads, d), float("nan"), device="cuda", dtype=tdtype))
    g.validate()
    g.build(HEUR)
    g.execute({Q: packed(q, lq), K: packed(k, lkv), V: packed(v, lkv), O: packed(o, lq), DO: packed(d_o, lq),
               ST: stats, OFF_Q: off_q, OFF_KV: off_kv, SQ: lq, SKV: lkv, **dict(zip(grads, bufs))}, None)
    torch.cuda.synchronize()
    for name, buf, leaf, ln, s in zip("qkv", bufs, leaves, lens, (s_q, s_kv, s_kv)):
        got = unpacked(buf, ln.view(-1), s)
        assert rel_err(got, valid_rows(leaf.grad, ln)) < 2 * tol, f"d{name}"
