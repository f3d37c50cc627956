// ROPE: rotates pairs of the first n_rot dims of each head by angle pos * inv_freq_i.
//
//   pairs        NEOX (i, i + n_rot/2), INTERLEAVE (2i, 2i + 1), for i < n_rot/2
//   inv_freq_i   theta^(-2i / n_rot) / div_i          (div = src2, default 1)
//   angle_i      p * pos_scale * inv_freq_i           (p = src1[t], an integer position)
//   YaRN         when ext_factor != 0 (HF "yarn" with ext_factor 1, pos_scale 1/factor):
//                  ramp_i = clamp((i - lo) / max(hi - lo, 0.001), 0, 1)
//                  mix_i  = (1 - ramp_i) * ext_factor
//                  angle_i = p * inv_freq_i * (pos_scale * (1 - mix_i) + mix_i)
//                with lo = max(0, floor(c(beta_fast))), hi = min(n_rot - 1, ceil(c(beta_slow))),
//                c(b) = n_rot * ln(n_ctx_orig / (2 pi b)) / (2 ln theta): the dims below lo keep their
//                frequency (extrapolate), those above hi are scaled by pos_scale (interpolate).
//                The magnitude correction (0.1 ln(factor) + 1 in HF) is NOT added here: pass it
//                in attn_factor.
//   cos, sin     of angle_i, both multiplied by attn_factor
// Angles and their sin/cos are computed in double once per token (positions reach 1e5-1e6, where
// an f32 angle would be off by ~0.01 rad); the rotation itself is f32.
#include "cpu-common.h"
#include "cpu-ops.h"

namespace ggx_cpu {

// cos, sin (n_rot/2 floats each) and the per-dim angle rate as double (n_rot/2 doubles).
size_t rope_scratch_floats(const ggx_tensor * t) { return (size_t)t->params.rope.n_rot * 2; }

namespace {

// rate[i] = angle per unit of position for dim pair i (everything above except p).
void rope_rates(const ggx_params_rope & r, const float * div, double * rate) {
    const int half = r.n_rot / 2;
    double lo = 0, hi = 0;
    if (r.ext_factor != 0.0f) {
        const double two_pi = 6.283185307179586;
        auto corr_dim = [&](double beta) {
            return r.n_rot * std::log((double)r.n_ctx_orig / (two_pi * beta)) / (2.0 * std::log((double)r.theta));
        };
        lo = std::max(0.0, std::floor(corr_dim(r.beta_fast)));
        hi = std::min((double)r.n_rot - 1, std::ceil(corr_dim(r.beta_slow)));
    }
    for (int i = 0; i < half; i++) {
        double inv_freq = std::pow((double)r.theta, -2.0 * i / r.n_rot);
        if (div) inv_freq /= (double)div[i];
        double factor = r.pos_scale;
        if (r.ext_factor != 0.0f) {
            const double ramp = std::min(1.0, std::max(0.0, (i - lo) / std::max(hi - lo, 0.001)));
            const double mix = (1.0 - ramp) * r.ext_factor;
            factor = r.pos_scale * (1.0 - mix) + mix;
        }
        rate[i] = inv_freq * factor;
    }
}

}  // namespace

void op_rope(const params & p, ggx_tensor * dst) {
    const ggx_tensor * x = dst->src[0];
    const int32_t * pos = (const int32_t *)dst->src[1]->data;
    const float * div = dst->src[2] ? (const float *)dst->src[2]->data : nullptr;
    const ggx_params_rope & r = dst->params.rope;
    const int64_t hd = x->ne[0], H = x->ne[1], T = x->ne[2];
    const int half = r.n_rot / 2;
    const bool neox = r.mode == GGX_ROPE_NEOX;
    float * cs = p.scratch, * sn = p.scratch + half;
    double * rate = (double *)(p.scratch + 2 * half);   // 8-byte aligned: slices are, and n_rot is even
    int64_t r0, r1;
    split_range(H * T, p.ith, p.nth, &r0, &r1);
    if (r0 >= r1) return;
    rope_rates(r, div, rate);
    int64_t table_t = -1;
    for (int64_t row = r0; row < r1; row++) {
        const int64_t t = row / H, h = row % H;
        if (t != table_t) {
            for (int i = 0; i < half; i++) {
                const double angle = (double)pos[t] * rate[i];
                cs[i] = (float)(std::cos(angle) * r.attn_factor);
                sn[i] = (float)(std::sin(angle) * r.attn_factor);
            }
            table_t = t;
        }
        const float * xs = (const float *)((const char *)x->data + (size_t)h * x->nb[1] + (size_t)t * x->nb[2]);
        float * ys = (float *)((char *)dst->data + (size_t)h * dst->nb[1] + (size_t)t * dst->nb[2]);
        const int64_t stride = neox ? 1 : 2, off = neox ? half : 1;   // pair i is (i*stride, i*stride + off)
        for (int i = 0; i < half; i++) {
            const float x0 = xs[i * stride], x1 = xs[i * stride + off];
            ys[i * stride] = x0 * cs[i] - x1 * sn[i];
            ys[i * stride + off] = x0 * sn[i] + x1 * cs[i];
        }
        if (ys != xs)
            for (int64_t i = r.n_rot; i < hd; i++) ys[i] = xs[i];
    }
}

}  // namespace ggx_cpu
