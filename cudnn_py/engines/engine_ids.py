"""One engine-id space shared by cuDNN engines and python engines.

cuDNN engine ids are the backend's ENGINE_GLOBAL_INDEX values: small non-negative ints (the frontend's own
NVRTC engines use -2 and -3). Python engines live in a reserved region far above them, so a plan's id alone says
where it runs. The routed plan list has at most one backend entry, the delegating sentinel: it stands for
"whatever the cuDNN heuristics pick", and the backend's own plan list sits behind it.
"""
from __future__ import annotations

PYTHON_ENGINE_ID_BASE = 1 << 24
BACKEND_HEURISTIC_ENGINE_ID = -1
REFERENCE_ENGINE_ID = PYTHON_ENGINE_ID_BASE  # the float64 numpy interpreter (engines/reference/)
# cudnn_py's runtime-compiled engines (engines/runtime/, NVRTC): a fixed block of 256 ids, one per engine, never
# reused for another engine (plan caches and serialized plans name them)
RUNTIME_ENGINE_ID_BASE = PYTHON_ENGINE_ID_BASE + 0x100
NORM_FORWARD_ENGINE_ID = RUNTIME_ENGINE_ID_BASE  # layernorm / rmsnorm forward (+ residual add, + SiLU): engines/norms/
RUNTIME_ENGINE_ID_END = RUNTIME_ENGINE_ID_BASE + 0x100


def is_runtime_engine(engine_id: object) -> bool:
    return isinstance(engine_id, int) and RUNTIME_ENGINE_ID_BASE <= engine_id < RUNTIME_ENGINE_ID_END


def is_python_engine(engine_id: object) -> bool:
    return isinstance(engine_id, int) and not isinstance(engine_id, bool) and engine_id >= PYTHON_ENGINE_ID_BASE


def is_backend_sentinel(engine_id: object) -> bool:
    return engine_id == BACKEND_HEURISTIC_ENGINE_ID
