// Does a one-row 4-bit GEMV whose dot products run on tensor cores stream the weights at the
// memory's rate with about one instruction per weight? (Session 14 found the strip step issue-
// bound at ~4 thread instructions per weight, 2.35 of them in its fp16-pair loop: NOTES-cuda-
// decode.md, "Session 14's findings".) Written in session 14 after its device time was spent:
// NOT YET RUN.
//
// The form measured:
// - a unit is 16 output columns x one group of 128 input rows (1 KB of 4-bit codes); each lane
//   holds one 32-bit word per 16-row step, its 8 nibbles placed so that two LOP3 against
//   0x64006400 (masks 0x000f000f and 0x00f000f0, on w and on w >> 8) give the four fp16x2
//   registers of an m16n8k16 A fragment: rows 0-7 of the tile (output columns) as 1024 + q,
//   rows 8-15 as 1024 + 16 q (no shift needed for the upper nibble);
// - B is x in fp16, column 0 only (lanes 4-31 read a zero slot, so they need no branch);
// - the tensor core sums (1024 + q) x in fp32 over the group; the unit's epilogue takes the
//   zero point and the bias out with the group's sum of x (1032 S for rows 0-7, and
//   c / 16 - 72 S for rows 8-15), applies the fp16 column scales and keeps the column sums in
//   registers until the warp's tile changes (then one atomicAdd per column).
// The same decomposition with the multiply replaced by an XOR of the words ("bare") gives the
// stream's own rate. Shapes: llama3-8b's o, gate+up (one matrix of 28672 columns) and down at
// 4 bits, 16 device copies cycled so that L2 serves nothing.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -Ibackends/cuda -I. -Iinclude bench/probes/mma-tile.cu -o mma-tile
// Run:   ./mma-tile [DEPTH (units in flight per warp, 1-4; default 2)]
#include "probe-common.cuh"

#include <algorithm>
#include <vector>

namespace {

constexpr int WARPS = 16, NT = WARPS * 32, GS = 128, STEPS = GS / 16;   // 16-row steps per group

struct Mat {
    const char * name;
    int K, N;
    uint4 *    words[16];   // [unit][2][32 lanes] uint4 per copy; unit = tile * G + group
    uint32_t * scales;      // [unit][8] fp16 pairs: (column g, column g + 8) for lane group g
    float *    xsum;        // [G] sum of the group's x (fp16 values, summed in double)
    half *     xs;          // [K / 16][4][4]: x[k0 + 2t], x[k0 + 2t + 1], x[k0 + 2t + 8], x[k0 + 2t + 9]
    float *    y;
    int        G, units;
};

__device__ __forceinline__ uint32_t lop3_or(uint32_t w, uint32_t mask) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(w), "r"(mask), "r"(0x64006400u));   // (w & mask) | 0x64006400
    return d;
}

