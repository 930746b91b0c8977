"""What a descriptor needs before ``finalize()``, which reads cuDNN cannot answer, and the raw-layer errata.

Hand-written data, checked by :class:`~cudnn_py.backend.descriptor.Descriptor` before it calls the backend. Every
entry says where it comes from:

* ``header``: the descriptor's doc block in ``bindings/headers/9.28.0/cudnn_graph.h`` ("Required attribute.",
  "This attribute is required.", "Required to be set before finalization.");
* ``schema``: the attribute types of the 9.28 headers, cross-checked live on cuDNN 9.28 (set, finalize, get back);
  ``flow``: the official cudnn-frontend's backend calls (github.com/NVIDIA/cudnn-frontend, 1.23);
* ``probe``: what cuDNN 9.28 did when the attribute was left out, run in a child process on the CPU (with the test
  libcuda stub): SIGSEGV / SIGABRT (the reason the check exists), or a silent success with a made-up value.

The header also calls some attributes required that cuDNN and the frontend do without; those are left out, and
the reason is written next to the descriptor (deprecated handles, mode-dependent norm inputs).

A :class:`Requirement` is met when at least one of its attributes was set through the ``Descriptor`` object; one
with ``when`` only applies once that attribute is set. Attributes the loaded library does not have are skipped
(a requirement made only of such attributes does not apply).
"""
from __future__ import annotations

from typing import NamedTuple


class Requirement(NamedTuple):
    any_of: tuple[str, ...]  # at least one of these attributes must be set
    source: str
    when: str | None = None  # the requirement applies only when this attribute is set


def _header(kind: str, *attrs: str, note: str = "") -> tuple[Requirement, ...]:
    src = f"header: {kind} doc, 'Required attribute.'" + (f"; {note}" if note else "")
    return tuple(Requirement((a,), src) for a in attrs)


_A = "CUDNN_ATTR_"

