"""relu(A @ B + bias) with torch tensors, checked against a float64 reference. Needs a GPU and torch.

    python examples/with_torch.py

Graph tensors come from the arrays (``tensor_like``); execute runs on torch's current stream (here a side stream),
and ``workspace=None`` takes the workspace from torch's caching allocator on that stream.
"""
import torch

import cudnn_py as cudnn

a = torch.randn(8, 256, 128, device="cuda", dtype=torch.half)
b = torch.randn(8, 128, 64, device="cuda", dtype=torch.half)
bias = torch.randn(1, 1, 64, device="cuda", dtype=torch.half)
out = torch.full((8, 256, 64), float("nan"), device="cuda", dtype=torch.half)

graph = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
A, B, Bias = graph.tensor_like(a), graph.tensor_like(b), graph.tensor_like(bias)
Y = graph.relu(input=graph.bias(input=graph.matmul(A, B), bias=Bias))
Y.set_output(True).set_data_type(cudnn.data_type.HALF)
graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
print(f"cuDNN {cudnn.backend_version_string()}: {graph.get_execution_plan_count()} engine config(s), "
      f"workspace {graph.get_workspace_size()} bytes")

side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())  # the inputs were written on the default stream
with torch.cuda.stream(side):
    graph.execute({A: a, B: b, Bias: bias, Y: out}, workspace=None)  # on `side`, no handle needed
side.synchronize()

ref = torch.relu(a.double() @ b.double() + bias.double())
err = ((out.double() - ref).norm() / ref.norm()).item()
print(f"relative error against float64: {err:.3e} ({'ok' if err < 1e-2 else 'TOO LARGE'})")
raise SystemExit(0 if err < 1e-2 else 1)
