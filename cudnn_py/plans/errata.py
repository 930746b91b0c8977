"""Known cuDNN bugs, kept as data: each erratum says on which cuDNN versions it applies, which graphs it hits, what
it does and where it was seen. The planning session checks the program (the graph after the IR passes) against
the table before anything is lowered; a matching graph is refused with ``cudnnGraphNotSupportedError`` naming the
erratum and the way around it, instead of crashing the process or returning a wrong result. An erratum that names
``engines`` is narrower: only those engines are wrong on the matching graphs, so their configs are barred (with the
erratum as the reason) and the graph runs on the others. An erratum that names ``compute_capabilities`` holds on
those GPUs only: validate() cannot see the GPU, so it is checked when planning meets it (``check_on_device``).

``python -m cudnn_py info --errata`` lists the errata that apply to the loaded cuDNN.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._generated.names import PointwiseMode
from ..enums import dtype_info
from ..errors import cudnnGraphNotSupportedError, version_string

NO_UPPER = 10**6  # not seen fixed: applies to every newer version until a GPU run shows otherwise


@dataclass(frozen=True)
class Erratum:
    id: str
    first: int  # first cuDNN version affected (as far as known)
    last: int  # last one affected; NO_UPPER while not seen fixed
    match: Callable[[Any], str | None]  # program -> a description of the offending node, or None
    effect: str
    workaround: str
    source: str
    seen_on: str  # the GPUs it was seen on; without compute_capabilities a match is refused on every GPU
    engines: tuple[int, ...] = ()  # only these engines are wrong: their configs are barred, the graph is not refused
    compute_capabilities: tuple[int, int] | None = None  # (lowest, highest), e.g. (100, 109) = SM10x; None: every GPU
    # the node kinds it is about (``op_kinds``: a pointwise node also as "pointwise:<mode>"; "a|b": either): it
    # concerns a graph with all of them (``ops_only``: and no other kind); () every graph. explain() lists the
    # errata that concern the graph; ``match`` says whether one hits
    ops: tuple[str, ...] = ()
    ops_only: bool = False

    def applies_to(self, version: int) -> bool:
        return self.first <= version <= self.last

    def concerns(self, kinds: set[str]) -> bool:
        """Whether a graph with nodes of these kinds (``op_kinds``) has the ops this erratum is about."""
        if not all(kinds & set(entry.split("|")) for entry in self.ops):
            return False
        named = {k for entry in self.ops for k in entry.split("|")}
        return not self.ops_only or {k for k in kinds if ":" not in k} <= named

    def on_gpu(self, cc: int) -> bool:
        """Does it hold on a GPU of compute capability ``cc`` (0: unreadable, so it may)?"""
        if self.compute_capabilities is None or not cc:
            return True
        low, high = self.compute_capabilities
        return low <= cc <= high

    @property
    def gpus(self) -> str:
        if self.compute_capabilities is None:
            return "every GPU"
        low, high = self.compute_capabilities
        return f"compute capability {low // 10}.{low % 10} - {high // 10}.{high % 10} only"

    @property
    def versions(self) -> str:
        upper = "" if self.last == NO_UPPER else version_string(self.last)
        return f"{version_string(self.first)} - {upper or 'newer (not seen fixed)'}"


def op_kinds(*graphs: Any) -> set[str]:
    """The node kinds of these graphs or programs (``node.op``; a pointwise node also as "pointwise:<mode>")."""
    kinds: set[str] = set()
    for graph in graphs:
        for n in getattr(graph, "nodes", None) or ():
            kinds.add(n.op)
            if n.op == "pointwise" and n.params.get("mode") is not None:
                kinds.add(f"pointwise:{n.params['mode']}")
    return kinds


_GEN_INDEX, _CAST = f"pointwise:{PointwiseMode.GEN_INDEX}", f"pointwise:{PointwiseMode.IDENTITY}"


def _producers(program: Any) -> dict[int, Any]:
    return {t.uid: n for n in program.nodes for t in n.outputs.values()}


def _reaches_batched_matmul(program: Any, t: Any, producers: dict[int, Any], seen: set) -> Any | None:
    """The batched matmul (batch > 1) whose output flows into ``t`` through pointwise nodes, if any."""
    node = producers.get(t.uid)
    if node is None or id(node) in seen:
        return None
    seen.add(id(node))
    if node.op == "matmul":
        c = node.outputs["C"]
        batch = 1
        for d in c.dim[:-2]:
            batch *= int(d)
        return node if batch > 1 else None
    for u in node.inputs.values():
        found = _reaches_batched_matmul(program, u, producers, seen)
        if found is not None:
            return found
    return None


ATTENTION_KINDS = ("sdpa", "sdpa_backward", "sdpa_fp8", "sdpa_fp8_backward", "sdpa_mxfp8", "sdpa_mxfp8_backward")


def _decomposed_attention(program: Any) -> tuple[str, ...]:
    """Name prefixes of the nodes an SDPA decomposition emitted (the backend matches them as one attention
    pattern, run by its fused attention engines, not by the generic fusion engine the erratum was seen in)."""
    source = getattr(program, "source", None)
    return tuple(f"{n.name}::" for n in getattr(source, "nodes", ()) if n.op in ATTENTION_KINDS)


def _gen_index_in_batched_matmul_epilogue(program: Any) -> str | None:
    producers = _producers(program)
    attention = _decomposed_attention(program)
    for n in program.nodes:
        if attention and n.name.startswith(attention):
            continue
        if n.op == "pointwise" and n.params.get("mode") == PointwiseMode.GEN_INDEX:
            mm = _reaches_batched_matmul(program, n.inputs["IN_0"], producers, set())
            if mm is not None:
                return f"GEN_INDEX node {n.name!r} indexes the output of the batched matmul {mm.name!r}"
    return None


_WIDER = ("HALF", "BFLOAT16", "FLOAT", "DOUBLE")


def _widening_cast_into_matmul(program: Any) -> str | None:
    producers = _producers(program)
    for n in program.nodes:
        if n.op != "matmul":
            continue
        k, n_dim = int(n.inputs["A"].dim[-1]), int(n.inputs["B"].dim[-1])
        if k % 4 == 0 and n_dim % 4 == 0:
            continue
        for port in ("A", "B"):
            cast = producers.get(n.inputs[port].uid)
            if cast is None or cast.op != "pointwise" or cast.params.get("mode") != PointwiseMode.IDENTITY:
                continue
            src, dst = cast.inputs["IN_0"], cast.outputs["OUT_0"]
            if dtype_info(src.data_type).bits < dtype_info(dst.data_type).bits and dst.data_type.name in _WIDER:
                return (f"matmul {n.name!r} reads {port} through the widening cast {cast.name!r} "
                        f"({src.data_type.name} -> {dst.data_type.name}) with K = {k}, N = {n_dim}")
    return None


def _padded_unaligned(t: Any) -> bool:
    """Whether the rows of the operand's matrices (its last two axes) leave gaps and start off the 16-byte grid:
    sorted by stride, the outer axis steps further than the inner one spans, by a byte stride that is not a multiple
    of 16. Seen on the H200 (fuzz/errata_probe and the official test_matmul_fuzzer, 2026-12-03): rows padded by 3
    elements are wrong in both libraries, rows padded to 2x or 4x their length are right in both; a column-major
    or overlapping matrix has no gaps, and how the batches lie does not matter."""
    bits = dtype_info(t.data_type).bits
    reach = 1
    matrix = list(zip(t.dim, t.stride))[-2:]
    for st, d in sorted((int(st), int(d)) for d, st in matrix if int(d) > 1):
        if st > reach and (st * bits // 8) % 16:
            return True
        reach = max(reach, st * d)
    return False


def _cast_of_strided_input_into_matmul(program: Any) -> str | None:
    producers = _producers(program)
    for n in program.nodes:
        if n.op != "matmul":
            continue
        for port in ("A", "B"):
            cast = producers.get(n.inputs[port].uid)
            if cast is None or cast.params.get("mode") != PointwiseMode.IDENTITY:
                continue
            src = cast.inputs["IN_0"]
            if src.data_type is not cast.outputs["OUT_0"].data_type and _padded_unaligned(src):
                return (f"matmul {n.name!r} reads {port} through the cast {cast.name!r} of {src.name!r}, whose "
                        f"strides {list(src.stride)} leave gaps and rows off the 16-byte grid for dims "
                        f"{list(src.dim)}")
    return None


def _unverified_pointwise_broadcast(program: Any) -> str | None:
    """Pointwise-only graphs: an operand may broadcast only as a scalar (all dims 1), or along one axis of an
    output whose axes (after its leading unit axes) all exceed 1 - the forms seen right on the GPU."""
    if not program.nodes or any(n.op != "pointwise" for n in program.nodes):
        return None
    for n in program.nodes:
        out = next(iter(n.outputs.values()))
        lead = 0
        while lead < len(out.dim) - 1 and int(out.dim[lead]) == 1:
            lead += 1
        o_dims = [int(d) for d in out.dim[lead:]]
        for t in n.inputs.values():
            dims = [int(d) for d in t.dim[lead:]]
            if t.is_pass_by_value or dims == o_dims or all(d == 1 for d in t.dim):
                continue
            differ = sum(1 for d, o in zip(dims, o_dims) if d != o)
            if differ > 1 or any(o == 1 for o in o_dims):
                return (f"pointwise node {n.name!r} broadcasts {t.name!r} {list(t.dim)} to {list(out.dim)}")
    return None


def _backward_with_dropout_mask(program: Any) -> str | None:
    for n in _attention_nodes(program, ("sdpa_backward",)):
        if n.params.get("dropout") == "mask":
            return f"sdpa_backward node {n.name!r} has a dropout mask ({n.inputs['DROPOUT_MASK'].name!r})"
    return None


def _attention_nodes(program: Any, kinds: tuple[str, ...] = ("sdpa",)) -> list[Any]:
    """The user's attention nodes (their decomposition no longer names them in the program)."""
    return [n for n in getattr(getattr(program, "source", None), "nodes", ()) if n.op in kinds]


