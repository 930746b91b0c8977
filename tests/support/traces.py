"""A minimal well-formed trace file (one descriptor create, begin and end), for the CLI tests that need a real one."""
from __future__ import annotations

from pathlib import Path

SMALL_TRACE = ('{"phase": "start", "seq": 0, "pid": 1, "cudnn_py": "0"}\n'
               '{"seq": 1, "phase": "begin", "pid": 1, "fn": "cudnnBackendCreateDescriptor", '
               '"kind": "CUDNN_BACKEND_TENSOR_DESCRIPTOR"}\n'
               '{"seq": 1, "phase": "end", "pid": 1, "fn": "cudnnBackendCreateDescriptor", "status": 0, '
               '"status_name": "CUDNN_STATUS_SUCCESS", "us": 3.5}\n')


def small_trace(directory: Path) -> Path:
    path = Path(directory) / "t.jsonl"
    path.write_text(SMALL_TRACE)
    return path
