// Fused EXL2 decode GEMV (see qgemv.cuh).
//
// The rows are cut into fine slices of 32 rows (ggx_cuda_qextra, described by "pieces"). Grid:
// one block per (matrix, column tile of 512, K-slice); 128*W threads, warp group g (128 threads,
// 4 adjacent columns each) takes the g-th run of m fine slices of the block's K-slice, so the
// block splits K W ways and sums the groups in shared memory (W = 4 for one or two rows, fewer
// for more rows, whose x slices take more shared memory). m is chosen per launch for all of a
// job's matrices together (ggx_cuda_qgemv_group_slices), so that the grid fills whole waves.
// A block
//   1. does what depends only on static data and inputs first (its first two pieces of packed
//      weights into registers, a few more rows into L2, q_perm and the norm weights of its x
//      rows, the RoPE factors of its columns) and only then waits for the previous kernel
//      (programmatic dependent launch on sm_90: griddepcontrol.wait, so this overlaps the
//      previous kernel's tail; elsewhere the wait is a no-op);
//   2. gathers its rows of x through q_perm into shared memory, RMS-normalised if asked (the
//      block computes the row's inverse RMS itself: K floats from L2, cheaper than a launch),
//      then as fp16 scaled by a power of two;
//   3. streams its pieces (slice ∩ group, at most 32 rows) with 16-byte loads, two pieces in
//      flight, summing (q - z) x in fp16 pairs and applying each group's scale once per piece
//      in fp32;
//   4. writes its partial sums, and the last block of the tile to arrive (an atomic counter that
//      it resets for the next launch) adds the blocks' partials in order and runs the epilogue;
//      or, for one row with a residual added in place (o, down), adds its sums into y with vector
//      atomics (no last block: see `reduce`), as one-row q/k/v jobs do into the q/k/v rows that
//      the decode attention reads (their sums rotated first).
#include "qgemv.cuh"

#include "activation.cuh"
#include "env-knobs.h"
#include "exl2-unpack.cuh"
#include "mma.cuh"
#include "norm.cuh"
#include "qmatrix.cuh"
#include "rope.cuh"
#include "trace.cuh"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace {

using namespace ggx_exl2_unpack;

constexpr int k_group = 128;                  // threads of one warp group: one column tile
constexpr int k_tile = 4 * k_group;           // columns per tile
constexpr int k_fine = GGX_QGEMV_FINE_ROWS;
constexpr int k_max_rows = 1024;              // rows per warp group cap (x slices in shared memory)
constexpr int k_block_rows = 230;             // a block's fixed cost in rows (see ggx_cuda_qgemv_group_slices)
constexpr int k_slice_cost = 4;               // a one-row job's cost per K-slice of a tile, priced by pieces (ditto)
constexpr int k_red_slice_cost = 8;           // the same for a job whose K-slices add into y, before a large job (ditto)
constexpr int64_t k_large_next = 48 << 20;    // a next job of at least these weight bytes is large (ditto)
constexpr int k_stage = k_max_rows / k_group; // rows of x each thread stages (see the kernel's step 2)
constexpr int k_max_smem = 96 * 1024;         // dynamic shared memory at most: T = 8 with RoPE (see ggx_cuda_qgemv_run)
// gemv_args::flags: one-row ADD epilogues in place add every K-slice's sums into y (GGX_QGEMV_RED,
// default on); a one-row job keeps one piece per thread in flight instead of two (one_deep)
constexpr int k_flag_red = 1, k_flag_one_deep = 2;
constexpr int k_prefetch_rows = 2;            // L2 warm-up rows per thread (see prefetch_rows; measured)

// Warp groups per block for T rows: shared memory holds T * W fine slices of x.
constexpr int groups_for(int T) { return T <= 2 ? 4 : T <= 4 ? 2 : 1; }

// 4-bit pieces on the tensor cores (decode-plan.h: GGX_QGEMV_MMA4; one row, CUDA only)
#if GGX_QGEMV_MMA4 && !defined(GGX_USE_HIP)
#define GGX_QGEMV_TC4 1
#else
#define GGX_QGEMV_TC4 0
#endif
// Shared-memory floats that a one-row block adds for them past its x rows (ldx halves): x again in
// the tensor cores' order, 2 bytes a row as x (so found from the piece's row as x is: no pointer
// held across the loop).
constexpr int tc4_floats(int T, int ldx) { return GGX_QGEMV_TC4 && T == 1 ? ldx / 2 : 0; }

struct gemv_mat {
    const uint32_t * qw;
    const uint32_t * qs;
    const half *     qsmax;
    const int32_t *  perm;
    const float *    norm_wp;   // the norm weights in perm order (norm-table.cu), or null: read through perm
    const int4 *     pieces;
    const int4 *     heads;         // head records per fine slice, or per pair of them (pair_shift 1: ggx_cuda_qextra::heads2)
    int pair_shift;
    int K, N, Np, n_fine, n_slices, n_tiles;   // n_slices blocks per tile
    int m;             // fine slices per warp group
    int block0;        // first block of this matrix in the grid
    int counter0;      // first tile counter
    int arrivals;      // blocks reporting to each tile counter (both matrices' slices for GLU)
    float * partial;   // [n_slices][T][Np]
    const float * bias;
    float * y;         // [T][N] result (null when writing to cache)
    const float * resid;
    void * cache;      // [C][N] rows at pos[t]
    int cache_type;
    int cache_rows;
    int epi, rope, pair, is_gate;
    int in_place;      // an ADD epilogue whose y is its residual (ggx_qgemv_adds_in_place); never RoPE or attention
    int rows;          // y is this matrix's q/k/v rows (ggx_qgemv_job_mat::rows), which its K-slices add into
    int attn_role;     // attention in the tail (gemv_attn): 1 q, 2 k, 3 v, 0 none
};

// Attention in the tail of a one-row q/k/v job (decode-plan.h: ggx_qgemv_attn; attn_tail below).
struct gemv_attn {
    float *       out;      // [H][hd] the ATTN node's result
    float *       state;    // [H][hd + 2]: part A's acc[hd], m, l per query head (in the scratch, past the partials)
    const half *  k;        // caches [C][Hkv][hd]
    const half *  v;
    const float * q;        // q after RoPE [H][hd]: q's y
    float scale;
    int H, Hkv, hd;
    int bound;              // the tail runs while pos + 1 <= bound (0: never)
    int counter0;           // the groups' arrival counters [Hkv]
};

struct gemv_args {
    gemv_mat m[GGX_QGEMV_MAX_MATS];
    int n_mat, K;
    const float * x;
    const void * norm_w;
    int norm, norm_type;
    float norm_eps;
    const int32_t * pos;
    const float * freq_div;
    const float2 * rope_table;   // the step's (cos, sin) [T][n_rot / 2] (rope-table.cu), or null: computed here
    ggx_params_rope rope;
    int head_dim, act;
    int prefetch;
    int flags;           // k_flag_red, k_flag_one_deep (a field of each made k_qgemv<2,4> spill more)
    float evict_first;   // fraction of the weight loads marked L2 evict-first (GGX_QGEMV_EVICT_FIRST)
    int * counters;
    gemv_attn attn;
    ggx_trace_dev trace;   // GGX_CUDA_TRACE only
#if GGX_QGEMV_UNEVEN
    // K-slice lengths (uneven_dm): the first s0 K-slices of each tile m + dm fine slices per group,
    // the rest m - dm; `tiles` column tiles in all (the grid's x; block0: a matrix's first)
    int tiles, s0, dm;
#endif
};

// Asks the L1 (Level 1) or L2 (Level 2) cache to fetch the line holding p; a hint, nothing waits.
template <int Level>
__device__ __forceinline__ void prefetch(const void * p) {
#if defined(__CUDA_ARCH__) && !defined(GGX_USE_HIP)
    if constexpr (Level == 1) asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
    else asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

// The packed weights are read once per token, so their loads may be marked L2 evict-first
// (createpolicy: `evict` of them get that priority): the lines that are reused (x, the split-K
// partials, the KV cache, the kernels' code) then stay in L2 while ~120 MB of weights stream
// through it per layer. One policy per piece, made by piece_load for its loads: nothing held in
// registers across the loop. (Made inside each load, the policy was not merged across a piece's
// loads: k_qgemv<1,4> was 208 instructions longer and spilled 4 bytes.)
__device__ __forceinline__ uint64_t evict_policy(float evict) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(GGX_USE_HIP)
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, %1;" : "=l"(pol) : "f"(evict));
    return pol;
#else
    (void)evict;
    return 0;
#endif
}

__device__ __forceinline__ uint4 load_weights(const uint4 * p, uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(GGX_USE_HIP)
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
    return v;
#else
    (void)pol;
    return ggx_load_ro(p);
#endif
}

template <int T>
__device__ __forceinline__ void add_bias(const gemv_mat & M, int n, float (&v)[T][4]) {
    if (!M.bias) return;
#pragma unroll
    for (int c = 0; c < 4; c++)
        if (n + c < M.N)
#pragma unroll
            for (int t = 0; t < T; t++) v[t][c] += M.bias[n + c];
}

// Sums of the ns slices' partials for this thread's 4 columns (slice order: deterministic), + bias,
// for NM matrices of the same slicing at once (a GLU's gate and up: one memory latency for both),
// U slices' loads in flight before any is added (one memory latency per U slices, not per slice).
template <int T, int NM>
__device__ __forceinline__ void sum_partials(const gemv_mat * const (&Ms)[NM], int ns, int n, float (&v)[NM][T][4]) {
    constexpr int U = (16 / T + NM - 1) / NM;
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int t = 0; t < T; t++) v[m][t][0] = v[m][t][1] = v[m][t][2] = v[m][t][3] = 0.0f;
    if (n >= Ms[0]->Np) return;
    for (int s0 = 0; s0 < ns; s0 += U) {
        float4 p[NM][U][T];
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int t = 0; t < T; t++)
                    if (s0 + u < ns) p[m][u][t] = ggx_load_cg((const float4 *)(Ms[m]->partial + ((size_t)(s0 + u) * T + t) * Ms[m]->Np + n));
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int t = 0; t < T; t++)
                    if (s0 + u < ns) {
                        v[m][t][0] += p[m][u][t].x; v[m][t][1] += p[m][u][t].y; v[m][t][2] += p[m][u][t].z; v[m][t][3] += p[m][u][t].w;
                    }
    }
#pragma unroll
    for (int m = 0; m < NM; m++) add_bias<T>(*Ms[m], n, v[m]);
}

// A tile's result for this thread's 4 columns from its ns partials: the GLU's activation product
// (gate and up share the slicing: same shape), else the sums; + bias.
template <int T>
__device__ __forceinline__ void tile_result(const gemv_args & a, const gemv_mat & M, int ns, int n, float (&v)[T][4]) {
    if (M.epi == GGX_QGEMV_GLU) {
        const gemv_mat * gu[2] = {M.is_gate ? &M : &a.m[M.pair], M.is_gate ? &a.m[M.pair] : &M};
        float s[2][T][4];
        sum_partials<T, 2>(gu, ns, n, s);
#pragma unroll
        for (int t = 0; t < T; t++)
#pragma unroll
            for (int c = 0; c < 4; c++) v[t][c] = (a.act == GGX_ACT_SILU ? silu_f(s[0][t][c]) : gelu_f(s[0][t][c])) * s[1][t][c];
    } else {
        const gemv_mat * one[1] = {&M};
        float s[1][T][4];
        sum_partials<T, 1>(one, ns, n, s);
#pragma unroll
        for (int t = 0; t < T; t++)
#pragma unroll
            for (int c = 0; c < 4; c++) v[t][c] = s[0][t][c];
    }
}

