#include "tile-step.h"

#include "async-copy.cuh"
#include "common.cuh"
#include "ggx/ggx-deal.h"
#include "rope.cuh"
#include "step-common.cuh"
#include "tile-loop.cuh"
#include "trace.cuh"

#include <algorithm>

namespace tl = ggx_tile_loop;

namespace {

__host__ __device__ inline size_t align16(size_t v) { return (v + 15) & ~(size_t)15; }

// A stage's shared memory: [x w, f32 K][per matrix: q_perm as uint16 K][per matrix: x staged
// (tile-loop.cuh's x_halves)][per matrix: step sums][per matrix: chunk sums][per matrix: the
// block's unit descriptors][per matrix: the block's column sums, 16 per tile][RoPE (cos, sin) per
// pair of the block's tiles (split stages)].
struct stage_smem {
    size_t perm, xs, step_sums, csum, desc, colsum, rcs, total;
    size_t xs_n, cs_n, desc_n, col_n;   // per matrix: halves, chunks, units, columns
};
__host__ __device__ inline stage_smem stage_smem_of(int n_mat, int K, int n_chunks, int max_units, int max_tiles, int rope_pairs) {
    stage_smem L;
    L.xs_n = tl::x_halves(K);
    L.cs_n = (size_t)n_chunks;
    L.desc_n = (size_t)max_units;
    L.col_n = (size_t)max_tiles * 16;
    L.perm = align16((size_t)K * 4);
    L.xs = align16(L.perm + (size_t)n_mat * K * 2);
    L.step_sums = align16(L.xs + (size_t)n_mat * L.xs_n * 2);
    L.csum = L.step_sums + (size_t)n_mat * (K / 16) * 16;
    L.desc = L.csum + (size_t)n_mat * L.cs_n * 16;
    L.colsum = L.desc + (size_t)n_mat * L.desc_n * 16;
    L.rcs = align16(L.colsum + (size_t)n_mat * L.col_n * 4);
    L.total = L.rcs + (size_t)rope_pairs * 8;
    return L;
}
__host__ __device__ inline stage_smem stage_smem_of(const ggx_tile_stage & S) {
    int chunks = 0, units = 0, tiles = 0;
    for (int i = 0; i < S.n_mat && i < GGX_TILE_STAGE_MATS; i++) {
        chunks = max(chunks, S.m[i].n_chunks);
        units = max(units, S.m[i].max_units);
        tiles = max(tiles, S.m[i].max_tiles);
    }
    return S.split ? stage_smem_of(1, S.K, chunks, units, tiles, S.rope_mask ? 8 * tiles : 0)
                   : stage_smem_of(S.n_mat, S.K, chunks, units, S.m[0].max_tiles, 0);
}

#if !defined(GGX_USE_HIP)

// The matrices a block works on in a stage, m[m0] .. m[m0 + n_mat - 1], and its index b among
// their blocks: all of them in the block's own index, or in a split stage its share's one.
// Recomputed where used (a few parameter reads): held across the loop, such values spilled.
struct block_role {
    int m0, n_mat, b;
};
__device__ __forceinline__ block_role role_of(const ggx_tile_stage & S, int b) {
    if (!S.split) return {0, S.n_mat, b};
    const int i = S.n_mat > 2 && b >= S.m[2].block0 ? 2 : S.n_mat > 1 && b >= S.m[1].block0 ? 1 : 0;
    return {i, 1, b - S.m[i].block0};
}

// A warp's tile sums into the block's column sums (shared memory; the owners unscale them).
struct smem_sink {
    float * colsum;
    int     tile0;   // the block's first tile
    __device__ __forceinline__ void operator()(int tile, int g, float lo, float hi) {
        atomicAdd(colsum + (tile - tile0) * 16 + g, lo);
        atomicAdd(colsum + (tile - tile0) * 16 + g + 8, hi);
    }
};

// What a stage needs that no stage's results change, on its way into shared memory before its
// wait: each matrix's q_perm (uint16), chunk descriptors (into the chunk-sum slots, chunk_sums)
// and the block's unit descriptors, as cp.async copies that do not hold the threads (collected by
// collect_static after the wait); zeroed column sums. Only the block's deal is read first (the
// descriptors' range): run 106's trace put this part at ~3.7 us when each table was a load and
// a store, most of it exposed before the next stage's wait. The previous stage has left shared
// memory (its end has a block barrier).
template <int NT>
__device__ __forceinline__ void stage_static(const ggx_tile_stage & S, const stage_smem & L, unsigned char * smem, int b_launch, int t) {
    constexpr int W = NT / GGX_CUDA_WARP;
    const int K = S.K;
    const block_role r = role_of(S, b_launch);
    const int b = r.b;
    int b0[2] = {0, 0}, b1[2] = {0, 0};   // (loops over both matrices unrolled: indexed at run time, they went to the stack)
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        if (mi >= r.n_mat) break;
        const int * deal = S.m[r.m0 + mi].deal + (size_t)b * (W + 1);
        b0[mi] = ggx_load_ro(deal);
        b1[mi] = ggx_load_ro(deal + W);
    }
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        if (mi >= r.n_mat) break;
        const ggx_tile_step_matrix & m = S.m[r.m0 + mi];
        uint16_t * perm = (uint16_t *)(smem + L.perm) + (size_t)mi * K;
        if (m.perm) {
            for (int i = t; i < K / 8; i += NT) ggx_cp_async16(perm + 8 * i, m.perm + 8 * i, true);
        } else {
            for (int i = t; i < K / 2; i += NT) ((uint32_t *)perm)[i] = (uint32_t)(2 * i) | (uint32_t)(2 * i + 1) << 16;
        }
        float4 * csum = (float4 *)(smem + L.csum) + mi * L.cs_n;
        for (int c = t; c < m.n_chunks; c += NT) ggx_cp_async16(csum + c, m.chunks + c, true);
        uint4 * desc = (uint4 *)(smem + L.desc) + (size_t)mi * L.desc_n;
        for (int j = t; j < b1[mi] - b0[mi]; j += NT) ggx_cp_async16(desc + j, m.units + b0[mi] + j, true);
    }
    ggx_cp_async_commit();
    float * colsum = (float *)(smem + L.colsum);
    for (int i = t; i < (int)(r.n_mat * L.col_n); i += NT) colsum[i] = 0.0f;
    if (S.rope_mask >> r.m0 & 1) {   // split stage, a rotated matrix: (cos, sin) of each pair of its tiles
        const ggx_tile_step_matrix & m = S.m[r.m0];
        const int tb0 = ggx_load_ro(m.tile0 + b), tb1 = ggx_load_ro(m.tile0 + b + 1);
        float2 * rcs = (float2 *)(smem + L.rcs);
        for (int p = t; p < (tb1 - tb0) * 8; p += NT) {
            const int d = ggx_tile_src_col(16 * (tb0 + p / 8) + p % 8, m.pair_hd, m.pair_half) % m.pair_hd;   // a pair's first
            if (d >= m.pair_half) continue;   // a tile past the rotated dims
            float c, sn;
            ggx_rope_cos_sin(ggx_load_ro(S.pos), d, S.freq_div, S.rope, c, sn);
            rcs[p] = make_float2(c, sn);
        }
    }
}