# descriptor kind -> what finalize() needs
REQUIRED: dict[str, tuple[Requirement, ...]] = {
    # ---------------------------------------------------------------------------------------------- engines, plans
    "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR": (
        Requirement((_A + "ENGINECFG_ENGINE",),
                    "header: ENGINECFG doc, 'Required attribute.'; probe: finalize with nothing set, or with only "
                    "KNOB_CHOICES set, is a SIGSEGV (9.28)"),
    ),
    # EXECUTION_PLAN_HANDLE is 'Required' in the header but deprecated in 9.28 and never set by the frontend when it
    # builds a plan (flow §1.6, quirk 5); only the JSON route needs it, and that is the backend's to report.
    "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR": (
        Requirement((_A + "EXECUTION_PLAN_ENGINE_CONFIG", _A + "EXECUTION_PLAN_JSON_REPRESENTATION"),
                    "header: EXECUTION_PLAN doc, ENGINE_CONFIG 'Required attribute.'; flow §5.1: a plan is loaded "
                    "from JSON instead; probe: finalize with nothing set, or with only RUN_ONLY_INTERMEDIATE_UIDS or "
                    "CUDA_GRAPH_RETENTION, is a SIGSEGV (9.28); JSON alone gives BAD_PARAM"),
    ),
    "CUDNN_BACKEND_ENGINE_DESCRIPTOR": _header(
        "ENGINE", _A + "ENGINE_OPERATION_GRAPH", _A + "ENGINE_GLOBAL_INDEX",
        note="probe: without the graph BAD_PARAM_NULL_POINTER, without the index NOT_SUPPORTED"),
    "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR": _header(
        "ENGINEHEUR", _A + "ENGINEHEUR_OPERATION_GRAPH", _A + "ENGINEHEUR_MODE"),
    "CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR": _header(
        "KNOB_CHOICE", _A + "KNOB_CHOICE_KNOB_TYPE", _A + "KNOB_CHOICE_KNOB_VALUE",
        note="probe: an empty one finalizes (as knob SPLIT_K = 0)"),
    "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR": _header(
        "VARIANT_PACK", _A + "VARIANT_PACK_UNIQUE_IDS", _A + "VARIANT_PACK_DATA_POINTERS",
        _A + "VARIANT_PACK_WORKSPACE", note="probe: an empty one finalizes"),
    # OPERATIONGRAPH_HANDLE is 'Required' in the header but deprecated; a graph finalizes without a handle since
    # 9.8 (flow §1.2, schema §5.1).
    "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR": _header(
        "OPERATIONGRAPH", _A + "OPERATIONGRAPH_OPS", note="probe: without it BAD_PARAM (buildDAG)"),
    "CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR": (
        Requirement((_A + "KERNEL_CACHE_OPERATION_GRAPH", _A + "KERNEL_CACHE_JSON_REPRESENTATION"),
                    "header: KERNEL_CACHE doc, OPERATION_GRAPH 'Required attribute, unless the descriptor is "
                    "populated from CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION instead.'"),
    ),
    # ---------------------------------------------------------------------------------------------- tensors
    "CUDNN_BACKEND_TENSOR_DESCRIPTOR": _header(
        "TENSOR", _A + "TENSOR_UNIQUE_ID", _A + "TENSOR_DATA_TYPE", _A + "TENSOR_BYTE_ALIGNMENT",
        _A + "TENSOR_DIMENSIONS", _A + "TENSOR_STRIDES",
        note="probe: without UNIQUE_ID it finalizes with uid -1, without DATA_TYPE as FLOAT") + (
        Requirement((_A + "TENSOR_VECTORIZED_DIMENSION",),
                    "header: TENSOR doc, 'Required to be set before finalization if CUDNN_ATTR_TENSOR_VECTOR_COUNT "
                    "is set to a value different than its default'",
                    when=_A + "TENSOR_VECTOR_COUNT"),
    ),
    # ---------------------------------------------------------------------------------------------- op parameters
    "CUDNN_BACKEND_POINTWISE_DESCRIPTOR": _header(
        "POINTWISE", _A + "POINTWISE_MODE", _A + "POINTWISE_MATH_PREC",
        note="probe: an empty one finalizes; the pointwise operation using it then fails"),
    "CUDNN_BACKEND_MATMUL_DESCRIPTOR": _header(
        "MATMUL", _A + "MATMUL_COMP_TYPE", note="probe: an empty one finalizes"),
    # COMP_TYPE is 'Required' in the header too, but cuDNN defaults it to FLOAT (probe: an empty REDUCTION finalizes
    # and reads back ADD / FLOAT), and callers rely on that (tests/test_descriptor.py finalizes NORM2 without it).
    "CUDNN_BACKEND_REDUCTION_DESCRIPTOR": _header(
        "REDUCTION", _A + "REDUCTION_OPERATOR", note="probe: an empty one finalizes, as ADD"),
    "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR": _header(
        "CONVOLUTION", _A + "CONVOLUTION_COMP_TYPE", _A + "CONVOLUTION_CONV_MODE", _A + "CONVOLUTION_SPATIAL_DIMS",
        _A + "CONVOLUTION_DILATIONS", _A + "CONVOLUTION_FILTER_STRIDES", _A + "CONVOLUTION_PRE_PADDINGS",
        _A + "CONVOLUTION_POST_PADDINGS"),
    "CUDNN_BACKEND_RESAMPLE_DESCRIPTOR": _header(
        "RESAMPLE", _A + "RESAMPLE_SPATIAL_DIMS", _A + "RESAMPLE_STRIDES", _A + "RESAMPLE_PRE_PADDINGS",
        _A + "RESAMPLE_POST_PADDINGS", _A + "RESAMPLE_WINDOW_DIMS",
        note="probe: an empty one finalizes, and reading its arrays then fails"),
    # ---------------------------------------------------------------------------------------------- operations
    "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR": (
        Requirement((_A + "OPERATION_POINTWISE_PW_DESCRIPTOR",),
                    "header: OPERATION_POINTWISE doc, PW_DESCRIPTOR 'This attribute is required.'; probe: an empty "
                    "operation finalizes, and so does a graph of it"),
        Requirement((_A + "OPERATION_POINTWISE_XDESC", _A + "OPERATION_POINTWISE_DYDESC"),
                    "header: XDESC 'required for pointwise mathematical functions or activation forward', DYDESC "
                    "'required for pointwise activation back propagation'; probe: PW_DESCRIPTOR alone finalizes, "
                    "and so does a graph of it"),
        Requirement((_A + "OPERATION_POINTWISE_YDESC", _A + "OPERATION_POINTWISE_DXDESC"),
                    "header: YDESC (forward) / DXDESC (back propagation), as above"),
    ),
    "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR": _header(
        "OPERATION_MATMUL", _A + "OPERATION_MATMUL_ADESC", _A + "OPERATION_MATMUL_BDESC",
        _A + "OPERATION_MATMUL_CDESC", _A + "OPERATION_MATMUL_DESC",
        note="probe: without DESC the operation and its graph finalize"),
    "CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR": _header(
        "OPERATION_REDUCTION", _A + "OPERATION_REDUCTION_XDESC", _A + "OPERATION_REDUCTION_YDESC") + (
        Requirement((_A + "OPERATION_REDUCTION_DESC", _A + "OPERATION_REDUCTION_SUBGRAPH"),
                    "header: OPERATION_REDUCTION doc, DESC 'Required attribute.'; the 9.27 reducer sub-graph "
                    "(CUDNN_ATTR_OPERATION_REDUCTION_SUBGRAPH) describes the reduction instead; probe: without "
                    "either, the operation and its graph finalize"),
    ),
    "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR": _header(
        "OPERATION_CONVOLUTION_FORWARD", *(_A + "OPERATION_CONVOLUTION_FORWARD_" + a
                                           for a in ("ALPHA", "BETA", "CONV_DESC", "W", "X", "Y"))),
    "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR": _header(
        "OPERATION_CONVOLUTION_BACKWARD_DATA", *(_A + "OPERATION_CONVOLUTION_BWD_DATA_" + a
                                                 for a in ("ALPHA", "BETA", "CONV_DESC", "W", "DX", "DY"))),
    "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR": _header(
        "OPERATION_CONVOLUTION_BACKWARD_FILTER", *(_A + "OPERATION_CONVOLUTION_BWD_FILTER_" + a
                                                   for a in ("ALPHA", "BETA", "CONV_DESC", "DW", "X", "DY"))),
    "CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR": tuple(
        Requirement((_A + "OPERATION_GENSTATS_" + a,),
                    "header: OPERATION_GEN_STATS doc, 'This attribute is required.'; probe: an empty one finalizes")
        for a in ("MODE", "MATH_PREC", "XDESC", "SUMDESC", "SQSUMDESC")),
    "CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR": _header(
        "OPERATION_BN_FINALIZE_STATISTICS", *(_A + "OPERATION_BN_FINALIZE_" + a for a in (
            "STATS_MODE", "MATH_PREC", "Y_SUM_DESC", "Y_SQ_SUM_DESC", "SCALE_DESC", "BIAS_DESC", "SAVED_MEAN_DESC",
            "SAVED_INV_STD_DESC", "EQ_SCALE_DESC", "EQ_BIAS_DESC", "ACCUM_COUNT_DESC", "EPSILON_DESC",
            "EXP_AVERATE_FACTOR_DESC"))),
    "CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR": _header(
        "OPERATION_RESAMPLE_FWD", _A + "OPERATION_RESAMPLE_FWD_DESC", _A + "OPERATION_RESAMPLE_FWD_XDESC",
        _A + "OPERATION_RESAMPLE_FWD_YDESC",
        note="probe: an empty one finalizes, and its ALPHA/BETA then read as uninitialized memory"),
    "CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR": _header(
        "OPERATION_RESAMPLE_BWD", _A + "OPERATION_RESAMPLE_BWD_DESC", _A + "OPERATION_RESAMPLE_BWD_DXDESC",
        _A + "OPERATION_RESAMPLE_BWD_DYDESC"),
    "CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR": _header(
        "OPERATION_CONCAT", _A + "OPERATION_CONCAT_AXIS", _A + "OPERATION_CONCAT_INPUT_DESCS",
        _A + "OPERATION_CONCAT_OUTPUT_DESC"),
    "CUDNN_BACKEND_OPERATION_SIGNAL_DESCRIPTOR": _header(
        "OPERATION_SIGNAL", _A + "OPERATION_SIGNAL_MODE", _A + "OPERATION_SIGNAL_FLAGDESC",
        _A + "OPERATION_SIGNAL_VALUE", _A + "OPERATION_SIGNAL_XDESC", note="probe: an empty one finalizes"),
    # The header also calls SCALE/BIAS/EPSILON (forward) and SCALE/DSCALE/DBIAS (backward) required, but which of them
    # a norm takes depends on its mode (RMS norm has no bias; inference needs no epsilon when the statistics are
    # given); the backend checks those per mode, so only the mode-independent ones are here.
    "CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR": _header(
        "OPERATION_NORM_FORWARD", _A + "OPERATION_NORM_FWD_MODE", _A + "OPERATION_NORM_FWD_PHASE",
        _A + "OPERATION_NORM_FWD_XDESC", _A + "OPERATION_NORM_FWD_YDESC"),
    "CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR": _header(
        "OPERATION_NORM_BACKWARD", _A + "OPERATION_NORM_BWD_MODE", _A + "OPERATION_NORM_BWD_XDESC",
        _A + "OPERATION_NORM_BWD_DYDESC", _A + "OPERATION_NORM_BWD_DXDESC"),
    "CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR": _header(
        "OPERATION_RESHAPE", _A + "OPERATION_RESHAPE_XDESC", _A + "OPERATION_RESHAPE_YDESC"),
    "CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR": _header(
        "OPERATION_RNG", _A + "OPERATION_RNG_DESC", _A + "OPERATION_RNG_YDESC", _A + "OPERATION_RNG_OFFSET_DESC",
        note="probe: an empty one finalizes, and so does a graph of it"),
    "CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR": _header(
        "OPERATION_PAGED_CACHE_LOAD", *(_A + "OPERATION_PAGED_CACHE_LOAD_" + a
                                        for a in ("YDESC", "CONTAINER_DESC", "PAGE_TABLE_DESC", "SEQUENCE_DESC"))),
    "CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR": _header(
        "OPERATION_BLOCK_SCALE_QUANTIZE", *(_A + "OPERATION_BLOCK_SCALE_QUANTIZE_" + a
                                            for a in ("XDESC", "YDESC", "SCALE_DESC", "MATH_PREC", "BLOCK_SIZE"))),
    "CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR": _header(
        "OPERATION_BLOCK_SCALE_DEQUANTIZE", *(_A + "OPERATION_BLOCK_SCALE_DEQUANTIZE_" + a
                                              for a in ("XDESC", "SCALE_DESC", "YDESC", "MATH_PREC", "BLOCK_SIZE"))),
    "CUDNN_BACKEND_OPERATION_EXPAND_BAND_MATRIX_DESCRIPTOR": _header(
        "OPERATION_EXPAND_BAND_MATRIX", *(_A + "OPERATION_EXPAND_BAND_MATRIX_" + a
                                          for a in ("XDESC", "YDESC", "LOWER_BANDWIDTH", "UPPER_BANDWIDTH", "AXIS"))),
    "CUDNN_BACKEND_OPERATION_CONTRACT_BAND_MATRIX_DESCRIPTOR": _header(
        "OPERATION_CONTRACT_BAND_MATRIX", *(_A + "OPERATION_CONTRACT_BAND_MATRIX_" + a
                                            for a in ("XDESC", "YDESC", "LOWER_BANDWIDTH", "UPPER_BANDWIDTH", "AXIS"))),
    "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR": _header(
        "OPERATION_SDPA_FWD", *(_A + "OPERATION_SDPA_FWD_" + a for a in ("QDESC", "KDESC", "VDESC", "ODESC"))),
    "CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR": _header(
        "OPERATION_SDPA_BWD", *(_A + "OPERATION_SDPA_BWD_" + a for a in (
            "QDESC", "KDESC", "VDESC", "ODESC", "STATSDESC", "DQDESC", "DKDESC", "DVDESC", "DODDESC"))),
    "CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR": _header(
        "OPERATION_MOE_GROUPED_MATMUL", *(_A + "OPERATION_MOE_GROUPED_MATMUL_" + a for a in (
            "MODE", "MATH_PREC", "TOKEN_DESC", "WEIGHT_DESC", "FIRST_TOKEN_OFFSET_DESC", "OUTPUT_DESC"))),
    # the header calls LEFT_BOUND and SHIFT_RIGHT_BOUND required too, but a one-sided band (causal) sets one of them
    "CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR": _header(
        "OPERATION_DIAGONAL_BAND_MASK", _A + "OPERATION_DIAGONAL_BAND_MASK_XDESC",
        _A + "OPERATION_DIAGONAL_BAND_MASK_YDESC", _A + "OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE"),
    "CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR": _header(
        "OPERATION_SOFTMAX", _A + "OPERATION_SOFTMAX_XDESC", _A + "OPERATION_SOFTMAX_YDESC"),
}

