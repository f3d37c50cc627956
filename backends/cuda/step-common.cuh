// What the two persistent decode steps (strip-step.cu, tile-step.cu) share around their loops:
// the grid-wide hand-off between stages, a stage's wait, the first pass over x (RMS norm and
// the power-of-two scaling into fp16) and the owners' epilogue. A Stage is ggx_strip_stage or
// ggx_tile_stage (the same field names).
#pragma once

#include "activation.cuh"
#include "common.cuh"
#include "exl2-unpack.cuh"
#include "strip-step.h"
#include "trace.cuh"

namespace ggx_step {

// Grid-wide hand-off between stages, as cooperative groups' grid sync does it: the block's
// writes, then one fenced arrival; a waiting block polls the count, fences, and its reads of the
// other blocks' results go past L1 (ggx_load_cg).
__device__ __forceinline__ void grid_arrive(int * counter) {
    __syncthreads();
    if (threadIdx.x == 0) {
        ggx_fence_acq_rel();
        atomicAdd(counter, 1);
    }
}
__device__ __forceinline__ void grid_wait(int * counter, int target) {
    if (threadIdx.x == 0) {
        while (*(volatile int *)counter < target) {
        }
        ggx_fence_acq_rel();
    }
    __syncthreads();
}

// Stage si's wait for its input. Stage 0 was launched with PDL after the previous kernel (this
// block may start on an SM that kernel has left, before its results are complete); the grid
// counter is safe with that: no block waits for another before stage 0 ends, and the previous
// kernel never waits for this one. A later stage waits for every block's arrival at the end of
// the one before; once every block is resident and past its last wait, the next kernel may launch
// and the counter goes back to zero for the next launch.
__device__ __forceinline__ void stage_wait(int si, int n_stages, int * counter, const ggx_trace_dev & tr, const int * trace_slot) {
    if (si == 0) {
        ggx_pdl_wait();
        ggx_trace_stamp(tr, trace_slot, GGX_TRACE_WAITED);
        if (n_stages == 1) ggx_pdl_launch_next();
    } else {
        grid_wait(counter, si * (int)gridDim.x);
        if (si == n_stages - 1) ggx_pdl_launch_next();
        if (si == n_stages - 1 && threadIdx.x == 0 && atomicAdd(counter, 1) == n_stages * (int)gridDim.x - 1)
            atomicExch(counter, 0);
    }
}

// Norm weights 4 i .. 4 i + 3 (rows of 16-byte aligned f32, 8-byte aligned f16 / bf16).
__device__ __forceinline__ float4 load_norm_w4(const void * p, int type, int i) {
    switch (type) {
        case GGX_TYPE_F16: {
            const uint2 u = ggx_load_ro((const uint2 *)p + i);
            const float2 a = __half22float2(ggx_exl2_unpack::u32_as_half2(u.x)), b = __half22float2(ggx_exl2_unpack::u32_as_half2(u.y));
            return make_float4(a.x, a.y, b.x, b.y);
        }
        case GGX_TYPE_BF16: {
            const uint2 u = ggx_load_ro((const uint2 *)p + i);
            return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                               __uint_as_float(u.y & 0xffff0000u));
        }
        default: return ggx_load_ro((const float4 *)p + i);
    }
}

// Sum of s and maximum of m over the block in one exchange through red (2 x 32 floats): two
// barriers instead of ggx_block_sum's and ggx_block_max's four, the same reduction trees (the same
// bits). The second barrier also publishes what the block wrote before the call.
__device__ __forceinline__ float2 block_sum_max(float s, float m, float (*red)[GGX_CUDA_WARP]) {
    const int lane = threadIdx.x % GGX_CUDA_WARP, warp = threadIdx.x / GGX_CUDA_WARP;
    s = ggx_warp_sum(s);
    m = ggx_warp_max(m);
    __syncthreads();   // red may still be read from a previous call
    if (lane == 0) {
        red[0][warp] = s;
        red[1][warp] = m;
    }
    __syncthreads();
    const int n_warps = blockDim.x / GGX_CUDA_WARP;
    s = lane < n_warps ? red[0][lane] : 0.0f;
    m = lane < n_warps ? red[1][lane] : -INFINITY;
    return make_float2(ggx_warp_sum(s), ggx_warp_max(m));
}

struct x_scaling {
    float scale;     // 1 / rms (or 1) times 2^e: what x w is multiplied by before fp16
    float unscale;   // 2^-e: what the sums are multiplied by after
};

// x w into xw (shared, f32 [K]) by the block's n_threads threads, with the sum of squares (RMS
// norm) and max |x w| reduced in the same pass; the scaling that takes max |x w / rms| into
// [8, 16). Four values per load and four loads in flight per thread: a load per element in a loop
// put ~2 x K / 512 L2 round trips in a row in front of every stage (~13 us for K = 14336, run
// 84). red: 2 x 32 floats of shared memory. Its barriers publish xw.
template <typename Stage>
__device__ __forceinline__ x_scaling norm_pass(const Stage & S, float * xw, int t, int n_threads, float (*red)[GGX_CUDA_WARP]) {
    float ss = 0.0f, am = 0.0f;
    const int K4 = S.K / 4;
#pragma unroll 8
    for (int i = t; i < K4; i += n_threads) {
        const float4 v = ggx_load_cg((const float4 *)S.x + i);
        const float4 w = S.norm_w ? load_norm_w4(S.norm_w, S.norm_type, i) : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        const float4 p = make_float4(v.x * w.x, v.y * w.y, v.z * w.z, v.w * w.w);
        am = fmaxf(am, fmaxf(fmaxf(fabsf(p.x), fabsf(p.y)), fmaxf(fabsf(p.z), fabsf(p.w))));
        ((float4 *)xw)[i] = p;
    }
    const float2 r = block_sum_max(ss, am, red);
    ss = r.x;
    am = r.y;
    const float rms = S.norm ? rsqrtf(ss / (float)S.K + S.norm_eps) : 1.0f;
    const int e = ggx_exl2_unpack::x_scale_exponent(am * rms);
    return {rms * ldexpf(1.0f, e), ldexpf(1.0f, -e)};
}

// Output column n from its sums (s0: the first matrix's, s1: the up matrix's of a GLU), still
// times 2^e: bias, gated activation or residual, stored.
template <typename Stage> __device__ __forceinline__ void put_output(const Stage & S, int n, float s0, float s1, float unscale) {
    float v = s0 * unscale + (S.bias[0] ? S.bias[0][n] : 0.0f);
    if (S.epi == GGX_STRIP_GLU) {
        const float up = s1 * unscale + (S.bias[1] ? S.bias[1][n] : 0.0f);
        v = (S.act == GGX_ACT_SILU ? silu_f(v) : gelu_f(v)) * up;
    } else if (S.epi == GGX_STRIP_ADD) {
        v += ggx_load_cg(S.resid + n);
    }
    S.y[n] = v;
}

// A one-stage step of one matrix with x already in quantized order (the tests' GEMV form of
// either step): y = W xq for the Np columns. The caller clears the matrix's permutation.
template <typename Step, typename Matrix> Step one_matrix_step(const Matrix & m, const float * xq, float * y, int * counter) {
    Step s = {};
    s.n_stages = 1;
    s.counter = counter;
    auto & S = s.st[0];
    S.m[0] = m;
    S.n_mat = 1;
    S.x = xq;
    S.K = m.K;
    S.N = m.Np;
    S.epi = GGX_STRIP_STORE;
    S.y = y;
    return s;
}

}  // namespace ggx_step
