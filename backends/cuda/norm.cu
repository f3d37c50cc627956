// Norms: one block per row; the row is read twice (statistics, then output), both passes
// coalesced. Statistics in fp32; layer norm uses the two-pass (mean, then centred squares)
// form, which avoids the cancellation of E[x^2] - E[x]^2.
#include "norm.cuh"

#include "decode-plan.h"   // ggx_cuda_add_rms_norm_ok
#include "elementwise.cuh"   // the unaligned fallback of the fused add

#include <type_traits>

namespace {

constexpr int k_threads = 1024;   // decode has one row: more threads, fewer dependent load rounds
constexpr int k_threads_many = 256;   // prefill (a row per SM or more): 16-byte loads, 4 per thread at D 4096

// TY: float, or half when the result only feeds the prefill matmuls (their fp16 x, see
// ggx_cuda_op_rms_norm): rounded from the same fp32 value as their own conversion would be.
template <typename TW, typename TY>
__global__ void k_rms_norm(const float * __restrict__ x,   // [rows][D]
                           const TW * __restrict__ w,       // [D] or null
                           TY * __restrict__ y, int64_t D, float eps) {
    __shared__ float sh[32];
    const float * xr = x + blockIdx.x * D;
    TY * yr = y + blockIdx.x * D;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += xr[i] * xr[i];
    s = ggx_block_sum(s, sh);
    const float r = rsqrtf(s / (float)D + eps);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ggx_store_f(yr, i, xr[i] * r * (w ? ggx_load_f(w, i) : 1.0f));
}

// D % 4 == 0 (every model's width): the same with 16-byte loads, the row read twice (the second
// time from L1). At 2048 rows of 4096 the scalar form moved ~1.7 TB/s. With ADD, the row is
// x + b, stored to sum first (the residual add before a norm, one pass fewer over the row).
template <typename TW, typename TY, bool ADD>
__global__ void k_rms_norm4(const float4 * __restrict__ x, const float4 * __restrict__ b, float4 * __restrict__ sum,
                            const TW * __restrict__ w, TY * __restrict__ y, int D4, float eps) {
    __shared__ float sh[32];
    const size_t r0 = (size_t)blockIdx.x * D4;
    float s = 0.0f;
    for (int i = threadIdx.x; i < D4; i += blockDim.x) {
        float4 v = x[r0 + i];
        if (ADD) {
            const float4 u = b[r0 + i];
            v.x += u.x; v.y += u.y; v.z += u.z; v.w += u.w;
            sum[r0 + i] = v;
        }
        s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    s = ggx_block_sum(s, sh);
    const float r = rsqrtf(s / (float)(4 * D4) + eps);
    TY * yr = y + r0 * 4;
    for (int i = threadIdx.x; i < D4; i += blockDim.x) {
        float4 v = ADD ? sum[r0 + i] : x[r0 + i];   // (this thread's own store, when ADD)
        v.x *= r; v.y *= r; v.z *= r; v.w *= r;
        if (w) {
            v.x *= ggx_load_f(w, 4 * i); v.y *= ggx_load_f(w, 4 * i + 1);
            v.z *= ggx_load_f(w, 4 * i + 2); v.w *= ggx_load_f(w, 4 * i + 3);
        }
        ggx_store_f4(yr, i, v);
    }
}

template <typename TW, typename TB>
__global__ void k_layer_norm(const float * __restrict__ x, const TW * __restrict__ w, const TB * __restrict__ b,
                             float * __restrict__ y, int64_t D, float eps) {
    __shared__ float sh[32];
    const float * xr = x + blockIdx.x * D;
    float * yr = y + blockIdx.x * D;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += xr[i];
    const float mean = ggx_block_sum(s, sh) / (float)D;
    float v = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) { const float d = xr[i] - mean; v += d * d; }
    const float r = rsqrtf(ggx_block_sum(v, sh) / (float)D + eps);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
        yr[i] = (xr[i] - mean) * r * (w ? ggx_load_f(w, i) : 1.0f) + (b ? ggx_load_f(b, i) : 0.0f);
}

}  // namespace

bool ggx_cuda_supports_norm(const ggx_tensor * dst) {
    const ggx_tensor * x = dst->src[0];
    if (x->type != GGX_TYPE_F32) return false;
    for (int i = 1; i <= 2; i++) {
        const ggx_tensor * p = dst->src[i];
        if (p && (!ggx_cuda_is_ftype(p->type) || ggx_nelements(p) != x->ne[0])) return false;
    }
    if (dst->op == GGX_OP_RMS_NORM && dst->src[2]) return false;
    // layer norm: weight and bias must share a type when both are present (one instantiation)
    if (dst->src[1] && dst->src[2] && dst->src[1]->type != dst->src[2]->type) return false;
    return true;
}

