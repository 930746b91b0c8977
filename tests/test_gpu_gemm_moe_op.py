"""cudnn.gemm.ops.moe_grouped_matmul on the GPU against a float64 torch reference, each mode, output poisoned
first. Where cuDNN refuses the graph (cuDNN 9.19 on an H100: "FORT_NATIVE_10X engine is only supported since
Blackwell"), the test is reported xfailed with the refusal's words (tests/support/refusals.py), never passed."""
from __future__ import annotations

import pytest

import cudnn_py as cudnn
from tests.support.refusals import xfail_refused

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)


def _reference(mode, tok, w, starts, idx, ks, top_k, rows):
    """float64: the expert of row r is the last whose start is <= r (over the output rows in gather)."""
    tok64, w64 = tok[0].double(), w.double()
    n = w.shape[2]
    bounds = [int(s) for s in starts.flatten()] + [rows]
    out = torch.zeros(rows, n, dtype=torch.float64, device=tok.device)
    for e in range(w.shape[0]):
        for r in range(bounds[e], bounds[e + 1]):
            src = int(idx[0, r, 0]) if mode == "gather" else r
            y = tok64[src] @ w64[e]
            dst = int(idx[0, r, 0]) * top_k + int(ks[0, r, 0]) if mode == "scatter" else r
            out[dst] = y
    return out


@pytest.mark.parametrize("boundaries", [False, True], ids=["G starts", "G+1 boundaries"])
@pytest.mark.parametrize("mode", ["none", "gather", "scatter"])
def test_moe_grouped_matmul_against_float64(mode, boundaries):
    from cudnn_py.gemm.ops import moe_grouped_matmul

    t, k, n, e, top_k = 64, 64, 32, 4, 2
    torch.manual_seed(0)
    tok = torch.randn(1, t, k, device="cuda", dtype=torch.half)
    w = (torch.randn(e, k, n, device="cuda", dtype=torch.half) / k ** 0.5)
    rows = t * top_k if mode == "gather" else t
    starts = [0, rows // 8, rows // 2, rows - rows // 4]
    off = torch.tensor(starts + ([rows] if boundaries else []), device="cuda", dtype=torch.int32).reshape(-1, 1, 1)
    idx = ks = None
    if mode == "gather":
        idx = torch.randint(0, t, (1, rows, 1), device="cuda", dtype=torch.int32)
    if mode == "scatter":
        dest = torch.randperm(t, device="cuda")
        idx, ks = (x.to(torch.int32).reshape(1, t, 1) for x in (dest // top_k, dest % top_k))
    try:
        out = moe_grouped_matmul(tok, w, off, token_index=idx, token_ks=ks, mode=mode, top_k=top_k)
    except cudnn.cudnnGraphNotSupportedError as exc:
        xfail_refused(f"moe_grouped_matmul mode={mode}", exc)
    torch.cuda.synchronize()
    assert out.shape == (1, rows, n) and out.dtype == torch.half
    ref = _reference(mode, tok, w, torch.tensor(starts), idx, ks, top_k, rows)
    err = ((out[0].double() - ref).norm() / ref.norm()).item()
    assert err < 5e-3, err