// One piece (at most 32 rows of one group, or 64 of 2-4 bits in the paired tables; qmatrix.cu cuts
// them so) for a thread's 4 columns: its packed words (rows x bits / 32 per column, at most 8)
// and its scale. Built with GGX_QGEMV_PAIR_GROUPS=1 (decode-plan.h), a paired piece may join two
// groups (bit 4 of pc.z): its second 32 rows then take the next group's codes (sw's high 16 bits)
// and M' (mx's high half).
struct piece_regs {
    uint4    w[8];
    int4     pc;   // {k0, qrow0, group << 5 | across << 4 | bits, rows}
    uint32_t sw;   // the 4 columns' scale codes in the low 16 bits
#if GGX_QGEMV_PAIR_GROUPS
    half2    mx;   // M'_g, and M'_(g+1) of a piece across two groups (one register, as a half)
#else
    half     mx;   // M'_g
#endif
};

__device__ __forceinline__ half group_mx(const piece_regs & s) {
#if GGX_QGEMV_PAIR_GROUPS
    return __low2half(s.mx);
#else
    return s.mx;
#endif
}

// ---- 4-bit pieces on the tensor cores (GGX_QGEMV_MMA4) ----
// The fp16 pairs spend ~13 instructions on a 4-bit word (a LOP3, an HSUB2 for the zero point and an
// HFMA2 per pair of codes, plus the x pairs): ncu on gate/up (run 210, H100) counted 548 per 64-row
// piece of 4 columns, 2.9 per weight in all, and the loop streams ~28.5 GB/s per SM whatever the
// number of SMs (run 211: down on 96 or 112 blocks), so the SMs, not DRAM, bound it. Here a word
// costs a shift and four LOP3 (the codes as fp16 1024 + q, or 1024 + 16 q for the odd nibbles
// against x / 16, as the pairs take them) and one mma.sync m16n8k16 takes 16 columns x 16 rows.
//
// A warp's 128 columns are 4 blocks b of 32. Lane l = 4 g + t loads, for each 32-row half h of a
// piece, the words of columns 32 b + 4 g .. + 3 at word row 4 h + t, so the quad g holds all 32
// rows of those 4 columns (one uint4 per load, as the pairs' loads: 8 per 64-row piece). A's row g
// is column 4 g + 2 p of block b, row g + 8 column 4 g + 2 p + 1 (p = 0, 1: two accumulators); its k
// are the lane's nibbles (0, 4), (1, 5) [, (2, 6), (3, 7) after a shift by 8]. B holds x only in its
// column 2 b (the lanes of quad 2 b load x; the others a zero slot), so the four blocks' products
// land in different C columns and lane (g, t) ends with block t's columns 4 g + 2 p and 4 g + 2 p
// + 1 in C[0] and C[2]: its own 4 columns, no exchange per piece.
// The sums are fp32. The 1024 and the zero point come out of the same accumulators: one more mma
// per 16 rows whose A is -(1024 + z) (even nibbles) and -(1024 + 16 z) (odd, against x / 16) in
// every row and whose B is x in every column adds -sum (1024 + z) x to every C element, the odd
// columns included, which hold nothing else: one such mma per chain, and each chain adds the
// other's odd column at the end.
// In a warp whose 4-bit pieces take this path, every piece of the loop (of any width) sums the
// lane's columns 32 t + 4 g .. + 3 of the warp's 128 (tc4_cols), and the loop's end moves the sums
// to the pairs' layout (4 l ..) with one shuffle per column.
#if GGX_QGEMV_TC4
struct tc4_lane {
    bool on;   // one row, and all 128 columns of the warp exist: its 4-bit pieces come here
};

// Whether piece pc takes the tensor cores: 4 bits, whole 32-row halves, one group (pc.z & 31: the
// bits and the across-groups flag)
__device__ __forceinline__ bool tc4_piece(const tc4_lane & L, int4 pc) {
    return L.on && (pc.z & 31) == 4 && pc.w % 32 == 0;
}

// The first of lane l = 4 g + t's 4 columns, from n, the first of the pairs' (4 l of the warp's)
__device__ __forceinline__ int tc4_cols(int n) {
    const int lane = threadIdx.x % GGX_CUDA_WARP;
    return n - 4 * lane + 32 * (lane % 4) + 4 * (lane / 4);
}
#else
struct tc4_lane {};   // (the fp16 pairs only)
#endif

// A read-only half-word loaded straight into a 32-bit register (zero-extended by the load): from
// C++ a widening cvt would follow the load and wait for it.
__device__ __forceinline__ uint32_t load_u16_wide(const uint16_t * p) {
#if defined(__CUDA_ARCH__) && !defined(GGX_USE_HIP)
    uint32_t v;
    asm volatile("ld.global.nc.u16 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
#else
    return *p;
#endif
}

__device__ __forceinline__ void piece_load_from(const gemv_mat & M, int4 pc, int n, piece_regs & s, float evict,
                                                const tc4_lane & L) {
    s.pc = pc;
    const int bits = s.pc.z & 15, g = s.pc.z >> 5;
    const int nw = s.pc.w * bits / 32;
    const uint64_t pol = evict_policy(evict);
#if GGX_QGEMV_TC4
    // word i: row i, or on the tensor cores (n = tc4_cols) row 4 (i / 4) + t of columns n - 32 t +
    // 32 (i % 4), block i % 4 of half i / 4 (see tc4_lane). One address form for both (a branch
    // between two loops of loads spilled k_qgemv<1, 4>).
    int shift = 0;     // (t: the lane % 4)
    int step = M.Np;   // from word i to i + 1 inside a group of 4
    if (tc4_piece(L, pc)) {
        shift = (int)(threadIdx.x % 4) * (M.Np - 32);
        step = 32;
    }
    const uint32_t * base = M.qw + (size_t)s.pc.y * M.Np + n + shift;
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (i < nw) s.w[i] = load_weights((const uint4 *)(base + (size_t)(i / 4) * 4 * M.Np + (size_t)(i % 4) * step), pol);
#else
    (void)L;
    const uint32_t * base = M.qw + (size_t)s.pc.y * M.Np + n;
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (i < nw) s.w[i] = load_weights((const uint4 *)(base + (size_t)i * M.Np), pol);
#endif
    const uint32_t * qs = M.qs + (size_t)g * (M.Np / 8) + n / 8;
    // the 4 columns' codes as one half-word (n % 8 is 0 or 4; little-endian), so that no shift
    // of the loaded word waits for it before the PDL wait: the late-entering blocks reach their
    // wait ~0.8 us sooner (run 206, H100, llama3-8b: tg128@16 4.0 +0.9%, 3.0 +1.6%, llama3.2-1b
    // +1.0%, 4.0 @4096 +0.2% against the word shifted)
    s.sw = load_u16_wide((const uint16_t *)qs + (n % 8) / 4);
#if GGX_QGEMV_PAIR_GROUPS
    if (s.pc.z & 16) {   // warp-uniform: every lane walks the same piece
        s.sw = (s.sw & 0xffffu) | (ggx_load_ro(qs + M.Np / 8) >> (4 * (n % 8))) << 16;
        s.mx = __halves2half2(M.qsmax[g], M.qsmax[g + 1]);
    } else {
        s.mx = __half2half2(M.qsmax[g]);
    }
#else
    s.mx = M.qsmax[g];
#endif
}

// piece p: its descriptor, then (one L2 round trip later) its words and scale
__device__ __forceinline__ void piece_load(const gemv_mat & M, int p, int n, piece_regs & s, float evict, const tc4_lane & L) {
    piece_load_from(M, ggx_load_ro(M.pieces + p), n, s, evict, L);
}

// v[t][c] += scale_c * sum over the piece's rows of (q - z) x[t][row]: the sum in fp16 pairs (at
// most 16 products per half, x scaled so that it cannot overflow: see the staging), then fp32.
// sw: the 4 columns' codes in its low 16 bits; mx: the group's M'.
template <int T>
__device__ __forceinline__ void piece_scale(uint32_t sw, half mx, const half2 (&acc)[T][4], float (&v)[T][4]) {
    const half2 mx2 = __half2half2(mx);
#pragma unroll
    for (int c2 = 0; c2 < 2; c2++) {   // columns 2 c2 and 2 c2 + 1
        const float2 sc = __half22float2(scale_pair(sw >> (8 * c2), mx2));
#pragma unroll
        for (int t = 0; t < T; t++) {
            const float2 f0 = __half22float2(acc[t][2 * c2]), f1 = __half22float2(acc[t][2 * c2 + 1]);
            v[t][2 * c2] = fmaf(f0.x + f0.y, sc.x, v[t][2 * c2]);
            v[t][2 * c2 + 1] = fmaf(f1.x + f1.y, sc.y, v[t][2 * c2 + 1]);
        }
    }
}
template <int T>
__device__ __forceinline__ void piece_scale(const piece_regs & s, const half2 (&acc)[T][4], float (&v)[T][4]) {
    piece_scale<T>(s.sw, group_mx(s), acc, v);
}

// A one-row piece of at most 64 rows of B <= 4 bits: its first 32 rows, then (a paired table's
// 64-row piece) the next 32 from word row B, each half scaled on its own (the second with the
// next group's scales when the piece joins two groups), as the plain table's two pieces are.
// Built with GGX_QGEMV_COMPACT_HALVES=1 (bench/variants.sh: compact; a measurement), the two
// halves run one copy of the code: the second half's words move to the front (they have arrived:
// the first half waited for the piece's loads) and the loop runs again. The decode GEMVs run their
// loops only a few times per warp (o at 4.0 bpw: each instruction once), so a smaller loop body
// means fewer instruction-cache misses (ncu, run 160: 36% of o's stall cycles were "no
// instruction", measured with the caches flushed) for 4 moves per half-row of words.
template <int B>
__device__ __forceinline__ void piece_halves(piece_regs & s, const half * xp, int ld, half2 (&acc)[1][4], float (&v)[1][4]) {
#if GGX_QGEMV_COMPACT_HALVES
    const int halves = s.pc.w > 32 ? 2 : 1;
#pragma unroll 1
    for (int h = 0; h < halves; h++) {
        if (h) {
            acc[0][0] = acc[0][1] = acc[0][2] = acc[0][3] = __float2half2_rn(0.0f);
#pragma unroll
            for (int i = 0; i < B; i++) s.w[i] = s.w[B + i];
        }
        piece_dot<B, 1>(s.w, min(s.pc.w - 32 * h, 32), xp + 32 * h, ld, acc);
#if GGX_QGEMV_PAIR_GROUPS
        if (h && (s.pc.z & 16)) {
            piece_scale<1>(s.sw >> 16, __high2half(s.mx), acc, v);
            continue;
        }
#endif
        piece_scale<1>(s, acc, v);
    }
#else
    piece_dot<B, 1>(s.w, min(s.pc.w, 32), xp, ld, acc);
    piece_scale<1>(s, acc, v);
    if (s.pc.w > 32) {
        acc[0][0] = acc[0][1] = acc[0][2] = acc[0][3] = __float2half2_rn(0.0f);
        piece_dot<B, 1, B>(s.w, 32, xp + 32, ld, acc);
#if GGX_QGEMV_PAIR_GROUPS
        if (s.pc.z & 16) {
            piece_scale<1>(s.sw >> 16, __high2half(s.mx), acc, v);
            return;
        }
#endif
        piece_scale<1>(s, acc, v);
    }
#endif
}

#if GGX_QGEMV_TC4
// v[c] += the 4-bit piece's sums for the lane's columns tc4_cols(n) + c, scaled (see tc4_lane); xb,
// ld: the x rows as piece_apply has them, x in B order ld halves further; zero: 16 zero bytes
__device__ __forceinline__ void tc4_apply(const piece_regs & s, const half * xb, int ld, const uint4 * zero, float (&v)[4]) {
    constexpr uint32_t lo = 0x000f000fu, hi = 0x00f000f0u, magic = 0x64006400u;
    // -(1024 + 8) and -(1024 + 128) = -16 (64 + 8) as fp16 pairs: the bias rows' A (z = 8)
    constexpr uint32_t neven = 0xe408e408u, nodd = 0xe480e480u;
    const uint32_t ab[4] = {neven, neven, nodd, nodd};
    // Quad g = 2 b gives block b's x in B's column 2 b, the odd quads zeros: C[1] and C[3] (the odd
    // columns) get no products. The bias rows' two mma (16 rows each, x in every column) go one to
    // each chain, so that c0[1] and c1[1] hold the two parts of the bias (the same sum in every
    // row) and each chain is 9 mma deep (run 213: two chains of 10, four bias mma).
    const int lane = threadIdx.x % GGX_CUDA_WARP, g = lane / 4;
    const int own = g % 2 ? -1 : g / 2;   // the block whose x the lane gives
    const uint4 * xr = (const uint4 *)(xb + ld) + s.pc.x / 8 + lane % 4;
    const half2 mx2 = __half2half2(group_mx(s));
    const half2 h01 = scale_pair(s.sw, mx2), h23 = scale_pair(s.sw >> 8, mx2);   // (fp16: two registers, not four)
    // each 32-row half is scaled on its own, as the plain tables' 32-row pieces are (the same bits)
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (h * 32 >= s.pc.w) break;
        // columns 4 g + 0 | 1 (c0), 4 g + 2 | 3 (c1): two chains (four spilled k_qgemv<1, 4>: 32 bytes)
        float c0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const uint4 xa = xr[4 * h];   // x in every column: the bias rows
        mma16816(c0, ab, xa.x, xa.y);
        mma16816(c1, ab, xa.z, xa.w);
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const uint4 x = *(b == own ? xr + 4 * h : zero);
            const uint4 w = s.w[4 * h + b];
            const uint32_t a0[4] = {and_or<lo>(w.x, magic), and_or<lo>(w.y, magic), and_or<hi>(w.x, magic), and_or<hi>(w.y, magic)};
            const uint32_t a1[4] = {and_or<lo>(w.z, magic), and_or<lo>(w.w, magic), and_or<hi>(w.z, magic), and_or<hi>(w.w, magic)};
            mma16816(c0, a0, x.x, x.y);
            mma16816(c1, a1, x.x, x.y);
            const uint32_t sx = w.x >> 8, sy = w.y >> 8, sz = w.z >> 8, sw = w.w >> 8;
            const uint32_t a2[4] = {and_or<lo>(sx, magic), and_or<lo>(sy, magic), and_or<hi>(sx, magic), and_or<hi>(sy, magic)};
            const uint32_t a3[4] = {and_or<lo>(sz, magic), and_or<lo>(sw, magic), and_or<hi>(sz, magic), and_or<hi>(sw, magic)};
            mma16816(c0, a2, x.z, x.w);
            mma16816(c1, a3, x.z, x.w);
        }
        const float2 s01 = __half22float2(h01), s23 = __half22float2(h23);
        // each chain's even columns hold its bias part already: add the other chain's
        v[0] = fmaf(c0[0] + c1[1], s01.x, v[0]);
        v[1] = fmaf(c0[2] + c1[1], s01.y, v[1]);
        v[2] = fmaf(c1[0] + c0[1], s23.x, v[2]);
        v[3] = fmaf(c1[2] + c0[1], s23.y, v[3]);
    }
}
#endif