ggx_status ggx_cuda_op_rms_norm(ggx_cuda_ctx & ctx, ggx_tensor * dst, half * x16) {
    const ggx_tensor * x = dst->src[0];
    const ggx_tensor * w = dst->src[1];
    const int64_t D = x->ne[0], rows = ggx_nrows(x);
    const float eps = dst->params.norm.eps;
    if (rows == 0) return GGX_STATUS_OK;
    const void * out = x16 ? (const void *)x16 : dst->data;
    const bool vec = D % 4 == 0 && D / 4 <= INT32_MAX && ggx_aligned16(x->data) && ggx_aligned16(out);
    const int threads = vec && rows >= ctx.n_sm ? k_threads_many : k_threads;
    ggx_cuda_dispatch_ftype(w ? w->type : GGX_TYPE_F32, w ? w->data : nullptr, [&](auto wp) {
        using TW = std::remove_const_t<std::remove_pointer_t<decltype(wp)>>;
        auto launch = [&](auto * y) {
            using TY = std::remove_pointer_t<decltype(y)>;
            if (vec) k_rms_norm4<TW, TY, false><<<(unsigned)rows, threads, 0, ctx.stream>>>((const float4 *)x->data, nullptr, nullptr, wp, y, (int)(D / 4), eps);
            else     k_rms_norm<TW, TY><<<(unsigned)rows, threads, 0, ctx.stream>>>((const float *)x->data, wp, y, D, eps);
        };
        if (x16) launch(x16);
        else     launch((float *)out);
    });
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}

bool ggx_cuda_add_rms_norm_ok(const ggx_tensor * add, const ggx_tensor * norm) {
    const ggx_tensor * a = add->src[0];
    const ggx_tensor * b = add->src[1];
    return add->op == GGX_OP_ADD && norm->op == GGX_OP_RMS_NORM && norm->src[0] == add && ggx_cuda_supports_norm(norm) &&
           add->type == GGX_TYPE_F32 && a->type == GGX_TYPE_F32 && b->type == GGX_TYPE_F32 &&
           ggx_is_contiguous(add) && ggx_is_contiguous(a) && ggx_is_contiguous(b) &&
           ggx_nelements(a) == ggx_nelements(add) && ggx_nelements(b) == ggx_nelements(add) && add->ne[0] % 4 == 0;
}

ggx_status ggx_cuda_op_add_rms_norm(ggx_cuda_ctx & ctx, ggx_tensor * add, ggx_tensor * norm, half * x16) {
    const ggx_tensor * w = norm->src[1];
    const int64_t D = add->ne[0], rows = ggx_nrows(add);
    if (rows == 0) return GGX_STATUS_OK;
    void * out = x16 ? (void *)x16 : norm->data;
    const bool aligned = ggx_aligned16(add->data) && ggx_aligned16(add->src[0]->data) && ggx_aligned16(add->src[1]->data) && ggx_aligned16(out);
    if (!aligned || D % 4 || D / 4 > INT32_MAX) {   // two launches
        GGX_RETURN_IF_ERR(ggx_cuda_op_binary(ctx, add));
        return ggx_cuda_op_rms_norm(ctx, norm, x16);
    }
    const int threads = rows >= ctx.n_sm ? k_threads_many : k_threads;
    const float eps = norm->params.norm.eps;
    ggx_cuda_dispatch_ftype(w ? w->type : GGX_TYPE_F32, w ? w->data : nullptr, [&](auto wp) {
        using TW = std::remove_const_t<std::remove_pointer_t<decltype(wp)>>;
        auto launch = [&](auto * y) {
            using TY = std::remove_pointer_t<decltype(y)>;
            k_rms_norm4<TW, TY, true><<<(unsigned)rows, threads, 0, ctx.stream>>>((const float4 *)add->src[0]->data, (const float4 *)add->src[1]->data,
                                                                                 (float4 *)add->data, wp, y, (int)(D / 4), eps);
        };
        if (x16) launch(x16);
        else     launch((float *)out);
    });
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}

ggx_status ggx_cuda_op_layer_norm(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const ggx_tensor * x = dst->src[0];
    const ggx_tensor * w = dst->src[1];
    const ggx_tensor * b = dst->src[2];
    const int64_t D = x->ne[0], rows = ggx_nrows(x);
    const float eps = dst->params.norm.eps;
    if (rows == 0) return GGX_STATUS_OK;
    const ggx_tensor * typed = w ? w : b;
    if (!typed) {
        k_layer_norm<float, float><<<(unsigned)rows, k_threads, 0, ctx.stream>>>((const float *)x->data, nullptr, nullptr, (float *)dst->data, D, eps);
    } else {
        ggx_cuda_dispatch_ftype(typed->type, typed->data, [&](auto p) {
            using TW = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
            k_layer_norm<TW, TW><<<(unsigned)rows, k_threads, 0, ctx.stream>>>((const float *)x->data,
                (const TW *)(w ? w->data : nullptr), (const TW *)(b ? b->data : nullptr), (float *)dst->data, D, eps);
        });
    }
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}
