"""The checks of the buffers a python engine's device kernel dereferences (facade/executing.py
``_check_device_operands``, with the executor's ``OperandSlots``), on the CPU: a norm graph's tensors (validated
deviceless), a stand-in plan declaring them as its device operands, and buffers from the execute harness's fake
torch. Seeded mutations of every operand: each pack is refused (ValueError / TypeError, naming a tensor) or accepted
only where every buffer is one the tensor's declaration accepts."""
from __future__ import annotations

import random
import warnings

import pytest

import cudnn_py as cudnn
from cudnn_py.facade.executing import _check_device_operands
from tests import test_execute_correctness as harness
from tests.test_execute_correctness import FakeDevice, Tensor, bfloat16, float16, float32

torch_module = harness.torch
pytestmark = pytest.mark.usefixtures("torch_module")
DT = cudnn.data_type
ROWS, N = 64, 256


class StandInPlan:
    """What the facade reads of a python plan: the uids its kernel dereferences and the checks it keeps."""

    def __init__(self, uids):
        self.device_operands, self.operand_checks = tuple(uids), None


def norm_graph():
    g = cudnn.pygraph(io_data_type=DT.BFLOAT16, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    x = g.tensor(name="X", dim=[ROWS, N, 1, 1], stride=[N, 1, N, N], data_type=DT.BFLOAT16)
    w = g.tensor(name="W", dim=[1, N, 1, 1], stride=[N, 1, N, N], data_type=DT.FLOAT)
    e = g.tensor(name="eps", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.FLOAT, is_pass_by_value=True)
    y, inv = g.rmsnorm(cudnn.norm_forward_phase.TRAINING, x, w, None, e)
    y.set_output(True).set_data_type(DT.BFLOAT16).set_name("Y")
    inv.set_output(True).set_name("INV")
    g.validate()
    return g, {"X": x, "W": w, "Y": y, "INV": inv}


def good(name):
    return {"X": lambda: Tensor((ROWS, N), dtype=bfloat16), "Y": lambda: Tensor((ROWS, N), dtype=bfloat16),
            "W": lambda: Tensor((N,), dtype=float32), "INV": lambda: Tensor((ROWS, 1), dtype=float32)}[name]()


def mutated_buffer(rng: random.Random, shape: tuple, dtype) -> tuple:
    """(a buffer for a dense tensor of ``shape`` and ``dtype``, drawn from ``rng``: a good one, or one of each kind
    of mistake; whether the tensor's declaration accepts it)."""
    other = float16 if dtype is bfloat16 else bfloat16
    kind = rng.choice(["good", "good", "bigger", "smaller", "dtype-size", "dtype-same-size", "host", "strided",
                       "int", "object"])
    if kind == "good":
        return Tensor(shape, dtype=dtype), True
    if kind == "bigger":  # a dense buffer holding the span: read as a buffer (as the official reads it)
        return Tensor((shape[0] * 2,) + shape[1:], dtype=dtype), True
    if kind == "smaller":
        return Tensor((max(1, shape[0] // 2),) + shape[1:], dtype=dtype), shape[0] == 1
    if kind == "dtype-size":
        return Tensor(shape, dtype=float32 if dtype is not float32 else float16), False
    if kind == "dtype-same-size":
        return Tensor(shape, dtype=other), dtype is not float32
    if kind == "host":
        return Tensor(shape, dtype=dtype, device=FakeDevice("cpu")), False
    if kind == "strided":  # gaps: every other element
        return Tensor(shape, [2 * s for s in harness._row_major(shape)], dtype=dtype), False
    if kind == "int":  # a bare pointer: the caller's responsibility, as in the official module
        return 0x7000_0000 + 256 * rng.randrange(1, 1 << 16), True
    return object(), False


def test_good_buffers_pass_and_each_kind_of_bad_one_is_refused_naming_it():
    g, ts = norm_graph()
    plan = StandInPlan(t.uid for t in ts.values())
    bufs = {ts[n].uid: good(n) for n in ts}
    _check_device_operands(plan, bufs, g)
    _check_device_operands(plan, bufs, g)  # a repeat: against the last full check
    for name, bad, why in (("Y", Tensor((ROWS - 1, N), dtype=bfloat16), "holds"),
                           ("X", Tensor((ROWS, N), dtype=float32), "BFLOAT16"),
                           ("X", Tensor((ROWS, N), dtype=bfloat16, device=FakeDevice("cpu")), "host"),
                           ("INV", Tensor((ROWS, 1), (2, 1), dtype=float32), "dense")):  # every other element
        with pytest.raises(ValueError, match=f"'{name}'.*{why}"):
            _check_device_operands(plan, {**bufs, ts[name].uid: bad}, g)
    with pytest.raises(ValueError, match="missing"):
        _check_device_operands(plan, {u: b for u, b in bufs.items() if u != ts["W"].uid}, g)


def test_seeded_mutations_are_refused_or_accepted_only_when_every_buffer_fits():
    g, ts = norm_graph()
    plan = StandInPlan(t.uid for t in ts.values())
    rng = random.Random(3119)

    def mutated(name):
        shape = {"X": (ROWS, N), "Y": (ROWS, N), "W": (N,), "INV": (ROWS, 1)}[name]
        return mutated_buffer(rng, shape, {"X": bfloat16, "Y": bfloat16, "W": float32, "INV": float32}[name])

    accepted = refused = 0
    for _ in range(500):
        chosen = {n: (good(n), True) for n in ts}
        for n in rng.sample(sorted(ts), rng.choice([1, 1, 2])):  # one operand mutated, or two
            chosen[n] = mutated(n)
        bufs = {ts[n].uid: b for n, (b, _ok) in chosen.items()}
        fits = all(ok for _b, ok in chosen.values())
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _check_device_operands(plan, bufs, g)
        except (ValueError, TypeError) as e:
            refused += 1
            assert not fits, f"a pack of fitting buffers was refused: {e}"
            continue
        accepted += 1
        assert fits, f"a buffer its tensor does not accept passed: {chosen}"
    assert accepted > 50 and refused > 50, (accepted, refused)