template <int T>
__device__ __forceinline__ void piece_apply(piece_regs & s, const half * xb, int ld, float (&v)[T][4], const tc4_lane & L,
                                            const uint4 * zero) {
    (void)zero;
    (void)L;
    half2 acc[T][4];
#pragma unroll
    for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = __float2half2_rn(0.0f);
    const half * xp = xb + s.pc.x;
    if constexpr (T == 1) {
        // One-row jobs may walk the paired table: a 2-, 3- or 4-bit piece of 64 rows is summed as
        // its two 32-row halves (the second from word row `bits`), each scaled on its own, which
        // is what the plain table's two pieces do. Each width scales in its own case (one shared
        // tail after the switch spilled here).
        switch (s.pc.z & 15) {
            case 8: piece_dot<8, T>(s.w, s.pc.w, xp, ld, acc); piece_scale<T>(s, acc, v); break;
            case 6: piece_dot<6, T>(s.w, s.pc.w, xp, ld, acc); piece_scale<T>(s, acc, v); break;
            case 5: piece_dot<5, T>(s.w, s.pc.w, xp, ld, acc); piece_scale<T>(s, acc, v); break;
            case 4:
#if GGX_QGEMV_TC4
                if (tc4_piece(L, s.pc)) { tc4_apply(s, xb, ld, zero, v[0]); break; }
#endif
                piece_halves<4>(s, xp, ld, acc, v); break;
            case 3: piece_halves<3>(s, xp, ld, acc, v); break;
            default: piece_halves<2>(s, xp, ld, acc, v); break;
        }
    } else {
        switch (s.pc.z & 15) {
            case 8: piece_dot<8, T>(s.w, s.pc.w, xp, ld, acc); break;
            case 6: piece_dot<6, T>(s.w, s.pc.w, xp, ld, acc); break;
            case 5: piece_dot<5, T>(s.w, s.pc.w, xp, ld, acc); break;
            case 4: piece_dot<4, T>(s.w, s.pc.w, xp, ld, acc); break;
            case 3: piece_dot<3, T>(s.w, s.pc.w, xp, ld, acc); break;
            default: piece_dot<2, T>(s.w, s.pc.w, xp, ld, acc); break;
        }
        piece_scale<T>(s, acc, v);
    }
}

// ---- attention in the tail of a one-row q/k/v job ----
// The attention kernel after the q/k/v GEMV spends ~6 us per layer at short contexts (run 160's
// trace, H100), most of it fixed costs; here the GEMV's last blocks do its work while their SMs are
// busy anyway. Part A, by the last block of each q tile: the online-softmax state of the tile's
// heads over the keys before pos (rows earlier steps wrote). Part B, by the last of a group's
// producers to arrive (its q tiles after part A, the k and v tiles holding its KV head after their
// cache stores): the key at pos merged into that state, and the result. No block waits for
// another, so any grid size and block order is safe (tests/emu runs it in three orders).
constexpr int k_attn_rounds = 8;   // keys each thread has in flight per kv head in part A

// 8 halves of a 16-byte load as floats
__device__ __forceinline__ void halves8(const uint4 & u, float (&f)[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 p = __half22float2(u32_as_half2(w[i]));
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
    }
}

// The 16 bytes at p of cache rows j, j + step, ... (k_attn_rounds of them, all loads in flight);
// zeros past row `end`.
__device__ __forceinline__ void attn_rows(const half * p, size_t row, int j, int step, int end, uint4 (&r)[k_attn_rounds]) {
#pragma unroll
    for (int i = 0; i < k_attn_rounds; i++)
        r[i] = j + i * step < end ? *(const uint4 *)(p + (size_t)(j + i * step) * row) : make_uint4(0, 0, 0, 0);
}

// Floats of shared memory the tail of a q tile uses (part A): the tile's q, the scores of its nh
// heads, their (m, l), and the warps' sums over their keys of four heads' values.
__host__ __device__ inline int attn_smem_floats(int NT, int hd, int bound) {
    const int nh = k_tile / hd;
    return nh * hd + nh * bound + 2 * nh + NT / GGX_CUDA_WARP * 4 * hd;
}

// Part A for the q tile's heads h0 .. h0 + nh - 1 over keys 0 .. pos - 1: state[h] = (acc[hd], m,
// l), m the largest score, l = sum_j e^(s_j - m), acc = sum_j e^(s_j - m) v_j. sm starts with the
// tile's q already scaled ([nh][hd], written by the caller). Thread (dc, kc) holds the 8 columns
// dc of keys kc, kc + n_kc, ...: its K and V chunks are 16-byte loads, k_attn_rounds of them in
// flight; a score is the sum over the D = hd / 8 lanes of a key (shuffles), a value sum the sum
// over the key chunks (shuffles in the warp, then the warps in shared memory).
template <int NT>
__device__ __noinline__ void attn_part_a(const gemv_attn & at, int h0, int nh, int pos, float * sm) {
    const int hd = at.hd, G = at.H / at.Hkv, D = hd / 8, n_kc = NT / D;
    const int dc = threadIdx.x % D, kc = threadIdx.x / D, warp = threadIdx.x / GGX_CUDA_WARP, lane = threadIdx.x % GGX_CUDA_WARP;
    const float * qs = sm;             // [nh][hd]
    float * sc = sm + nh * hd;         // [nh][pos]: scores, then e^(s - m)
    float * ml = sc + nh * pos;        // [nh][2]
    float * red = ml + 2 * nh;         // [NT / 32][4][hd]
    const int kv_first = h0 / G, kv_last = (h0 + nh - 1) / G;
    constexpr int R = k_attn_rounds;
    for (int kvh = kv_first; kvh <= kv_last; kvh++) {
        const int ha = max(0, kvh * G - h0), hb = min(nh, (kvh + 1) * G - h0);   // the tile's heads reading kvh
        const half * K = at.k + (size_t)kvh * hd + dc * 8;
        for (int j0 = 0; j0 < pos; j0 += R * n_kc) {
            uint4 kr[R];
            attn_rows(K, (size_t)at.Hkv * hd, j0 + kc, n_kc, pos, kr);
#pragma unroll
            for (int i = 0; i < R; i++) {
                if (j0 + i * n_kc >= pos) break;   // (the same for the whole block: the shuffles stay converged)
                float kf[8];
                halves8(kr[i], kf);
                const int j = j0 + kc + i * n_kc;
                for (int hl = ha; hl < hb; hl++) {
                    const float4 q0 = *(const float4 *)(qs + hl * hd + dc * 8), q1 = *(const float4 *)(qs + hl * hd + dc * 8 + 4);
                    float s = q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] + q1.x * kf[4] + q1.y * kf[5] + q1.z * kf[6] + q1.w * kf[7];
                    for (int o = D / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                    if (dc == 0 && j < pos) sc[hl * pos + j] = s;
                }
            }
        }
    }
    __syncthreads();
    for (int hl = warp; hl < nh; hl += NT / GGX_CUDA_WARP) {
        float m = -INFINITY;
        for (int j = lane; j < pos; j += GGX_CUDA_WARP) m = fmaxf(m, sc[hl * pos + j]);
        m = ggx_warp_max(m);
        float l = 0.0f;
        for (int j = lane; j < pos; j += GGX_CUDA_WARP) {
            const float p = __expf(sc[hl * pos + j] - m);
            sc[hl * pos + j] = p;
            l += p;
        }
        l = ggx_warp_sum(l);
        if (lane == 0) { ml[2 * hl] = m; ml[2 * hl + 1] = l; }
    }
    __syncthreads();
    for (int kvh = kv_first; kvh <= kv_last; kvh++) {
        const int ha = max(0, kvh * G - h0), hb = min(nh, (kvh + 1) * G - h0);
        const half * V = at.v + (size_t)kvh * hd + dc * 8;
        for (int hg = ha; hg < hb; hg += 4) {   // four heads' sums at a time
            float acc[4][8];
#pragma unroll
            for (int h = 0; h < 4; h++)
#pragma unroll
                for (int e = 0; e < 8; e++) acc[h][e] = 0.0f;
            for (int j0 = 0; j0 < pos; j0 += R * n_kc) {
                uint4 vr[R];
                attn_rows(V, (size_t)at.Hkv * hd, j0 + kc, n_kc, pos, vr);
#pragma unroll
                for (int i = 0; i < R; i++) {
                    const int j = j0 + kc + i * n_kc;
                    if (j >= pos) break;
                    float vf[8];
                    halves8(vr[i], vf);
#pragma unroll
                    for (int h = 0; h < 4; h++) {
                        if (hg + h >= hb) break;
                        const float p = sc[(hg + h) * pos + j];
#pragma unroll
                        for (int e = 0; e < 8; e++) acc[h][e] = fmaf(p, vf[e], acc[h][e]);
                    }
                }
            }
            // the key chunks of a warp (lanes dc, dc + D, ...), then the warps
#pragma unroll
            for (int h = 0; h < 4; h++)
#pragma unroll
                for (int e = 0; e < 8; e++)
                    for (int o = D; o < GGX_CUDA_WARP; o <<= 1) acc[h][e] += __shfl_xor_sync(0xffffffffu, acc[h][e], o);
            const int nhg = min(4, hb - hg);
            if (lane < D)
#pragma unroll
                for (int h = 0; h < 4; h++)
                    if (h < nhg)
#pragma unroll
                        for (int e = 0; e < 8; e++) red[(warp * 4 + h) * hd + dc * 8 + e] = acc[h][e];
            __syncthreads();
            for (int t = threadIdx.x; t < nhg * hd; t += NT) {
                float sum = 0.0f;
                for (int w = 0; w < NT / GGX_CUDA_WARP; w++) sum += red[w * 4 * hd + t];   // in warp order: deterministic
                const int hl = hg + t / hd, d = t % hd;
                float * st = at.state + (size_t)(h0 + hl) * (hd + 2);
                st[d] = sum;
                if (d == 0) { st[hd] = ml[2 * hl]; st[hd + 1] = ml[2 * hl + 1]; }
            }
            __syncthreads();
        }
    }
}

