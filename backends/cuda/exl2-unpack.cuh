// Unpacking EXL2 columns on the GPU: shared by the decode GEMV (qgemv.cu) and the GPTQ GEMV
// (qmatrix.cu; GPTQ rows are 4-bit chunks of the same shape).
//
// A thread owns 4 adjacent columns and reads one uint4 per packed row (one 512-byte coalesced
// segment per warp). A "chunk" is the smallest row run that fills whole words:
//
//   bits   8   6   5   4   3   2
//   rows   4  16  32   8  32  16
//   words  1   3   5   1   3   1
#pragma once

#include "common.cuh"
#include "pair-window.h"

#include <cstring>

namespace ggx_exl2_unpack {

// Value j (0-based, compile-time) of width B from the words w[] of one column's chunk.
template <int B, int J>
__device__ __forceinline__ uint32_t extract(const uint32_t * w) {
    constexpr int bit = J * B, wi = bit / 32, s = bit % 32;
    if constexpr (s + B <= 32) {
        return (w[wi] >> s) & ((1u << B) - 1);
    } else {
        return __funnelshift_r(w[wi], w[wi + 1], s) & ((1u << B) - 1);
    }
}

template <int B> struct chunk_shape;
template <> struct chunk_shape<8> { static constexpr int rows = 4, words = 1; };
template <> struct chunk_shape<6> { static constexpr int rows = 16, words = 3; };
template <> struct chunk_shape<5> { static constexpr int rows = 32, words = 5; };
template <> struct chunk_shape<4> { static constexpr int rows = 8, words = 1; };
template <> struct chunk_shape<3> { static constexpr int rows = 32, words = 3; };
template <> struct chunk_shape<2> { static constexpr int rows = 16, words = 1; };

template <int B, int T, int J>
struct chunk_dot {
    // acc[t][c] += sum_j (v_j - z) * xs[t][j]  for the 4 columns c held in w[c][]
    static __device__ __forceinline__ void run(const uint32_t (&w)[4][chunk_shape<B>::words], const float * xs, int ld,
                                               float (&acc)[T][4]) {
        // (2^23 + v) - (2^23 + z) = v - z exactly: one subtraction for the conversion and the zero
        constexpr float bias = 8388608.0f + (float)(1 << (B - 1));
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const float v = __int_as_float(0x4B000000u | extract<B, J>(w[c])) - bias;
#pragma unroll
            for (int t = 0; t < T; t++) acc[t][c] = fmaf(v, xs[t * ld + J], acc[t][c]);
        }
        if constexpr (J + 1 < chunk_shape<B>::rows) chunk_dot<B, T, J + 1>::run(w, xs, ld, acc);
    }
};

// ---- fp16 pairs (the decode GEMV) ------------------------------------------------------------------
//
// A chunk's values are used in pairs (J, J + rows/2) as one half2: each code goes into the low
// mantissa bits of 1024.0 (0x6400, whose mantissa unit is exactly 1), so one LOP3 builds
// (1024 + v_J, 1024 + v_{J+rows/2}) and one HSUB2 of 1024 + z leaves v - z exactly. For 8, 4 and 2 bits
// the two values of a pair sit exactly 16 bits apart in one word (rows/2 * B = 16), so a single
// shift places both; the other widths place each value with its own shift or funnel shift.

// Bit casts between a packed pair of fp16 and a 32-bit word (also the prefill dequantizer's).
__device__ __forceinline__ half2 u32_as_half2(uint32_t u) {
    half2 h;
    static_assert(sizeof(h) == 4, "half2 is 4 bytes");
    memcpy((void *)&h, &u, 4);   // (void *): half2 is not trivially copyable on the host (tests/emu)
    return h;
}
__device__ __forceinline__ uint32_t half2_as_u32(half2 h) {
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

// The value starting at bit P of a chunk's word stream, moved so that it starts at bit D (0 or
// 16); bits outside D..D+B-1 are left for the caller to mask.
template <int B, int P, int D>
__device__ __forceinline__ uint32_t shift_to(const uint32_t * w) {
    constexpr int wi = P / 32, s = P % 32;
    if constexpr (s < D) return w[wi] << (D - s);                        // s + B <= 16 + B: inside word wi
    else if constexpr (s + B <= 32) return w[wi] >> (s - D);
    else return __funnelshift_r(w[wi], w[wi + 1], s - D);
}

// (a & Mask) | c in one LOP3 (nvcc emits an AND and an OR when both constants are immediates).
template <uint32_t Mask>
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t c) {
#if defined(GGX_USE_HIP) || !defined(__CUDA_ARCH__)   // HIP, and host code (tests/emu runs this file on the CPU)
    return (a & Mask) | c;
#else
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "n"(Mask), "r"(c));
    return d;
