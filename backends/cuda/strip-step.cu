#include "strip-step.h"

#include "activation.cuh"
#include "common.cuh"
#include "exl2-unpack.cuh"

using namespace ggx_exl2_unpack;

namespace {

constexpr int NT = GGX_STRIP_WARPS * GGX_CUDA_WARP;
static_assert(GGX_CUDA_WARP == 32, "a unit is 32 slices, one per lane");

__host__ __device__ inline size_t align16(size_t v) { return (v + 15) & ~(size_t)15; }

// What a lane holds of one unit: its slice's word rows and the slice's group.
struct unit_regs {
    uint4 w[8];
    int   group;
};

__device__ __forceinline__ ggx_strip_unit load_unit(const ggx_strip_unit * p) {
    const uint4 v = ggx_load_ro((const uint4 *)p);
    return {v.x, v.y, v.z, v.w};
}

__device__ __forceinline__ void fetch_words(const ggx_strip_matrix & m, const ggx_strip_unit & u, int lane, unit_regs & r) {
    const int bits = u.bits_lanes & 255, lanes = u.bits_lanes >> 8;
    if (lane >= lanes) return;
    const uint4 * p = m.words + u.offset + lane;
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (i < bits) r.w[i] = ggx_load_ro(p + (size_t)i * lanes);
    r.group = ggx_load_ro(m.slice_group + u.slice0 + lane);
}

// The lane's slice of unit u: sum over its 32 rows of (q - z) x per column, in fp16 pairs.
template <int B> __device__ __forceinline__ float4 slice_dot(const uint4 (&w)[8], const half * xs) {
    half2 s[1][4];
#pragma unroll
    for (int c = 0; c < 4; c++) s[0][c] = __float2half2_rn(0.0f);
    piece_dot<B, 1>(w, 32, xs, 0, s);
    return make_float4(__low2float(s[0][0]) + __high2float(s[0][0]), __low2float(s[0][1]) + __high2float(s[0][1]),
                       __low2float(s[0][2]) + __high2float(s[0][2]), __low2float(s[0][3]) + __high2float(s[0][3]));
}

// One warp's dealt units of matrix m in strip b, summed into colsum[(quad - strip's first quad) * 4 + c].
// Pipelined one unit deep: unit i + 1's words (and the descriptor of i + 2) load while unit i
// multiplies; unit i's scales load before its multiply and are applied after it.
__device__ __forceinline__ void run_units(const ggx_strip_matrix & m, const half * xs, float * colsum, int b, int warp, int lane) {
    const int * deal = m.deal + (size_t)b * (GGX_STRIP_WARPS + 1);
    int ui = ggx_load_ro(deal + warp);
    const int end = ggx_load_ro(deal + warp + 1);
    if (ui >= end) return;
    const int q0 = (int)load_unit(m.units + ggx_load_ro(deal)).quad;
    ggx_strip_unit u = load_unit(m.units + ui);
    unit_regs A;
    fetch_words(m, u, lane, A);
    ggx_strip_unit un = ui + 1 < end ? load_unit(m.units + ui + 1) : u;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    int cur = (int)u.quad;
    auto flush = [&]() {
        const float v = ggx_warp_sum4(acc);
        if (lane % 8 == 0) atomicAdd(colsum + (cur - q0) * 4 + lane / 8, v);
        acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    };
    for (; ui < end; ui++) {
        unit_regs B;
        if (ui + 1 < end) fetch_words(m, un, lane, B);
        const ggx_strip_unit un2 = ui + 2 < end ? load_unit(m.units + ui + 2) : un;
        const int bits = u.bits_lanes & 255, lanes = u.bits_lanes >> 8;
        const bool on = lane < lanes;
        const uint2 sc = on ? ggx_load_ro((const uint2 *)(m.scales + (size_t)A.group * m.Np + 4 * u.quad)) : make_uint2(0, 0);
        float4 d = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (on) {
            const half * x = xs + (u.slice0 + lane) * 32;
            switch (bits) {
                case 8: d = slice_dot<8>(A.w, x); break;
                case 6: d = slice_dot<6>(A.w, x); break;
                case 5: d = slice_dot<5>(A.w, x); break;
                case 4: d = slice_dot<4>(A.w, x); break;
                case 3: d = slice_dot<3>(A.w, x); break;
                default: d = slice_dot<2>(A.w, x); break;
            }
        }
        if ((int)u.quad != cur) {
            flush();
            cur = (int)u.quad;
        }
        const float2 s01 = __half22float2(u32_as_half2(sc.x)), s23 = __half22float2(u32_as_half2(sc.y));
        acc.x += d.x * s01.x;
        acc.y += d.y * s01.y;
        acc.z += d.z * s23.x;
        acc.w += d.w * s23.y;
        A = B;
        u = un;
        un = un2;
    }
    flush();
}

__device__ __forceinline__ float load_norm_w(const void * p, int type, int k) {
    switch (type) {
        case GGX_TYPE_F16:  return __half2float(((const half *)p)[k]);
        case GGX_TYPE_BF16: return __bfloat162float(((const nv_bfloat16 *)p)[k]);
        default:            return ((const float *)p)[k];
    }
}

// Grid-wide hand-off between stages, as cooperative groups' grid sync does it: the block's
// writes, then one fenced arrival; a waiting block polls the count, fences, and its reads of the
// other blocks' results go past L1 (ggx_load_cg).
__device__ __forceinline__ void grid_arrive(int * counter) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(counter, 1);
    }
}
__device__ __forceinline__ void grid_wait(int * counter, int target) {
    if (threadIdx.x == 0) {
        while (*(volatile int *)counter < target) {
        }
        __threadfence();
    }
    __syncthreads();
}