# Kinds whose every attribute is read-only: cuDNN fills them (ENGINE_KNOB_INFO, ENGINE_LAYOUT_INFO,
# ENGINECFG_INTERMEDIATE_INFO are read into descriptors of these kinds); a finalize() of one made by the caller
# has nothing to finalize. probe: an empty LAYOUT_INFO finalizes and then reads an uninitialized TENSOR_UID.
BACKEND_FILLED_KINDS: dict[str, str] = {
    "CUDNN_BACKEND_LAYOUT_INFO_DESCRIPTOR": "header: every LAYOUT_INFO attribute is 'Read-only attribute'",
    "CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR": "schema §2: KNOB_INFO is read-only (Set -> NOT_SUPPORTED)",
    "CUDNN_BACKEND_INTERMEDIATE_INFO_DESCRIPTOR": "header: every INTERMEDIATE_INFO attribute is 'Read-only attribute'",
}

# CUDNN_ATTR_OPERATIONGRAPH_MODE (9.23) -> the operation kinds of which the graph must hold at least one. The header
# (cudnnBackendOperationGraphMode_t) says a wrong mode "silently bypasses pattern matching and causes failures
# during plan creation or execution"; on the CPU (probe) the CONV_* and NORM_BWD ones are a SIGSEGV in the graph's
# finalize, the NORM_FWD_* ones NOT_SUPPORTED_GRAPH_PATTERN, and the others finalize — whatever the ops — with the
# failure left for later. AUTO (-1, the default) is always accepted.
_OPS = "CUDNN_BACKEND_OPERATION_"
_CONV = (_OPS + "CONVOLUTION_FORWARD_DESCRIPTOR", _OPS + "CONVOLUTION_BACKWARD_DATA_DESCRIPTOR",
         _OPS + "CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR")