def _half_attention(program: Any) -> str | None:
    for n in _attention_nodes(program):
        dt = n.inputs["Q"].data_type.name
        if dt in ("HALF", "BFLOAT16"):
            return f"sdpa node {n.name!r} over {dt}"
    return None


def _fp8_attention(program: Any) -> str | None:
    for n in _attention_nodes(program, ("sdpa_fp8", "sdpa_fp8_backward")):
        return f"{n.op} node {n.name!r}"
    return None


def _sliding_window_long_kv(program: Any) -> str | None:
    for n in _attention_nodes(program):
        p, s_kv = n.params, int(n.inputs["K"].dim[2])
        if p.get("diagonal_band_left_bound") is not None and p.get("diagonal_band_right_bound") is None and s_kv > 1024:
            return f"sdpa node {n.name!r}: a sliding window without a causal mask and s_kv = {s_kv} > 1024"
    return None


def _with_sink(*kinds: str) -> Callable[[Any], str | None]:
    def match(program: Any) -> str | None:
        for n in _attention_nodes(program, kinds):
            if "SINK_TOKEN" in n.inputs:
                return f"{n.op} node {n.name!r} has a sink token"
        return None
    return match


def _backward_unaligned_kv(program: Any) -> str | None:
    for n in _attention_nodes(program, ("sdpa_backward",)):
        s_kv = int(n.inputs["K"].dim[2])
        if s_kv % 128 and not n.params.get("use_padding_mask"):
            return f"sdpa_backward node {n.name!r}: s_kv = {s_kv} is not a multiple of 128 and there is no padding mask"
    return None