#endif
}

// Some pairs are taken 4 bits higher than their codes' lowest position, without a shift: 1024 +
// 16 v (exact: at most 1264), summed apart and scaled by 1/16 at the end of the piece (see
// piece_dot). For 4 bits these are the odd pairs (bits 4-7 of each byte).
// For 2 bits, in one-row products (a build switch, GGX_PAIR_X16_2BIT), a byte holds four codes
// at bits 0, 2, 4 and 6: pairs 2, 3, 6 and 7 are read at bits 4-5 of the same word as pairs 0, 1,
// 4 and 5 at bits 0-1, so a chunk's 8 pairs need the shifts by 2, 8 and 10 instead of seven. The
// second accumulator costs registers: with it k_qgemv<8> spilled 28 bytes and <2> 36 more (ptxas,
// sm_90); <1> keeps 128 and no spills.
#ifndef GGX_PAIR_X16_2BIT
#define GGX_PAIR_X16_2BIT 1
#endif
template <int B, int T> constexpr bool has_x16 = B == 4 || (B == 2 && GGX_PAIR_X16_2BIT && T == 1);
template <int B, int T, int J> struct pair_shape {
    static constexpr bool x16_2 = B == 2 && has_x16<B, T>;
    static constexpr bool x16 = (B == 4 && J % 2 == 1) || (x16_2 && J / 2 % 2 == 1);
    // the shift that brings the pair's codes to bit 0 (x16: bit 4) and bit 16 (20)
    static constexpr int shift = B == 4 ? 8 * (J / 2) : x16_2 ? 2 * (J % 2) + 8 * (J / 4) : J * B;
};

// 3-, 5- and 6-bit pairs of one-row products through byte-permuted windows (pair-window.h); 0
// places each code with its own shift, as before (a build switch, for measuring one against the
// other). Rows share a pair's extraction, so with more rows the windows save less, and the
// window words they keep live cost registers: k_qgemv<3> went from 212 to 244, <8> and <2>
// spilled 28 and 12 bytes more (ptxas, sm_90). One-row products only, then.
#ifndef GGX_PAIR_WINDOWS
#define GGX_PAIR_WINDOWS 1
#endif
constexpr bool k_pair_windows = GGX_PAIR_WINDOWS != 0;

template <int B, int T, int J, bool Windows>
__device__ __forceinline__ uint32_t pair_bits(const uint32_t * w) {
    constexpr int H = chunk_shape<B>::rows / 2;
    constexpr uint32_t m = (1u << B) - 1, magic = 0x64006400u;
    if constexpr (chunk_shape<B>::words == 1) {   // 8, 4, 2 bits: pairs (J, J + H) 16 bits apart
        static_assert(H * B == 16, "pairs 16 bits apart");
        return and_or<(pair_shape<B, T, J>::x16 ? m << 4 : m) * 0x10001u>(w[0] >> pair_shape<B, T, J>::shift, magic);
    } else if constexpr (Windows) {   // 3, 5 and 6 bits
        return and_or<(m | m << 16)>(ggx_pair_window_bits<B, H, J>(w), magic);
    } else {
        const uint32_t lo = shift_to<B, J * B, 0>(w), hi = shift_to<B, (J + H) * B, 16>(w);
        return and_or<(m << 16)>(hi, and_or<m>(lo, magic));
    }
}