GRAPH_MODE_NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "CUDNN_OPERATIONGRAPH_MODE_CONV_FORWARD": ((_CONV[0],), "probe: SIGSEGV without a convolution-forward op"),
    "CUDNN_OPERATIONGRAPH_MODE_CONV_BWD_DATA": ((_CONV[1],), "probe: SIGSEGV without a backward-data op"),
    "CUDNN_OPERATIONGRAPH_MODE_CONV_BWD_FILTER": ((_CONV[2],), "probe: SIGSEGV without a backward-filter op"),
    "CUDNN_OPERATIONGRAPH_MODE_NORM_BWD": ((_OPS + "NORM_BACKWARD_DESCRIPTOR",),
                                           "probe: SIGSEGV without a norm-backward op (with one, and a pointwise "
                                           "op beside it, it finalizes)"),
    "CUDNN_OPERATIONGRAPH_MODE_NORM_FWD_INFER": ((_OPS + "NORM_FORWARD_DESCRIPTOR",),
                                                 "probe: NOT_SUPPORTED_GRAPH_PATTERN without a norm-forward op"),
    "CUDNN_OPERATIONGRAPH_MODE_NORM_FWD_TRAIN": ((_OPS + "NORM_FORWARD_DESCRIPTOR",),
                                                 "probe: NOT_SUPPORTED_GRAPH_PATTERN without a norm-forward op"),
    "CUDNN_OPERATIONGRAPH_MODE_GENERIC_CONV_FUSION": (_CONV, "header: the mode names a convolution fusion"),
    "CUDNN_OPERATIONGRAPH_MODE_RESAMPLE_FWD": ((_OPS + "RESAMPLE_FWD_DESCRIPTOR",), "header: the mode name"),
    "CUDNN_OPERATIONGRAPH_MODE_RESAMPLE_BWD": ((_OPS + "RESAMPLE_BWD_DESCRIPTOR",), "header: the mode name"),
    "CUDNN_OPERATIONGRAPH_MODE_BLAS_MATMUL": ((_OPS + "MATMUL_DESCRIPTOR",), "header: the mode name"),
    "CUDNN_OPERATIONGRAPH_MODE_GENERIC_MATMUL_FUSION": ((_OPS + "MATMUL_DESCRIPTOR",), "header: the mode name"),
    "CUDNN_OPERATIONGRAPH_MODE_GENERIC_POINTWISE_FUSION": ((_OPS + "POINTWISE_DESCRIPTOR",
                                                            _OPS + "REDUCTION_DESCRIPTOR"), "header: the mode name"),
    "CUDNN_OPERATIONGRAPH_MODE_SDPA_FWD": ((_OPS + "MATMUL_DESCRIPTOR",),
                                           "header: 'Composite SDPA fwd (matmul + softmax + matmul)'"),
    "CUDNN_OPERATIONGRAPH_MODE_SDPA_BWD": ((_OPS + "MATMUL_DESCRIPTOR",), "header: composite SDPA, as SDPA_FWD"),
    "CUDNN_OPERATIONGRAPH_MODE_UNIFIED_SDPA_FWD": ((_OPS + "SDPA_FWD_DESCRIPTOR",),
                                                   "header: 'Unified SDPA fwd (single SdpaForwardOperation)'"),
    "CUDNN_OPERATIONGRAPH_MODE_UNIFIED_SDPA_BWD": ((_OPS + "SDPA_BWD_DESCRIPTOR",), "header: as UNIFIED_SDPA_FWD"),
}

