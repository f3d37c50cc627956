// Attention kernels; see attn.cuh. Decode with an f16 cache and at most 16 query rows per KV
// head goes to the tensor-core kernel of attn-decode.cu; the rest comes here.
//
// k_attn_split (decode otherwise, and the fallback for any T): grid (Hkv x qsplit, n_splits, T),
// 256 threads (128 on HIP). The
// block owns keys [s*chunk, (s+1)*chunk) (decode: of the keys visible at pos, so the work follows
// the cache depth, not its capacity) and walks them in tiles of up to 64 keys that async copies
// bring into shared memory, two tiles in flight; the first two tiles' rows written by earlier
// steps are requested before the PDL wait:
//   scores: a few lanes per key (one 8-value piece of the row each, summed by shuffles), the G
//           query heads of this KV head in registers; softcap.
//   softmax: online (running max m, running sum l per head), p kept in shared memory.
//   values: thread = (key lane, 8-dim group); G x 8 accumulators per thread, key lanes summed
//           once at the end.
// Splits without visible keys exit at once. With one split left the block normalises and writes
// the output; otherwise each writes (m, l, acc), and the last block of its (KV head, token) to
// finish (an atomic counter, reset for the next launch) merges the splits: no second launch.
// Prefill (T > 8, f16 cache) goes to the FlashAttention-2 style tensor-core kernel of
// attn-prefill.cu.
#include "attn.cuh"
#include "attn-common.cuh"
#include "async-copy.cuh"
#include "decode-plan.h"   // ggx_cuda_attn_is_prefill
#include "env-knobs.h"

#include <algorithm>

