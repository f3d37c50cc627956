// The warp loop of the tensor-core tile GEMV (ggx/ggx-tile-layout.h's layout), shared by the
// stand-alone launch (tile-gemv.cu) and the tile step (tile-step.cu): x staged in fragment order
// with its step and chunk sums, then each warp's dealt units (tile-major, contiguous), the next
// unit's words and scales loading while one multiplies. Where a tile's sums go is the caller's
// (a Sink). CUDA only (mma.sync, sm_80+).
#pragma once

#include "async-copy.cuh"
#include "common.cuh"
#include "mma.cuh"
#include "tile-gemv.h"

#include <cstddef>

namespace ggx_tile_loop {

// x as staged per variant: K halves in fragment order, then the zero halves that the lanes
// outside a chunk's column read (35 steps of them: a unit's most, 32, from an offset of up to 3
// steps that keeps them off the real lanes' banks: run_unit).
constexpr int k_zero_halves = 576;
// uint4 per lane of one unit's words (ggx-tile-layout.h): one word buffer.
constexpr int UQ = GGX_TILE_UNIT_UINT4;
__host__ __device__ inline int x_stride(int K) { return K + k_zero_halves; }
// Halves of the three variants of one x (V = 1, 4, 16).
__host__ __device__ inline size_t x_halves(int K) { return (size_t)3 * x_stride(K); }

#if !defined(GGX_USE_HIP)

// A plane's factors as the layout defines them (ggx_tile_factor): its x variant
// (ggx_tile_variant), and H = f(r1) / f(r0), the factor of the tile's rows 8-15.
__host__ __device__ constexpr int variant_of(int plane_bits) { return ggx_tile_variant(plane_bits); }
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
    __device__ int n_steps() const { return (int)(v.z >> 16 & 0xffu); }
    __device__ int bits() const { return (int)(v.z >> 24 & 0xfu); }
    __device__ int n_uint4() const { return (int)(v.z >> 28); }
    __device__ uint32_t chunk_starts() const { return v.w; }
};
static_assert(offsetof(ggx_tile_unit_dev, tile) == 4 && offsetof(ggx_tile_unit_dev, step0) == 6 && offsetof(ggx_tile_unit_dev, chunk0) == 8 &&
                  offsetof(ggx_tile_unit_dev, n_steps) == 10 && offsetof(ggx_tile_unit_dev, bits_n_uint4) == 11 &&
                  offsetof(ggx_tile_unit_dev, chunk_starts) == 12,
              "unit_desc reads ggx_tile_unit_dev's fields at these byte offsets");

// The unit's last chunk (chunk_starts bit 0 is always set; bits past n_steps are clear).
__device__ __forceinline__ int unit_last_chunk(const unit_desc & d) { return d.chunk0() + __popc(d.chunk_starts()) - 1; }

