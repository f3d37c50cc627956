// ROPE: one thread per rotated pair, pass-through dims copied by the same grid.
// angle_i = pos * pos_scale * theta^(-2i/n_rot) / freq_div[i]; (cos, sin) * attn_factor; the
// optional YaRN ramp (ext_factor != 0) follows backends/cpu/cpu-rope.cpp exactly.
// NEOX pairs (i, i + n_rot/2); INTERLEAVE pairs (2i, 2i + 1). The angle is formed in double:
// at positions ~1e5 a float angle is off by ~1e-2 rad.
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
        double inv = pow((double)p.theta, -2.0 * pi / p.n_rot);
        if (freq_div) inv /= (double)freq_div[pi];
        double factor = p.pos_scale;
        if (p.ext_factor != 0.0f) {         // YaRN ramp between extrapolated and interpolated dims
            const double two_pi = 6.283185307179586;
            const double lo = fmax(0.0, floor(p.n_rot * log((double)p.n_ctx_orig / (two_pi * p.beta_fast)) / (2.0 * log((double)p.theta))));
            const double hi = fmin((double)p.n_rot - 1, ceil(p.n_rot * log((double)p.n_ctx_orig / (two_pi * p.beta_slow)) / (2.0 * log((double)p.theta))));
            const double ramp = fmin(1.0, fmax(0.0, (pi - lo) / fmax(hi - lo, 0.001)));
            const double mix = (1.0 - ramp) * p.ext_factor;
            factor = p.pos_scale * (1.0 - mix) + mix;
        }
        const double ang = (double)pos[t] * inv * factor;
        const float c = (float)(cos(ang) * p.attn_factor), s = (float)(sin(ang) * p.attn_factor);
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