# Reads cuDNN cannot answer. A settable BACKEND_DESCRIPTOR attribute that was never set on a descriptor built
# through cudnn_py has nothing to copy out: the read is refused (the backend's answers vary from BAD_PARAM to a
# made-up descriptor to a crash). For descriptors cuDNN filled in (copies read back with get(), configs from
# heuristics, plans and caches loaded from JSON) cudnn_py cannot know what is set; the attributes below are
# refused on them too, because reading them unset crashes.
GET_CRASHES_WHEN_UNSET: dict[str, str] = {
    _A + "TENSOR_RAGGED_OFFSET_DESC": "probe: Get on a finalized tensor without a ragged offset is a SIGSEGV (9.28), "
                                      "on a tensor built here and on a copy read back from an operation alike",
}

# Reads that crash cuDNN whatever the descriptor holds: answered from what cudnn_py set, never asked of cuDNN.
GET_CRASHES_ALWAYS: dict[str, str] = {
    _A + "TENSOR_RAGGED_OFFSET_DESC": "Get crashes cuDNN 9.28 (SIGSEGV) on a finalized tensor with a ragged offset "
                                      "set as well as without one (probe, 2026-12-01)",
}

# Attributes whose value is a JSON document cuDNN parses into the whole descriptor: once one is set, cudnn_py no
# longer knows which attributes are set (the descriptor counts as filled by cuDNN for the reads above).
FILLED_FROM_JSON = frozenset({
    _A + "EXECUTION_PLAN_JSON_REPRESENTATION", _A + "KERNEL_CACHE_JSON_REPRESENTATION",
    _A + "DEVICEPROP_JSON_REPRESENTATION",
})

