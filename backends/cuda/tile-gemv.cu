#include "tile-gemv.h"

#include "common.cuh"
#include "exl2-unpack.cuh"
#include "mma.cuh"

#include <cstddef>

namespace {

// Shared memory: [x staged for V = 1, 4, 16: K halves each, then 256 zero halves (what the lanes
// outside a chunk's column read, 16 steps of them)][per step (S, T4, T16)][per chunk (S, T4, T16,
// first scale of the group: group x Np, as int bits)].
constexpr int k_zero_halves = 256;
struct tile_smem {
    size_t xs, step_sums, chunk_sums, total;
};
__host__ __device__ inline int tile_x_stride(int K) { return K + k_zero_halves; }
__host__ __device__ inline tile_smem tile_smem_of(int K, int n_chunks) {
    tile_smem L;
    L.xs = 0;
    L.step_sums = ((size_t)3 * tile_x_stride(K) * 2 + 15) & ~(size_t)15;
    L.chunk_sums = L.step_sums + (size_t)(K / 16) * 16;
    L.total = L.chunk_sums + (size_t)n_chunks * 16;
    return L;
}

#if !defined(GGX_USE_HIP)   // (the HIP build has no mma.sync: ggx_cuda_tile_gemv returns cudaErrorNotSupported)

constexpr int NT = GGX_TILE_WARPS * GGX_CUDA_WARP;

// A plane's factors as the layout defines them (ggx_tile_factor): V = f(r2) / f(r0) divides each
// step's second k-half of x (variant 0, 1, 2 for V = 1, 4, 16), H = f(r1) / f(r0) the tile's
// rows 8-15.
__host__ __device__ constexpr int variant_of(int plane_bits) {
    return ggx_tile_factor(plane_bits, 2) / ggx_tile_factor(plane_bits, 0) == 16 ? 2
         : ggx_tile_factor(plane_bits, 2) / ggx_tile_factor(plane_bits, 0) == 4  ? 1
                                                                                 : 0;
}
__host__ __device__ constexpr float h_of(int plane_bits) { return (float)(ggx_tile_factor(plane_bits, 1) / ggx_tile_factor(plane_bits, 0)); }
__device__ __forceinline__ float variant_sum(const float4 & cs, int v) { return v == 0 ? cs.x : v == 1 ? cs.y : cs.z; }

// A unit's descriptor as loaded (one uint4, ggx_tile_unit_dev's fields), read field by field
// where used: unpacked into 16- and 8-bit members it took byte permutes and spills per unit.
struct unit_desc {
    uint4 v;
    __device__ uint32_t offset() const { return v.x; }
    __device__ int tile() const { return (int)(v.y & 0xffffu); }
    __device__ int step0() const { return (int)(v.y >> 16); }
    __device__ int chunk0() const { return (int)(v.z & 0xffffu); }
    __device__ uint32_t chunk_starts() const { return v.z >> 16; }
    __device__ int n_steps() const { return (int)(v.w & 0xffu); }
    __device__ int bits() const { return (int)(v.w >> 8 & 0xffu); }
    __device__ int n_uint4() const { return (int)(v.w >> 16 & 0xffu); }
};
static_assert(offsetof(ggx_tile_unit_dev, tile) == 4 && offsetof(ggx_tile_unit_dev, step0) == 6 && offsetof(ggx_tile_unit_dev, chunk0) == 8 &&
                  offsetof(ggx_tile_unit_dev, chunk_starts) == 10 && offsetof(ggx_tile_unit_dev, n_steps) == 12 &&
                  offsetof(ggx_tile_unit_dev, bits) == 13 && offsetof(ggx_tile_unit_dev, n_uint4) == 14,
              "unit_desc reads ggx_tile_unit_dev's fields at these byte offsets");

// The unit's last chunk (chunk_starts bit 0 is always set).
__device__ __forceinline__ int unit_last_chunk(const unit_desc & d) {
    return d.chunk0() + __popc(d.chunk_starts() & ((1u << d.n_steps()) - 1)) - 1;
}

// Lane (g, t)'s group scales for the chunks base + 2t + e (e = 0, 1; at most `last`: a lane past
// the unit's chunks reads the last one, unused) of columns g and g + 8, as fp16 pairs.
__device__ __forceinline__ void unit_scales(const unit_desc & d, int base, int last, const float4 * csum, const uint16_t * scales, int lane,
                                            uint32_t (&out)[2]) {
    const uint16_t * col = scales + 16 * d.tile() + lane / 4;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const uint16_t * s = col + __float_as_int(csum[min(base + 2 * (lane % 4) + e, last)].w);   // the chunk's group row
        out[e] = (uint32_t)ggx_load_ro(s) | (uint32_t)ggx_load_ro(s + 8) << 16;
    }
}

