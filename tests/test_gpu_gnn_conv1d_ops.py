"""GPU tests of ``cudnn.gnn`` (agg_simple, mha_gat, mha_gat_v2) and the conv1d torch functions of ``cudnn.ops``
(causal_conv1d_nwh, b2b_causal_conv1d, fft_causal_conv1d) against float64 torch references, outputs poisoned
(NaN) first where cuDNN writes into a buffer we hand it. On a cuDNN that lacks the C API (9.19 predates libcudnn_ext:
causal conv1d is 9.22, the FFT paths 9.26, the GNN ops 9.28) each test skips saying so, and one test checks the
refusal itself: a CApiUnavailableError (a RuntimeError), never a crash."""
from __future__ import annotations

import pytest

from cudnn_py.backend import ext_loader
from cudnn_py.errors import CApiUnavailableError

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
from tests.test_ext_capi_gpu import causal_reference, need  # noqa: E402  (the C-API tests' gate and reference)

F = torch.nn.functional


@pytest.fixture(autouse=True)
def poisoned(monkeypatch):
    """Every float tensor the operators allocate uninitialised (their outputs, gradients and workspaces) starts as
    NaN, so a value cuDNN did not write cannot pass for a right one (index tensors are left as they come: a poisoned
    index would be read out of bounds, not detected)."""
    empty, empty_like = torch.empty, torch.empty_like

    def fill(t):
        if t.is_floating_point() and t.is_cuda:
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: fill(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: fill(empty_like(*a, **k)))


def _cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


def _close(got, want, tol):
    torch.testing.assert_close(got.double(), want.double(), atol=tol, rtol=tol)


# ---- GNN ---------------------------------------------------------------------------------------------------------
def _graph(device="cuda", seed=0, n_src=7, n_dst=5):
    g = torch.Generator().manual_seed(seed)
    deg = torch.randint(1, 4, (n_dst,), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), deg.cumsum(0)])
    indices = torch.randint(0, n_src, (int(deg.sum()),), generator=g)
    import cudnn_py as cudnn

    return cudnn.gnn.CscGraph(offsets.to(device, torch.int32), indices.to(device, torch.int32), n_src)


def _dst_of_edges(graph):
    off = graph.offsets.long().cpu()
    return torch.repeat_interleave(torch.arange(len(off) - 1), off[1:] - off[:-1]).to(graph.offsets.device)


def _agg_reference(graph, node, edge, concat, aggr):
    dst, src = _dst_of_edges(graph), graph.indices.long()
    parts = []
    for feats in (node[src] if node is not None else None, edge):
        if feats is None:
            continue
        feats = feats.double()
        out = torch.zeros(graph.num_dst_nodes, feats.shape[1], dtype=torch.float64, device=feats.device)
        reduce = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}[aggr]
        out = out.scatter_reduce(0, dst[:, None].expand_as(feats), feats, reduce, include_self=False)
        parts.append(out)
    if concat is not None:
        parts.append(concat.double())
    return torch.cat(parts, 1)


