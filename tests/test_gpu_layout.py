"""GPU: the layout ops and rope, in the graph patterns cuDNN has engines for, against float64 torch references
(fresh random inputs, outputs poisoned with NaN before each run).

What the device told us so far (H200, cuDNN 9.19): a standalone concatenate finds no engine (heuristics A and
FALLBACK return 0 configs; the backend's reason is "(mmaNodeCount == 0) && !is_pointwise_fusion &&
(resampleNodeCount == 0)"), i.e. the fusion engines want a matmul / convolution, a pointwise fusion or a resample
in the graph. So the layout ops are tested feeding a matmul (the way the frontend's attention graphs use reshape),
and the lone ops are checked to be refused with a clear cudnnGraphNotSupportedError. TRANSPOSE, SLICE and the
RESHAPE mode need cuDNN 9.22, ROPE 9.24 / 9.25: below that the tests check the refusal names the version, and a
slice runs as the view alone (its output's pointer is the input's plus the offset).
"""
from __future__ import annotations

import pytest

import cudnn_py as cudnn
from cudnn_py.errors import FeatureVersionError
from tests.support.refusals import expect_refusal, xfail_refused

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT
MODES = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
TOL = 5e-3  # fp16 operands, fp32 accumulation


def rel_err(out, ref) -> float:
    assert torch.isfinite(out).all(), "not every element was written"
    return ((out.double() - ref).norm() / ref.norm()).item()


def poisoned(t, dtype=torch.half):
    """NaN-filled device memory laid out as the graph tensor ``t`` (its dims and strides)."""
    dims, strides = tuple(t.get_dim()), tuple(t.get_stride())
    size = 1 + sum((d - 1) * st for d, st in zip(dims, strides))
    return torch.full((size,), float("nan"), device="cuda", dtype=dtype).as_strided(dims, strides)


def rnd(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.half)


def graph():
    return cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)


def build_or_xfail(g, pattern):
    """Build, or xfail with cuDNN's words where heuristics offer no engine for the pattern (on the H200 with cuDNN
    9.19, 2026-12-01: concatenate before or after a matmul, and a reshape view before or after one, find none; the
    frontend's attention graphs use reshape inside the fused attention engines only). Any other error fails."""
    try:
        g.build(MODES)
    except cudnn.cudnnGraphNotSupportedError as e:
        if "No valid engine configs" not in str(e):
            raise
        pytest.xfail(f"{pattern} has no engine on cuDNN {cudnn.backend_version()}: {str(e)[:300]}")


def run(g, pack):
    g.build(MODES)
    g.execute(pack, None)
    torch.cuda.synchronize()


# ---- concatenate ---------------------------------------------------------------------------------------------------
def test_concatenate_feeding_a_matmul():
    a, b, w = rnd(2, 16, 64), rnd(2, 48, 64), rnd(2, 64, 32)
    g = graph()
    A, B, W = g.tensor_like(a), g.tensor_like(b), g.tensor_like(w)
    cat = g.concatenate([A, B], 1).set_data_type(H)
    C = g.matmul(cat, W).set_output(True).set_data_type(H)
    g.validate()
    c = poisoned(C)
    build_or_xfail(g, "concatenate + matmul")
    g.execute({A: a, B: b, W: w, C: c}, None)
    torch.cuda.synchronize()
    assert rel_err(c, torch.cat([a, b], 1).double() @ w.double()) < TOL


def test_concatenate_feeding_a_pointwise_op():
    """A pointwise fusion is the backend's other accepted pattern; xfail (with cuDNN's words) where it has none."""
    a, b, s = rnd(2, 16, 64), rnd(2, 48, 64), rnd(2, 64, 64)  # no broadcast (see the pointwise-broadcast erratum)
    g = graph()
    A, B, S = g.tensor_like(a), g.tensor_like(b), g.tensor_like(s)
    cat = g.concatenate([A, B], 1).set_data_type(H)
    Y = g.mul(cat, S).set_output(True).set_data_type(H)
    g.validate()
    y = poisoned(Y)
    try:
        g.build(MODES)
    except cudnn.cudnnGraphNotSupportedError as e:
        pytest.xfail(f"concatenate + pointwise has no engine on cuDNN {cudnn.backend_version()}: {e}")
    g.execute({A: a, B: b, S: s, Y: y}, None)
    torch.cuda.synchronize()
    assert rel_err(y, torch.cat([a, b], 1).double() * s.double()) < TOL


