"""GPU: graphs the IR passes rewrite, executed by cuDNN and compared with the float64 reference engine.

* the diagonal band mask: a composite decomposed on the IR (GEN_INDEX / ADD / CMP / BINARY_SELECT with virtual
  intermediates) or, on cuDNN >= 9.21, the unified OPERATION_DIAGONAL_BAND_MASK - the seam SDPA lands on;
* the legalize pass: rank-1 and rank-2 graphs (padded to rank 3) and long 1-D pointwise graphs (folded).
Fresh random inputs, outputs poisoned with NaN, relative error against float64.
"""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import ReferenceEngine

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

AI, DA = cudnn.attention_implementation, cudnn.diagonal_alignment
H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def run_cudnn(g, pack):
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute(pack, None)
    torch.cuda.synchronize()


def reference(build, inputs: dict):
    """The same graph on the float64 reference engine (from its definition, not from the decomposition)."""
    g, ins, out = build()
    g.register_backend(ReferenceEngine())
    g.validate()
    result = np.zeros(tuple(out.get_dim()))
    g.execute({**{t: inputs[i].double().cpu().numpy() for i, t in enumerate(ins)}, out: result})
    return torch.from_numpy(result)


def compare(out, ref, tol):
    out, ref = out.double().cpu(), ref.double()
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(out), finite), "masked (-inf) positions differ"
    assert not torch.isnan(out).any(), "an element was not written"
    err = ((out[finite] - ref[finite]).norm() / ref[finite].norm()).item()
    assert err < tol, err


BANDS = [dict(right_bound=0), dict(right_bound=3), dict(left_bound=5), dict(left_bound=6, right_bound=0),
         dict(right_bound=0, diagonal_alignment=DA.BOTTOM_RIGHT)]


@pytest.mark.parametrize("impl", [AI.AUTO, AI.COMPOSITE, AI.UNIFIED])
@pytest.mark.parametrize("kw", BANDS, ids=lambda kw: "-".join(f"{k}={getattr(v, 'name', v)}" for k, v in kw.items()))
def test_band_mask_matches_the_reference(impl, kw):
    if impl is AI.UNIFIED and versions.runtime_version() < 92100:
        pytest.skip("the unified op needs cuDNN 9.21 (tested on the CPU that it is refused)")
    shape = (2, 4, 64, 96)
    x = torch.randn(*shape, device="cuda", dtype=torch.float16)

    def build():
        g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
        X = g.tensor_like(x)
        Y = g.diagonal_band_mask(X, implementation=impl, **kw).set_output(True)
        return g, [X], Y

    g, (X,), Y = build()
    y = torch.full(shape, float("nan"), device="cuda", dtype=torch.float16)
    run_cudnn(g, {X: x, Y: y})
    compare(y, reference(build, [x]), 1e-3)


def test_band_mask_fused_after_a_matmul():
    """A masked score matrix, as in attention: S = Q @ K^T, then the causal mask, in one graph (batch 1)."""
    q = torch.randn(1, 128, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(1, 96, 64, device="cuda", dtype=torch.float16)
    kt = k.transpose(1, 2)

    def build():
        g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
        Q, K = g.tensor_like(q), g.tensor_like(kt)
        S = g.diagonal_band_mask(g.matmul(Q, K), right_bound=0).set_output(True).set_data_type(F)
        return g, [Q, K], S

    g, (Q, K), S = build()
    s = torch.full((1, 128, 96), float("nan"), device="cuda", dtype=torch.float32)
    run_cudnn(g, {Q: q, K: kt, S: s})
    compare(s, reference(build, [q, kt]), 5e-3)


def test_band_mask_after_a_batched_matmul_is_refused():
    """cuDNN 9.19 computes GEN_INDEX wrongly for batches after the first in a batched matmul's epilogue (seen:
    the mask of batch 1 differs from the reference). cudnn_py refuses the graph, naming the erratum."""
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    Q, K = g.tensor([2, 64, 32], data_type=H, name="q"), g.tensor([2, 32, 96], data_type=H, name="kt")
    g.diagonal_band_mask(g.matmul(Q, K), right_bound=0, implementation=AI.COMPOSITE).set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="gen-index-in-batched-matmul-epilogue"):
        g.build([cudnn.heur_mode.A])


@pytest.mark.parametrize("n", [1 << 20, 3 << 18, 1000])
def test_long_vector_pointwise(n):
    a = torch.randn(n, device="cuda", dtype=torch.float32)
    b = torch.randn(n, device="cuda", dtype=torch.float32)
    c = torch.full((n,), float("nan"), device="cuda", dtype=torch.float32)
    g = cudnn.pygraph(io_data_type=F, compute_data_type=F)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.add(g.mul(A, 0.5), B).set_output(True)
    run_cudnn(g, {A: a, B: b, C: c})
    ref = a.double() * 0.5 + b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-6