namespace {

using namespace ggx_cuda_attn;

// Threads of a k_attn_split block: 8 warps share a tile's keys, so that each walks fewer of them
// (the kernel is latency-bound: ~6 cycles per instruction at 128 threads, ncu). HIP keeps 4 warps:
// the key lanes' partial outputs of 8 warps would not fit its 64 KB of LDS next to the tiles.
#if defined(GGX_USE_HIP)
constexpr int k_threads = 128;
#else
constexpr int k_threads = 256;
#endif  // GGX_USE_HIP
constexpr int k_max_g = 8;                    // query heads per KV head
constexpr int k_max_hd = 256;
constexpr int k_tile_bytes = 16 * 1024;       // K + V rows of one decode tile: 32 keys at hd 128 f16, 64 at hd 64

// 8 consecutive cache values as floats (one 16-byte load for f16/bf16, two for f32).
__device__ __forceinline__ void load8(const half * p, float (&v)[8]) {
    const uint4 u = *(const uint4 *)p;
    const half2 * h = (const half2 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) { const float2 f = __half22float2(h[i]); v[2 * i] = f.x; v[2 * i + 1] = f.y; }
}
__device__ __forceinline__ void load8(const nv_bfloat16 * p, float (&v)[8]) {
    const uint4 u = *(const uint4 *)p;
    const nv_bfloat16 * b = (const nv_bfloat16 *)&u;
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = __bfloat162float(b[i]);
}
__device__ __forceinline__ void load8(const float * p, float (&v)[8]) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

// Lanes that share one key in the score phase: its 8-value pieces, padded to a power of two so
// that the partial dot products add up with xor shuffles inside a warp.
__host__ __device__ inline int score_lanes(int hd) {
    int p = 1;
    while (p < hd / 8) p *= 2;
    return p;
}

// Shared memory of k_attn_split: two stages of K and V tiles (reused for the key lanes' partial
// outputs [KL][G][hd] after the last tile), then ps [G][max(tk, 32)], and ms, ls, al [G].
__host__ __device__ inline int tiles_bytes(int G, int hd, int tk, int elem) {
    const int kl = k_threads / (hd / 8);
    return max(4 * tk * hd * elem, kl * G * hd * (int)sizeof(float));
}
__host__ __device__ inline int ps_ld(int tk) { return max(tk, 32); }

// Tiles of tile_keys keys go through shared memory with async copies, double-buffered. The rows
// that earlier steps wrote do not depend on the previous kernel (it writes only the rows at pos),
// so the first two tiles' copies are issued before the PDL wait and overlap the qkv GEMV's tail.
// Scores: score_lanes(hd) lanes per key, each dotting one 8-value piece of the row with the G
// queries it holds in registers, summed by shuffles. Values: thread = (key lane kl, 8-dim group
// dg); each key lane sums its keys into G x 8 registers, and the key lanes are added up at the end.
// GM: query heads per KV head the registers are sized for (G <= GM; 1, 4 or 8): the unrolled
// loops over heads are most of the kernel's code, and code run once per launch is not cheap.
template <typename TC, int GM>
__global__ void __launch_bounds__(k_threads) k_attn_split(const __grid_constant__ attn_args a) {
    extern __shared__ float4 sm4[];
    // G: query heads per KV head; this block takes GB of them, from head h0 (a.qsplit blocks per KV head)
    const int G = a.H / a.Hkv, GB = G / a.qsplit, hd = a.hd, TK = a.tile_keys;
    const int kvh = blockIdx.x / a.qsplit, split = blockIdx.y, t = blockIdx.z;
    const int h0 = kvh * G + (blockIdx.x % a.qsplit) * GB;   // first query head of this block
    TC * kv_s = (TC *)sm4;                  // stage s: K at 2 s * TK * hd, V after it
    float * red = (float *)sm4;             // [KL][G][hd], once the tiles are done
    float * ps = (float *)((char *)sm4 + tiles_bytes(GB, hd, TK, (int)sizeof(TC)));   // [GB][ps_ld]
    const int pld = ps_ld(TK);
    float * ms = ps + GB * pld;             // [GB] running max
    float * ls = ms + GB;                   // [GB] running sum
    float * al = ls + GB;                   // [GB] rescale of this tile
    const TC * K = (const TC *)a.k;
    const TC * V = (const TC *)a.v;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int DG = hd / 8, KL = k_threads / DG;
    const int kl = tid / DG, dg = tid % DG;
    const int SL = score_lanes(hd), KS = k_threads / SL;   // score phase: KS keys at a time
    const int ks = tid / SL, sg = tid % SL;

    __shared__ int trace_slot;
    ggx_trace_begin(a.trace, &trace_slot);
    if (attn_done_in_qkv_tail(a, &trace_slot)) return;
    // pos is uploaded before the graph runs: the key range is known before the wait
    const int p_t = a.pos[t];
    const int p_vis = a.non_causal ? a.pos[a.T - 1] : p_t;   // last visible key
    int k_lo, k_hi, n_active = 1;   // n_active: the splits that hold visible keys
    if (a.chunk > 0) {   // one split (make_plan)
        k_lo = split * a.chunk;
        k_hi = min(min(a.C, k_lo + a.chunk), p_vis + 1);
        if (a.window > 0) k_lo = max(k_lo, p_vis - a.window + 1);
    } else {   // split the visible keys evenly (multiples of 64)
        const int lo0 = a.window > 0 ? max(0, p_vis - a.window + 1) : 0;
        const int end = min(a.C, p_vis + 1);
        const int chunk = max(a.min_chunk, ((max(end - lo0, 1) + a.n_splits - 1) / a.n_splits + 63) / 64 * 64);
        k_lo = lo0 + split * chunk;
        k_hi = min(end, k_lo + chunk);
        n_active = max(1, (end - lo0 + chunk - 1) / chunk);
        // The others have nothing to add (every block computes the same n_active): at short
        // contexts one split does all, writes the output itself and nothing is merged.
        if (split >= n_active) {
            ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_EXIT);
            return;
        }
    }
    const int n_tiles = k_hi > k_lo ? (k_hi - k_lo + TK - 1) / TK : 0;
    // rows at or past `fresh` are written by this step's qkv GEMV (decode: the rows at pos)
    int fresh = 0;
    if (a.T <= 8) {
        fresh = p_t;
        for (int i = 0; i < a.T; i++) fresh = min(fresh, a.pos[i]);
    }
    // copies of the rows [r_lo, r_hi) of tile `tile` (clipped to the tile and the range)
    const int pieces = hd * (int)sizeof(TC) / 16;   // 16-byte pieces per row
    auto issue = [&](int tile, int r_lo, int r_hi) {
        const int j0 = k_lo + tile * TK;
        const int lo = max(r_lo, j0), hi = min(min(r_hi, k_hi), j0 + TK);
        TC * kd = kv_s + (size_t)(tile & 1) * 2 * TK * hd;
        TC * vd = kd + (size_t)TK * hd;
        auto copy = [&](int r, int c) {
            const size_t off = ((size_t)r * a.Hkv + kvh) * hd + c;
            ggx_cp_async16(kd + (r - j0) * hd + c, K + off, true);
            ggx_cp_async16(vd + (r - j0) * hd + c, V + off, true);
        };
        if (k_threads % pieces == 0) {   // a thread keeps its piece column: no division per copy
            const int c = (tid % pieces) * (16 / (int)sizeof(TC));
            for (int r = lo + tid / pieces; r < hi; r += k_threads / pieces) copy(r, c);
        } else {
            for (int i = tid; i < (hi - lo) * pieces; i += k_threads) copy(lo + i / pieces, (i % pieces) * (16 / (int)sizeof(TC)));
        }
    };
    for (int i = 0; i < 2 && i < n_tiles; i++) issue(i, k_lo, fresh);
    ggx_cp_async_commit();

