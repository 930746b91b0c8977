"""Running a snippet of Python in a fresh child process for the tests that need a clean interpreter (what an import
loads, what a namespace exposes before torch is imported): the repository on PYTHONPATH, nothing else of this
process's environment, and the snippet's last line of output read as JSON."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_json(code: str, timeout: float = 300) -> Any:
    """Run ``code`` with ``python -c`` in the repository root (PYTHONPATH the repository, PATH /usr/bin:/bin only);
    it must exit 0 (else the assertion shows the end of its stderr); returns its last stdout line, parsed."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])
