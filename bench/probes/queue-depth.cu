// Does a dependent L2 hit wait behind the weight stream's loads in flight (session 38)? Run 173
// put one L2 hit at 142 ns idle and ~2.1 us while other SMs stream, and the decode layer has ~10
// such round trips between its loops (x gathers, norms, attention's rows, the residual). The
// decode GEMV keeps two pieces per thread in flight: 64 KB per SM at 4 bits (128 KB at 8), ~8.4
// MB over 132 SMs, about three times the bandwidth-delay product (~3 TB/s x ~0.8 us). If the
// fabric queues a hit behind those loads, its latency is about (bytes in flight) / bandwidth
// (Little's law) and a shallower stream that still saturates HBM would shorten every round trip.
//
// The probe: 128 blocks of 512 threads (one per SM) stream their own 24 MB with A active threads
// each holding U 16-byte loads in flight (A x U x 16 bytes per SM), while 4 more blocks' thread 0
// walk a chain of dependent ld.cg over lines already in L2 (the hit) and, separately, over lines
// no launch touched before (a DRAM miss: each launch walks its own lane of lines). The stream's
// loads are L2 evict-first, as the engine's weights.
// Printed per (A, U): the stream's bandwidth, and the median hit and miss latencies taken while
// every streaming block was running.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/queue-depth.cu -o /tmp/queue-depth && /tmp/queue-depth
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1); } } while (0)

constexpr int k_stream_blocks = 128, k_ping_blocks = 4, k_threads = 512;
constexpr size_t k_block_bytes = 24u << 20;        // streamed per block
constexpr int k_pings = 4096;                      // per pinging block at most
constexpr int k_hit_lines = 32;                    // 8 lines per pinger, touched every few us: they stay in L2
constexpr size_t k_miss_span = 1u << 30;           // cold lines for the miss chains
constexpr int k_miss_lanes = 512;                  // chains 128 bytes apart within a 64 KB + 128 B stride

__device__ __forceinline__ uint64_t gtime() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

struct probe_out {
    unsigned long long start[k_stream_blocks], end[k_stream_blocks];
    unsigned long long ping_at[k_ping_blocks][k_pings];   // globaltimer when the ping returned
    unsigned int ping_ns[k_ping_blocks][k_pings];
    int n_pings[k_ping_blocks];
};

// U loads of 16 bytes per active thread in flight, then their use; a block streams its own span.
template <int U>
__device__ void stream(const uint4 * p, int active, uint4 * sink) {
    const int t = threadIdx.x;
    if (t >= active) return;
    const size_t n = k_block_bytes / 16, step = (size_t)active * U;
    uint32_t acc = 0;
    uint64_t pol;   // L2 evict-first, as the engine's weight loads: the chains' lines stay in L2
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    for (size_t base = 0; base + step <= n; base += step) {
        uint4 v[U];
#pragma unroll
        for (int j = 0; j < U; j++)
            asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                         : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w)
                         : "l"(p + base + (size_t)j * active + t), "l"(pol));
#pragma unroll
        for (int j = 0; j < U; j++) acc ^= v[j].x ^ v[j].w;
    }
    if (acc == 0x9e3779b9u) sink[t] = make_uint4(acc, 0, 0, 0);
}

template <int U>
__global__ void __launch_bounds__(k_threads, 1) k_probe(const uint4 * data, int active, const int * hit, const int * miss,
                                                        int use_miss, int lane, probe_out * out, int * done, uint4 * sink) {
    extern __shared__ uint4 pad[];   // one block per SM
    if (blockIdx.x < k_stream_blocks) {
        __syncthreads();
        if (threadIdx.x == 0) out->start[blockIdx.x] = gtime();
        stream<U>(data + (size_t)blockIdx.x * (k_block_bytes / 16), active, sink);
        __syncthreads();
        if (threadIdx.x == 0) {
            out->end[blockIdx.x] = gtime();
            atomicAdd(done, 1);
        }
        return;
    }
    if (threadIdx.x != 0) return;
    const int b = blockIdx.x - k_stream_blocks;
    const int * chain = use_miss ? miss : hit;
    // each pinger its own lines; each launch its own lane of the miss chains
    int j = use_miss ? b * (int)(k_miss_span / 4 / k_ping_blocks) + 32 * (lane + 1) : b * k_hit_lines / k_ping_blocks * 32;
    int i = 0;
    for (; i < k_pings; i++) {
        if ((i & 15) == 0 && *(volatile int *)done >= k_stream_blocks) break;
        const uint64_t t0 = gtime();
        j = __ldcg(chain + j);
        const uint64_t t1 = gtime();
        out->ping_at[b][i] = t1;
        out->ping_ns[b][i] = (unsigned)(t1 - t0);
    }
    out->n_pings[b] = i;
    if (j == -7) sink[0] = make_uint4(j, 0, 0, 0);
}