// A split stage's outputs of the block's tiles tb0 .. (its one matrix m[mi]; colsum, its column
// sums in layout order, times 2^e): bias, RoPE of the pairs held as columns g and g + 8 of a tile
// (layout column order, ggx_tile_src_col), stored into the matrix's output (a cache row at pos[0]).
__device__ __forceinline__ void put_split(const ggx_tile_stage & S, int mi, int tb0, int n_cols, const float * colsum,
                                          const float2 * rcs, float unscale, int t, int n_threads) {
    const ggx_tile_step_matrix & m = S.m[mi];
    const float * bias = S.bias[mi];
    const bool rot = S.rope_mask >> mi & 1;
    int64_t row = 0;
    if (S.out_rows[mi] > 0) {
        row = ggx_load_ro(S.pos);
        if (row < 0 || row >= S.out_rows[mi]) return;   // (the graph's cache store checks its rows the same way)
    }
    for (int i = t; i < n_cols; i += n_threads) {
        const int n = 16 * tb0 + i, src = ggx_tile_src_col(n, m.pair_hd, m.pair_half);
        float v = colsum[i] * unscale + (bias ? bias[src] : 0.0f);
        if (rot && src % m.pair_hd < 2 * m.pair_half) {
            const int j = i ^ 8;   // the pair's other column in the tile
            const float o = colsum[j] * unscale + (bias ? bias[ggx_tile_src_col(16 * tb0 + j, m.pair_hd, m.pair_half)] : 0.0f);
            const float2 cs = rcs[i / 16 * 8 + i % 8];
            v = i % 16 < 8 ? v * cs.x - o * cs.y : o * cs.y + v * cs.x;
        }
        ggx_store_any(S.out[mi], S.out_type[mi], row * m.Np + src, v);
    }
}

