"""GPU: data-parallel training with ``examples/data_parallel_mlp.py`` — forward and backward as cudnn_py graphs,
gradients all-reduced by NCCL (torch.distributed, one process per GPU via torch.multiprocessing). After a few SGD
steps every rank's weights must equal those of one float64 process trained on the concatenated batch.

World size 1 runs on one GPU (in-process, and spawned with NCCL); world size 2 is skipped with fewer than 2 GPUs.
"""
from __future__ import annotations

import pytest

from tests.test_data_parallel_example import load_example

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

TOL = 1e-2  # float32 (possibly TF32) matmuls over 5 SGD steps, against float64
STEPS, LR = 5, 0.1


def needs_gpus(n):
    return pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < n,
                              reason=f"needs {n} GPU(s)")


@pytest.fixture(scope="module")
def example():
    return load_example()


@pytest.fixture(scope="module")
def reference(example):
    return example.reference_train(STEPS, LR, example.Shapes())


def test_one_process_without_distributed_matches_float64(example, reference):
    torch.cuda.set_device(0)
    weights = example.train(0, 1, STEPS, LR, example.Shapes())
    assert example.max_rel_diff(weights, reference) < TOL
    # the comparison is sensitive: the weights moved, and half the batch without the all-reduce is far off
    start = {k: v.double() for k, v in example.problem(example.Shapes()).items()}
    assert example.max_rel_diff(start, reference) > 10 * TOL
    half = example.train(0, 2, STEPS, LR, example.Shapes())
    assert example.max_rel_diff(half, reference) > 10 * TOL


@needs_gpus(1)
def test_world_size_1_with_nccl_matches_float64(example, reference):
    (weights,) = example.run(1, STEPS, LR)
    assert example.max_rel_diff(weights, reference) < TOL


@needs_gpus(2)
def test_world_size_2_with_nccl_matches_one_process_on_the_whole_batch(example, reference):
    per_rank = example.run(2, STEPS, LR)
    for weights in per_rank:
        assert example.max_rel_diff(weights, reference) < TOL
    for name in example.PARAMS:
        assert torch.equal(per_rank[0][name], per_rank[1][name]), f"{name} differs between the ranks"
    # and against the same cudnn_py run in one process on the concatenated batch
    torch.cuda.set_device(0)
    single = example.train(0, 1, STEPS, LR, example.Shapes())
    assert example.max_rel_diff(per_rank[0], {k: v.double() for k, v in single.items()}) < TOL


def test_the_example_script_runs_with_one_process():
    import os
    import subprocess
    import sys

    from tests.test_data_parallel_example import EXAMPLES

    env = dict(os.environ)  # this checkout's cudnn_py first, as in the test process
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(EXAMPLES)] + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run([sys.executable, f"{EXAMPLES}/data_parallel_mlp.py", "--world-size", "1"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 rank(s), 5 SGD steps" in r.stdout