// acc[t][c] += (v_J - z, v_{J+H} - z) * (x_J, x_{J+H}) for pairs J..H-1 of one chunk of the 4
// columns in w[c][] (acc16 instead, 16 times that, for the pairs of pair_shape::x16); xu[t][]
// holds the chunk's x as fp16 pairs of consecutive rows.
template <int B, int T, int J>
struct chunk_dot_h2 {
    static constexpr int H = chunk_shape<B>::rows / 2;
    static __device__ __forceinline__ void run(const uint32_t (&w)[4][chunk_shape<B>::words], const uint32_t (&xu)[T][H],
                                               half2 (&acc)[T][4], half2 (&acc16)[T][4]) {
        constexpr bool x16 = pair_shape<B, T, J>::x16;
        constexpr uint32_t zbits = (0x6400u | (x16 ? 16u : 1u) << (B - 1)) * 0x10001u;   // (1024 + z, 1024 + z), or 16 z
        half2 xp[T];
#pragma unroll
        for (int t = 0; t < T; t++)   // (x_J, x_{J+H}): H is even, so both are low or both high halves
            xp[t] = u32_as_half2(__byte_perm(xu[t][J / 2], xu[t][(J + H) / 2], J % 2 ? 0x7632 : 0x5410));
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const half2 d = __hsub2(u32_as_half2(pair_bits<B, T, J, k_pair_windows && T == 1>(w[c])), u32_as_half2(zbits));
#pragma unroll
            for (int t = 0; t < T; t++) {
                if constexpr (x16) acc16[t][c] = __hfma2(d, xp[t], acc16[t][c]);
                else               acc[t][c] = __hfma2(d, xp[t], acc[t][c]);
            }
        }
        if constexpr (J + 1 < H) chunk_dot_h2<B, T, J + 1>::run(w, xu, acc, acc16);
    }
};

// The scales of two adjacent columns, h(h((c+1)^2) * M'_g), from their 4-bit codes in bits 0-3
// and 4-7 of `codes`: the codes go into fp16 1024 + c (one LOP3), minus 1023 (0x63fe; 0x63ff is
// 1023.5), squared (exact) and times M'_g (one rounding, as the format says).
__device__ __forceinline__ half2 scale_pair(uint32_t codes, half2 mx2) {
    const uint32_t u = (codes & 0xffu) * 4097u;   // code 1 also at bits 16-19
    const half2 c1 = __hsub2(u32_as_half2(and_or<0x000f000fu>(u, 0x64006400u)), u32_as_half2(0x63fe63feu));
    return __hmul2(__hmul2(c1, c1), mx2);
}

// Chunks loaded back to back before use: enough 16-byte loads in flight per thread to cover
// memory latency (about 128 bytes for the common widths) without spilling registers.
template <int B> struct chunk_unroll { static constexpr int n = 2; };
template <> struct chunk_unroll<8> { static constexpr int n = 8; };
template <> struct chunk_unroll<4> { static constexpr int n = 8; };
template <> struct chunk_unroll<2> { static constexpr int n = 4; };

template <int B, int U>
__device__ __forceinline__ void load_chunks(const uint32_t * __restrict__ qw, int Np, int n, int qrow,
                                            uint32_t (&w)[U][4][chunk_shape<B>::words]) {
    constexpr int CW = chunk_shape<B>::words;
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int i = 0; i < CW; i++) {
            const uint4 v = __ldg((const uint4 *)(qw + (size_t)(qrow + u * CW + i) * Np + n));
            w[u][0][i] = v.x; w[u][1][i] = v.y; w[u][2][i] = v.z; w[u][3][i] = v.w;
        }
}