def test_standalone_concatenate_is_refused_clearly_or_correct():
    a, b = rnd(2, 16, 64), rnd(2, 48, 64)
    g = graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    Y = g.concatenate([A, B], 1).set_output(True)
    g.validate()
    y = poisoned(Y)
    try:
        g.build(MODES)
    except cudnn.cudnnGraphNotSupportedError as e:
        assert "No valid engine configs" in str(e) or "No execution plans" in str(e), str(e)
        xfail_refused("a standalone concatenate (no engine for it here)", e)
    g.execute({A: a, B: b, Y: y}, None)  # a cuDNN that has an engine for it must compute it right
    torch.cuda.synchronize()
    assert torch.equal(y, torch.cat([a, b], 1))


# ---- transpose -----------------------------------------------------------------------------------------------------
def test_transpose_feeding_a_matmul():
    a, b = rnd(2, 64, 32), rnd(2, 64, 16)
    g = graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    At = g.transpose(A, [0, 2, 1], name="t")
    C = g.matmul(At, B).set_output(True).set_data_type(H)
    if cudnn.backend_version() < 92200:
        expect_refusal(g.validate, r"transpose\(\) \(node 't'\).*needs cuDNN 9.22", "transpose (needs cuDNN 9.22)",
                       error=FeatureVersionError)
    g.validate()
    c = poisoned(C)
    build_or_xfail(g, "reshape (VIEW_ONLY) + matmul")
    g.execute({A: a, B: b, C: c}, None)
    torch.cuda.synchronize()
    assert rel_err(c, a.double().transpose(1, 2) @ b.double()) < TOL


# ---- reshape -------------------------------------------------------------------------------------------------------
def test_reshape_view_feeding_a_matmul():
    """VIEW_ONLY: A's memory [2, 32, 64] seen as [2, 64, 32] with swapped strides (A transposed), the frontend's
    attention-backward pattern."""
    a, b = rnd(2, 32, 64), rnd(2, 32, 16)
    g = graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    At = g.reshape(A, out_dims=[2, 64, 32]).set_stride([2048, 1, 64])
    C = g.matmul(At, B).set_output(True).set_data_type(H)
    g.validate()
    c = poisoned(C)
    build_or_xfail(g, "reshape (VIEW_ONLY) + matmul")
    g.execute({A: a, B: b, C: c}, None)
    torch.cuda.synchronize()
    assert rel_err(c, a.double().transpose(1, 2) @ b.double()) < TOL


def test_logical_reshape_feeding_a_matmul():
    a, b = rnd(2, 64, 32), rnd(2, 64, 16)
    g = graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    R = g.reshape(A, cudnn.reshape_mode.LOGICAL, name="r", out_dims=[2, 32, 64]).set_stride([2048, 64, 1])
    C = g.matmul(R, B).set_output(True).set_data_type(H)
    if cudnn.backend_version() < 92200:
        expect_refusal(g.validate, r"reshape node 'r' with reshape_mode.LOGICAL.*needs cuDNN 9.22",
                       "a LOGICAL reshape (needs cuDNN 9.22)", error=FeatureVersionError)
    g.validate()
    c = poisoned(C)
    run(g, {A: a, B: b, C: c})
    assert rel_err(c, a.double().reshape(2, 32, 64) @ b.double()) < TOL


# ---- slice ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rows", [slice(16, 80), slice(-64, None), slice(0, None, 2), slice(-100, 127, 2)],
                         ids=["middle", "negative_start", "step_2", "clamped_step_2"])
def test_slice_feeding_a_matmul(rows):
    x, b = rnd(2, 128, 64), rnd(2, 64, 32)
    g = graph()
    X, B = g.tensor_like(x), g.tensor_like(b)
    Y = g.slice(X, [slice(None), rows])
    C = g.matmul(Y, B).set_output(True).set_data_type(H)
    g.validate()
    assert list(Y.get_dim()) == list(x[:, rows].shape)
    c = poisoned(C)
    run(g, {X: x, B: b, C: c})
    assert rel_err(c, x[:, rows].double() @ b.double()) < TOL
    # again through the bound fast path, with other buffers: the view's pointer follows the new X
    x2, c2 = rnd(2, 128, 64), poisoned(C)
    g.execute({X: x2, B: b, C: c2}, None)
    g.execute({X: x2, B: b, C: c2}, None)
    torch.cuda.synchronize()
    assert rel_err(c2, x2[:, rows].double() @ b.double()) < TOL


