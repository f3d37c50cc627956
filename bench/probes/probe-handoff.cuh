// The decode GEMV's split-K hand-off (backends/cuda/qgemv.cu), as the probes partial-rt.cu,
// handoff-chain.cu and cluster-handoff.cu run it: one copy, so that all time the engine's form; and
// what the two chain probes share (a GEMV-shaped block's stream, the chain's timing).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
// block's `words` from wb. Returns a sum that keeps every load. NT, the block's threads, is a
// constant: with blockDim.x as the loop's stride the chain ran ~40% slower (run 192: the loop is
// not unrolled, so fewer loads are in flight).
template <int NT, int N_X, class AfterWait>
__device__ __forceinline__ float stream_block(const uint4 * wb, int words, const float * x, AfterWait after_wait) {
    const int t = threadIdx.x, nt = NT, n_x = N_X;
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

// What a chain probe sets up: `blocks` blocks of `threads` (one per SM: shared memory past half an
// SM's), W KB of weights per block from a pool of pool_bytes (so nothing comes from L2), n_bufs
// outputs of n_out floats, a partial per lead thread of each block and a counter per tile.
struct chain_setup {
    int words = 0;             // 16-byte words per block
    size_t per_kernel = 0;     // weight bytes per kernel
    int regions = 0;           // kernels' weights in the pool before it wraps
    uint4 * pool = nullptr;
    float * bufs = nullptr;
    float4 * partial = nullptr;
    int * counters = nullptr;
    size_t smem = 0;
    cudaStream_t s = nullptr;
};

// False (with a message) when the device is not sm_90 with `blocks` SMs or W KB does not fit.
inline bool chain_init(chain_setup & c, int w_kb, int blocks, int threads, int lead, int tiles, int n_out, int n_bufs,
                       size_t pool_bytes, int chain) {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 9) { printf("needs sm_90 (PDL, float4 atomics, clusters)\n"); return false; }
    if (prop.multiProcessorCount < blocks) { printf("needs %d SMs\n", blocks); return false; }
    c.words = w_kb * 1024 / 16;
    c.per_kernel = (size_t)c.words * 16 * blocks;
    c.regions = (int)(pool_bytes / c.per_kernel);
    if (c.regions < 2 || c.words < 4 * threads) { printf("W_KB %d out of range\n", w_kb); return false; }
    printf("%s, %d SMs; %d KB per block, %.1f MB per kernel, %d kernels per graph\n", prop.name, prop.multiProcessorCount, w_kb,
           c.per_kernel / 1e6, chain);
    CK(cudaMalloc(&c.pool, pool_bytes));
    CK(cudaMemset(c.pool, 1, pool_bytes));
    CK(cudaMalloc(&c.bufs, sizeof(float) * n_out * n_bufs));
    CK(cudaMemset(c.bufs, 0, sizeof(float) * n_out * n_bufs));
    CK(cudaMalloc(&c.partial, sizeof(float4) * blocks * lead));
    CK(cudaMalloc(&c.counters, sizeof(int) * tiles));
    CK(cudaMemset(c.counters, 0, sizeof(int) * tiles));
    c.smem = (size_t)prop.sharedMemPerBlockOptin / 2 + 1024;
    CK(cudaStreamCreate(&c.s));
    return true;
}

// A launch of `kernel` as the chain's kernels run: the setup's grid and shared memory on its stream,
// with PDL, and in clusters of `cluster` blocks when cluster > 1.
template <class Kernel, class... Args>
void chain_launch(const chain_setup & c, int blocks, int threads, int cluster, Kernel kernel, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = c.smem;
    cfg.stream = c.s;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    at[1].id = cudaLaunchAttributeClusterDimension;
    at[1].val.clusterDim.x = cluster;
    at[1].val.clusterDim.y = 1;
    at[1].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = cluster > 1 ? 2 : 1;
    CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// The chain probes' measurement: two rounds of each of the n modes, a chain of `chain` kernels per
// mode (launch(m, i, w) enqueues kernel i of mode m, whose weights are the pool's at w), printed in
// us per kernel and TB/s of weights, the modes named by names[m].
template <class Launch>
void chain_rounds(const chain_setup & c, int blocks, int chain, int n, const char * const * names, Launch launch) {
    int width = 0;
    for (int m = 0; m < n; m++) width = std::max(width, (int)strlen(names[m]));
    for (int round = 0; round < 2; round++)
        for (int m = 0; m < n; m++) {
            const double us = chain_us(c.s, chain, [&](int i) { launch(m, i, c.pool + (size_t)(i % c.regions) * c.words * blocks); });
            printf("round %d %-*s %7.2f us per kernel (%.2f TB/s of weights)\n", round + 1, width, names[m], us,
                   c.per_kernel / (us * 1e-6) / 1e12);
        }
}