// ggx_tile_reg on the device: one LOP3 (and the recipe's shift, shared by two registers), or at 8
// bits one byte permute with 0x64.
template <int PB>
__device__ __forceinline__ uint32_t tile_reg(const uint32_t * pw, int i, int r) {
    const ggx_tile_src src = ggx_tile_reg_src(PB, i, r);
    if (PB == 8) return __byte_perm(pw[src.word], 0x64u, src.shift ? 0x4342 : 0x4140);
    return lop3_or_bias(pw[src.word] >> src.shift, src.mask);
}

// One unit of width BITS: its steps through the tensor core, plane by plane. The unit's chunks
// take turns at B's 8 columns: the steps of its local chunk j feed x only through the lanes of
// column j (g == j % 8; the others read zeros), so D column j collects chunk j's sums and one
// epilogue per 8 chunks (per unit, unless its chunks are single 16-row steps) turns them into the
// columns' partial sums. Lane (g, t) holds columns g and g + 8 of the tile for the chunks 2t and
// 2t + 1: every lane's accumulators are used, and the reduction over t waits for the flush. (One
// epilogue per chunk, with lanes t == 0 alone useful, cost more than the steps at the 32-row
// groups of most EXL2 layers: run 93.)
//
// L > 0: a unit of 16 steps in chunks of L steps (the common case: groups of 16 L rows), whose
// chunk changes are known at compile time; L == 0: any unit, chunk_starts read at run time.
// A lane's B for step i is 8 bytes at base + 16 i halves, base its x (real) or the zero halves
// (which hold 16 steps), chosen once per chunk.
template <int BITS, int L>
__device__ __forceinline__ void run_unit(const unit_desc & d, const uint4 (&w)[8], const uint32_t (&s0)[2], const half * xs, int K,
                                         const float4 * csum, const uint16_t * scales, int lane, float & acc_lo, float & acc_hi) {
    // the width's planes (a one-plane width has PB1 = PB0 and never reads plane 1)
    constexpr int NPL = ggx_tile_n_planes(BITS);
    constexpr int PB0 = ggx_tile_plane_bits(BITS, 0), PB1 = ggx_tile_plane_bits(BITS, NPL - 1);
    constexpr int SH1 = ggx_tile_plane_shift(BITS, NPL - 1);
    constexpr int P1 = ggx_tile_plane_base(BITS, 1);
    constexpr int Z = 1 << (BITS - 1);
    const int g = lane / 4, t = lane % 4;
    uint32_t wv[32];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        wv[4 * j] = w[j].x;
        wv[4 * j + 1] = w[j].y;
        wv[4 * j + 2] = w[j].z;
        wv[4 * j + 3] = w[j].w;
    }
    const int XV = tile_x_stride(K);
    const half * real0 = xs + variant_of(PB0) * XV + 16 * d.step0() + 4 * t;
    const half * real1 = xs + variant_of(PB1) * XV + 16 * d.step0() + 4 * t;
    const half * zero0 = xs + variant_of(PB0) * XV + K;
    const half * zero1 = xs + variant_of(PB1) * XV + K;
    const half * b0 = g == 0 ? real0 : zero0;
    const half * b1 = g == 0 ? real1 : zero1;
    float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    int base = d.chunk0();                  // the unit's first chunk of the batch in D's columns
    int n_batch = L > 0 ? 16 / L : 1;     // chunks of the batch (so far, for L == 0)
    const int last = unit_last_chunk(d);
    // this lane's chunks of a batch, base + 2t + e: their group scales of columns g and g + 8
    // (fp16 pairs); the first batch's came with the unit's words (unit_scales), a later one's
    // (units of 16-row chunks only) load when it starts
    uint32_t sr[2] = {s0[0], s0[1]};
    auto load_scales = [&]() { unit_scales(d, base, last, csum, scales, lane, sr); };
    auto epilogue = [&]() {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            if (2 * t + e < n_batch) {
                const float4 cs = csum[base + 2 * t + e];
                const float T0 = variant_sum(cs, variant_of(PB0));
                float lo = c[0][e] - 1024.0f * T0, hi = (c[0][2 + e] - 1024.0f * T0) * (1.0f / h_of(PB0));
                if (NPL > 1) {
                    const float T1 = variant_sum(cs, variant_of(PB1));
                    lo += (c[1][e] - 1024.0f * T1) * (float)(1 << SH1);
                    hi += (c[1][2 + e] - 1024.0f * T1) * ((float)(1 << SH1) / h_of(PB1));
                }
                const float2 sc = __half22float2(*(const half2 *)&sr[e]);
                acc_lo += sc.x * (lo - (float)Z * cs.x);
                acc_hi += sc.y * (hi - (float)Z * cs.x);
            }
        }