    // q and the rows at pos come from the previous kernel (the qkv GEMV); the next one (the o
    // GEMV) may start its static loads on the SMs this small grid leaves free
    ggx_pdl_wait();
    ggx_pdl_launch_next();
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_WAITED);
    for (int i = 0; i < 2 && i < n_tiles; i++) issue(i, fresh, INT_MAX);
    ggx_cp_async_commit();

    float qr[GM][8];   // this lane's piece of each query head, pre-scaled
#pragma unroll
    for (int g = 0; g < GM; g++) {
        const bool on = g < GB && sg < DG;
        const float * qp = a.q + ((size_t)t * a.H + h0 + g) * hd + sg * 8;
#pragma unroll
        for (int e = 0; e < 8; e++) qr[g][e] = on ? qp[e] * a.scale : 0.0f;
    }
    if (tid < GB) { ms[tid] = -INFINITY; ls[tid] = 0.0f; }
    float acc[GM][8];
#pragma unroll
    for (int g = 0; g < GM; g++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[g][e] = 0.0f;
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_LOOP);

    const int trace_it = a.trace_last ? n_tiles - 1 : 0;   // the tile whose phases A, B, C time
    for (int it = 0; it < n_tiles; it++) {
        // tile it+1 was issued at the end of the previous iteration (for it >= 1): leave it in flight
        if (it >= 1 && it + 1 < n_tiles) ggx_cp_async_wait<1>();
        else ggx_cp_async_wait<0>();
        __syncthreads();
        if (it == trace_it) ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_A);
        const int j0 = k_lo + it * TK, nj = min(TK, k_hi - j0);
        const TC * kt = kv_s + (size_t)(it & 1) * 2 * TK * hd;
        const TC * vt = kt + (size_t)TK * hd;
        // scores: every lane walks the same keys (the shuffles need the whole warp)
        for (int j = 0; j < nj; j += KS) {
            const int jj = j + ks;
            const bool ok = jj < nj && sg < DG;
            float kf[8];
            if (ok) load8(kt + (size_t)jj * hd + sg * 8, kf);
            else
#pragma unroll
                for (int e = 0; e < 8; e++) kf[e] = 0.0f;
#pragma unroll
            for (int g = 0; g < GM; g++) {
                if (g < GB) {   // (a break here keeps hipcc from unrolling)
                    float d = 0.0f;
#pragma unroll
                    for (int e = 0; e < 8; e++) d = fmaf(qr[g][e], kf[e], d);
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1)
                        if (o < SL) d += __shfl_xor_sync(0xffffffffu, d, o);
                    if (sg == 0 && jj < nj) ps[g * pld + jj] = a.softcap > 0.0f ? a.softcap * tanhf(d / a.softcap) : d;
                }
            }
        }
        __syncthreads();
        if (it == trace_it) ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_B);
        // online softmax, one warp per head
        for (int g = warp; g < GB; g += k_threads / 32) {
            float m = -INFINITY;
            for (int jj = lane; jj < nj; jj += 32) m = fmaxf(m, ps[g * pld + jj]);
            m = ggx_warp_max(m);
            const float m_old = ms[g], m_new = fmaxf(m_old, m);
            float l = 0.0f;
            for (int jj = lane; jj < nj; jj += 32) {
                const float p = m_new == -INFINITY ? 0.0f : __expf(ps[g * pld + jj] - m_new);
                ps[g * pld + jj] = p;
                l += p;
            }
            l = ggx_warp_sum(l);
            if (lane == 0) {
                const float r = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
                al[g] = r;
                ls[g] = ls[g] * r + l;
                ms[g] = m_new;
            }
        }
        __syncthreads();
        if (it == trace_it) ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_C);
        if (kl < KL) {
#pragma unroll
            for (int g = 0; g < GM; g++) {
                if (g < GB) {   // (with a break hipcc does not unroll these loops)
                    const float r = al[g];
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[g][e] *= r;
                }
            }
            for (int jj = kl; jj < nj; jj += KL) {
                float vf[8];
                load8(vt + (size_t)jj * hd + dg * 8, vf);
#pragma unroll
                for (int g = 0; g < GM; g++) {
                    if (g < GB) {
                        const float p = ps[g * pld + jj];
#pragma unroll
                        for (int e = 0; e < 8; e++) acc[g][e] = fmaf(p, vf[e], acc[g][e]);
                    }
                }
            }
        }
        __syncthreads();   // this stage is free: the tile after next goes into it
        if (it + 2 < n_tiles) issue(it + 2, k_lo, INT_MAX);
        ggx_cp_async_commit();
    }
    // add up the key lanes
    if (kl < KL)
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (g < GB) {
#pragma unroll
                for (int e = 0; e < 8; e++) red[((size_t)kl * GB + g) * a.hd + dg * 8 + e] = acc[g][e];
            }
        }
    __syncthreads();
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_LOOP_END);
    const int stride = part_stride(a.hd);
    for (int o = tid; o < GB * a.hd; o += k_threads) {
        const int g = o / a.hd, d = o % a.hd;
        float r = 0.0f;
        for (int k = 0; k < KL; k++) r += red[((size_t)k * GB + g) * a.hd + d];
        if (n_active == 1) {
            const float l = ls[g];
            a.out[((size_t)t * a.H + h0 + g) * a.hd + d] = l > 0.0f ? r / l : 0.0f;
        } else {
            float * pp = a.part + (((size_t)t * a.H + h0 + g) * a.n_splits + split) * stride;
            pp[4 + d] = r;
            if (d == 0) { pp[0] = ms[g]; pp[1] = ls[g]; }
        }
    }
    if (n_active == 1) {
        ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_HANDOFF);
        ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_EXIT);
        return;
    }

    // the last active block of this (query heads, token) merges the splits
    const bool last = arrive_last(a.counters + t * gridDim.x + blockIdx.x, n_active);
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_HANDOFF);
    if (last) merge_splits(a, t, h0, GB, n_active, ps, red, ms, ls);   // (ns <= 32 <= ps_ld)
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_EXIT);
}