# FLOAT/DOUBLE attributes for which a non-finite value means something ("inf": +-inf, "nan": NaN as well). Every
# other float attribute must be finite: an alpha, a scale, a probability, an epsilon that is inf or NaN is a bug.
NONFINITE_ALLOWED: dict[str, str] = {
    _A + "POINTWISE_RELU_LOWER_CLIP": "inf",  # header: default 0.0f; -inf = no lower clip
    _A + "POINTWISE_RELU_UPPER_CLIP": "inf",  # header: default 'Numeric limit max'; +inf = no upper clip
    _A + "MATMUL_PADDING_VALUE": "inf nan",  # a padding value is data (masking pads with -inf)
    _A + "OPERATION_EXPAND_BAND_MATRIX_PAD_VALUE": "inf nan",
    _A + "OPERATION_CONTRACT_BAND_MATRIX_PAD_VALUE": "inf nan",
}

# Host pointers cuDNN dereferences during the Set itself: an int given for one must at least be a plausible
# address. Linux never maps the first 64 KiB (vm.mmap_min_addr), so a smaller value is certainly not one — e.g. a
# scalar passed where its address belongs (probe: CONSTANT_VALUE = 3 is a SIGSEGV in the Set).
MIN_HOST_ADDRESS = 1 << 16
HOST_POINTER_ATTRIBUTES: dict[str, str] = {
    _A + "TENSOR_CONSTANT_VALUE": "flow §1.2: 'a host pointer to the raw scalar bytes', read during the Set",
}

