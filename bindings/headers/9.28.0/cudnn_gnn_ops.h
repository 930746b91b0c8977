/*
 * Copyright 2014-2026 NVIDIA Corporation.  All rights reserved.
 *
 * NOTICE TO LICENSEE:
 *
 * This source code and/or documentation ("Licensed Deliverables") are
 * subject to NVIDIA intellectual property rights under U.S. and
 * international Copyright laws.
 *
 * These Licensed Deliverables contained herein is PROPRIETARY and
 * CONFIDENTIAL to NVIDIA and is being provided under the terms and
 * conditions of a form of NVIDIA software license agreement by and
 * between NVIDIA and Licensee ("License Agreement") or electronically
 * accepted by Licensee.  Notwithstanding any terms or conditions to
 * the contrary in the License Agreement, reproduction or disclosure
 * of the Licensed Deliverables to any third party without the express
 * written consent of NVIDIA is prohibited.
 *
 * NOTWITHSTANDING ANY TERMS OR CONDITIONS TO THE CONTRARY IN THE
 * LICENSE AGREEMENT, NVIDIA MAKES NO REPRESENTATION ABOUT THE
 * SUITABILITY OF THESE LICENSED DELIVERABLES FOR ANY PURPOSE.  IT IS
 * PROVIDED "AS IS" WITHOUT EXPRESS OR IMPLIED WARRANTY OF ANY KIND.
 * NVIDIA DISCLAIMS ALL WARRANTIES WITH REGARD TO THESE LICENSED
 * DELIVERABLES, INCLUDING ALL IMPLIED WARRANTIES OF MERCHANTABILITY,
 * NONINFRINGEMENT, AND FITNESS FOR A PARTICULAR PURPOSE.
 * NOTWITHSTANDING ANY TERMS OR CONDITIONS TO THE CONTRARY IN THE
 * LICENSE AGREEMENT, IN NO EVENT SHALL NVIDIA BE LIABLE FOR ANY
 * SPECIAL, INDIRECT, INCIDENTAL, OR CONSEQUENTIAL DAMAGES, OR ANY
 * DAMAGES WHATSOEVER RESULTING FROM LOSS OF USE, DATA OR PROFITS,
 * WHETHER IN AN ACTION OF CONTRACT, NEGLIGENCE OR OTHER TORTIOUS
 * ACTION, ARISING OUT OF OR IN CONNECTION WITH THE USE OR PERFORMANCE
 * OF THESE LICENSED DELIVERABLES.
 *
 * U.S. Government End Users.  These Licensed Deliverables are a
 * "commercial item" as that term is defined at 48 C.F.R. 2.101 (OCT
 * 1995), consisting of "commercial computer software" and "commercial
 * computer software documentation" as such terms are used in 48
 * C.F.R. 12.212 (SEPT 1995) and is provided to the U.S. Government
 * only as a commercial end item.  Consistent with 48 C.F.R.12.212 and
 * 48 C.F.R. 227.7202-1 through 227.7202-4 (JUNE 1995), all
 * U.S. Government End Users acquire the Licensed Deliverables with
 * only those rights set forth herein.
 *
 * Any use of the Licensed Deliverables in individual and commercial
 * software must include, in the user documentation and internal
 * comments to the code, the above Disclaimer and U.S. Government End
 * Users Notice.
 */

/*
 *  cudnn_gnn_ops : cuDNN's GNN (Graph Neural Network) operations.
 *
 *  Provides direct function-call APIs for GNN kernels (CSC graph aggregation,
 *  etc.) using NVRTC runtime compilation.
 */

#if !defined(CUDNN_GNN_OPS_H_)
#define CUDNN_GNN_OPS_H_

#pragma once

#include <cuda_runtime_api.h>

#include "cudnn_version.h"
#include "cudnn_ops.h"

#include <stdint.h>