template <int U>
void run_case(const uint4 * data, int active, const int * hit, const int * miss, int use_miss, int lane, probe_out * d_out,
              int * d_done, uint4 * sink, size_t smem, double & tbs, double & ping_med, double & ping_p90) {
    CK(cudaFuncSetAttribute(k_probe<U>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaMemset(d_done, 0, sizeof(int)));
    k_probe<U><<<k_stream_blocks + k_ping_blocks, k_threads, smem>>>(data, active, hit, miss, use_miss, lane, d_out, d_done, sink);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    static probe_out h;
    CK(cudaMemcpy(&h, d_out, sizeof h, cudaMemcpyDeviceToHost));
    const unsigned long long s_max = *std::max_element(h.start, h.start + k_stream_blocks);
    const unsigned long long s_min = *std::min_element(h.start, h.start + k_stream_blocks);
    const unsigned long long e_min = *std::min_element(h.end, h.end + k_stream_blocks);
    const unsigned long long e_max = *std::max_element(h.end, h.end + k_stream_blocks);
    const size_t bytes_done = (size_t)k_stream_blocks * (k_block_bytes / (16 * (size_t)active * U)) * 16 * active * U;
    tbs = (double)bytes_done / (double)(e_max - s_min) / 1e3;
    std::vector<unsigned> v;
    for (int b = 0; b < k_ping_blocks; b++)
        for (int i = 0; i < h.n_pings[b]; i++)
            if (h.ping_at[b][i] > s_max && h.ping_at[b][i] < e_min) v.push_back(h.ping_ns[b][i]);
    if (v.empty()) { ping_med = ping_p90 = -1; return; }
    std::sort(v.begin(), v.end());
    ping_med = v[v.size() / 2];
    ping_p90 = v[v.size() * 9 / 10];
}

int main() {
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("device %s, %d SMs; %d streaming blocks + %d pinging, %zu MB streamed per block\n", prop.name, sms,
           k_stream_blocks, k_ping_blocks, k_block_bytes >> 20);
    if (sms < k_stream_blocks + k_ping_blocks) { printf("needs %d SMs\n", k_stream_blocks + k_ping_blocks); return 1; }
    uint4 * data;
    CK(cudaMalloc(&data, k_stream_blocks * k_block_bytes));
    CK(cudaMemset(data, 1, k_stream_blocks * k_block_bytes));
    // hit chain: pinger b walks its lines (128 bytes, 32 ints each) in a cycle
    constexpr int lines = k_hit_lines / k_ping_blocks;
    std::vector<int> hit_host(k_hit_lines * 32);
    for (int b = 0; b < k_ping_blocks; b++)
        for (int l = 0; l < lines; l++) hit_host[(b * lines + l) * 32] = (b * lines + (l + 1) % lines) * 32;
    int * hit;
    CK(cudaMalloc(&hit, hit_host.size() * sizeof(int)));
    CK(cudaMemcpy(hit, hit_host.data(), hit_host.size() * sizeof(int), cudaMemcpyHostToDevice));
    // miss chains: pinger b's lane L jumps by 64 KB + 128 B through the 256 MB it alone reads,
    // starting 128 (L + 1) bytes in; at the end it returns to its start (reached only if a stream
    // outlasts ~4000 misses)
    const size_t miss_ints = k_miss_span / 4;
    std::vector<int> miss_host(miss_ints, 0);
    const size_t stride = (65536 + 128) / 4;
    for (int b = 0; b < k_ping_blocks; b++)
        for (int lane = 0; lane < k_miss_lanes; lane++) {
            const size_t span = miss_ints / k_ping_blocks, lo = (size_t)b * span, start = lo + 32 * (size_t)(lane + 1);
            for (size_t at = start; at < lo + span; at += stride) miss_host[at] = (int)(at + stride < lo + span ? at + stride : start);
        }
    int * miss;
    CK(cudaMalloc(&miss, miss_ints * sizeof(int)));
    CK(cudaMemcpy(miss, miss_host.data(), miss_ints * sizeof(int), cudaMemcpyHostToDevice));
    probe_out * d_out;
    int * d_done;
    uint4 * sink;
    CK(cudaMalloc(&d_out, sizeof(probe_out)));
    CK(cudaMalloc(&d_done, sizeof(int)));
    CK(cudaMalloc(&sink, k_threads * sizeof(uint4)));
    const size_t smem = 150 * 1024;

    struct shape { int active, u; };
    const shape shapes[] = {{128, 1}, {128, 2}, {256, 1}, {256, 2}, {512, 1}, {128, 8}, {256, 4},
                            {512, 2}, {512, 4}, {512, 8}, {512, 16}};
    printf("%8s %4s %10s | %9s %8s %8s | %9s %8s %8s\n", "threads", "U", "KB/SM", "hit TB/s", "hit ns", "p90", "miss TB/s",
           "miss ns", "p90");
    int lane = 0;
    for (const shape & s : shapes) {
        double r[2][3];
        for (int use_miss = 0; use_miss < 2; use_miss++) {
            auto go = [&](auto u) {
                constexpr int U = decltype(u)::value;
                run_case<U>(data, s.active, hit, miss, use_miss, use_miss ? lane++ % k_miss_lanes : 0, d_out, d_done, sink, smem,
                            r[use_miss][0], r[use_miss][1], r[use_miss][2]);
            };
            for (int rep = 0; rep < 2; rep++) {   // the first run warms the hit chain's lines into L2
                switch (s.u) {
                    case 1: go(std::integral_constant<int, 1>()); break;
                    case 2: go(std::integral_constant<int, 2>()); break;
                    case 4: go(std::integral_constant<int, 4>()); break;
                    case 8: go(std::integral_constant<int, 8>()); break;
                    default: go(std::integral_constant<int, 16>()); break;
                }
            }
        }
        printf("%8d %4d %10d | %9.2f %8.0f %8.0f | %9.2f %8.0f %8.0f\n", s.active, s.u, s.active * s.u * 16 / 1024, r[0][0],
               r[0][1], r[0][2], r[1][0], r[1][1], r[1][2]);
    }
    return 0;
}
