"""GPU: concatenate against torch. (The normalizations moved to tests/test_gpu_norms.py.)"""
from __future__ import annotations

import pytest

import cudnn_py as cudnn

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def test_concatenate():
    a = torch.randn(2, 16, 64, device="cuda", dtype=torch.half)
    b = torch.randn(2, 48, 64, device="cuda", dtype=torch.half)
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    A, B = g.tensor_like(a), g.tensor_like(b)
    Y = g.concatenate([A, B], 1).set_output(True)
    g.validate()
    y = torch.full(tuple(Y.get_dim()), float("nan"), device="cuda", dtype=torch.half)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({A: a, B: b, Y: y}, None)
    torch.cuda.synchronize()
    assert torch.equal(y, torch.cat([a, b], 1))
