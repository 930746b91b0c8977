"""The bound execute of python plans (facade/executing.py ``_python_plan_fast_execute``), on the CPU: a stand-in
engine whose plan offers a pointer launcher, fed the execute harness's fake torch tensors. The first execute takes
the general path and installs the bound one; later ones launch from the checked pointers on torch's current
stream; a buffer unlike its tensor is refused before any launch, whichever path; what the bound execute does not
handle (tensor_uids, a handle, a pack that is not a dict) goes to the general path, and a plan change unbinds it."""
from __future__ import annotations

import random
import warnings

import pytest

from cudnn_py.engines import PYTHON_ENGINE_ID_BASE, BaseEngine, CompiledPlan, PlanConfig
from cudnn_py.enums import data_type
from cudnn_py.facade import pygraph
from tests import test_execute_correctness as harness
from tests.test_engine_operand_checks import mutated_buffer
from tests.test_execute_correctness import Tensor, float32

torch_module = harness.torch
pytestmark = pytest.mark.usefixtures("torch_module")


class LaunchPlan(CompiledPlan):
    def __init__(self, engine, uids, launcher=True):
        self.engine, self.device_operands, self.launcher = engine, tuple(uids), launcher

    def execute(self, graph, buffers, ctx):
        self.engine.log.append(("general", {u: b if isinstance(b, int) else b.data_ptr() for u, b in buffers.items()}))

    def pointer_launcher(self, slot_uids):
        if not self.launcher:
            return None
        self.engine.slot_uids = list(slot_uids)
        return lambda ptrs, stream: self.engine.log.append(("launch", tuple(ptrs), stream))


class LaunchEngine(BaseEngine):
    def __init__(self, launcher=True):
        self.engine_id, self.name, self.launcher = PYTHON_ENGINE_ID_BASE + 11, "launch", launcher
        self.log, self.slot_uids = [], None

    def check_support(self, graph):
        pass

    def plan_configs(self, graph):
        return [PlanConfig(self.engine_id, "launch_0", {}), PlanConfig(self.engine_id, "launch_1", {})]

    def build_plan(self, graph, config, ctx):
        return LaunchPlan(self, (t.uid for t in graph.all_tensors() if not t.is_virtual), self.launcher)


def graph(launcher=True):
    engine = LaunchEngine(launcher)
    g = pygraph(io_data_type=data_type.FLOAT, compute_data_type=data_type.FLOAT, backends=[engine])
    x = g.tensor([2, 3], [3, 1], name="x")
    hidden = g.relu(x, name="r")
    y = g.exp(hidden, name="e").set_output(True)
    g.validate()
    g.create_execution_plans()
    return g, engine, x, hidden, y


def buf():
    return Tensor((2, 3), dtype=float32)


def test_the_first_execute_installs_the_bound_one_which_launches_on_the_current_stream(torch_module):
    g, engine, x, hidden, y = graph()
    bx, by = buf(), buf()
    g.execute({x: bx, y: by})
    assert engine.log == [("general", {x.uid: bx.data_ptr(), y.uid: by.data_ptr()})]
    assert "execute" in g.__dict__  # bound
    torch_module.current[0] = 0x5150
    bx2, by2 = buf(), buf()
    g.execute({"x": bx2, y: by2, hidden: buf()})  # a name, and a virtual tensor of the graph (skipped, as there)
    order = {x.uid: bx2.data_ptr(), y.uid: by2.data_ptr()}
    assert engine.log[-1] == ("launch", tuple(order[u] for u in engine.slot_uids), 0x5150)


@pytest.mark.parametrize("bad,why", [(Tensor((2, 2), dtype=float32), "holds"),
                                     (Tensor((2, 3), dtype=harness.float16), "FLOAT"),
                                     (None, "missing")])
def test_a_buffer_unlike_its_tensor_is_refused_before_any_launch(bad, why):
    g, engine, x, _, y = graph()
    g.execute({x: buf(), y: buf()})
    g.execute({x: buf(), y: buf()})
    n = len(engine.log)
    pack = {x: buf()} if bad is None else {x: buf(), y: bad}
    with pytest.raises(ValueError, match=why):
        g.execute(pack)
    assert len(engine.log) == n
    g.execute({x: buf(), y: buf()})  # and the next good one runs
    assert engine.log[-1][0] == "launch"


