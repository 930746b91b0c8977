"""GPU: 1.32's ``cudnn.Graph`` end to end with real torch tensors: a conv_fprop + relu and a matmul built inside
``with cudnn.Graph(...) as graph:`` from torch tensors, run as ``graph(x, w)`` (outputs allocated by the wrapper)
and as ``graph({...})`` (outputs poisoned first where the test gives them), against float64 torch references; the
handle forms (a given handle, ``"auto"``, none) and the workspace the wrapper allocates."""
from __future__ import annotations

import pytest

import cudnn_py as cudnn

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

TOL = {torch.float16: 5e-3, torch.bfloat16: 2e-2}


def rel_err(out, ref):
    assert torch.isfinite(out).all(), "not every element was written (NaN poison left)"
    return ((out.double() - ref).norm() / ref.norm()).item()


def conv_inputs(dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    # NHWC storage viewed as NCHW, as the official example builds them
    x = torch.randn(4, 24, 24, 32, device="cuda", generator=gen).to(dtype).permute(0, 3, 1, 2)
    w = torch.randn(16, 3, 3, 32, device="cuda", generator=gen).to(dtype).permute(0, 3, 1, 2)
    return x, w


def conv_relu_ref(x, w):
    return torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), padding=1))


def build_conv_relu(x, w, **graph_kwargs):
    with cudnn.Graph(io_data_type=x.dtype, compute_data_type=torch.float32, **graph_kwargs) as graph:
        y = graph.conv_fprop(image=x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="conv2d")
        out = graph.relu(y, name="act")
        out.set_output(True).set_data_type(x.dtype)
    return graph, out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["half", "bfloat16"])
def test_conv_relu_positional(handle, dtype):
    x, w = conv_inputs(dtype)
    graph, out = build_conv_relu(x, w, handle=handle)
    graph.set_io_tuples(["conv2d::image", "conv2d::weight"], [out])
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    y = graph(x, w)
    torch.cuda.synchronize()
    # allocated like the graph's output tensor
    assert (list(y.shape), list(y.stride()), y.dtype) == (out.get_dim(), out.get_stride(), dtype)
    assert rel_err(y, conv_relu_ref(x, w)) < TOL[dtype]
    x2, w2 = conv_inputs(dtype, seed=1)  # new operands of the same layout: the same graph runs them
    y2 = graph(x2, w2)
    torch.cuda.synchronize()
    assert rel_err(y2, conv_relu_ref(x2, w2)) < TOL[dtype]


def test_conv_relu_dict_call_with_auto_handle():
    x, w = conv_inputs(torch.float16)
    graph, out = build_conv_relu(x, w, handle="auto")
    ref = conv_relu_ref(x, w)
    poisoned = torch.full(out.get_dim(), float("nan"), device="cuda", dtype=torch.float16).as_strided(
        out.get_dim(), out.get_stride())
    given = {"conv2d::image": x, "conv2d::weight": w, "act::OUT_0": poisoned}
    assert graph(given) is given and given["act::OUT_0"] is poisoned
    torch.cuda.synchronize()
    assert rel_err(poisoned, ref) < TOL[torch.float16]
    # the output left out is allocated into the dict; on a side stream, the default handle follows it
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x2, w2 = x.clone(), w.clone()
        result = graph({"conv2d::image": x2, "conv2d::weight": w2})
        handle = cudnn.wrapper.get_default_handle()
        assert handle.stream == side.cuda_stream
    side.synchronize()
    assert rel_err(result["act::OUT_0"], ref) < TOL[torch.float16]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["half", "bfloat16"])
def test_matmul_positional_and_dict(handle, dtype):
    gen = torch.Generator(device="cuda").manual_seed(2)
    a = torch.randn(3, 64, 96, device="cuda", generator=gen).to(dtype)
    b = torch.randn(3, 96, 48, device="cuda", generator=gen).to(dtype)
    with cudnn.Graph(handle=handle, io_data_type=dtype, compute_data_type=torch.float32,
                     inputs=[a, b], outputs=["mm::C"]) as graph:
        c = graph.matmul(a, b, name="mm")
        c.set_output(True).set_data_type(dtype)
    ref = a.double() @ b.double()
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    y = graph(a, b)
    torch.cuda.synchronize()
    assert y.shape == (3, 64, 48) and y.dtype == dtype
    assert rel_err(y, ref) < TOL[dtype]
    poisoned = torch.full((3, 64, 48), float("nan"), device="cuda", dtype=dtype)
    graph({"mm::0": a, "mm::1": b, c: poisoned})
    torch.cuda.synchronize()
    assert rel_err(poisoned, ref) < TOL[dtype]


def test_no_handle_needs_one_per_call_and_user_workspace(handle):
    x, w = conv_inputs(torch.float16)
    graph, out = build_conv_relu(x, w, workspace_alloc=False)
    graph.set_io_tuples([x, w], [out])
    with pytest.raises(RuntimeError, match="Need to specify cudnn handle"):
        graph(x, w)
    with pytest.raises(RuntimeError, match="Need to specify workspace"):
        graph(x, w, handle=handle)
    workspace = torch.empty(graph.get_workspace_size(), device="cuda", dtype=torch.uint8)
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    y = graph(x, w, handle=handle, workspace=workspace)
    torch.cuda.synchronize()
    assert rel_err(y, conv_relu_ref(x, w)) < TOL[torch.float16]
