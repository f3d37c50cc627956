#include "strip-gemv.h"

#include "common.cuh"
#include "exl2-unpack.cuh"

using namespace ggx_exl2_unpack;

namespace {

constexpr int NT = GGX_STRIP_GEMV_WARPS * GGX_CUDA_WARP;

// Lane's slice of one unit at width B: its B word rows, the fp16-pair sums of (q - z) x over the
// 32 rows, times the slice's group scales of the 4 columns, into acc.
template <int B>
__device__ __forceinline__ void unit_slice(const ggx_strip_matrix & m, const ggx_strip_unit & u, int lanes, int lane,
                                           const half * xs, float4 & acc) {
    if (lane >= lanes) return;
    uint4 w[8];
#pragma unroll
    for (int i = 0; i < B; i++) w[i] = ggx_load_ro(m.words + u.offset + (size_t)i * lanes + lane);
    const int slice = u.slice0 + lane;
    half2 s[1][4];
#pragma unroll
    for (int c = 0; c < 4; c++) s[0][c] = __float2half2_rn(0.0f);
    piece_dot<B, 1>(w, 32, xs + slice * 32, 0, s);
    const uint2 sc = ggx_load_ro((const uint2 *)(m.scales + (size_t)ggx_load_ro(m.slice_group + slice) * m.Np + 4 * u.quad));
    const float2 s01 = __half22float2(u32_as_half2(sc.x)), s23 = __half22float2(u32_as_half2(sc.y));
    acc.x += (__low2float(s[0][0]) + __high2float(s[0][0])) * s01.x;
    acc.y += (__low2float(s[0][1]) + __high2float(s[0][1])) * s01.y;
    acc.z += (__low2float(s[0][2]) + __high2float(s[0][2])) * s23.x;
    acc.w += (__low2float(s[0][3]) + __high2float(s[0][3])) * s23.y;
}

__global__ void __launch_bounds__(NT, 1) k_strip_gemv(const ggx_strip_matrix m, const float * __restrict__ xq,
                                                      float * __restrict__ y) {
    extern __shared__ __align__(16) unsigned char smem[];
    half * xs = (half *)smem;                          // [K] x scaled into [8, 16) at most, fp16
    float * colsum = (float *)(smem + m.K * 2);        // [max_quads * 4]
    __shared__ float red[GGX_CUDA_WARP];
    const int s = blockIdx.x, t = threadIdx.x, lane = t % GGX_CUDA_WARP, warp = t / GGX_CUDA_WARP;

    // x: the power of two that brings max |x| into [8, 16), so that 16 products of at most
    // 128 * 16 per half stay below 32768 (see qgemv.cu's staging); inf and nan left unscaled.
    float amax = 0.0f;
    for (int k = t; k < m.K; k += NT) amax = fmaxf(amax, fabsf(xq[k]));
    amax = ggx_block_max(amax, red);
    const int field = (__float_as_int(amax) >> 23) & 255;
    const int e = field == 255 ? 0 : max(-120, min(120, 4 - (field - 126)));
    const float xscale = ldexpf(1.0f, e), xunscale = ldexpf(1.0f, -e);
    for (int k = t; k < m.K; k += NT) xs[k] = __float2half_rn(xq[k] * xscale);
    for (int i = t; i < m.max_quads * 4; i += NT) colsum[i] = 0.0f;
    __syncthreads();

    // The units carry absolute quads; a strip's first unit holds its first quad and its last unit
    // its last (units run width by width, each width over all of the strip's quads).
    const int * deal = m.deal + (size_t)s * (GGX_STRIP_GEMV_WARPS + 1);
    const int first_quad = deal[0] < deal[GGX_STRIP_GEMV_WARPS] ? (int)m.units[deal[0]].quad : -1;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    int cur = -1;
    auto flush = [&]() {
        const float v = ggx_warp_sum4(acc);
        if (lane % 8 == 0) atomicAdd(colsum + (cur - first_quad) * 4 + lane / 8, v);
        acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    };
    for (int ui = deal[warp]; ui < deal[warp + 1]; ui++) {
        const ggx_strip_unit u = m.units[ui];
        if ((int)u.quad != cur) {
            if (cur >= 0) flush();
            cur = u.quad;
        }
        const int bits = u.bits_lanes & 255, lanes = u.bits_lanes >> 8;
        switch (bits) {
            case 8: unit_slice<8>(m, u, lanes, lane, xs, acc); break;
            case 6: unit_slice<6>(m, u, lanes, lane, xs, acc); break;
            case 5: unit_slice<5>(m, u, lanes, lane, xs, acc); break;
            case 4: unit_slice<4>(m, u, lanes, lane, xs, acc); break;
            case 3: unit_slice<3>(m, u, lanes, lane, xs, acc); break;
            default: unit_slice<2>(m, u, lanes, lane, xs, acc); break;
        }
    }
    if (cur >= 0) flush();
    __syncthreads();
    if (first_quad < 0) return;
    const int last_quad = m.units[deal[GGX_STRIP_GEMV_WARPS] - 1].quad;
    for (int i = t; i < (last_quad - first_quad + 1) * 4; i += NT) y[first_quad * 4 + i] = colsum[i] * xunscale;
}

}  // namespace

cudaError_t ggx_cuda_strip_gemv(const ggx_strip_matrix & m, const float * xq, float * y, cudaStream_t stream) {
    const size_t smem = (size_t)m.K * 2 + (size_t)m.max_quads * 16;
    cudaError_t err = cudaFuncSetAttribute(k_strip_gemv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return err;
    k_strip_gemv<<<m.n_strips, NT, smem, stream>>>(m, xq, y);
    return cudaGetLastError();
}
