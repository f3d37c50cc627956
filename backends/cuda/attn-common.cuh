// What the attention kernels share (attn.cu: the CUDA-core split kernel and the tensor-core
// prefill; attn-decode.cu: the tensor-core decode): their arguments, the split-K merge and the
// mma.sync / ldmatrix helpers.
#pragma once

#include "common.cuh"
#include "decode-plan.h"   // ggx_attn_tail_takes
#include "mma.cuh"
#include "trace.cuh"

#if !defined(GGX_USE_HIP)
#define GGX_ATTN_WMMA 1   // the tensor-core kernels' inline PTX (mma.sync, ldmatrix, cp.async) is CUDA-only
#endif  // !GGX_USE_HIP

namespace ggx_cuda_attn {

struct attn_args {
    const float * q;       // [T][H][hd]
    const void * k;        // [C][Hkv][hd]
    const void * v;
    const int32_t * pos;   // [T]
    float * out;           // [T][H][hd]
    half * out16;          // prefill only: the result in fp16 here instead (the o matmul's x16)
    float * part;          // [T][H][n_splits][hd + 4]   (m, l, -, -, acc...)
    int * counters;        // blocks done per merge group, zero between launches
    int hd, H, Hkv, C, T, chunk, n_splits;
    int min_chunk;         // chunk 0 (decode): at least this many keys per split (a multiple of 64)
    int tile_keys;         // keys per shared-memory tile (k_attn_split)
    float scale, softcap;
    int window;
    int non_causal;       // every query sees keys 0..pos[T-1]
    ggx_trace_dev trace;  // GGX_CUDA_TRACE only
    int trace_last;       // stamp the free points in the last tile, not the first (GGX_ATTN_TRACE_LAST=1)
    int qsplit;           // k_attn_split: blocks per KV head (each takes G / qsplit of its query heads)
    int stages;           // k_attn_decode: K/V tiles in flight per warp (2 or 3, GGX_ATTN_STAGES)
    int smem_stages;      // k_attn_decode: shared memory for at least this many (GGX_ATTN_SMEM_STAGES, measurements)
    int tail_bound;       // > 0: the q/k/v GEMV's tail computes the result while pos + 1 <= tail_bound (decode-plan.h)
    // k_attn_decode with one query row (ggx_attn_rows), else null: the key and value at pos as the
    // q/k/v GEMV's K-slices left them ([Hkv][hd] f32; q is then its rows too), which the kernel
    // stores into the caches at pos itself
    const float * rows_k;
    const float * rows_v;
};

// True when the q/k/v GEMV's tail computed this step's result (qgemv.cu's attn_tail decides with
// the same ggx_attn_tail_takes), after the kernel's only work then: o may launch now and load its
// first weights (its wait still waits for this grid, which ends after the wait here; with the
// launch after the wait, o's blocks came 4.3 us late, run 161), and the wait for the q/k/v grid,
// so that o reads the result. Every thread calls it at the kernel's start and returns on true.
static __device__ __forceinline__ bool attn_done_in_qkv_tail(const attn_args & a, const int * trace_slot) {
    if (a.T != 1 || !ggx_attn_tail_takes(a.pos[0], a.tail_bound)) return false;
    ggx_pdl_launch_next();
    ggx_pdl_wait();
    ggx_trace_stamp(a.trace, trace_slot, GGX_TRACE_EXIT);
    return true;
}

constexpr int k_merge_loads = 8;   // split partials in flight per thread in the merge

// Row stride of a split's partial in a.part: (m, l, 2 unused, acc[hd]), 16-byte aligned rows.
__host__ __device__ inline int part_stride(int hd) { return hd + 4; }

// The split-K merge, run by the last block to finish of a merge group (every thread of the block
// calls it): heads h0..h0+GB-1 of token t, from the first ns splits' partials in split order
// (deterministic): out = sum_s w_s acc_s with w_s = e^(m_s - M) / sum_s e^(m_s - M) l_s.
// Shared scratch: wt and lt [GB][ns], ms and ls [GB].
static __device__ inline void merge_splits(const attn_args & a, int t, int h0, int GB, int ns, float * wt, float * lt,
                                    float * ms, float * ls) {
    const int tid = threadIdx.x, nt = blockDim.x, stride = part_stride(a.hd);
    const float * part0 = a.part + ((size_t)t * a.H + h0) * a.n_splits * stride;   // [GB][n_splits][stride]
    for (int i = tid; i < GB * ns; i += nt) {
        const float * pp = part0 + ((size_t)(i / ns) * a.n_splits + i % ns) * stride;
        wt[i] = ggx_load_cg(pp);
        lt[i] = ggx_load_cg(pp + 1);
    }
    __syncthreads();
    if (tid < GB) {
        float M = -INFINITY, L = 0.0f;
        for (int sp = 0; sp < ns; sp++) M = fmaxf(M, wt[tid * ns + sp]);
        for (int sp = 0; sp < ns; sp++)
            if (wt[tid * ns + sp] != -INFINITY) L += expf(wt[tid * ns + sp] - M) * lt[tid * ns + sp];
        ms[tid] = M;
        ls[tid] = L;
    }
    __syncthreads();
    for (int i = tid; i < GB * ns; i += nt) {
        const int g = i / ns;
        const float m = wt[i];
        wt[i] = m == -INFINITY || !(ls[g] > 0.0f) ? 0.0f : expf(m - ms[g]) / ls[g];
    }
    __syncthreads();
    // 4 dimensions per thread, k_merge_loads splits' 16-byte loads in flight at a time
    for (int o4 = tid; o4 < GB * a.hd / 4; o4 += nt) {
        const int g = o4 * 4 / a.hd, d = o4 * 4 % a.hd;
        const float * pp = part0 + (size_t)g * a.n_splits * stride + 4 + d;
        float4 r = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int s0 = 0; s0 < ns; s0 += k_merge_loads) {
            float4 v[k_merge_loads];
#pragma unroll
            for (int u = 0; u < k_merge_loads; u++)
                if (s0 + u < ns) v[u] = ggx_load_cg((const float4 *)(pp + (size_t)(s0 + u) * stride));
#pragma unroll
            for (int u = 0; u < k_merge_loads; u++)
                if (s0 + u < ns) {
                    const float w = wt[g * ns + s0 + u];
                    r.x = fmaf(w, v[u].x, r.x); r.y = fmaf(w, v[u].y, r.y); r.z = fmaf(w, v[u].z, r.z); r.w = fmaf(w, v[u].w, r.w);
                }
        }
        *(float4 *)(a.out + ((size_t)t * a.H + h0 + g) * a.hd + d) = r;
    }
}

