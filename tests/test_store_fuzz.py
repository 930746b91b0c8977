"""Seeded fuzz of what cudnn_py's stores read back from disk: a kernel file (sealed cubin) and a sealed record
(verdicts, remembered winners) mutated at random (bits flipped, bytes cut, appended, replaced, the seal kept or
recomputed over garbage) is always a miss: never an exception, never bytes handed on, and the cubin check refuses
every non-cubin a mutation can make. Each seed's cases run in a child process, so a signal or a hang (timeout)
fails the test instead of the runner."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r'''
import hashlib, json, os, random, struct, sys, warnings
from cudnn_py import cache_trust
from cudnn_py.engines.runtime import store

seed, cases, directory = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(seed)
warnings.simplefilter("ignore")
head = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + struct.pack("<HH", 2, store.EM_CUDA)
good = head + bytes(rng.randrange(256) for _ in range(200))
s = store.DiskCubinStore()
key = hashlib.sha256(b"fuzz").hexdigest()
path = os.path.join(directory, "kernels", key + ".cubin")

def mutate(data):
    data = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        how = rng.randrange(5)
        if how == 0 and data:
            i = rng.randrange(len(data)); data[i] ^= 1 << rng.randrange(8)
        elif how == 1 and data:
            del data[rng.randrange(len(data)):]
        elif how == 2:
            data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        elif how == 3 and data:
            i = rng.randrange(len(data)); data[i:i + 8] = bytes(rng.randrange(256) for _ in range(8))
        else:
            data = bytearray(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))))
    return bytes(data)

served = bad_check = 0
for _ in range(cases):
    s.put(key, good)
    original = open(path, "rb").read()
    spoiled = mutate(original)
    if spoiled == original:
        continue
    with open(path, "wb") as f:
        f.write(spoiled)
    got = s.get(key)
    served += got is not None and got != good      # a wrong cubin handed on
    junk = mutate(good)
    why = store.check_cubin(junk)
    looks = len(junk) >= 64 and junk[:4] == b"\x7fELF" and junk[4:6] == bytes([2, 1]) and \
        struct.unpack_from("<H", junk, 18)[0] == store.EM_CUDA
    bad_check += (why is None) != looks            # the check refuses exactly what is no 64-bit LE CUDA ELF
    record = json.dumps({"n": rng.randrange(10**6)})
    cache_trust.write_record("fuzz", "r.json", record)
    rpath = os.path.join(directory, "fuzz", "r.json")
    data = open(rpath, "rb").read()
    spoiled = mutate(data)
    if spoiled != data:
        with open(rpath, "wb") as f:
            f.write(spoiled)
        back = cache_trust.read_record("fuzz", "r.json")
        served += back is not None and back != record
print(served, bad_check)
'''


@pytest.mark.parametrize("seed", [1, 2])
def test_mutated_store_files_are_always_misses(seed, tmp_path):
    directory = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDNN_PY_CACHE": "1", "CUDNN_PY_CACHE_DIR": str(directory)}
    r = subprocess.run([sys.executable, "-c", _CHILD, str(seed), "150", str(directory)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]  # (a signal is a negative return code)
    assert r.stdout.split() == ["0", "0"], (r.stdout, r.stderr[-2000:])