def _unified_block_mask(program: Any) -> str | None:
    for n in program.nodes:  # a unified sdpa stays one node of the program
        if n.op == "sdpa" and "BLOCK_MASK" in n.inputs:
            return f"sdpa node {n.name!r} (unified SDPA_FWD) has a block mask {n.inputs['BLOCK_MASK'].name!r}"
    return None


def _wgrad_with_more_post_than_pre_padding(program: Any) -> str | None:
    for n in program.nodes:
        if n.op == "conv_wgrad":
            pre, post = n.params["pre_padding"], n.params["post_padding"]
            if any(int(b) > int(a) for a, b in zip(pre, post)):
                return f"conv_wgrad node {n.name!r} has post_padding {list(post)} beyond pre_padding {list(pre)}"
    return None


# the reproducer run of 2026-12-03: each case built in cudnn_py and the official frontend 1.32, same inputs, same GPU
_PROBE = "fuzz/errata_probe (results: fuzz/results/errata_probe-2026-12-03-h200-cudnn9.19.txt)"

# An OPERATIONGRAPH finalize takes time exponential in the number of operations whose inputs are all non-virtual
# (graph inputs): measured with the raw backend calls (benchmarks/fanout.py --impl raw: n RELU_FWD pointwise ops of
# one [1, 8, 16] float input, each with a non-virtual output, finalized without a handle) on cuDNN 9.28.0, CPU
# (libcuda stand-in), 2026-12-03. Any such operations count, not only the readers of one tensor: n relus of n distinct
# inputs take as long, and n relus of a virtual tensor take 7 ms.
SOURCE_OPS_LIMIT = 12  # refused from this many: 11 took 0.45-0.63 s, 12 took 1.4-2.7 s (measured below); the CPU
# suite's largest count is 11 (the MXFP8 attention backward decomposition), the rest at most 7
_SOURCE_OPS_SECONDS = ("n = 8: 0.017 s, 9: 0.051, 10: 0.15, 11: 0.45, 12: 1.4, 13: 4.0, 14: 13 (raw calls); through "
                       "validate(), first graph of a process: 11: 0.63, 12: 2.0-2.7, 14: 16; 20: not done in 60 s")