#pragma unroll
        for (int p = 0; p < 2; p++)
#pragma unroll
            for (int q = 0; q < 4; q++) c[p][q] = 0.0f;
    };
#pragma unroll
    for (int i = 0; i < 16; i++) {
        if (L > 0) {
            constexpr int LS = L > 0 ? L : 1;   // (the L == 0 instantiation never comes here)
            if (i > 0 && i % LS == 0) {   // chunk i / L (< 8: L >= 2)
                b0 = g == i / LS ? real0 : zero0;
                b1 = g == i / LS ? real1 : zero1;
            }
        } else {
            if (i >= d.n_steps()) break;
            if (i > 0 && (d.chunk_starts() >> i & 1)) {   // uniform: the unit is the warp's
                if (i >= 8 && n_batch == 8) {   // D's columns are full (only units of 16-row chunks get here, never before step 8)
                    epilogue();
                    base += 8;
                    n_batch = 0;
                    load_scales();
                }
                // (the zero lanes' base stays 16 steps inside the zero halves: i - (unit start) < 16)
                b0 = g == n_batch ? real0 : zero0;
                b1 = g == n_batch ? real1 : zero1;
                n_batch++;
            }
        }
        {
            uint32_t a[4];
#pragma unroll
            for (int r = 0; r < 4; r++) a[r] = tile_reg<PB0>(wv, i, r);
            const uint2 b = *(const uint2 *)(b0 + 16 * i);
            mma16816(c[0], a, b.x, b.y);
        }
        if (NPL > 1) {
            uint32_t a[4];
#pragma unroll
            for (int r = 0; r < 4; r++) a[r] = tile_reg<PB1>(wv + P1, i, r);
            const uint2 b = *(const uint2 *)(b1 + 16 * i);
            mma16816(c[1], a, b.x, b.y);
        }
    }
    epilogue();
}

// The unit's width and, for a full unit of regular chunks, their length: one instantiation each.
template <int BITS>
__device__ __forceinline__ void run_unit_any(const unit_desc & d, const uint4 (&w)[8], const uint32_t (&s0)[2], const half * xs, int K,
                                             const float4 * csum, const uint16_t * scales, int lane, float & acc_lo, float & acc_hi) {
    const int cs = d.n_steps() == 16 ? d.chunk_starts() : 0;
    if (cs == 0x5555) run_unit<BITS, 2>(d, w, s0, xs, K, csum, scales, lane, acc_lo, acc_hi);
    else if (cs == 0x1111) run_unit<BITS, 4>(d, w, s0, xs, K, csum, scales, lane, acc_lo, acc_hi);
    else if (cs == 0x0101) run_unit<BITS, 8>(d, w, s0, xs, K, csum, scales, lane, acc_lo, acc_hi);
    else run_unit<BITS, 0>(d, w, s0, xs, K, csum, scales, lane, acc_lo, acc_hi);
}

__device__ __forceinline__ unit_desc load_desc(const ggx_tile_unit_dev * p) { return {ggx_load_ro((const uint4 *)p)}; }

// A unit's words of this lane (uint4 j at offset + j, 512 bytes apart); past n_uint4 the
// registers are left as they are (no recipe of the unit reads them). A switch into a chain of
// plain loads from one base: eight predicated loads took ~40 instructions (run 96's profile).
__device__ __forceinline__ void load_words(const uint4 * words, const unit_desc & d, int lane, uint4 (&w)[8]) {
    const uint4 * p = words + (size_t)d.offset() * 32 + lane;
    switch (d.n_uint4()) {
        default: w[7] = ggx_load_ro(p + 32 * 7); [[fallthrough]];
        case 7: w[6] = ggx_load_ro(p + 32 * 6); [[fallthrough]];
        case 6: w[5] = ggx_load_ro(p + 32 * 5); [[fallthrough]];
        case 5: w[4] = ggx_load_ro(p + 32 * 4); [[fallthrough]];
        case 4: w[3] = ggx_load_ro(p + 32 * 3); [[fallthrough]];
        case 3: w[2] = ggx_load_ro(p + 32 * 2); [[fallthrough]];
        case 2: w[1] = ggx_load_ro(p + 32 * 1); [[fallthrough]];
        case 1: w[0] = ggx_load_ro(p);
    }
}