struct plan {
    int chunk, n_splits, min_chunk = 64;
};

// GGX_ATTN_DECODE_MMA=0 sends decode to k_attn_split even where the tensor-core kernel applies
// (measurements).
bool decode_mma() {
    static const bool v = ggx_env_int("GGX_ATTN_DECODE_MMA", 1) != 0;
    return v;
}

// The dispatch's choice for a decode ATTN node: the tensor-core kernel (k_attn_decode) where it
// applies and is not turned off. ggx_cuda_attn_reads_rows asks the same.
bool decode_on_mma(int hd, int G, int T, int cache_type) { return decode_mma() && decode_mma_ok(hd, G, T, cache_type); }

// Blocks per KV head in k_attn_split (GGX_ATTN_QSPLIT, measurements): each takes G / qsplit of
// the KV head's query heads, so K/V tiles are read qsplit times (from L2) and a block's chain is
// shorter. 1 unless the variable names a divisor of G.
int attn_qsplit(int G) {
    static const int v = ggx_env_int("GGX_ATTN_QSPLIT", 1);
    return v >= 1 && G % v == 0 ? v : 1;
}

// At least this many visible keys per decode split (GGX_ATTN_MIN_SPLIT_KEYS, a multiple of 64,
// default 128). Past it, two or more splits run and merge their partials; below, one split
// writes the output alone. Run 132 (H200, llama3-8b 4.0 bpw, tg128 at ctx 16 / 512 / 4096):
// 64 -> 411.3 / 396.4 / 365.1 t/s, 128 -> 420.4 / 397.3 / 365.0, 256 -> 421.6 / 384.8 / 364.9,
// 512 -> 421.8 / 368.5 / 356.0: one split up to 128 keys saves the merge at short contexts, and
// longer lone walks lose at 512. Read per plan (host code, once per captured graph) so that a
// test can set it.
static int min_split_keys() {
    const int n = ggx_env_int("GGX_ATTN_MIN_SPLIT_KEYS", 128);
    return std::max(64, std::min(1 << 16, (n + 63) / 64 * 64));
}