__global__ void __launch_bounds__(NT, 1) k_strip_step(const __grid_constant__ ggx_strip_step s) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float red[2][GGX_CUDA_WARP];
    const int b = blockIdx.x, t = threadIdx.x, lane = t % GGX_CUDA_WARP, warp = t / GGX_CUDA_WARP;
    for (int si = 0; si < s.n_stages; si++) {
        const ggx_strip_stage & S = s.st[si];
        if (si > 0) {
            grid_wait(s.counter, si * (int)gridDim.x);
            if (si == s.n_stages - 1 && t == 0 && atomicAdd(s.counter, 1) == s.n_stages * (int)gridDim.x - 1)
                atomicExch(s.counter, 0);   // every block is past its last wait: ready for the next launch
        }
        half * xs = (half *)smem;                                    // [n_mat][K]
        float * colsum = (float *)(smem + align16((size_t)S.n_mat * S.K * 2));   // [n_mat][max_quads * 4]
        const int cs_ld = S.m[0].max_quads * 4;

        // x: sum of squares (RMS norm) and max |x w| in one pass, then x w / rms times the power of
        // two that brings the maximum into [8, 16) (so that 16 products of at most 128 * 16 per
        // half stay below 32768; see qgemv.cu), inf and nan left unscaled
        float ss = 0.0f, am = 0.0f;
        for (int k = t; k < S.K; k += NT) {
            const float v = ggx_load_cg(S.x + k), w = S.norm_w ? load_norm_w(S.norm_w, S.norm_type, k) : 1.0f;
            ss += v * v;
            am = fmaxf(am, fabsf(v * w));
        }
        ss = ggx_block_sum(ss, red[0]);
        am = ggx_block_max(am, red[1]);
        const float rms = S.norm ? rsqrtf(ss / (float)S.K + S.norm_eps) : 1.0f;
        const float amax = am * rms;
        const int field = (__float_as_int(amax) >> 23) & 255;
        const int e = field == 255 ? 0 : max(-120, min(120, 4 - (field - 126)));
        const float xscale = rms * ldexpf(1.0f, e), xunscale = ldexpf(1.0f, -e);
        for (int k = t; k < S.K; k += NT) {
            const float w = S.norm_w ? load_norm_w(S.norm_w, S.norm_type, k) : 1.0f;
            const half v = __float2half_rn(ggx_load_cg(S.x + k) * w * xscale);
            for (int mi = 0; mi < S.n_mat; mi++) xs[(size_t)mi * S.K + (S.m[mi].inv_perm ? ggx_load_ro(S.m[mi].inv_perm + k) : k)] = v;
        }
        for (int i = t; i < S.n_mat * cs_ld; i += NT) colsum[i] = 0.0f;
        __syncthreads();

        if (b < S.m[0].n_strips) {
            for (int mi = 0; mi < S.n_mat; mi++) run_units(S.m[mi], xs + (size_t)mi * S.K, colsum + mi * cs_ld, b, warp, lane);
            __syncthreads();
            // the owners' epilogue: the strip's first unit holds its first quad, its last unit its
            // last (units run width by width, each width over all of the strip's quads)
            const ggx_strip_matrix & M = S.m[0];
            const int * deal = M.deal + (size_t)b * (GGX_STRIP_WARPS + 1);
            const int u0 = ggx_load_ro(deal), u1 = ggx_load_ro(deal + GGX_STRIP_WARPS);
            if (u0 < u1) {
                const int q0 = (int)load_unit(M.units + u0).quad, q1 = (int)load_unit(M.units + u1 - 1).quad;
                for (int i = t; i < (q1 - q0 + 1) * 4; i += NT) {
                    const int n = q0 * 4 + i;
                    if (n >= S.N) continue;
                    float v = colsum[i] * xunscale + (S.bias[0] ? S.bias[0][n] : 0.0f);
                    if (S.epi == GGX_STRIP_GLU) {
                        const float up = colsum[cs_ld + i] * xunscale + (S.bias[1] ? S.bias[1][n] : 0.0f);
                        v = (S.act == GGX_ACT_SILU ? silu_f(v) : gelu_f(v)) * up;
                    } else if (S.epi == GGX_STRIP_ADD) {
                        v += ggx_load_cg(S.resid + n);
                    }
                    S.y[n] = v;
                }
            }
        }
        if (si + 1 < s.n_stages) grid_arrive(s.counter);
        else __syncthreads();   // (shared memory is reused by nothing after the last stage)
    }
}

}  // namespace

size_t ggx_strip_step_smem(const ggx_strip_step & s) {
    size_t need = 0;
    for (int i = 0; i < s.n_stages; i++) {
        const ggx_strip_stage & S = s.st[i];
        need = std::max(need, align16((size_t)S.n_mat * S.K * 2) + (size_t)S.n_mat * S.m[0].max_quads * 16);
    }
    return need;
}

cudaError_t ggx_cuda_strip_step(const ggx_strip_step & s, int grid, cudaStream_t stream) {
    const size_t smem = ggx_strip_step_smem(s);
    cudaError_t err = cudaFuncSetAttribute(k_strip_step, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return err;
    k_strip_step<<<grid, NT, smem, stream>>>(s);
    return cudaGetLastError();
}

cudaError_t ggx_cuda_strip_gemv(const ggx_strip_matrix & m, const float * xq, float * y, int * counter, cudaStream_t stream) {
    ggx_strip_step s = {};
    s.n_stages = 1;
    s.counter = counter;
    ggx_strip_stage & S = s.st[0];
    S.m[0] = m;
    S.m[0].inv_perm = nullptr;
    S.n_mat = 1;
    S.x = xq;
    S.K = m.K;
    S.N = m.Np;
    S.epi = GGX_STRIP_STORE;
    S.y = y;
    return ggx_cuda_strip_step(s, m.n_strips, stream);
}
