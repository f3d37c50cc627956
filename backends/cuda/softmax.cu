// Row ops with one block per row: max, then sum of exp, then normalised write.
#include "softmax.cuh"
#include "trace.cuh"

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

// Each thread keeps its best (value, index) over its elements, which it sees in increasing index
// order: its first number, then any strictly larger one, so a tie keeps the lower index; the
// reduction keeps the larger value and, on a tie, the smaller index. As the CPU op: NaN is never
// chosen over a number (-inf is one), and a row of NaN gives 0.
// Loads: a vocabulary row (128k floats) read one float per thread per iteration was ~125 dependent
// L2 round trips, tens of microseconds at the end of every decode step; here each thread has
// ARGMAX_UNROLL float4 loads in flight per round (4 rounds for 128k floats at 1024 threads).
constexpr int ARGMAX_UNROLL = 8;

__device__ __forceinline__ void argmax_take(float v, int32_t i, float & bv, int32_t & bi) {
    if (v > bv || (bi < 0 && v == v)) { bv = v; bi = i; }
}

// Launched as a programmatic dependent (sm_90): its block is resident on an SM the head's GEMV
// left free and starts the moment the logits are complete, not a launch latency later.
__global__ void k_argmax(const float * __restrict__ x, int32_t * __restrict__ y, int64_t D, const ggx_trace_dev trace) {
    __shared__ float sv[32];
    __shared__ int32_t si[32];
    __shared__ int trace_slot;
    ggx_trace_begin(trace, &trace_slot);
    ggx_pdl_wait();
    ggx_trace_stamp(trace, &trace_slot, GGX_TRACE_WAITED);
    const float * xr = x + blockIdx.x * D;
    float bv = -INFINITY;
    int32_t bi = -1;
    const int64_t n4 = (reinterpret_cast<uintptr_t>(xr) & 15) == 0 ? D / 4 : 0;
    const float4 * x4 = reinterpret_cast<const float4 *>(xr);
    const float4 none = make_float4(NAN, NAN, NAN, NAN);   // past the row: never taken
    for (int64_t base = threadIdx.x; base < n4; base += (int64_t)blockDim.x * ARGMAX_UNROLL) {
        float4 v[ARGMAX_UNROLL];
#pragma unroll
        for (int u = 0; u < ARGMAX_UNROLL; u++) {
            const int64_t j = base + (int64_t)u * blockDim.x;
            v[u] = j < n4 ? __ldg(x4 + j) : none;
        }
#pragma unroll
        for (int u = 0; u < ARGMAX_UNROLL; u++) {
            const int32_t i0 = (int32_t)(4 * (base + (int64_t)u * blockDim.x));
            argmax_take(v[u].x, i0, bv, bi);
            argmax_take(v[u].y, i0 + 1, bv, bi);
            argmax_take(v[u].z, i0 + 2, bv, bi);
            argmax_take(v[u].w, i0 + 3, bv, bi);
        }
    }
    for (int64_t i = 4 * n4 + threadIdx.x; i < D; i += blockDim.x) argmax_take(xr[i], (int32_t)i, bv, bi);
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
    ggx_trace_stamp(trace, &trace_slot, GGX_TRACE_EXIT);
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
    const ggx_trace_dev trace = ctx.trace ? ggx_cuda_trace_launch(ctx, "argmax") : ggx_trace_dev{};
    return ggx_cuda_launch(ctx, k_argmax, dim3((unsigned)rows), dim3(1024), 0, (const float *)x->data, (int32_t *)dst->data,
                           x->ne[0], trace);
}
