// What one L2 round trip of split-K partial reads costs in a tile's last block (session 35). The
// decode GEMV's trace (run 171) puts 1.5-2.2 us on the last block's single batch of partial loads
// (16 float4 per lead thread at most, all in flight), about 4x an unloaded L2 hit; halving the
// next kernel's first loads did not shorten it (run 172). This probe asks the question off the
// model: the same hand-off (a grid of 8 tiles x 16 K-slices, one 512-thread block per SM; each
// block stores its partials, then barrier, thread 0 fence.acq_rel + count, the last fences again)
// with the last block's batch of ld.cg timed, in these cases:
//   fresh        the partials the tile's other blocks have just written (the GEMV's case)
//   old          the same addresses, written by an earlier launch (plain L2 hits)
//   fresh+bw     as fresh, while the blocks that are not last stream 4 MB each (the GEMV's slowest
//                tiles still in their loops, the next kernel's first loads)
//   fresh+bw/4   the same with tiles of 4 slices (32 tiles): does the batch's size matter, or only
//                its round trip?
//   chain+bw     under the same load, thread 0 of each last block walks 8 dependent ld.cg of old
//                lines instead of the batch: one loaded round trip (figures per load)
//   chain        one thread, 64 dependent ld.cg of old lines: the unloaded L2 latency
//
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/partial-rt.cu -o partial-rt && ./partial-rt
//
// Figures are ns (%globaltimer, 32-64 ns steps on Hopper) and cycles (clock64, SM clock), medians
// over the 8 tiles' last blocks and 50 launches.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe-handoff.cuh"

constexpr int k_blocks = 128, k_threads = 512, k_lead = 128, k_chain_bw = 8;
constexpr size_t k_stream_bytes = 4u << 20;   // per streaming block (fresh+bw)

__device__ __forceinline__ uint64_t gtime() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// partial[tile][slice][k_lead] float4 (S slices per tile); out[tile] = {ns, cycles}. chain: the
// last blocks time k_chain_bw dependent loads through idx instead of the batch.
template <int S>
__global__ void __launch_bounds__(k_threads, 1) k_handoff(float4 * partial, int * counters, long long * out, int write,
                                                          const uint4 * stream, float4 * sink, const int * chain) {
    __shared__ int last;
    extern __shared__ float4 pad[];   // one block per SM
    constexpr int k_slices = S;
    const int tile = blockIdx.x / k_slices, slice = blockIdx.x % k_slices, t = threadIdx.x;
    float4 * mine = partial + ((size_t)tile * k_slices + slice) * k_lead;
    if (write && t < k_lead) mine[t] = make_float4(slice, t, tile, 1.0f);
    if (!arrive_last(counters + tile, k_slices, last)) {
        if (stream) {   // keep the memory system busy while the last blocks read
            const uint4 * p = stream + (size_t)blockIdx.x * (k_stream_bytes / 16);
            uint32_t acc = 0;
            for (size_t i = t; i < k_stream_bytes / 16; i += k_threads) {
                uint4 v;
                asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p + i));
                acc ^= v.x ^ v.w;
            }
            if (acc == 0x12345678u) sink[t] = make_float4(acc, 0, 0, 0);
        }
        return;
    }
    if (t == 0) counters[tile] = 0;
    if (chain) {
        if (t == 0) {
            int j = tile * 64;
            const uint64_t t0 = gtime();
            const long long c0 = clock64();
            for (int i = 0; i < k_chain_bw; i++) j = __ldcg(chain + j);
            const long long c1 = clock64();
            const uint64_t t1 = gtime();
            sink[tile] = make_float4(j, 0, 0, 0);
            out[2 * tile] = (long long)(t1 - t0) / k_chain_bw;
            out[2 * tile + 1] = (c1 - c0) / k_chain_bw;
        }
        return;
    }
    const uint64_t t0 = gtime();
    const long long c0 = clock64();
    float4 s = make_float4(0, 0, 0, 0);
    if (t < k_lead) {
        float4 v[k_slices];
#pragma unroll
        for (int i = 0; i < k_slices; i++) v[i] = __ldcg(partial + ((size_t)tile * k_slices + i) * k_lead + t);
#pragma unroll
        for (int i = 0; i < k_slices; i++) { s.x += v[i].x; s.y += v[i].y; s.z += v[i].z; s.w += v[i].w; }
    }
    __syncthreads();   // every lead warp's loads returned (they fed s)
    const long long c1 = clock64();
    const uint64_t t1 = gtime();
    if (t < k_lead) sink[tile * k_lead + t] = s;
    if (t == 0) { out[2 * tile] = (long long)(t1 - t0); out[2 * tile + 1] = c1 - c0; }
    (void)pad;
}

