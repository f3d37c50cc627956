// y = x · W over packed EXL2 / GPTQ weights, without a dequantized copy of W.
//
// Work split: output columns, in panels of 32 (4 blocks of 8 adjacent columns = 8 adjacent u32
// words of a packed row, one AVX2 register). Thread ith owns a contiguous range of panels, so
// threads never share output cache lines and need no synchronisation.
//
// Per thread, tokens are taken 32 at a time ("chunk"): their activations are gathered once into
// quantized-row order (xq: the act-order permutation applied), as tiles of up to 8 tokens with
// layout [tile][k][tt], and the per-group sums of xq are precomputed (xsum). Each group is a run
// of rows with one width, one scale per column and one zero point, so
//
//   acc[t][n]  = sum_{rows k of group} v[k][n] * xq[k][t]        (raw codes, f32 FMA)
//   y[t][n]   += scale[g][n] * (acc[t][n] - zero[g][n] * xsum[g][t])
//
// equals sum_k (v - zero) * scale * x in exact arithmetic: the zero point costs one FMA per group
// instead of one subtraction per weight.
//
// Loop order (SIMD path): column slice -> group -> panel -> tile. One group's band of packed rows
// is streamed across the slice's columns (a few sequential streams, prefetcher friendly; walking
// a panel down all K rows instead strides by a whole packed row per step and ran 3x slower), and
// is reused from cache by every tile of the chunk; partial sums accumulate in this thread's
// columns of y, in column slices whose tokens x columns floats stay within ~64 KiB. Codes are unpacked 8 columns at a
// time with shift/mask at compile-time bit offsets (one template instance per width) and reused
// for every token of the tile: TT tokens x NB blocks of accumulators in registers (NB = 4 for
// TT <= 2, 2 for TT <= 4, else 1).
//
// Scratch (xq, xsum, group table; O(32 K) floats) is thread-local, grown to the largest call seen and then
// reused, so steady-state calls allocate nothing.
//
// Numerics versus W (each weight rounded to fp16 by the reference): the products here are not
// rounded to fp16, so each term differs from x*W by at most 2^-11 |W| (+2^-25 for subnormal W),
// plus f32 accumulation error. The per-column scale IS rounded to fp16 exactly as the reference
// does. tests/test-qmatmul.cpp derives the bound.
#include "cpu-qmatmul.h"

#include "ggx/fp16.h"
#include "ggx/ggx-qmatrix.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define QMM_AVX2 1
#include <immintrin.h>
#endif

