// Builds backends/cuda/*.cu with hipcc: maps the CUDA runtime names the backend uses to HIP.
// Everything HIP-specific lives here (included by backends/cuda/common.cuh when GGX_USE_HIP is
// defined); kernels stay written once.
//
// Differences handled:
//  - *_sync warp intrinsics: HIP (up to ROCm 6.1) has only the unmasked forms. Our reductions
//    use xor offsets below 32, which stay inside aligned 32-lane groups, so they are also right
//    on 64-wide wavefronts (CDNA): every "warp" of the kernels is a 32-lane half.
//  - bf16: ROCm 5.x has hip_bfloat16 (round-to-nearest-even conversions).
//  - BLAS: without hipBLAS (Debian ships none) GGX_NO_BLAS selects the tiled fallback GEMM of
//    backends/cuda/gemm.cu.
//  - Tensor-core attention (WMMA) is CUDA-only; HIP uses the SIMT attention kernel.
#pragma once

#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

// ---- types and constants ------------------------------------------------------------------------
#define cudaError_t                 hipError_t
#define cudaSuccess                 hipSuccess
#define cudaErrorMemoryAllocation   hipErrorOutOfMemory
#define cudaErrorNotSupported       hipErrorNotSupported
#define cudaErrorInvalidValue       hipErrorInvalidValue
#define cudaStream_t                hipStream_t
#define cudaStreamNonBlocking       hipStreamNonBlocking
#define cudaEvent_t                 hipEvent_t
#define cudaGraph_t                 hipGraph_t
#define cudaGraphExec_t             hipGraphExec_t
#define cudaDeviceProp              hipDeviceProp_t
#define cudaMemcpyHostToDevice      hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost      hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice    hipMemcpyDeviceToDevice
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize

// Kernel parameters are read in place on AMD anyway.
#define __grid_constant__

// ---- runtime calls ------------------------------------------------------------------------------
#define cudaGetErrorString          hipGetErrorString
#define cudaGetErrorName            hipGetErrorName
#define cudaGetLastError            hipGetLastError
#define cudaGetDeviceCount          hipGetDeviceCount
#define cudaGetDeviceProperties     hipGetDeviceProperties
#define cudaSetDevice               hipSetDevice
#define cudaDeviceSynchronize       hipDeviceSynchronize
#define cudaMalloc                  hipMalloc
#define cudaFree                    hipFree
#define cudaMemGetInfo              hipMemGetInfo
#define cudaMemcpy                  hipMemcpy
#define cudaMemcpyAsync             hipMemcpyAsync
#define cudaMemsetAsync             hipMemsetAsync
#define cudaMemset                  hipMemset
#define cudaFuncSetAttribute(f, attr, v) hipFuncSetAttribute((const void *)(f), attr, v)
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor
#define cudaStreamCreateWithFlags   hipStreamCreateWithFlags
#define cudaStreamDestroy           hipStreamDestroy
#define cudaStreamSynchronize       hipStreamSynchronize
#define cudaStreamBeginCapture      hipStreamBeginCapture
#define cudaStreamEndCapture        hipStreamEndCapture
#define cudaGraphDestroy            hipGraphDestroy
#define cudaGraphExecDestroy        hipGraphExecDestroy
#define cudaGraphLaunch             hipGraphLaunch
#define cudaEventCreate             hipEventCreate
#define cudaEventCreateWithFlags    hipEventCreateWithFlags
#define cudaEventDisableTiming      hipEventDisableTiming
#define cudaMallocHost              hipHostMalloc
#define cudaFreeHost                hipHostFree
#define cudaEventDestroy            hipEventDestroy
#define cudaEventRecord             hipEventRecord
#define cudaEventSynchronize        hipEventSynchronize
#define cudaEventElapsedTime        hipEventElapsedTime

// CUDA 12 takes flags only; HIP keeps the older error-node/log-buffer form.
static inline hipError_t cudaGraphInstantiate(hipGraphExec_t * exec, hipGraph_t g, unsigned long long) {
    return hipGraphInstantiate(exec, g, nullptr, nullptr, 0);
}

// ---- device intrinsics --------------------------------------------------------------------------
#define __shfl_xor_sync(mask, v, o) __shfl_xor((v), (o))
#define __shfl_sync(mask, v, src) __shfl((v), (src))
#define __shfl_up_sync(mask, v, o) __shfl_up((v), (o))
#define __syncwarp(...)             __syncthreads()

typedef __half half;
typedef hip_bfloat16 nv_bfloat16;
static __device__ __host__ inline float __bfloat162float(hip_bfloat16 b) { return (float)b; }
static __device__ __host__ inline hip_bfloat16 __float2bfloat16_rn(float f) { return hip_bfloat16(f); }

// ---- BLAS ---------------------------------------------------------------------------------------
#define GGX_NO_BLAS 1
typedef void * cublasHandle_t;
typedef int    cublasStatus_t;
#define CUBLAS_STATUS_SUCCESS      0
#define CUBLAS_STATUS_ALLOC_FAILED 3
