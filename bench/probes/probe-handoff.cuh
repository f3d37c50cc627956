// The decode GEMV's split-K hand-off (backends/cuda/qgemv.cu), as the probes partial-rt.cu,
// handoff-chain.cu and cluster-handoff.cu run it: one copy, so that all time the engine's form; and
// what the two chain probes share (a GEMV-shaped block's stream, the chain's timing).
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

__device__ __forceinline__ uint4 ld_nc(const uint4 * p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// A GEMV-shaped block's work before its hand-off: every thread loads its first two 16-byte words
// before griddepcontrol.wait (as the engine does), runs after_wait(), reads 8 floats of the
// previous kernel's output x[n_x] (the x gather: one round trip), then streams the rest of the
// block's `words` from wb. Returns a sum that keeps every load.
template <class AfterWait>
__device__ __forceinline__ float stream_block(const uint4 * wb, int words, const float * x, int n_x, AfterWait after_wait) {
    const int t = threadIdx.x, nt = blockDim.x;
    const uint4 r0 = ld_nc(wb + t), r1 = ld_nc(wb + nt + t);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    after_wait();
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) acc += x[(t * 8 + j + blockIdx.x * 29) % n_x];
    __syncthreads();
    uint32_t a = r0.x ^ r1.w;
    for (int i = 2 * nt + t; i < words; i += nt) {
        const uint4 v = ld_nc(wb + i);
        a ^= v.x + v.w;
    }
    return acc + (float)(a & 1) * 1e-30f;
}

// A chain of k kernels captured into one graph (launch(i) enqueues kernel i on s, with PDL): the
// best of five replays after a warm-up, in us per kernel.
template <class Launch>
double chain_us(cudaStream_t s, int k, Launch launch) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < k; i++) launch(i);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float best = 1e30f;
    for (int r = 0; r < 6; r++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r > 0 && ms < best) best = ms;
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return best * 1000.0 / k;
}