namespace {

constexpr int TILE = 8;       // tokens per register tile
constexpr int CHUNK = 32;     // tokens gathered at once (4 tiles)
constexpr int PANEL = 4;      // 8-column blocks per panel

struct Group {
    int bits;      // 4 for GPTQ
    int row0;      // first quantized (sorted) row
    int rows;
    int qrow;      // first packed row
};

struct Scratch {
    std::vector<float> xq;     // [CHUNK/TILE][K][tt]
    std::vector<float> xsum;   // [CHUNK/TILE][G][tt]
    std::vector<Group> groups;
};
// Grown on first use to the largest K*tokens seen, then reused: no allocation in steady state.
thread_local Scratch tls;

// One matmul call's view of the matrix.
struct Job {
    bool exl2;
    const ggx_qmatrix * q;
    const Group * groups;
    int G;
    int64_t ld;        // words per packed row (Np for EXL2, N for GPTQ)
    int N;
};

void build_groups(const ggx_qmatrix & q, bool exl2, std::vector<Group> & out) {
    out.clear();
    if (exl2) {
        const uint16_t * g = q.groups_host ? q.groups_host : q.q_groups;
        int row = 0;
        for (int i = 0; i < q.n_groups; i++) {
            const int b = g[2 * i], r0 = g[2 * i + 1];
            const int r1 = i + 1 < q.n_groups ? g[2 * i + 3] : q.qrows;
            const int rows = (r1 - r0) * 32 / b;
            out.push_back({b, row, rows, r0});
            row += rows;
        }
    } else {
        for (int i = 0; i < q.n_groups; i++) {
            const int r0 = i * q.group_size, rows = std::min(q.group_size, q.K - r0);
            out.push_back({4, r0, rows, r0 / 8});
        }
    }
}

// Gathers tokens [t0, t0 + tc) into xq (tiles of 8, layout [tile][k][tt]) and their group sums.
void gather(const Job & J, const float * x, int64_t ldx, int64_t t0, int tc, float * xq, float * xsum) {
    const int K = J.q->K;
    const int32_t * perm = J.q->q_perm;
    for (int tile = 0; tile * TILE < tc; tile++) {
        const int tt = std::min(TILE, tc - tile * TILE);
        float * dst = xq + (size_t)tile * TILE * K;
        const float * src = x + (t0 + tile * TILE) * ldx;
        for (int k = 0; k < K; k++) {
            const int64_t s = perm ? perm[k] : k;
            for (int t = 0; t < tt; t++) dst[(size_t)k * tt + t] = src[t * ldx + s];
        }
        float * sums = xsum + (size_t)tile * TILE * J.G;
        for (int g = 0; g < J.G; g++) {
            float acc[TILE] = {0};
            const float * r = dst + (size_t)J.groups[g].row0 * tt;
            for (int k = 0; k < J.groups[g].rows; k++)
                for (int t = 0; t < tt; t++) acc[t] += r[(size_t)k * tt + t];
            for (int t = 0; t < tt; t++) sums[(size_t)g * tt + t] = acc[t];
        }
    }
}

// Exact fp16 scale of code c in a group with maximum m (as exl2_dq_scale in exl2/quant/dequant.h).
inline float exl2_scale(uint32_t c, uint16_t m) {
    return ggx_round_f16((float)((c + 1) * (c + 1)) * ggx_f16_to_f32(m));
}

// ---- scalar path (any CPU; tests hold it to the same reference and bound as the SIMD path) ----

inline uint32_t extract(const uint32_t * grp, int64_t ld, int64_t n, int j, int bits) {
    const int bit = j * bits, w = bit >> 5, s = bit & 31;
    uint32_t v = grp[(int64_t)w * ld + n] >> s;
    if (s + bits > 32) v |= grp[(int64_t)(w + 1) * ld + n] << (32 - s);
    return v & ((1u << bits) - 1);
}

void tile_scalar(const Job & J, int n0, int n1, const float * xq, const float * xsum, int tt, float * y, int64_t ldy) {
    const ggx_qmatrix & q = *J.q;
    for (int n = n0; n < n1; n++) {
        float yt[TILE] = {0};
        for (int g = 0; g < J.G; g++) {
            const Group & gr = J.groups[g];
            const uint32_t * grp = q.q_weight + (size_t)gr.qrow * J.ld;
            float acc[TILE] = {0};
            for (int j = 0; j < gr.rows; j++) {
                const float v = (float)extract(grp, J.ld, n, j, gr.bits);
                const float * xr = xq + (size_t)(gr.row0 + j) * tt;
                for (int t = 0; t < tt; t++) acc[t] += v * xr[t];
            }
            float scale, zero;
            if (J.exl2) {
                scale = exl2_scale((q.q_scale[(size_t)g * (J.ld / 8) + n / 8] >> (4 * (n % 8))) & 15, q.q_scale_max[g]);
                zero = (float)(1 << (gr.bits - 1));
            } else {
                scale = ggx_f16_to_f32(q.scales[(size_t)g * J.N + n]);
                zero = (float)(((q.qzeros[(size_t)g * (J.N / 8) + n / 8] >> (4 * (n % 8))) & 15) + 1);
            }
            for (int t = 0; t < tt; t++) yt[t] += scale * (acc[t] - zero * xsum[(size_t)g * tt + t]);
        }
        for (int t = 0; t < tt; t++) y[t * ldy + n] = yt[t];
    }
}

#ifdef QMM_AVX2
// ---- AVX2 path --------------------------------------------------------------------------------

#define QMM_INLINE inline __attribute__((always_inline))
// Loops over the tile (tokens x blocks) must be unrolled so that the accumulators stay in registers.
#define QMM_UNROLL _Pragma("GCC unroll 32")

// Codes of value J of a width-B chunk for 8 columns; `q` points at the chunk's first word of the
// 8-column block, `ld` is the packed row stride.
template <int B, int J>
QMM_INLINE __m256i unpack8(const uint32_t * q, int64_t ld) {
    constexpr int bit = J * B, w = bit / 32, s = bit % 32;
    constexpr bool straddle = s + B > 32, top = s + B == 32;
    __m256i v = _mm256_loadu_si256((const __m256i *)(q + w * ld));
    if constexpr (s != 0) v = _mm256_srli_epi32(v, s);
    if constexpr (straddle) {
        const __m256i hi = _mm256_loadu_si256((const __m256i *)(q + (w + 1) * ld));
        v = _mm256_or_si256(v, _mm256_slli_epi32(hi, 32 - s));
    }
    if constexpr (!top) v = _mm256_and_si256(v, _mm256_set1_epi32((1 << B) - 1));
    return v;
}

template <int B, int TT, int NB, int J>
QMM_INLINE void row_fma(const uint32_t * q, int64_t ld, const float * xr, __m256 * acc) {
    __m256 f[NB];
    QMM_UNROLL
    for (int b = 0; b < NB; b++) f[b] = _mm256_cvtepi32_ps(unpack8<B, J>(q + 8 * b, ld));
    QMM_UNROLL
    for (int t = 0; t < TT; t++) {
        const __m256 xv = _mm256_broadcast_ss(xr + J * TT + t);
        QMM_UNROLL
        for (int b = 0; b < NB; b++) acc[t * NB + b] = _mm256_fmadd_ps(f[b], xv, acc[t * NB + b]);
    }
}

template <int B, int TT, int NB, int... J>
QMM_INLINE void chunk_fma(const uint32_t * q, int64_t ld, const float * xr, __m256 * acc, std::integer_sequence<int, J...>) {
    (row_fma<B, TT, NB, J>(q, ld, xr, acc), ...);
}

constexpr int chunk_rows(int b) { return b == 8 ? 4 : b == 6 ? 16 : b == 5 ? 32 : b == 4 ? 8 : b == 3 ? 32 : 16; }

// acc[t*NB + b] += sum over the group's rows of code * xq, for NB blocks of 8 columns at q.
template <int B, int TT, int NB>
QMM_INLINE void group_fma(const uint32_t * q, int64_t ld, int rows, const float * xr, __m256 * acc) {
    constexpr int CH = chunk_rows(B), WPC = CH * B / 32;
    for (int r = 0; r < rows; r += CH, q += WPC * ld, xr += CH * TT)
        chunk_fma<B, TT, NB>(q, ld, xr, acc, std::make_integer_sequence<int, CH>{});
}

// Group g for NB blocks of 8 columns starting at column n0 and one tile of TT tokens:
// y[t*ldy + 8b + i] += scale * (acc - zero * xsum), y pointing at column n0 of the tile's first row.
template <int TT, int NB>
void group_tile_avx2(const Job & J, int g, int n0, const float * xq, const float * xsum, float * y, int64_t ldy) {
    const ggx_qmatrix & q = *J.q;
    const Group & gr = J.groups[g];
    const uint32_t * qw = q.q_weight + (size_t)gr.qrow * J.ld + n0;
    const float * xr = xq + (size_t)gr.row0 * TT;
    __m256 acc[TT * NB];
    QMM_UNROLL
    for (int i = 0; i < TT * NB; i++) acc[i] = _mm256_setzero_ps();
    switch (gr.bits) {
        case 8: group_fma<8, TT, NB>(qw, J.ld, gr.rows, xr, acc); break;
        case 6: group_fma<6, TT, NB>(qw, J.ld, gr.rows, xr, acc); break;
        case 5: group_fma<5, TT, NB>(qw, J.ld, gr.rows, xr, acc); break;
        case 4: group_fma<4, TT, NB>(qw, J.ld, gr.rows, xr, acc); break;
        case 3: group_fma<3, TT, NB>(qw, J.ld, gr.rows, xr, acc); break;
        default: group_fma<2, TT, NB>(qw, J.ld, gr.rows, xr, acc); break;
    }
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i nib = _mm256_set1_epi32(15), one = _mm256_set1_epi32(1);
    __m256 scale[NB], zero[NB];
    QMM_UNROLL
    for (int b = 0; b < NB; b++) {
        const int c = n0 + 8 * b;
        if (J.exl2) {
            // The 8 scale codes of this block are one q_scale word; scale = h((code+1)^2 * M').
            const __m256i code = _mm256_and_si256(
                _mm256_srlv_epi32(_mm256_set1_epi32((int)q.q_scale[(size_t)g * (J.ld / 8) + c / 8]), shifts), nib);
            const __m256i c1 = _mm256_add_epi32(code, one);
            const __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(c1, c1)),
                                           _mm256_set1_ps(ggx_f16_to_f32(q.q_scale_max[g])));
            scale[b] = _mm256_cvtph_ps(_mm256_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            zero[b] = _mm256_set1_ps((float)(1 << (gr.bits - 1)));
        } else {
            scale[b] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(q.scales + (size_t)g * J.N + c)));
            const __m256i z = _mm256_and_si256(
                _mm256_srlv_epi32(_mm256_set1_epi32((int)q.qzeros[(size_t)g * (J.N / 8) + c / 8]), shifts), nib);
            zero[b] = _mm256_cvtepi32_ps(_mm256_add_epi32(z, one));
        }
    }
    const float * xs = xsum + (size_t)g * TT;
    QMM_UNROLL
    for (int t = 0; t < TT; t++) {
        const __m256 s = _mm256_broadcast_ss(xs + t);
        QMM_UNROLL
        for (int b = 0; b < NB; b++) {
            float * dst = y + t * ldy + 8 * b;
            const int valid = J.N - (n0 + 8 * b);
            if (valid >= 8) {
                _mm256_storeu_ps(dst, _mm256_fmadd_ps(scale[b], _mm256_fnmadd_ps(zero[b], s, acc[t * NB + b]), _mm256_loadu_ps(dst)));
            } else {
                // Last block of an N that is not a multiple of 8: the columns past N belong to the
                // next row of y (another thread's), so touch only the valid lanes.
                const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                const __m256 r = _mm256_fmadd_ps(scale[b], _mm256_fnmadd_ps(zero[b], s, acc[t * NB + b]), _mm256_maskload_ps(dst, m));
                _mm256_maskstore_ps(dst, m, r);
            }
        }
    }
}