#if defined(__cplusplus)
extern "C" {
#endif

/* Aggregation operation for GNN CSC graph aggregation */
typedef enum {
    CUDNN_GNN_AGG_SUM  = 0,
    CUDNN_GNN_AGG_MEAN = 1,
    CUDNN_GNN_AGG_MAX  = 2,
    CUDNN_GNN_AGG_MIN  = 3,
} cudnnGnnAggOp_t;

/*
 * cudnnGnnCscGraph_t
 *
 * CSC-format graph descriptor. All pointer fields refer to device memory whose
 * element type matches idxType (CUDNN_DATA_INT32 or CUDNN_DATA_INT64).
 *
 * mapCscToCoo and mapRevToCoo are optional remapping arrays of length nIndices.
 * They are only needed when edge features are stored in a different order from
 * the CSC/reversed-CSC index arrays:
 *   mapCscToCoo[i] = position in the edge-feature table corresponding to
 *                    cscIndices[i].  NULL if edge features are already in
 *                    CSC index order.
 *   mapRevToCoo[i] = same mapping for the reversed graph (used by backward).
 *                    NULL if not needed.
 */
typedef struct {
    const void *cscOffsets;    /* length nDstNodes + 1 */
    const void *cscIndices;    /* length nIndices */
    const void *mapCscToCoo;   /* optional; length nIndices; NULL if edge features are in CSC order */
    const void *mapRevToCoo;   /* optional; length nIndices; NULL if not needed */
    int64_t nSrcNodes;
    int64_t nDstNodes;
    int64_t nIndices;
    cudnnDataType_t idxType;   /* CUDNN_DATA_INT32 or CUDNN_DATA_INT64 */
    /* Reversed-CSC arrays — required for deterministic backward (gradWspaceFeat != NULL).
     * Zero-init (NULL) for forward-only and non-deterministic backward callers. */
    const void *cscRevOffsets; /* optional; length nSrcNodes + 1; NULL if non-det bwd */
} cudnnGnnCscGraph_t;

/*
 * cudnnGnnAggSimpleForward
 *
 * Performs neighborhood aggregation on a CSC-format graph using NVRTC-compiled
 * kernels (JIT-compiled on first call per (dataType, idxType), cached thereafter).
 * The JIT cache is process-global and thread-safe.
 *
 * For each destination node, aggregates features from its source neighbors
 * using the specified operation (sum, mean, max, min).
 *
 * Requires SM 8.0 (Ampere) or later. Returns CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH
 * on older devices.
 *
 * Parameters:
 *   stream          - CUDA stream for kernel launch (NULL for default stream)
 *   graph           - CSC graph descriptor; see cudnnGnnCscGraph_t
 *   nodeFeatures    - input node features, device memory, [nSrcNodes * nodeFeatDim].
 *                     NULL iff nodeFeatDim == 0 (pure edge aggregation).
 *   edgeFeatures    - input edge features, device memory, [nIndices * edgeFeatDim].
 *                     NULL iff edgeFeatDim == 0.
 *   concatFeatures  - per-destination-node features to pass through without aggregation,
 *                     device memory, [nDstNodes * concatFeatDim]. These are appended
 *                     as-is to each output row and are not aggregated over neighbors.
 *                     NULL iff concatFeatDim == 0.
 *   output          - output features, device memory,
 *                     [nDstNodes * (nodeFeatDim + edgeFeatDim + concatFeatDim)].
 *                     Layout per row: [aggregated_node | aggregated_edge | concat].
 *   outPositions    - argmax/argmin source-neighbor indices (MAX/MIN only), device memory,
 *                     [nDstNodes * (nodeFeatDim + edgeFeatDim)], integer type matching
 *                     graph.idxType. Must be non-NULL for MAX/MIN; pass NULL for SUM/MEAN.
 *                     Required by cudnnGnnAggSimpleBackward for MAX/MIN.
 *   nodeFeatDim     - feature dimension per node; 0 for pure edge aggregation.
 *                     At least one of nodeFeatDim and edgeFeatDim must be > 0.
 *   edgeFeatDim     - feature dimension per edge; 0 iff edgeFeatures is NULL.
 *   concatFeatDim   - pass-through feature dimension per destination node;
 *                     0 iff concatFeatures is NULL.
 *   dataType        - element type for all feature arrays. Supported: FLOAT, HALF, BFLOAT16.
 *   aggOp           - aggregation operation: SUM, MEAN, MAX, or MIN.
 *
 * Returns:
 *   CUDNN_STATUS_SUCCESS                      on success
 *   CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH  if the current device is below SM 8.0
 *   CUDNN_STATUS_BAD_PARAM                    if any pointer/dimension constraint is violated
 *   CUDNN_STATUS_INTERNAL_ERROR               if the CUDA device query fails unexpectedly
 */
cudnnStatus_t CUDNNWINAPI
cudnnGnnAggSimpleForward(cudaStream_t stream,
                         const cudnnGnnCscGraph_t *graph,
                         const void *nodeFeatures,
                         const void *edgeFeatures,
                         const void *concatFeatures,
                         void *output,
                         void *outPositions,
                         int nodeFeatDim,
                         int edgeFeatDim,
                         int concatFeatDim,
                         cudnnDataType_t dataType,
                         cudnnGnnAggOp_t aggOp);

/*
 * cudnnGnnAggSimpleBackward
 *
 * Computes gradients for cudnnGnnAggSimpleForward. For each destination node, reads
 * the upstream gradient and scatters contributions back to source neighbors via
 * atomic-add (non-deterministic across runs; order of atomics is not guaranteed).
 *
 * Requires SM 8.0 (Ampere) or later. Returns CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH
 * on older devices.
 *
 * Parameters:
 *   stream              - CUDA stream for kernel launch (NULL for default stream)
 *   graph               - CSC graph descriptor; must be identical to the forward call.
 *   gradOutput          - upstream gradient, device memory,
 *                         [nDstNodes * (nodeFeatDim + edgeFeatDim + concatFeatDim)].
 *                         Layout must match the forward output buffer.
 *   outPositions        - argmax/argmin indices written by the forward pass, device memory,
 *                         [nDstNodes * (nodeFeatDim + edgeFeatDim)], integer type matching
 *                         graph.idxType. Required for MAX/MIN; pass NULL for SUM/MEAN.
 *   gradNodeFeatures    - output: grad w.r.t. node features, device memory,
 *                         [nSrcNodes * nodeFeatDim]. NULL iff nodeFeatDim == 0.
 *                         Must be zero-initialised by the caller (kernel uses atomic-add).
 *   gradEdgeFeatures    - output: grad w.r.t. edge features, device memory,
 *                         [nIndices * edgeFeatDim]. NULL iff edgeFeatDim == 0.
 *                         Must be zero-initialised by the caller (kernel uses atomic-add).
 *   gradConcatFeatures  - output: grad w.r.t. pass-through concat features, device memory,
 *                         [nDstNodes * concatFeatDim]. NULL iff concatFeatDim == 0.
 *                         Written directly (one row per dst node, no atomics).
 *   nodeFeatDim         - feature dimension per node; must match the forward call.
 *   edgeFeatDim         - feature dimension per edge; must match the forward call.
 *   concatFeatDim       - pass-through feature dimension; must match the forward call.
 *   dataType            - element type; must match the forward call.
 *   aggOp               - aggregation operation; must match the forward call.
 *
 * Returns:
 *   CUDNN_STATUS_SUCCESS                      on success
 *   CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH  if the current device is below SM 8.0
 *   CUDNN_STATUS_BAD_PARAM                    if any pointer/dimension constraint is violated
 *   CUDNN_STATUS_INTERNAL_ERROR               if the CUDA device query fails unexpectedly
 */
cudnnStatus_t CUDNNWINAPI
cudnnGnnAggSimpleBackward(cudaStream_t stream,
                          const cudnnGnnCscGraph_t *graph,
                          const void *gradOutput,
                          const void *outPositions,
                          void *gradNodeFeatures,
                          void *gradEdgeFeatures,
                          void *gradConcatFeatures,
                          int nodeFeatDim,
                          int edgeFeatDim,
                          int concatFeatDim,
                          cudnnDataType_t dataType,
                          cudnnGnnAggOp_t aggOp);

/* Activation applied to attention logits in GAT (mirrors cugraph ActivationOpT) */
typedef enum {
    CUDNN_GNN_ACT_LINEAR      = 0,
    CUDNN_GNN_ACT_RELU        = 1,
    CUDNN_GNN_ACT_SIGMOID     = 2,
    CUDNN_GNN_ACT_TANH        = 3,
    CUDNN_GNN_ACT_ELU         = 4,
    CUDNN_GNN_ACT_SCALAR      = 5,
    CUDNN_GNN_ACT_LEAKY_RELU  = 6,
} cudnnGnnActivationOp_t;

/*
 * cudnnGnnMhaParams_t
 *
 * GAT multi-head attention parameters (mirrors cugraph::ops::mha_params +
 * activation_params).
 */
typedef struct {
    cudnnGnnActivationOp_t activation;      /* activation applied to attention logits */
    float                  activationAlpha; /* leaky-relu negative slope (> 0) / scalar alpha;
                                               ELU uses a fixed alpha of 1 */
    int                    numHeads;
    int                    concatHeads;     /* bool: concat (1) vs average (0) heads */
} cudnnGnnMhaParams_t;

/*
 * cudnnGnnMhaGatForward
 *
 * GAT-style multi-head attention forward, node-to-node (n2n), on a CSC-format
 * graph using NVRTC-compiled kernels (JIT-compiled on first call per
 * (dataType, idxType), cached thereafter).
 *
 * Requires SM 8.0 (Ampere) or later. Returns CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH
 * on older devices.
 *
 * For each destination node, computes attention coefficients over its source
 * neighbors from the node (and optional edge) features and per-head attention
 * weights, applies the activation + softmax, and aggregates the neighbor
 * features into the output.
 *
 * Parameters:
 *   stream        - CUDA stream for kernel launch
 *   graph         - CSC graph descriptor; see cudnnGnnCscGraph_t
 *   srcFeatures   - input source features, device memory, [nSrcNodes * dimNode]
 *   dstFeatures   - input destination features, device memory, [nDstNodes * dimNode]
 *   edgeFeatures  - input edge features, device memory, [nIndices * dimEdge].
 *                   NULL if unused (then dimEdge must be 0).
 *   attnWeights   - per-head attention weights, device memory,
 *                   [2*dimNode + dimEdge] (src | dst | edge weights)
 *   dropoutMask   - optional inverted-dropout factors, device memory,
 *                   [numHeads * nIndices] (float), head-major. May be NULL.
 *                   When graph->mapCscToCoo is non-NULL, entries use the same
 *                   edge ordering as edgeFeatures.
 *   output        - output features, device memory,
 *                   [nDstNodes * (concatHeads ? dimNode : dimHead)]
 *   smScores      - pre-softmax logits followed by normalized attention coefficients,
 *                   device memory, [2 * numHeads * nIndices]. ALWAYS float,
 *                   regardless of dataType. The second half can be exposed as the
 *                   attention result; multiply it by dropoutMask when non-NULL
 *                   to obtain the post-dropout coefficients used for aggregation.
 *                   When graph->mapCscToCoo is non-NULL, entries use the same
 *                   edge ordering as edgeFeatures.
 *   dimNode       - node feature dimension; must be a multiple of numHeads
 *   dimEdge       - edge feature dimension; 0 iff edgeFeatures is NULL, else a
 *                   multiple of numHeads
 *   params        - multi-head attention parameters; see cudnnGnnMhaParams_t.
 *   dataType      - element type of features/weights/output. Supported: FLOAT,
 *                   HALF, BFLOAT16.
 *
 * Note: dimHead = dimNode / numHeads is computed internally.
 */
cudnnStatus_t CUDNNWINAPI
cudnnGnnMhaGatForward(cudaStream_t stream,
                      const cudnnGnnCscGraph_t *graph,
                      const void *srcFeatures,
                      const void *dstFeatures,
                      const void *edgeFeatures,
                      const void *attnWeights,
                      const float *dropoutMask,
                      void *output,
                      void *smScores,
                      int dimNode,
                      int dimEdge,
                      const cudnnGnnMhaParams_t *params,
                      cudnnDataType_t dataType);

/*
 * cudnnGnnMhaGatBackward
 *
 * GAT-style multi-head attention backward, node-to-node (n2n), on a CSC-format
 * graph using NVRTC-compiled kernels (JIT-compiled on first call per
 * (dataType, gradDataType, gradWeightType, idxType), cached thereafter).
 *
 * Requires SM 8.0 (Ampere) or later. Returns CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH
 * on older devices.
 *
 * Parameters:
 *   stream            - CUDA stream for kernel launch
 *   graph             - CSC graph descriptor; see cudnnGnnCscGraph_t.
 *                       For deterministic backward, graph.cscRevOffsets must be non-NULL.
 *   gradOut           - upstream gradient, device memory,
 *                       [nDstNodes * (concatHeads ? dimNode : dimHead)] (DataT);
 *                       must match the shape of the forward output buffer
 *   srcFeatures       - saved forward source features, [nSrcNodes * dimNode] (DataT)
 *   dstFeatures       - saved forward destination features, [nDstNodes * dimNode] (DataT)
 *   edgeFeatures      - saved forward input edge features, [nIndices * dimEdge] (DataT).
 *                       NULL if dimEdge is 0.
 *   attnWeights       - saved forward attention weights, [2*dimNode + dimEdge] (DataT)
 *   smScores          - saved forward softmax scores, [2 * numHeads * nIndices] (float).
 *                       When graph->mapCscToCoo is non-NULL, entries use the same
 *                       edge ordering as edgeFeatures.
 *   dropoutMask       - optional inverted-dropout factors used by forward, device memory,
 *                       [numHeads * nIndices] (float), head-major. May be NULL.
 *                       When graph->mapCscToCoo is non-NULL, entries use the same
 *                       edge ordering as edgeFeatures.
 *   gradAttention     - optional gradient for returned post-dropout attention coefficients,
 *                       device memory, [numHeads * nIndices] (float), head-major. May be NULL.
 *                       When graph->mapCscToCoo is non-NULL, entries use the same
 *                       edge ordering as edgeFeatures and smScores.
 *   gradSrcFeatures   - output source-feature gradient, [nSrcNodes * dimNode] (GradDataT).
 *   gradDstFeatures   - output destination-feature gradient, [nDstNodes * dimNode] (GradDataT).
 *                       Both are initialized internally; alias them for homogeneous input.
 *   gradEdgeFeatures  - output grad w.r.t. edge features, [nIndices * dimEdge] (GradDataT).
 *                       NULL if dimEdge is 0.
 *                       Written directly by the kernel; no caller initialization required.
 *   gradWeights       - output grad w.r.t. attention weights, [2*dimNode + dimEdge] (GradWeightT).
 *                       Initialized internally before non-deterministic accumulation.
 *   gradSmScores      - output grad w.r.t. softmax scores, [2*numHeads*nIndices] (float).
 *                       Always written by the kernel; must be non-NULL.
 *                       When graph->mapCscToCoo is non-NULL, entries use the same
 *                       edge ordering as edgeFeatures and smScores.
 *   gradWspaceFeat    - workspace for deterministic node-feature grad reduction,
 *                       [nIndices * dimNode] (GradDataT). NULL for non-det bwd.
 *                       Initialized internally before deterministic accumulation.
 *   gradWspaceWeights - workspace for deterministic weight grad reduction,
 *                       [nDstNodes * (2*dimNode + dimEdge)] (GradWeightT). NULL for non-det bwd.
 *                       Zeroed internally per destination node; no caller init required.
 *   dimNode           - node feature dimension; must equal the forward dimNode
 *   dimEdge           - edge feature dimension; 0 iff edgeFeatures is NULL
 *   params            - multi-head attention parameters; must match the forward call.
 *   dataType          - element type of forward features/weights (DataT). Supported: FLOAT, HALF, BF16.
 *   gradDataType      - element type for gradSrcFeatures, gradDstFeatures, and gradEdgeFeatures outputs.
 *                       Supported: FLOAT, HALF, BF16 (must match dataType or be FLOAT).
 *   gradWeightType    - element type for grad_weights output.
 *                       Supported: FLOAT, HALF, BF16 (must match dataType or be FLOAT).
 *
 * Deterministic vs non-deterministic backward:
 *   Pass both gradWspaceFeat and gradWspaceWeights non-NULL (and graph.cscRevOffsets
 *   and graph.mapRevToCoo non-NULL) to enable deterministic backward using
 *   workspace-based reduction.
 *   Pass both NULL for non-deterministic backward using atomic adds.
 *   Passing only one NULL is an error (CUDNN_STATUS_BAD_PARAM).
 */
cudnnStatus_t CUDNNWINAPI
cudnnGnnMhaGatBackward(cudaStream_t stream,
                       const cudnnGnnCscGraph_t *graph,
                       const void *gradOut,
                       const void *srcFeatures,
                       const void *dstFeatures,
                       const void *edgeFeatures,
                       const void *attnWeights,
                       const void *smScores,
                       const float *dropoutMask,
                       const float *gradAttention,
                       void *gradSrcFeatures,
                       void *gradDstFeatures,
                       void *gradEdgeFeatures,
                       void *gradWeights,
                       void *gradSmScores,
                       void *gradWspaceFeat,
                       void *gradWspaceWeights,
                       int dimNode,
                       int dimEdge,
                       const cudnnGnnMhaParams_t *params,
                       cudnnDataType_t dataType,
                       cudnnDataType_t gradDataType,
                       cudnnDataType_t gradWeightType);

/*
 * cudnnGnnMhaGatV2Forward
 *
 * GATv2-style multi-head attention forward, node-to-node (n2n), on a CSC-format
 * graph using NVRTC-compiled kernels (JIT-compiled on first call per
 * (dataType, idxType), cached thereafter).
 *
 * Requires SM 8.0 (Ampere) or later. Returns CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH
 * on older devices.
 *
 * Unlike GAT, GATv2 forms an activated vector for each edge from the source,
 * destination, and optional edge features, then computes each attention logit
 * by taking its dot product with the per-head attention weights. Softmax and
 * optional dropout are applied before the source features are aggregated.
 *
 * Parameters:
 *   stream        - CUDA stream for kernel launch
 *   graph         - CSC graph descriptor; see cudnnGnnCscGraph_t
 *   srcFeatures   - input source features, device memory, [nSrcNodes * dimNode]
 *   dstFeatures   - input destination features, device memory, [nDstNodes * dimNode]
 *   edgeFeatures  - optional input edge features, device memory,
 *                   [nIndices * dimNode]. May be NULL. When graph->mapCscToCoo
 *                   is non-NULL, entries use the mapped edge ordering.
 *   attnWeights   - per-head attention weights, device memory, [dimNode]
 *   dropoutMask   - optional inverted-dropout factors, device memory,
 *                   [numHeads * nIndices] (float), head-major. May be NULL.
 *                   When graph->mapCscToCoo is non-NULL, entries use the same
 *                   edge ordering as edgeFeatures.
 *   output        - output features, device memory,
 *                   [nDstNodes * (concatHeads ? dimNode : dimHead)]
 *   smScores      - pre-softmax logits followed by normalized attention coefficients,
 *                   device memory, [2 * numHeads * nIndices]. ALWAYS float,
 *                   regardless of dataType. The second half can be exposed as the
 *                   attention result; multiply it by dropoutMask when non-NULL
 *                   to obtain the post-dropout coefficients used for aggregation.
 *                   When graph->mapCscToCoo is non-NULL, entries use the same
 *                   edge ordering as edgeFeatures.
 *   actScores     - activated per-edge vectors saved for backward, device memory,
 *                   [nIndices * dimNode]. When graph->mapCscToCoo is non-NULL,
 *                   entries use the same edge ordering as edgeFeatures.
 *   dimNode       - node feature dimension; must be a multiple of numHeads
 *   params        - multi-head attention parameters; see cudnnGnnMhaParams_t
 *   dataType      - element type of features/weights/output/actScores. Supported:
 *                   FLOAT, HALF, BFLOAT16.
 *
 * Note: dimHead = dimNode / numHeads is computed internally.
 */
cudnnStatus_t CUDNNWINAPI
cudnnGnnMhaGatV2Forward(cudaStream_t stream,
                        const cudnnGnnCscGraph_t *graph,
                        const void *srcFeatures,
                        const void *dstFeatures,
                        const void *edgeFeatures,
                        const void *attnWeights,
                        const float *dropoutMask,
                        void *output,
                        void *smScores,
                        void *actScores,
                        int dimNode,
                        const cudnnGnnMhaParams_t *params,
                        cudnnDataType_t dataType);

/*
 * cudnnGnnMhaGatV2Backward
 *
 * GATv2-style multi-head attention backward, node-to-node (n2n), on a CSC-format
 * graph using NVRTC-compiled kernels (JIT-compiled on first call per
 * (dataType, gradType, idxType), cached thereafter).
 *
 * Requires SM 8.0 (Ampere) or later. Returns CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH
 * on older devices.
 *
 * Parameters:
 *   stream            - CUDA stream for kernel launch
 *   graph             - CSC graph descriptor; see cudnnGnnCscGraph_t.
 *                       For deterministic backward, graph.cscRevOffsets and
 *                       graph.mapRevToCoo must be non-NULL.
 *   gradOut           - upstream gradient, device memory,
 *                       [nDstNodes * (concatHeads ? dimNode : dimHead)] (DataT);
 *                       must match the shape of the forward output buffer
 *   srcFeatures       - saved forward source features,
 *                       [nSrcNodes * dimNode] (DataT)
 *   dstFeatures       - saved forward destination features,
 *                       [nDstNodes * dimNode] (DataT)
 *   edgeFeatures      - optional saved forward input edge features,
 *                       [nIndices * dimNode] (DataT). Must be NULL exactly when
 *                       gradEdgeFeatures is NULL. When graph->mapCscToCoo is
 *                       non-NULL, entries use the mapped edge ordering.
 *   attnWeights       - saved forward attention weights, [dimNode] (DataT)
 *   smScores          - saved forward softmax scores,
 *                       [2 * numHeads * nIndices] (float). When
 *                       graph->mapCscToCoo is non-NULL, entries use the same
 *                       edge ordering as edgeFeatures.
 *   actScores         - saved forward activated per-edge vectors,
 *                       [nIndices * dimNode] (DataT). When graph->mapCscToCoo
 *                       is non-NULL, entries use the same edge ordering as
 *                       edgeFeatures.
 *   dropoutMask       - optional inverted-dropout factors used by forward,
 *                       device memory, [numHeads * nIndices] (float), head-major.
 *                       May be NULL. When graph->mapCscToCoo is non-NULL, entries
 *                       use the same edge ordering as edgeFeatures.
 *   gradAttention     - optional gradient for returned post-dropout attention
 *                       coefficients, device memory, [numHeads * nIndices]
 *                       (float), head-major. May be NULL. When
 *                       graph->mapCscToCoo is non-NULL, entries use the same
 *                       edge ordering as edgeFeatures and smScores.
 *   gradSrcFeatures   - output source-feature gradient,
 *                       [nSrcNodes * dimNode] (GradT).
 *   gradDstFeatures   - output destination-feature gradient,
 *                       [nDstNodes * dimNode] (GradT).
 *                       Both are initialized internally; alias them for homogeneous input.
 *   gradEdgeFeatures  - optional output gradient w.r.t. edge features,
 *                       [nIndices * dimNode] (GradT). Must be NULL exactly when
 *                       edgeFeatures is NULL. Written directly by the kernel;
 *                       no caller initialization is required. When
 *                       graph->mapCscToCoo is non-NULL, entries use the same
 *                       edge ordering as edgeFeatures.
 *   gradWeights       - optional output gradient w.r.t. attention weights,
 *                       [dimNode] (GradT). May be NULL. Initialized internally
 *                       before accumulation when requested.
 *   gradSmScores      - output gradient w.r.t. softmax scores,
 *                       [2 * numHeads * nIndices] (float). Always written by the
 *                       kernel; must be non-NULL. When graph->mapCscToCoo is
 *                       non-NULL, entries use the same edge ordering as
 *                       edgeFeatures and smScores.
 *   gradWspaceFeat    - workspace for deterministic node-feature gradient
 *                       reduction, [nIndices * dimNode] (GradT). NULL for
 *                       non-deterministic backward. Initialized internally.
 *   gradWspaceWeights - workspace for deterministic weight-gradient reduction,
 *                       [nDstNodes * dimNode] (GradT). NULL for non-deterministic
 *                       backward. No caller initialization is required.
 *   dimNode           - node feature dimension; must equal the forward dimNode
 *   params            - multi-head attention parameters; must match the forward call
 *   dataType          - element type of forward features/weights (DataT). Supported:
 *                       FLOAT, HALF, BFLOAT16.
 *   gradType          - shared element type for feature, edge, weight, and workspace
 *                       gradients (GradT). Supported: FLOAT, HALF, BFLOAT16;
 *                       must match dataType or be FLOAT.
 *
 * Deterministic vs non-deterministic backward:
 *   Pass both gradWspaceFeat and gradWspaceWeights non-NULL (and
 *   graph.cscRevOffsets and graph.mapRevToCoo non-NULL) to enable deterministic
 *   backward using workspace-based reduction.
 *   Pass both workspaces NULL for non-deterministic backward using atomic adds.
 *   Passing only one NULL is an error (CUDNN_STATUS_BAD_PARAM).
 */
cudnnStatus_t CUDNNWINAPI
cudnnGnnMhaGatV2Backward(cudaStream_t stream,
                         const cudnnGnnCscGraph_t *graph,
                         const void *gradOut,
                         const void *srcFeatures,
                         const void *dstFeatures,
                         const void *edgeFeatures,
                         const void *attnWeights,
                         const void *smScores,
                         const void *actScores,
                         const float *dropoutMask,
                         const float *gradAttention,
                         void *gradSrcFeatures,
                         void *gradDstFeatures,
                         void *gradEdgeFeatures,
                         void *gradWeights,
                         void *gradSmScores,
                         void *gradWspaceFeat,
                         void *gradWspaceWeights,
                         int dimNode,
                         const cudnnGnnMhaParams_t *params,
                         cudnnDataType_t dataType,
                         cudnnDataType_t gradType);

#if defined(__cplusplus)
}
#endif

#endif /* CUDNN_GNN_OPS_H_ */
