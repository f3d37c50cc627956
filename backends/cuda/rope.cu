// ROPE: one block per token. Its (cos, sin) per frequency are formed once in shared memory and
// shared by all heads: the double-precision angle (pow + sincos, rope.cuh) is the costly part, and
// forming it per head and pair made a prefill call ~70 us (1 TB/s) for 67 MB of q.
// angle_i = pos * pos_scale * theta^(-2i/n_rot) / freq_div[i]; (cos, sin) * attn_factor, formed by
// ggx_rope_cos_sin (rope.cuh). NEOX pairs (i, i + n_rot/2); INTERLEAVE pairs (2i, 2i + 1).
#include "rope.cuh"

namespace {

constexpr int k_threads = 256;

__global__ void __launch_bounds__(k_threads) k_rope(const float * __restrict__ x,        // [T][H][hd]
                                                    const int32_t * __restrict__ pos,    // [T]
                                                    const float * __restrict__ freq_div, // [n_rot/2] or null
                                                    float * __restrict__ y, int hd, int H, ggx_params_rope p) {
    extern __shared__ float2 cs[];   // [n_rot / 2]: (cos, sin)
    const int half = p.n_rot / 2;
    const int32_t ps = pos[blockIdx.x];
    for (int i = threadIdx.x; i < half; i += k_threads) {
        float c, s;
        ggx_rope_cos_sin(ps, i, freq_div, p, c, s);
        cs[i] = make_float2(c, s);
    }
    __syncthreads();
    const size_t row = (size_t)blockIdx.x * H * hd;
    const float * xr = x + row;
    float * yr = y + row;
    const bool neox = p.mode == GGX_ROPE_NEOX;
    for (int j = threadIdx.x; j < H * half; j += k_threads) {
        const int h = j / half, pi = j - h * half;
        const float2 f = cs[pi];
        const int i0 = h * hd + (neox ? pi : 2 * pi);
        const int i1 = h * hd + (neox ? pi + half : 2 * pi + 1);
        const float x0 = xr[i0], x1 = xr[i1];
        yr[i0] = x0 * f.x - x1 * f.y;
        yr[i1] = x0 * f.y + x1 * f.x;
    }
    const int pass = hd - p.n_rot;   // dims n_rot..hd-1 pass through
    if (pass > 0)
        for (int j = threadIdx.x; j < H * pass; j += k_threads) {
            const int h = j / pass;
            const int off = h * hd + p.n_rot + (j - h * pass);
            yr[off] = xr[off];
        }
}

}  // namespace

bool ggx_cuda_supports_rope(const ggx_tensor * dst) {
    const ggx_tensor * x = dst->src[0];
    const ggx_tensor * pos = dst->src[1];
    const ggx_params_rope & p = dst->params.rope;
    if (x->type != GGX_TYPE_F32 || !pos || pos->type != GGX_TYPE_I32) return false;
    if (p.n_rot <= 0 || p.n_rot % 2 || p.n_rot > x->ne[0]) return false;
    if (p.mode != GGX_ROPE_NEOX && p.mode != GGX_ROPE_INTERLEAVE) return false;
    if (dst->src[2] && (dst->src[2]->type != GGX_TYPE_F32 || ggx_nelements(dst->src[2]) < p.n_rot / 2)) return false;
    return ggx_nelements(pos) >= x->ne[2] * x->ne[3];
}

ggx_status ggx_cuda_op_rope(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const ggx_tensor * x = dst->src[0];
    const int hd = (int)x->ne[0], H = (int)x->ne[1], T = (int)(x->ne[2] * x->ne[3]);
    if ((int64_t)T * H * hd == 0) return GGX_STATUS_OK;
    k_rope<<<(unsigned)T, k_threads, (size_t)dst->params.rope.n_rot / 2 * sizeof(float2), ctx.stream>>>(
        (const float *)x->data, (const int32_t *)dst->src[1]->data,
        dst->src[2] ? (const float *)dst->src[2]->data : nullptr, (float *)dst->data, hd, H, dst->params.rope);
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}
