"""Command line: ``python -m cudnn_py info [--json] [--errata]`` (what works here, what was loaded from where),
``explain SCRIPT``, ``trace
summary FILE``, ``replay FILE``, ``cache show|verify|clear [--dir D]`` (the disk cache) and ``--version``; ``--help``
on each. Exit status 2 for what cannot be read (no such file, not a trace, a cache directory that is not
cudnn_py's; a FIFO, a device or an oversized file is refused unread: every file goes through
``cudnn_py/bounded_read.py``) and for any other OSError (one line on stderr, never a traceback), 1 from ``info`` when
no libcudnn loads, 1 from ``cache verify`` when an entry is bad and from ``cache clear`` when it left files."""
from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Any


def _installed(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _gpu_lines(facts: dict[str, Any]) -> list[str]:
    lines = []
    if facts["cuda_driver_api"] is not None:
        driver = f", NVIDIA driver {facts['nvidia_driver']}" if facts["nvidia_driver"] else ""
        lines.append(f"CUDA driver API: {facts['cuda_driver_api']}{driver}")
    lines += [f"GPU {g['index']}: {g['name']} (compute capability {g['compute_capability']})" for g in facts["gpus"]]
    if facts["missing"] is not None:
        lines.append(f"GPU: {facts['missing']}")
    return lines


def _capabilities(facts: dict[str, Any]) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in (g["compute_capability"].split(".") for g in facts["gpus"])]


# distributions that provide each framework (cupy ships one wheel per CUDA major)
_FRAMEWORK_DISTS = {"torch": ("torch",), "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"), "cuda.core": ("cuda-core",),
                    "numpy": ("numpy",)}


def _framework_version(module: str) -> str | None:
    """The installed version, from package metadata (nothing is imported), or the loaded module's own."""
    for dist in _FRAMEWORK_DISTS[module]:
        version = _installed(dist)
        if version:
            return f"{version} ({dist})"
    loaded = sys.modules.get(module)
    return getattr(loaded, "__version__", "unknown version") if loaded is not None else None


def framework_lines() -> list[str]:
    """The frameworks found and which one operands and workspace=None buffers use. Versions come from package
    metadata: torch and cupy are not imported (cudnn_py itself only uses them for objects that come from them)."""
    found = {m: _framework_version(m) for m in _FRAMEWORK_DISTS}
    lines = ["frameworks (versions from package metadata; torch and cupy are not imported):"]
    for m, v in found.items():
        state = "not installed" if v is None else v + (", imported" if m in sys.modules else "")
        lines.append(f"  {m}: {state}")
    lines.append("  operands: torch tensors and cupy arrays run on their framework's current stream, with "
                 "workspace=None from torch's caching allocator / cupy's memory pool on that stream;")
    core = found["cuda.core"]
    lines.append("  cuda.core Buffers, int pointers and other DLPack / CUDA-array-interface objects run on the "
                 "handle's stream (else the legacy default stream), with workspace=None from "
                 + (f"cuda.core {core.split()[0]}" if core else
                    "cuda.core, WHICH IS NOT INSTALLED: pass a workspace, or pip install cuda-core"))
    return lines


def errata_lines(version: int, version_string: str, capabilities: list[tuple[int, int]]) -> list[str]:
    """The errata of the loaded cuDNN. Most carry no GPU condition: a graph that matches one is refused on every
    GPU; the others say which GPUs they hold on. Each line says on which GPU it was seen, next to the GPUs here."""
    from .plans.errata import applicable

    known = applicable(version)
    gpus = ", ".join(sorted({f"sm{a}{b}" for a, b in capabilities})) or "no GPU found"
    lines = [f"errata for cuDNN {version_string}: {len(known)} (graphs that hit one are refused, naming it, on every "
             f"GPU unless it names its GPUs; GPUs here: {gpus})"]
    for erratum in known:
        only = "" if erratum.compute_capabilities is None else f"; {erratum.gpus}"
        lines.append(f"  {erratum.id} (cuDNN {erratum.versions}{only}; seen on {erratum.seen_on}): {erratum.effect}")
    return lines


