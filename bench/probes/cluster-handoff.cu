// What gate/up's split-K hand-off costs per kernel in a PDL chain, against handing the sums over
// inside a thread block cluster (session 37). gate/up is the one decode GEMV job left with a
// split-K tail since q/k/v, o and down add their sums with atomics: 2 K-slices per column tile,
// and in the trace (run 185) ~3.4 us a layer for the last block's tail. This probe prices, in
// gate/up's shape alone (112 blocks of 512 threads, one per SM, 56 tiles x 2 K-slices):
//   bare     no hand-off: each tile's slice-0 block stores its sums (wrong sums, the floor)
//   split    the engine's form: partials stored, barrier, thread 0 fence.acq_rel + count, the last
//            block fences, reads the other slice's partials (ld.cg), stores the tile's result
//   cluster  the tile's 2 blocks are one cluster: slice 1 stores its sums into slice 0's shared
//            memory (distributed shared memory), arrives on the cluster barrier (release) and
//            exits; slice 0 waits on it (acquire), adds and stores
// Each kernel: every thread loads its first two 16-byte words before griddepcontrol.wait, then
// reads 8 floats of the previous kernel's output (the x gather), then streams the rest of its
// block's weights (W KB per block from a 256 MB pool, so nothing comes from L2), then hands off.
// 64 such kernels in a CUDA graph with PDL (clusters with the cluster launch attribute beside it);
// the figure is graph time / 64.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/cluster-handoff.cu -o cluster-handoff && ./cluster-handoff [W_KB]
//
// W_KB defaults to 512 (58.7 MB per kernel: llama3-8b's gate/up at 4.0 bpw).
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cooperative_groups.h>

#include "probe-handoff.cuh"

namespace cg = cooperative_groups;

constexpr int k_blocks = 112, k_threads = 512, k_lead = 128, k_slices = 2, k_tiles = k_blocks / k_slices;
constexpr int k_n = k_tiles * k_lead * 4;   // output floats per kernel
constexpr int k_chain = 64;
constexpr size_t k_pool = 256u << 20;

enum { k_bare, k_split, k_cluster };

__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive_release() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

template <int MODE>
__global__ void __launch_bounds__(k_threads, 1) k_gemv(const uint4 * w, int words /*per block*/, const float * x, float * out,
                                                       float4 * partial, int * counters) {
    extern __shared__ float4 pad[];   // one block per SM
    __shared__ float4 other[k_lead];  // cluster: slice 1's sums, written by slice 1
    __shared__ int last;
    const int t = threadIdx.x, tile = blockIdx.x / k_slices, slice = blockIdx.x % k_slices;
    // cluster: every block has started before any writes into another's shared memory (phase 1)
    if (MODE == k_cluster) cluster_arrive_relaxed();
    const float s = stream_block<k_threads, k_n>(w + (size_t)blockIdx.x * words, words, x, [] {});
    const float4 p = make_float4(s, s + 1.0f, s + 2.0f, s + 3.0f);
    const bool lead = t < k_lead;
    float4 * o4 = (float4 *)out + tile * k_lead + t;
    if (MODE == k_bare) {
        if (lead && slice == 0) *o4 = p;
    } else if (MODE == k_cluster) {
        cluster_wait();   // phase 1: the other block runs
        if (slice == 1) {
            if (lead) *cg::this_cluster().map_shared_rank(other + t, 0) = p;
            cluster_arrive_release();   // phase 2; then exit
            return;
        }
        cluster_arrive_relaxed();
        cluster_wait();   // phase 2: slice 1's sums are in `other`
        if (lead) {
            const float4 q = other[t];
            *o4 = make_float4(p.x + q.x, p.y + q.y, p.z + q.z, p.w + q.w);
        }
    } else {
        if (lead) partial[(size_t)blockIdx.x * k_lead + t] = p;
        if (!arrive_last(counters + tile, k_slices, last)) return;
        if (t == 0) counters[tile] = 0;
        if (lead) {
            const float4 q = __ldcg(partial + ((size_t)tile * k_slices + (1 - slice)) * k_lead + t);
            *o4 = make_float4(p.x + q.x, p.y + q.y, p.z + q.z, p.w + q.w);
        }
    }
}

int main(int argc, char ** argv) {
    const int w_kb = argc > 1 ? atoi(argv[1]) : 512;
    chain_setup c;
    if (!chain_init(c, w_kb, k_blocks, k_threads, k_lead, k_tiles, k_n, 2, k_pool, k_chain)) return 1;
    void (*kernels[3])(const uint4 *, int, const float *, float *, float4 *, int *) = {k_gemv<k_bare>, k_gemv<k_split>, k_gemv<k_cluster>};
    const char * names[3] = {"bare", "split", "cluster"};
    for (auto k : kernels) CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c.smem));
    chain_rounds(c, k_blocks, k_chain, 3, names, [&](int m, int i, const uint4 * w) {
        // kernel i reads buffer (i + 1) % 2 (kernel i - 1's output) and writes i % 2
        chain_launch(c, k_blocks, k_threads, m == k_cluster ? k_slices : 1, kernels[m], w, c.words,
                     (const float *)(c.bufs + (size_t)((i + 1) % 2) * k_n), c.bufs + (size_t)(i % 2) * k_n, c.partial, c.counters);
    });
    return 0;
}