__global__ void __launch_bounds__(NT, 1) k_tile_gemv(const ggx_tile_matrix m, const float * __restrict__ xq, float * y) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float red[GGX_CUDA_WARP];
    const tile_smem L = tile_smem_of(m.K, m.n_chunks);
    half * xs = (half *)(smem + L.xs);
    float4 * step_sums = (float4 *)(smem + L.step_sums);
    float4 * csum = (float4 *)(smem + L.chunk_sums);
    const int tid = threadIdx.x, lane = tid % GGX_CUDA_WARP, warp = tid / GGX_CUDA_WARP;
    const int K = m.K;

    // x: the power of two that takes max |x| into [8, 16), then each step's fragment order per
    // variant, and the step sums of the fp16 values (reduced over the 4 lanes of a step)
    float am = 0.0f;
    for (int i = tid; i < K; i += NT) am = fmaxf(am, fabsf(xq[i]));
    am = ggx_block_max(am, red);
    const int e = ggx_exl2_unpack::x_scale_exponent(am);
    const float xscale = ldexpf(1.0f, e), xunscale = ldexpf(1.0f, -e);
    // i: (step, lane t) pairs, K / 4 of them; the bound is rounded up to whole warps so that every
    // lane of a warp takes part in the shuffles below
    for (int i = tid; i < ((K / 4 + 31) & ~31); i += NT) {
        float s1 = 0.0f, s4 = 0.0f, s16 = 0.0f;
        if (i < K / 4) {
            const int s = i / 4, t = i % 4, k0 = 16 * s + 2 * t;
            const float v[4] = {xq[k0] * xscale, xq[k0 + 1] * xscale, xq[k0 + 8] * xscale, xq[k0 + 9] * xscale};
#pragma unroll
            for (int vi = 0; vi < 3; vi++) {
                const float inv = vi == 0 ? 1.0f : vi == 1 ? 0.25f : 0.0625f;
                const half h0 = __float2half_rn(v[0]), h1 = __float2half_rn(v[1]), h2 = __float2half_rn(v[2] * inv),
                           h3 = __float2half_rn(v[3] * inv);
                half * dst = xs + (size_t)vi * tile_x_stride(K) + (size_t)i * 4;
                dst[0] = h0;
                dst[1] = h1;
                dst[2] = h2;
                dst[3] = h3;
                const float sum = __half2float(h0) + __half2float(h1) + __half2float(h2) + __half2float(h3);
                if (vi == 0) s1 = sum;
                else if (vi == 1) s4 = sum;
                else s16 = sum;
            }
        }
        // the 4 lanes of a step are 4 consecutive threads of one warp
        s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
        s4 += __shfl_xor_sync(0xffffffffu, s4, 1);
        s16 += __shfl_xor_sync(0xffffffffu, s16, 1);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        s4 += __shfl_xor_sync(0xffffffffu, s4, 2);
        s16 += __shfl_xor_sync(0xffffffffu, s16, 2);
        if (i < K / 4 && i % 4 == 0) step_sums[i / 4] = make_float4(s1, s4, s16, 0.0f);
    }
    for (int i = tid; i < 3 * k_zero_halves; i += NT) xs[(size_t)(i / k_zero_halves) * tile_x_stride(K) + K + i % k_zero_halves] = __float2half_rn(0.0f);
    __syncthreads();
    for (int c = tid; c < m.n_chunks; c += NT) {
        const int4 ch = ggx_load_ro(m.chunks + c);
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int s = ch.x; s < ch.x + ch.y; s++) {
            const float4 v = step_sums[s];
            sum.x += v.x;
            sum.y += v.y;
            sum.z += v.z;
        }
        sum.w = __int_as_float(ch.z * m.Np);   // the chunk's group's row of scales
        csum[c] = sum;
    }
    __syncthreads();

    const int gw = blockIdx.x * GGX_TILE_WARPS + warp;
    const int u0 = ggx_load_ro(m.deal + gw), u1 = ggx_load_ro(m.deal + gw + 1);
    if (u0 >= u1) return;
    const int g = lane / 4, t = lane % 4;
    float acc_lo = 0.0f, acc_hi = 0.0f;
    int tile = -1;
    auto flush = [&]() {
        // lanes t hold the same columns for different chunks (run_unit)
        acc_lo += __shfl_xor_sync(0xffffffffu, acc_lo, 1);
        acc_hi += __shfl_xor_sync(0xffffffffu, acc_hi, 1);
        acc_lo += __shfl_xor_sync(0xffffffffu, acc_lo, 2);
        acc_hi += __shfl_xor_sync(0xffffffffu, acc_hi, 2);
        if (tile >= 0 && t == 0) {
            atomicAdd(y + 16 * tile + g, acc_lo * xunscale);
            atomicAdd(y + 16 * tile + g + 8, acc_hi * xunscale);
        }
        acc_lo = acc_hi = 0.0f;
    };
    // Two word buffers that trade places unit by unit (the loop body twice), so that no unit's
    // words are copied between registers: while a unit multiplies, the next one's words and the
    // descriptor after that load.
    auto step = [&](int u, const unit_desc & d, const uint4 (&w)[8], const uint32_t (&sw)[2], const unit_desc & d_next, uint4 (&w_next)[8],
                    uint32_t (&s_next)[2]) {
        if (u + 1 < u1) {
            load_words(m.words, d_next, lane, w_next);
            unit_scales(d_next, d_next.chunk0(), unit_last_chunk(d_next), csum, m.scales, lane, s_next);
        }
        const unit_desc d_after = u + 2 < u1 ? load_desc(m.units + u + 2) : d_next;
        if ((int)d.tile() != tile) {   // uniform
            flush();
            tile = d.tile();
        }
        switch (d.bits()) {
            case 8: run_unit_any<8>(d, w, sw, xs, K, csum, m.scales, lane, acc_lo, acc_hi); break;
            case 6: run_unit_any<6>(d, w, sw, xs, K, csum, m.scales, lane, acc_lo, acc_hi); break;
            case 5: run_unit_any<5>(d, w, sw, xs, K, csum, m.scales, lane, acc_lo, acc_hi); break;
            case 4: run_unit_any<4>(d, w, sw, xs, K, csum, m.scales, lane, acc_lo, acc_hi); break;
            case 3: run_unit_any<3>(d, w, sw, xs, K, csum, m.scales, lane, acc_lo, acc_hi); break;
            default: run_unit_any<2>(d, w, sw, xs, K, csum, m.scales, lane, acc_lo, acc_hi); break;
        }
        return d_after;
    };
    unit_desc da = load_desc(m.units + u0), db = u0 + 1 < u1 ? load_desc(m.units + u0 + 1) : da;
    uint4 wa[8], wb[8];
    uint32_t sa[2], sb[2];
    load_words(m.words, da, lane, wa);
    unit_scales(da, da.chunk0(), unit_last_chunk(da), csum, m.scales, lane, sa);
    for (int u = u0; u < u1; u += 2) {
        const unit_desc da2 = step(u, da, wa, sa, db, wb, sb);   // unit u + 2's descriptor
        if (u + 1 >= u1) break;
        const unit_desc db2 = step(u + 1, db, wb, sb, da2, wa, sa);
        da = da2;
        db = db2;
    }
    flush();
}

