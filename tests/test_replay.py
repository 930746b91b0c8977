"""plans/execute_replay.py on the CPU: when an executor may replay repeated executes, and why not (the replays themselves
need a GPU: tests/test_gpu_replay.py)."""
from __future__ import annotations

import cudnn_py as cudnn
from cudnn_py.cuda import capture
from cudnn_py.plans import execute_replay as replay

F = cudnn.data_type.FLOAT
# without the variable: on a GPU machine nothing refuses; on the CPU's test driver, its lack of stream capture
UNSET = None if capture.driver() is not None else "no CUDA driver with stream capture"


def test_the_environment_variable_turns_replay_off(monkeypatch):
    for value in ("0", "off", "False", " no "):
        monkeypatch.setenv(replay.REPLAY_ENV, value)
        assert replay.environment_refusal() == f"CUDNN_PY_REPLAY={value}"
    monkeypatch.setenv(replay.REPLAY_ENV, "1")
    assert replay.environment_refusal() == UNSET
    monkeypatch.delenv(replay.REPLAY_ENV)  # (conftest sets it to 0 for the CPU tests)
    assert replay.environment_refusal() == UNSET


def layernorm():
    g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([8, 64, 1, 1], name="x")
    s, b = g.tensor([1, 64, 1, 1], name="scale"), g.tensor([1, 64, 1, 1], name="bias")
    eps = g.tensor([1, 1, 1, 1], data_type=F, is_pass_by_value=True, name="eps")
    y, _, _ = g.layernorm(cudnn.norm_forward_phase.INFERENCE, x, s, b, eps)
    y.set_output(True)
    g.validate()
    return g


def test_a_host_scalar_the_caller_provides_rules_replay_out():
    refusal = layernorm().session.executor.replays.refusal
    assert "tensor 'eps'" in refusal and "pass-by-value scalar the caller provides" in refusal


def test_a_scalar_the_graph_carries_does_not():
    # its value is in the graph: only the environment decides (conftest turns replay off for the CPU tests)
    g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([8, 64, 16], name="x")
    two = g.tensor([1], data_type=F, is_pass_by_value=True, pass_by_value=2.0, name="two")
    g.mul(x, two).set_output(True)
    g.validate()
    assert g.session.executor.replays.refusal == "CUDNN_PY_REPLAY=0"
