// 16-byte copies from global to shared memory that do not hold registers while in flight
// (cp.async on sm_80+): a kernel issues a whole tile, computes or waits for its dependency, and
// collects the tile later. On HIP the copy is a plain load and store, and the waits are no-ops
// (the data is there when the copy returns).
#pragma once

#include "common.cuh"

// dst (shared) <- 16 bytes at src; zero-filled when !pred (nothing is read then).
static __device__ __forceinline__ void ggx_cp_async16(void * dst, const void * src, bool pred) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(GGX_USE_HIP)
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(pred ? 16 : 0));
#else
    *(uint4 *)dst = pred ? *(const uint4 *)src : make_uint4(0u, 0u, 0u, 0u);
#endif
}

// Closes the group of copies issued since the last commit.
static __device__ __forceinline__ void ggx_cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(GGX_USE_HIP)
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most N of this thread's most recent groups are still in flight (the block then
// needs a barrier before reading what other threads copied).
template <int N> static __device__ __forceinline__ void ggx_cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(GGX_USE_HIP)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Asks L2 to fetch `bytes` (a multiple of 16) at src (16-byte aligned), without waiting and
// without holding registers or shared memory: a later load of those bytes hits L2. One
// instruction for a whole span (cp.async.bulk.prefetch, sm_90); elsewhere nothing.
static __device__ __forceinline__ void ggx_prefetch_l2(const void * src, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GGX_USE_HIP)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
#else
    (void)src;
    (void)bytes;
#endif
}