// Group g over blocks [b0, b1) of 8 columns for one tile, as many blocks per pass as the
// register budget allows. y points at the tile's first row (column 0).
template <int TT>
void group_blocks_avx2(const Job & J, int g, int b0, int b1, const float * xq, const float * xsum, float * y, int64_t ldy) {
    constexpr int NB = TT <= 2 ? 4 : TT <= 4 ? 2 : 1;
    int b = b0;
    for (; b + NB <= b1; b += NB) group_tile_avx2<TT, NB>(J, g, 8 * b, xq, xsum, y + 8 * b, ldy);
    for (; b < b1; b++) group_tile_avx2<TT, 1>(J, g, 8 * b, xq, xsum, y + 8 * b, ldy);
}

void group_avx2(const Job & J, int g, int tt, int b0, int b1, const float * xq, const float * xsum, float * y, int64_t ldy) {
    switch (tt) {
        case 1: group_blocks_avx2<1>(J, g, b0, b1, xq, xsum, y, ldy); break;
        case 2: group_blocks_avx2<2>(J, g, b0, b1, xq, xsum, y, ldy); break;
        case 3: group_blocks_avx2<3>(J, g, b0, b1, xq, xsum, y, ldy); break;
        case 4: group_blocks_avx2<4>(J, g, b0, b1, xq, xsum, y, ldy); break;
        case 5: group_blocks_avx2<5>(J, g, b0, b1, xq, xsum, y, ldy); break;
        case 6: group_blocks_avx2<6>(J, g, b0, b1, xq, xsum, y, ldy); break;
        case 7: group_blocks_avx2<7>(J, g, b0, b1, xq, xsum, y, ldy); break;
        default: group_blocks_avx2<8>(J, g, b0, b1, xq, xsum, y, ldy); break;
    }
}
#endif  // QMM_AVX2