# cuDNN 9.19.0 on the H200 (benchmarks/fanout.py --impl raw --handle, 2026-12-03): 10: 0.14 s, 11: 0.44, 12: 1.2,
# 13: 2.5, 14: 7.8 - the same growth; refused there from 14 on (7.8 s and more), until the official test suite's
# graphs are checked against the lower limit on that version
SOURCE_OPS_LIMIT_9_19 = 14
_SOURCE_OPS_SECONDS_9_19 = "raw calls with a handle on the H200: n = 10: 0.14 s, 11: 0.44, 12: 1.2, 13: 2.5, 14: 7.8"


def _source_operations(program: Any, limit: int = SOURCE_OPS_LIMIT) -> str | None:
    sources = [n for n in program.nodes
               if n.inputs and all(t is not None and not t.is_virtual for t in n.inputs.values())]
    if len(sources) < limit:
        return None
    readers: dict[int, set[int]] = {}
    names: dict[int, str] = {}
    for n in program.nodes:
        for t in n.inputs.values():
            if t is not None and not t.is_virtual:
                readers.setdefault(t.uid, set()).add(id(n))
                names[t.uid] = t.name
    uid = max(readers, key=lambda u: len(readers[u]))
    return (f"{len(sources)} operations read only non-virtual tensors (tensor {names[uid]!r} has a fan-out of "
            f"{len(readers[uid])}); cuDNN's operation-graph finalize takes time exponential in that count, so "
            f"graphs with {limit} or more are refused before finalize")