def test_slice_at_an_offset_of_four_bytes():
    """A view two fp16 elements into X: its pointer is 4-byte aligned, and the tensor says so."""
    x, b = rnd(2, 64, 66), rnd(2, 64, 32)
    g = graph()
    X, B = g.tensor_like(x), g.tensor_like(b)
    Y = g.slice(X, [slice(None), slice(None), slice(2, None)])
    C = g.matmul(Y, B).set_output(True).set_data_type(H)
    g.validate()
    c = poisoned(C)
    try:
        g.build(MODES)
    except cudnn.cudnnGraphNotSupportedError as e:
        pytest.xfail(f"no engine reads a 4-byte-aligned matmul operand on cuDNN {cudnn.backend_version()}: {e}")
    g.execute({X: x, B: b, C: c}, None)
    torch.cuda.synchronize()
    assert rel_err(c, x[:, :, 2:].double() @ b.double()) < TOL


# ---- rope ----------------------------------------------------------------------------------------------------------
def _rotate(x, angles, scale, first, second):
    """Rotate the slot pairs (first[k], second[k]) of the last axis, each slot by its own angle."""
    cos, sin = torch.cos(angles) * scale, torch.sin(angles) * scale
    y = torch.empty_like(x)
    y[..., first] = x[..., first] * cos[..., first] - x[..., second] * sin[..., first]
    y[..., second] = x[..., second] * cos[..., second] + x[..., first] * sin[..., second]
    return y


def test_rope_forward():
    """No shared reference pins which slots cuDNN rotates together, so the output must match one of the two usual
    conventions (interleaved pairs (2k, 2k+1), or the halves (k, k + D/2)); the test prints which. The angles are
    chosen equal within a pair under both conventions, so only the pairing tells them apart."""
    bsz, heads, seq, d = 2, 4, 16, 64
    x = rnd(bsz, heads, seq, d)
    k = torch.arange(d, device="cuda")
    inv = 1.0 / (10000 ** (((k // 2) % (d // 4)).float() / (d // 4)))
    freqs = (torch.arange(seq, device="cuda", dtype=torch.float32)[:, None] * inv[None, :]).reshape(seq, 1, 1, d)
    g = graph()
    X, Fr = g.tensor_like(x), g.tensor_like(freqs.contiguous())
    Y = g.rope(X, Fr, 0.5, name="r").set_output(True)
    if cudnn.backend_version() < 92400:
        expect_refusal(g.validate, r"rope\(\) \(node 'r'\).*needs cuDNN 9.24", "rope (needs cuDNN 9.24)",
                       error=FeatureVersionError)
    g.validate()
    y = poisoned(Y)
    run(g, {X: x, Fr: freqs.contiguous(), Y: y})
    angles, xd, half = freqs.double().reshape(1, 1, seq, d), x.double(), torch.arange(d // 2, device="cuda")
    refs = {"interleaved": _rotate(xd, angles, 0.5, 2 * half, 2 * half + 1),
            "halves": _rotate(xd, angles, 0.5, half, half + d // 2)}
    errs = {name: rel_err(y, ref) for name, ref in refs.items()}
    assert min(errs.values()) < TOL, f"matches neither convention: {errs}"
    print(f"cuDNN {cudnn.backend_version()} ROPE_FWD pairing: {min(errs, key=errs.get)} ({errs})")


def test_rope_backward_needs_9_25():
    if cudnn.backend_version() >= 92500:
        pytest.skip("covered by the CPU lowering test; the pairing is pinned by test_rope_forward first")
    g = graph()
    dy = g.tensor([2, 4, 16, 64], name="dy")
    freqs = g.tensor([16, 1, 1, 64], name="freqs", data_type=F)
    g.rope_backward(dy, freqs, name="rb").set_output(True)
    with pytest.raises(FeatureVersionError, match=r"rope_backward\(\) \(node 'rb'\).*needs cuDNN 9.25"):
        g.validate()

