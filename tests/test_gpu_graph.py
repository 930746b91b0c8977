"""GPU: classic-API graphs lowered by cudnn_py, executed by cuDNN, compared with float64 references.

Fresh random inputs every test, outputs poisoned (NaN) before each run, relative error ‖out − ref‖ / ‖ref‖
within the dtype's tolerance.
"""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

TOL = {torch.float32: 5e-3, torch.float16: 5e-3, torch.bfloat16: 2e-2}  # fp32 io may run as TF32 on tensor cores
CDT = {torch.float32: cudnn.data_type.FLOAT, torch.float16: cudnn.data_type.HALF, torch.bfloat16: cudnn.data_type.BFLOAT16}


def rel_err(out, ref) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    assert torch.isfinite(out).all(), "output has NaN/Inf: not every element was written"
    return ((out - ref).norm() / ref.norm()).item()


def poisoned(shape, dtype, **kw):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype, **kw)


def rnd(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def run(g, pack, **kw):
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    g.execute(pack, None, **kw)
    torch.cuda.synchronize()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_matmul_dtypes_fp32_compute(dtype):
    a, b = rnd(2, 64, 96, dtype=dtype), rnd(2, 96, 48, dtype=dtype)
    c = poisoned((2, 64, 48), dtype)
    g = cudnn.pygraph(io_data_type=CDT[dtype], intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.matmul(A, B)
    C.set_output(True)
    run(g, {A: a, B: b, C: c})
    assert rel_err(c, a.double() @ b.double()) < TOL[dtype]


def test_matmul_broadcast_batch_and_transposed_strides():
    a = rnd(8, 32, 64, dtype=torch.float16)
    bt = rnd(1, 16, 64, dtype=torch.float16)      # stored as [1, N, K]
    b = bt.transpose(1, 2)                           # a [1, K, N] view with strides (K*N, 1, K)
    c = poisoned((8, 32, 16), torch.float16)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    A = g.tensor(dim=[8, 32, 64], stride=[2048, 64, 1], data_type=cudnn.data_type.HALF)
    B = g.tensor(dim=[1, 64, 16], stride=list(b.stride()), data_type=cudnn.data_type.HALF)
    C = g.matmul(A, B)
    C.set_output(True)
    run(g, {A: a, B: b, C: c})
    assert list(C.get_dim()) == [8, 32, 16]
    assert rel_err(c, a.double() @ b.double()) < TOL[torch.float16]


def test_matmul_bias_relu_fused():
    a, b, bias = rnd(4, 128, 64, dtype=torch.float16), rnd(4, 64, 32, dtype=torch.float16), rnd(1, 1, 32, dtype=torch.float16)
    out = poisoned((4, 128, 32), torch.float16)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    A, B, Bias = g.tensor_like(a), g.tensor_like(b), g.tensor_like(bias)
    Y = g.relu(input=g.bias(input=g.matmul(A, B), bias=Bias))
    Y.set_output(True).set_data_type(cudnn.data_type.HALF)
    run(g, {A: a, B: b, Bias: bias, Y: out})
    ref = torch.relu(a.double() @ b.double() + bias.double())
    assert rel_err(out, ref) < TOL[torch.float16]


@pytest.mark.parametrize("epilogue", ["gelu", "swish"])
def test_matmul_activation_epilogues(epilogue):
    a, b = rnd(2, 64, 64, dtype=torch.bfloat16), rnd(2, 64, 64, dtype=torch.bfloat16)
    out = poisoned((2, 64, 64), torch.bfloat16)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    A, B = g.tensor_like(a), g.tensor_like(b)
    Y = getattr(g, epilogue)(g.matmul(A, B))
    Y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    run(g, {A: a, B: b, Y: out})
    mm = a.double() @ b.double()
    ref = torch.nn.functional.gelu(mm) if epilogue == "gelu" else mm * torch.sigmoid(mm)
    assert rel_err(out, ref) < TOL[torch.bfloat16]


def test_pointwise_chain_with_pass_by_value_scalars():
    x, y = rnd(4, 16, 32), rnd(4, 16, 32)
    out = poisoned((4, 16, 32), torch.float32)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X, Y = g.tensor_like(x), g.tensor_like(y)
    Z = g.add(g.mul(X, 0.5), g.scale(Y, 3.0))   # python scalars become pass-by-value tensors
    W = g.sub(g.exp(g.tanh(Z)), 1.25)
    W.set_output(True)
    run(g, {X: x, Y: y, W: out})
    xd, yd = x.double(), y.double()
    ref = torch.exp(torch.tanh(0.5 * xd + 3.0 * yd)) - 1.25
    assert rel_err(out, ref) < 1e-5


def test_runtime_scalar_from_host_tensor():
    x = rnd(2, 8, 16)
    out = poisoned((2, 8, 16), torch.float32)
    s = torch.tensor([1.75], dtype=torch.float32)  # CPU tensor -> pass-by-value, value given at execute
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X, S = g.tensor_like(x), g.tensor_like(s)
    Y = g.mul(X, S)
    Y.set_output(True)
    run(g, {X: x, S: s, Y: out})
    assert rel_err(out, x.double() * 1.75) < 1e-6


@pytest.mark.parametrize("mode,fn", [("ADD", lambda t, d: t.sum(d, keepdim=True)),
                                     ("MAX", lambda t, d: t.amax(d, keepdim=True)),
                                     ("AMAX", lambda t, d: t.abs().amax(d, keepdim=True))])
@pytest.mark.parametrize("axes", [(0, 2, 3), (1,), (0, 1, 2, 3)], ids=["per-channel", "per-pixel", "all"])
def test_reductions(mode, fn, axes):
    # cuDNN's reduction engines take a channels-last (NHWC) input and a FLOAT output, and only row, column or
    # all reductions of its [N*H*W, C] view: per-channel (columns), per-pixel (rows) or everything. Reducing
    # C, H and W together ([N,1,1,1]) has no engine on 9.19 / H200.
    x = rnd(4, 32, 8, 8).to(memory_format=torch.channels_last)
    ydim = [1 if i in axes else d for i, d in enumerate(x.shape)]
    out = poisoned(tuple(ydim), torch.float32).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor_like(x)
    Y = g.reduction(X, mode=getattr(cudnn.reduction_mode, mode))
    Y.set_output(True).set_dim(ydim).set_stride(list(out.stride()))
    run(g, {X: x, Y: out})
    ref = fn(x.double(), axes)
    if mode == "ADD":
        # a sum of signed values can nearly cancel: its float32 rounding error is bounded by eps times the sum of the
        # magnitudes, not by eps times the (possibly tiny) result, so the error is measured against that scale
        scale = x.double().abs().sum(axes, keepdim=True)
        assert float(((out.double() - ref).abs() / scale).max()) < 1e-6
    else:
        assert rel_err(out, ref) < 1e-5


def test_build_all_plans_and_execute_each():
    a, b = rnd(1, 128, 128, dtype=torch.float16), rnd(1, 128, 128, dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.matmul(A, B)
    C.set_output(True)
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.B, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans(cudnn.build_plan_policy.ALL)
    n = g.get_execution_plan_count()
    names = [g.get_plan_name_at_index(i) for i in range(n)]
    assert len(set(names)) == n, f"configs must be deduplicated across modes: {names}"
    assert any("_k" in name for name in names), f"knob choices were not read back: {names}"
    ref = a.double() @ b.double()
    executed = 0
    for i in range(n):
        try:
            ws_size = g.get_workspace_size_plan_at_index(i)
        except RuntimeError:
            continue  # this config did not build
        c = poisoned((1, 128, 128), torch.float16)
        ws = torch.empty(max(ws_size, 1), dtype=torch.uint8, device="cuda")
        g.execute_plan_at_index({A: a, B: b, C: c}, ws, i)
        torch.cuda.synchronize()
        assert rel_err(c, ref) < TOL[torch.float16], names[i]
        executed += 1
    assert executed >= 1


def test_reference_engine_selected_through_router():
    from cudnn_py.engines.reference import ReferenceEngine

    a, b = rnd(2, 16, 8), rnd(2, 8, 4)
    c = poisoned((2, 16, 4), torch.float32)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    g.register_backend(ReferenceEngine())
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.relu(g.matmul(A, B))
    C.set_output(True)
    g.build([cudnn.heur_mode.A])
    assert g.selected_engine is not None and isinstance(g.selected_engine, ReferenceEngine)
    g.execute({A: a, B: b, C: c})
    torch.cuda.synchronize()
    assert rel_err(c, torch.relu(a.double() @ b.double())) < 1e-6


def test_cupy_operands():
    cp = pytest.importorskip("cupy")
    a = cp.random.standard_normal((2, 32, 16)).astype(cp.float32)
    b = cp.random.standard_normal((2, 32, 16)).astype(cp.float32)
    out = cp.full((2, 32, 16), cp.nan, dtype=cp.float32)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.mul(A, B)
    C.set_output(True)
    g.build([cudnn.heur_mode.A])
    g.execute({A: a, B: b, C: out})
    cp.cuda.runtime.deviceSynchronize()
    ref = cp.asnumpy(a).astype(np.float64) * cp.asnumpy(b).astype(np.float64)
    got = cp.asnumpy(out).astype(np.float64)
    assert np.isfinite(got).all()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-6


def built_add(x, y):
    """A planned z = x + y graph (float32) over tensors like x and y."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X, Y = g.tensor_like(x), g.tensor_like(y)
    Z = g.add(X, Y)
    Z.set_output(True)
    g.build([cudnn.heur_mode.A])
    return g, X, Y, Z


def test_int_pointer_operands_and_uid_keys():
    x, y = rnd(3, 40), rnd(3, 40)
    out = poisoned((3, 40), torch.float32)
    g, X, Y, Z = built_add(x, y)
    ws = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device="cuda")
    g.execute({X.get_uid(): x.data_ptr(), Y.get_uid(): y.data_ptr(), Z.get_uid(): out.data_ptr()}, ws.data_ptr())
    torch.cuda.synchronize()
    assert rel_err(out, x.double() + y.double()) < 1e-6


def test_execute_on_non_default_stream():
    s = torch.cuda.Stream()
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=s.cuda_stream)
    x = rnd(64, 1024)
    out = poisoned((64, 1024), torch.float32)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    X = g.tensor_like(x)
    Y = g.sigmoid(X)
    Y.set_output(True)
    g.build([cudnn.heur_mode.A])
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        g.execute({X: x, Y: out}, None, handle=handle)
    s.synchronize()
    assert rel_err(out, torch.sigmoid(x.double())) < 1e-6
    cudnn.destroy_handle(handle)


def test_bad_variant_packs_raise_value_error():
    x, y = rnd(2, 8), rnd(2, 8)
    out = poisoned((2, 8), torch.float32)
    g, X, Y, Z = built_add(x, y)
    with pytest.raises(ValueError, match="missing"):
        g.execute({X: x, Z: out})
    with pytest.raises(ValueError, match="shape"):
        g.execute({X: x, Y: rnd(2, 7), Z: out})  # another shape is read as a buffer: this one is too small
    with pytest.raises(ValueError, match="dtype|HALF|FLOAT"):
        g.execute({X: x, Y: y.half(), Z: out})
    with pytest.raises(ValueError, match="host|CPU|GPU"):
        g.execute({X: x, Y: y.cpu(), Z: out})
    g.execute({X: x, Y: y, Z: out})  # and the good one still works after the failures
    torch.cuda.synchronize()
    assert rel_err(out, x.double() + y.double()) < 1e-6
    # the same mistakes once the fast path (cached binding) is installed
    g.execute({X: x, Y: y, Z: out})
    with pytest.raises(ValueError, match="missing"):
        g.execute({X: x, Z: out})
    with pytest.raises(ValueError, match="shape"):
        g.execute({X: x, Y: y[:, :4], Z: out})  # same pointer, other shape, with gaps
    g.execute({X: x, Y: y.reshape(1, 16), Z: out})  # same pointer, other shape, dense: read as a buffer (official)
    torch.cuda.synchronize()
    assert rel_err(out, x.double() + y.double()) < 1e-6
    # another graph's tensor is taken by its uid, as the official module takes it: one that declares otherwise
    # than this graph's tensor of that uid is refused; one that names a tensor the pack gives already, too
    with pytest.raises(ValueError, match="not a non-virtual tensor"):
        g.execute({X: x, Y: y, Z: out, cudnn.pygraph().tensor(dim=[3, 8], stride=[8, 1]): y})
    with pytest.raises(ValueError, match="two different buffers"):
        g.execute({X: x, Y: y, Z: out, cudnn.pygraph().tensor(dim=[2, 8], stride=[8, 1]): y})
    x2, y2 = rnd(2, 8), rnd(2, 8)
    out2 = poisoned((2, 8), torch.float32)
    g.execute({X: x2, Y: y2, Z: out2})
    torch.cuda.synchronize()
    assert rel_err(out2, x2.double() + y2.double()) < 1e-6


def test_no_engine_left_raises_graph_not_supported():
    x = rnd(2, 8)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor_like(x)
    Y = g.relu(X)
    Y.set_output(True)
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A])
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    g.deselect_engines([n.split("_")[0] for n in names])
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="deselected"):
        g.check_support()
