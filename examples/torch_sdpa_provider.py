"""cudnn_py.torch serving an unmodified torch model: a small causal transformer block (pre-norm attention with
grouped-query heads + an MLP) written against torch.nn.functional.scaled_dot_product_attention, trained for a few
steps in bf16 with cudnn_py.torch installed. The block's code does not change: install() makes its attention
(forward and backward) run on cudnn_py's SDPA graphs. Prints the loss per step, how many attention calls cudnn_py
served, and the largest difference from the same step with torch's own SDPA. Needs a GPU (and torch).

    python examples/torch_sdpa_provider.py
"""
import copy
import logging
import sys

import torch
import torch.nn.functional as F
from torch import nn

import cudnn_py.torch

logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s: %(message)s")
logging.getLogger("cudnn_py").setLevel(logging.WARNING)  # the build / plan chatter of the library
logging.getLogger("cudnn_py.torch").setLevel(logging.INFO)  # the mechanism chosen, fallbacks


class Block(nn.Module):
    """A pre-norm decoder block; its attention is F.scaled_dot_product_attention (GQA: 8 query heads, 2 kv heads)."""

    def __init__(self, dim=512, heads=8, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, s, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(b, s, 2, self.kv_heads, self.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.mlp(self.norm2(x))


def train(model, batches, steps):
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        x, y = batches[step]
        loss = F.mse_loss(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


torch.manual_seed(0)
steps, batch, seq, dim = 5, 4, 300, 512  # 300: not a multiple of 64
model = nn.Sequential(Block(dim), Block(dim)).cuda().to(torch.bfloat16)
twin = copy.deepcopy(model)
x, y = torch.randn(batch, seq, dim, device="cuda", dtype=torch.bfloat16), torch.randn(batch, seq, dim, device="cuda")
batches = [(x, y)] * steps  # one batch, fitted: the loss falls

mechanism = cudnn_py.torch.install()
try:
    losses = train(model, batches, steps)
    served, fallbacks = cudnn_py.torch.provider().served, cudnn_py.torch.provider().fallbacks
finally:
    cudnn_py.torch.uninstall()
torch_losses = train(twin, batches, steps)  # the same steps on torch's own SDPA

for step, (ours, theirs) in enumerate(zip(losses, torch_losses)):
    print(f"step {step}: loss {ours:.5f} (torch's SDPA: {theirs:.5f})")
print(f"installed through: {mechanism}; attention calls served by cudnn_py: {served}, fallen back: {fallbacks}")
worst = max(abs(a - b) / abs(b) for a, b in zip(losses, torch_losses))
print(f"largest relative loss difference from torch's SDPA: {worst:.3e}")
if served != 2 * steps or fallbacks or not worst < 5e-2 or not losses[-1] < losses[0]:
    print("FAILED: not every attention call was served, the losses differ, or the loss did not fall", file=sys.stderr)
    sys.exit(1)
