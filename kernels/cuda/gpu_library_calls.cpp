// The C functions of the GPU libraries that the project calls, each defined here as a
// forwarder to the library's own: the first call of any loads the library (kernels/cuda/
// gpu_libraries.h), so no GPU library is loaded at process start and none is linked. Each
// definition repeats the library header's declaration, and the compiler holds the two to
// each other: a signature that differs from the header's is an error ("conflicting
// declaration of C function"). A new call into a library is one line here.
#include <cublasLt.h>
#include <cudnn.h>
#include <cupti.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/gpu_libraries.h"

#if defined(AMPCHECK_HAVE_NCCL)
#include <nccl.h>
#endif

namespace ampcheck::kernels::cuda {
namespace {
// The function `name` of `lib` as a pointer of the declared type F (resolved once, at the
// first call of the forwarder that asks).
template <typename F>
F resolve(GpuLibrary lib, const char* name) {
  void* symbol = gpu_symbol(lib, name);
  F fn;
  static_assert(sizeof(fn) == sizeof(symbol));
  std::memcpy(&fn, &symbol, sizeof(fn));
  return fn;
}
}  // namespace
}  // namespace ampcheck::kernels::cuda

// lib, return type, name, (parameters as the header declares them), (their names)
#define AMPCHECK_GPU_FORWARD(lib, ret, name, params, args)                                      \
  extern "C" ret name params {                                                                  \
    static const auto fn = ::ampcheck::kernels::cuda::resolve<decltype(&::name)>(              \
        ::ampcheck::kernels::cuda::GpuLibrary::lib, #name);                                     \
    return fn args;                                                                             \
  }

// cuBLASLt: the GEMMs (gemm.cu, fp8_gemm.cu) and its version (info.cpp).
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtCreate, (cublasLtHandle_t* lightHandle), (lightHandle))
AMPCHECK_GPU_FORWARD(cublasLt, const char*, cublasLtGetStatusName, (cublasStatus_t status), (status))
AMPCHECK_GPU_FORWARD(cublasLt, const char*, cublasLtGetStatusString, (cublasStatus_t status), (status))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatmul, (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream), (lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, workspaceSizeInBytes, stream))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatmulAlgoCapGetAttribute, (const cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoCapAttributes_t attr, void* buf, size_t sizeInBytes, size_t* sizeWritten), (algo, attr, buf, sizeInBytes, sizeWritten))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatmulAlgoConfigGetAttribute, (const cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, void* buf, size_t sizeInBytes, size_t* sizeWritten), (algo, attr, buf, sizeInBytes, sizeWritten))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatmulAlgoGetHeuristic, (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference, int requestedAlgoCount, cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount), (lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount, heuristicResultsArray, returnAlgoCount))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatmulDescCreate, (cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType), (matmulDesc, computeType, scaleType))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t matmulDesc), (matmulDesc))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatmulDescSetAttribute, (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t sizeInBytes), (matmulDesc, attr, buf, sizeInBytes))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t* pref), (pref))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatmulPreferenceSetAttribute, (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf, size_t sizeInBytes), (pref, attr, buf, sizeInBytes))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatrixLayoutCreate, (cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld), (matLayout, type, rows, cols, ld))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t matLayout), (matLayout))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtMatrixLayoutSetAttribute, (cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr, const void* buf, size_t sizeInBytes), (matLayout, attr, buf, sizeInBytes))
AMPCHECK_GPU_FORWARD(cublasLt, cublasStatus_t, cublasLtGetProperty, (libraryPropertyType type, int* value), (type, value))