// K/V tiles each warp of the tensor-core decode kernel keeps in flight: 3 where this launch's
// splits can give a warp more than 2 tiles (decode_mma_stages), else 2. GGX_ATTN_STAGES=2|3
// forces one (read per launch, host code, once per captured graph, so that a test can set it).
// Runs 144-145 (H100, llama3-8b 4.0 bpw, a cache of 4096 + 128 tokens, 3 against 2 stages):
// tg128 @4096 +2.4% (349.5 / 341.4 t/s: 22 splits of 192 keys, 3 tiles per warp), @16 and @2048
// equal, @512 -1.3% (370.6 / 375.5). 2 stages in 3 stages' shared memory lose the same at 512 and
// gain half of it at 4096 (346.0): the allocation's size moved the L1/shared split the SMs ran
// at, so the split changed at other kernel boundaries. With every decode kernel at one split (the
// carveout, common.cuh) 3 against 2 stages are -0.2% at 512 and +0.7% at 4096 (run 147). With
// the default 32 splits of at least 128 keys, caches of up to 4096 keys never give a warp a
// third tile and keep 2.
static int decode_stages(const attn_args & a) {
    const int forced = ggx_env_int("GGX_ATTN_STAGES", 0);
    return forced == 2 || forced == 3 ? forced : decode_mma_stages(a);
}
// GGX_ATTN_SMEM_STAGES=3 (measurements): shared memory sized for 3 stages whatever the kernel
// walks with, to tell the cost of the larger allocation from that of the third stage.
static int decode_smem_stages() { return ggx_env_int("GGX_ATTN_SMEM_STAGES", 0) == 3 ? 3 : 0; }

plan make_plan(const ggx_tensor * dst) {
    const ggx_tensor * kc = dst->src[1];
    const int C = (int)(ggx_nelements(kc) / (kc->ne[0] * kc->ne[1]));
    const int T = (int)(dst->src[0]->ne[2] * dst->src[0]->ne[3]);
    plan p;
    if (T > 8) {            // many queries fill the GPU by themselves
        p.chunk = C;
        p.n_splits = 1;
        return p;
    }
    // Up to 32 splits of the keys actually visible (chunk 0: each block sizes its chunk from pos on
    // the device, so a captured graph fits every cache depth); at least min_split_keys() keys per
    // split, so that short contexts take one split and skip the merge.
    p.chunk = 0;
    p.n_splits = std::max(1, std::min(32, (C + 63) / 64));
    p.min_chunk = min_split_keys();
    return p;
}

