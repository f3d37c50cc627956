// Prefill attention (T > 8 query rows, f16 cache): FlashAttention-2 style, mma.sync m16n8k16
// (f16 in, f32 accumulate). CUDA only: the inline PTX (mma.sync, ldmatrix, cp.async) has no HIP
// form here, so a HIP build sends prefill to k_attn_split (attn.cu).
//
// Grid (H, ceil(T / BQ)), 128 threads = 4 warps; hd in {64, 80, 96, 128}. A block holds BQ = 64 MT
// queries of one head (pre-scaled, f16); warp w owns query rows 16 MT w .. 16 MT (w + 1) - 1, MT
// row tiles of 16, and keeps everything about them in registers: the S = Q K^T tiles (16 x BK
// each, f32), the online-softmax state (max m and partial sum l of rows g and g + 8 of each row
// tile, g = lane / 4) and the output O (16 x hd per row tile, f32). P goes from the S accumulators
// straight into the A fragments of P V (same register layout), so S and P never touch shared
// memory. K/V tiles of BK keys are shared by the 4 warps, double-buffered with cp.async (the next
// tile loads while this one is used). Keys outside [k_begin, k_end) are zero-filled by cp.async
// (an unwritten cache row could hold NaN, and 0 * NaN would poison the sum). Only the tiles some
// query of the block can see are walked; a warp skips a tile none of its rows sees and masks only
// tiles that are partly visible. Query tiles are issued last-first: causal work grows with the
// tile index, so the long blocks start first and the short ones fill the tail.
//
// MT = 1 (BK = 64): Q's fragments stay in registers, and every K or V fragment a warp reads from
// shared memory feeds two mma: ~256 bytes of ldmatrix per mma. MT = 2 (BK = 32 so that S and O
// fit 255 registers: 246 at hd 128, no spills): each K or V fragment feeds four mma (two row
// tiles) and Q's fragments are read per k-step, ~192 bytes per mma; 2.7% faster at T = 2048 on
// the H200 (run 143), slower where its grid leaves SMs without two blocks (launch_rows). 8 warps
// and 128 queries per block with MT = 1 measured slower on the H200 (227 against 206 us for
// llama3-8b at T = 2048).
#include "attn-common.cuh"
#include "async-copy.cuh"
#include "env-knobs.h"