// Part B for group g (KV head g, query heads g G .. g G + G - 1): the key at pos merged into part
// A's state; one warp per head. Everything it reads other blocks wrote in this launch: L2 loads.
template <int NT>
__device__ __noinline__ void attn_part_b(const gemv_attn & at, int g, int pos) {
    const int hd = at.hd, G = at.H / at.Hkv, warp = threadIdx.x / GGX_CUDA_WARP, lane = threadIdx.x % GGX_CUDA_WARP;
    const half * kp = at.k + ((size_t)pos * at.Hkv + g) * hd;
    const half * vp = at.v + ((size_t)pos * at.Hkv + g) * hd;
    for (int hh = warp; hh < G; hh += NT / GGX_CUDA_WARP) {
        const int h = g * G + hh;
        const float * q = at.q + (size_t)h * hd;
        const float * st = at.state + (size_t)h * (hd + 2);
        float s = 0.0f;
        for (int d = lane; d < hd; d += GGX_CUDA_WARP) s += ggx_load_cg(q + d) * __half2float(ggx_load_cg(kp + d));
        s = ggx_warp_sum(s) * at.scale;
        const float m = ggx_load_cg(st + hd), l = ggx_load_cg(st + hd + 1);
        const float mn = fmaxf(m, s), wa = __expf(m - mn), wb = __expf(s - mn), ln = l * wa + wb;   // m = -inf (pos 0): wa = 0
        for (int d = lane; d < hd; d += GGX_CUDA_WARP)
            at.out[(size_t)h * hd + d] = (ggx_load_cg(st + d) * wa + wb * __half2float(ggx_load_cg(vp + d))) / ln;
    }
}

// The tail of a tile's last block in a job with attention (every thread calls it, after the
// block's results are stored): part A for a q tile, the arrival at each group the tile feeds, and
// part B for the groups it arrives at last. qv: a lead thread's 4 columns of q after RoPE (has_q).
// flag: a shared int.
template <int NT>
__device__ __noinline__ void attn_tail(const gemv_args & a, const gemv_mat & M, int tile, float4 qv, bool has_q, float * sm, int & flag,
                                       const int * trace_slot) {
    const gemv_attn & at = a.attn;
    const int pos = a.pos[0];
    if (!ggx_attn_tail_takes(pos, at.bound)) return;   // the attention kernel does it
    const int hd = at.hd, G = at.H / at.Hkv;
    const int c0 = tile * k_tile, h0 = c0 / hd, nh = min(k_tile, M.N - c0) / hd;   // the tile's heads (of q, or of k and v)
    int g_first = h0, g_last = h0 + nh - 1;      // k, v: a KV head is a group
    if (M.attn_role == 1) {
        __syncthreads();   // the block's x rows, group sums and RoPE tile are dead
        if (has_q) {
            const float q4[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
            for (int c = 0; c < 4; c++)
                if (c0 + (int)threadIdx.x * 4 + c < M.N) sm[threadIdx.x * 4 + c] = q4[c] * at.scale;
        }
        __syncthreads();
        attn_part_a<NT>(at, h0, nh, pos, sm);
        ggx_trace_stamp(a.trace, trace_slot, GGX_TRACE_A);   // (the trace's A, B, C: part A, the arrival, part B)
        g_first = h0 / G;
        g_last = (h0 + nh - 1) / G;
    }
    __threadfence();   // this block's q, cache rows or state before its arrivals
    __syncthreads();
    if (threadIdx.x == 0) {
        int mine = 0;
        for (int g = g_first; g <= g_last; g++) {
            const int q_tiles = ((g + 1) * G * hd - 1) / k_tile - g * G * hd / k_tile + 1;   // the q tiles holding its heads
            int * ctr = a.counters + at.counter0 + g;
            if (atomicAdd(ctr, 1) == q_tiles + 1) {   // q_tiles + 2 arrivals with the k and v tiles': this one is last
                *ctr = 0;   // ready for the next launch
                mine |= 1 << (g - g_first);
            }
        }
        flag = mine;
    }
    __syncthreads();
    const int mine = flag;
    ggx_trace_stamp(a.trace, trace_slot, GGX_TRACE_B);
    if (!mine) return;
    __threadfence();
    for (int g = g_first; g <= g_last; g++)
        if (mine >> (g - g_first) & 1) attn_part_b<NT>(at, g, pos);
    ggx_trace_stamp(a.trace, trace_slot, GGX_TRACE_C);
}

// Whether column lc of a tile is rotated (a tile holds whole heads), and its pair's index i in
// the step's table (cos, sin of pair i)
__device__ __forceinline__ bool rope_pair(const gemv_args & a, int lc, int & i) {
    const int d = lc % a.head_dim, half = a.rope.n_rot / 2;
    i = a.rope.mode == GGX_ROPE_NEOX ? (d < half ? d : d - half) : d / 2;
    return d < a.rope.n_rot;
}

// Copy: a second instantiation of the same code at other addresses (GGX_QGEMV_CODE_COPY_FOR: what
// running other code between two launches costs them; measurements only). Kept also because
// k_qgemv<1, 4>'s SASS depends on it: without the second instantiation (built with
// GGX_QGEMV_CODE_COPY=0, bench/variants.sh: nocopy), the compiler lays out the first differently
// (+128 bytes, session 51), and that build has not run on a GPU.
#ifndef GGX_QGEMV_CODE_COPY
#define GGX_QGEMV_CODE_COPY 1
#endif
template <int T, int W = groups_for(T), int Copy = 0>
__global__ void __launch_bounds__(k_group * W, 1) k_qgemv(const __grid_constant__ gemv_args a) {
    constexpr int NT = k_group * W;
    extern __shared__ float4 smem4[];
    float * smem = (float *)smem4;    // x rows [T][W * R] in fp16 (or the groups' sums), then the RoPE tile [T][k_tile]
    __shared__ float red[T][NT / GGX_CUDA_WARP], redmax[T][NT / GGX_CUDA_WARP];
    __shared__ int last, trace_slot;
#if GGX_QGEMV_TC4
    __shared__ uint4 tc4_zero;   // B's zeros (tc4_apply)
    const uint4 * zero = &tc4_zero;
#else
    const uint4 * zero = nullptr;
#endif
    ggx_trace_begin(a.trace, &trace_slot);

#if GGX_QGEMV_UNEVEN
    // a grid of (tiles, K-slices), whose blocks start in the order x, then y: the blocks that enter
    // last, behind the previous kernel's, hold late K-slices, which may be shorter (uneven_dm)
    const int slice = blockIdx.y, g = blockIdx.x;
    int mi = 0;
#pragma unroll
    for (int i = 1; i < GGX_QGEMV_MAX_MATS; i++)
        if (i < a.n_mat && g >= a.m[i].block0) mi = i;
    const gemv_mat & M = a.m[mi];
    const int grp = threadIdx.x / k_group, lt = threadIdx.x % k_group;
    const int sh = M.pair_shift;   // with the paired table, fine, m and dm are even
    const int tile = g - M.block0;
    const int m = slice < a.s0 ? M.m + a.dm : M.m - a.dm;
    const int f0 = slice < a.s0 ? slice * W * m : a.s0 * W * (M.m + a.dm) + (slice - a.s0) * W * m;
    const int fine = f0 + grp * m;   // this group's first fine slice
    const bool active = fine < M.n_fine;
    const int ldx = W * m * k_fine;
    const int k_begin = f0 * k_fine, k_n = min(ldx, M.K - k_begin);
#else
    int mi = 0;
#pragma unroll
    for (int i = 1; i < GGX_QGEMV_MAX_MATS; i++)
        if (i < a.n_mat && (int)blockIdx.x >= a.m[i].block0) mi = i;
    const gemv_mat & M = a.m[mi];
    const int grp = threadIdx.x / k_group, lt = threadIdx.x % k_group;
    const int local = blockIdx.x - M.block0;
    const int sh = M.pair_shift;   // with the paired table, fine and m are even
    const int tile = local / M.n_slices, slice = local - tile * M.n_slices;
    const int & m = M.m;   // (an alias: a copy changed the multi-row kernels' SASS)
    const int fine = (slice * W + grp) * m;   // this group's first fine slice
    const bool active = fine < M.n_fine;
    const int ldx = W * m * k_fine;
    const int k_begin = slice * ldx, k_n = min(ldx, M.K - k_begin);
#endif
    // the first three descriptors and the piece range in one round trip, from this group's head
    // record and the next group's (each address known from the block index): the late-entering
    // blocks reach their loops sooner (run 205, H100, llama3-8b: tg128@16 4.0 +1.1%, 3.0 +0.5%,
    // llama3.2-1b 4.0 +0.6%, 4.0 @4096 +0.7% against slice_first, then the pieces)
    int4 h0 = {}, h1 = {}, h2 = {}, hb = {}, he = {};
    if (active) {
        const int4 * hp = M.heads + 4 * (fine >> sh);
        h0 = ggx_load_ro(hp);
        h1 = ggx_load_ro(hp + 1);
        h2 = ggx_load_ro(hp + 2);
        hb = ggx_load_ro(hp + 3);
        he = ggx_load_ro(M.heads + 4 * ((min(fine + m, M.n_fine) + sh) >> sh) + 3);
    }
    const int p_begin = hb.x, p_end = he.x;
    const int n = tile * k_tile + lt * 4;

    const bool work = n < M.Np && p_begin < p_end;
    const bool one_piece = T == 1 && (a.flags & k_flag_one_deep);
    // RoPE factors of this thread's columns: they depend only on inputs (pos is uploaded before
    // the graph runs), so they are computed (or read from the step's table: rope-table.cu) while
    // the weights load; the epilogue of the tile's last block reads them back (the double-
    // precision angle at the end of the last block made the qkv launch several us longer)
    float * tb = smem + T * max(ldx / 2 + tc4_floats(T, ldx), (W - 1) * k_tile);   // RoPE tile, past the x rows and group sums
    float2 * rcs = (float2 *)(tb + T * k_tile);                      // [T][k_tile] (cos, sin)
    // One row's table values wait in registers (rope_regs), loaded before anything else, and reach
    // shared memory just before the PDL wait: a store of a loaded value stalls its warp until the
    // load returns, and an L2 round trip issued behind the first pieces takes 1-2 us while other
    // SMs stream weights (run 204: storing them after the wait instead gains nothing more).
    const bool rope_regs = T == 1 && M.rope && a.rope_table && grp == 0;
    float2 rope_early[4] = {};
    if (rope_regs)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int i;
            if (rope_pair(a, lt * 4 + c, i)) rope_early[c] = a.rope_table[i];
        }
    auto rope_store = [&] {
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int i;
            if (rope_pair(a, lt * 4 + c, i)) rcs[lt * 4 + c] = rope_early[c];
        }
    };

    // 1. static data first, before waiting for the previous kernel: the first two pieces into
    //    registers, and the next a.prefetch rows of packed words into L2 (the whole slice
    //    overflowed L2 on the head, 546 MB read for 394 MB of weights). Loading the first pieces
    //    after the wait instead, so that none of them runs under the previous kernel's last round
    //    trips, loses for every job (run 200, H100, llama3-8b 4.0: o -4.4%, down -5.4%, gate/up
    //    -2.8%, q/k/v -0.4%): the trips hit L2 (ncu: each GEMV reads from DRAM little beyond its
    //    weights), and the loads' head start is worth more.
    //    The descriptors come from the head records above, then the words go out. Blocks that
    //    enter as the previous kernel's blocks exit (76 of q/k/v's 96 behind down) are past its
    //    release before they reach their wait, so this part is on their critical path: one
    //    descriptor per round trip (four or five in a row with the RoPE values) took their median
    //    block 5.4 us from entry to its wait, the four in one trip after slice_first 4.6 (run 204,
    //    H100, llama3-8b 4.0: tg128@16 +0.6% at 4.0 and 3.0, +0.1% on llama3.2-1b, +0.5% @4096).
    // the loop's columns: n, or in a warp whose 4-bit pieces take the tensor cores tc4_cols(n)
    tc4_lane L;
    int nl = n;