#endif  // !GGX_USE_HIP

// One thread per word of the layout: its uint4 index, lane and component, its unit (binary search
// over the units' offsets, which ascend), then the word through ggx_tile_word.
__global__ void k_tile_gather(const uint32_t * __restrict__ q_weight, int Np, const int4 * __restrict__ step_info,
                              const ggx_tile_unit_dev * __restrict__ units, int n_units, size_t n_words, uint32_t * words) {
    const size_t w = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= n_words) return;
    const size_t q = w / 128;
    const int lane = (int)(w / 4 % 32), comp = (int)(w % 4);
    int lo = 0, hi = n_units - 1;   // the last unit whose offset <= q
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (units[mid].offset <= q) lo = mid;
        else hi = mid - 1;
    }
    const ggx_tile_unit_dev u = units[lo];
    const int j = (int)(q - u.offset) * 4 + comp;
    auto code_of = [&](int i, int r, int e) {
        const int4 si = step_info[u.step0 + i];
        const int k = 16 * (u.step0 + i) + ggx_tile_row(lane, r, e), n = 16 * u.tile + ggx_tile_col(lane, r);
        return ggx_exl2_code(q_weight, Np, si.x, si.y, k - si.z, n);
    };
    words[w] = ggx_tile_word(u.bits, u.n_steps, j, code_of);
}

}  // namespace