// one thread, a chain of dependent ld.cg over the partials (the next index from the value read)
__global__ void k_chain(const int * idx, int n, long long * out, int * sink) {
    int j = 0;
    const uint64_t t0 = gtime();
    const long long c0 = clock64();
    for (int i = 0; i < n; i++) j = __ldcg(idx + j);
    const long long c1 = clock64();
    const uint64_t t1 = gtime();
    out[0] = (long long)(t1 - t0) / n;
    out[1] = (c1 - c0) / n;
    *sink = j;
}

static long long median(std::vector<long long> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int blocks = k_blocks, max_tiles = k_blocks / 4;
    if (prop.multiProcessorCount < blocks) { printf("needs %d SMs (has %d)\n", blocks, prop.multiProcessorCount); return 1; }
    printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
    const size_t smem = (size_t)prop.sharedMemPerBlockOptin / 2 + 1024;   // more than half: one block per SM
    CK(cudaFuncSetAttribute(k_handoff<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaFuncSetAttribute(k_handoff<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    float4 * partial; int * counters; long long * out; uint4 * stream; float4 * sink;
    CK(cudaMalloc(&partial, sizeof(float4) * blocks * k_lead));
    int * chain;   // dependent indices: each tile's own 8-step walk over 64 slots, 16 bytes apart
    CK(cudaMalloc(&counters, sizeof(int) * max_tiles));
    CK(cudaMalloc(&out, sizeof(long long) * 2 * max_tiles));
    CK(cudaMalloc(&chain, sizeof(int) * 64 * max_tiles));
    CK(cudaMalloc(&stream, k_stream_bytes * blocks));
    CK(cudaMalloc(&sink, sizeof(float4) * max_tiles * k_lead));
    CK(cudaMemset(counters, 0, sizeof(int) * max_tiles));
    {
        std::vector<int> h(64 * max_tiles);
        for (int tl = 0; tl < max_tiles; tl++)
            for (int i = 0; i < 64; i++) h[tl * 64 + i] = tl * 64 + (i + 4 * 5) % 64 / 4 * 4;   // strides of 4 ints
        CK(cudaMemcpy(chain, h.data(), sizeof(int) * h.size(), cudaMemcpyHostToDevice));
    }
    CK(cudaMemset(stream, 1, k_stream_bytes * blocks));
    struct mode { const char * name; int slices, write; bool bw, chain; };
    const mode modes[] = {{"fresh", 16, 1, false, false}, {"old", 16, 0, false, false}, {"fresh+bw", 16, 1, true, false},
                          {"fresh+bw/4", 4, 1, true, false}, {"chain+bw", 16, 1, true, true}};
    for (const mode & m : modes) {
        const int tiles = blocks / m.slices;
        std::vector<long long> ns, cyc;
        for (int rep = 0; rep < 52; rep++) {
            if (m.slices == 16)
                k_handoff<16><<<blocks, k_threads, smem>>>(partial, counters, out, m.write, m.bw ? stream : nullptr, sink, m.chain ? chain : nullptr);
            else
                k_handoff<4><<<blocks, k_threads, smem>>>(partial, counters, out, m.write, m.bw ? stream : nullptr, sink, m.chain ? chain : nullptr);
            CK(cudaGetLastError());
            std::vector<long long> h(2 * tiles);
            CK(cudaMemcpy(h.data(), out, sizeof(long long) * h.size(), cudaMemcpyDeviceToHost));
            if (rep < 2) continue;   // warm-up
            for (int i = 0; i < tiles; i++) { ns.push_back(h[2 * i]); cyc.push_back(h[2 * i + 1]); }
        }
        printf("%-10s %s in the last block: %5lld ns, %6lld cycles (medians; max %lld ns)\n", m.name,
               m.chain ? "one dependent ld.cg" : "partial batch", median(ns), median(cyc), *std::max_element(ns.begin(), ns.end()));
    }
    // the chain: a permutation over the partial buffer's 16-byte slots, one int each
    const int n = blocks * k_lead;
    std::vector<int> perm(n), idx(n * 4, 0);
    for (int i = 0; i < n; i++) perm[i] = i;
    srand(7);
    for (int i = n - 1; i > 0; i--) std::swap(perm[i], perm[rand() % (i + 1)]);
    for (int i = 0; i < n; i++) idx[perm[i] * 4] = perm[(i + 1) % n] * 4;
    CK(cudaMemcpy(partial, idx.data(), sizeof(int) * idx.size(), cudaMemcpyHostToDevice));
    std::vector<long long> ns, cyc;
    for (int rep = 0; rep < 12; rep++) {
        k_chain<<<1, 1>>>((const int *)partial, 64, out, (int *)sink);
        long long h[2];
        CK(cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost));
        if (rep < 2) continue;
        ns.push_back(h[0]);
        cyc.push_back(h[1]);
    }
    printf("chain      one dependent ld.cg (L2 hit, idle GPU): %lld ns, %lld cycles (medians)\n", median(ns), median(cyc));
    return 0;
}