__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One launch: every warp of 132 x 16 takes a contiguous run of units (tile-major), D in flight.
template <int D, bool BARE>
__global__ void __launch_bounds__(NT, 1) k_tile(const uint4 * __restrict__ words, const uint32_t * __restrict__ scales,
                                               const half * __restrict__ xg, const float * __restrict__ xsum_g, float * y, int K, int G,
                                               int units) {
    extern __shared__ __align__(16) unsigned char smem[];
    half * xs = (half *)smem;                    // K halves, then 8 zero halves
    float * xsum = (float *)(smem + (K + 8) * 2);
    for (int i = threadIdx.x; i < K / 8; i += NT) ((uint4 *)xs)[i] = ((const uint4 *)xg)[i];
    if (threadIdx.x < 2) ((uint2 *)(xs + K))[threadIdx.x] = make_uint2(0, 0);
    for (int i = threadIdx.x; i < G; i += NT) xsum[i] = xsum_g[i];
    __syncthreads();
    const int lane = threadIdx.x % 32, gw = blockIdx.x * WARPS + threadIdx.x / 32, n_warps = gridDim.x * WARPS;
    const int u0 = (int)((long)units * gw / n_warps), u1 = (int)((long)units * (gw + 1) / n_warps);
    if (u0 >= u1) return;
    const int g = lane / 4, t = lane % 4;
    // B: lanes 0-3 walk x, the others stay on the zero slot
    const half * xb = g == 0 ? xs + t * 4 : xs + K;
    const int xb_step = g == 0 ? 16 : 0;   // halves per 16-row step

    uint4 w[D][2];
    uint32_t sc[D];
    auto fetch = [&](int d, int u) {
        w[d][0] = __ldcs(words + ((size_t)u * 2 + 0) * 32 + lane);
        w[d][1] = __ldcs(words + ((size_t)u * 2 + 1) * 32 + lane);
        sc[d] = __ldg(scales + (size_t)u * 8 + g);
    };
#pragma unroll
    for (int d = 0; d < D; d++)
        if (u0 + d < u1) fetch(d, u0 + d);
    float lo = 0.0f, hi = 0.0f;   // this lane group's columns g and g + 8 of the current tile
    uint32_t bare = 0;
    int tile = u0 / G;
    for (int u = u0; u < u1; u += D) {
#pragma unroll
        for (int d = 0; d < D; d++) {
            const int uu = u + d;
            if (uu >= u1) break;
            const int grp = uu % G, ut = uu / G;
            if (ut != tile) {   // uniform: the unit is the warp's
                if (t == 0) {
                    atomicAdd(y + tile * 16 + g, lo);
                    atomicAdd(y + tile * 16 + g + 8, hi);
                }
                lo = hi = 0.0f;
                tile = ut;
            }
            const uint32_t wv[8] = {w[d][0].x, w[d][0].y, w[d][0].z, w[d][0].w, w[d][1].x, w[d][1].y, w[d][1].z, w[d][1].w};
            const uint32_t s = sc[d];
            if (BARE) {
#pragma unroll
                for (int i = 0; i < 8; i++) bare ^= wv[i];
            } else {
                float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                const half * xp = xb + grp * STEPS * xb_step;
#pragma unroll
                for (int i = 0; i < STEPS; i++) {
                    const uint2 b = *(const uint2 *)(xp + i * xb_step);
                    const uint32_t v = wv[i], v8 = wv[i] >> 8;
                    mma16816(c, lop3_or(v, 0x000f000fu), lop3_or(v, 0x00f000f0u), lop3_or(v8, 0x000f000fu), lop3_or(v8, 0x00f000f0u), b.x, b.y);
                }
                // c[0]: column g, sum of (1024 + q) x; c[2]: column g + 8, sum of (1024 + 16 q) x (lanes t == 0)
                const float S = xsum[grp];
                const float2 s2 = __half22float2(*(const half2 *)&s);
                lo += s2.x * (c[0] - 1032.0f * S);
                hi += s2.y * (c[2] * 0.0625f - 72.0f * S);
            }
            if (uu + D < u1) fetch(d, uu + D);
        }
    }
    if (BARE) {
        if (bare == 0x9e3779b9u) y[0] = 1.0f;   // keeps the loads; practically never true
    } else if (t == 0) {
        atomicAdd(y + tile * 16 + g, lo);
        atomicAdd(y + tile * 16 + g + 8, hi);
    }
}

// Host: the unit-ordered words of a [K][N] code matrix (q[k * N + n] in 0..15).
void pack_units(const std::vector<uint8_t> & q, int K, int N, std::vector<uint32_t> & out) {
    const int G = K / GS, tiles = N / 16;
    out.assign((size_t)tiles * G * 2 * 32 * 4, 0);
    for (int tile = 0; tile < tiles; tile++)
        for (int grp = 0; grp < G; grp++)
            for (int s = 0; s < STEPS; s++)
                for (int lane = 0; lane < 32; lane++) {
                    const int g = lane / 4, t = lane % 4, k0 = grp * GS + s * 16, nl = tile * 16 + g, nh = nl + 8;
                    auto Q = [&](int k, int n) { return (uint32_t)q[(size_t)k * N + n]; };
                    const uint32_t w = Q(k0 + 2 * t, nl) | Q(k0 + 2 * t, nh) << 4 | Q(k0 + 2 * t + 8, nl) << 8 | Q(k0 + 2 * t + 8, nh) << 12 |
                                       Q(k0 + 2 * t + 1, nl) << 16 | Q(k0 + 2 * t + 1, nh) << 20 | Q(k0 + 2 * t + 9, nl) << 24 |
                                       Q(k0 + 2 * t + 9, nh) << 28;
                    const size_t unit = (size_t)tile * G + grp;
                    out[((unit * 2 + s / 4) * 32 + lane) * 4 + s % 4] = w;
                }
}

}  // namespace

