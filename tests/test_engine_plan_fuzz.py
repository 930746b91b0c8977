"""Hostile serialized plans of cudnn_py's norm engine: seeded mutations of real documents read back as
``deserialize()`` reads them (``plans/serialize.load_engine``, then ``engines/norms/serial.rebuild``), in child
processes (tests/support/engine_plan_fuzz.py): a signal or a hang fails the test; every case ends in a clean refusal
(ValueError, TypeError or a cudnn_py error) or in a rebuilt graph whose matched problem is the recorded one."""
from __future__ import annotations

import pytest

from tests.test_hostile_json import run_fuzz


@pytest.mark.parametrize("seed", [1, 2])
def test_seeded_fuzz_of_serialized_engine_plans(seed):
    tally = run_fuzz(seed, 300, module="tests.support.engine_plan_fuzz")
    assert tally.get("refused SerializedJSONError", 0) > 100, tally  # the schema refuses most mutations itself
    assert tally.get("accepted", 0) > 0, tally  # (some mutations keep the meaning: the rebuild path ran)
