// Probe (session 47): the decode FFN as one kernel with no grid-wide step inside it.
//
// In EXL2 the columns of gate and up are independent, and down's q_perm says which of them each
// of down's rows reads. If gate's and up's columns are put in down's q_perm order at load (words
// and scales move with their column; gate j and up j move alike), then the 128 columns a block
// computes of gate and up over the whole of K are h's values for 128 consecutive rows of down,
// and the same block can multiply those rows of down at once and add its sums into the output:
// gate/up needs no split-K hand-off, down no PDL wait and no prologue, and the step loses one
// kernel boundary per layer. The engine spends gate/up + down ~42.5 us a layer at llama3-8b 4.0
// on the H100 (run 200's trace: 0.89 + 28.31 + 0.55 + 12.72 us) for 88 MB of weights (~29 us at
// 3.0 TB/s); this measures what the fused form takes for the same bytes.
//
// Shapes: llama3-8b's (H 4096, F 14336), 4 bits, 128-row groups with one fp16 scale per group
// and column, zero point 8; L layers with their own weights. Block j (of F / 128 = 112, 512
// threads, one per SM): RMS norm of its input, x staged in fp16 scaled into [8, 16) as the
// engine does; warp w multiplies rows 256 w .. + 255 of gate and up for the block's 128 columns
// (64-row pieces, two in flight, the engine's fp16-pair dot product: exl2-unpack.cuh); the 16
// warps' sums meet in shared memory; h = silu(g) u for the 128 columns, staged in fp16; warp w
// then multiplies those 128 rows of down for columns 256 w .. + 255 and adds its sums into the
// layer's output with float4 atomics. Layer l reads buffer l and adds into buffer l + 1, which
// layer l - 1 zeroed (so no kernel reads what it writes and the graph needs no memsets but one).
//
// Variants, each a graph of L layers with PDL between the kernels:
//   fused     one kernel per layer, as above
//   loads     the fused kernel's loads without the unpacking (XOR of the words): its floor
//   split     the same work as two kernels per layer (h through global memory; down's blocks
//             load their first pieces before the PDL wait): what the boundary alone costs
//   in place  the fused kernel adding into the buffer it reads (as the engine's residual), its
//             adds held until a count says every block has staged x
// then the fused kernel once more with block stamps (globaltimer): per layer, the median block's
// moments (wait, x staged, gate/up summed, h staged, end) and the first and last block ends.
// Layer 0's output is checked against a double-precision CPU sum first.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -Ibackends/cuda -I. -Iinclude bench/probes/ffn-fused.cu -o /tmp/ffn-fused
//   /tmp/ffn-fused [LAYERS]
#include <algorithm>
#include <vector>
#include "probe-common.cuh"   // CK, k_fill, exl2-unpack.cuh

constexpr int kH = 4096, kF = 14336, kTW = 128, kThreads = 512, kWarps = 16, kGroup = 128;
constexpr int kBlocks = kF / kTW;
static_assert(kH == kWarps * 256 && kTW * 4 * 8 == kH, "warp w: 256 rows of gate/up, 256 columns of down");

struct layer {
    const uint32_t * gq, * uq, * dq;   // [K / 8][N] words: 8 rows of one column each, nibble i = row 8 r + i
    const half * gs, * us, * ds;       // [K / 128][N] scales
    const float * x;                   // input [H]
    float * y;                         // output [H], zero on entry (+=)
    float * zero_next;                 // the next layer's output, zeroed here ([H], or null)
    float * h;                         // split: [F]
    unsigned long long * stamps;       // [blocks][k_stamps] (globaltimer), or null
    unsigned * staged;                 // in place (x == y): blocks that have staged x, or null
};

// the block's moments (thread 0, each after a block barrier but the first two and the last)
enum { st_entry, st_waited, st_staged, st_gateup, st_h, st_end, k_stamps };
__device__ __forceinline__ void stamp(const layer & L, int i) {
    if (L.stamps && threadIdx.x == 0) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        L.stamps[blockIdx.x * k_stamps + i] = t;
    }
}

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_next() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void red_add4(float * p, float4 v) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}

// a 64-row piece of 4 columns: 8 word rows and the group's 4 scales
struct piece { uint4 w[8]; uint2 s; };

