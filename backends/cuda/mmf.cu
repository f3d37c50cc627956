// Plain-weight matrix multiply; see mmf.cuh.
#include "mmf.cuh"

#include "gemm.cuh"

#include <algorithm>
#include <type_traits>

namespace {

// One warp per output feature n (8 per block). Lanes stride over K; vector loads of 16 bytes
// when K and the base are aligned for it, else scalar loads.
template <typename TW, int T>
__global__ void k_gemv(const TW * __restrict__ W,     // [N][K]
                       const float * __restrict__ x,  // [T][K]
                       float * __restrict__ y,        // [T][N]
                       int K, int N, bool vec) {
    const int lane = threadIdx.x % 32;
    const int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (n >= N) return;
    const TW * w = W + (size_t)n * K;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; t++) acc[t] = 0.0f;
    constexpr int V = 16 / sizeof(TW);   // elements per 16-byte load
    int k = 0;
    if (vec) {
        for (k = lane * V; k + V <= K; k += 32 * V) {
            const uint4 u = *(const uint4 *)(w + k);
            const TW * wv = (const TW *)&u;
#pragma unroll
            for (int i = 0; i < V; i++) {
                const float wf = ggx_load_f(wv, i);
#pragma unroll
                for (int t = 0; t < T; t++) acc[t] = fmaf(wf, x[(size_t)t * K + k + i], acc[t]);
            }
        }
        k = K;   // vec requires K % (V) == 0, so everything was covered
    }
    for (int kk = k + lane; kk < K; kk += 32) {
        const float wf = ggx_load_f(w, kk);
#pragma unroll
        for (int t = 0; t < T; t++) acc[t] = fmaf(wf, x[(size_t)t * K + kk], acc[t]);
    }
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float s = ggx_warp_sum(acc[t]);
        if (lane == 0) y[(size_t)t * N + n] = s;
    }
}

template <typename TD>
__global__ void k_convert(const float * __restrict__ x, TD * __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        ggx_store_f(y, i, x[i]);
}

template <typename TW>
void launch_gemv(const TW * W, const float * x, float * y, int K, int N, int T, bool vec, cudaStream_t s) {
    const dim3 grid((N + 7) / 8);
    switch (T) {
        case 1: k_gemv<TW, 1><<<grid, 256, 0, s>>>(W, x, y, K, N, vec); break;
        case 2: k_gemv<TW, 2><<<grid, 256, 0, s>>>(W, x, y, K, N, vec); break;
        case 3: k_gemv<TW, 3><<<grid, 256, 0, s>>>(W, x, y, K, N, vec); break;
        case 4: k_gemv<TW, 4><<<grid, 256, 0, s>>>(W, x, y, K, N, vec); break;
        case 5: k_gemv<TW, 5><<<grid, 256, 0, s>>>(W, x, y, K, N, vec); break;
        case 6: k_gemv<TW, 6><<<grid, 256, 0, s>>>(W, x, y, K, N, vec); break;
        case 7: k_gemv<TW, 7><<<grid, 256, 0, s>>>(W, x, y, K, N, vec); break;
        default: k_gemv<TW, 8><<<grid, 256, 0, s>>>(W, x, y, K, N, vec); break;
    }
}

}  // namespace

bool ggx_cuda_supports_mmf(const ggx_tensor * dst) {
    const ggx_tensor * w = dst->src[0];
    const ggx_tensor * x = dst->src[1];
    return ggx_cuda_is_ftype(w->type) && x->type == GGX_TYPE_F32 && w->ne[0] == x->ne[0] && ggx_nrows(w) == w->ne[1] &&
           ggx_is_contiguous(w) && ggx_is_contiguous(x);
}

size_t ggx_cuda_mmf_scratch(const ggx_tensor * dst) {
    const ggx_tensor * w = dst->src[0];
    const int64_t T = ggx_nrows(dst->src[1]);
    if (T <= GGX_CUDA_MMF_GEMV_MAX_T || w->type == GGX_TYPE_F32) return 0;
    return (size_t)T * w->ne[0] * 2;
}

ggx_status ggx_cuda_op_mmf(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const ggx_tensor * w = dst->src[0];
    const ggx_tensor * xt = dst->src[1];
    const int K = (int)w->ne[0], N = (int)w->ne[1];
    const int64_t T = ggx_nrows(xt);
    const float * x = (const float *)xt->data;
    float * y = (float *)dst->data;
    if (T == 0) return GGX_STATUS_OK;
    if (T <= GGX_CUDA_MMF_GEMV_MAX_T) {
        const int V = 16 / (int)ggx_type_size(w->type);
        const bool vec = K % V == 0 && ggx_aligned16(w->data);
        ggx_cuda_dispatch_ftype(w->type, w->data, [&](auto wp) { launch_gemv(wp, x, y, K, N, (int)T, vec, ctx.stream); });
        GGX_CUDA_LAUNCH_CHECK();
        return GGX_STATUS_OK;
    }
    // column-major: y (N x T, ld N) = W^T (W is K x N, ld K) * x (K x T, ld K)
    if (w->type == GGX_TYPE_F32) return ggx_cuda_gemm(ctx, true, N, (int)T, K, w->data, GGX_TYPE_F32, K, x, K, y, N);
    const size_t need = ggx_cuda_mmf_scratch(dst);
    if (ctx.scratch_size < need) {
        ggx_set_error("cuda: scratch too small for %s (%zu < %zu)", w->name, ctx.scratch_size, need);
        return GGX_STATUS_FAILED;
    }
    const int64_t n = T * K;
    const unsigned grid = (unsigned)std::min<int64_t>((n + 255) / 256, 65535);
    const bool f16 = w->type == GGX_TYPE_F16;
    if (f16) k_convert<<<grid, 256, 0, ctx.stream>>>(x, (half *)ctx.scratch, n);
    else     k_convert<<<grid, 256, 0, ctx.stream>>>(x, (nv_bfloat16 *)ctx.scratch, n);
    GGX_CUDA_LAUNCH_CHECK();
    return ggx_cuda_gemm(ctx, true, N, (int)T, K, w->data, w->type, K, ctx.scratch, K, y, N);
}