// After the wait: this thread's static copies are in (the norm pass's barriers publish them).
__device__ __forceinline__ void collect_static() { ggx_cp_async_wait<0>(); }

// The matrix a warp works on: in a GLU stage (two matrices) the first half of the block's warps
// take the gate, the second half the up, each half with its own deal (deal_half), so that no warp
// restarts its pipeline cold on a second matrix halfway through the stage (session 16: gate/up
// was the one stage slower than the strip step's); otherwise the one matrix.
__device__ __forceinline__ int glu_half(const block_role & r, int warp, int W) { return r.n_mat == 2 && warp >= W / 2 ? 1 : 0; }
// Where the warp's unit range starts in its matrix's deal (two ints: first unit, end).
__device__ __forceinline__ const int * warp_deal(const ggx_tile_step_matrix & m, int n_mat, int b, int warp, int W) {
    return n_mat == 2 ? m.deal_half + (size_t)b * (W / 2 + 1) + warp % (W / 2) : m.deal + (size_t)b * (W + 1) + warp;
}

// Whether stage si of a traced launch stamps its phases of form `mode` (tile-step.h's trace_stage);
// read from the parameters where used (kept in registers, it cost the loop a spill).
__device__ __forceinline__ bool traced(const ggx_tile_step & s, int si, int mode) { return s.trace_stage >= 0 && s.trace_stage == si + 100 * mode; }