#if GGX_QGEMV_TC4
    L.on = T == 1 && n - 4 * (int)(threadIdx.x % GGX_CUDA_WARP) + 4 * GGX_CUDA_WARP <= M.Np;   // warp-uniform
    if (L.on) nl = tc4_cols(n);
#endif
    piece_regs A, B;
    if (work) {
        // (h1, h2 are clamped to the table's last piece: used only when inside this range)
        piece_load_from(M, h0, nl, A, a.evict_first, L);
        if (p_begin + 1 < p_end && !one_piece) piece_load_from(M, h1, nl, B, a.evict_first, L);
        if (a.prefetch > 0 && p_begin + 2 < p_end) {
            const int q1 = min(he.y, h2.y + a.prefetch);   // he.y: where piece p_end - 1 ends
            for (int r = h2.y; r < q1; r++) prefetch<2>(M.qw + (size_t)r * M.Np + n);
        }
    }
    if (M.rope && grp == 0 && !rope_regs) {
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int lc = lt * 4 + c;
            int i;
            if (!rope_pair(a, lc, i)) continue;
#pragma unroll
            for (int t = 0; t < T; t++) {
                if (a.rope_table) {
                    rcs[t * k_tile + lc] = a.rope_table[t * (a.rope.n_rot / 2) + i];
                } else {
                    float cs, sn;
                    ggx_rope_cos_sin(a.pos[t], i, a.freq_div, a.rope, cs, sn);
                    rcs[t * k_tile + lc] = make_float2(cs, sn);
                }
            }
        }
    }

    // this thread's rows of x: their sources through q_perm and their norm weights are static too
    // (at most k_stage of them: a block stages W * m * 32 <= 1024 W rows with 128 W threads)
    int src[k_stage];
    float nw[k_stage];
#pragma unroll
    for (int j = 0; j < k_stage; j++) {
        const int i = threadIdx.x + j * NT, k = k_begin + i;
        src[j] = i < k_n ? (M.perm ? M.perm[k] : k) : -1;
        nw[j] = !a.norm || !a.norm_w || i >= k_n ? 1.0f : M.norm_wp ? M.norm_wp[k] : ggx_load_any(a.norm_w, a.norm_type, src[j]);
    }
    if (rope_regs) rope_store();
    ggx_pdl_wait();
    ggx_pdl_launch_next();
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_WAITED);

    // 2. x rows of this block (through q_perm), optionally RMS-normalised; the rows' loads go out
    //    before the sum of squares' so that the two round trips overlap
    const int K = a.K;
    float xv[k_stage][T];
#pragma unroll
    for (int j = 0; j < k_stage; j++)
#pragma unroll
        for (int t = 0; t < T; t++) xv[j][t] = src[j] >= 0 ? a.x[(size_t)t * K + src[j]] : 0.0f;
    // With k_flag_red (one row, an ADD epilogue in place: y holds the residual), every K-slice adds its
    // sums into y with vector reductions and exits: no partials, no counter, no last block, so the
    // tile's tail and its two L2 round trips (the count, the partials) leave the layer's chain;
    // the next kernel's PDL wait returns once the reductions are done. The probe handoff-chain.cu
    // (run 174, H100) put a chain of such kernels at the speed of kernels with no hand-off at all,
    // 1.4-1.6 us per kernel faster than the split-K hand-off. The sums' order is not fixed.
    // A q/k/v matrix whose ATTN node reads the q/k/v rows (M.rows; one row) does the same there:
    // each K-slice rotates its sums (RoPE is linear; slice 0 adds the bias first, as the
    // epilogue would before RoPE) and adds them into the rows, which the attention kernel reads,
    // storing k and v into the caches itself. A probe (run 184, H100: every K-slice storing or
    // adding its own sums, wrong results) put removing q/k/v's tail at +3.5% on llama3-8b 4.0 and
    // +5.3% on llama3.2-1b.
    const bool reduce = T == 1 && (((a.flags & k_flag_red) && M.in_place) || M.rows);
    float rinv[T];
#pragma unroll
    for (int t = 0; t < T; t++) rinv[t] = 1.0f;
    if (a.norm) {
#pragma unroll
        for (int t = 0; t < T; t++) {
            float ss = 0.0f;
            for (int i = threadIdx.x * 4; i < K; i += NT * 4) {
                const float4 x4 = *(const float4 *)(a.x + (size_t)t * K + i);
                ss += x4.x * x4.x + x4.y * x4.y + x4.z * x4.z + x4.w * x4.w;
            }
            ss = ggx_warp_sum(ss);
            if (threadIdx.x % GGX_CUDA_WARP == 0) red[t][threadIdx.x / GGX_CUDA_WARP] = ss;
        }
        __syncthreads();
#pragma unroll
        for (int t = 0; t < T; t++) {
            float s = 0.0f;
#pragma unroll
            for (int w = 0; w < NT / GGX_CUDA_WARP; w++) s += red[t][w];
            rinv[t] = rsqrtf(s / (float)K + a.norm_eps);
        }
    }
    float amax[T];
#pragma unroll
    for (int t = 0; t < T; t++) amax[t] = 0.0f;
#pragma unroll
    for (int j = 0; j < k_stage; j++) {
        if (src[j] < 0) continue;
#pragma unroll
        for (int t = 0; t < T; t++) {
            if (a.norm) xv[j][t] *= rinv[t] * nw[j];
            amax[t] = fmaxf(amax[t], fabsf(xv[j][t]));
        }
    }
    // The products are summed in fp16 (piece_apply): the block's x rows are scaled by a power of
    // two (exact) that brings their largest magnitude into [8, 16), so that a piece's 16 products
    // per half stay below 16 * 128 * 16 = 32768 for every width (|q - z| <= 128) and small
    // values keep their precision; the sums are scaled back in fp32.
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float m = ggx_warp_max(amax[t]);
        if (threadIdx.x % GGX_CUDA_WARP == 0) redmax[t][threadIdx.x / GGX_CUDA_WARP] = m;
    }
    __syncthreads();
    float xscale[T], xunscale[T];
#pragma unroll
    for (int t = 0; t < T; t++) {
        float m = 0.0f;
#pragma unroll
        for (int w = 0; w < NT / GGX_CUDA_WARP; w++) m = fmaxf(m, redmax[t][w]);
        const int e = x_scale_exponent(m);
        xscale[t] = __int_as_float((127 + e) << 23);
        xunscale[t] = __int_as_float((127 - e) << 23);
    }
    half * xh = (half *)smem;   // [T][ldx]
#pragma unroll
    for (int j = 0; j < k_stage; j++)
        if (src[j] >= 0)
#pragma unroll
            for (int t = 0; t < T; t++) xh[t * ldx + threadIdx.x + j * NT] = __float2half_rn(xv[j][t] * xscale[t]);
#if GGX_QGEMV_TC4
    if constexpr (T == 1) {
        // x again in B's order (tc4_lane): row 8 q + r at half 4 (r % 4 / 2) + 2 (r % 2) + r / 4 of
        // 16-byte row q, the odd r as x / 16; and the zero slot
        // (r = i % 8 is the thread's for every j: NT is a multiple of 8; unsigned, so no signed
        // remainders per j, which cost ~30 instructions each, run 213)
        const unsigned r = threadIdx.x % 8;
        half * xm = xh + ldx + (4 * (r % 4 / 2) + 2 * (r % 2) + r / 4) - r;
        const float xs = xscale[0] * (r % 2 ? 0.0625f : 1.0f);
        if (threadIdx.x == 0) tc4_zero = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < k_stage; j++)
            if (src[j] >= 0) xm[threadIdx.x + j * NT] = __float2half_rn(xv[j][0] * xs);
    }
#endif
    __syncthreads();
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_LOOP);

    // 3. this group's fine slice
    float v[T][4];
#pragma unroll
    for (int t = 0; t < T; t++) v[t][0] = v[t][1] = v[t][2] = v[t][3] = 0.0f;
    if (work) {
        const half * xb = xh - k_begin;
        if (one_piece) {
            // one piece in flight
            for (int p = p_begin; p < p_end; p++) {
                piece_apply<T>(A, xb, ldx, v, L, zero);
                if (p + 1 < p_end) piece_load(M, p + 1, nl, A, a.evict_first, L);
            }
        } else {
            // two pieces in flight: the next one's words load while this one is multiplied
            for (int p = p_begin; p < p_end; p += 2) {
                piece_apply<T>(A, xb, ldx, v, L, zero);
                if (p + 2 < p_end) piece_load(M, p + 2, nl, A, a.evict_first, L);
                if (p + 1 >= p_end) break;
                piece_apply<T>(B, xb, ldx, v, L, zero);
                if (p + 3 < p_end) piece_load(M, p + 3, nl, B, a.evict_first, L);
            }
        }
#pragma unroll
        for (int t = 0; t < T; t++)
#pragma unroll
            for (int c = 0; c < 4; c++) v[t][c] *= xunscale[t];
    }
#if GGX_QGEMV_TC4
    if (L.on) {   // warp-uniform, and every lane works: lane l's columns n + c were lane 4 (l % 8) + l / 8's
        const int lane = threadIdx.x % GGX_CUDA_WARP, from = 4 * (lane % 8) + lane / 8;
#pragma unroll
        for (int c = 0; c < 4; c++) v[0][c] = __shfl_sync(0xffffffffu, v[0][c], from);
    }
