// The decode GEMV's split-K hand-off (backends/cuda/qgemv.cu), as the probes partial-rt.cu and
// handoff-chain.cu run it: one copy, so that both time the engine's form.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1); } } while (0)

__device__ __forceinline__ void fence_acq_rel() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// The block's partials are stored; a barrier, thread 0 fences and counts, the last block's thread 0
// fences again, a barrier: true in the block that arrived last (last: a __shared__ int). The caller
// resets the counter.
__device__ __forceinline__ bool arrive_last(int * counter, int expected, int & last) {
    __syncthreads();
    if (threadIdx.x == 0) {
        fence_acq_rel();
        last = atomicAdd(counter, 1) == expected - 1;
        if (last) fence_acq_rel();
    }
    __syncthreads();
    return last;
}