_GPU_SDPA = "found by cudnn_py's GPU tests on H200 / cuDNN 9.19.0, 2026-12-01 (tests/test_gpu_sdpa.py)"
ERRATA: tuple[Erratum, ...] = (
    Erratum(
        id="opgraph-finalize-source-op-fanout", first=92800, last=NO_UPPER, match=_source_operations,
        effect="the operation-graph finalize does not return in practice: its time grows about 3x with each "
               f"operation reading only non-virtual tensors ({_SOURCE_OPS_SECONDS})",
        workaround=f"split the graph so that each has at most {SOURCE_OPS_LIMIT - 1} such operations, or feed them "
                   "from one shared virtual tensor (e.g. an identity op on the input)",
        seen_on="every GPU and deviceless (a host-side cost of the finalize)",
        source="measured by cudnn_py on cuDNN 9.28.0, CPU, 2026-12-03 with the raw backend calls of "
               "benchmarks/fanout.py --impl raw (n RELU_FWD ops of one non-virtual [1,8,16] float tensor, non-virtual "
               "outputs, OPERATIONGRAPH finalized without a handle); run it on a GPU to see other versions"),
    Erratum(
        id="opgraph-finalize-source-op-fanout-9.19", first=91900, last=92799,
        match=lambda program: _source_operations(program, SOURCE_OPS_LIMIT_9_19),
        effect="the operation-graph finalize does not return in practice: its time grows about 3x with each "
               f"operation reading only non-virtual tensors ({_SOURCE_OPS_SECONDS_9_19})",
        workaround=f"split the graph so that each has at most {SOURCE_OPS_LIMIT_9_19 - 1} such operations, or feed "
                   "them from one shared virtual tensor (e.g. an identity op on the input)",
        seen_on="H200 (sm90); a host-side cost of the finalize",
        source="measured by cudnn_py on H200 / cuDNN 9.19.0, 2026-12-03, with the raw backend calls of "
               "benchmarks/fanout.py --impl raw --handle (the same call sequence as the 9.28 entry)"),
    Erratum(
        id="sdpa-sink-before-9.13.0", first=90000, last=91299, match=_with_sink("sdpa"), ops=("sdpa",),
        effect="cuDNN's attention engines take no sink token before 9.13.0",
        workaround="use cuDNN >= 9.13.0 for attention sinks",
        seen_on="every GPU (the official frontend's version gate)",
        source="cudnn-frontend SDPANodeBase::pre_validate_node (it refuses a sink token below "
               "cuDNN 9.13.0)"),
    Erratum(
        id="sdpa-block-mask-sm10x-before-9.26", first=91400, last=92599, match=_unified_block_mask,
        ops=("sdpa",),
        compute_capabilities=(100, 109),
        effect="the unified attention with a block mask can rescale uninitialized tensor memory on SM10x when the "
               "first KV block of a row is masked out (the block mask's contents are runtime data, so no graph "
               "with a block mask is safe there)",
        workaround="use cuDNN >= 9.26.0 on SM10x (Blackwell) GPUs, or no block mask",
        seen_on="SM10x (the official frontend's gate; not reproduced by cudnn_py)",
        source="cudnn-frontend 1.32 include/cudnn_frontend/node/sdpa_support_surface.h (~l.109-118: 'Unified SDPA "
               "with Block_mask on SM10x requires cuDNN 9.26.0 or newer due to a masked-tile initialization bug')"),
    Erratum(
        id="sdpa-backward-unaligned-kv", first=90000, last=91500, match=_backward_unaligned_kv,
        ops=("sdpa_backward",),
        effect="attention backward with s_kv not a multiple of 128 needs a padding mask on cuDNN <= 9.15.0 (the "
               "official frontend injects one with its own sequence-length buffers); under CUDA-graph replay it "
               "is an illegal memory access until 9.15.1",
        workaround="pass use_padding_mask=True with seq_len_q / seq_len_kv tensors (full lengths), pad s_kv to a "
                   "multiple of 128, or use cuDNN >= 9.15.1",
        seen_on="every GPU (the official frontend's workaround and release notes)",
        source="cudnn-frontend scaled_dot_product_flash_attention.h (~l.1190, "
               "the workaround padding mask), release 1.16 notes (PR #179)"),
    Erratum(
        id="sdpa-half-9.10.0", first=91000, last=91001, match=_half_attention, ops=("sdpa",),
        effect="fp16 / bf16 attention has known bugs on cuDNN 9.10.0 and 9.10.1",
        workaround="use cuDNN 9.10.2 or newer (the official frontend rejects these versions too)",
        seen_on="every GPU (the official frontend's version gate)",
        source="cudnn-frontend include/cudnn_frontend/node/"
               "scaled_dot_product_flash_attention.h (~l.1110), sdpa_support_surface.h (~l.199)"),
    Erratum(
        id="sdpa-fp8-9.10.0", first=91000, last=91000, match=_fp8_attention,
        ops=("sdpa_fp8|sdpa_fp8_backward",),
        effect="FP8 attention (forward and backward) has known bugs on cuDNN 9.10.0",
        workaround="use another cuDNN version (the official frontend rejects 9.10.0 for FP8 attention too)",
        seen_on="every GPU (the official frontend's version gate)",
        source="cudnn-frontend SDPA_attributes::"
               "validate_sdpa_support_surface and SDPAFP8BackwardNode::pre_validate_node (ver != 9.10.0)"),
    Erratum(
        id="sdpa-sliding-window-long-kv-9.14.0", first=91400, last=91400, match=_sliding_window_long_kv,
        ops=("sdpa",),
        effect="non-causal attention with a sliding window and s_kv > 1024 is wrong on cuDNN 9.14.0",
        workaround="add the causal mask (right bound 0), keep s_kv <= 1024, or use another cuDNN version",
        seen_on="every GPU (the official frontend's version gate)",
        source="cudnn-frontend sdpa_support_surface.h (the frontend rejects it)"),
    Erratum(
        id="gen-index-in-batched-matmul-epilogue", first=91900, last=NO_UPPER,
        match=_gen_index_in_batched_matmul_epilogue, ops=("matmul", _GEN_INDEX),
        effect="GEN_INDEX fused after a matmul with batch > 1 gives wrong indices for every batch but the first "
               "(a silently wrong mask)",
        workaround="run the mask as a graph of its own, use batch 1, or the unified band mask "
                   "(implementation=UNIFIED, cuDNN >= 9.21)",
        seen_on="H200 (sm90)",
        source="found by cudnn_py on H200 / cuDNN 9.19.0 (plan eng7_k24=41), 2026-12-01; reproduced with the official "
               "frontend 1.32 on the same GPU and cuDNN, 2026-12-03 (case genindex-batched: relative error 0.126 in "
               "both, batch 0 right, batch 1 0.18; plan eng7_k24=41 in both): " + _PROBE),
    Erratum(
        id="matmul-widening-cast-unaligned", first=90000, last=NO_UPPER,
        match=_widening_cast_into_matmul, ops=("matmul", _CAST),
        effect="a matmul input widened by a fused cast, with K or N not a multiple of 4, overruns a staging buffer: "
               "unaligned K gives wrong results, unaligned N an illegal memory access that kills the CUDA context",
        workaround="cast in a graph of its own, or pad K and N to multiples of 4",
        seen_on="H200 (sm90)",
        source="cudnn-frontend PR #330 (its matmul fuzzer's MATMUL_FUZZ_UNALIGNED mode); the official frontend 1.32 "
               "kills its process on H200 / cuDNN 9.19 on two such matmuls of its own test suite (test_matmul_fuzzer "
               "cases u126_b32_M9xN169xK100_bf16_none and u217_b7_M361xN289xK2116_f16_none, 2026-12-03)"),
    Erratum(
        id="matmul-cast-of-strided-input", first=91900, last=NO_UPPER,
        match=_cast_of_strided_input_into_matmul, ops=("matmul", _CAST),
        effect="a matmul input made by a fused cast of an operand whose padded rows start off the 16-byte grid gives "
               "wrong results (relative error 0.6-1.0); rows padded to a multiple of 16 bytes, column-major and "
               "overlapping operands are right",
        workaround="make the operand contiguous before the graph, or cast in a graph of its own",
        seen_on="H200 (sm90)",
        source="found by cudnn_py's graph fuzzer on H200 / cuDNN 9.19.0 (plans eng7_k24=32..41), 2026-12-01: "
               "fuzz/graph_fuzz.py seed 20261201, cases 20, 82, 211, 229, 263, 463, 716, 904, 1009, ...; reproduced "
               "with the official frontend 1.32 on the same GPU and cuDNN, 2026-12-03 (cases mmcast-fz20/82/211/229/"
               "263, rows padded by 3 elements: the same plans and errors in both, 0.62-1.0; the official "
               "test_mixed_precision_matmul's overlapping B: right in both, eng4_k24=12; 15 cases of the official "
               "test_matmul_fuzzer with rows padded 2x / 4x pass in both with the erratum lifted): " + _PROBE),
    Erratum(
        id="pointwise-broadcast", first=91900, last=NO_UPPER,
        match=_unverified_pointwise_broadcast, ops=("pointwise",), ops_only=True,
        effect="a pointwise-only graph whose operand broadcasts along two or more axes (or along an axis of an "
               "output with a unit axis) gives wrong results or leaves outputs unwritten (engine eng1)",
        workaround="broadcast along one axis at a time (one op per broadcast axis), or expand the operand first",
        seen_on="H200 (sm90)",
        source="found by cudnn_py's graph fuzzer on H200 / cuDNN 9.19.0 (eng1_k24=34..37), 2026-12-01: e.g. "
               "[8,33,64] + [1,1,64] relative error nan, [8,33,64] + [8,1,1] 1.19, [99,1,16] + [99,1,1] 0.70; "
               "right: [8,33,64] + [8,33,1], [1,33,64], [8,1,64], [1,1,1]; reproduced with the official frontend "
               "1.32 on the same GPU and cuDNN, 2026-12-03 (cases pwb-1x1x64 / 8x1x1 / 99x1x16: the same errors and "
               "unwritten elements in both, eng1; the control [8,33,64] + [8,33,1] right in both): " + _PROBE),
    Erratum(
        id="sdpa-backward-dropout-mask", first=91900, last=NO_UPPER, match=_backward_with_dropout_mask,
        ops=("sdpa_backward",),
        effect="sdpa_backward with a dropout mask (the (mask, scale, scale_inv) form) gives wrong dQ and dK (relative "
               "error 0.05-0.19 against float64 in fp16); an all-ones mask and the (probability, seed, offset) form "
               "are right",
        workaround="use the (probability, seed, offset) dropout, or compute the backward outside cuDNN",
        seen_on="H200 (sm90)",
        source=_GPU_SDPA + ": test_backward_options[dropout-mask]; reproduced with the official frontend 1.32 on the "
               "same GPU and cuDNN, 2026-12-03 (cases sdpa-bwd-dropout-testcfg: dQ 0.0499, dK 0.0379; "
               "sdpa-bwd-dropout-causal128: dQ 0.192, dK 0.188; the same in both, plan eng6_k24=26): " + _PROBE),
    Erratum(
        id="wgrad-post-padding-engines-1-20", first=91900, last=NO_UPPER, engines=(1, 20),
        match=_wgrad_with_more_post_than_pre_padding, ops=("conv_wgrad",),
        effect="engines 1 and 20 compute a wgrad whose post padding exceeds its pre padding wrongly (relative "
               "error 0.45-1.2, every data type, grouped or not); engine 0 and the runtime-compiled engines are right",
        workaround="the other engines are used (configs of engines 1 and 20 are barred); or pad symmetrically",
        seen_on="H200 (sm90), 3-D convolutions (2-D not yet probed)",
        source="found by cudnn_py's conv fuzzer on H200 / cuDNN 9.19.0, 2026-12-01: fuzz/conv_fuzz.py seed 20261201 "
               "case 169 (3-D depthwise fp16 wgrad, pre [0,0,0] post [1,0,0]: eng20 0.75, eng0 2.4e-4); every plan of "
               "build_plans(ALL) probed: wrong for groups 1/2/16, stride 1, dilation 1, fp32 and bf16; right with "
               "symmetric padding; reproduced with the official frontend 1.32 on the same GPU and cuDNN, 2026-12-03: "
               "its heuristics choose eng20 and its dW is wrong (0.709, as ours on eng20; eng0 right in both): "
               + _PROBE),
)


