"""An attention training step with cuDNN graphs: causal attention over padded batches (per-batch sequence
lengths), bf16, the forward (O and its softmax statistics) then the backward (dQ, dK, dV) from them, checked
against a float64 reference and against torch's SDPA autograd. Exits non-zero past its tolerance. Needs a GPU
(and torch).

    python examples/sdpa_train_step.py
"""
import math
import sys

import torch

import cudnn_py as cudnn

torch.manual_seed(0)
batch, heads, seq, head_dim = 2, 8, 400, 64  # 400: not a multiple of 64 or 128
scale = 1 / math.sqrt(head_dim)
q, k, v = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
seq_len = torch.tensor([seq, 271], dtype=torch.int32, device="cuda").view(batch, 1, 1, 1)  # valid tokens per batch
valid_rows = torch.arange(seq, device="cuda").view(1, 1, -1, 1) < seq_len
# the loss reads the valid tokens only: padded query rows get no gradient
d_o = torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16).masked_fill(~valid_rows, 0)

BF16, FP32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
padding = dict(use_padding_mask=True, use_causal_mask=True)

fwd = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32)
Q, K, V, SQ, SKV = (fwd.tensor_like(t) for t in (q, k, v, seq_len, seq_len))
O, STATS = fwd.sdpa(Q, K, V, generate_stats=True, attn_scale=scale, seq_len_q=SQ, seq_len_kv=SKV, **padding)
O.set_output(True)
STATS.set_output(True).set_data_type(FP32)
fwd.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])


def like(t, dtype):
    """Device memory laid out as graph tensor ``t`` (its dims and strides), NaN-filled: an element the graph
    misses shows."""
    dims, strides = tuple(t.get_dim()), tuple(t.get_stride())
    size = 1 + sum((d - 1) * st for d, st in zip(dims, strides))
    return torch.full((size,), float("nan"), device="cuda", dtype=dtype).as_strided(dims, strides)


o, stats = like(O, torch.bfloat16), like(STATS, torch.float32)
workspace = torch.empty(max(1, fwd.get_workspace_size()), device="cuda", dtype=torch.uint8)
fwd.execute({Q: q, K: k, V: v, SQ: seq_len, SKV: seq_len, O: o, STATS: stats}, workspace=workspace)

# the forward defines O and Stats on the valid rows only; the backward gets them with the padded rows zeroed, as
# a training loop that allocated them uninitialised should hand them over
o_saved, stats_saved = o.masked_fill(~valid_rows, 0), stats.masked_fill(~valid_rows, 0)
bwd = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32)
Q2, K2, V2, O2, DO2, ST2, SQ2, SKV2 = (bwd.tensor_like(t) for t in (q, k, v, o_saved, d_o, stats_saved, seq_len,
                                                                     seq_len))
DQ, DK, DV = bwd.sdpa_backward(Q2, K2, V2, O2, DO2, ST2, attn_scale=scale, seq_len_q=SQ2, seq_len_kv=SKV2,
                               **padding)
for t in (DQ, DK, DV):
    t.set_output(True)
bwd.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
workspace = torch.empty(max(1, bwd.get_workspace_size()), device="cuda", dtype=torch.uint8)  # softmax_sum, dQ accum
dq, dk, dv = like(DQ, torch.bfloat16), like(DK, torch.bfloat16), like(DV, torch.bfloat16)
bwd.execute({Q2: q, K2: k, V2: v, O2: o_saved, DO2: d_o, ST2: stats_saved, SQ2: seq_len, SKV2: seq_len,
             DQ: dq, DK: dk, DV: dv}, workspace=workspace)
torch.cuda.synchronize()

# the mask: key j visible to query i when j <= i and j < seq_len (query rows past seq_len are padding)
i, j = torch.arange(seq, device="cuda").view(-1, 1), torch.arange(seq, device="cuda").view(1, -1)
keep = (j <= i) & (j < seq_len)
keep = keep | ~valid_rows & (j == 0)  # padded rows see key 0 only: defined (no NaN), excluded from every check


def attention64(q, k, v):
    s = (q @ k.transpose(-1, -2) * scale).masked_fill(~keep, float("-inf"))
    stats = torch.logsumexp(s, dim=-1, keepdim=True)
    return torch.exp(s - stats) @ v, stats


leaves = [t.double().requires_grad_() for t in (q, k, v)]
o_ref, stats_ref = attention64(*leaves)
grads_ref = torch.autograd.grad(o_ref, leaves, d_o.double())
bf = [t.detach().clone().requires_grad_() for t in (q, k, v)]
o_torch = torch.nn.functional.scaled_dot_product_attention(*bf, attn_mask=keep, scale=scale)
grads_torch = torch.autograd.grad(o_torch, bf, d_o)


def rel(got, ref, rows=None):
    got, ref = got.double(), ref.detach().double()
    if rows is not None:
        got, ref = got.masked_fill(~rows, 0), ref.masked_fill(~rows, 0)
    if not torch.isfinite(got).all():
        return math.inf  # NaN poison left, or a non-finite result
    return ((got - ref).norm() / ref.norm()).item()


checks = [("O", o, o_ref, o_torch, valid_rows, 2e-2), ("Stats", stats, stats_ref, None, valid_rows, 2e-3),
          ("dQ", dq, grads_ref[0], grads_torch[0], valid_rows, 4e-2),
          ("dK", dk, grads_ref[1], grads_torch[1], None, 4e-2), ("dV", dv, grads_ref[2], grads_torch[2], None, 4e-2)]
failed = []
for name, got, ref, ref_torch, rows, tol in checks:
    err = rel(got, ref, rows)
    line = f"{name}: relative error {err:.3e} (against float64, tolerance {tol:g})"
    if ref_torch is not None:  # torch's own bf16 SDPA: a second opinion, as far from float64 as cuDNN is
        diff = rel(got, ref_torch, rows)
        line += f"; relative difference from torch SDPA autograd (bf16) {diff:.3e}"
        if not diff < 2 * tol:
            failed.append(f"{name} vs torch")
    print(line)
    if not err < tol:
        failed.append(name)
print(f"cuDNN {cudnn.backend_version_string()}: forward plan {fwd.get_plan_name_at_index(0)}, "
      f"backward plan {bwd.get_plan_name_at_index(0)}")
if failed:
    print(f"FAILED: {', '.join(failed)} past tolerance", file=sys.stderr)
    sys.exit(1)