std::vector<int4> ggx_tile_step_info(const ggx::TileLayout & L) {
    std::vector<int4> r;
    r.reserve(L.step_group.size());
    for (int g : L.step_group) r.push_back(make_int4(L.groups[g].bits, L.groups[g].qrow0, L.groups[g].row0, 0));
    return r;
}

cudaError_t ggx_cuda_tile_gather(const uint32_t * q_weight, int Np, const int4 * step_info, const ggx_tile_unit_dev * units, int n_units,
                                 size_t n_uint4, uint4 * words, cudaStream_t stream) {
    const size_t n_words = n_uint4 * 32 * 4;
    if (n_words == 0 || n_units < 1) return cudaSuccess;
    k_tile_gather<<<(unsigned)((n_words + 255) / 256), 256, 0, stream>>>(q_weight, Np, step_info, units, n_units, n_words, (uint32_t *)words);
    return cudaGetLastError();
}

bool ggx_tile_units(const ggx::TileLayout & L, std::vector<ggx_tile_unit_dev> * units, std::vector<int4> * chunks) {
    if (L.n_tiles > 65535 || L.K / 16 > 65535 || L.chunks.size() > 65535) return false;
    units->clear();
    for (const ggx::TileUnit & u : L.units)
        units->push_back({u.offset, (uint16_t)u.tile, (uint16_t)u.step0, (uint16_t)u.chunk0, u.chunk_starts, u.n_steps, u.bits, u.n_uint4, 0});
    chunks->clear();
    for (const ggx::TileChunk & c : L.chunks) chunks->push_back(make_int4(c.step0, c.n_steps, c.group, 0));
    return true;
}

cudaError_t ggx_cuda_tile_upload(const ggx::TileLayout & L, int grid, ggx_tile_matrix * m) {
    std::vector<ggx_tile_unit_dev> units;
    std::vector<int4> chunks;
    *m = {};
    if (grid < 1 || !ggx_tile_units(L, &units, &chunks)) return cudaErrorInvalidValue;
    const std::vector<int> deal = ggx::tile_layout_deal(L, grid * GGX_TILE_WARPS);
    cudaError_t err = cudaSuccess;
    auto copy = [&](const void * src, size_t bytes, const void ** dst) {
        void * p = nullptr;
        if (err == cudaSuccess) err = cudaMalloc(&p, bytes > 0 ? bytes : 1);
        if (err == cudaSuccess) err = cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice);
        *dst = p;   // (freed with the rest on failure)
    };
    copy(L.words.data(), L.words.size() * sizeof(uint32_t), (const void **)&m->words);
    copy(units.data(), units.size() * sizeof(units[0]), (const void **)&m->units);
    copy(chunks.data(), chunks.size() * sizeof(int4), (const void **)&m->chunks);
    copy(L.scales.data(), L.scales.size() * sizeof(uint16_t), (const void **)&m->scales);
    copy(deal.data(), deal.size() * sizeof(int), (const void **)&m->deal);
    m->K = L.K;
    m->Np = L.Np;
    m->n_chunks = (int)chunks.size();
    if (err != cudaSuccess) {
        ggx_cuda_tile_free(*m);
        *m = {};
    }
    return err;
}

void ggx_cuda_tile_free(const ggx_tile_matrix & m) {
    for (const void * p : {(const void *)m.words, (const void *)m.units, (const void *)m.chunks, (const void *)m.scales, (const void *)m.deal})
        if (p) (void)cudaFree((void *)p);
}

size_t ggx_tile_gemv_smem(int K, int n_chunks) { return tile_smem_of(K, n_chunks).total; }

cudaError_t ggx_cuda_tile_gemv(const ggx_tile_matrix & m, const float * xq, float * y, int grid, cudaStream_t stream) {
#if defined(GGX_USE_HIP)
    (void)m;
    (void)xq;
    (void)y;
    (void)grid;
    (void)stream;
    return cudaErrorNotSupported;   // mma.sync is NVIDIA's
#else
    const size_t smem = ggx_tile_gemv_smem(m.K, m.n_chunks);
    cudaError_t err = cudaFuncSetAttribute(k_tile_gemv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return err;
    k_tile_gemv<<<grid, NT, smem, stream>>>(m, xq, y);
    return cudaGetLastError();
#endif
}
