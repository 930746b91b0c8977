"""Child-process side of the fuzz of serialized plans of cudnn_py's norm engine (tests/test_engine_plan_fuzz.py):
seeded mutations (tests.support.json_fuzz.mutate) of real documents (``dump_engine`` of matched norm graphs of
several kinds), each read back as ``deserialize()`` reads it (``load_engine``, then the engine's ``rebuild`` into a
fresh graph). Each case prints ``CASE n mutation`` before and ``RESULT n accepted|refused <class>|error <class>
<message>`` after, so a child killed by a signal says which. An accepted document must rebuild a graph the matcher
turns into exactly the recorded problem (``rebuild`` checks it; checked again here).

    python -m tests.support.engine_plan_fuzz SEED COUNT
"""
from __future__ import annotations

import json
import random
import sys

from tests.support.libcuda_stub import ensure_driver

ensure_driver()

import cudnn_py as cudnn  # noqa: E402
from cudnn_py.engines.norms import serial  # noqa: E402
from cudnn_py.engines.norms.match import match  # noqa: E402
from cudnn_py.errors import CudnnPyError  # noqa: E402
from cudnn_py.plans import serialize  # noqa: E402
from tests.support.json_fuzz import mutate, run_case  # noqa: E402

DT, P = cudnn.data_type, cudnn.norm_forward_phase


def norm_doc(rms: bool, phase, residual: bool, silu: bool, bias: bool, io) -> str:
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    X = g.tensor(name="X", dim=[8, 256, 1, 1], stride=[256, 1, 256, 256], data_type=io)
    R = g.tensor(name="R", dim=[8, 256, 1, 1], stride=[256, 1, 256, 256], data_type=io) if residual else None
    W = g.tensor(name="W", dim=[1, 256, 1, 1], stride=[256, 1, 256, 256], data_type=DT.FLOAT)
    B = g.tensor(name="B", dim=[1, 256, 1, 1], stride=[256, 1, 256, 256], data_type=DT.FLOAT) if bias else None
    h = g.add(X, R) if residual else X
    if residual:
        h.set_output(True).set_data_type(io)
    outs = (g.rmsnorm if rms else g.layernorm)(phase, h, W, B, 1e-5)
    for s in outs[1:]:
        if s is not None:
            s.set_output(True)
    outs[0].set_output(True).set_data_type(io)
    if silu:
        g.swish(outs[0], swish_beta=1.0).set_output(True).set_data_type(io)
    g.validate_ir()
    ident = {"engine_id": 1, "name": "norm_forward", "version": "v", "knobs": {"elems": 32}}
    tensors = [t for t in g._by_uid.values() if not t.is_virtual]
    return serialize.dump_engine(ident, serial.record(match(g)), tensors, {}).decode()


def main(seed: int, count: int) -> int:
    rng = random.Random(seed)
    bases = [norm_doc(False, P.TRAINING, False, False, True, DT.BFLOAT16),
             norm_doc(True, P.INFERENCE, True, True, False, DT.HALF),
             norm_doc(True, P.TRAINING, False, True, True, DT.FLOAT),
             norm_doc(False, P.INFERENCE, True, False, True, DT.BFLOAT16)]
    for n in range(count):
        text, what = mutate(rng, rng.choice(bases))

        def case(text=text) -> None:
            doc = serialize.load_engine(serialize.parse(text))
            g = cudnn.pygraph()
            serial.rebuild(g, doc.record, doc.tensors)
            assert serial.record(match(g)) == json.loads(json.dumps(doc.record)), "rebuilt another problem"

        run_case(n, what, case, (ValueError, TypeError, CudnnPyError))
    print("END", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