#endif
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_LOOP_END);
    const bool lead = grp == 0;   // group 0 finishes the tile; the others only join barriers
    // RoPE: a tile holds whole heads (k_tile % head_dim == 0), so pairs are inside the block.
    // Every thread calls it (block barriers); the leads' v change.
    auto rope = [&](float (&v)[T][4]) {
        if (M.rope) {
            if (lead)
#pragma unroll
                for (int t = 0; t < T; t++)
#pragma unroll
                    for (int c = 0; c < 4; c++) tb[t * k_tile + lt * 4 + c] = v[t][c];
            __syncthreads();
            const int hd = a.head_dim, half = a.rope.n_rot / 2;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int lc = lt * 4 + c;   // column in the tile
                const int d = lc % hd, base = lc - d;
                if (!lead || d >= a.rope.n_rot) continue;
                int i, j0, j1;
                if (a.rope.mode == GGX_ROPE_NEOX) { i = d < half ? d : d - half; j0 = i; j1 = i + half; }
                else                              { i = d / 2; j0 = 2 * i; j1 = 2 * i + 1; }
                const bool first = d == j0;
#pragma unroll
                for (int t = 0; t < T; t++) {
                    const float2 f = rcs[t * k_tile + lc];   // written by this thread before the PDL wait
                    const float cs = f.x, sn = f.y;
                    const float x0 = tb[t * k_tile + base + j0], x1 = tb[t * k_tile + base + j1];
                    v[t][c] = first ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
                }
            }
        }
    };
    // The leads' results for columns n.. of the tile: into the cache rows, or y (+ the residual)
    auto store = [&](int n, const float (&v)[T][4]) {
#pragma unroll
        for (int t = 0; t < T; t++) {
            if (M.cache) {
                const int p = a.pos[t];
                if (p < 0 || p >= M.cache_rows) continue;
#pragma unroll
                for (int c = 0; c < 4; c++)
                    if (n + c < M.N) ggx_store_any(M.cache, M.cache_type, (int64_t)p * M.N + n + c, v[t][c]);
            } else {
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    if (n + c >= M.N) continue;
                    const size_t o = (size_t)t * M.N + n + c;
                    M.y[o] = M.epi == GGX_QGEMV_ADD ? M.resid[o] + v[t][c] : v[t][c];
                }
            }
        }
    };

    // The tail's trace points (GGX_CUDA_TRACE only, not with the attention tail, which takes A, B,
    // C itself): after a block barrier, so that the stamp follows every warp's loads. The trace
    // prints A from the loop's start (loop + hand-off: the last blocks past their acquire), B the
    // partials summed, C the results stored (the residual's loads returned).
    const bool trace_tail = ggx_trace_on(a.trace) && !M.attn_role;

    // the groups' sums, in group order, end up in group 0
    if constexpr (W > 1) {
        __syncthreads();   // the x rows are dead: reuse them
        float4 * gs = (float4 *)smem;   // [W][T][k_group]
        if (grp > 0)
#pragma unroll
            for (int t = 0; t < T; t++) gs[((grp - 1) * T + t) * k_group + lt] = make_float4(v[t][0], v[t][1], v[t][2], v[t][3]);
        __syncthreads();
        if (grp == 0)
#pragma unroll
            for (int g = 1; g < W; g++)
#pragma unroll
                for (int t = 0; t < T; t++) {
                    const float4 o = gs[((g - 1) * T + t) * k_group + lt];
                    v[t][0] += o.x; v[t][1] += o.y; v[t][2] += o.z; v[t][3] += o.w;
                }
    }
    // 4. partials; the last block of the tile finishes it (or, reducing, every block adds its own)
    if (reduce) {
        if (slice == 0) add_bias<T>(M, n, v);
        rope(v);   // (the q/k/v rows only: in-place adds never rotate)
        if (lead && n < M.Np) ggx_red_add4(M.y + n, make_float4(v[0][0], v[0][1], v[0][2], v[0][3]), M.N - n);
        ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_HANDOFF);
        ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_EXIT);
        return;
    }
    if (M.arrivals == 1) {
        add_bias<T>(M, n, v);
        ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_HANDOFF);
    } else {
        if (lead && n < M.Np)
#pragma unroll
            for (int t = 0; t < T; t++)
                *(float4 *)(M.partial + ((size_t)slice * T + t) * M.Np + n) = make_float4(v[t][0], v[t][1], v[t][2], v[t][3]);
        // Release: the barrier orders the leads' stores before thread 0's fence (fences are
        // cumulative), the fence before its count. Acquire: the last block's thread 0 fences after
        // the count, and the barrier orders the other threads' loads after that fence: a
        // cooperative grid sync's pattern. Against every thread running __threadfence on both
        // sides with the reset in flight, run 169: +1.8% tg128@16 on llama3-8b, +2.9% on
        // llama3.2-1b; the kind of fence made no difference (run 170).
        int * ctr = a.counters + M.counter0 + tile;
        __syncthreads();
        if (threadIdx.x == 0) {
            ggx_fence_acq_rel();
            last = atomicAdd(ctr, 1) == M.arrivals - 1;
            if (last) ggx_fence_acq_rel();
        }
        __syncthreads();
        ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_HANDOFF);
        if (!last) {
            ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_EXIT);
            return;
        }
        if (threadIdx.x == 0) *ctr = 0;   // ready for the next launch; after the acquire fence, which so waits for no store
        if (trace_tail) { __syncthreads(); ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_A); }
        if (lead) {
            tile_result<T>(a, M, M.n_slices, n, v);
        }
        if (trace_tail) { __syncthreads(); ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_B); }
    }

    rope(v);
    if (lead && n < M.Np) store(n, v);
    if (trace_tail) { __syncthreads(); ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_C); }
    if constexpr (T == 1)
        if (M.attn_role) attn_tail<NT>(a, M, tile, make_float4(v[0][0], v[0][1], v[0][2], v[0][3]), lead && n < M.Np, smem, last, &trace_slot);
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_EXIT);   // thread 0 passes here
}

size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

// Blocks per column tile of a matrix: its fine slices in runs of W groups x m.
int block_slices(const ggx_cuda_qextra * e, int T, int m) {
    const int W = groups_for(T);
    return (e->n_slices + W * m - 1) / (W * m);
}

// Scratch bytes of a matrix's partials ([n_slices][T][Np] floats), 256-byte aligned: fill_args lays
// them out so and ggx_cuda_qgemv_scratch sizes the scratch with it.
size_t partial_bytes(const ggx_cuda_qextra * e, int T, int Np, int m) {
    return align256((size_t)block_slices(e, T, m) * T * Np * sizeof(float));
}

// Fine slices per warp group that a one-row job run with m moves from each of the later half of a
// tile's K-slices to the earlier half in the uneven build (decode-plan.h, GGX_QGEMV_UNEVEN): `want`
// (-1: m / 8 rounded down to even) where the K-slices pair up (an even count), the later ones keep
// some rows, the earlier ones fit the shared memory, and paired tables keep even runs; else 0.
int uneven_dm(const ggx_qgemv_job & job, int m, bool pairs, int want) {
    if (want < 0) want = m / 8 & ~1;
    if (!GGX_QGEMV_UNEVEN || want <= 0 || job.T != 1) return 0;
    const int S = block_slices(ggx_cuda_qextra_of(job.m[0].w), job.T, m);
    return S >= 2 && S % 2 == 0 && want < m && (m + want) * k_fine <= k_max_rows && !(pairs && want % 2) ? want : 0;
}

// What fill_args laid out: the grid's blocks, the tile counters, the partials' bytes.
struct args_layout {
    int    blocks = 0, counters = 0;
    size_t partial_bytes = 0;   // with the attention tail's state past the partials
    bool   rope = false;   // a matrix rotates: the launch's shared memory holds the RoPE tile
};

// Scratch bytes of the attention tail's state (gemv_attn::state), 256-byte aligned; 0 without it.
size_t attn_state_bytes(const ggx_qgemv_job & job) {
    return job.attn.bound > 0 ? align256((size_t)job.attn.H * (job.head_dim + 2) * sizeof(float)) : 0;
}

// What fill_args takes from a job before its matrices: its input, norm and activation.
void fill_input(const ggx_qgemv_job & job, gemv_args & a) {
    a.n_mat = job.n_mat;
    a.x = (const float *)job.x->data;
    a.K = (int)job.x->ne[0];
    a.norm = job.norm;
    a.norm_w = job.norm_w ? job.norm_w->data : nullptr;
    a.norm_type = job.norm_w ? (int)job.norm_w->type : (int)GGX_TYPE_F32;
    a.norm_eps = job.norm_eps;
    a.act = job.act;
}

// A matrix's arrays and piece tables (the paired ones when `pairs` and the matrix has them).
void fill_matrix(const ggx_qgemv_job_mat & jm, bool pairs, gemv_mat & M) {
    const ggx_qmatrix * q = (const ggx_qmatrix *)jm.w->extra;
    const ggx_cuda_qextra * e = ggx_cuda_qextra_of(jm.w);
    M.qw = q->q_weight;
    M.qs = q->q_scale;
    M.qsmax = (const half *)q->q_scale_max;
    M.perm = q->q_perm;
    const bool paired = pairs && e->pieces2;
    M.pieces = paired ? e->pieces2 : e->pieces;
    M.heads = paired ? e->heads2 : e->heads;
    M.pair_shift = paired ? 1 : 0;
    M.K = q->K;
    M.N = q->N;
    M.Np = q->Np;
    M.n_fine = e->n_slices;
    M.bias = jm.bias ? (const float *)jm.bias->data : nullptr;
    M.epi = jm.epi;
    M.is_gate = jm.is_gate;
}

// The launch arguments of a job run with m fine slices per warp group (pairs: on the paired piece
// tables), its partials laid out from `part` (each matrix's 256-byte aligned), its q/k/v rows
// (ggx_qgemv_job_mat::rows) in `rows`. The caller adds what depends on the backend's state: the
// step's RoPE table, the norm tables, the counters' base, the prefetch rows, the L2 policy and the
// trace. Host code, run by tests/emu too. dm: the uneven build's shift of fine slices per warp group
// from the later K-slices to the earlier (uneven_dm; 0 otherwise).
args_layout fill_args(const ggx_qgemv_job & job, int m, bool pairs, char * part, float * rows, gemv_args & a, int dm = 0) {
    args_layout L;
    fill_input(job, a);
#if GGX_QGEMV_UNEVEN
    a.tiles = 0;
#endif
    a.pos = job.pos ? (const int32_t *)job.pos->data : nullptr;
    a.freq_div = job.freq_div ? (const float *)job.freq_div->data : nullptr;
    a.rope = job.rope;
    a.head_dim = job.head_dim;
    for (int i = 0; i < job.n_mat; i++) {
        const ggx_qgemv_job_mat & jm = job.m[i];
        const ggx_qmatrix * q = (const ggx_qmatrix *)jm.w->extra;
        const ggx_cuda_qextra * e = ggx_cuda_qextra_of(jm.w);
        gemv_mat & M = a.m[i];
        fill_matrix(jm, pairs, M);
        M.m = m;
        M.n_slices = block_slices(e, job.T, m);
        M.n_tiles = (q->Np + k_tile - 1) / k_tile;
#if GGX_QGEMV_UNEVEN
        // block0 is the matrix's first tile: its blocks are slice * a.tiles + block0 + tile (every
        // matrix of a job has the same K, so the same K-slices)
        M.block0 = a.tiles;
        a.tiles += M.n_tiles;
#else
        M.block0 = L.blocks;
#endif
        L.blocks += M.n_tiles * M.n_slices;
        M.partial = (float *)(part + L.partial_bytes);
        L.partial_bytes += partial_bytes(e, job.T, q->Np, m);
        M.rows = jm.rows >= 0;
        M.y = M.rows ? rows + jm.rows : jm.cache ? nullptr : (float *)jm.out->data;
        M.resid = jm.resid ? (const float *)jm.resid->data : nullptr;
        M.cache = jm.cache && !M.rows ? jm.cache->data : nullptr;
        M.cache_type = jm.cache ? (int)jm.cache->type : 0;
        M.cache_rows = jm.cache ? (int)(ggx_nelements(jm.cache) / q->N) : 0;
        M.in_place = ggx_qgemv_adds_in_place(jm);
        M.rope = jm.rope;
        M.pair = jm.pair;
        L.rope |= jm.rope;
        if (jm.epi == GGX_QGEMV_GLU && jm.pair < i) {   // the second of a pair shares the first's counters
            M.counter0 = a.m[jm.pair].counter0;
            a.m[jm.pair].arrivals = M.arrivals = a.m[jm.pair].n_slices + M.n_slices;
        } else {
            M.counter0 = L.counters;
            L.counters += M.n_tiles;
            M.arrivals = M.n_slices;
        }
    }
#if GGX_QGEMV_UNEVEN
    a.dm = dm;
    a.s0 = dm ? a.m[0].n_slices / 2 : 0;
#else
    (void)dm;
#endif
    const ggx_qgemv_attn & ja = job.attn;
    if (ja.bound > 0) {
        gemv_attn & at = a.attn;
        at.out = (float *)ja.out->data;
        at.state = (float *)(part + L.partial_bytes);
        L.partial_bytes += attn_state_bytes(job);
        at.k = (const half *)job.m[ja.k].cache->data;
        at.v = (const half *)job.m[ja.v].cache->data;
        at.q = (const float *)job.m[ja.q].out->data;
        at.scale = ja.scale;
        at.H = ja.H;
        at.Hkv = ja.Hkv;
        at.hd = job.head_dim;
        at.bound = ja.bound;
        at.counter0 = L.counters;
        L.counters += ja.Hkv;
        a.m[ja.q].attn_role = 1;
        a.m[ja.k].attn_role = 2;
        a.m[ja.v].attn_role = 3;
    }
    return L;
}