// Lane (g, t)'s group scales for the chunks base + 2t + e (e = 0, 1; at most `last`: a lane past
// the unit's chunks reads the last one, unused) of columns g and g + 8, as fp16 pairs: one 32-bit
// load each (ggx::tile_scale_index's order), first used in the unit's epilogue.
__device__ __forceinline__ void unit_scales(const unit_desc & d, int base, int last, const float4 * csum, const uint16_t * scales, int lane,
                                            uint32_t (&out)[2]) {
    const uint16_t * col = scales + 16 * d.tile() + 2 * (lane / 4);
#pragma unroll
    for (int e = 0; e < 2; e++)
        out[e] = ggx_load_ro((const uint32_t *)(col + __float_as_int(csum[min(base + 2 * (lane % 4) + e, last)].w)));   // the chunk's group row
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
// L > 0: a full unit (regular_steps: the most whole chunks of L steps within
// ggx_tile_max_steps(BITS)) in chunks of L steps (the common case:
// groups of 16 L rows), whose chunk changes are known at compile time; L == 0: any unit,
// chunk_starts read at run time. A lane's B for step i is 8 bytes at base + 16 i halves, base its
// x (real) or the zero halves (which hold 32 steps), chosen once per chunk. A unit of more than 8
// chunks runs its epilogue after every 8 (a batch); the first batch's scales came with the unit's
// words (s0; the second batch's kept with them too pushed the kernel into spills).
template <int BITS, int L>
__device__ __forceinline__ void run_unit(const unit_desc & d, const uint4 (&w)[UQ], const uint32_t (&s0)[2], const half * xs, int K,
                                         const float4 * csum, const uint16_t * scales, int lane, float & acc_lo, float & acc_hi) {
    // the width's planes (a one-plane width has PB1 = PB0 and never reads plane 1)
    constexpr int NPL = ggx_tile_n_planes(BITS);
    constexpr int PB0 = ggx_tile_plane_bits(BITS, 0), PB1 = ggx_tile_plane_bits(BITS, NPL - 1);
    constexpr int SH1 = ggx_tile_plane_shift(BITS, NPL - 1);
    constexpr int P1 = ggx_tile_plane_base(BITS, 1);
    constexpr int Z = 1 << (BITS - 1);
    constexpr int MS = ggx_tile_max_steps(BITS);
    constexpr int LS = L > 0 ? L : 1;                    // (L == 0 never uses it)
    constexpr int NC = L > 0 ? MS / LS : 0;              // chunks of a full unit of form L
    constexpr int NS = L > 0 ? NC * LS : MS;             // its steps (the most whole chunks that fit)
    const int g = lane / 4, t = lane % 4;
    uint32_t wv[4 * UQ];
#pragma unroll
    for (int j = 0; j < UQ; j++) {
        wv[4 * j] = w[j].x;
        wv[4 * j + 1] = w[j].y;
        wv[4 * j + 2] = w[j].z;
        wv[4 * j + 3] = w[j].w;
    }
    const int XV = x_stride(K);
    const half * real0 = xs + variant_of(PB0) * XV + 16 * d.step0() + 4 * t;
    const half * real1 = xs + variant_of(PB1) * XV + 16 * d.step0() + 4 * t;
    // The zero lanes' 8 bytes land 32 bytes past the real lanes' 32 (modulo the 128 bytes of the
    // banks), not on them: at the zero halves' start they shared the real lanes' banks whenever the
    // unit's first step was a multiple of 4, i.e. always, and every B load took three wavefronts
    // instead of two (run 107's profile: 32% of the step's shared wavefronts excessive).
    const int zoff = 16 * ((d.step0() + 1 - K / 16) & 3);
    const half * zero0 = xs + variant_of(PB0) * XV + K + zoff;
    const half * zero1 = xs + variant_of(PB1) * XV + K + zoff;
    const half * b0 = g == 0 ? real0 : zero0;
    const half * b1 = g == 0 ? real1 : zero1;
    float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    int base = d.chunk0();                        // the unit's first chunk of the batch in D's columns
    int n_batch = L > 0 ? (NC < 8 ? NC : 8) : 1;  // chunks of the batch (so far, for L == 0)
    const int last = unit_last_chunk(d);
    // this lane's chunks of a batch, base + 2t + e: their group scales of columns g and g + 8
    // (fp16 pairs), and the next batch's when there is one
    // (a full unit of 16 chunks loads its second batch's at the unit's start; the run-time form
    // loads each batch's when it starts: loaded ahead, they pushed it into spills)
    uint32_t sr[2] = {s0[0], s0[1]}, sn[2] = {0u, 0u};
    if (NC > 8) unit_scales(d, base + 8, last, csum, scales, lane, sn);
    auto next_batch = [&]() {
        base += 8;
        if (NC > 8) {
            sr[0] = sn[0];
            sr[1] = sn[1];
        } else {
            unit_scales(d, base, last, csum, scales, lane, sr);
        }
    };
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
    for (int i = 0; i < NS; i++) {
        if (L > 0) {
            if (i > 0 && i % LS == 0) {   // chunk i / L starts
                if (i / LS % 8 == 0) {    // D's columns are full (units of more than 8 chunks)
                    epilogue();
                    next_batch();
                    n_batch = NC - i / LS < 8 ? NC - i / LS : 8;   // (the last batch may be short)
                }
                b0 = g == i / LS % 8 ? real0 : zero0;
                b1 = g == i / LS % 8 ? real1 : zero1;
            }
        } else {
            if (i >= d.n_steps()) break;
            if (i > 0 && (d.chunk_starts() >> i & 1)) {   // uniform: the unit is the warp's
                if (n_batch == 8) {   // D's columns are full
                    epilogue();
                    next_batch();
                    n_batch = 0;
                }
                // (the zero lanes' base stays MS steps inside the zero halves: i - (unit start) < MS)
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

// Steps and chunk_starts of a full unit of width BITS in chunks of L steps: as many whole chunks
// as fit (ggx_tile_max_steps).
template <int BITS> __host__ __device__ constexpr int regular_steps(int L) { return ggx_tile_max_steps(BITS) / L * L; }
template <int BITS> __host__ __device__ constexpr uint32_t regular_starts(int L) {
    uint32_t m = 0;
    for (int i = 0; i < regular_steps<BITS>(L); i += L) m |= 1u << i;
    return m;
}

// The unit's width and, for a full unit of regular chunks, their length: one instantiation each.
template <int BITS>
__device__ __forceinline__ void run_unit_any(const unit_desc & d, const uint4 (&w)[UQ], const uint32_t (&s0)[2], const half * xs, int K,
                                             const float4 * csum, const uint16_t * scales, int lane, float & acc_lo, float & acc_hi) {
    const uint32_t cs = d.chunk_starts();
    const int n = d.n_steps();
    if (n == regular_steps<BITS>(2) && cs == regular_starts<BITS>(2)) run_unit<BITS, 2>(d, w, s0, xs, K, csum, scales, lane, acc_lo, acc_hi);
    else if (n == regular_steps<BITS>(4) && cs == regular_starts<BITS>(4)) run_unit<BITS, 4>(d, w, s0, xs, K, csum, scales, lane, acc_lo, acc_hi);
    else if (n == regular_steps<BITS>(8) && cs == regular_starts<BITS>(8)) run_unit<BITS, 8>(d, w, s0, xs, K, csum, scales, lane, acc_lo, acc_hi);
    else run_unit<BITS, 0>(d, w, s0, xs, K, csum, scales, lane, acc_lo, acc_hi);
}

__device__ __forceinline__ unit_desc load_desc(const ggx_tile_unit_dev * p) { return {*(const uint4 *)p}; }

// A unit's words of this lane (uint4 j at offset + j, 512 bytes apart); past n_uint4 the
// registers are left as they are (no recipe of the unit reads them). A switch into a chain of
// plain loads from one base: eight predicated loads took ~40 instructions (run 96's profile).
__device__ __forceinline__ void load_words(const uint4 * words, const unit_desc & d, int lane, uint4 (&w)[UQ]) {
    const uint4 * p = words + (size_t)d.offset() * 32 + lane;
    switch (d.n_uint4()) {
        default: if constexpr (UQ > 7) w[7] = ggx_load_ro(p + 32 * 7); [[fallthrough]];
        case 7: if constexpr (UQ > 6) w[6] = ggx_load_ro(p + 32 * 6); [[fallthrough]];
        case 6: if constexpr (UQ > 5) w[5] = ggx_load_ro(p + 32 * 5); [[fallthrough]];
        case 5: if constexpr (UQ > 4) w[4] = ggx_load_ro(p + 32 * 4); [[fallthrough]];
        case 4: if constexpr (UQ > 3) w[3] = ggx_load_ro(p + 32 * 3); [[fallthrough]];
        case 3: w[2] = ggx_load_ro(p + 32 * 2); [[fallthrough]];
        case 2: w[1] = ggx_load_ro(p + 32 * 1); [[fallthrough]];
        case 1: w[0] = ggx_load_ro(p);
    }
}


// x into shared memory for the warps: for each (step s, lane t) pair, the fp16 values of quantized
// rows 16 s + 2t, + 1, + 8, + 9 (already scaled) at halves 16 s + 4t .. + 3 of each variant, the
// last two divided by V; per step the sums (S, T4, T16) of those fp16 values; the zero halves.
// rows(s, v) puts rows 16 s .. 16 s + 15 into v[0..15]. One thread per step (no shuffles, its 16
// reads in flight together; session 17: a thread per (step, lane) with shuffles for the step sums
// took 1-2.7 us per stage), by n_threads threads of which this is thread `tid`. The caller's
// barrier publishes it.
// variants: the ones to write (bit v, tile_layout_variants; 0: all), the others' halves are left
// as they are (no unit reads them); the sums are computed for all three.
template <typename Rows>
__device__ __forceinline__ void stage_x(int K, Rows rows, half * xs, float4 * step_sums, int tid, int n_threads, int variants = 7) {
    if (variants == 0) variants = 7;
    const int XV = x_stride(K);
    for (int s = tid; s < K / 16; s += n_threads) {
        float v[16];
        rows(s, v);
        float sums[3];
#pragma unroll
        for (int vi = 0; vi < 3; vi++) {
            const float inv = vi == 0 ? 1.0f : vi == 1 ? 0.25f : 0.0625f;
            uint32_t hw[8];
            float lane_sum[4];
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const half h0 = __float2half_rn(v[2 * t]), h1 = __float2half_rn(v[2 * t + 1]), h2 = __float2half_rn(v[2 * t + 8] * inv),
                           h3 = __float2half_rn(v[2 * t + 9] * inv);
                const half2 p0 = __halves2half2(h0, h1), p1 = __halves2half2(h2, h3);
                hw[2 * t] = *(const uint32_t *)&p0;
                hw[2 * t + 1] = *(const uint32_t *)&p1;
                lane_sum[t] = __half2float(h0) + __half2float(h1) + __half2float(h2) + __half2float(h3);
            }
            if (variants >> vi & 1) {
                uint4 * dst = (uint4 *)(xs + (size_t)vi * XV + (size_t)s * 16);
                dst[0] = make_uint4(hw[0], hw[1], hw[2], hw[3]);
                dst[1] = make_uint4(hw[4], hw[5], hw[6], hw[7]);
            }
            sums[vi] = (lane_sum[0] + lane_sum[1]) + (lane_sum[2] + lane_sum[3]);   // the lanes' order of the old shuffles
        }
        step_sums[s] = make_float4(sums[0], sums[1], sums[2], 0.0f);
    }
    for (int i = tid; i < 3 * k_zero_halves; i += n_threads) xs[(size_t)(i / k_zero_halves) * XV + K + i % k_zero_halves] = __float2half_rn(0.0f);
}

// The chunks' descriptors (first step, steps, group, 0) into csum, where chunk_sums finds them: a
// static table, so the caller copies it before it waits for x (read after that, the global load
// was a memory latency in every stage: ~1 us per matrix, session 17). The tile step copies the
// same slots with cp.async instead (tile-step.cu's stage_static).
__device__ __forceinline__ void stage_chunks(const int4 * chunks, int n_chunks, float4 * csum, int tid, int n_threads) {
    for (int c = tid; c < n_chunks; c += n_threads) ((int4 *)csum)[c] = ggx_load_ro(chunks + c);
}

// Per chunk (its descriptor in csum, stage_chunks) the sums of its steps' (S, T4, T16) and, as
// int bits in .w, its group's first scale (group x Np), in place. After stage_x's barrier (which
// also publishes stage_chunks' copy); the caller's barrier publishes it.
// Thread c walks its chunk's steps starting at step c mod n: adjacent threads' chunks lie n float4
// apart, so in order (n = 8: 128 bytes apart) eight lanes of a 16-byte load phase hit the same
// banks; rotated they hit eight different ones (session 17: ~1 us per stage here, for ~16
// dependent loads).
__device__ __forceinline__ void chunk_sums(int n_chunks, int Np, const float4 * step_sums, float4 * csum, int tid, int n_threads) {
    for (int c = tid; c < n_chunks; c += n_threads) {
        const int4 ch = ((const int4 *)csum)[c];
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int k = 0, j = c % max(ch.y, 1); k < ch.y; k++, j = j + 1 == ch.y ? 0 : j + 1) {
            const float4 v = step_sums[ch.x + j];
            sum.x += v.x;
            sum.y += v.y;
            sum.z += v.z;
        }
        sum.w = __int_as_float(ch.z * Np);
        csum[c] = sum;
    }
}

// What a warp's units read: the matrix's words and scales, the descriptors (indexed by unit: in
// the loop, the block's copy in shared memory), and the block's staged x and chunk sums.
// prefetch: units ahead of the multiply whose words lane 0 asks L2 for (0: none).
struct warp_src {
    const uint4 *             words;
    const ggx_tile_unit_dev * units;
    const uint16_t *          scales;
    const half *              xs;
    const float4 *            csum;
    int                       K;
    int                       prefetch;
};

// A warp's running sums of its current tile: reduced over the 4 lanes t (which hold the same
// columns for different chunks, run_unit) and handed to sink(tile, g, lo, hi) by the lanes t == 0
// (columns 16 tile + g and + g + 8) when the tile changes.
template <typename Sink>
__device__ __forceinline__ void flush_tile(int tile, float & acc_lo, float & acc_hi, int lane, Sink & sink) {
    acc_lo += __shfl_xor_sync(0xffffffffu, acc_lo, 1);
    acc_hi += __shfl_xor_sync(0xffffffffu, acc_hi, 1);
    acc_lo += __shfl_xor_sync(0xffffffffu, acc_lo, 2);
    acc_hi += __shfl_xor_sync(0xffffffffu, acc_hi, 2);
    if (tile >= 0 && lane % 4 == 0) sink(tile, lane / 4, acc_lo, acc_hi);
    acc_lo = acc_hi = 0.0f;
}

// Unit u (descriptor d, words w, scales sw) multiplied while unit u + 1's words and scales load
// into w_next, s_next; returns unit u + 2's descriptor (loaded meanwhile). A function, not a
// lambda: nvcc declined to inline the lambda once the 32-step bodies made it large, and passing
// the word arrays by reference to a call put them on the stack (576 bytes).
template <typename Sink>
__device__ __forceinline__ unit_desc unit_step(const warp_src & m, int u, int u1, const unit_desc & d, const uint4 (&w)[UQ],
                                               const uint32_t (&sw)[2], const unit_desc & d_next, uint4 (&w_next)[UQ], uint32_t (&s_next)[2],
                                               int lane, int & tile, float & acc_lo, float & acc_hi, Sink & sink) {
    if (m.prefetch > 0 && lane == 0 && u + 1 + m.prefetch < u1) {
        const unit_desc dp = load_desc(m.units + u + 1 + m.prefetch);
        ggx_prefetch_l2(m.words + (size_t)dp.offset() * 32, (uint32_t)dp.n_uint4() * 512u);
    }
    if (u + 1 < u1) {
        load_words(m.words, d_next, lane, w_next);
        unit_scales(d_next, d_next.chunk0(), unit_last_chunk(d_next), m.csum, m.scales, lane, s_next);
    }
    const unit_desc d_after = u + 2 < u1 ? load_desc(m.units + u + 2) : d_next;
    if ((int)d.tile() != tile) {   // uniform
        flush_tile(tile, acc_lo, acc_hi, lane, sink);
        tile = d.tile();
    }
    switch (d.bits()) {
        case 8: run_unit_any<8>(d, w, sw, m.xs, m.K, m.csum, m.scales, lane, acc_lo, acc_hi); break;
        case 6: run_unit_any<6>(d, w, sw, m.xs, m.K, m.csum, m.scales, lane, acc_lo, acc_hi); break;
        case 5: run_unit_any<5>(d, w, sw, m.xs, m.K, m.csum, m.scales, lane, acc_lo, acc_hi); break;
        case 4: run_unit_any<4>(d, w, sw, m.xs, m.K, m.csum, m.scales, lane, acc_lo, acc_hi); break;
        case 3: run_unit_any<3>(d, w, sw, m.xs, m.K, m.csum, m.scales, lane, acc_lo, acc_hi); break;
        default: run_unit_any<2>(d, w, sw, m.xs, m.K, m.csum, m.scales, lane, acc_lo, acc_hi); break;
    }
    return d_after;
}

// A warp's pipeline: the descriptors of its next two units and the words of the first, loaded by
// warp_begin before the caller stages x (they do not depend on it), so that the first words are
// on their way while the block stages; then warp_run walks the units.
struct warp_pipe {
    unit_desc da, db;
    uint4     wa[UQ], wb[UQ];
};

// (units: the descriptors in global memory)
__device__ __forceinline__ void warp_begin(const uint4 * words, const ggx_tile_unit_dev * units, int u0, int u1, int lane, warp_pipe & p) {
    if (u0 >= u1) return;
    p.da = {ggx_load_ro((const uint4 *)(units + u0))};
    p.db = u0 + 1 < u1 ? unit_desc{ggx_load_ro((const uint4 *)(units + u0 + 1))} : p.da;
    load_words(words, p.da, lane, p.wa);
}

// The warp's units u0 .. u1 - 1 (tile-major) after warp_begin: each tile's column sums (times 2^e
// of x's staging: the caller unscales) go to sink. Two word buffers trade places unit by unit (the
// body twice), so that no unit's words are copied between registers.
template <typename Sink>
__device__ __forceinline__ void warp_run(const warp_src & m, int u0, int u1, int lane, warp_pipe & p, Sink & sink) {
    if (u0 >= u1) return;
    float acc_lo = 0.0f, acc_hi = 0.0f;
    int tile = -1;
    unit_desc da = p.da, db = p.db;
    uint32_t sa[2], sb[2];
    unit_scales(da, da.chunk0(), unit_last_chunk(da), m.csum, m.scales, lane, sa);
    for (int u = u0; u < u1; u += 2) {
        const unit_desc da2 = unit_step(m, u, u1, da, p.wa, sa, db, p.wb, sb, lane, tile, acc_lo, acc_hi, sink);   // unit u + 2's descriptor
        if (u + 1 >= u1) break;
        const unit_desc db2 = unit_step(m, u + 1, u1, db, p.wb, sb, da2, p.wa, sa, lane, tile, acc_lo, acc_hi, sink);
        da = da2;
        db = db2;
    }
    flush_tile(tile, acc_lo, acc_hi, lane, sink);
}

#endif  // !GGX_USE_HIP

}  // namespace ggx_tile_loop
