// Row ops with one block per row: max, then sum of exp, then normalised write.
#include "softmax.cuh"

namespace {

__global__ void k_softmax(const float * __restrict__ x, float * __restrict__ y, int64_t D, float scale) {
    __shared__ float sh[32];
    const float * xr = x + blockIdx.x * D;
    float * yr = y + blockIdx.x * D;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) m = fmaxf(m, xr[i] * scale);
    m = ggx_block_max(m, sh);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += expf(xr[i] * scale - m);
    s = ggx_block_sum(s, sh);
    const float inv = 1.0f / s;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = expf(xr[i] * scale - m) * inv;
}

// Each thread keeps its best (value, index); the reduction keeps the larger value and, on a tie,
// the smaller index. NaN compares false and is never chosen over a number.
__global__ void k_argmax(const float * __restrict__ x, int32_t * __restrict__ y, int64_t D) {
    __shared__ float sv[32];
    __shared__ int32_t si[32];
    const float * xr = x + blockIdx.x * D;
    float bv = -INFINITY;
    int32_t bi = -1;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        const float v = xr[i];
        if (bi < 0 || v > bv) { bv = v; bi = (int32_t)i; }
    }
    auto better = [](float v, int32_t i, float bv2, int32_t bi2) {
        if (bi2 < 0) return false;
        if (i < 0) return true;
        return bv2 > v || (bv2 == v && bi2 < i);
    };
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(bv, bi, ov, oi)) { bv = ov; bi = oi; }
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x / 32;
        bv = lane < nw ? sv[lane] : -INFINITY;
        bi = lane < nw ? si[lane] : -1;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (better(bv, bi, ov, oi)) { bv = ov; bi = oi; }
        }
        if (lane == 0) y[blockIdx.x] = bi < 0 ? 0 : bi;
    }
}

}  // namespace

ggx_status ggx_cuda_op_softmax(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const ggx_tensor * x = dst->src[0];
    const int64_t rows = ggx_nrows(x);
    if (rows == 0) return GGX_STATUS_OK;
    const float scale = dst->params.softmax.scale;
    k_softmax<<<(unsigned)rows, 256, 0, ctx.stream>>>((const float *)x->data, (float *)dst->data, x->ne[0], scale == 0.0f ? 1.0f : scale);
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}

ggx_status ggx_cuda_op_argmax(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const ggx_tensor * x = dst->src[0];
    const int64_t rows = ggx_nrows(x);
    if (rows == 0) return GGX_STATUS_OK;
    k_argmax<<<(unsigned)rows, 1024, 0, ctx.stream>>>((const float *)x->data, (int32_t *)dst->data, x->ne[0]);
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}