int main(int argc, char ** argv) {
    const int depth = argc > 1 ? std::atoi(argv[1]) : 2;
    if (depth < 1 || depth > 4) {
        std::fprintf(stderr, "mma-tile: depth %d: expected 1..4\n", depth);
        return 1;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int COPIES = 16, LAYERS = 32, SMS = prop.multiProcessorCount;
    Mat mats[3] = {{"o", 4096, 4096}, {"gate+up", 4096, 28672}, {"down", 14336, 4096}};
    std::vector<std::vector<uint8_t>> codes(3);
    std::vector<std::vector<float>> xs_f(3), sc_f(3);
    size_t layer_bytes = 0;
    uint64_t rng = 88172645463325252ull;
    auto next = [&] { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; };
    for (int mi = 0; mi < 3; mi++) {
        Mat & M = mats[mi];
        M.G = M.K / GS;
        M.units = M.N / 16 * M.G;
        std::vector<uint8_t> & q = codes[mi];
        q.resize((size_t)M.K * M.N);
        for (uint8_t & v : q) v = (uint8_t)(next() & 15);
        std::vector<uint32_t> packed;
        pack_units(q, M.K, M.N, packed);
        for (int c = 0; c < COPIES; c++) {
            CK(cudaMalloc(&M.words[c], packed.size() * 4));
            CK(cudaMemcpy(M.words[c], packed.data(), packed.size() * 4, cudaMemcpyHostToDevice));   // same codes: the check holds for every copy
        }
        // fp16 column scales per group, in unit order as (column g, column g + 8) pairs
        std::vector<float> & sf = sc_f[mi];
        sf.resize((size_t)M.G * M.N);
        for (float & v : sf) v = __half2float(__float2half((0.5f + (next() % 1000) / 1000.0f) / 64.0f));
        std::vector<uint32_t> su((size_t)M.units * 8);
        for (int tile = 0; tile < M.N / 16; tile++)
            for (int grp = 0; grp < M.G; grp++)
                for (int g = 0; g < 8; g++) {
                    const half lo = __float2half(sf[(size_t)grp * M.N + tile * 16 + g]), hi = __float2half(sf[(size_t)grp * M.N + tile * 16 + g + 8]);
                    su[((size_t)tile * M.G + grp) * 8 + g] = (uint32_t)__half_as_ushort(lo) | (uint32_t)__half_as_ushort(hi) << 16;
                }
        CK(cudaMalloc(&M.scales, su.size() * 4));
        CK(cudaMemcpy(M.scales, su.data(), su.size() * 4, cudaMemcpyHostToDevice));
        // x in fp16, its per-step order and group sums
        std::vector<float> & xf = xs_f[mi];
        xf.resize(M.K);
        for (float & v : xf) v = __half2float(__float2half(((int)(next() % 2001) - 1000) / 1000.0f));
        std::vector<half> xo(M.K);
        std::vector<float> xsum(M.G, 0.0f);
        for (int s = 0; s < M.K / 16; s++)
            for (int t = 0; t < 4; t++) {
                const int k0 = s * 16;
                const int ks[4] = {k0 + 2 * t, k0 + 2 * t + 1, k0 + 2 * t + 8, k0 + 2 * t + 9};
                for (int j = 0; j < 4; j++) xo[(size_t)(s * 4 + t) * 4 + j] = __float2half(xf[ks[j]]);
            }
        for (int grp = 0; grp < M.G; grp++) {
            double a = 0.0;
            for (int k = grp * GS; k < (grp + 1) * GS; k++) a += xf[k];
            xsum[grp] = (float)a;
        }
        CK(cudaMalloc(&M.xs, M.K * 2));
        CK(cudaMemcpy(M.xs, xo.data(), M.K * 2, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&M.xsum, M.G * 4));
        CK(cudaMemcpy(M.xsum, xsum.data(), M.G * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&M.y, M.N * 4));
        layer_bytes += packed.size() * 4 + su.size() * 4;
    }
    std::printf("mma-tile: %s, %d SMs x %d warps, depth %d, %.1f MB per layer (codes + fp16 scales)\n", prop.name, SMS, WARPS, depth,
                layer_bytes / 1e6);

    auto launch = [&](const Mat & M, int copy, bool bare, cudaStream_t st) {
        const size_t smem = (size_t)(M.K + 8) * 2 + (size_t)M.G * 4;
        void (*k)(const uint4 *, const uint32_t *, const half *, const float *, float *, int, int, int) = nullptr;
        switch (depth * 2 + bare) {
            case 2: k = k_tile<1, false>; break;
            case 3: k = k_tile<1, true>; break;
            case 4: k = k_tile<2, false>; break;
            case 5: k = k_tile<2, true>; break;
            case 6: k = k_tile<3, false>; break;
            case 7: k = k_tile<3, true>; break;
            case 8: k = k_tile<4, false>; break;
            default: k = k_tile<4, true>; break;
        }
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CK(cudaMemsetAsync(M.y, 0, M.N * 4, st));
        k<<<SMS, NT, smem, st>>>(M.words[copy], M.scales, M.xs, M.xsum, M.y, M.K, M.G, M.units);
        CK(cudaGetLastError());
    };

    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    // the check: every matrix against a double-precision sum of (q - 8) * scale * x
    bool ok = true;
    for (int mi = 0; mi < 3; mi++) {
        const Mat & M = mats[mi];
        launch(M, 0, false, st);
        CK(cudaStreamSynchronize(st));
        std::vector<float> y(M.N);
        CK(cudaMemcpy(y.data(), M.y, M.N * 4, cudaMemcpyDeviceToHost));
        std::vector<double> ref(M.N, 0.0), mag(M.N, 0.0);
        for (int k = 0; k < M.K; k++)   // row by row: the codes are [K][N]
            for (int n = 0; n < M.N; n++) {
                const double p = ((int)codes[mi][(size_t)k * M.N + n] - 8) * (double)sc_f[mi][(size_t)(k / GS) * M.N + n] * xs_f[mi][k];
                ref[n] += p;
                mag[n] += std::fabs(p);
            }
        double worst = 0.0;
        for (int n = 0; n < M.N; n++) worst = std::max(worst, std::fabs(y[n] - ref[n]) / (mag[n] / 1024.0 + 1e-6));
        std::printf("  check %-8s: worst error %.4f of the bound (2^-10 of sum |w x|)\n", M.name, worst);
        ok = ok && worst <= 1.0;
    }
    if (!ok) std::printf("mma-tile: CHECK FAILED (timings below are of wrong results)\n");

    auto time_graph = [&](bool bare, int only) {
        cudaGraph_t gr;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int l = 0; l < LAYERS; l++)
            for (int mi = 0; mi < 3; mi++)
                if (only < 0 || only == mi) launch(mats[mi], l % COPIES, bare, st);
        CK(cudaStreamEndCapture(st, &gr));
        CK(cudaGraphInstantiate(&ge, gr, 0));
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        std::vector<float> ms;
        for (int r = 0; r < 10; r++) {
            CK(cudaEventRecord(a, st));
            CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(b, st));
            CK(cudaEventSynchronize(b));
            float v;
            CK(cudaEventElapsedTime(&v, a, b));
            if (r > 0) ms.push_back(v);   // the first launch uploads the graph
        }
        std::sort(ms.begin(), ms.end());
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(gr));
        return (double)ms[ms.size() / 2] * 1e3 / LAYERS;   // us per layer
    };
    for (bool bare : {false, true}) {
        const double us = time_graph(bare, -1);
        std::printf("%s: %.2f us per layer (3 launches + 3 memsets), %.2f TB/s\n", bare ? "bare stream" : "mma", us, layer_bytes / (us * 1e-6) / 1e12);
        for (int mi = 0; mi < 3; mi++) {
            const double um = time_graph(bare, mi);
            const double bytes = (double)mats[mi].units * (2048 / 2 + 32);
            std::printf("  %-8s %5d x %5d: %6.2f us, %.2f TB/s\n", mats[mi].name, mats[mi].K, mats[mi].N, um, bytes / (um * 1e-6) / 1e12);
        }
    }
    return ok ? 0 : 2;
}