// Keys per shared-memory tile of k_attn_split: K + V of a tile within k_tile_bytes (and within
// what the device lets a block have: two stages plus the scores), at most 64.
int tile_keys(const ggx_cuda_ctx & ctx, int hd, int elem) {
    const int budget = std::min<int>(k_tile_bytes, ((int)ctx.smem_optin - 8 * 1024) / 2);
    int tk = 64;
    while (tk > 1 && 2 * tk * hd * elem > budget) tk /= 2;
    return tk;
}

size_t smem_bytes(int G, int hd, int tk, int elem) {
    return (size_t)tiles_bytes(G, hd, tk, elem) + sizeof(float) * ((size_t)G * ps_ld(tk) + 3 * (size_t)G);
}

template <typename TC, int GM>
ggx_status launch_split_g(const ggx_cuda_ctx & ctx, const attn_args & a, dim3 grid) {
    size_t smem = smem_bytes(a.H / a.Hkv / a.qsplit, a.hd, a.tile_keys, (int)sizeof(TC));
#if !defined(GGX_USE_HIP)
    // At most two blocks per SM (shared memory padded past a third of the SM's): the blocks start
    // on the SMs the qkv GEMV frees first, and without the cap the scheduler stacked four of these
    // latency-bound blocks on each of the first SMs (66 SMs for 256 blocks, 4 for 16).
    smem = std::max(smem, std::min(ctx.smem_optin, ctx.smem_per_sm / 3 + 1024));
#endif  // !GGX_USE_HIP
    void (*kernel)(attn_args) = k_attn_split<TC, GM>;   // (a template's comma would split a macro's arguments)
    static size_t allowed = 48 * 1024;   // raising the dynamic shared memory limit is per kernel
    if (smem > allowed) {
        GGX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        allowed = smem;
    }
    return ggx_cuda_launch(ctx, kernel, grid, dim3(k_threads), smem, a);
}

template <typename TC>
ggx_status launch_split(const ggx_cuda_ctx & ctx, const attn_args & a, dim3 grid) {
    const int G = a.H / a.Hkv / a.qsplit;
    if (G == 1) return launch_split_g<TC, 1>(ctx, a, grid);
    if (G <= 4) return launch_split_g<TC, 4>(ctx, a, grid);
    return launch_split_g<TC, k_max_g>(ctx, a, grid);
}

}  // namespace

bool ggx_cuda_supports_attn(const ggx_tensor * dst) {
    const ggx_tensor * q = dst->src[0];
    const ggx_tensor * k = dst->src[1];
    const ggx_tensor * v = dst->src[2];
    const ggx_tensor * pos = dst->src[3];
    if (q->type != GGX_TYPE_F32 || !pos || pos->type != GGX_TYPE_I32) return false;
    if (k->type != v->type || !ggx_cuda_is_ftype(k->type)) return false;
    const int64_t hd = q->ne[0], H = q->ne[1];
    if (k->ne[0] != hd || v->ne[0] != hd || k->ne[1] != v->ne[1] || k->ne[1] <= 0 || H % k->ne[1]) return false;
    const int64_t G = H / k->ne[1];
    if (hd > k_max_hd || hd % 8 || G > k_max_g) return false;
    return ggx_nelements(pos) >= q->ne[2] * q->ne[3];
}

bool ggx_cuda_attn_is_prefill(const ggx_tensor * dst) { return dst->op == GGX_OP_ATTN && prefill_ok(dst); }

// The tensor-core decode kernel (k_attn_decode) reads the q/k/v rows, and only for one query row.
bool ggx_cuda_attn_reads_rows(const ggx_tensor * dst) {
    const ggx_tensor * q = dst->src[0], * kc = dst->src[1];
    return dst->op == GGX_OP_ATTN && ggx_cuda_supports_attn(dst) && !prefill_ok(dst) && q->ne[2] * q->ne[3] == 1 &&
           decode_on_mma((int)q->ne[0], (int)(q->ne[1] / kc->ne[1]), 1, (int)kc->type);
}

