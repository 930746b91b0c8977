"""GPU: the SDPA backward with every option at once (``tests/test_sdpa_backward_all_options.py``'s graph: bias,
alibi, padding, a causal sliding window, dropout; MHA and GQA, with and without dBias) gets plans on this cuDNN and
GPU, or cuDNN's own refusal (``cudnnGraphNotSupportedError`` with its words: reported as an xfail, never a pass);
never cudnn_py's operation-count limit or another error of ours. Where a plan builds, it runs on poisoned
outputs and writes every gradient element with a finite value."""
from __future__ import annotations

import pytest

import cudnn_py as cudnn
from tests.support.refusals import xfail_refused
from tests.test_sdpa_backward_all_options import everything

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("h_k, dbias", [(4, False), (1, False), (4, True)])
def test_every_option_at_once_plans_and_runs_or_is_refused_by_cudnn(h_k, dbias):
    g = everything(h_k, dbias)
    try:
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
    except cudnn.cudnnGraphNotSupportedError as e:
        xfail_refused(f"the SDPA backward with every option (h_k={h_k}, dBias={dbias})", e)
    gen = torch.Generator(device="cuda").manual_seed(7)
    produced = g._produced()
    outputs = [t for t in g._tensors if not t.is_virtual and t.uid in produced]
    assert len(outputs) == 3 + dbias
    out_ids = {id(t) for t in outputs}
    pack = {}
    for t in g._tensors:
        if t.is_virtual:
            continue
        dims = [int(d) for d in t.dim]
        if t.data_type in (cudnn.data_type.INT32, cudnn.data_type.INT64):
            dt = torch.int32 if t.data_type == cudnn.data_type.INT32 else torch.int64
            if dims == [1, 1, 1, 1]:  # the dropout seed and offset
                pack[t] = torch.tensor([[[[1234]]]], dtype=dt, device="cuda")
            else:  # seq_len_q / seq_len_kv: padded rows per batch
                pack[t] = torch.tensor([200, 256], dtype=dt, device="cuda").view(2, 1, 1, 1)
            continue
        dt = torch.float32 if t.data_type == cudnn.data_type.FLOAT else torch.float16
        pack[t] = torch.empty_strided(dims, [int(s) for s in t.stride], dtype=dt, device="cuda")
        if id(t) in out_ids:
            pack[t].fill_(float("nan"))
        elif dt == torch.float32:  # Stats: log-sum-exp rows of a softmax over s_kv keys
            pack[t].copy_(torch.rand(dims, generator=gen, device="cuda") + 5.0)
        else:
            pack[t].copy_(torch.randn(dims, generator=gen, device="cuda").to(dt) * 0.5)
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    g.execute(pack, ws)
    torch.cuda.synchronize()
    for t in outputs:
        assert torch.isfinite(pack[t]).all(), f"{t.name}: not every element written, or not finite"
