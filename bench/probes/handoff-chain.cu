// What a split-K hand-off costs per kernel in a PDL chain, against adding the partials into the
// output with vector reductions (session 35). Run 173 (partial-rt.cu) found an L2 round trip ~10x
// slower while the memory streams, so the decode GEMV's tail (the last block of each tile reads
// the other blocks' partials, one round trip, then stores) costs ~2 us per kernel in the model.
// Session 9's red-handoff (atomics into the output, no last block) lost in the whole engine; this
// probe prices the three forms alone, in the engine's shape:
//   bare   no hand-off: each tile's slice-0 block stores its sums (wrong sums, the floor)
//   split  the engine's form: partials stored, barrier, thread 0 fence.acq_rel + count, the last
//          block fences, reads the 16 partials of its tile (ld.cg), stores the tile's result
//   red    every block adds its partials into the output with float4 atomics (RED, no return);
//          the output was zeroed by the kernel before (buffers rotate over three launches)
// Each kernel: 128 blocks of 512 threads (one per SM), 8 tiles x 16 K-slices; every thread loads
// its first two 16-byte words before griddepcontrol.wait, then reads 8 floats of the previous
// kernel's output (the x gather: one round trip), then streams the rest of its block's weights
// (W KB per block from a 256 MB pool, so nothing comes from L2), then hands off. 64 such kernels
// in a CUDA graph with PDL; the figure is graph time / 64.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/handoff-chain.cu -o handoff-chain && ./handoff-chain [W_KB]
//
// W_KB defaults to 128 (16 MB per kernel: ~5 us of stream on an H100, o's size; down is ~2x).
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "probe-handoff.cuh"

constexpr int k_blocks = 128, k_threads = 512, k_lead = 128, k_slices = 16, k_tiles = k_blocks / k_slices;
constexpr int k_n = k_tiles * k_lead * 4;   // output floats per kernel (4096)
constexpr int k_chain = 64;
constexpr size_t k_pool = 256u << 20;

enum { k_bare, k_split, k_red };

template <int MODE>
__global__ void __launch_bounds__(k_threads, 1) k_gemv(const uint4 * w, int words /*per block*/, const float * x, float * out,
                                                       float * zero, float4 * partial, int * counters) {
    extern __shared__ float4 pad[];   // one block per SM
    __shared__ int last;
    const int t = threadIdx.x, tile = blockIdx.x / k_slices, slice = blockIdx.x % k_slices;
    const float s = stream_block<k_threads, k_n>(w + (size_t)blockIdx.x * words, words, x, [&] {
        if (MODE == k_red && zero && t < k_n / k_blocks) zero[blockIdx.x * (k_n / k_blocks) + t] = 0.0f;
    });
    const float4 p = make_float4(s, s + 1.0f, s + 2.0f, s + 3.0f);
    const bool lead = t < k_lead;
    float4 * o4 = (float4 *)out + tile * k_lead + t;
    if (MODE == k_bare) {
        if (lead && slice == 0) *o4 = p;
    } else if (MODE == k_red) {
        if (lead) atomicAdd(o4, p);
    } else {
        if (lead) partial[(size_t)blockIdx.x * k_lead + t] = p;
        if (!arrive_last(counters + tile, k_slices, last)) return;
        if (t == 0) counters[tile] = 0;
        if (lead) {
            float4 v[k_slices], q = make_float4(0, 0, 0, 0);
#pragma unroll
            for (int i = 0; i < k_slices; i++) v[i] = __ldcg(partial + ((size_t)tile * k_slices + i) * k_lead + t);
#pragma unroll
            for (int i = 0; i < k_slices; i++) { q.x += v[i].x; q.y += v[i].y; q.z += v[i].z; q.w += v[i].w; }
            *o4 = q;
        }
    }
}

int main(int argc, char ** argv) {
    const int w_kb = argc > 1 ? atoi(argv[1]) : 128;
    chain_setup c;
    if (!chain_init(c, w_kb, k_blocks, k_threads, k_lead, k_tiles, k_n, 3, k_pool, k_chain)) return 1;
    void (*kernels[3])(const uint4 *, int, const float *, float *, float *, float4 *, int *) = {k_gemv<k_bare>, k_gemv<k_split>, k_gemv<k_red>};
    const char * names[3] = {"bare", "split", "red"};
    for (auto k : kernels) CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c.smem));
    chain_rounds(c, k_blocks, k_chain, 3, names, [&](int m, int i, const uint4 * w) {
        // kernel i reads buffer (i + 2) % 3, writes (or adds into) i % 3, zeroes (i + 1) % 3 for
        // kernel i + 1 (its input, kernel i - 2's output... read by kernel i - 1, done)
        chain_launch(c, k_blocks, k_threads, 1, kernels[m], w, c.words, (const float *)(c.bufs + (size_t)((i + 2) % 3) * k_n),
                     c.bufs + (size_t)(i % 3) * k_n, c.bufs + (size_t)((i + 1) % 3) * k_n, c.partial, c.counters);
    });
    return 0;
}
