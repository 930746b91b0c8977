"""Hostile and careless IR values (issue #27): each is refused with the tensor and the rule, at the setter where
the value is wrong in itself, at validate() where only the tensor as a whole is; a seeded fuzz of attribute values
over a small graph validates in child processes, where a signal, a hang or an exception outside the documented
classes fails the test. And explain() stays linear in the node count."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap

import pytest

import cudnn_py as cudnn
from cudnn_py.facade import explain as explain_mod

F = cudnn.data_type.FLOAT


def graph():
    return cudnn.pygraph(io_data_type=F, compute_data_type=F)


@pytest.mark.parametrize("setter, value, error, match", [
    ("set_uid", 5.9, TypeError, r"tensor uid needs an int in \[0, 2\*\*63\), got 5.9"),
    ("set_uid", "12", TypeError, "tensor uid needs an int in .*, got '12'"),
    ("set_uid", True, TypeError, "tensor uid needs an int in .*, got True"),
    ("set_uid", 2**70, ValueError, r"tensor uid needs an int in \[0, 2\*\*63\), got 1180591620717411303424"),
    ("set_uid", -3, ValueError, r"tensor uid needs an int in \[0, 2\*\*63\), got -3"),
    ("set_name", 123, TypeError, "name must be a str"),
    ("set_name", object(), TypeError, "name must be a str"),
    ("set_alignment", 0, ValueError, r"tensor alignment needs an int in \[1, 2\*\*31\), got 0"),
    ("set_alignment", "16", TypeError, "tensor alignment needs an int in .*, got '16'"),
    ("set_is_pass_by_value", "false", TypeError, "is_pass_by_value must be a bool"),
    ("set_ragged_offset_multiplier", 0, ValueError, "tensor ragged_offset_multiplier needs an int in"),
])
def test_a_wrong_value_is_refused_by_its_setter(setter, value, error, match):
    t = graph().tensor([4, 4], name="x")
    with pytest.raises(error, match=match):
        getattr(t, setter)(value)


def test_a_negative_vector_count_is_refused():
    t = graph().tensor([4, 4], name="x")
    with pytest.raises(ValueError, match=r"tensor vector_count needs an int in \[1, 2\*\*31\), got -4"):
        t.set_vector_count_and_dimension(-4, 1)


@pytest.mark.parametrize("dim, stride, match", [
    ([2**63 - 1, 1], None, "more than cuDNN's int64 sizes hold"),  # 2**63 - 1 FLOATs: 2**65 bytes
    ([2**61, 3], [3, 1], "more than cuDNN's int64 sizes hold"),
    ([4, 4], [4, -1], "strides must not be negative"),
])
def test_a_tensor_whose_bytes_do_not_fit_int64_is_refused_at_validate(dim, stride, match):
    g = graph()
    x = g.tensor(dim, stride, name="x") if stride else g.tensor(dim, name="x")
    g.relu(x).set_output(True)
    with pytest.raises(ValueError, match=rf"tensor 'x' \(uid \d+\).*{match}"):
        g.validate_ir()


# ---- fuzz: random attribute values, validate() in a child process ------------------------------------------------
POOL = ('[0, 1, -1, 7, 16, 2**31, 2**62, 2**63, 2**64, -2**63, 1.5, float("nan"), "16", "", True, False, None, '
        '[1], [2**62, 2**62], [-5, 3], [0, 4], [4, 4], [4, 4, 4], [[4]], object(), b"x", cudnn.data_type.HALF, 3.0]')
SETTERS = ["set_uid", "set_name", "set_alignment", "set_dim", "set_stride", "set_data_type", "set_is_virtual",
           "set_is_pass_by_value", "set_ragged_offset_multiplier"]

CHILD = textwrap.dedent('''
    import json, random, sys
    sys.path.insert(0, {root!r})
    from tests.support import libcuda_stub
    libcuda_stub.ensure_driver()
    import cudnn_py as cudnn
    from cudnn_py import errors
    POOL = {pool}
    F = cudnn.data_type.FLOAT
    ok = (ValueError, TypeError, RuntimeError, errors.cudnnGraphNotSupportedError, NotImplementedError)
    out = []
    for case in json.loads(sys.argv[1]):
        rng = random.Random(case)
        g = cudnn.pygraph(io_data_type=F, compute_data_type=F)
        x, w = g.tensor([4, 4], name="x"), g.tensor([4, 4], name="w")
        stage, outcome = "set", "ok"
        try:
            for _ in range(rng.randint(1, 3)):
                t, setter = rng.choice([x, w]), rng.choice({setters!r})
                value = POOL[rng.randrange(len(POOL))]
                getattr(t, setter)(value)
            stage = "validate"
            g.add(x, w).set_output(True)
            g.validate()
        except ok as e:
            outcome = f"{{stage}}: {{type(e).__name__}}"
        except Exception as e:  # an exception outside the documented classes
            outcome = f"UNEXPECTED {{stage}}: {{type(e).__name__}}: {{e}}"
        out.append([case, outcome])
    print(json.dumps(out))
''')


def test_random_attribute_values_end_in_a_clean_refusal_or_a_valid_graph():
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = CHILD.format(root=root, pool=POOL, setters=SETTERS)
    rng = random.Random(20261203)
    cases = [rng.randrange(2**32) for _ in range(240)]
    outcomes = []
    for chunk in (cases[i:i + 80] for i in range(0, len(cases), 80)):
        proc = subprocess.run([sys.executable, "-c", script, json.dumps(chunk)], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, f"child died (signal or exit {proc.returncode}): {proc.stderr[-2000:]}"
        outcomes += json.loads(proc.stdout.strip().splitlines()[-1])
    unexpected = [o for o in outcomes if o[1].startswith("UNEXPECTED")]
    assert not unexpected, unexpected[:5]
    kinds = {o[1].split(":")[0] for o in outcomes}
    assert {"set", "ok"} <= kinds  # the fuzz reaches both refusals and valid graphs


# ---- explain() -----------------------------------------------------------------------------------------------------
def test_explain_looks_tensors_up_through_one_table_per_list(monkeypatch):
    """The text report names each node's tensors through one uid table per tensor list, built once (it was
    rebuilt per node: 10k nodes took 12-17 s)."""
    seen = []
    real = explain_mod._node_line
    monkeypatch.setattr(explain_mod, "_node_line", lambda n, by_uid: seen.append(id(by_uid)) or real(n, by_uid))
    g = graph()
    x = g.tensor([4, 4], name="x")
    for _ in range(60):
        x = g.relu(x)
    x.set_output(True)
    report = g.explain()
    assert "relu" in report and len(seen) >= 60
    assert len(set(seen)) <= 2  # the IR as built, and as lowered