// Dynamic shared memory of a launch of T rows with m fine slices per warp group: x in fp16 (2
// rows per float), then the groups' sums, and with RoPE its tile and (cos, sin).
// With the attention tail (attn_bound keys of heads of hd columns), at least part A's floats.
size_t smem_bytes(int T, int m, bool rope, int attn_bound = 0, int hd = 0) {
    const int W = groups_for(T);
    const int ldx = W * m * k_fine;
    const size_t rows = std::max((size_t)(ldx / 2 + tc4_floats(T, ldx)), W > 1 ? (size_t)(W - 1) * k_tile : 0);
    const size_t bytes = (size_t)T * (rows + (rope ? 3 * k_tile : 0)) * sizeof(float);
    return attn_bound > 0 ? std::max(bytes, (size_t)attn_smem_floats(k_group * W, hd, attn_bound) * sizeof(float)) : bytes;
}

template <int T, int Copy = 0>
ggx_status launch(ggx_cuda_ctx & ctx, const gemv_args & a, int blocks, size_t smem) {
    constexpr int W = groups_for(T);
    void (*kernel)(gemv_args) = k_qgemv<T, W, Copy>;
    static bool configured = false;   // one attribute call per instantiation (per process)
    if (!configured) {
        GGX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, k_max_smem));
        GGX_RETURN_IF_ERR(ggx_cuda_carveout((const void *)kernel, true));
        configured = true;
    }
#if GGX_QGEMV_UNEVEN
    const dim3 grid((unsigned)a.tiles, (unsigned)(blocks / a.tiles));
#else
    const dim3 grid((unsigned)blocks);
#endif
    return ggx_cuda_launch(ctx, kernel, grid, dim3(k_group * W), smem, a);
}

// The value that a list NAME:V[,NAME:V...] in the environment variable `var` (or the list `unset`
// while it is not set) gives a job: the first entry whose NAME the job's first matrix's name
// contains; `none` when no entry matches.
static int value_for(const char * var, const ggx_qgemv_job & job, int none, const char * unset = nullptr) {
    const char * v = getenv(var);
    if (!v) v = unset;
    if (!v || !*v) return none;
    const std::string item = ggx_list_match(v, job.m[0].w->name, true);
    return item.empty() ? none : atoi(item.c_str() + item.rfind(':') + 1);
}

// Rows of packed words each thread warms in L2 before the PDL wait (GGX_QGEMV_PREFETCH, for
// measurements; 0 or less = the whole slice: prefetch_for reads it so).
int prefetch_rows() {
    static const int v = ggx_env_int("GGX_QGEMV_PREFETCH", k_prefetch_rows);
    return v;
}

// Whether a one-row job keeps one piece per thread in flight instead of two (in its loop and
// before the PDL wait). GGX_QGEMV_ONE_DEEP=3 (the default): where its matrices hold more than one
// width; =2: where its weights average fewer than 4 bits; =1: every one-row job; 0: none.
// Runs 194-195 (H100, tg128@16, every job one deep against none): llama3-8b 2.5 bpw +1.7%, 3.0
// +4.5%, 3.5 +1.5%, llama3.2-1b 2.5 +1.8%; 4.0 -0.4% on llama3-8b and +0.7% on llama3.2-1b, 8.0
// -1.3%. Those widths below 4 bits are all mixed layouts and those at 4 or more uniform; run 196
// told the two rules apart: rule 3 gains at 4.25 (8/4, +1.5%) and 4.5 (8/5/4, +0.8%) as well, so
// what pays is one copy of several widths' piece code in the loop, not the bit count. In the
// traces of 3.0 (run 199) the slowest gate/up block finishes 0.9 us sooner and the kernels after
// the one-deep ones (attention, o) run 0.4-0.7 us shorter: half the pieces loaded before the
// wait load less under the previous kernel's tail.
// Per job, the rule is right on both sides (run 201, H100, one round each): at 4.0 bpw (uniform)
// any one job made one deep alone loses (q -1.4%, o -3.1%, gate/up -1.2%, down -2.5%), and at 3.0
// (mixed) any one job made two deep alone loses (q -1.2%, o -1.8%, gate/up -4.6%, down -0.5%).
bool one_deep(const ggx_qgemv_job & job) {
    static const int mode = ggx_env_int_in("GGX_QGEMV_ONE_DEEP", 0, 3, 3);
    if (job.T != 1) return false;
    if (mode == 0) return false;
    if (mode == 1) return true;
    int64_t bits = 0, weights = 0;
    unsigned widths = 0;   // one bit per width present
    for (int i = 0; i < job.n_mat; i++) {
        const ggx_qmatrix * q = (const ggx_qmatrix *)job.m[i].w->extra;
        bits += (int64_t)q->qrows * 32 * q->N;   // a column's packed words cover its K weights
        weights += (int64_t)q->K * q->N;
        for (int w = 0; w < GGX_EXL2_N_WIDTHS; w++)
            if (q->rows_per_width[w] > 0) widths |= 1u << w;
    }
    return mode == 2 ? bits < 4 * weights : (widths & (widths - 1)) != 0;
}

// GGX_QGEMV_EVICT_FIRST=P: P percent of the weight loads are marked L2 evict-first (default all:
// +3.7% decode on the H200, RESULTS.md; 0 turns it off).
float evict_first_fraction() {
    static const float v = std::max(0, std::min(100, ggx_env_int("GGX_QGEMV_EVICT_FIRST", 100))) / 100.0f;
    return v;
}

}  // namespace

bool ggx_cuda_qgemv_mma4(void) { return GGX_QGEMV_TC4 != 0; }

static long g_uneven_jobs = 0;   // (the uneven build's launches with dm > 0, counted when recorded)
long ggx_cuda_qgemv_uneven_jobs(void) { return GGX_QGEMV_UNEVEN ? g_uneven_jobs : -1; }

bool ggx_cuda_qgemv_supports(const ggx_tensor * mm) {
    const ggx_tensor * w = mm->src[0];
    const ggx_tensor * x = mm->src[1];
    if (w->type != GGX_TYPE_EXL2 || !w->extra || x->type != GGX_TYPE_F32 || !ggx_is_contiguous(x)) return false;
    const ggx_qmatrix * q = (const ggx_qmatrix *)w->extra;
    const ggx_cuda_qextra * e = (const ggx_cuda_qextra *)q->backend_extra;
    const int64_t T = ggx_nrows(x);
    return e && e->slice_rows == k_fine && x->ne[0] == q->K && T >= 1 && T <= GGX_CUDA_QGEMV_MAX_T &&
           q->K % 4 == 0 && q->Np % 4 == 0;
}

ggx_qgemv_job ggx_cuda_qgemv_single(ggx_tensor * mm) {
    ggx_qgemv_job job;
    job.n_mat = 1;
    job.T = (int)ggx_nrows(mm->src[1]);
    job.x = mm->src[1];
    job.m[0].w = mm->src[0];
    job.m[0].out = mm;
    return job;
}

static const ggx_cuda_qextra * qextra_of(const ggx_qgemv_job_mat & jm) { return ggx_cuda_qextra_of(jm.w); }

// Whether one-row jobs may walk the paired piece tables (GGX_QGEMV_PAIRS=0: never; read per job
// so that a test can compare both): when their warp groups own whole pairs of fine slices (even m).
static bool pairs_allowed() { return ggx_env_int("GGX_QGEMV_PAIRS", 1) != 0; }

// GGX_QGEMV_ROWS_FOR=NAME:R[,NAME:R...] (measurements): R rows per warp group for the jobs whose
// first matrix's name contains NAME, e.g. "o_proj:128" runs o in 8 K-slices of 512 rows per tile
// (64 blocks) instead of the planned 16 of 256 (128 blocks), with half the partials to sum in
// its tail and 68 SMs left to gate/up's early blocks. 0 when no entry matches.
static int rows_for(const ggx_qgemv_job & job) { return value_for("GGX_QGEMV_ROWS_FOR", job, 0); }

// The uneven build's GGX_QGEMV_UNEVEN_FOR=NAME:D[,...] (read per job when a graph is captured): D
// fine slices per warp group moved to the earlier K-slices of the jobs whose first matrix's name
// contains NAME, -1 for m / 8 (uneven_dm says where it applies). Unset: gate_proj:-1, i.e. 18 and 14
// instead of 16 on llama3-8b (44 of gate/up's 112 blocks enter ~4 us late, behind o's: NOTES,
// session 43), none on llama3.2-1b (m = 4); empty: none.
static int uneven_for(const ggx_qgemv_job & job) {
    return GGX_QGEMV_UNEVEN ? value_for("GGX_QGEMV_UNEVEN_FOR", job, 0, "gate_proj:-1") : 0;
}

// GGX_QGEMV_PREFETCH_FOR=NAME:R[,NAME:R...] (measurements): R rows of packed words (0: the whole
// slice) that each thread of the jobs whose first matrix's name contains NAME warms in L2 before
// its PDL wait, in place of prefetch_rows(). The question it asks: a job whose blocks are resident
// while DRAM idles (o during the decode attention: 8 blocks on 132 SMs at ctx 16) could pull its
// whole slice into L2 there, where every job's whole slice at once lost 4-7% (run 123).
static int prefetch_for(const ggx_cuda_ctx & ctx, const ggx_qgemv_job & job) {
    if (!ctx.prefetch) return 0;
    int r = value_for("GGX_QGEMV_PREFETCH_FOR", job, -1);
    if (r < 0) r = prefetch_rows();
    return r > 0 ? r : 1 << 30;   // 0 (or less from GGX_QGEMV_PREFETCH): the whole slice
}