__device__ __forceinline__ void piece_load(const uint32_t * q, const half * s, int Np, int row0, int n, piece & p) {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    const uint32_t * base = q + (size_t)(row0 / 8) * Np + n;
#pragma unroll
    for (int i = 0; i < 8; i++)
        asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(p.w[i].x), "=r"(p.w[i].y), "=r"(p.w[i].z), "=r"(p.w[i].w) : "l"(base + (size_t)i * Np), "l"(pol));
    p.s = __ldg((const uint2 *)(s + (size_t)(row0 / kGroup) * Np + n));
}

// v[c] += scale_c * sum over the piece's 64 rows of (q - 8) x (x: fp16, the piece's rows); with
// Stream, only a word's XOR (the loads' floor: no unpacking, results meaningless)
template <bool Stream>
__device__ __forceinline__ void piece_apply(const piece & p, const half * x, float (&v)[4]) {
    using namespace ggx_exl2_unpack;
    if constexpr (Stream) {
        uint32_t a = p.s.x ^ p.s.y;
#pragma unroll
        for (int i = 0; i < 8; i++) a ^= p.w[i].x ^ p.w[i].y ^ p.w[i].z ^ p.w[i].w;
        v[0] += __uint_as_float(a & 0x3fffffffu) * 1e-30f;
        return;
    }
    const half2 s01 = *(const half2 *)&p.s.x, s23 = *(const half2 *)&p.s.y;
    const float sc[4] = {__low2float(s01), __high2float(s01), __low2float(s23), __high2float(s23)};
#pragma unroll
    for (int half_ = 0; half_ < 2; half_++) {
        half2 acc[1][4];
        acc[0][0] = acc[0][1] = acc[0][2] = acc[0][3] = __float2half2_rn(0.0f);
        if (half_ == 0) piece_dot<4, 1, 0>(p.w, 32, x, 0, acc);
        else            piece_dot<4, 1, 4>(p.w, 32, x + 32, 0, acc);
#pragma unroll
        for (int c = 0; c < 4; c++) v[c] = fmaf(__low2float(acc[0][c]) + __high2float(acc[0][c]), sc[c], v[c]);
    }
}

// the power of two that brings a block's max |x| into [8, 16), as the engine's staging
__device__ __forceinline__ float block_scale(float amax, float * red) {
    for (int o = 16; o; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = amax;
    __syncthreads();
    float m = 0.0f;
    for (int w = 0; w < kWarps; w++) m = fmaxf(m, red[w]);
    return __int_as_float((127 + ggx_exl2_unpack::x_scale_exponent(m)) << 23);
}

// gate/up for the block's 128 columns over all of K; returns with h (fp16, scaled by *hs) in hx
// and the first two down pieces in A, B when Fused
template <bool Fused, bool Stream>
__device__ void gate_up(const layer & L, half * xh, float * part, half * hx, float * hs_out, piece & A, piece & B) {
    __shared__ float red[kWarps];
    const int j = blockIdx.x, w = threadIdx.x / 32, l = threadIdx.x % 32, n = j * kTW + 4 * l;
    const int r0 = 256 * w;
    // pieces q = 0..7: gate rows r0 + 64 (q / 2) for even q, up for odd
    auto load = [&](int q, piece & p) {
        piece_load(q % 2 ? L.uq : L.gq, q % 2 ? L.us : L.gs, kF, r0 + 64 * (q / 2), n, p);
    };
    stamp(L, st_entry);
    load(0, A);
    load(1, B);
    pdl_wait();
    pdl_next();
    stamp(L, st_waited);
    // RMS norm of the input, then x in fp16 scaled into [8, 16)
    float xv[8], ss = 0.0f, amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float4 f = *(const float4 *)(L.x + 4 * (threadIdx.x + i * kThreads));
        xv[4 * i] = f.x; xv[4 * i + 1] = f.y; xv[4 * i + 2] = f.z; xv[4 * i + 3] = f.w;
        ss += f.x * f.x + f.y * f.y + f.z * f.z + f.w * f.w;
    }
    for (int o = 16; o; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (l == 0) red[w] = ss;
    __syncthreads();
    float tot = 0.0f;
    for (int i = 0; i < kWarps; i++) tot += red[i];
    const float rinv = rsqrtf(tot / kH + 1e-5f);
#pragma unroll
    for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(xv[i] * rinv));
    const float xs = block_scale(amax, red) * rinv;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int k = 0; k < 4; k++) xh[4 * (threadIdx.x + i * kThreads) + k] = __float2half_rn(xv[4 * i + k] * xs);
    if (L.zero_next && threadIdx.x < kH / kBlocks + 1) {
        const int i = j * (kH / kBlocks + 1) + threadIdx.x;
        if (i < kH) L.zero_next[i] = 0.0f;
    }
    __syncthreads();
    stamp(L, st_staged);
    if (L.staged && threadIdx.x == 0) atomicAdd(L.staged, 1u);   // this block has read all of x
    float g[4] = {0, 0, 0, 0}, u[4] = {0, 0, 0, 0};