void qmatmul(const ggx_tensor * w, const float * x, int64_t ldx, float * y, int64_t ldy, int64_t T, int ith, int nth,
             bool simd) {
    const ggx_qmatrix & q = *(const ggx_qmatrix *)w->extra;
    const bool exl2 = w->type == GGX_TYPE_EXL2;
    // Columns in blocks of 8 (always readable: Np is a multiple of 32, GPTQ N of 8), threads get
    // whole panels of PANEL blocks.
    const int nblocks = (q.N + 7) / 8, npanels = (nblocks + PANEL - 1) / PANEL;
    const int b0 = std::min(nblocks, (int)((int64_t)npanels * ith / nth) * PANEL);
    const int b1 = std::min(nblocks, (int)((int64_t)npanels * (ith + 1) / nth) * PANEL);
    if (b0 >= b1 || T <= 0) return;

    Scratch & S = tls;
    build_groups(q, exl2, S.groups);
    const Job J = {exl2, &q, S.groups.data(), q.n_groups, exl2 ? (int64_t)q.Np : (int64_t)q.N, q.N};
    const int64_t tmax = std::min<int64_t>(T, CHUNK);
    const size_t tiles = (size_t)(tmax + TILE - 1) / TILE;
    if (S.xq.size() < tiles * TILE * q.K) S.xq.resize(tiles * TILE * q.K);
    if (S.xsum.size() < tiles * TILE * q.n_groups) S.xsum.resize(tiles * TILE * q.n_groups);

    const int c0 = 8 * b0, c1 = std::min(q.N, 8 * b1);
    for (int64_t t0 = 0; t0 < T; t0 += CHUNK) {
        const int tc = (int)std::min<int64_t>(CHUNK, T - t0);
        gather(J, x, ldx, t0, tc, S.xq.data(), S.xsum.data());
#ifdef QMM_AVX2
        if (simd) {
            // Group-major: one group's band of packed rows is streamed across the slice's columns
            // (a few sequential streams, prefetcher friendly) and, for several tiles, reused from
            // cache. Partial sums accumulate in y itself (only this thread's columns), in column
            // slices of tc x slice floats that stay within ~64 KiB.
            for (int t = 0; t < tc; t++) memset(y + (t0 + t) * ldy + c0, 0, sizeof(float) * (size_t)(c1 - c0));
            const int slice = std::max(PANEL, (16384 / tc) / (8 * PANEL) * PANEL);
            for (int s0 = b0; s0 < b1; s0 += slice)
                for (int g = 0; g < J.G; g++)
                    for (int p = s0; p < std::min(b1, s0 + slice); p += PANEL) {
                        const int p1 = std::min(b1, p + PANEL);
                        for (int tile = 0; tile * TILE < tc; tile++)
                            group_avx2(J, g, std::min(TILE, tc - tile * TILE), p, p1, S.xq.data() + (size_t)tile * TILE * q.K,
                                       S.xsum.data() + (size_t)tile * TILE * q.n_groups, y + (t0 + tile * TILE) * ldy, ldy);
                    }
            continue;
        }
#endif
        (void)simd;
        for (int tile = 0; tile * TILE < tc; tile++)
            tile_scalar(J, 8 * b0, std::min(q.N, 8 * b1), S.xq.data() + (size_t)tile * TILE * q.K,
                        S.xsum.data() + (size_t)tile * TILE * q.n_groups, std::min(TILE, tc - tile * TILE),
                        y + (t0 + tile * TILE) * ldy, ldy);
    }
}

}  // namespace

extern "C" void ggx_cpu_qmatmul(const struct ggx_tensor * w, const float * x, int64_t ldx, float * y, int64_t ldy,
                                int64_t T, int ith, int nth) {
    qmatmul(w, x, ldx, y, ldy, T, ith, nth, true);
}

extern "C" void ggx_cpu_qmatmul_scalar(const struct ggx_tensor * w, const float * x, int64_t ldx, float * y, int64_t ldy,
                                       int64_t T, int ith, int nth) {
    qmatmul(w, x, ldx, y, ldy, T, ith, nth, false);
}