@pytest.mark.parametrize("aggr", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_agg_simple_against_float64(aggr, dtype, tol):
    need("cudnnGnnAggSimpleForward")
    import cudnn_py as cudnn

    graph = _graph()
    torch.manual_seed(1)
    node = torch.randn(7, 6, device="cuda", dtype=dtype, requires_grad=True)
    edge = torch.randn(graph.num_edges, 3, device="cuda", dtype=dtype, requires_grad=True)
    concat = torch.randn(5, 2, device="cuda", dtype=dtype, requires_grad=True)
    y = cudnn.gnn.agg_simple(graph, node_features=node, edge_features=edge, concat_features=concat, aggr=aggr)
    leaves = [t.detach().double().requires_grad_() for t in (node, edge, concat)]
    ref = _agg_reference(graph, *leaves, aggr)
    _close(y, ref, tol)
    g = torch.randn_like(ref)
    y.backward(g.to(dtype))
    ref.backward(g)
    for got, want in zip((node.grad, edge.grad, concat.grad), leaves):
        _close(got, want.grad, tol * 10)


def _gat_reference(graph, src, dst, edge, weights, heads, concat, v2, alpha=0.2):
    """GAT / GATv2 in float64 from the definitions: per edge a logit per head, leaky-relu, softmax over each
    destination's edges, the source features weighted and summed; heads concatenated or averaged."""
    d_of_e, s_of_e = _dst_of_edges(graph), graph.indices.long()
    n_dst, dim = dst.shape[0], src.shape[1]
    hd = dim // heads
    xs, xd = src[s_of_e].view(-1, heads, hd), dst[d_of_e].view(-1, heads, hd)
    if v2:
        act = xs + xd + (edge.view(-1, heads, hd) if edge is not None else 0)
        logits = (F.leaky_relu(act, alpha) * weights.view(heads, hd)).sum(-1)
    else:
        ws, wd = weights[:dim].view(heads, hd), weights[dim:2 * dim].view(heads, hd)
        logits = (xs * ws).sum(-1) + (xd * wd).sum(-1)
        if edge is not None:
            de = edge.shape[1] // heads
            logits = logits + (edge.view(-1, heads, de) * weights[2 * dim:].view(heads, de)).sum(-1)
        logits = F.leaky_relu(logits, alpha)
    m = torch.full((n_dst, heads), -torch.inf, dtype=logits.dtype, device=logits.device)
    m = m.scatter_reduce(0, d_of_e[:, None].expand_as(logits), logits, "amax")
    p = torch.exp(logits - m[d_of_e])
    z = torch.zeros(n_dst, heads, dtype=p.dtype, device=p.device).index_add(0, d_of_e, p)
    att = p / z[d_of_e]
    out = torch.zeros(n_dst, heads, hd, dtype=p.dtype, device=p.device).index_add(0, d_of_e, att[..., None] * xs)
    return (out.reshape(n_dst, dim) if concat else out.mean(1)), att.t()


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize("concat,heads,with_edge", [(True, 2, False), (False, 2, True), (True, 1, True)])
def test_mha_gat_against_float64(v2, concat, heads, with_edge):
    need("cudnnGnnMhaGatV2Forward" if v2 else "cudnnGnnMhaGatForward")
    import cudnn_py as cudnn

    graph = _graph(seed=3)
    torch.manual_seed(2)
    dim = 8
    src = torch.randn(7, dim, device="cuda", requires_grad=True)
    dst = torch.randn(5, dim, device="cuda", requires_grad=True)
    de = dim if v2 else 4
    edge = torch.randn(graph.num_edges, de, device="cuda", requires_grad=True) if with_edge else None
    nw = dim if v2 else 2 * dim + (de if with_edge else 0)
    weights = (torch.randn(nw, device="cuda") * 0.5).requires_grad_()
    fn = cudnn.gnn.mha_gat_v2 if v2 else cudnn.gnn.mha_gat
    out, att = fn(graph, (src, dst), weights, edge_features=edge, num_heads=heads, concat_heads=concat,
                  return_attention_weights=True)
    leaves = [t.detach().double().requires_grad_() if t is not None else None for t in (src, dst, edge, weights)]
    ref, ref_att = _gat_reference(graph, *leaves, heads, concat, v2)
    _close(out, ref, 1e-4)
    _close(att, ref_att, 1e-4)
    g = torch.randn_like(ref)
    out.backward(g.float())
    ref.backward(g)
    for got, want in zip((src.grad, dst.grad, edge.grad if edge is not None else None, weights.grad), leaves):
        if want is not None:
            _close(got, want.grad, 1e-3)


@pytest.mark.parametrize("v2", [False, True])
def test_mha_gat_deterministic_backward_matches(v2):
    need("cudnnGnnMhaGatV2Backward" if v2 else "cudnnGnnMhaGatBackward")
    import cudnn_py as cudnn

    graph = _graph(seed=4).with_reverse_csc()
    torch.manual_seed(5)
    x = torch.randn(7, 8, device="cuda", requires_grad=True)
    w = torch.randn(8 if v2 else 16, device="cuda", requires_grad=True)
    fn = cudnn.gnn.mha_gat_v2 if v2 else cudnn.gnn.mha_gat
    grads = []
    for det in (False, True, True):
        x.grad = w.grad = None
        fn(graph, x, w, num_heads=2, deterministic=det).sum().backward()
        grads.append((x.grad.clone(), w.grad.clone()))
    for a, b in zip(grads[0], grads[1]):
        _close(a, b, 1e-4)
    assert all(torch.equal(a, b) for a, b in zip(grads[1], grads[2]))  # deterministic: bit for bit


# ---- conv1d ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float64, 1e-10), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("activation", ["identity", "silu"])
def test_causal_conv1d_nwh_against_float64(dtype, tol, activation):
    need("cudnnCausalConv1dNwhForward")
    import cudnn_py as cudnn

    torch.manual_seed(0)
    x = torch.randn(2, 64, 16, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(4, 16, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(16, device="cuda", dtype=dtype, requires_grad=True)
    y = cudnn.ops.causal_conv1d_nwh(x, w, b, activation)
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref = causal_reference(xr.transpose(1, 2), wr.t(), br, activation == "silu").transpose(1, 2)
    _close(y, ref, tol * 10)
    g = torch.randn_like(ref)
    y.backward(g.to(dtype))
    ref.backward(g)
    for got, want in ((x.grad, xr.grad), (w.grad, wr.grad), (b.grad, br.grad)):
        _close(got, want, tol * 100)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float64, 1e-10), (torch.bfloat16, 5e-2)])