#pragma unroll 1
    for (int q = 0; q < 8; q += 2) {
        piece_apply<Stream>(A, xh + r0 + 64 * (q / 2), g);
        if (q + 2 < 8) load(q + 2, A);
        piece_apply<Stream>(B, xh + r0 + 64 * (q / 2), u);
        if (q + 3 < 8) load(q + 3, B);
    }
    if constexpr (Fused) {   // down's first pieces: rows 128 j (+ 64) for columns 256 w + 4 l
        piece_load(L.dq, L.ds, kH, kTW * j, 256 * w + 4 * l, A);
        piece_load(L.dq, L.ds, kH, kTW * j + 64, 256 * w + 4 * l, B);
    }
    // the 16 warps' sums of the 128 columns, then h = silu(g) u
    const float unscale = 1.0f / xs * rinv;   // x was scaled by xs = scale * rinv; the sums want x * rinv
#pragma unroll
    for (int c = 0; c < 4; c++) {
        part[(w * 2) * kTW + 4 * l + c] = g[c] * unscale;
        part[(w * 2 + 1) * kTW + 4 * l + c] = u[c] * unscale;
    }
    __syncthreads();
    stamp(L, st_gateup);
    float hv = 0.0f;
    if (threadIdx.x < kTW) {
        float gs = 0.0f, us = 0.0f;
        for (int i = 0; i < kWarps; i++) {
            gs += part[(2 * i) * kTW + threadIdx.x];
            us += part[(2 * i + 1) * kTW + threadIdx.x];
        }
        hv = gs / (1.0f + __expf(-gs)) * us;
        if (!Fused) L.h[j * kTW + threadIdx.x] = hv;
    }
    if constexpr (Fused) {
        const float hsc = block_scale(threadIdx.x < kTW ? fabsf(hv) : 0.0f, red);
        if (threadIdx.x < kTW) hx[threadIdx.x] = __float2half_rn(hv * hsc);
        *hs_out = hsc;
        __syncthreads();
        stamp(L, st_h);
    }
}

// down: the block's 128 rows (h in hx, scaled by hs) for columns 256 w .. + 255, added into y
template <bool Stream>
__device__ void down(const layer & L, const half * hx, float hs, piece & A, piece & B) {
    const int j = blockIdx.x, w = threadIdx.x / 32, l = threadIdx.x % 32;
    float v0[4] = {0, 0, 0, 0}, v1[4] = {0, 0, 0, 0};
    // pieces: (rows + 0, cols + 0) in A, (rows + 64, cols + 0) in B, then the same for cols + 128
    piece_apply<Stream>(A, hx, v0);
    piece_load(L.dq, L.ds, kH, kTW * j, 256 * w + 128 + 4 * l, A);
    piece_apply<Stream>(B, hx + 64, v0);
    piece_load(L.dq, L.ds, kH, kTW * j + 64, 256 * w + 128 + 4 * l, B);
    piece_apply<Stream>(A, hx, v1);
    piece_apply<Stream>(B, hx + 64, v1);
    const float inv = 1.0f / hs;
    if (L.staged) {   // in place: no block adds before every block has read x (~20 us earlier)
        if (threadIdx.x == 0) {
            unsigned n;
            do asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(n) : "l"(L.staged)); while (n < kBlocks);
        }
        __syncthreads();
    }
    red_add4(L.y + 256 * w + 4 * l, make_float4(v0[0] * inv, v0[1] * inv, v0[2] * inv, v0[3] * inv));
    red_add4(L.y + 256 * w + 128 + 4 * l, make_float4(v1[0] * inv, v1[1] * inv, v1[2] * inv, v1[3] * inv));
    stamp(L, st_end);
}

template <bool Stream>
__global__ void __launch_bounds__(kThreads, 1) k_fused(const __grid_constant__ layer L) {
    __shared__ __align__(16) half xh[kH];
    __shared__ __align__(16) float part[2 * kWarps * kTW];
    __shared__ __align__(16) half hx[kTW];
    __shared__ float hs;
    piece A, B;
    gate_up<true, Stream>(L, xh, part, hx, &hs, A, B);
    down<Stream>(L, hx, hs, A, B);
}

