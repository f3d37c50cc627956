// The norm weights of a fused GEMV's x in q_perm order (the default; GGX_QGEMV_NORM_TABLE=0 turns
// it off). Before its PDL wait each block of a GEMV that normalises x looks up
// the sources of its x rows through q_perm and then their norm weights at those sources: two
// dependent loads in the prologue. Run 141's trace has the median gate/up block pass its wait
// 1.0 us after the first (q/k/v 2.6 us, which the RoPE table addresses): the prologue runs past the
// time o's tail leaves it. With a table w[k] = norm_w[q_perm[k]] per matrix the two loads are
// independent. Run 143 (H200): gate/up's wait 6.42 -> 5.35 us; tg128@16 llama3-8b 4.0 418.3 ->
// 419.7 t/s alone and 426.2 -> 428.3 with the RoPE table, llama3.2-1b 1310.8 -> 1325.3 (the
// default runs of that call varied by 0.05%). The values are ggx_load_any's, so results are
// bit-identical either way.
#include "norm.cuh"

#include "decode-plan.h"

namespace {

__global__ void k_norm_table(const void * __restrict__ norm_w, int type, const int32_t * __restrict__ perm, int K,
                             float * __restrict__ out) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < K) out[k] = ggx_load_any(norm_w, type, perm[k]);
}

// The matrix's table, built for this job's norm weights (a matrix keeps the first it was built
// for: captured graphs may hold its pointer, so it is never replaced), or null.
const float * table_of(const ggx_qgemv_job & job, int i) {
    const ggx_cuda_qextra * e = ggx_cuda_qextra_of(job.m[i].w);
    return e && e->norm_wp && job.norm_w && e->norm_wp_of == job.norm_w->data ? e->norm_wp : nullptr;
}

}  // namespace

ggx_status ggx_cuda_norm_tables_prepare(ggx_cuda_ctx & ctx, const ggx_cuda_plan & plan) {
    if (!ctx.norm_table_on) return GGX_STATUS_OK;
    for (const ggx_qgemv_job & job : plan.jobs) {
        if (!job.norm || !job.norm_w) continue;
        for (int i = 0; i < job.n_mat; i++) {
            const ggx_qmatrix * q = (const ggx_qmatrix *)job.m[i].w->extra;
            ggx_cuda_qextra * e = ggx_cuda_qextra_of(job.m[i].w);
            if (!e || !q->q_perm || e->norm_wp) continue;
            if (ggx_nelements(job.norm_w) < q->K) {
                ggx_set_error("cuda: %s: norm weights '%s' hold %lld values for K = %d", job.m[i].w->name, job.norm_w->name,
                              (long long)ggx_nelements(job.norm_w), q->K);
                return GGX_STATUS_FAILED;
            }
            GGX_CUDA_CHECK(cudaMalloc((void **)&e->norm_wp, sizeof(float) * q->K));
            k_norm_table<<<(q->K + 255) / 256, 256, 0, ctx.stream>>>(job.norm_w->data, (int)job.norm_w->type, q->q_perm, q->K,
                                                                     e->norm_wp);
            GGX_CUDA_LAUNCH_CHECK();
            e->norm_wp_of = job.norm_w->data;
        }
    }
    return GGX_STATUS_OK;
}

const float * ggx_cuda_norm_table_for(ggx_cuda_ctx & ctx, const ggx_qgemv_job & job, int i) {
    if (!ctx.norm_table_on || !job.norm) return nullptr;
    const float * t = table_of(job, i);
    if (t) ctx.norm_table_mats++;
    return t;
}
