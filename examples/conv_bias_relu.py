"""relu(conv(X, W) + bias) as one fused cuDNN graph (NHWC, fp16 io, fp32 compute), checked against a float64
torch reference. Needs a GPU (and torch).

    python examples/conv_bias_relu.py
"""
import torch

import cudnn_py as cudnn

torch.manual_seed(0)
x = torch.randn(8, 64, 32, 32, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
w = torch.randn(128, 64, 3, 3, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
bias = torch.randn(1, 128, 1, 1, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)

graph = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
X, W, B = graph.tensor_like(x), graph.tensor_like(w), graph.tensor_like(bias)
conv = graph.conv_fprop(image=X, weight=W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
Y = graph.relu(input=graph.bias(input=conv, bias=B))
Y.set_output(True).set_data_type(cudnn.data_type.HALF)

graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
print(f"cuDNN {cudnn.backend_version_string()}: {graph.get_execution_plan_count()} plan(s), "
      f"plan 0 = {graph.get_plan_name_at_index(0)}, workspace {graph.get_workspace_size()} bytes")
# Y's dims were inferred ([8, 128, 32, 32]) with channels-last strides, as the classic frontend does
y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.half)
graph.execute({X: x, W: w, B: bias, Y: y}, workspace=None)
torch.cuda.synchronize()

ref = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), padding=1) + bias.double())
err = ((y.double() - ref).norm() / ref.norm()).item()
print(f"max abs error vs float64 torch: {(y.double() - ref).abs().max().item():.3e}")
print(f"relative error: {err:.3e}")
assert err < 5e-3, "conv + bias + relu is off"
