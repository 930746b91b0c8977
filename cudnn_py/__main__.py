"""Command line: ``python -m cudnn_py info`` (what was loaded from where) and ``python -m cudnn_py replay FILE``."""
from __future__ import annotations

import argparse
import os
import platform
import sys


def _installed(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _nvidia_driver_version() -> str:
    """The kernel driver's version (e.g. 580.159.04), read where the driver publishes it."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            words = f.readline().split()
    except OSError:
        return ""
    version = next((w for w in words if w.count(".") >= 1 and w.replace(".", "").isdigit()), "")
    return f", NVIDIA driver {version}" if version else ""


def _gpu_lines() -> list[str]:
    try:
        from cuda.bindings import driver

        from .plans.device_gates import compute_capability
    except ImportError as e:
        return [f"GPU: unknown (cuda-bindings not installed: {e})"]
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:
        return [f"GPU: none (no CUDA driver: {e})"]
    if int(err) != 0:
        return [f"GPU: none (cuInit: {err!r})"]
    lines = []
    err, ver = driver.cuDriverGetVersion()
    lines.append(f"CUDA driver API: {ver // 1000}.{ver % 1000 // 10}" + _nvidia_driver_version())
    err, n = driver.cuDeviceGetCount()
    for i in range(n):
        _, dev = driver.cuDeviceGet(i)
        _, name = driver.cuDeviceGetName(256, dev)
        major, minor = divmod(compute_capability(i), 10)
        label = bytes(name).split(b"\x00", 1)[0].decode()
        lines.append(f"GPU {i}: {label} (compute capability {major}.{minor})")
    return lines or ["GPU: none (0 devices)"]


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


def _gpu_capabilities() -> list[tuple[int, int]]:
    try:
        from cuda.bindings import driver

        from .plans.device_gates import compute_capability

        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return []
        _, n = driver.cuDeviceGetCount()
        return [divmod(compute_capability(i), 10) for i in range(n)]
    except Exception:
        return []


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


def info(out=sys.stdout) -> int:
    from . import __version__
    from .backend import loader

    p = lambda s="": print(s, file=out)  # noqa: E731
    p(f"cudnn_py {__version__} ({os.path.dirname(os.path.abspath(__file__))})")
    p(f"Python {platform.python_version()} ({sys.executable}) on {platform.platform()}")
    warnings: list[str] = []
    lib: loader.LoadedLibrary | None = None
    try:
        lib = loader.load_library()
    except Exception as e:
        p(f"libcudnn: NOT LOADED\n{e}")
    else:
        from ._generated import HEADER_VERSION_STRING

        p(f"libcudnn: {lib.path}")
        p(f"  found via: {lib.found_via}")
        p(f"  vetted: {lib.vetted}")
        p(f"  version: {lib.version_string} ({lib.version}); built with CUDA runtime {lib.cudart_version}")
        p(f"  bindings generated from cuDNN {HEADER_VERSION_STRING} headers")
        try:
            from cuda import pathfinder

            for dep in ("cublasLt", "nvrtc"):
                try:
                    ld = pathfinder.load_nvidia_dynamic_lib(dep)
                    p(f"{dep}: {ld.abs_path} (found via {ld.found_via})")
                except Exception as e:
                    p(f"{dep}: not found ({type(e).__name__}: {str(e).splitlines()[0]})")
        except ImportError:
            p("cublasLt/nvrtc: unknown (cuda-pathfinder not installed)")
        for line in errata_lines(lib.version, lib.version_string, _gpu_capabilities()):
            p(line)
    copies = {os.path.realpath(x) for x in loader.mapped_libraries("libcudnn.so")}
    if len({os.path.dirname(c) for c in copies}) > 1:
        warnings.append(f"several copies of libcudnn are loaded: {sorted(copies)}")
    blas = {os.path.basename(x) for x in loader.mapped_libraries("libcublasLt.so")}
    if any(b.endswith(".12") for b in blas) and any(b.endswith(".13") for b in blas):
        warnings.append(f"cuBLASLt of CUDA 12 and 13 are both loaded: {sorted(blas)}")
    wheels = {d: _installed(d) for d in ("nvidia-cudnn-cu12", "nvidia-cudnn-cu13")}
    p("wheels: " + ", ".join(f"{d}=={v}" for d, v in wheels.items() if v) if any(wheels.values()) else "wheels: none")
    if all(wheels.values()):
        warnings.append("nvidia-cudnn-cu12 and nvidia-cudnn-cu13 are both installed; they share nvidia/cudnn/lib")
    for line in _gpu_lines():
        p(line)
    for line in framework_lines():
        p(line)
    for w in warnings:
        p(f"WARNING: {w}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cudnn_py")
    sub = ap.add_subparsers(dest="cmd")
    sub.add_parser("info", help="versions, where libcudnn/cublasLt/nvrtc were found, GPUs, frameworks, errata")
    rp = sub.add_parser("replay", help="replay the descriptor calls of a CUDNN_PY_TRACE file and compare statuses "
                                       "(in a child process: a crash is reported, naming the record)")
    rp.add_argument("trace")
    rp.add_argument("--in-process", action="store_true", help="replay in this process (a crash kills it)")
    rp.add_argument("--progress", help=argparse.SUPPRESS)  # used by the parent of an isolated replay
    tp = sub.add_parser("trace", help="trace files: `trace summary FILE` (calls, time per phase, failures with "
                                      "cuDNN's messages) or `trace replay FILE` (as replay)")
    tp.add_argument("action", choices=["summary", "replay"])
    tp.add_argument("trace")
    tp.add_argument("--json", action="store_true", help="the summary as JSON")
    ep = sub.add_parser("explain", help="run a Python script and explain every pygraph it leaves in its globals "
                                        "(the IR as built and lowered, descriptors, heuristics, plans, errata)")
    ep.add_argument("script")
    ep.add_argument("--graph", help="only the pygraph bound to this global name")
    ep.add_argument("--format", choices=["text", "json", "dot"], default="text",
                    help="json: one document, the report with --graph, else {global name: report}")
    ep.add_argument("--render", metavar="PATH", help="also write the Graphviz image (format from the extension, "
                                                    "e.g. g.svg; one graph: use --graph) - needs Graphviz's dot")
    args = ap.parse_args(argv)
    if args.cmd in (None, "info"):
        return info()
    if args.cmd == "replay":
        from .backend import replay

        if args.in_process:
            return replay.replay_in_process(args.trace, progress=args.progress)
        return replay.replay(args.trace)
    if args.cmd == "trace":
        return trace_command(args.action, args.trace, args.json)
    if args.cmd == "explain":
        return explain_command(args.script, args.graph, args.format, args.render)
    return 2


def trace_command(action: str, path: str, as_json: bool) -> int:
    from .backend import trace, trace_summary

    if action == "replay":
        from .backend import replay

        return replay.replay(path)
    try:
        calls = trace.read_checked(path)
    except OSError as e:
        print(f"cannot read {path}: {e}", file=sys.stderr)
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


def explain_command(script: str, name: str | None, fmt: str, render: str | None = None) -> int:
    """Run ``script`` as __main__ would run it, then explain the pygraph objects it leaves in its globals."""
    import json
    import runpy

    from .facade import explain, pygraph

    try:
        namespace = runpy.run_path(script, run_name="__main__")
    except SystemExit:
        namespace = {}
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