# Raw-layer errata: cuDNN 9.28 crashes on input that is legal (or that cudnn_py cannot tell from legal), and no
# check here can prevent it. The graph-level errata are in cudnn_py/plans/errata.py.
RAW_ERRATA: tuple[tuple[str, str], ...] = (
    ("CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC on a descriptor cuDNN filled in",
     "Get of an unset ragged offset is a SIGSEGV, and a copy read back with get() does not say whether its original "
     "had one: the read is refused on such copies even when the original had a ragged offset (read it from the "
     "tensor you built)."),
    ("VOID_PTR addresses",
     "VARIANT_PACK_DATA_POINTERS / WORKSPACE and TENSOR_CONSTANT_VALUE are addresses cuDNN dereferences (at execute, "
     "or during the Set for CONSTANT_VALUE). cudnn_py checks they are pointer values (and not Descriptors, nor "
     "values below 64 KiB for host pointers), not that they point at live memory of the right size: a stale or "
     "wrong address still crashes. Give CONSTANT_VALUE a ctypes scalar instead of an int to have its size checked "
     "against the tensor's data type."),
    ("adopt_handle",
     "an adopted handle is taken on the caller's word; a pointer that is not a live cudnnHandle_t crashes wherever "
     "cuDNN uses it. cuDNN can also hand out a destroyed handle's address again: a stale Handle object equal to a "
     "new handle's address is indistinguishable from it."),
    ("VARIANT_PACK_OVERRIDE_SHAPES / STRIDES",
     "cuDNN reads arrayOfElements as a C++ std::vector<std::vector<int64_t>>* — an ABI, not a C type. cudnn_py "
     "builds that layout (three pointers: begin, end, end of storage; libstdc++ and libc++ on 64-bit Linux) from "
     "rows of ints; a cuDNN built against another C++ library layout would misread it."),
    ("an explicit CUDNN_ATTR_OPERATIONGRAPH_MODE",
     "only the presence of an operation of the mode's family is checked (GRAPH_MODE_NEEDS); a graph that has one "
     "but does not match the mode's pattern in another way is the backend's to reject, and the header warns that "
     "a wrong mode fails 'during plan creation or execution' — which could not be probed without a GPU."),
)