__global__ void __launch_bounds__(kThreads, 1) k_gu(const __grid_constant__ layer L) {
    __shared__ __align__(16) half xh[kH];
    __shared__ __align__(16) float part[2 * kWarps * kTW];
    piece A, B;
    gate_up<false, false>(L, xh, part, nullptr, nullptr, A, B);
}

__global__ void __launch_bounds__(kThreads, 1) k_down(const __grid_constant__ layer L) {
    __shared__ __align__(16) half hx[kTW];
    __shared__ float red[kWarps];
    __shared__ float hs;
    const int j = blockIdx.x, w = threadIdx.x / 32, l = threadIdx.x % 32;
    piece A, B;
    piece_load(L.dq, L.ds, kH, kTW * j, 256 * w + 4 * l, A);
    piece_load(L.dq, L.ds, kH, kTW * j + 64, 256 * w + 4 * l, B);
    pdl_wait();
    pdl_next();
    const float hv = threadIdx.x < kTW ? L.h[j * kTW + threadIdx.x] : 0.0f;
    const float hsc = block_scale(fabsf(hv), red);
    if (threadIdx.x < kTW) hx[threadIdx.x] = __float2half_rn(hv * hsc);
    if (threadIdx.x == 0) hs = hsc;
    __syncthreads();
    down<false>(L, hx, hs, A, B);
}

// scales in [0.01, 0.02)
__global__ void k_fill_scales(half * p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2246822519u ^ seed;
        x ^= x >> 15; x *= 0x2c1b3c6du; x ^= x >> 12;
        p[i] = __float2half_rn(0.01f + 0.01f * (x & 0xffff) / 65536.0f);
    }
}

// y = W x for one EXL2-like matrix on the host in double
static void host_gemv(const std::vector<uint32_t> & q, const std::vector<half> & s, int K, int N, const std::vector<double> & x,
                      std::vector<double> & y) {
    y.assign(N, 0.0);
    for (int r = 0; r < K / 8; r++)
        for (int n = 0; n < N; n++) {
            const uint32_t wd = q[(size_t)r * N + n];
            const double sc = __half2float(s[(size_t)(8 * r / kGroup) * N + n]);
            double acc = 0.0;
            for (int i = 0; i < 8; i++) acc += ((int)((wd >> (4 * i)) & 15) - 8) * x[8 * r + i];
            y[n] += acc * sc;
        }
}

