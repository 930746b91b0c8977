"""No file of the repository cites a document outside it.

The project was first written against notes kept beside the checkout: the reference write-ups of the official
frontend (``node_lowering``, ``graph_flow``, ``python_api``, ``header_schema``, ``anchors``, ``engines_and_caches``,
``errata``, cited by name and by numbered section) and the folder of shared tools and data next to the repository.
A clone has none of them, so a citation of one tells the reader nothing: what the code relies on is said in its own
docstring or in docs/ (docs/internals.md for what many modules share). This test scans every tracked file.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()  # this test names the patterns, so it is not scanned

# The outside documents, by name; a name counts only while no file of the repository has it (a page added to docs/
# under one of these names may be cited).
OUTSIDE_DOCUMENTS = ("node_lowering.md", "graph_flow.md", "python_api.md", "header_schema.md", "anchors.md",
                     "engines_and_caches.md", "errata.md")
# Their stems are cited without the suffix too ("node_lowering §14.6"); these four are no word of the code's.
OUTSIDE_STEMS = ("node_lowering", "graph_flow", "header_schema", "engines_and_caches")
# Paths into the shared folder beside the checkout (or into it on the development machines).
SHARED = r"(?:\.\./)+shared\b|/work/shared\b|(?<![\w.-])shared/(?:reference|conformance|compat|bench|seed|hooks)\b"
# A section sign cites a numbered section of a document; no document of the repository numbers its sections.
SECTION = "§"

# Lines allowed to match, each with its reason: (file, text the line contains).
ALLOWED = {
    ("tests/test_cli_newcomer.py", 'hits = ["see shared/reference/errata.md #2", "../shared/bench"'):
        "samples of the very paths its hygiene scan must reject, fed to that scan",
    ("tests/test_python_layer.py", 'pytest.skip("no shared/compat beside this checkout")'):
        "a test that compares the vendored compat copy with the shared one where that exists (moving such tests "
        "onto tests/data is the test-suite part of issue 36)",
}


def tracked_files() -> list[str]:
    """The files git tracks; outside a git checkout (an unpacked archive), every file but git's, caches and
    environments, which are not the project's."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    skip = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
    found = []
    for base, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")]
        found += [(Path(base) / n).relative_to(ROOT).as_posix() for n in names]
    return found


def citation_pattern(files: list[str]) -> re.Pattern[str]:
    present = {Path(f).name for f in files}
    names = [re.escape(n) for n in OUTSIDE_DOCUMENTS if n not in present]
    stems = [re.escape(s) for s in OUTSIDE_STEMS if f"{s}.md" not in present]
    words = [rf"(?<![\w.-])(?:{'|'.join(names)})"] if names else []
    words += [rf"\b(?:{'|'.join(stems)})\b"] if stems else []
    return re.compile("|".join([*words, SHARED, SECTION]))


def citations(files: list[str]) -> list[str]:
    rx = citation_pattern(files)
    found = []
    for name in files:
        if name == THIS:
            continue
        path = ROOT / name
        if not path.is_file():  # (a tracked file deleted in the working tree)
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        for i, line in enumerate(text.splitlines(), 1):
            m = rx.search(line)
            if m and not any(f == name and allowed in line for f, allowed in ALLOWED):
                found.append(f"{name}:{i}: {m.group(0)!r} in {line.strip()[:110]}")
    return found


def test_no_file_cites_a_document_outside_the_repository():
    files = tracked_files()
    assert len(files) > 300, "the scan found too few files to be looking at the repository"
    found = citations(files)
    assert not found, ("these lines cite documents outside the repository; say what the reader needs here or in "
                       "docs/ instead:\n" + "\n".join(found))


def test_the_pattern_finds_what_it_looks_for():
    rx = citation_pattern(["cudnn_py/plans/errata.py", "docs/internals.md"])
    hits = ["(``node_lowering.md`` §14.6)", "see graph_flow §5.2", "python_api.md", "header_schema",
            "shared/reference/errata.md", "anchors.md #3", "python ../shared/compat/api_parity.py",
            "../../shared", "/work/shared/bench/run.py", "copied from shared/conformance", "flow §1.2"]
    assert [h for h in hits if not rx.search(h)] == []
    misses = ["plans/errata.py", "a shared virtual tensor", "shared_memory/", "docs/internals.md", "graph flow",
              "tests/data/compat/README.md", "python_api", "the anchors of a pattern", "cudnn_py.shared"]
    assert [m for m in misses if rx.search(m)] == []
    # a name the repository has is no longer outside it
    assert not citation_pattern(["docs/errata.md"]).search("docs/errata.md")


def test_allowed_lines_name_their_file():
    """Each allowance names a tracked file and gives a reason."""
    files = set(tracked_files())
    for (name, text), reason in ALLOWED.items():
        assert name in files and text and len(reason) > 20, name