// Counts this block in (counter) and tells whether it was the last of `expected` to finish; the
// last one resets the counter for the next launch. The partials written before are visible to it:
// the hand-off of the decode GEMV (qgemv.cu), thread 0 fencing on both sides of its count.
static __device__ inline bool arrive_last(int * counter, int expected) {
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        ggx_fence_acq_rel();
        last = atomicAdd(counter, 1) == expected - 1;
        if (last) ggx_fence_acq_rel();
    }
    __syncthreads();
    if (last && threadIdx.x == 0) *counter = 0;   // after the acquire fence: it waits for no store
    return last;
}

#if defined(GGX_ATTN_WMMA)
__device__ __forceinline__ uint32_t smem_addr(const void * p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ uint32_t pack_h2(float lo, float hi) {
    const half2 h = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

constexpr float k_log2e = 1.4426950408889634f;

// One online-softmax step of the mma kernels, for a lane's two rows of a 16-row tile (g and g + 8):
// the scores s (elements 0, 1 of row g and 2, 3 of row g + 8 in each n-tile) become
// probabilities, the running max m and the lane's partial sum l update, and O is rescaled. A
// row's max is shared by the 4 lanes of a quad; the sums stay partial (added up at the end).
template <int NS, int NO>
__device__ __forceinline__ void online_softmax_step(float (&s)[NS][4], float (&m_r)[2], float (&l_r)[2], float (&o)[NO][4]) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NS; nt++) {
        mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
    }
    float mb[2], alpha[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        const float m_new = fmaxf(m_r[i], mx[i]);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;   // a row with nothing visible yet
        alpha[i] = exp2f((m_r[i] - m_use) * k_log2e);
        mb[i] = m_use * k_log2e;
        m_r[i] = m_new;
    }
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < NS; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float p = exp2f(fmaf(s[nt][e], k_log2e, -mb[e / 2]));
            s[nt][e] = p;
            rs[e / 2] += p;
        }
#pragma unroll
    for (int i = 0; i < 2; i++) l_r[i] = l_r[i] * alpha[i] + rs[i];
#pragma unroll
    for (int nt = 0; nt < NO; nt++) {
        o[nt][0] *= alpha[0]; o[nt][1] *= alpha[0];
        o[nt][2] *= alpha[1]; o[nt][3] *= alpha[1];
    }
}
#endif  // GGX_ATTN_WMMA

// The tensor-core decode kernel (attn-decode.cu): whether it takes this attention (f16 cache,
// hd 64/80/96/128, at most 16 query rows T x G per KV head, T <= 8), and its launch.
bool       decode_mma_ok(int hd, int G, int T, int cache_type);
ggx_status decode_mma_launch(const ggx_cuda_ctx & ctx, const attn_args & a);
// K/V stages per warp that decode_mma_launch should use for a (chunk 0 plan: n_splits, min_chunk,
// C set): 3 when a split may hold more keys than the block's warps walk in 2 tiles each
int        decode_mma_stages(const attn_args & a);

// The tensor-core prefill kernel (attn-prefill.cu): whether it takes this attention (T > 8, f16
// cache, hd 64/80/96/128; never in a HIP build), and its launch.
bool       prefill_ok(const ggx_tensor * dst);
#if defined(GGX_ATTN_WMMA)
ggx_status prefill_launch(const ggx_cuda_ctx & ctx, const attn_args & a);
#endif  // GGX_ATTN_WMMA

}  // namespace ggx_cuda_attn