// cuDNN: the convolutions (conv.cu), the attention graphs (attention.cu), the recurrent
// layers (rnn.cu), the handle (cudnn_handle.cpp) and its version.
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnBackendCreateDescriptor, (cudnnBackendDescriptorType_t descriptorType, cudnnBackendDescriptor_t *descriptor), (descriptorType, descriptor))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnBackendDestroyDescriptor, (cudnnBackendDescriptor_t descriptor), (descriptor))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnBackendExecute, (cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan, cudnnBackendDescriptor_t variantPack), (handle, executionPlan, variantPack))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnBackendFinalize, (cudnnBackendDescriptor_t descriptor), (descriptor))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnBackendGetAttribute, (cudnnBackendDescriptor_t const descriptor, cudnnBackendAttributeName_t attributeName, cudnnBackendAttributeType_t attributeType, int64_t requestedElementCount, int64_t *elementCount, void *arrayOfElements), (descriptor, attributeName, attributeType, requestedElementCount, elementCount, arrayOfElements))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnBackendSetAttribute, (cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t attributeName, cudnnBackendAttributeType_t attributeType, int64_t elementCount, const void *arrayOfElements), (descriptor, attributeName, attributeType, elementCount, arrayOfElements))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnConvolutionBackwardData, (cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnTensorDescriptor_t dxDesc, void *dx), (handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dxDesc, dx))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnConvolutionBackwardFilter, (cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnFilterDescriptor_t dwDesc, void *dw), (handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dwDesc, dw))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnConvolutionForward, (cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnTensorDescriptor_t yDesc, void *y), (handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, yDesc, y))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnCreate, (cudnnHandle_t *handle), (handle))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnCreateConvolutionDescriptor, (cudnnConvolutionDescriptor_t *convDesc), (convDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnCreateDropoutDescriptor, (cudnnDropoutDescriptor_t *dropoutDesc), (dropoutDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnCreateFilterDescriptor, (cudnnFilterDescriptor_t *filterDesc), (filterDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnCreateRNNDataDescriptor, (cudnnRNNDataDescriptor_t *rnnDataDesc), (rnnDataDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnCreateRNNDescriptor, (cudnnRNNDescriptor_t *rnnDesc), (rnnDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnCreateTensorDescriptor, (cudnnTensorDescriptor_t *tensorDesc), (tensorDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnDestroy, (cudnnHandle_t handle), (handle))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnDestroyConvolutionDescriptor, (cudnnConvolutionDescriptor_t convDesc), (convDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnDestroyDropoutDescriptor, (cudnnDropoutDescriptor_t dropoutDesc), (dropoutDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnDestroyFilterDescriptor, (cudnnFilterDescriptor_t filterDesc), (filterDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnDestroyRNNDataDescriptor, (cudnnRNNDataDescriptor_t rnnDataDesc), (rnnDataDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnDestroyRNNDescriptor, (cudnnRNNDescriptor_t rnnDesc), (rnnDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnDestroyTensorDescriptor, (cudnnTensorDescriptor_t tensorDesc), (tensorDesc))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnGetConvolution2dForwardOutputDim, (const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t inputTensorDesc, const cudnnFilterDescriptor_t filterDesc, int *n, int *c, int *h, int *w), (convDesc, inputTensorDesc, filterDesc, n, c, h, w))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnGetConvolutionBackwardDataAlgorithm_v7, (cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults), (handle, filterDesc, diffDesc, convDesc, gradDesc, requestedAlgoCount, returnedAlgoCount, perfResults))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnGetConvolutionBackwardDataWorkspaceSize, (cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes), (handle, wDesc, dyDesc, convDesc, dxDesc, algo, sizeInBytes))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnGetConvolutionBackwardFilterAlgorithm_v7, (cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc, const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults), (handle, srcDesc, diffDesc, convDesc, gradDesc, requestedAlgoCount, returnedAlgoCount, perfResults))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnGetConvolutionBackwardFilterWorkspaceSize, (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc, cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes), (handle, xDesc, dyDesc, convDesc, gradDesc, algo, sizeInBytes))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnGetConvolutionForwardAlgorithm_v7, (cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc, const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults), (handle, srcDesc, filterDesc, convDesc, destDesc, requestedAlgoCount, returnedAlgoCount, perfResults))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnGetConvolutionForwardWorkspaceSize, (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc, cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes), (handle, xDesc, wDesc, convDesc, yDesc, algo, sizeInBytes))
AMPCHECK_GPU_FORWARD(cudnn, const char *, cudnnGetErrorString, (cudnnStatus_t status), (status))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnGetRNNTempSpaceSizes, (cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc, cudnnForwardMode_t fwdMode, cudnnRNNDataDescriptor_t xDesc, size_t *workSpaceSize, size_t *reserveSpaceSize), (handle, rnnDesc, fwdMode, xDesc, workSpaceSize, reserveSpaceSize))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnGetRNNWeightParams, (cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc, int32_t pseudoLayer, size_t weightSpaceSize, const void *weightSpace, int32_t linLayerID, cudnnTensorDescriptor_t mDesc, void **mAddr, cudnnTensorDescriptor_t bDesc, void **bAddr), (handle, rnnDesc, pseudoLayer, weightSpaceSize, weightSpace, linLayerID, mDesc, mAddr, bDesc, bAddr))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnGetRNNWeightSpaceSize, (cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc, size_t *weightSpaceSize), (handle, rnnDesc, weightSpaceSize))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnGetTensorNdDescriptor, (const cudnnTensorDescriptor_t tensorDesc, int nbDimsRequested, cudnnDataType_t *dataType, int *nbDims, int dimA[], int strideA[]), (tensorDesc, nbDimsRequested, dataType, nbDims, dimA, strideA))
AMPCHECK_GPU_FORWARD(cudnn, size_t, cudnnGetVersion, (), ())
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnRNNBackwardData_v8, (cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc, const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t yDesc, const void *y, const void *dy, cudnnRNNDataDescriptor_t xDesc, void *dx, cudnnTensorDescriptor_t hDesc, const void *hx, const void *dhy, void *dhx, cudnnTensorDescriptor_t cDesc, const void *cx, const void *dcy, void *dcx, size_t weightSpaceSize, const void *weightSpace, size_t workSpaceSize, void *workSpace, size_t reserveSpaceSize, void *reserveSpace), (handle, rnnDesc, devSeqLengths, yDesc, y, dy, xDesc, dx, hDesc, hx, dhy, dhx, cDesc, cx, dcy, dcx, weightSpaceSize, weightSpace, workSpaceSize, workSpace, reserveSpaceSize, reserveSpace))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnRNNBackwardWeights_v8, (cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc, cudnnWgradMode_t addGrad, const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t xDesc, const void *x, cudnnTensorDescriptor_t hDesc, const void *hx, cudnnRNNDataDescriptor_t yDesc, const void *y, size_t weightSpaceSize, void *dweightSpace, size_t workSpaceSize, void *workSpace, size_t reserveSpaceSize, void *reserveSpace), (handle, rnnDesc, addGrad, devSeqLengths, xDesc, x, hDesc, hx, yDesc, y, weightSpaceSize, dweightSpace, workSpaceSize, workSpace, reserveSpaceSize, reserveSpace))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnRNNForward, (cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc, cudnnForwardMode_t fwdMode, const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t xDesc, const void *x, cudnnRNNDataDescriptor_t yDesc, void *y, cudnnTensorDescriptor_t hDesc, const void *hx, void *hy, cudnnTensorDescriptor_t cDesc, const void *cx, void *cy, size_t weightSpaceSize, const void *weightSpace, size_t workSpaceSize, void *workSpace, size_t reserveSpaceSize, void *reserveSpace), (handle, rnnDesc, fwdMode, devSeqLengths, xDesc, x, yDesc, y, hDesc, hx, hy, cDesc, cx, cy, weightSpaceSize, weightSpace, workSpaceSize, workSpace, reserveSpaceSize, reserveSpace))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnSetConvolution2dDescriptor, (cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w, int u, int v, int dilation_h, int dilation_w, cudnnConvolutionMode_t mode, cudnnDataType_t computeType), (convDesc, pad_h, pad_w, u, v, dilation_h, dilation_w, mode, computeType))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnSetConvolutionGroupCount, (cudnnConvolutionDescriptor_t convDesc, int groupCount), (convDesc, groupCount))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnSetConvolutionMathType, (cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType), (convDesc, mathType))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnSetDropoutDescriptor, (cudnnDropoutDescriptor_t dropoutDesc, cudnnHandle_t handle, float dropout, void *states, size_t stateSizeInBytes, unsigned long long seed), (dropoutDesc, handle, dropout, states, stateSizeInBytes, seed))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnSetFilter4dDescriptor, (cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType, cudnnTensorFormat_t format, int k, int c, int h, int w), (filterDesc, dataType, format, k, c, h, w))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnSetRNNDataDescriptor, (cudnnRNNDataDescriptor_t rnnDataDesc, cudnnDataType_t dataType, cudnnRNNDataLayout_t layout, int maxSeqLength, int batchSize, int vectorSize, const int seqLengthArray[], void *paddingFill), (rnnDataDesc, dataType, layout, maxSeqLength, batchSize, vectorSize, seqLengthArray, paddingFill))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnSetRNNDescriptor_v8, (cudnnRNNDescriptor_t rnnDesc, cudnnRNNAlgo_t algo, cudnnRNNMode_t cellMode, cudnnRNNBiasMode_t biasMode, cudnnDirectionMode_t dirMode, cudnnRNNInputMode_t inputMode, cudnnDataType_t dataType, cudnnDataType_t mathPrec, cudnnMathType_t mathType, int32_t inputSize, int32_t hiddenSize, int32_t projSize, int32_t numLayers, cudnnDropoutDescriptor_t dropoutDesc, uint32_t auxFlags), (rnnDesc, algo, cellMode, biasMode, dirMode, inputMode, dataType, mathPrec, mathType, inputSize, hiddenSize, projSize, numLayers, dropoutDesc, auxFlags))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnSetStream, (cudnnHandle_t handle, cudaStream_t streamId), (handle, streamId))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnSetTensor4dDescriptor, (cudnnTensorDescriptor_t tensorDesc, cudnnTensorFormat_t format, cudnnDataType_t dataType, int n, int c, int h, int w), (tensorDesc, format, dataType, n, c, h, w))
AMPCHECK_GPU_FORWARD(cudnn, cudnnStatus_t, cudnnSetTensorNdDescriptor, (cudnnTensorDescriptor_t tensorDesc, cudnnDataType_t dataType, int nbDims, const int dimA[], const int strideA[]), (tensorDesc, dataType, nbDims, dimA, strideA))