namespace ggx_cuda_attn {

#if defined(GGX_ATTN_WMMA)
namespace {

constexpr int fa_warps = 4, fa_threads = 32 * fa_warps;

template <int HD, int MT> struct fa_cfg {
    static constexpr int bq = 16 * MT * fa_warps;   // queries per block
    static constexpr int bk = MT == 1 ? 64 : 32;    // keys per tile (MT = 2: S in half the registers)
    static constexpr int ld = HD + 8;               // halves per shared row: +16 bytes keeps ldmatrix conflict-free
    static constexpr int tile = bk * ld;            // halves per K or V tile
    static constexpr size_t bytes = sizeof(half) * ((size_t)bq * ld + 4 * (size_t)tile);   // Q + 2 stages of K, V
    static constexpr bool q_regs = MT == 1;         // Q's fragments held in registers (else read per k-step)
};

template <int HD, int MT>
__global__ void __launch_bounds__(fa_threads) k_attn_prefill(attn_args a) {
    using C = fa_cfg<HD, MT>;
    constexpr int BQ = C::bq, BK = C::bk;
    constexpr int NT_S = BK / 8;       // n-tiles of S
    constexpr int NT_O = HD / 8;       // n-tiles of O
    constexpr int KS = HD / 16;        // k-steps of Q K^T
    extern __shared__ __align__(128) unsigned char smraw[];
    half * Qs = (half *)smraw;
    half * KV = Qs + BQ * C::ld;       // stage s: K at KV + 2s*tile, V right after
    __shared__ int range[2];
    const int h = blockIdx.x, q0 = (gridDim.y - 1 - blockIdx.y) * BQ;
    const int G = a.H / a.Hkv, kvh = h / G;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const half * K = (const half *)a.k;
    const half * V = (const half *)a.v;
    const int p_last = a.pos[a.T - 1];

    if (tid == 0) { range[0] = 1 << 30; range[1] = 0; }
    // Q: all of a thread's 16-byte loads are issued before the first use (a rolled loop paid
    // one global-memory latency per element, a large part of a block's short life)
    if (((uintptr_t)a.q & 15) == 0) {
        constexpr int QV = BQ * HD / 4 / fa_threads;
        static_assert(BQ * HD / 4 % fa_threads == 0, "whole float4s per thread");
        float4 qv[QV];
#pragma unroll
        for (int u = 0; u < QV; u++) {
            const int i = tid + u * fa_threads, r = i / (HD / 4), c = (i % (HD / 4)) * 4, t = q0 + r;
            qv[u] = t < a.T ? *(const float4 *)(a.q + ((size_t)t * a.H + h) * HD + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < QV; u++) {
            const int i = tid + u * fa_threads, r = i / (HD / 4), c = (i % (HD / 4)) * 4;
            const uint2 hv = make_uint2(pack_h2(qv[u].x * a.scale, qv[u].y * a.scale), pack_h2(qv[u].z * a.scale, qv[u].w * a.scale));
            *(uint2 *)(Qs + r * C::ld + c) = hv;
        }
    } else {
        for (int i = tid; i < BQ * HD; i += fa_threads) {
            const int r = i / HD, d = i % HD, t = q0 + r;
            Qs[r * C::ld + d] = __float2half_rn(t < a.T ? a.q[((size_t)t * a.H + h) * HD + d] * a.scale : 0.0f);
        }
    }
    __syncthreads();
    // the block's key range [k_begin, k_end): union over its queries (whole warps, one query each)
    static_assert(BQ <= fa_threads && BQ % 32 == 0, "a thread per query");
    if (tid < BQ) {
        int hi = 0, lo = 1 << 30;
        if (q0 + tid < a.T) {
            const int pv = a.non_causal ? p_last : a.pos[q0 + tid];   // its last visible key
            hi = pv + 1;
            lo = a.window > 0 ? max(0, pv - a.window + 1) : 0;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
            lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
        }
        if (lane == 0) { atomicMin(&range[0], lo); atomicMax(&range[1], hi); }
    }
    __syncthreads();
    const int k_begin = range[0] / BK * BK, k_end = min(range[1], a.C);

    // this thread's rows (g and g + 8 of each of the warp's row tiles): last and first visible key
    const int g = lane / 4, tq = lane % 4;
    const int row0 = warp * 16 * MT;   // the warp's first row in the block
    int hi_r[MT][2], lo_r[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int t = q0 + row0 + 16 * mt + g + 8 * i;
            const int pv = t < a.T ? (a.non_causal ? p_last : a.pos[t]) : -1;   // the window ends there too
            hi_r[mt][i] = t < a.T ? min(pv, k_end - 1) : -1;
            lo_r[mt][i] = (t < a.T && a.window > 0) ? pv - a.window + 1 : 0;
        }

    // Q's A fragment of row tile mt, k-step kk
    auto q_frag = [&](uint32_t (&f)[4], int mt, int kk) {
        ldsm_x4(f, smem_addr(Qs + (row0 + 16 * mt + lane % 16) * C::ld + kk * 16 + (lane / 16) * 8));
    };
    uint32_t qf[C::q_regs ? MT : 1][C::q_regs ? KS : 1][4];
    if constexpr (C::q_regs) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int kk = 0; kk < KS; kk++) q_frag(qf[mt][kk], mt, kk);
    }

    float o[MT][NT_O][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT_O; nt++) o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.0f;
    float m_r[MT][2], l_r[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) m_r[mt][0] = m_r[mt][1] = -INFINITY, l_r[mt][0] = l_r[mt][1] = 0.0f;