template <int W>
__global__ void __launch_bounds__(W * GGX_CUDA_WARP, 1) k_tile_step(const __grid_constant__ ggx_tile_step s, const ggx_trace_dev tr) {
    constexpr int NT = W * GGX_CUDA_WARP;
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float red[2][GGX_CUDA_WARP];
    __shared__ int trace_slot;
    ggx_trace_begin(tr, &trace_slot);
    const int b = blockIdx.x, t = threadIdx.x, lane = t % GGX_CUDA_WARP, warp = t / GGX_CUDA_WARP;
    for (int si = 0; si < s.n_stages; si++) {
        const ggx_tile_stage & S = s.st[si];
        // (the shared-memory layout is recomputed where used rather than kept: its offsets and
        // pointers held across the loop pushed it into spills)
        tl::warp_pipe pipe;
        float unscale;
        {
            const stage_smem L = stage_smem_of(S);
            const int K = S.K;
            float * xw = (float *)smem;
            const uint16_t * perm = (const uint16_t *)(smem + L.perm);
            half * xs = (half *)(smem + L.xs);
            float4 * step_sums = (float4 *)(smem + L.step_sums);
            float4 * csum = (float4 *)(smem + L.csum);

            // before the wait: the static tables, and each warp's first words (its deal read first,
            // with the block's)
            const block_role r = role_of(S, b);
            const int mi = r.m0 + glu_half(r, warp, W);
            const int * deal = warp_deal(S.m[mi], r.n_mat, r.b, warp, W);
            const int u0 = ggx_load_ro(deal), u1 = ggx_load_ro(deal + 1);
            stage_static<NT>(S, L, smem, b, t);
            tl::warp_begin(S.m[mi].words, S.m[mi].units, u0, u1, lane, pipe);
            if (traced(s, si - 1, 2)) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_C);
            ggx_step::stage_wait(si, s.n_stages, s.counter, tr, &trace_slot);
            if (traced(s, si, 0) || traced(s, si, 1)) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_A);
            collect_static();

            // x w and its scaling, then each matrix's x gathered through q_perm into fragment
            // order with its step sums, then its chunk sums
            const ggx_step::x_scaling xsc = ggx_step::norm_pass(S, xw, t, NT, red);
            if (traced(s, si, 1)) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_B);
            unscale = xsc.unscale;
            for (int mi = 0; mi < r.n_mat; mi++) {
                const uint16_t * pm = perm + (size_t)mi * K;
                auto rows = [&](int step, float(&v)[16]) {   // perm as uint16 pairs, low half first
                    const uint4 p0 = *(const uint4 *)(pm + 16 * step), p1 = *(const uint4 *)(pm + 16 * step + 8);
                    const uint32_t pw[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        v[2 * j] = xw[pw[j] & 0xffffu] * xsc.scale;
                        v[2 * j + 1] = xw[pw[j] >> 16] * xsc.scale;
                    }
                };
                tl::stage_x(K, rows, xs + mi * L.xs_n, step_sums + (size_t)mi * (K / 16), t, NT,
                            S.m[r.m0 + mi].variants);
            }
            __syncthreads();
            if (traced(s, si, 1)) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_C);
            {   // a GLU's two matrices side by side, each on half the threads (one chain per thread, not two)
                const int half = r.n_mat == 2 ? NT / 2 : NT, mi = t / half;
                const ggx_tile_step_matrix & m = S.m[r.m0 + mi];
                tl::chunk_sums(m.n_chunks, m.Np, step_sums + (size_t)mi * (K / 16), csum + mi * L.cs_n, t - mi * half, half);
            }
            __syncthreads();
        }
        if (si == 0) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_LOOP);
        if (traced(s, si, 0)) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_B);

        {
            const stage_smem L = stage_smem_of(S);
            const block_role r = role_of(S, b);
            const int mi = glu_half(r, warp, W);   // (its slots in shared memory; S.m[r.m0 + mi] its matrix)
            const ggx_tile_step_matrix & m = S.m[r.m0 + mi];
            const int * deal = warp_deal(m, r.n_mat, r.b, warp, W);
            const int b0 = ggx_load_ro(m.deal + (size_t)r.b * (W + 1)), u0 = ggx_load_ro(deal), u1 = ggx_load_ro(deal + 1);
            const tl::warp_src src = {m.words, (const ggx_tile_unit_dev *)(smem + L.desc) + mi * L.desc_n - b0, m.scales,
                                      (const half *)(smem + L.xs) + mi * L.xs_n, (const float4 *)(smem + L.csum) + mi * L.cs_n, S.K, 0};
            smem_sink sink = {(float *)(smem + L.colsum) + mi * L.col_n, ggx_load_ro(m.tile0 + r.b)};
            tl::warp_run(src, u0, u1, lane, pipe, sink);
        }
        __syncthreads();
        if (si == 0) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_LOOP_END);
        if (traced(s, si, 0)) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_C);
        if (traced(s, si, 2)) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_A);
        {
            // the owners' epilogue (m[1] of a GLU has the same tiles)
            const stage_smem L = stage_smem_of(S);
            const block_role r = role_of(S, b);
            const float * colsum = (const float *)(smem + L.colsum);
            const int tb0 = ggx_load_ro(S.m[r.m0].tile0 + r.b), tb1 = ggx_load_ro(S.m[r.m0].tile0 + r.b + 1);
            if (S.split) {
                put_split(S, r.m0, tb0, (tb1 - tb0) * 16, colsum, (const float2 *)(smem + L.rcs), unscale, t, NT);
            } else {
                for (int i = t; i < (tb1 - tb0) * 16; i += NT) {
                    const int n = 16 * tb0 + i;
                    if (n < S.N) ggx_step::put_output(S, n, colsum[i], S.epi == GGX_STRIP_GLU ? colsum[L.col_n + i] : 0.0f, unscale);
                }
            }
        }
        if (traced(s, si, 2)) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_B);
        if (s.trace_stage < 0 && si < 3) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_A + si);   // stage ends (first three)
        if (si + 1 < s.n_stages) ggx_step::grid_arrive(s.counter);
        else __syncthreads();
    }
    ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_EXIT);
}

