"""A layer norm training step with cuDNN graphs: the forward in TRAINING (Y, mean, inverse std) and the backward
(dX, dScale, dBias) from the saved statistics, bf16 io and fp32 statistics, checked against float64 torch
autograd. Needs a GPU (and torch).

    python examples/layernorm_train.py
"""
import torch

import cudnn_py as cudnn

torch.manual_seed(0)
batch, hidden, eps = 4096, 1024, 1e-5
x = torch.randn(batch, hidden, 1, 1, device="cuda", dtype=torch.bfloat16)
scale = torch.randn(1, hidden, 1, 1, device="cuda", dtype=torch.float32)
bias = torch.randn(1, hidden, 1, 1, device="cuda", dtype=torch.float32)
dy = torch.randn(batch, hidden, 1, 1, device="cuda", dtype=torch.bfloat16)
epsilon = torch.full((1, 1, 1, 1), eps, dtype=torch.float32)  # a CPU scalar: passed by value

BF16, FP32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
fwd = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32)
X, S, B, E = fwd.tensor_like(x), fwd.tensor_like(scale), fwd.tensor_like(bias), fwd.tensor_like(epsilon)
Y, MEAN, INV = fwd.layernorm(cudnn.norm_forward_phase.TRAINING, X, S, B, E)
for t in (Y, MEAN, INV):
    t.set_output(True)
fwd.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])


def like(t, dtype):
    """Device memory laid out as graph tensor ``t`` (the statistics' strides are the graph's choice)."""
    return torch.empty_strided(t.get_dim(), t.get_stride(), device="cuda", dtype=dtype)


y, mean, inv = like(Y, torch.bfloat16), like(MEAN, torch.float32), like(INV, torch.float32)
fwd.execute({X: x, S: scale, B: bias, E: epsilon, Y: y, MEAN: mean, INV: inv}, workspace=None)

bwd = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32)
DY, X2, S2 = bwd.tensor_like(dy), bwd.tensor_like(x), bwd.tensor_like(scale)
M2, I2 = bwd.tensor_like(mean), bwd.tensor_like(inv)
DX, DS, DB = bwd.layernorm_backward(DY, X2, S2, M2, I2)
DX.set_output(True)
DS.set_output(True).set_data_type(FP32)
DB.set_output(True).set_data_type(FP32)
bwd.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
dx, dscale, dbias = like(DX, torch.bfloat16), like(DS, torch.float32), like(DB, torch.float32)
bwd.execute({DY: dy, X2: x, S2: scale, M2: mean, I2: inv, DX: dx, DS: dscale, DB: dbias}, workspace=None)
torch.cuda.synchronize()

xd = x.double().requires_grad_()
sd, bd = scale.double().requires_grad_(), bias.double().requires_grad_()
ref_y = torch.nn.functional.layer_norm(xd, (hidden, 1, 1), sd.reshape(hidden, 1, 1), bd.reshape(hidden, 1, 1), eps)
ref_dx, ref_ds, ref_db = torch.autograd.grad(ref_y, (xd, sd, bd), dy.double())
errors = {}
for name, got, ref in (("y", y, ref_y), ("dx", dx, ref_dx), ("dscale", dscale, ref_ds), ("dbias", dbias, ref_db)):
    errors[name] = ((got.double() - ref.detach()).norm() / ref.detach().norm()).item()
    print(f"{name}: relative error {errors[name]:.3e} (against float64 torch autograd)")
print(f"cuDNN {cudnn.backend_version_string()}: forward plan {fwd.get_plan_name_at_index(0)}, "
      f"backward plan {bwd.get_plan_name_at_index(0)}")
assert errors["y"] < 2e-2 and errors["dx"] < 4e-2 and errors["dscale"] < 1e-3 and errors["dbias"] < 1e-3