def test_what_the_bound_execute_does_not_take_goes_to_the_general_path():
    g, engine, x, _, y = graph()
    g.execute({x: buf(), y: buf()})
    g.execute([buf(), buf()], tensor_uids=[x.uid, y.uid])
    assert engine.log[-1][0] == "general"
    g.execute(list({x: buf(), y: buf()}.items()))  # pairs, not a dict
    assert engine.log[-1][0] == "general"
    with pytest.raises(NotImplementedError, match="shape overrides"):  # the general path's refusal
        g.execute({x: buf(), y: buf()}, None, None, [x.uid], [[2, 3]], [[3, 1]])


def test_a_plan_change_unbinds_it_and_a_plan_without_a_launcher_never_binds():
    g, engine, x, _, y = graph()
    g.execute({x: buf(), y: buf()})
    assert "execute" in g.__dict__
    g.select_plan(1)
    assert "execute" not in g.__dict__
    g.execute({x: buf(), y: buf()})
    assert engine.log[-1][0] == "general" and "execute" in g.__dict__
    g2, engine2, x2, _, y2 = graph(launcher=False)
    for _ in range(3):
        g2.execute({x2: buf(), y2: buf()})
    assert [e[0] for e in engine2.log] == ["general"] * 3 and "execute" not in g2.__dict__


def test_seeded_mutations_through_the_bound_execute_are_refused_or_launched_with_exactly_their_pointers(torch_module):
    """400 packs, one or both operands drawn from every kind of mistake (tests/test_engine_operand_checks.py
    ``mutated_buffer``), some through the general path (tensor_uids): each is refused before any launch, or runs
    with exactly the pointers it was given, on torch's current stream, and only where every buffer fits."""
    g, engine, x, _, y = graph()
    rng = random.Random(4242)
    g.execute({x: buf(), y: buf()})
    accepted = refused = 0
    for i in range(400):
        chosen = {t: (buf(), True) for t in (x, y)}
        for t in rng.sample([x, y], rng.choice([1, 1, 2])):
            chosen[t] = mutated_buffer(rng, (2, 3), float32)
        fits = all(ok for _b, ok in chosen.values())
        torch_module.current[0] = stream = 0x1000 + i
        before = len(engine.log)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if i % 5:
                    g.execute({t: b for t, (b, _ok) in chosen.items()})
                else:
                    g.execute([chosen[x][0], chosen[y][0]], tensor_uids=[x.uid, y.uid])
        except (ValueError, TypeError) as e:
            refused += 1
            assert not fits, f"a pack of fitting buffers was refused: {e}"
            assert len(engine.log) == before, "a refused pack launched"
            continue
        accepted += 1
        assert fits, f"a buffer its tensor does not accept passed: {chosen}"
        pointers = {t.uid: b if isinstance(b, int) else b.data_ptr() for t, (b, _ok) in chosen.items()}
        on = stream if any(not isinstance(b, int) for b, _ok in chosen.values()) else 0  # (bare pointers: none)
        if i % 5:
            assert engine.log[-1] == ("launch", tuple(pointers[u] for u in engine.slot_uids), on)
        else:
            assert engine.log[-1] == ("general", pointers)
    assert accepted > 50 and refused > 50, (accepted, refused)


def test_a_graph_with_a_bound_python_execute_goes_when_dropped():
    """The bound execute holds the graph weakly (its lock, slots and launcher hold no reference to it): dropped, the
    graph goes at once, with the cyclic collector off."""
    import weakref

    from tests.support.collector import collector_off

    def ran():
        g, engine, x, _, y = graph()
        g.execute({x: buf(), y: buf()})
        g.execute({x: buf(), y: buf()})
        assert engine.log[-1][0] == "launch"
        return weakref.ref(g)

    with collector_off():
        assert ran()() is None
