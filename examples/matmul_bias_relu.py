"""relu(A @ B + bias) as one fused cuDNN graph, checked against torch. Needs a GPU.

    python examples/matmul_bias_relu.py
"""
import torch

import cudnn_py as cudnn

a = torch.randn(8, 256, 128, device="cuda", dtype=torch.half)
b = torch.randn(8, 128, 64, device="cuda", dtype=torch.half)
bias = torch.randn(1, 1, 64, device="cuda", dtype=torch.half)
out = torch.empty(8, 256, 64, device="cuda", dtype=torch.half)

graph = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
A, B, Bias = graph.tensor_like(a), graph.tensor_like(b), graph.tensor_like(bias)
Y = graph.relu(input=graph.bias(input=graph.matmul(A, B), bias=Bias))
Y.set_output(True).set_data_type(cudnn.data_type.HALF)

graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
print(f"cuDNN {cudnn.backend_version_string()}: {graph.get_execution_plan_count()} plan(s), "
      f"plan 0 = {graph.get_plan_name_at_index(0)}, workspace {graph.get_workspace_size()} bytes")
graph.execute({A: a, B: b, Bias: bias, Y: out}, workspace=None)
torch.cuda.synchronize()

ref = torch.relu(a.float() @ b.float() + bias.float())
print(f"max abs error vs torch: {(out.float() - ref).abs().max().item():.3e}")
print(f"relative error: {((out.float() - ref).norm() / ref.norm()).item():.3e}")