def test_b2b_causal_conv1d_against_float64(dtype, tol):
    need("cudnnB2BCausalConv1dForward")
    import cudnn_py as cudnn

    torch.manual_seed(0)
    dim = 8
    x = torch.randn(2, 3 * dim, 32, device="cuda", dtype=dtype, requires_grad=True)
    wp = (torch.randn(3 * dim, 3, device="cuda", dtype=dtype) * 0.5).requires_grad_()
    wm = (torch.randn(dim, 5, device="cuda", dtype=dtype) * 0.5).requires_grad_()
    sb = torch.randn(dim, device="cuda", dtype=dtype, requires_grad=True)
    y = cudnn.ops.b2b_causal_conv1d(x, wp, wm, sb)
    xr, wpr, wmr, sbr = (t.detach().double().requires_grad_() for t in (x, wp, wm, sb))
    proj = causal_reference(xr, wpr, None, False)
    gated = proj[:, 1::3] * proj[:, 2::3]
    ref = (causal_reference(gated, wmr, None, False) + sbr[:, None] * gated) * proj[:, 0::3]
    _close(y, ref, tol * 10)
    g = torch.randn_like(ref)
    y.backward(g.to(dtype))
    ref.backward(g)
    for got, want in ((x.grad, xr.grad), (wp.grad, wpr.grad), (wm.grad, wmr.grad), (sb.grad, sbr.grad)):
        _close(got, want, tol * 100)


@pytest.mark.parametrize("seq_len,kernel", [(256, 128), (300, 100), (4096, 6000), (8192, 20000)])  # the last: long path
def test_fft_causal_conv1d_against_float64(seq_len, kernel):
    need("cudnnLongFFTCausalConv1dForward")
    import cudnn_py as cudnn

    torch.manual_seed(0)
    x = torch.randn(2, 4, seq_len, device="cuda", requires_grad=True)
    w = (torch.randn(4, kernel, device="cuda") / kernel ** 0.5).requires_grad_()
    y = cudnn.ops.fft_causal_conv1d(x, w)
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = causal_reference(xr, wr.flip(1), None, False)  # FIR order: weight[0] multiplies the newest sample
    _close(y, ref, 1e-3)
    g = torch.randn_like(ref)
    y.backward(g.float())
    ref.backward(g)
    _close(x.grad, xr.grad, 1e-3)
    _close(w.grad, wr.grad, 1e-2)


def test_a_cudnn_without_the_c_api_refuses_with_a_runtime_error():
    """Where the loaded cuDNN lacks the family (9.19), the operators refuse at the call into it, as the official's
    bindings do: CApiUnavailableError, a RuntimeError naming the version that has it."""
    _cuda()
    import cudnn_py as cudnn

    if not ext_loader.why_unavailable("cudnnGnnAggSimpleForward"):
        pytest.skip("the loaded cuDNN has the GNN C API: nothing is refused")
    graph = _graph()
    with pytest.raises(CApiUnavailableError, match="needs cuDNN 9.28") as info:
        cudnn.gnn.agg_simple(graph, node_features=torch.randn(7, 4, device="cuda"))
    assert isinstance(info.value, RuntimeError)
    if ext_loader.why_unavailable("cudnnCausalConv1dNwhForward"):
        with pytest.raises(CApiUnavailableError, match="needs cuDNN 9.22"):
            cudnn.ops.causal_conv1d_nwh(torch.randn(1, 8, 4, device="cuda"), torch.randn(4, 4, device="cuda"))
    if ext_loader.why_unavailable("cudnnFFTCausalConv1dForward"):
        with pytest.raises(CApiUnavailableError, match="needs cuDNN 9.26"):
            cudnn.ops.fft_causal_conv1d(torch.randn(1, 4, 256, device="cuda"), torch.randn(4, 128, device="cuda"))