def errata_facts(version: int, capabilities: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """The errata of the loaded cuDNN, as ``errata_lines`` lists them: each with the GPUs it holds on and whether
    one of the GPUs here is among them (True with no GPU found: it may hold on the GPU the code will run on)."""
    from .plans.errata import applicable

    ccs = [a * 10 + b for a, b in capabilities]
    return [{"id": e.id, "versions": e.versions, "gpus": e.gpus, "applies_to_gpus_here": not ccs or any(
        e.on_gpu(cc) for cc in ccs), "seen_on": e.seen_on, "effect": e.effect, "workaround": e.workaround,
        "source": e.source} for e in applicable(version)]


def info_facts() -> dict[str, Any]:
    """Everything ``info`` reports, as data (``info --json`` prints it as one JSON object)."""
    from . import __version__
    from .backend import loader
    from .capabilities import capabilities, gpu_facts

    facts: dict[str, Any] = {
        "cudnn_py": {"version": __version__, "path": os.path.dirname(os.path.abspath(__file__))},
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "platform": platform.platform()},
    }
    gpus = gpu_facts()
    try:
        lib = loader.load_library()
    except Exception as e:
        facts["libcudnn"] = {"found": False, "error": str(e)}
    else:
        from ._generated import HEADER_VERSION_STRING

        facts["libcudnn"] = {"found": True, "path": lib.path, "found_via": lib.found_via, "vetted": lib.vetted,
                             "version": lib.version_string, "version_number": lib.version,
                             "cudart_version": lib.cudart_version, "bindings_headers": HEADER_VERSION_STRING}
        deps: dict[str, Any] = {}
        try:
            from cuda import pathfinder
        except ImportError:
            deps = {dep: {"found": False, "error": "unknown (cuda-pathfinder not installed)"}
                    for dep in ("cublasLt", "nvrtc")}
        else:
            for dep in ("cublasLt", "nvrtc"):
                try:
                    ld = pathfinder.load_nvidia_dynamic_lib(dep)
                    deps[dep] = {"found": True, "path": ld.abs_path, "found_via": ld.found_via}
                except Exception as e:
                    deps[dep] = {"found": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
        facts["libraries"] = deps
        facts["errata"] = errata_facts(lib.version, _capabilities(gpus))
    warnings: list[str] = []
    copies = {os.path.realpath(x) for x in loader.mapped_libraries("libcudnn.so")}
    if len({os.path.dirname(c) for c in copies}) > 1:
        warnings.append(f"several copies of libcudnn are loaded: {sorted(copies)}")
    blas = {os.path.basename(x) for x in loader.mapped_libraries("libcublasLt.so")}
    if any(b.endswith(".12") for b in blas) and any(b.endswith(".13") for b in blas):
        warnings.append(f"cuBLASLt of CUDA 12 and 13 are both loaded: {sorted(blas)}")
    wheels = {d: _installed(d) for d in ("nvidia-cudnn-cu12", "nvidia-cudnn-cu13")}
    facts["wheels"] = {d: v for d, v in wheels.items() if v}
    if all(wheels.values()):
        warnings.append("nvidia-cudnn-cu12 and nvidia-cudnn-cu13 are both installed; they share nvidia/cudnn/lib")
    facts["driver"] = {k: gpus[k] for k in ("cuda_driver_api", "nvidia_driver")}
    facts["gpus"] = gpus["gpus"]
    facts["gpus_missing"] = gpus["missing"]
    found = {m: _framework_version(m) for m in _FRAMEWORK_DISTS}
    facts["frameworks"] = {m: {"installed": v is not None, "version": v, "imported": m in sys.modules}
                           for m, v in found.items()}
    facts["warnings"] = warnings
    facts["capabilities"] = {k: c.as_dict() for k, c in capabilities(gpus).items()}
    return facts


_CAPABILITY_LABELS = {"gpu_execution": "run graphs on a GPU", "deviceless_validation":
                      "validate graphs without a GPU (validate())", "reference_engine": "float64 reference engine"}


def info(out=None, as_json: bool = False, errata: bool = False) -> int:
    """Print what works here and what was loaded from where (the errata of the loaded cuDNN with ``errata``); 1
    when no libcudnn could be loaded, else 0."""
    out = sys.stdout if out is None else out
    facts = info_facts()
    gpus = {**facts["driver"], "gpus": facts["gpus"], "missing": facts["gpus_missing"]}
    lib = facts["libcudnn"]
    if as_json:
        import json

        print(json.dumps(facts, indent=1, default=str), file=out)
        return 0 if lib["found"] else 1
    p = lambda s="": print(s, file=out)  # noqa: E731
    p(f"cudnn_py {facts['cudnn_py']['version']} ({facts['cudnn_py']['path']})")
    py = facts["python"]
    p(f"Python {py['version']} ({py['executable']}) on {py['platform']}")
    p("what works here:")
    for key, label in _CAPABILITY_LABELS.items():
        c = facts["capabilities"][key]
        p(f"  {label}: {({True: 'yes', False: 'no', None: 'unknown'})[c['works']]} ({c['reason']})")
    if not lib["found"]:
        p(f"libcudnn: NOT LOADED\n{lib['error']}")
    else:
        p(f"libcudnn: {lib['path']}")
        p(f"  found via: {lib['found_via']}")
        p(f"  vetted: {lib['vetted']}")
        p(f"  version: {lib['version']} ({lib['version_number']}); built with CUDA runtime {lib['cudart_version']}")
        p(f"  bindings generated from cuDNN {lib['bindings_headers']} headers")
        for dep, d in facts["libraries"].items():
            if d["found"]:
                p(f"{dep}: {d['path']} (found via {d['found_via']})")
            elif d["error"].startswith("unknown"):
                p(f"{dep}: {d['error']}")
            else:
                p(f"{dep}: not found ({d['error']})")
        if errata:
            for line in errata_lines(lib["version_number"], lib["version"], _capabilities(gpus)):
                p(line)
        else:
            p(f"errata for cuDNN {lib['version']}: {len(facts['errata'])} known (graphs that hit one are refused, "
              "naming it; `python -m cudnn_py info --errata` lists them, a graph's explain() those it matches)")
    wheels = facts["wheels"]
    p("wheels: " + ", ".join(f"{d}=={v}" for d, v in wheels.items()) if wheels else "wheels: none")
    for line in _gpu_lines(gpus):
        p(line)
    for line in framework_lines():
        p(line)
    for w in facts["warnings"]:
        p(f"WARNING: {w}")
    return 0 if lib["found"] else 1


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that its own output (``--help``, ``--version``, usage errors) into a closed pipe
    raises BrokenPipeError like every other write of the command line (:func:`main`: status 1), instead of being
    ignored: argparse drops a failed write, which made ``--help`` end 0 with unbuffered output and 1 with buffered
    output (the flush at exit failing), depending on ``PYTHONUNBUFFERED``."""

    def _print_message(self, message: str, file=None) -> None:
        if file is None or file is sys.stderr:  # messages to stderr: as argparse (a failed write is ignored)
            super()._print_message(message, file)
        elif message:
            file.write(message)


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    ap = _Parser(
        prog="python -m cudnn_py",
        description="cudnn_py's command line: what was loaded from where (info), what a graph becomes (explain), "
                    "tools for CUDNN_PY_TRACE files (trace summary, replay) and the disk cache (cache). Without a "
                    "command: info.")
    ap.add_argument("--version", action="version", version=f"cudnn_py {__version__}",
                    help="print the package version and exit")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    ip = sub.add_parser("info", help="what works here (GPU, deviceless validation, reference engine), versions, "
                                     "where libcudnn/cublasLt/nvrtc were found, GPUs, frameworks",
                        description="What works here (running graphs on a GPU, validating them without one, the "
                                    "float64 reference engine: each yes or no with the reason, found by trying it), "
                                    "versions, where libcudnn / cublasLt / nvrtc were found, the driver and GPUs, "
                                    "the frameworks installed and how many errata the loaded cuDNN has. Exit status "
                                    "1 when no libcudnn could be loaded.")
    ip.add_argument("--json", action="store_true", help="the same facts as one JSON object (the errata always "
                                                        "listed; 'capabilities': {name: {works, reason}})")
    ip.add_argument("--errata", action="store_true", help="also list the loaded cuDNN's errata, one paragraph each")
    replay_help = ("replay the descriptor calls of a CUDNN_PY_TRACE file and compare statuses (in a child process: "
                   "a crash is reported, naming the record)")
    rp = sub.add_parser("replay", help=replay_help, description=replay_help[0].upper() + replay_help[1:] + ".")
    rp.add_argument("trace", metavar="FILE", help="a trace written with CUDNN_PY_TRACE=FILE")
    rp.add_argument("--in-process", action="store_true", help="replay in this process (a crash kills it)")
    rp.add_argument("--progress", help=argparse.SUPPRESS)  # used by the parent of an isolated replay
    trace_help = ("trace files: `trace summary FILE` (calls, time per phase, failures with cuDNN's messages) or "
                  "`trace replay FILE` (as replay)")
    tp = sub.add_parser("trace", help=trace_help, description="Trace files written with CUDNN_PY_TRACE=FILE. Exit "
                        "status 2 when FILE cannot be read or is not a trace (naming the line).")
    tp.add_argument("action", choices=["summary", "replay"],
                    help="summary: calls by function and kind, time per phase, failures with cuDNN's messages, the "
                         "call a crashed process died in; replay: as the replay command")
    tp.add_argument("trace", metavar="FILE", help="a trace written with CUDNN_PY_TRACE=FILE")
    tp.add_argument("--json", action="store_true", help="the summary as JSON")
    explain_help = ("run a Python script and explain every pygraph it leaves in its globals (the IR as built and "
                    "lowered, descriptors, heuristics, plans, errata)")
    ep = sub.add_parser("explain", help=explain_help, description=explain_help[0].upper() + explain_help[1:] +
                        ". Exit status 2 when the script cannot be read or leaves no pygraph.")
    ep.add_argument("script", metavar="SCRIPT", help="the Python file to run (as __main__, with its own globals)")
    ep.add_argument("--graph", metavar="NAME", help="only the pygraph bound to this global name")
    ep.add_argument("--format", choices=["text", "json", "dot"], default="text",
                    help="text (the default); json: one document, the report with --graph, else {global name: "
                         "report}; dot: Graphviz source")
    ep.add_argument("--render", metavar="PATH", help="also write the Graphviz image (format from the extension, "
                                                    "e.g. g.svg; one graph: use --graph) - needs Graphviz's dot")
    cache_help = ("the disk cache of planning results (CUDNN_PY_CACHE_DIR; planning uses it unless "
                  "CUDNN_PY_CACHE=0): show, verify or clear it")
    cp = sub.add_parser("cache", help=cache_help, description=cache_help[0].upper() + cache_help[1:] + ".")
    csub = cp.add_subparsers(dest="cache_cmd", metavar="ACTION", required=True)
    for action, text in (("show", "where the cache is, its entries, total size and limit, oldest and newest use"),
                         ("verify", "check every entry as a read would (nothing is deleted); list each bad one and "
                                    "why; exit status 1 if any"),
                         ("clear", "delete every entry of this user (and cudnn_py's stale temp files, nothing "
                                   "else); print how many; exit status 1, naming them, if any were left")):
        ap_ = csub.add_parser(action, help=text, description=text[0].upper() + text[1:] + ".")
        ap_.add_argument("--dir", metavar="D", help="the cache directory (default: CUDNN_PY_CACHE_DIR, else "
                                                    "$XDG_CACHE_HOME/cudnn_py or ~/.cache/cudnn_py)")
    return ap


def _run(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd is None:
        return info()
    if args.cmd == "info":
        return info(as_json=args.json, errata=args.errata)
    if args.cmd == "replay":
        from .tools import trace_replay as replay

        if args.in_process:
            return replay.replay_in_process(args.trace, progress=args.progress)
        return replay.replay(args.trace)
    if args.cmd == "trace":
        return trace_command(args.action, args.trace, args.json)
    if args.cmd == "explain":
        return explain_command(args.script, args.graph, args.format, args.render)
    if args.cmd == "cache":
        return cache_command(args.cache_cmd, args.dir)
    return 2


def main(argv: list[str] | None = None) -> int:
    """The command line. Output piped into a reader that stops early (``| head``) ends it quietly with status 1, as
    for any command whose output could not be written (``--help`` and ``--version`` included, whether stdout is
    buffered or not): the rest of the output goes to /dev/null, so neither the command nor the interpreter's final
    flush fails. Any other OSError a command meets (a file it cannot read or write, a full disk) is one line on
    stderr naming the file, and exit status 2: never a traceback."""
    try:
        try:
            return _run(argv)
        finally:  # also after argparse's SystemExit (--help, --version, usage errors): their text is buffered
            sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
        return 1
    except OSError as e:
        from .bounded_read import describe

        try:
            sys.stdout.flush()
        except (OSError, ValueError):  # stdout is what failed (a full disk): drop the rest of its output
            _stdout_to_devnull()
        print(f"python -m cudnn_py: {describe(e)}", file=sys.stderr)
        return 2


def _stdout_to_devnull() -> None:
    """Point stdout's descriptor at /dev/null, so that its last flush (the interpreter's, at exit) cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a descriptor (captured): nothing left to flush there
        pass


