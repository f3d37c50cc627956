// ROPE: one thread per rotated pair, pass-through dims copied by the same grid.
// angle_i = pos * pos_scale * theta^(-2i/n_rot) / freq_div[i]; (cos, sin) * attn_factor, formed by
// ggx_rope_cos_sin (rope.cuh). NEOX pairs (i, i + n_rot/2); INTERLEAVE pairs (2i, 2i + 1).
#include "rope.cuh"

namespace {

__global__ void k_rope(const float * __restrict__ x,        // [T][H][hd]
                       const int32_t * __restrict__ pos,    // [T]
                       const float * __restrict__ freq_div, // [n_rot/2] or null
                       float * __restrict__ y, int hd, int H, int T, ggx_params_rope p) {
    const int half = p.n_rot / 2;
    const int64_t n_pairs = (int64_t)T * H * half;
    const int64_t n_pass = (int64_t)T * H * (hd - p.n_rot);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_pairs + n_pass; i += (int64_t)gridDim.x * blockDim.x) {
        if (i >= n_pairs) {                      // pass-through dims n_rot..hd-1
            const int64_t j = i - n_pairs;
            const int64_t row = j / (hd - p.n_rot);
            const int64_t off = row * hd + p.n_rot + j % (hd - p.n_rot);
            y[off] = x[off];
            continue;
        }
        const int pi = (int)(i % half);
        const int64_t row = i / half;            // t * H + h
        const int t = (int)(row / H);
        float c, s;
        ggx_rope_cos_sin(pos[t], pi, freq_div, p, c, s);
        const int64_t base = row * hd;
        const int64_t i0 = base + (p.mode == GGX_ROPE_NEOX ? pi : 2 * pi);
        const int64_t i1 = base + (p.mode == GGX_ROPE_NEOX ? pi + half : 2 * pi + 1);
        const float x0 = x[i0], x1 = x[i1];
        y[i0] = x0 * c - x1 * s;
        y[i1] = x0 * s + x1 * c;
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
    const int64_t n = (int64_t)T * H * hd;
    if (n == 0) return GGX_STATUS_OK;
    const int64_t blocks = (n / 2 + 255) / 256 + 1;
    k_rope<<<(unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, ctx.stream>>>(
        (const float *)x->data, (const int32_t *)dst->src[1]->data,
        dst->src[2] ? (const float *)dst->src[2]->data : nullptr, (float *)dst->data, hd, H, T, dst->params.rope);
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}