size_t ggx_cuda_attn_scratch(const ggx_tensor * dst) {
    if (prefill_ok(dst)) return 0;
    const plan p = make_plan(dst);
    if (p.n_splits == 1) return 0;
    const ggx_tensor * q = dst->src[0];
    return sizeof(float) * (size_t)(q->ne[2] * q->ne[3]) * q->ne[1] * p.n_splits * (q->ne[0] + 4);
}

ggx_status ggx_cuda_op_attn(ggx_cuda_ctx & ctx, ggx_tensor * dst, half * x16, int tail_bound, const ggx_attn_rows * rows) {
    const ggx_tensor * q = dst->src[0];
    const ggx_tensor * kc = dst->src[1];
    attn_args a = {};
    a.q = (const float *)q->data;
    a.k = kc->data;
    a.v = dst->src[2]->data;
    a.pos = (const int32_t *)dst->src[3]->data;
    a.out = (float *)dst->data;
    a.part = (float *)ctx.scratch;
    a.counters = ctx.counters;
    a.hd = (int)q->ne[0];
    a.H = (int)q->ne[1];
    a.T = (int)(q->ne[2] * q->ne[3]);
    a.Hkv = (int)kc->ne[1];
    a.C = (int)(ggx_nelements(kc) / (kc->ne[0] * kc->ne[1]));
    const plan p = make_plan(dst);
    a.chunk = p.chunk;
    a.n_splits = p.n_splits;
    a.min_chunk = p.min_chunk;
    a.scale = dst->params.attn.scale;
    a.softcap = dst->params.attn.softcap;
    a.window = dst->params.attn.window;
    a.non_causal = dst->params.attn.non_causal;
    a.tail_bound = tail_bound;
    if (a.T == 0) return GGX_STATUS_OK;
    if (x16 && !prefill_ok(dst)) {
        ggx_set_error("cuda: attention %s: fp16 output is only on the prefill path", dst->name);
        return GGX_STATUS_FAILED;
    }
    a.out16 = x16;
#if defined(GGX_ATTN_WMMA)
    if (prefill_ok(dst)) return prefill_launch(ctx, a);
#endif  // GGX_ATTN_WMMA
    if (ctx.scratch_size < ggx_cuda_attn_scratch(dst)) {
        ggx_set_error("cuda: scratch too small for attention %s", dst->name);
        return GGX_STATUS_FAILED;
    }
    if (ctx.trace) {
        a.trace = ggx_cuda_trace_launch(ctx, dst->name);
        static const bool last = ggx_env_int("GGX_ATTN_TRACE_LAST", 0) != 0;
        a.trace_last = last;
    }
    if (rows) {   // the plan's choice (ggx_cuda_attn_reads_rows): no other kernel reads them
        if (!ctx.qkv_rows || !ggx_cuda_attn_reads_rows(dst) || tail_bound > 0) {
            ggx_set_error("cuda: attention %s: the q/k/v rows are for the one-row tensor-core decode kernel only", dst->name);
            return GGX_STATUS_FAILED;
        }
        a.q = ctx.qkv_rows + rows->q;
        a.rows_k = ctx.qkv_rows + rows->k;
        a.rows_v = ctx.qkv_rows + rows->v;
    }
    if (decode_on_mma(a.hd, a.H / a.Hkv, a.T, (int)kc->type)) {
        a.stages = decode_stages(a);
        a.smem_stages = decode_smem_stages();
        return decode_mma_launch(ctx, a);
    }
    a.tile_keys = tile_keys(ctx, a.hd, (int)ggx_type_size(kc->type));
    a.qsplit = attn_qsplit(a.H / a.Hkv);
    const dim3 grid(a.Hkv * a.qsplit, a.n_splits, a.T);
    switch (kc->type) {
        case GGX_TYPE_F32:  return launch_split<float>(ctx, a, grid);
        case GGX_TYPE_F16:  return launch_split<half>(ctx, a, grid);
        default:            return launch_split<nv_bfloat16>(ctx, a, grid);
    }
}
