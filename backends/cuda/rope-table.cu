// The RoPE factors of a decode step in one table (the default; GGX_QGEMV_ROPE_TABLE=0 turns it
// off): the step's positions are the same in every layer, so the (cos, sin) of
// each (token, pair) is computed once at the step's start, and each layer's q/k GEMV reads it
// instead of forming the double-precision angles in every block's prologue. Those prologues run
// before the PDL wait, but they are longer than the time down leaves them: in run 141's trace the
// median q/k/v block gets past its wait 2.6 us after the first (the v blocks, which have no
// RoPE, pass it as it releases), against 0.15-1.0 us for the other GEMVs. With the table (run
// 143, H200) that median wait fell from 7.16 to 4.36 us and q/k/v's span from 11.73 to 10.38 us:
// tg128@16 +1.9% on llama3-8b 4.0 (418.3 -> 426.4 t/s), +2.4% on llama3.2-1b (1311.9 -> 1342.8).
// The values are ggx_rope_cos_sin's, so the results are bit-identical either way.
#include "rope.cuh"

#include "decode-plan.h"

#include <cstring>

namespace {

constexpr int k_pairs = 128;   // RoPE pairs per token the table holds (head dims up to 256)

__global__ void k_rope_table(const int32_t * __restrict__ pos, int T, int half, const float * __restrict__ freq_div,
                             const ggx_params_rope p, float2 * __restrict__ out) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= T * half) return;
    float c, s;
    ggx_rope_cos_sin(pos[e / half], e % half, freq_div, p, c, s);
    out[e] = make_float2(c, s);
}

bool has_rope(const ggx_qgemv_job & job) {
    for (int i = 0; i < job.n_mat; i++)
        if (job.m[i].rope) return true;
    return false;
}

// The table a job would read: its positions, divisors, token count and parameters.
ggx_cuda_ctx::ggx_cuda_rope_key key_of(const ggx_qgemv_job & job) {
    ggx_cuda_ctx::ggx_cuda_rope_key k;
    k.pos = job.pos ? job.pos->data : nullptr;
    k.freq_div = job.freq_div ? job.freq_div->data : nullptr;
    k.T = job.T;
    k.rope = job.rope;
    return k;
}

bool table_fits(const ggx_qgemv_job & job) {
    return has_rope(job) && job.pos && job.T >= 1 && job.T <= GGX_CUDA_QGEMV_MAX_T && job.rope.n_rot >= 2 &&
           job.rope.n_rot / 2 <= k_pairs;
}

// The plan's first job that could read a table: the one the table is computed for.
const ggx_qgemv_job * table_job(const ggx_cuda_plan & plan) {
    for (const ggx_qgemv_job & job : plan.jobs)
        if (table_fits(job)) return &job;
    return nullptr;
}

}  // namespace

ggx_status ggx_cuda_rope_table_prepare(ggx_cuda_ctx & ctx, const ggx_cuda_plan & plan) {
    if (ctx.rope_table_on && !ctx.rope_table && table_job(plan))
        GGX_CUDA_CHECK(cudaMalloc((void **)&ctx.rope_table, sizeof(float2) * GGX_CUDA_QGEMV_MAX_T * k_pairs));
    return GGX_STATUS_OK;
}

ggx_status ggx_cuda_rope_table_begin(ggx_cuda_ctx & ctx, const ggx_cuda_plan & plan) {
    ctx.rope_key = {};
    ctx.rope_table_fresh = false;
    const ggx_qgemv_job * job = ctx.rope_table_on && ctx.rope_table ? table_job(plan) : nullptr;
    if (!job) return GGX_STATUS_OK;
    const int half = job->rope.n_rot / 2, n = job->T * half;
    // a plain launch: the kernels after the next one find it complete, even before their PDL wait
    k_rope_table<<<(n + 127) / 128, 128, 0, ctx.stream>>>((const int32_t *)job->pos->data, job->T, half,
                                                          job->freq_div ? (const float *)job->freq_div->data : nullptr,
                                                          job->rope, ctx.rope_table);
    GGX_CUDA_LAUNCH_CHECK();
    ctx.rope_key = key_of(*job);
    ctx.rope_table_fresh = true;
    return GGX_STATUS_OK;
}

const float2 * ggx_cuda_rope_table_for(ggx_cuda_ctx & ctx, const ggx_qgemv_job & job) {
    if (ctx.rope_key.T == 0 || ctx.rope_table_fresh || !table_fits(job)) return nullptr;
    const ggx_cuda_ctx::ggx_cuda_rope_key k = key_of(job);
    if (k.pos != ctx.rope_key.pos || k.freq_div != ctx.rope_key.freq_div || k.T != ctx.rope_key.T ||
        memcmp(&k.rope, &ctx.rope_key.rope, sizeof k.rope) != 0)
        return nullptr;
    ctx.rope_table_jobs++;
    return ctx.rope_table;
}