// One piece (rows of one group inside the block's slice) for 4 columns starting at n.
template <int B, int T, int U = chunk_unroll<B>::n>
__device__ __forceinline__ void exl2_piece(const uint32_t * __restrict__ qw, int Np, int n, int qrow, int rows,
                                           const float * xs, int ld, float (&acc)[T][4]) {
    constexpr int CR = chunk_shape<B>::rows, CW = chunk_shape<B>::words;
    int r = 0;
    for (; r + U * CR <= rows; r += U * CR, qrow += U * CW) {
        uint32_t w[U][4][CW];
        load_chunks<B, U>(qw, Np, n, qrow, w);
#pragma unroll
        for (int u = 0; u < U; u++) chunk_dot<B, T, 0>::run(w[u], xs + r + u * CR, ld, acc);
    }
    for (; r < rows; r += CR, qrow += CW) {
        uint32_t w[1][4][CW];
        load_chunks<B, 1>(qw, Np, n, qrow, w);
        chunk_dot<B, T, 0>::run(w[0], xs + r, ld, acc);
    }
}

// The exponent e of the power of two that brings max |x| = amax into [8, 16) before x is rounded
// to fp16 for piece_dot: 16 products of at most 128 x 16 per half then stay below 32768. amax =
// f 2^(field - 126) with f in [0.5, 1); zero and subnormal maxima get the largest scale; inf and
// nan are left unscaled (e = 0).
__device__ __forceinline__ int x_scale_exponent(float amax) {
    const int field = (__float_as_int(amax) >> 23) & 255;
    return field == 255 ? 0 : max(-120, min(120, 4 - (field - 126)));
}

// The 4 column sums of one piece (at most 32 rows of one width, a multiple of its chunk) in fp16
// pairs: w holds the piece's word rows (one uint4 = the 4 columns' words per row), xh its x as
// fp16 (ld apart for each of the T rows). Used by the decode GEMV (qgemv.cu) and the strip GEMV
// (strip-step.cu).
// W0: the piece's first word row in w (4: the second half of a 64-row 4-bit piece, qgemv.cu).
template <int B, int T, int W0 = 0>
__device__ __forceinline__ void piece_dot(const uint4 (&w)[8], int rows, const half * xh, int ld, half2 (&acc)[T][4]) {
    constexpr int CR = chunk_shape<B>::rows, CW = chunk_shape<B>::words, NC = 32 / CR, H = CR / 2;
    half2 acc16[T][4];   // the pairs summed 16 times too large (4 and 2 bits: see pair_shape)
#pragma unroll
    for (int t = 0; t < T; t++) acc16[t][0] = acc16[t][1] = acc16[t][2] = acc16[t][3] = __float2half2_rn(0.0f);
#pragma unroll
    for (int c = 0; c < NC; c++) {
        if (c * CR >= rows) break;   // 16-row pieces (2-bit only)
        uint32_t cw[4][CW];
#pragma unroll
        for (int i = 0; i < CW; i++) {
            const uint4 u = w[W0 + c * CW + i];
            cw[0][i] = u.x; cw[1][i] = u.y; cw[2][i] = u.z; cw[3][i] = u.w;
        }
        // the chunk's x: CR halves per row (pieces start on multiples of 16 rows, so a chunk's x
        // is 16-byte aligned, 8-byte for the 4-row chunks of 8 bits)
        uint32_t xu[T][H];
#pragma unroll
        for (int t = 0; t < T; t++) {
            if constexpr (H % 4 == 0) {   // 16-byte aligned: chunks of 8 rows or more
                const uint4 * src = (const uint4 *)(xh + t * ld + c * CR);
#pragma unroll
                for (int i = 0; i < H / 4; i++) {
                    const uint4 u = src[i];
                    xu[t][4 * i] = u.x; xu[t][4 * i + 1] = u.y; xu[t][4 * i + 2] = u.z; xu[t][4 * i + 3] = u.w;
                }
            } else {
                const uint2 u = *(const uint2 *)(xh + t * ld + c * CR);
                xu[t][0] = u.x; xu[t][1] = u.y;
            }
        }
        chunk_dot_h2<B, T, 0>::run(cw, xu, acc, acc16);
    }
    if constexpr (has_x16<B, T>) {
        const half2 sixteenth = __float2half2_rn(0.0625f);
#pragma unroll
        for (int t = 0; t < T; t++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[t][c] = __hfma2(acc16[t][c], sixteenth, acc[t][c]);
    }
}

}  // namespace ggx_exl2_unpack