def trace_command(action: str, path: str, as_json: bool) -> int:
    from .backend import trace
    from .tools import trace_summary

    if action == "replay":
        from .tools import trace_replay as replay

        return replay.replay(path)
    try:
        calls = trace.read_checked(path)
    except OSError as e:
        print(f"cannot read {path}: {e.strerror or e}", file=sys.stderr)
        return 2
    except trace.TraceFormatError as e:
        print(f"not a trace: {e}", file=sys.stderr)
        return 2
    summary = trace_summary.summarize(calls)
    if as_json:
        import json

        print(json.dumps(summary, indent=1))
    else:
        print(trace_summary.text(summary, path))
    return 0


def _when(t: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def cache_command(action: str, directory: str | None) -> int:
    """``cache show|verify|clear``: nothing is created; a directory that does not exist (or is empty) is an empty
    cache; one that is not cudnn_py's (no marker, another owner, writable by others: docs/security.md) is refused
    and nothing in it is touched. Every OSError is one line on stderr and exit status 2; ``clear`` exits 1 when it
    left something with an entry's name (another user's file, one it could not delete), naming each."""
    from .cache_trust import NotOurs
    from .plans import disk_cache

    if directory is not None and not directory.strip():
        print(f"cache {action}: --dir is empty: give the cache directory (the current directory is never assumed)",
              file=sys.stderr)
        return 2
    cache = disk_cache.DiskCache(directory)
    try:
        return _cache_action(action, cache, directory)
    except NotOurs as e:
        print(f"cache {action}: not a cudnn_py cache directory that this user may use: {e}; nothing was "
              f"{'removed' if action == 'clear' else 'read'}", file=sys.stderr)
        return 2
    except OSError as e:
        where = e.filename if isinstance(e.filename, str) else cache.path
        print(f"cache {action}: {where}: {e.strerror or e}", file=sys.stderr)
        return 2


def _cache_action(action: str, cache: Any, directory: str | None) -> int:
    from .engines.runtime import store
    from .plans import disk_cache, disk_planning

    kernels = store.KernelFiles(cache.path)

    if os.path.lexists(cache.path) and not os.path.isdir(cache.path):
        print(f"cache {action}: {cache.path}: not a directory", file=sys.stderr)
        return 2
    if action == "show":
        stored = cache.entries()
        total = sum(s.size for s in stored)
        where = "--dir" if directory else disk_cache.DIR_ENV if os.environ.get(disk_cache.DIR_ENV) else "default"
        exists = "" if os.path.isdir(cache.path) else " (does not exist yet)"
        off = disk_planning.off_reason()
        print(f"disk cache: {cache.path}{exists} (from {where}); planning "
              f"{'does not use it (' + off + ')' if off else 'uses it'}")
        print(f"entries: {len(stored)}, {total} bytes ({total / 2**20:.1f} MiB) of a limit of {cache.max_bytes} "
              f"bytes ({cache.max_bytes / 2**20:.1f} MiB)")
        if stored:
            print(f"least recently used: {_when(stored[0].last_used)}; most recently used: "
                  f"{_when(stored[-1].last_used)}")
        kfiles = kernels.files()
        ktotal = sum(k.size for k in kfiles)
        print(f"compiled kernels (kernels/): {len(kfiles)}, {ktotal} bytes ({ktotal / 2**20:.1f} MiB) of a limit of "
              f"{store.max_bytes()} bytes ({store.max_bytes() / 2**20:.1f} MiB)")
        return 0
    if action == "verify":
        problems = cache.verify()
        stored = cache.entries()
        kproblems = kernels.verify()
        for path, why in problems:
            print(f"{os.path.basename(path)}: {why}")
        for path, why in kproblems:
            print(f"{store.SUBDIR}/{os.path.basename(path)}: {why}")
        print(f"{len(stored)} entries in {cache.path}: {len(problems)} bad")
        print(f"{len(kernels.files())} compiled kernels in {os.path.join(cache.path, store.SUBDIR)}: "
              f"{len(kproblems)} bad")
        return 1 if problems or kproblems else 0
    if action == "clear":
        left: list[tuple[str, str]] = []
        n = cache.clear(left)
        k = kernels.clear(left)
        print(f"removed {n} entries and {k} compiled kernels from {cache.path}")
        for path, why in left:
            print(f"cache clear: not removed: {os.path.basename(path)}: {why}", file=sys.stderr)
        if left:
            print(f"cache clear: {len(left)} file(s) left in {cache.path}", file=sys.stderr)
        return 1 if left else 0
    return 2


MAX_SCRIPT_BYTES = 64 << 20  # the largest script explain runs (read whole, through the bounded reader)


def _script_code(script: str) -> tuple[Any, str] | str:
    """``(code, file)`` of the script ``explain`` runs (a directory: its __main__.py), read through the bounded
    reader (a FIFO, a device or an oversized file is refused unread; a link the user gave is followed) and compiled;
    else why it cannot run (one line)."""
    from .bounded_read import read_regular

    target = os.path.join(script, "__main__.py") if os.path.isdir(script) else script
    try:
        data, _ = read_regular(target, MAX_SCRIPT_BYTES, "a script", follow_links=True)
        return compile(data, target, "exec", dont_inherit=True), target
    except FileNotFoundError:
        return "a directory without a __main__.py" if target != script else "no such file"
    except OSError as e:
        where = "" if target == script else f"{target}: "
        return f"{where}{e.strerror or e}"
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes (a binary file)
        where = f" (line {e.lineno})" if isinstance(e, SyntaxError) and e.lineno else ""
        msg = e.msg if isinstance(e, SyntaxError) else str(e)
        return f"not a Python script{where}: {msg}"


def _run_script(code: Any, file: str, directory: str | None) -> dict[str, Any]:
    """Run compiled ``code`` as ``python FILE`` runs a script, as runpy.run_path does (a fresh ``__main__`` module
    in sys.modules, sys.argv[0] the file; a directory first on sys.path), from the bytes that were checked: the
    file is not opened again. Its globals (a copy) when it ends, SystemExit included."""
    import builtins
    import types

    module = types.ModuleType("__main__")
    module.__dict__.update(__file__=file, __cached__=None, __loader__=None, __package__="", __spec__=None,
                           __builtins__=builtins)
    saved_main, saved_argv0 = sys.modules.get("__main__"), sys.argv[0] if sys.argv else None
    sys.modules["__main__"] = module
    if sys.argv:
        sys.argv[0] = file
    if directory is not None:
        sys.path.insert(0, directory)
    try:
        exec(code, module.__dict__)
    except SystemExit:
        pass
    finally:
        if directory is not None and directory in sys.path:
            sys.path.remove(directory)
        if sys.argv and saved_argv0 is not None:
            sys.argv[0] = saved_argv0
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
    return dict(module.__dict__)


def explain_command(script: str, name: str | None, fmt: str, render: str | None = None) -> int:
    """Run ``script`` as __main__ would run it, then explain the pygraph objects it leaves in its globals."""
    import json

    from .facade import explain, pygraph

    made = _script_code(script)
    if isinstance(made, str):
        print(f"cannot run {script}: {made}", file=sys.stderr)
        return 2
    code, file = made
    namespace = _run_script(code, file, script if file != script else None)
    graphs = {k: v for k, v in namespace.items() if isinstance(v, pygraph) and (name is None or k == name)}
    if not graphs:
        what = f"no pygraph named {name!r}" if name else "no pygraph"
        print(f"{script}: {what} among its globals", file=sys.stderr)
        return 2
    if render is not None and len(graphs) > 1:
        print(f"--render writes one image: pick one of {sorted(graphs)} with --graph", file=sys.stderr)
        return 2
    docs = {key: explain.report(g) for key, g in graphs.items()}  # one report per graph, for every output
    if fmt == "json":  # one JSON document: the report with --graph, else {global name: report}
        print(json.dumps(docs[name] if name is not None else docs, indent=1, default=str))
    else:
        for key, doc in docs.items():
            if len(docs) > 1 and fmt == "text":
                print(f"==== {key} ====")
            print(explain.formatted(doc, fmt))
    if render is not None:
        try:
            print(f"wrote {explain.render_dot(next(iter(docs.values())), render)}", file=sys.stderr)
        except RuntimeError as e:
            print(f"cannot render {render}: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