#endif  // !GGX_USE_HIP

}  // namespace

ggx_tile_step_plan ggx_tile_step_deal(const ggx::TileLayout & L, int grid, int warps) {
    ggx_tile_step_plan P;
    P.tile0.assign((size_t)grid + 1, 0);
    P.deal.assign((size_t)grid * (warps + 1), 0);
    for (int b = 0; b <= grid; b++) P.tile0[b] = (int)((int64_t)L.n_tiles * b / grid);
    for (int b = 0; b < grid; b++) {
        int * d = P.deal.data() + (size_t)b * (warps + 1);
        ggx::deal_by_weight(L.tile_unit0[P.tile0[b]], L.tile_unit0[P.tile0[b + 1]], warps, [&](int u) { return (uint64_t)L.units[u].n_uint4; }, d);
        P.max_tiles = std::max(P.max_tiles, P.tile0[b + 1] - P.tile0[b]);
        P.max_units = std::max(P.max_units, d[warps] - d[0]);
    }
    return P;
}

size_t ggx_tile_stage_smem(const ggx_tile_stage & S) { return stage_smem_of(S).total; }

size_t ggx_tile_step_smem(const ggx_tile_step & s) {
    size_t need = 0;
    for (int i = 0; i < s.n_stages; i++) need = std::max(need, stage_smem_of(s.st[i]).total);
    return need;
}

cudaError_t ggx_cuda_tile_step(const ggx_tile_step & s, int grid, cudaStream_t stream, bool pdl, const ggx_trace_dev * trace) {
#if defined(GGX_USE_HIP)
    (void)s;
    (void)grid;
    (void)stream;
    (void)pdl;
    (void)trace;
    return cudaErrorNotSupported;   // mma.sync is NVIDIA's
#else
    const size_t smem = ggx_tile_step_smem(s);
    const int W = ggx_tile_step_warps(s.st[0].m[0].warps);
    void (*kernel)(ggx_tile_step, ggx_trace_dev) = W == 12 ? k_tile_step<12> : k_tile_step<16>;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return err;
    const ggx_trace_dev tr = trace ? *trace : ggx_trace_dev{};
    return ggx_cuda_launch_ex(stream, pdl, kernel, dim3(grid), dim3(W * GGX_CUDA_WARP), smem, s, tr);
#endif
}

cudaError_t ggx_cuda_tile_step_gemv(const ggx_tile_step_matrix & m, const float * xq, float * y, int * counter, cudaStream_t stream) {
    ggx_tile_step s = ggx_step::one_matrix_step<ggx_tile_step>(m, xq, y, counter);
    s.st[0].m[0].perm = nullptr;
    return ggx_cuda_tile_step(s, m.grid, stream);
}