// CUPTI: the kernel records (inspector/cuda/cupti_activity.cpp) and its version.
AMPCHECK_GPU_FORWARD(cupti, CUptiResult, cuptiActivityDisable, (CUpti_ActivityKind kind), (kind))
AMPCHECK_GPU_FORWARD(cupti, CUptiResult, cuptiActivityEnable, (CUpti_ActivityKind kind), (kind))
AMPCHECK_GPU_FORWARD(cupti, CUptiResult, cuptiActivityFlushAll, (uint32_t flag), (flag))
AMPCHECK_GPU_FORWARD(cupti, CUptiResult, cuptiActivityGetNextRecord, (uint8_t* buffer, size_t validBufferSizeBytes, CUpti_Activity **record), (buffer, validBufferSizeBytes, record))
AMPCHECK_GPU_FORWARD(cupti, CUptiResult, cuptiActivityGetNumDroppedRecords, (CUcontext context, uint32_t streamId, size_t *dropped), (context, streamId, dropped))
AMPCHECK_GPU_FORWARD(cupti, CUptiResult, cuptiActivityPopExternalCorrelationId, (CUpti_ExternalCorrelationKind kind, uint64_t *lastId), (kind, lastId))
AMPCHECK_GPU_FORWARD(cupti, CUptiResult, cuptiActivityPushExternalCorrelationId, (CUpti_ExternalCorrelationKind kind, uint64_t id), (kind, id))
AMPCHECK_GPU_FORWARD(cupti, CUptiResult, cuptiActivityRegisterCallbacks, (CUpti_BuffersCallbackRequestFunc funcBufferRequested, CUpti_BuffersCallbackCompleteFunc funcBufferCompleted), (funcBufferRequested, funcBufferCompleted))
AMPCHECK_GPU_FORWARD(cupti, CUptiResult, cuptiGetResultString, (CUptiResult result, const char **str), (result, str))
AMPCHECK_GPU_FORWARD(cupti, CUptiResult, cuptiGetTimestamp, (uint64_t *timestamp), (timestamp))
AMPCHECK_GPU_FORWARD(cupti, CUptiResult, cuptiGetVersion, (uint32_t *version), (version))

// NCCL: the gradient average over ranks on GPUs (engine/dist/nccl_reduce.cpp).
#if defined(AMPCHECK_HAVE_NCCL)
AMPCHECK_GPU_FORWARD(nccl, ncclResult_t, ncclAllReduce, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream), (sendbuff, recvbuff, count, datatype, op, comm, stream))
AMPCHECK_GPU_FORWARD(nccl, ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm))
AMPCHECK_GPU_FORWARD(nccl, ncclResult_t, ncclCommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank), (comm, nranks, commId, rank))
AMPCHECK_GPU_FORWARD(nccl, const char*, ncclGetErrorString, (ncclResult_t result), (result))
AMPCHECK_GPU_FORWARD(nccl, ncclResult_t, ncclGetUniqueId, (ncclUniqueId* uniqueId), (uniqueId))
AMPCHECK_GPU_FORWARD(nccl, ncclResult_t, ncclGroupEnd, (), ())
AMPCHECK_GPU_FORWARD(nccl, ncclResult_t, ncclGroupStart, (), ())
#endif

#undef AMPCHECK_GPU_FORWARD