def engine_errata(program: Any, version: int) -> list[tuple[Erratum, str]]:
    """The engine-level errata the program matches, each with where."""
    out = []
    for e in applicable(version):
        if e.engines:
            where = e.match(program)
            if where is not None:
                out.append((e, where))
    return out


def engine_reason(e: Erratum, where: str, version: int) -> str:
    return (f"cuDNN erratum {e.id} (cuDNN {e.versions}; loaded {version_string(version)}): {where}; engine(s) "
            f"{', '.join(map(str, e.engines))} give wrong results here. Source: {e.source}")


def applicable(version: int) -> list[Erratum]:
    return [e for e in ERRATA if e.applies_to(version)]


def check(program: Any, version: int) -> None:
    """Refuse a program that hits an erratum of the running cuDNN (those of some GPUs only: check_on_device)."""
    for e in applicable(version):
        if e.engines or e.compute_capabilities is not None:  # engine_errata; check_on_device
            continue
        _refuse_if_matched(e, program, version, "")


def on_device(program: Any, version: int) -> list[tuple[Erratum, str]]:
    """The GPU-conditioned errata the program matches (checked when planning meets the GPU), each with where."""
    return [(e, where) for e in applicable(version) if e.compute_capabilities is not None and not e.engines
            and (where := e.match(program)) is not None]


def check_on_device(program: Any, version: int, cc: int) -> None:
    """Refuse a program that hits an erratum of the running cuDNN on a GPU of compute capability ``cc``. An
    unreadable capability (0) counts as a match: refused, not run on a GPU where the result could be wrong."""
    for e in applicable(version):
        if e.compute_capabilities is None or e.engines or not e.on_gpu(cc):
            continue
        gpu = f"compute capability {cc // 10}.{cc % 10}" if cc else "compute capability unreadable (cuda-bindings?)"
        _refuse_if_matched(e, program, version, f"; {e.gpus}, this GPU: {gpu}")


def _refuse_if_matched(e: Erratum, program: Any, version: int, gpu: str) -> None:
    where = e.match(program)
    if where is not None:
        raise cudnnGraphNotSupportedError(
            f"cuDNN erratum {e.id} (cuDNN {e.versions}{gpu}; loaded {version_string(version)}): {where}. "
            f"Effect: {e.effect}. Way around: {e.workaround}. Source: {e.source}")