// Fine slices per warp group for a job. The blocks run in waves of n_sm (one block per SM: the
// registers and shared memory of a 512-thread block fill it), and a block costs a fixed part
// (prologue over x, partials, epilogue) plus its rows, so the choice minimises waves x (fixed +
// rows) over the job's matrices together. ncu on llama3-8b (session 4): a wave of 128 blocks took
// 11.9 us + 0.052 us per row of each group's slice, i.e. a fixed part worth ~230 rows; the qkv
// job (q, k, v: 12 tiles) ran 1.5-2 waves of 64-row slices (28.6-30.5 us for 12.9 MB).
// A one-row job's warp groups are charged their runs of pieces instead (ggx_cuda_qgemv_run_costs:
// measured costs per piece, in the same rows; session 30): a wave costs its costliest run, the
// waves after the first their mean run. A 4-bit piece has a fixed part as large as ~55 rows, so the
// 64-row pieces of the paired tables (an even m only) make 4-bit runs cheaper; other widths cost
// their rows. All-4-bit llama3-8b then takes q/k/v 3 -> 4 and down 7 -> 8, qwen2.5-7b down 9 -> 10:
// tg128@16 +1.0% on llama3-8b and mistral-7b, +1.7% on qwen2.5-7b, @4096 +1.0% (run 153, H100).
// Mixed layouts keep the plans of rows: 4.25 bpw's 8/4, whose 4-bit groups start behind 224 rows
// of 8 bits at an odd fine slice (every other pair split), lost 2% with the all-4-bit plan (run
// 152), and charging 8-bit rows for their bytes lost 5% on qwen2.5-7b at 3.5 and 4.25 (run 153).
// GGX_QGEMV_PIECE_COSTS=0 (measurements) counts rows only, as before.
// A one-row job priced by pieces also pays k_slice_cost per K-slice of a column tile: the tile's last
// block sums one partial per slice in its tail, and fewer blocks leave SMs to the next kernel's
// early blocks. Run 156 (H100) bounds it: llama3.2-1b 4.0 bpw's q/k/v and o with one 64-row paired
// piece per warp group (m = 2, 8 slices a tile) instead of one 32-row piece (m = 1, 16 slices)
// gained 2.2%, so 8 slices are worth more than the 17 units the 64-row piece costs above the
// 32-row one (> 2.1 per slice); at 2.5, 5.0 and 8.0 bpw, where m = 2 means two 32-row pieces (46
// units more), the same plan lost 2-8%, so less than 5.75 per slice. At 4 only llama3.2-1b's plans
// move (4.0 bpw: q/k/v and o 1 -> 2, down 2 -> 4); llama3-8b's, qwen2.5-7b's and mistral-7b's stay
// at every synthetic width (host tests). Multi-row jobs and the plan of rows add nothing.
// GGX_QGEMV_SLICE_COST=C (measurements, rows) sets the cost per slice for every job instead.
// llama3-8b's o with 11 slices (m = 3) instead of 16 (m = 2): tg128@16 +0.6 to +1.4% in runs
// 146-147 (H100); C = 7..10 gives that plan there. GGX_QGEMV_ODD_COST=O
// (measurements, rows; default 0) adds O per block for an odd m of a one-row job whatever its
// widths. C = 12 with O = 16 (8B: q/k/v 4, o 4, down 8) measured +3.1% at 4.0 bpw but -3.4 to
// -5.7% at 2.5, 5.0, 6.0 and 8.0 (runs 149-150, H100); run 151's traces put the loss in the
// fewer, longer blocks of widths without cheaper pairs (NOTES, sessions 29-30).
// A job whose K-slices add their sums into y (ggx_cuda_qgemv_reduces: o and down) has no tail to
// pay for, but all its blocks run to the kernel's end, each holding an SM the next kernel's first
// blocks cannot use to load their first pieces. Run 179 (H100): llama3-8b 4.0's o in 8 slices (64
// blocks) instead of 16 gained 2.7% (431.4 / 431.3 against 419.9 / 420.4 t/s), in 11 slices 2.4%,
// while down in 8 slices instead of 14 lost 5%. A cost of 8 per slice for every reducing job gives
// the first and keeps down, +2.5% on llama3-8b and mistral-7b 4.0 (run 180), but it also halved
// llama3.2-1b's o and down blocks at every width but 4.0, which lost 7-9% (2.5, 5.0, 8.0; run 181:
// at 5.0 3.2% on o, 6% on down). What the 8B's o frees SMs for is a large job (gate/up, 58.7 MB); the
// 1B's next jobs are 3-34 MB. So a reducing job pays k_red_slice_cost per slice when the next job
// (ggx_qgemv_job::next_weight_bytes) has at least k_large_next bytes of weights, else the split-K
// jobs' k_slice_cost: that plan moves only 7-8B models' o at 4.0 bpw among the synthetic shapes
// (host test; +2.6% on llama3-8b 4.0 in run 183). GGX_QGEMV_RED_SLICE_COST=C sets the cost of every
// reducing job (measurements).
int ggx_cuda_qgemv_group_slices(const ggx_qgemv_job & job, int n_sm, bool red) {
    int forced = ggx_env_int("GGX_QGEMV_GROUP_ROWS", 0);   // measurements and tests (read per job: host code)
    if (forced < k_fine) forced = rows_for(job);
    if (forced >= k_fine) return std::min(k_max_rows, forced) / k_fine;
    const int W = groups_for(job.T);
    const int64_t slots = std::max(1, n_sm);
    int best_m = 1, max_fine = 1;
    for (int i = 0; i < job.n_mat; i++) max_fine = std::max(max_fine, qextra_of(job.m[i])->n_slices);
    const bool one_row = job.T == 1, pairs = one_row && pairs_allowed();
    const int64_t odd_cost = pairs ? ggx_env_int_in("GGX_QGEMV_ODD_COST", 0, 1000, 0) : 0;
    // one-row jobs: the costliest run of pieces of the job's matrices (measured piece costs),
    // unless GGX_QGEMV_PIECE_COSTS=0 (measurements: every row costs one) or a matrix has no table
    bool piece_costs = one_row && ggx_env_int("GGX_QGEMV_PIECE_COSTS", 1) != 0;
    for (int i = 0; i < job.n_mat; i++) piece_costs = piece_costs && qextra_of(job.m[i])->run_cost[0][1] > 0;
    const int red_cost = job.next_weight_bytes >= k_large_next ? k_red_slice_cost : k_slice_cost;
    const int64_t slice_cost = red && ggx_cuda_qgemv_reduces(job)
                                   ? ggx_env_int_in("GGX_QGEMV_RED_SLICE_COST", 0, 1000, piece_costs ? red_cost : 0)
                                   : ggx_env_int_in("GGX_QGEMV_SLICE_COST", 0, 1000, piece_costs ? k_slice_cost : 0);
    int64_t best = INT64_MAX;
    static_assert(k_max_rows / k_fine == GGX_QGEMV_MAX_RUN, "run_cost covers every m");
    for (int m = 1; m * k_fine <= k_max_rows; m++) {
        const int64_t blocks = ggx_cuda_qgemv_blocks(job, m);
        int64_t tile_slices = 0;
        for (int i = 0; i < job.n_mat; i++) tile_slices = std::max<int64_t>(tile_slices, block_slices(qextra_of(job.m[i]), job.T, m));
        // a wave costs its slowest block: the costliest run in one wave, the mean run in the others
        // (the blocks holding a mixed matrix's wide rows are few)
        int64_t worst = m * k_fine, mean = worst;
        if (piece_costs) {
            worst = mean = 0;
            for (int i = 0; i < job.n_mat; i++) {
                worst = std::max<int64_t>(worst, qextra_of(job.m[i])->run_cost[pairs][m]);
                mean = std::max<int64_t>(mean, qextra_of(job.m[i])->run_cost[2 + pairs][m]);
            }
        }
        const int64_t waves = (blocks + slots - 1) / slots, fixed = k_block_rows + (m % 2) * odd_cost;
        const int64_t cost = (waves - 1) * (fixed + mean) + fixed + worst + slice_cost * tile_slices;
        if (cost < best) { best = cost; best_m = m; }
        if (W * m >= max_fine) break;   // one K-slice per tile already
    }
    return best_m;
}

int ggx_cuda_qgemv_blocks(const ggx_qgemv_job & job, int m) {
    int blocks = 0;
    for (int i = 0; i < job.n_mat; i++) {
        const ggx_qmatrix * q = (const ggx_qmatrix *)job.m[i].w->extra;
        blocks += (q->Np + k_tile - 1) / k_tile * block_slices(qextra_of(job.m[i]), job.T, m);
    }
    return blocks;
}

size_t ggx_cuda_qgemv_scratch(const ggx_cuda_ctx & ctx, const ggx_qgemv_job & job) {
    const int m = ggx_cuda_qgemv_group_slices(job, ctx.n_sm, ctx.adds_slices());
    size_t total = 0;
    for (int i = 0; i < job.n_mat; i++) total += partial_bytes(qextra_of(job.m[i]), job.T, ((const ggx_qmatrix *)job.m[i].w->extra)->Np, m);
    return total + attn_state_bytes(job);
}

ggx_status ggx_cuda_qgemv_run(ggx_cuda_ctx & ctx, const ggx_qgemv_job & job) {
    if (job.n_mat < 1 || job.n_mat > GGX_QGEMV_MAX_MATS || job.T < 1 || job.T > GGX_CUDA_QGEMV_MAX_T) {
        ggx_set_error("cuda: decode matmul job with %d matrices and %d rows", job.n_mat, job.T);
        return GGX_STATUS_FAILED;
    }
    for (int i = 0; i < job.n_mat; i++)   // before ggx_cuda_qgemv_group_slices, which reads the tables
        if (!qextra_of(job.m[i])) {
            ggx_set_error("cuda: %s: quantized matrix not prepared for this backend", job.m[i].w->name);
            return GGX_STATUS_FAILED;
        }
    const int m = ggx_cuda_qgemv_group_slices(job, ctx.n_sm, ctx.adds_slices());
    const bool pairs = pairs_allowed() && job.T == 1 && m % 2 == 0;
    gemv_args a = {};
    for (int i = 0; i < job.n_mat; i++)
        if (job.m[i].rows >= 0 && (!ctx.qkv_rows || job.T != 1 || job.attn.bound > 0)) {
            ggx_set_error("cuda: decode matmul of %s: q/k/v rows need one row, the backend's rows and no attention tail", job.m[i].w->name);
            return GGX_STATUS_FAILED;
        }
    const int dm = uneven_dm(job, m, pairs, uneven_for(job));
    g_uneven_jobs += dm > 0;
    const args_layout L = fill_args(job, m, pairs, (char *)ctx.scratch, ctx.qkv_rows, a, dm);
    if (job.m[0].rows >= 0) ctx.qkv_rows_jobs++;
    a.rope_table = ggx_cuda_rope_table_for(ctx, job);
    for (int i = 0; i < job.n_mat; i++) a.m[i].norm_wp = ggx_cuda_norm_table_for(ctx, job, i);
    a.counters = ctx.counters;
    a.prefetch = prefetch_for(ctx, job);
    a.evict_first = evict_first_fraction();
    if (ctx.trace) {
        // which matrix a block of the dump multiplies (the uneven build: block = K-slice x tiles + tile)
        std::string first_blocks = GGX_QGEMV_UNEVEN ? "first tiles:" : "first blocks:";
        for (int i = 0; i < job.n_mat; i++) first_blocks += " " + std::string(job.m[i].w->name) + " " + std::to_string(a.m[i].block0);
        a.trace = ggx_cuda_trace_launch(ctx, std::string(job.m[0].w->name) + (job.n_mat > 1 ? " +" + std::to_string(job.n_mat - 1) : ""), first_blocks);
    }
    if (L.partial_bytes > ctx.scratch_size) {
        ggx_set_error("cuda: scratch too small for the decode matmul of %s", job.m[0].w->name);
        return GGX_STATUS_FAILED;
    }
    if (L.counters > ctx.n_counters) {
        ggx_set_error("cuda: decode matmul of %s needs %d tile counters (have %d)", job.m[0].w->name, L.counters, ctx.n_counters);
        return GGX_STATUS_FAILED;
    }
#if GGX_QGEMV_UNEVEN
    for (int i = 1; i < job.n_mat; i++)   // (the grid is tiles x K-slices: one count of K-slices for all)
        if (a.m[i].n_slices != a.m[0].n_slices) {
            ggx_set_error("cuda: decode matmul of %s: %s has %d K-slices, %s %d", job.m[0].w->name, job.m[i].w->name,
                          a.m[i].n_slices, job.m[0].w->name, a.m[0].n_slices);
            return GGX_STATUS_FAILED;
        }
#endif
    if (job.attn.bound > 0 && (job.T != 1 || job.head_dim % 64 || job.head_dim > 128)) {
        ggx_set_error("cuda: decode matmul of %s: attention in the tail needs one row and heads of 64 or 128 (%d rows, heads of %d)",
                      job.m[0].w->name, job.T, job.head_dim);
        return GGX_STATUS_FAILED;
    }
    a.flags = (ctx.adds_slices() ? k_flag_red : 0) | (one_deep(job) ? k_flag_one_deep : 0);
    const size_t smem = smem_bytes(job.T, m + dm, L.rope, job.attn.bound, job.head_dim);
    if (smem > (size_t)k_max_smem) {
        ggx_set_error("cuda: decode matmul of %s needs %zu bytes of shared memory (at most %d)", job.m[0].w->name, smem, k_max_smem);
        return GGX_STATUS_FAILED;
    }
    if (job.attn.bound > 0) ctx.attn_tail_jobs++;
    const int blocks = L.blocks;
    // GGX_QGEMV_CODE_COPY_FOR=NAME:1[,...] (measurements only): one-row jobs whose first matrix's
    // name contains NAME run k_qgemv's second copy
#if GGX_QGEMV_CODE_COPY
    if (job.T == 1 && value_for("GGX_QGEMV_CODE_COPY_FOR", job, 0) != 0) return launch<1, 1>(ctx, a, blocks, smem);
#endif
    switch (job.T) {
        case 1: return launch<1>(ctx, a, blocks, smem);
        case 2: return launch<2>(ctx, a, blocks, smem);
        case 3: return launch<3>(ctx, a, blocks, smem);
        case 4: return launch<4>(ctx, a, blocks, smem);
        case 5: return launch<5>(ctx, a, blocks, smem);
        case 6: return launch<6>(ctx, a, blocks, smem);
        case 7: return launch<7>(ctx, a, blocks, smem);
        default: return launch<8>(ctx, a, blocks, smem);
    }
}
