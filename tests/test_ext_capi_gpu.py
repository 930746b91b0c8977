"""GPU tests of the C-API families (libcudnn_ext): causal conv1d (forward and autograd) against a torch reference,
and the GNN sum aggregation against a numpy-style torch reference. They skip, saying why, on a cuDNN that does not
export the functions (cuDNN 9.19, the GPU machine's, predates them: causal conv1d is 9.22, the GNN ops later)."""
from __future__ import annotations

import pytest

from cudnn_py.backend import ext_loader

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def need(name: str) -> None:
    """Skip, saying why, where there is no GPU or the loaded cuDNN lacks the C-API function ``name``."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    why = ext_loader.why_unavailable(name)
    if why:
        pytest.skip(f"the loaded cuDNN lacks {name} (9.19 predates the C-API families of libcudnn_ext): {why}")


def causal_reference(x, w, b, silu):
    """The causal depthwise conv1d of x (B, D, T) with w (D, K) and bias b (or None) in float64: torch's conv1d,
    left padded."""
    k = w.shape[1]
    xp = torch.nn.functional.pad(x.double(), (k - 1, 0))
    y = torch.nn.functional.conv1d(xp, w.double().unsqueeze(1), None if b is None else b.double(), groups=x.shape[1])
    return torch.nn.functional.silu(y) if silu else y


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float64, 1e-10), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("activation", [None, "silu"])
def test_causal_conv1d_against_torch(dtype, tol, activation):
    need("cudnnCausalConv1dForward")
    import cudnn_py as cudnn

    torch.manual_seed(0)
    x = torch.randn(2, 16, 64, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(16, 4, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(16, device="cuda", dtype=dtype, requires_grad=True)
    y = cudnn.ops.causal_conv1d(x, w, b, activation)
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref = causal_reference(xr, wr, br, activation == "silu")
    torch.testing.assert_close(y.double(), ref, atol=tol * 10, rtol=tol)
    g = torch.randn_like(ref)
    y.backward(g.to(dtype))
    ref.backward(g)
    for got, want in ((x.grad, xr.grad), (w.grad, wr.grad), (b.grad, br.grad)):
        torch.testing.assert_close(got.double(), want, atol=tol * 100, rtol=tol * 10)


def test_gnn_agg_sum_against_torch():
    need("cudnnGnnAggSimpleForward")
    import cudnn_py as cudnn

    # CSC: destination j's sources are indices[offsets[j]:offsets[j+1]]
    offsets = torch.tensor([0, 2, 3, 6], device="cuda", dtype=torch.int32)
    indices = torch.tensor([0, 1, 2, 0, 3, 1], device="cuda", dtype=torch.int32)
    feats = torch.randn(4, 8, device="cuda", dtype=torch.float32)
    out = torch.full((3, 8), float("nan"), device="cuda")
    cudnn.gnn_agg_simple_forward(torch.cuda.current_stream().cuda_stream, offsets.data_ptr(), indices.data_ptr(), 0,
                                 4, 3, 6, 4, feats.data_ptr(), 0, 0, out.data_ptr(), 0, 8, 0, 0, 0,
                                 cudnn.gnn_agg_op.SUM)
    torch.cuda.synchronize()
    ref = torch.stack([feats[indices[offsets[j]:offsets[j + 1]].long()].sum(0) for j in range(3)])
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