    auto load_tile = [&](int k0, int stage) {
        half * Kd = KV + 2 * stage * C::tile;
        half * Vd = Kd + C::tile;
        constexpr int vpr = HD / 8;
        for (int i = tid; i < BK * vpr; i += fa_threads) {
            const int r = i / vpr, c = (i % vpr) * 8, j = k0 + r;
            const bool ok = j < k_end;
            const size_t off = ok ? ((size_t)j * a.Hkv + kvh) * HD + c : 0;
            ggx_cp_async16(Kd + r * C::ld + c, K + off, ok);
            ggx_cp_async16(Vd + r * C::ld + c, V + off, ok);
        }
        ggx_cp_async_commit();
    };

    const int n_tiles = k_end > k_begin ? (k_end - k_begin + BK - 1) / BK : 0;
    if (n_tiles > 0) load_tile(k_begin, 0);
    for (int it = 0; it < n_tiles; it++) {
        const int k0 = k_begin + it * BK, st = it & 1;
        if (it + 1 < n_tiles) {
            load_tile(k0 + BK, st ^ 1);
            ggx_cp_async_wait<1>();
        } else {
            ggx_cp_async_wait<0>();
        }
        __syncthreads();
        const half * Kd = KV + 2 * st * C::tile;
        const half * Vd = Kd + C::tile;
        // does any of this warp's rows see a key of the tile? are all keys visible to all rows?
        bool vis = false, full = true;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                vis |= hi_r[mt][i] >= k0 && lo_r[mt][i] <= k0 + BK - 1 && hi_r[mt][i] >= lo_r[mt][i];
                full &= hi_r[mt][i] >= k0 + BK - 1 && lo_r[mt][i] <= k0;
            }
        if (__any_sync(0xffffffffu, vis)) {
            full = __all_sync(0xffffffffu, full);
            float s[MT][NT_S][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NT_S; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                uint32_t qk[C::q_regs ? 1 : MT][4];
                if constexpr (!C::q_regs) {
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) q_frag(qk[mt], mt, kk);
                }
#pragma unroll
                for (int np = 0; np < NT_S / 2; np++) {
                    uint32_t b[4];
                    ldsm_x4(b, smem_addr(Kd + (np * 16 + lane % 8 + (lane / 16) * 8) * C::ld + kk * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        if constexpr (C::q_regs) {
                            mma16816(s[mt][2 * np], qf[mt][kk], b[0], b[1]);
                            mma16816(s[mt][2 * np + 1], qf[mt][kk], b[2], b[3]);
                        } else {
                            mma16816(s[mt][2 * np], qk[mt], b[0], b[1]);
                            mma16816(s[mt][2 * np + 1], qk[mt], b[2], b[3]);
                        }
                    }
                }
            }
            if (a.softcap > 0.0f) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int nt = 0; nt < NT_S; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) s[mt][nt][e] = a.softcap * tanhf(s[mt][nt][e] / a.softcap);
            }
            if (!full) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int nt = 0; nt < NT_S; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int j = k0 + nt * 8 + 2 * tq + (e & 1), i = e / 2;
                            if (j > hi_r[mt][i] || j < lo_r[mt][i]) s[mt][nt][e] = -INFINITY;
                        }
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++) online_softmax_step(s[mt], m_r[mt], l_r[mt], o[mt]);
            // O += P V: the S accumulators of n-tiles 2kk, 2kk+1 are the A fragment of k-step kk
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                uint32_t pa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    pa[mt][0] = pack_h2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pa[mt][1] = pack_h2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pa[mt][2] = pack_h2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pa[mt][3] = pack_h2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < NT_O / 2; dp++) {
                    uint32_t b[4];
                    ldsm_x4_t(b, smem_addr(Vd + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * C::ld + dp * 16 + (lane / 16) * 8));
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma16816(o[mt][2 * dp], pa[mt], b[0], b[1]);
                        mma16816(o[mt][2 * dp + 1], pa[mt], b[2], b[3]);
                    }
                }
            }
        }
        __syncthreads();   // this stage is refilled by the next iteration's prefetch
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            l_r[mt][i] += __shfl_xor_sync(0xffffffffu, l_r[mt][i], 1);
            l_r[mt][i] += __shfl_xor_sync(0xffffffffu, l_r[mt][i], 2);
        }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int t = q0 + row0 + 16 * mt + g + 8 * i;
            if (t >= a.T) continue;
            const float inv = l_r[mt][i] > 0.0f ? 1.0f / l_r[mt][i] : 0.0f;
            const size_t row = ((size_t)t * a.H + h) * HD + 2 * tq;
            if (a.out16) {   // the same fp32 values, rounded as the matmul's own conversion would
#pragma unroll
                for (int nt = 0; nt < NT_O; nt++)
                    *(half2 *)(a.out16 + row + nt * 8) = __floats2half2_rn(o[mt][nt][2 * i] * inv, o[mt][nt][2 * i + 1] * inv);
                continue;
            }
            float * orow = a.out + row;
