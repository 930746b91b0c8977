"""GPU: serialized plans and CUDA graphs. A built plan serialized, loaded into a fresh graph (in this process and
in a child process), executed against the float64 reference; a plan populated into a CUDA graph, launched, updated
with other buffers and launched again."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import cudnn_py as cudnn

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def matmul_relu(handle=None):
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, handle=handle)
    A = g.tensor([2, 64, 32], name="A", data_type=H)
    B = g.tensor([2, 32, 16], name="B", data_type=H)
    C = g.relu(g.matmul(A, B), name="act").set_output(True).set_name("C")
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, A, B, C


def rel_err(out, ref):
    assert torch.isfinite(out).all()
    return ((out.double() - ref).norm() / ref.norm()).item()


def test_serialize_round_trip_in_process():
    g, A, B, C = matmul_relu()
    blob = g.serialize()
    assert isinstance(blob, list) and all(isinstance(b, int) for b in blob[:16])
    assert bytes(blob) == g.serialize(as_bytes=True)
    a = torch.randn(2, 64, 32, device="cuda", dtype=torch.half)
    b = torch.randn(2, 32, 16, device="cuda", dtype=torch.half)
    c = torch.full((2, 64, 16), float("nan"), device="cuda", dtype=torch.half)
    fresh = cudnn.pygraph()
    fresh.deserialize(blob)
    ws = torch.empty(max(1, fresh.get_workspace_size()), device="cuda", dtype=torch.uint8)
    fresh.execute({A.uid: a, "B": b, C.uid: c}, ws)
    torch.cuda.synchronize()
    assert rel_err(c, torch.relu(a.double() @ b.double())) < 5e-3
    with pytest.raises(ValueError, match=r"expected shape \[2, 32, 16\].*holds 1024 bytes.*spans 2048"):
        fresh.execute({A.uid: a, "B": b[:1], C.uid: c}, ws)  # the records check operands: too small a buffer
    with pytest.raises(ValueError, match=r"expected strides \[512, 16, 1\]"):
        fresh.execute({A.uid: a, "B": b.transpose(1, 2).contiguous().transpose(1, 2), C.uid: c}, ws)



def test_a_deserialized_graph_takes_the_serialized_graphs_tensors_as_keys():
    """As in the official module, which keys variant packs by uid: a graph loaded from another graph's blob executes
    with that graph's tensor objects as keys (their uids are the loaded graph's), on the first call and on the bound
    execute's; a tensor of another graph sharing a uid but declaring other dims is refused, as is one whose uid
    names no operand of the loaded graph (both ValueErrors, the official's class for a buffer it cannot place)."""
    g, A, B, C = matmul_relu()
    fresh = cudnn.pygraph()
    fresh.deserialize(g.serialize())
    ws = torch.empty(max(1, fresh.get_workspace_size()), device="cuda", dtype=torch.uint8)
    for _ in range(3):  # the first call (checked), then the bound execute, then its steady state
        a = torch.randn(2, 64, 32, device="cuda", dtype=torch.half)
        b = torch.randn(2, 32, 16, device="cuda", dtype=torch.half)
        c = torch.full((2, 64, 16), float("nan"), device="cuda", dtype=torch.half)
        fresh.execute({A: a, B: b, C: c}, ws)
        torch.cuda.synchronize()
        assert rel_err(c, torch.relu(a.double() @ b.double())) < 5e-3
    other = cudnn.pygraph(io_data_type=H)
    stranger = other.tensor([2, 64, 64], name="A", data_type=H)  # uid 1, as A's, of other dims
    assert stranger.uid == A.uid
    with pytest.raises(ValueError, match=r"not a non-virtual tensor of this graph: a tensor of another graph.*"
                                         r"dims \[2, 64, 32\] \(the key declares \[2, 64, 64\]\)"):
        fresh.execute({stranger: a, B: b, C: c}, ws)
    lost = other.tensor([2, 64, 32], name="lost", data_type=H, uid=999)
    with pytest.raises(ValueError, match=r"'lost' \(uid 999\) is not a non-virtual tensor of this graph"):
        fresh.execute({A: a, B: b, C: c, lost: a}, ws)

def test_deserialize_in_a_fresh_process(tmp_path):
    g, A, B, C = matmul_relu()
    path = tmp_path / "plan.json"
    path.write_bytes(g.serialize(as_bytes=True))
    script = textwrap.dedent(f"""
        import torch, cudnn_py as cudnn
        g = cudnn.pygraph()
        g.deserialize(cudnn.create_handle(), open({str(path)!r}, "rb").read())
        a = torch.randn(2, 64, 32, device="cuda", dtype=torch.half)
        b = torch.randn(2, 32, 16, device="cuda", dtype=torch.half)
        c = torch.full((2, 64, 16), float("nan"), device="cuda", dtype=torch.half)
        g.execute({{{A.uid}: a, {B.uid}: b, {C.uid}: c}}, None)
        torch.cuda.synchronize()
        ref = torch.relu(a.double() @ b.double())
        print(((c.double() - ref).norm() / ref.norm()).item())
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert float(r.stdout.strip().splitlines()[-1]) < 5e-3


def test_explain_shows_heuristics_configs_and_the_default_plan():
    g, A, B, C = matmul_relu()
    report = g.explain()
    assert "phase: EXECUTABLE" in report and "heuristics:" in report and "CUDNN_HEUR_MODE_A" in report
    configs = report.split("engine configs")[1]
    assert "<- default" in configs and "-> built" in configs
    doc = __import__("json").loads(g.explain("json"))
    assert doc["engine_configs"] and all("numerical_notes" in c for c in doc["engine_configs"])


def _edited(blob: bytes, edit) -> bytes:
    import json

    doc = json.loads(blob)
    edit(doc)
    return json.dumps(doc).encode()


def _record(uid: int, **fields):
    return lambda doc: next(r for r in doc["tensors"] if r["uid"] == uid).update(**fields)


def test_an_edited_blob_is_refused_on_the_real_rebuild():
    """Issue #27: a blob whose records or workspace were edited to accept smaller buffers is refused when loaded,
    after cuDNN rebuilt the plan from its JSON (the check compares with what the rebuilt plan reports), and the
    unedited blob still loads and computes the right result."""
    from cudnn_py.errors import SerializedJSONError

    g, A, B, C = matmul_relu()
    blob = g.serialize(as_bytes=True)
    for edit, message in [
        (_record(B.uid, dim=[2, 16, 16], stride=[256, 16, 1]), r"the plan's tensor .* reads"),
        (_record(C.uid, data_type="FLOAT"), r"does not match the plan's CUDNN_DATA_HALF"),
        (lambda d: d["tensors"].remove(next(r for r in d["tensors"] if r["uid"] == A.uid)), r"has no record"),
        (lambda d: d["plan"].update(workspace=max(0, g.get_workspace_size() - 1) if g.get_workspace_size() else -1),
         r"plan.workspace"),
    ]:
        with pytest.raises(SerializedJSONError, match=message):
            cudnn.pygraph().deserialize(_edited(blob, edit))
    fresh = cudnn.pygraph()
    fresh.deserialize(blob)
    a = torch.randn(2, 64, 32, device="cuda", dtype=torch.half)
    b = torch.randn(2, 32, 16, device="cuda", dtype=torch.half)
    c = torch.full((2, 64, 16), float("nan"), device="cuda", dtype=torch.half)
    fresh.execute({A.uid: a, B.uid: b, C.uid: c}, None)
    torch.cuda.synchronize()
    assert rel_err(c, torch.relu(a.double() @ b.double())) < 5e-3
