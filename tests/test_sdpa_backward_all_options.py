"""An SDPA backward with every option at once (bias, alibi, padding with seq_len_q / seq_len_kv, a sliding
window, dropout; MHA and GQA, with and without dBias) builds as the official module's composite does: deviceless
validate() on cuDNN 9.28 finalizes it, and the decomposition stays under the limit cudnn_py knows cuDNN's
operation-graph finalize has (``plans/errata.py``: operations reading only non-virtual tensors, refused from 12 on
9.28 and 14 on 9.19), with about as many operations as the frontend's composite (section order of
``CompositeSDPABackwardNode``: no operation of ours beyond it)."""
from __future__ import annotations

from collections import Counter

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.families.masks import spec as masks
from cudnn_py.plans import errata

H, F, I32, I64 = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.INT32, cudnn.data_type.INT64


def everything(h_k=4, dbias=False):
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    b, h, s, d = 2, 4, 256, 64
    q, o, d_o = (g.tensor([b, h, s, d]) for _ in range(3))
    k, v = g.tensor([b, h_k, s, d]), g.tensor([b, h_k, s, d])
    stats = g.tensor([b, h, s, 1], data_type=F)
    kw = dict(dBias=g.tensor([1, h, s, s])) if dbias else {}
    grads = g.sdpa_backward(
        q, k, v, o, d_o, stats, attn_scale=0.125, bias=g.tensor([1, h, s, s]), use_alibi_mask=True,
        use_padding_mask=True, seq_len_q=g.tensor([b, 1, 1, 1], data_type=I32),
        seq_len_kv=g.tensor([b, 1, 1, 1], data_type=I32), use_causal_mask=True, sliding_window_length=64,
        dropout=(0.1, g.tensor([1, 1, 1, 1], data_type=I64), g.tensor([1, 1, 1, 1], data_type=I64)), **kw)
    for t in grads[:3]:
        t.set_output(True)
    return g


@pytest.mark.parametrize("h_k, dbias", [(4, False), (1, False), (4, True), (2, True)])
def test_every_option_at_once_finalizes_deviceless_under_the_operation_limits(h_k, dbias):
    g = everything(h_k, dbias)
    g.validate()  # the composite, finalized by cuDNN 9.28 without a GPU (no erratum refused it)
    program = g._session.program
    ops = Counter(n.op for n in program.nodes)
    assert "sdpa_backward" not in ops and ops["matmul"] == 5 and ops["rng"] == 1
    # the frontend's composite for these options is about 40 operations (2 more for GQA's head sums; 7 more where
    # the running cuDNN predates the unified band-mask op, 9.21, and the window is the frontend's composite chain)
    chain = 0 if versions.runtime_version() >= masks.UNIFIED_MIN_VERSION else 7
    assert len(program.nodes) <= 41 + (2 if h_k != 4 else 0) + chain
    for limit in (errata.SOURCE_OPS_LIMIT, errata.SOURCE_OPS_LIMIT_9_19):
        assert errata._source_operations(program, limit) is None
    sources = [n for n in program.nodes if n.inputs and all(not t.is_virtual for t in n.inputs.values())]
    assert len(sources) <= 6 < errata.SOURCE_OPS_LIMIT
