"""Child-process side of the serialized-JSON fuzz (tests/test_hostile_json.py): seeded mutations of real serialized
output (cuDNN's kernel cache, device properties and plan JSON from tests/data/serialized, plus a kernel cache
captured here), each fed to the API that reads it. Each case prints ``CASE n target mutation`` before the call and
``RESULT n accepted|refused <class>|error <class> <message>`` after it, so a child killed by a signal says which.

    python -m tests.support.json_fuzz SEED COUNT
"""
from __future__ import annotations

import base64
import json
import random
import sys
from pathlib import Path

from tests.support.libcuda_stub import ensure_driver

ensure_driver()

import cudnn_py as cudnn  # noqa: E402
from cudnn_py.backend import Descriptor, versions  # noqa: E402
from cudnn_py.errors import CudnnError  # noqa: E402
from cudnn_py.plans import serialize  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "serialized"
H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT

ODD = [None, True, False, 0, -1, 1.9, -(1 << 63) - 1, 1 << 62, 1 << 63, 1 << 80, 1e308, "x", "12", "-5", "",
       "CUDNN_DATA_FLOAT", [], [1, 2], ["x"], {}, {"a": 1}, 7]


def live_kernel_cache() -> str:
    kc = cudnn.create_kernel_cache()
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, kernel_cache=kc)
    a, b = g.tensor([2, 8, 16], name="a"), g.tensor([2, 16, 4], name="b")
    g.relu(g.matmul(a, b)).set_output(True)
    g.build_operation_graph()
    return kc.serialize()


def paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:6]):
            yield from paths(v, prefix + (i,))


def mutate(rng: random.Random, text: str) -> tuple[str, str]:
    """(mutated text, what was done): a structural / type / value mutation of a parsed document, or bytes."""
    if rng.random() < 0.25:  # byte level
        b = bytearray(text.encode())
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            op = rng.randrange(4)
            if op == 0:
                b[i] = rng.randrange(256)
            elif op == 1:
                del b[i:i + rng.randint(1, 8)]
            elif op == 2:
                b[i:i] = rng.choice([b"{", b"[", b"]", b"}", b",", b'"', b"\\", b"0", b"-", b"\x00", b"9" * 30])
            else:
                b = b[:i]
        return b.decode("utf-8", "replace"), "bytes"
    doc = json.loads(text)
    ps = [p for p in paths(doc) if p]
    p = rng.choice(ps)
    parent = doc
    for k in p[:-1]:
        parent = parent[k]
    key = p[-1]
    old = parent[key]
    op = rng.randrange(5)
    if op == 0:
        new = rng.choice(ODD)
    elif op == 1 and isinstance(old, int) and not isinstance(old, bool):
        new = rng.choice([-old, old * 2 ** rng.randint(1, 70), old - 1, old + 1, 0, -1, str(old), float(old)])
    elif op == 2 and isinstance(parent, dict):
        del parent[key]
        return json.dumps(doc), f"del {p}"
    elif op == 3 and isinstance(old, list) and old:
        new = old * rng.choice([0, 2, 3]) if rng.random() < 0.5 else old[:-1]
    elif op == 4 and isinstance(old, str):
        new = rng.choice([old + "x", old[:-1], "-" + old, "9" * 25, base64.b64encode(b"\x00" * 3).decode()])
    else:
        new = rng.choice(ODD)
    parent[key] = new
    return json.dumps(doc), f"{p} = {json.dumps(new)[:40]}"


def run_case(n: int, what: str, call, refused: tuple[type[BaseException], ...]) -> None:
    """One fuzz case: ``CASE`` before ``call()`` and ``RESULT`` after it (accepted, refused with one of ``refused``,
    or error with the exception), so a child killed by a signal says which case killed it."""
    print("CASE", n, what, flush=True)
    try:
        call()
    except refused as e:
        res = f"refused {type(e).__name__}"
    except Exception as e:
        res = f"error {type(e).__name__} {' '.join(str(e).split())[:200]}"
    else:
        res = "accepted"
    print("RESULT", n, res, flush=True)


def main(seed: int, count: int) -> int:
    rng = random.Random(seed)
    kcs = [live_kernel_cache()] + [p.read_text() for p in sorted(DATA.glob("kernel_cache_*.json"))]
    dps = [p.read_text() for p in sorted(DATA.glob("deviceprop_*.json"))]
    blobs = [p.read_text() for p in sorted(DATA.glob("plan_*.json"))]
    running = versions.runtime_version()

    class FakePlan:
        workspace = 0

    # the parser only
    serialize.ExecutionPlan.from_json = classmethod(lambda cls, text, handle, json_checked=False: FakePlan())
    for n in range(count):
        target = rng.choice(["kernel_cache", "kernel_cache", "raw_attribute", "device_properties", "plan_blob"])
        if target in ("kernel_cache", "raw_attribute"):
            base = rng.choice(kcs)
        elif target == "device_properties":
            base = rng.choice(dps)
        else:
            doc = json.loads(rng.choice(blobs))
            doc["cudnn_version"] = running
            base = json.dumps(doc)
        text, what = mutate(rng, base)

        def case(target=target, text=text) -> None:
            if target == "kernel_cache":
                kc = cudnn.create_kernel_cache()
                kc.deserialize(text)
                back = json.loads(kc.serialize())  # success with the same meaning: the graph cuDNN holds
                assert len(back["operationGraph"]["tensors"]) == len(json.loads(text)["operationGraph"]["tensors"])
            elif target == "raw_attribute":
                d = Descriptor("CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR")
                d.set("CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION", text)
                d.finalize()
            elif target == "device_properties":
                cudnn.create_device_properties(text)
            else:
                plan, records, scratch = serialize.load(text, 0)
                assert len(records) == len(json.loads(text)["tensors"])

        run_case(n, f"{target} {what}", case, (ValueError, CudnnError))
    print("END", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