int main(int argc, char ** argv) {
    const int L = argc > 1 ? atoi(argv[1]) : 16;
    if (L < 1 || L > 40) { fprintf(stderr, "ffn-fused: LAYERS must be 1..40 (got %s)\n", argv[1]); return 2; }
    const size_t gw = (size_t)kH / 8 * kF, dw = (size_t)kF / 8 * kH, gsn = (size_t)kH / kGroup * kF, dsn = (size_t)kF / kGroup * kH;
    const double bytes = (double)L * ((2 * gw + dw) * 4 + (2 * gsn + dsn) * 2);
    std::vector<uint32_t *> wq(L);
    std::vector<half *> ws(L);
    for (int i = 0; i < L; i++) {
        CK(cudaMalloc(&wq[i], (2 * gw + dw) * 4));
        CK(cudaMalloc(&ws[i], (2 * gsn + dsn) * 2));
        k_fill<<<1024, 256>>>(wq[i], 2 * gw + dw, 0x9e3779b9u * (i + 1));
        k_fill_scales<<<256, 256>>>(ws[i], 2 * gsn + dsn, 0x85ebca6bu * (i + 1));
    }
    float * buf;   // L + 1 activations of H floats
    float * hbuf;
    CK(cudaMalloc(&buf, (size_t)(L + 1) * kH * 4));
    CK(cudaMalloc(&hbuf, (size_t)L * kF * 4));
    std::vector<float> x0(kH);
    for (int i = 0; i < kH; i++) x0[i] = (float)std::sin(0.37 * i) * (1.0f + (i % 7) * 0.1f);
    CK(cudaMemcpy(buf, x0.data(), kH * 4, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    std::vector<layer> Ls(L);
    for (int i = 0; i < L; i++) {
        layer & y = Ls[i];
        y.gq = wq[i]; y.uq = wq[i] + gw; y.dq = wq[i] + 2 * gw;
        y.gs = ws[i]; y.us = ws[i] + gsn; y.ds = ws[i] + 2 * gsn;
        y.x = buf + (size_t)i * kH; y.y = buf + (size_t)(i + 1) * kH;
        y.zero_next = i + 1 < L ? buf + (size_t)(i + 2) * kH : nullptr;
        y.h = hbuf + (size_t)i * kF;
    }
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    auto launch = [&](void (*k)(layer), const layer & y) {   // one layer's kernel, PDL after the previous
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(kBlocks); cfg.blockDim = dim3(kThreads); cfg.stream = st;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at; cfg.numAttrs = 1;
        CK(cudaLaunchKernelEx(&cfg, k, y));
    };
    // host reference of layer 0
    std::vector<uint32_t> hq(2 * gw + dw);
    std::vector<half> hs(2 * gsn + dsn);
    CK(cudaMemcpy(hq.data(), wq[0], hq.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hs.data(), ws[0], hs.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<double> xd(kH), g, u, hd(kF), ref;
    double ss = 0.0;
    for (int i = 0; i < kH; i++) ss += (double)x0[i] * x0[i];
    const double rinv = 1.0 / std::sqrt(ss / kH + 1e-5);
    for (int i = 0; i < kH; i++) xd[i] = x0[i] * rinv;
    host_gemv(std::vector<uint32_t>(hq.begin(), hq.begin() + gw), std::vector<half>(hs.begin(), hs.begin() + gsn), kH, kF, xd, g);
    host_gemv(std::vector<uint32_t>(hq.begin() + gw, hq.begin() + 2 * gw), std::vector<half>(hs.begin() + gsn, hs.begin() + 2 * gsn), kH, kF, xd, u);
    for (int i = 0; i < kF; i++) hd[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    host_gemv(std::vector<uint32_t>(hq.begin() + 2 * gw, hq.end()), std::vector<half>(hs.begin() + 2 * gsn, hs.end()), kF, kH, hd, ref);
    double rmax = 0.0;
    for (double r : ref) rmax = std::max(rmax, std::fabs(r));

    // variants: 0 fused, 1 fused with the loads only (no unpacking: the access pattern's floor),
    // 2 split, 3 fused adding into the buffer it reads; then the fused one again with block
    // stamps for the breakdown
    struct variant { const char * name; int kind; bool check; };
    const variant vs[] = {{"fused (one kernel a layer)", 0, true}, {"fused, loads only", 1, false}, {"split (gate/up, then down)", 2, true},
                          {"fused, residual in place", 3, false}};
    // in place: every layer reads and adds into one buffer, after a count of the blocks that
    // have staged x (what the engine needs to add into the residual it reads)
    float * res;
    unsigned * counts;
    CK(cudaMalloc(&res, kH * 4));
    CK(cudaMalloc(&counts, L * 4));
    auto inplace = [&](int i) {
        layer y = Ls[i];
        y.x = y.y = res;
        y.zero_next = nullptr;
        y.staged = counts + i;
        return y;
    };
    printf("ffn-fused: %d layers of llama3-8b's FFN at 4 bits, %.1f MB a layer, %d blocks of %d threads\n", L, bytes / L / 1e6, kBlocks, kThreads);
    auto capture = [&](int kind) {
        cudaGraph_t gph; cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        CK(cudaMemsetAsync(buf + kH, 0, kH * 4, st));
        CK(cudaMemsetAsync(counts, 0, L * 4, st));
        for (int i = 0; i < L; i++) {
            if (kind == 0) launch(k_fused<false>, Ls[i]);
            else if (kind == 1) launch(k_fused<true>, Ls[i]);
            else if (kind == 3) launch(k_fused<false>, inplace(i));
            else { launch(k_gu, Ls[i]); launch(k_down, Ls[i]); }
        }
        CK(cudaStreamEndCapture(st, &gph));
        CK(cudaGraphInstantiate(&ge, gph, 0));
        CK(cudaGraphDestroy(gph));
        return ge;
    };
    auto replay = [&](cudaGraphExec_t ge, float & best, float & mean) {
        best = 1e9f;
        float sum = 0.0f;
        const int reps = 20;
        for (int r = 0; r < reps + 1; r++) {
            CK(cudaEventRecord(e0, st));
            CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r > 0) { best = std::min(best, ms); sum += ms; }
        }
        mean = sum / reps;
    };
    for (const variant & v : vs) {
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, v.kind == 1 ? (const void *)k_fused<true> : v.kind == 2 ? (const void *)k_gu : (const void *)k_fused<false>));
        cudaGraphExec_t ge = capture(v.kind);
        float best, mean;
        replay(ge, best, mean);
        printf("%-28s %3d registers: %.2f us a layer (best; mean %.2f), %.0f GB/s", v.name, fa.numRegs, best * 1000 / L, mean * 1000 / L,
               bytes / (best * 1e-3) / 1e9);
        if (v.check) {
            std::vector<float> y(kH);
            CK(cudaMemcpy(y.data(), buf + kH, kH * 4, cudaMemcpyDeviceToHost));
            double emax = 0.0;
            for (int i = 0; i < kH; i++) emax = std::max(emax, std::fabs(y[i] - ref[i]));
            // fp16 x and h (relative 2^-11) and fp16 sums of 16 products per half-piece: ~1e-3 of
            // the largest output is the expected error; 1e-2 flags a wrong result
            printf("; layer 0 max |err| %.3g of max |y| %.3g: %s", emax, rmax, emax <= 1e-2 * rmax ? "ok" : "WRONG");
        }
        printf("\n");
        CK(cudaGraphExecDestroy(ge));
    }
    {   // the in-place form on one layer: x0 + layer 0's output
        CK(cudaMemcpy(res, x0.data(), kH * 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(counts, 0, 4));
        launch(k_fused<false>, inplace(0));
        CK(cudaStreamSynchronize(st));
        std::vector<float> y(kH);
        CK(cudaMemcpy(y.data(), res, kH * 4, cudaMemcpyDeviceToHost));
        double emax = 0.0;
        for (int i = 0; i < kH; i++) emax = std::max(emax, std::fabs(y[i] - (x0[i] + ref[i])));
        printf("fused, residual in place, one layer: max |err| %.3g against x + the host's output: %s\n", emax,
               emax <= 1e-2 * rmax ? "ok" : "WRONG");
    }
    // where a fused layer's time goes: per layer, each moment's median over the blocks, from the
    // layer's first block entry (layers 1 .. L - 1: the first has no kernel before it)
    unsigned long long * stamps;
    const size_t per = (size_t)kBlocks * k_stamps;
    CK(cudaMalloc(&stamps, L * per * 8));
    for (int i = 0; i < L; i++) Ls[i].stamps = stamps + i * per;
    cudaGraphExec_t ge = capture(0);
    float best, mean;
    replay(ge, best, mean);
    std::vector<unsigned long long> hst(L * per);
    CK(cudaMemcpy(hst.data(), stamps, hst.size() * 8, cudaMemcpyDeviceToHost));
    const char * names[k_stamps] = {"entry", "waited", "x staged", "gate/up summed", "h staged", "end"};
    std::vector<double> med(k_stamps, 0.0), last_end(1, 0.0);
    double lag = 0.0, span = 0.0, first_end = 0.0;
    for (int i = 1; i < L; i++) {
        const unsigned long long * b = hst.data() + i * per, * pb = hst.data() + (i - 1) * per;
        unsigned long long t0 = ~0ull, tend = 0, pend = 0, fend = ~0ull;
        for (int j = 0; j < kBlocks; j++) {
            t0 = std::min(t0, b[j * k_stamps + st_entry]);
            tend = std::max(tend, b[j * k_stamps + st_end]);
            fend = std::min(fend, b[j * k_stamps + st_end]);
            pend = std::max(pend, pb[j * k_stamps + st_end]);
        }
        for (int k = 0; k < k_stamps; k++) {
            std::vector<double> d;
            for (int j = 0; j < kBlocks; j++) d.push_back((double)(b[j * k_stamps + k] - t0) / 1000.0);
            std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
            med[k] += d[d.size() / 2] / (L - 1);
        }
        lag += ((double)tend - (double)pend) / 1000.0 / (L - 1);    // previous layer's last end to this one's
        span += (double)(tend - t0) / 1000.0 / (L - 1);
        first_end += (double)(fend - t0) / 1000.0 / (L - 1);
    }
    printf("fused, stamped: %.2f us a layer (best); per layer, medians over the blocks from its first block's entry:\n", best * 1000 / L);
    for (int k = 0; k < k_stamps; k++) printf("  %-16s %7.2f us\n", names[k], med[k]);
    printf("  first block end  %7.2f us, last %7.2f; previous layer's last end to this one's %.2f us\n", first_end, span, lag);
    CK(cudaGraphExecDestroy(ge));
    return 0;
}