#pragma unroll
            for (int nt = 0; nt < NT_O; nt++) {
                orow[nt * 8] = o[mt][nt][2 * i] * inv;
                orow[nt * 8 + 1] = o[mt][nt][2 * i + 1] * inv;
            }
        }
}

template <int HD, int MT>
ggx_status launch(const attn_args & a, cudaStream_t s) {
    using C = fa_cfg<HD, MT>;
    static bool attr_set = false;   // raising the dynamic shared memory limit is per kernel
    if (!attr_set) {
        GGX_CUDA_CHECK(cudaFuncSetAttribute(k_attn_prefill<HD, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::bytes));
        attr_set = true;
    }
    k_attn_prefill<HD, MT><<<dim3(a.H, (a.T + C::bq - 1) / C::bq), fa_threads, C::bytes, s>>>(a);
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}

// Query rows per warp: 32 (MT = 2) when its grid still gives every SM its two resident blocks,
// else 16. Run 143 (H200, llama3-8b, 32 heads): pp2048 (512 blocks at MT = 2) 36644 / 36800
// against 36487 / 36383 t/s with MT = 1, its attention 165.4 against 170.1 us per call; pp512
// (128 blocks, fewer than the SMs) 27528 / 27532 against 27829 / 27695. GGX_ATTN_FA_ROWS=16 or 32
// forces one (read per launch, host code, once per captured graph, so that a test can set it).
template <int HD>
ggx_status launch_rows(const ggx_cuda_ctx & ctx, const attn_args & a) {
    const int forced = ggx_env_int("GGX_ATTN_FA_ROWS", 0);
    const int64_t blocks2 = (int64_t)a.H * ((a.T + fa_cfg<HD, 2>::bq - 1) / fa_cfg<HD, 2>::bq);
    const bool two = forced == 32 || (forced != 16 && blocks2 >= 2 * (int64_t)ctx.n_sm);
    return two ? launch<HD, 2>(a, ctx.stream) : launch<HD, 1>(a, ctx.stream);
}

}  // namespace

bool prefill_ok(const ggx_tensor * dst) {
    const int64_t hd = dst->src[0]->ne[0];
    const int64_t T = dst->src[0]->ne[2] * dst->src[0]->ne[3];
    return T > 8 && dst->src[1]->type == GGX_TYPE_F16 && (hd == 64 || hd == 80 || hd == 96 || hd == 128);
}

ggx_status prefill_launch(const ggx_cuda_ctx & ctx, const attn_args & a) {
    switch (a.hd) {
        case 64:  return launch_rows<64>(ctx, a);
        case 80:  return launch_rows<80>(ctx, a);
        case 96:  return launch_rows<96>(ctx, a);
        case 128: return launch_rows<128>(ctx, a);
        default:
            ggx_set_error("cuda: prefill attention with head dimension %d", a.hd);
            return GGX_STATUS_FAILED;
    }
}
#else
bool prefill_ok(const ggx_tensor *) { return false; }
#endif  // GGX_ATTN_WMMA

}  // namespace ggx_cuda_attn
