// ROPE on x {hd, H, T} with positions read from device memory (pos i32 {T}), so a captured graph
// stays valid for every step. Optional per-frequency divisors f32 {n_rot/2} (Llama-3, YaRN, ...
// folded on the host).
#pragma once

#include "common.cuh"

enum ggx_status ggx_cuda_op_rope(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);
bool            ggx_cuda_supports_rope(const struct ggx_tensor * dst);

// The step's RoPE table (rope-table.cu; ctx.rope_table_on): prepare allocates it before a graph is
// captured, when a job of the plan could use it; begin, at the start of a run, computes it for the
// first such job (a plain launch); table_for gives a job the table when it holds the job's
// factors and at least one other kernel ran since it was launched (else null: compute inline).
struct ggx_cuda_plan;
struct ggx_qgemv_job;
enum ggx_status ggx_cuda_rope_table_prepare(ggx_cuda_ctx & ctx, const ggx_cuda_plan & plan);
enum ggx_status ggx_cuda_rope_table_begin(ggx_cuda_ctx & ctx, const ggx_cuda_plan & plan);
const float2 *  ggx_cuda_rope_table_for(ggx_cuda_ctx & ctx, const ggx_qgemv_job & job);

// cos and sin (times attn_factor) of pair i at position pos. Shared by k_rope and the fused decode
// GEMV epilogue (qgemv.cu) so that both give bit-identical results. The angle is formed in double:
// at positions ~1e5 a float angle is off by ~1e-2 rad. The optional YaRN ramp (ext_factor != 0)
// follows backends/cpu/cpu-rope.cpp exactly.
static __device__ __forceinline__ void ggx_rope_cos_sin(int32_t pos, int i, const float * freq_div,
                                                        const ggx_params_rope & p, float & c, float & s) {
    double inv = pow((double)p.theta, -2.0 * i / p.n_rot);
    if (freq_div) inv /= (double)freq_div[i];
    double factor = p.pos_scale;
    if (p.ext_factor != 0.0f) {   // YaRN ramp between extrapolated and interpolated dims
        const double two_pi = 6.283185307179586;
        const double lo = fmax(0.0, floor(p.n_rot * log((double)p.n_ctx_orig / (two_pi * p.beta_fast)) / (2.0 * log((double)p.theta))));
        const double hi = fmin((double)p.n_rot - 1, ceil(p.n_rot * log((double)p.n_ctx_orig / (two_pi * p.beta_slow)) / (2.0 * log((double)p.theta))));
        const double ramp = fmin(1.0, fmax(0.0, (i - lo) / fmax(hi - lo, 0.001)));
        const double mix = (1.0 - ramp) * p.ext_factor;
        factor = p.pos_scale * (1.0 - mix) + mix;
    }
    const double ang = (double)pos * inv * factor;
    double sd, cd;
    sincos(ang, &sd, &cd);   // one range reduction for both
    c = (float)(cd * p.attn_factor);
    s = (float)(sd * p.attn_factor);
}
