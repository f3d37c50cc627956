#include "strip-plan.cuh"

#include "env-knobs.h"
#include "qmatrix.cuh"
#include "strip-step.h"
#include "tile-step.h"
#include "trace.cuh"

#include "ggx/ggx-strip-layout.h"
#include "ggx/ggx-tile-layout.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace {

// words[u.offset + i * lanes + l] = q_weight's 16 bytes of quad u.quad in packed row
// slice_qrow[u.slice0 + l] + i: one block per unit.
__global__ void k_strip_gather(const uint4 * __restrict__ qw, int quads, const ggx_strip_unit * __restrict__ units,
                               const int * __restrict__ slice_qrow, uint4 * __restrict__ words) {
    const ggx_strip_unit u = units[blockIdx.x];
    const int bits = u.bits_lanes & 255, lanes = u.bits_lanes >> 8;
    for (int j = threadIdx.x; j < bits * lanes; j += blockDim.x) {
        const int i = j / lanes, l = j - i * lanes;
        words[u.offset + j] = qw[(size_t)(slice_qrow[u.slice0 + l] + i) * quads + u.quad];
    }
}

__global__ void k_perm16(const int32_t * __restrict__ perm, int K, uint16_t * __restrict__ out) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < K) out[j] = (uint16_t)perm[j];
}

__global__ void k_invert_perm(const int32_t * __restrict__ perm, int K, int * __restrict__ inv) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < K) inv[perm[j]] = j;
}

// v into fresh device memory at *out (a matrix's field: set as soon as it is allocated, so that
// the matrix's release frees it whatever fails next).
template <typename T> ggx_status upload(ggx_cuda_ctx & ctx, const std::vector<T> & v, const T ** out) {
    T * p = nullptr;
    GGX_CUDA_CHECK(cudaMalloc((void **)&p, std::max<size_t>(v.size(), 1) * sizeof(T)));
    *out = p;
    GGX_CUDA_CHECK(cudaMemcpyAsync(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, ctx.stream));
    return GGX_STATUS_OK;
}

const ggx_strip_matrix * strip_of(const ggx_tensor * w) {
    const ggx_cuda_qextra * e = ggx_cuda_qextra_of(w);
    return e ? e->strip : nullptr;
}

const ggx_tile_step_matrix * tile_of(const ggx_tensor * w) {
    const ggx_cuda_qextra * e = ggx_cuda_qextra_of(w);
    return e ? e->tile : nullptr;
}

bool f32_or_null(const ggx_tensor * t) { return !t || t->type == GGX_TYPE_F32; }

// q as a host layout builder takes it: the groups' host copy, no words and no permutation (the
// device has those); the column scales come with download_scales.
ggx_qmatrix layout_view(const ggx_qmatrix & q, const std::vector<uint16_t> & groups) {
    ggx_qmatrix h = q;
    h.groups_host = groups.data();
    h.q_weight = nullptr;
    h.q_perm = nullptr;
    return h;
}

// q's column scale codes and maxima copied to the host (they must outlive h, which points at them).
struct host_scales {
    std::vector<uint32_t> qs;
    std::vector<uint16_t> qsmax;
};
ggx_status download_scales(ggx_cuda_ctx & ctx, const ggx_qmatrix & q, host_scales * hs, ggx_qmatrix * h) {
    hs->qs.resize((size_t)q.n_groups * (q.Np / 8));
    hs->qsmax.resize(q.n_groups);
    GGX_CUDA_CHECK(cudaMemcpyAsync(hs->qs.data(), q.q_scale, hs->qs.size() * 4, cudaMemcpyDeviceToHost, ctx.stream));
    GGX_CUDA_CHECK(cudaMemcpyAsync(hs->qsmax.data(), q.q_scale_max, hs->qsmax.size() * 2, cudaMemcpyDeviceToHost, ctx.stream));
    GGX_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    h->q_scale = hs->qs.data();
    h->q_scale_max = hs->qsmax.data();
    return GGX_STATUS_OK;
}

// A job's input as a stage reads it: x and its RMS norm (either step's stage: the same field names).
template <typename Stage> void fill_input(const ggx_qgemv_job & job, Stage & S) {
    S.x = (const float *)job.x->data;
    S.K = S.m[0].K;
    S.norm = job.norm;
    S.norm_w = job.norm_w ? job.norm_w->data : nullptr;
    S.norm_type = job.norm_w ? (int)job.norm_w->type : (int)GGX_TYPE_F32;
    S.norm_eps = job.norm_eps;
}

// A job as a stage of either step (ggx_strip_stage or ggx_tile_stage: the same field names);
// matrix_of(w): the step's copy of weight w.
template <typename Stage, typename MatrixOf> void fill_stage(const ggx_qgemv_job & job, Stage * out, MatrixOf matrix_of) {
    Stage & S = *out;
    const int gate = job.n_mat == 2 && !job.m[0].is_gate ? 1 : 0;   // GLU: the gate first
    for (int j = 0; j < job.n_mat; j++) {
        const ggx_qgemv_job_mat & jm = job.m[j == 0 ? gate : 1 - gate];
        S.m[j] = matrix_of(jm.w);
        S.bias[j] = jm.bias ? (const float *)jm.bias->data : nullptr;
    }
    const ggx_qgemv_job_mat & m0 = job.m[gate];
    S.n_mat = job.n_mat;
    fill_input(job, S);
    S.N = ((const ggx_qmatrix *)m0.w->extra)->N;
    S.epi = m0.epi == GGX_QGEMV_GLU ? GGX_STRIP_GLU : m0.epi == GGX_QGEMV_ADD ? GGX_STRIP_ADD : GGX_STRIP_STORE;
    S.act = job.act;
    S.y = (float *)m0.out->data;
    S.resid = m0.resid ? (const float *)m0.resid->data : nullptr;
}

// A split job (split_job_ok) as a tile step stage: its matrices in the job's order (q, k, v).
void fill_split_stage(const ggx_qgemv_job & job, ggx_tile_stage * out) {
    ggx_tile_stage & S = *out;
    S.split = 1;
    S.n_mat = job.n_mat;
    for (int i = 0; i < job.n_mat; i++) {
        const ggx_qgemv_job_mat & jm = job.m[i];
        S.m[i] = *tile_of(jm.w);
        S.bias[i] = jm.bias ? (const float *)jm.bias->data : nullptr;
        S.out[i] = jm.cache ? jm.cache->data : jm.out->data;
        S.out_type[i] = jm.cache ? (int)jm.cache->type : (int)GGX_TYPE_F32;
        S.out_rows[i] = jm.cache ? (int)(ggx_nelements(jm.cache) / ((const ggx_qmatrix *)jm.w->extra)->N) : 0;
        S.rope_mask |= jm.rope ? 1 << i : 0;
    }
    S.pos = job.pos ? (const int32_t *)job.pos->data : nullptr;
    S.freq_div = job.freq_div ? (const float *)job.freq_div->data : nullptr;
    S.rope = job.rope;
    fill_input(job, S);
    S.N = S.m[0].Np;
    S.epi = GGX_STRIP_STORE;
}

}  // namespace

ggx_status ggx_cuda_strip_prepare(ggx_cuda_ctx & ctx, ggx_tensor * t, const std::vector<uint16_t> & groups) {
    const ggx_qmatrix * q = (const ggx_qmatrix *)t->extra;
    ggx_cuda_qextra * e = (ggx_cuda_qextra *)q->backend_extra;
    // the layout is built on the host from the groups and the column scales (downloaded), without
    // the words, which the device gathers from q_weight itself
    ggx_qmatrix h = layout_view(*q, groups);
    if (!ggx::strip_layout_supported(h)) return GGX_STATUS_OK;
    host_scales hs;
    GGX_RETURN_IF_ERR(download_scales(ctx, *q, &hs, &h));
    ggx::StripLayout L;
    std::string why;
    if (!ggx::strip_layout_build(h, std::min(ctx.n_sm, q->Np / 4), false, &L, &why)) {
        ggx_set_error("cuda: %s: strip layout: %s", t->name, why.c_str());
        return GGX_STATUS_FAILED;
    }
    const std::vector<int> deal = ggx::strip_layout_deal(L, GGX_STRIP_WARPS);
    const std::vector<ggx_strip_unit> units = ggx_strip_units(L);

    ggx_strip_matrix * m = new ggx_strip_matrix();
    e->strip = m;
    m->K = q->K;
    m->Np = q->Np;
    m->n_strips = L.n_strips;
    m->max_quads = ggx_strip_max_quads(L);
    m->max_units = ggx_strip_max_units(L);
    GGX_RETURN_IF_ERR(upload(ctx, units, &m->units));
    GGX_RETURN_IF_ERR(upload(ctx, deal, &m->deal));
    GGX_RETURN_IF_ERR(upload(ctx, L.scales, &m->scales));
    GGX_RETURN_IF_ERR(upload(ctx, L.slice_group, &m->slice_group));
    GGX_RETURN_IF_ERR(upload(ctx, L.width_unit0, &m->width_unit0));
    uint4 * words = nullptr;
    GGX_CUDA_CHECK(cudaMalloc((void **)&words, (size_t)q->qrows * q->Np * 4));
    m->words = words;
    const int * d_qrow = nullptr;   // (the gather's alone: freed below)
    GGX_RETURN_IF_ERR(upload(ctx, L.slice_qrow, &d_qrow));
    k_strip_gather<<<(unsigned)units.size(), 256, 0, ctx.stream>>>((const uint4 *)q->q_weight, q->Np / 4, m->units, d_qrow, words);
    GGX_CUDA_LAUNCH_CHECK();
    if (q->q_perm) {
        int * inv = nullptr;
        GGX_CUDA_CHECK(cudaMalloc((void **)&inv, (size_t)q->K * sizeof(int)));
        m->inv_perm = inv;
        k_invert_perm<<<ggx_cuda_blocks(q->K, 256), 256, 0, ctx.stream>>>(q->q_perm, q->K, inv);
        GGX_CUDA_LAUNCH_CHECK();
    }
    GGX_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));   // host vectors die here
    (void)cudaFree((void *)d_qrow);
    return GGX_STATUS_OK;
}

void ggx_cuda_strip_release(ggx_cuda_qextra * e) {
    ggx_strip_matrix * m = e->strip;
    if (!m) return;
    for (const void * p : {(const void *)m->words, (const void *)m->units, (const void *)m->deal, (const void *)m->scales,
                           (const void *)m->slice_group, (const void *)m->inv_perm, (const void *)m->width_unit0})
        (void)cudaFree((void *)p);
    delete m;
    e->strip = nullptr;
}

namespace {

// The tile copy of t (none yet) dealt to `grid` blocks from block0 on, in the column order
// (pair_hd, pair_half) (ggx_tile_src_col).
ggx_status tile_build(ggx_cuda_ctx & ctx, ggx_tensor * t, const std::vector<uint16_t> & groups, int grid, int block0, int pair_hd,
                      int pair_half) {
    const ggx_qmatrix * q = (const ggx_qmatrix *)t->extra;
    ggx_cuda_qextra * e = (ggx_cuda_qextra *)q->backend_extra;
    // as for the strip layout; the device gathers the words with ggx_cuda_tile_gather
    ggx_qmatrix h = layout_view(*q, groups);
    if (!ggx::tile_layout_supported(h) || q->K > 65536) return GGX_STATUS_OK;   // (q_perm is staged as uint16)
    host_scales hs;
    GGX_RETURN_IF_ERR(download_scales(ctx, *q, &hs, &h));
    ggx::TileLayout L;
    std::string why;
    std::vector<ggx_tile_unit_dev> units;
    std::vector<int4> chunks;
    if (!ggx::tile_layout_build(h, &L, &why, false, pair_hd, pair_half)) {
        ggx_set_error("cuda: %s: tile layout: %s", t->name, why.c_str());
        return GGX_STATUS_FAILED;
    }
    if (!ggx_tile_units(L, &units, &chunks)) return GGX_STATUS_OK;   // too many tiles, steps or chunks for the descriptors
    const int W = ctx.tile_warps;
    const ggx_tile_step_plan P = ggx_tile_step_deal(L, grid, W);
    const ggx_tile_step_plan Ph = ggx_tile_step_deal(L, grid, W / 2);   // (the same tiles)

    ggx_tile_step_matrix * m = new ggx_tile_step_matrix();
    e->tile = m;
    m->K = q->K;
    m->Np = q->Np;
    m->n_chunks = (int)chunks.size();
    m->grid = grid;
    m->block0 = block0;
    m->pair_hd = L.pair_hd;
    m->pair_half = L.pair_half;
    m->warps = W;
    m->max_tiles = P.max_tiles;
    m->max_units = P.max_units;
    m->variants = ggx::tile_layout_variants(L);
    if (q->q_perm) {   // as uint16 (K <= 65536, above), copied as it is into shared memory
        uint16_t * perm16 = nullptr;
        GGX_CUDA_CHECK(cudaMalloc((void **)&perm16, (size_t)q->K * sizeof(uint16_t)));
        m->perm = perm16;
        k_perm16<<<ggx_cuda_blocks(q->K, 256), 256, 0, ctx.stream>>>(q->q_perm, q->K, perm16);
        GGX_CUDA_CHECK(cudaGetLastError());
    }
    GGX_RETURN_IF_ERR(upload(ctx, units, &m->units));
    GGX_RETURN_IF_ERR(upload(ctx, chunks, &m->chunks));
    GGX_RETURN_IF_ERR(upload(ctx, L.scales, &m->scales));
    GGX_RETURN_IF_ERR(upload(ctx, P.deal, &m->deal));
    GGX_RETURN_IF_ERR(upload(ctx, Ph.deal, &m->deal_half));
    GGX_RETURN_IF_ERR(upload(ctx, P.tile0, &m->tile0));
    const size_t n_uint4 = ggx::tile_layout_n_uint4(L);
    uint4 * words = nullptr;
    GGX_CUDA_CHECK(cudaMalloc((void **)&words, std::max<size_t>(n_uint4, 1) * 32 * sizeof(uint4)));
    m->words = words;
    const int4 * d_info = nullptr;   // (the gather's alone: freed below)
    GGX_RETURN_IF_ERR(upload(ctx, ggx_tile_step_info(L), &d_info));
    GGX_CUDA_CHECK(ggx_cuda_tile_gather(q->q_weight, q->Np, d_info, m->units, (int)units.size(), n_uint4, words, ctx.stream, L.pair_hd,
                                        L.pair_half));
    GGX_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));   // host vectors die here
    (void)cudaFree((void *)d_info);
    return GGX_STATUS_OK;
}

// A split job (q, k, v: matrices of one x with their own outputs, tile-step.h): its RoPE pair order
// (0, 0 without RoPE, or when its mode is not rotate-half) and each matrix's share of the grid,
// by bytes (q_weight's words), every share at least one block and all of them the grid.
struct split_plan {
    bool ok = false;
    int  pair_hd = 0, pair_half = 0;
    int  grid[GGX_TILE_STAGE_MATS] = {}, block0[GGX_TILE_STAGE_MATS] = {};
};
bool job_is_split(const ggx_qgemv_job & job) {
    if (job.n_mat == 2 && job.m[0].epi == GGX_QGEMV_GLU) return false;
    bool any = job.n_mat > 1;
    for (int i = 0; i < job.n_mat; i++) any |= job.m[i].rope || job.m[i].cache != nullptr;
    return any;
}
split_plan plan_split(const ggx_cuda_ctx & ctx, const ggx_qgemv_job & job) {
    split_plan P;
    if (!ctx.step_tile || !ctx.tile_split || !job_is_split(job) || job.n_mat > GGX_TILE_STAGE_MATS) return P;
    bool rope = false;
    for (int i = 0; i < job.n_mat; i++) rope |= job.m[i].rope;
    if (rope) {   // rotate-half, and the pair order's conditions (checked here: tile_layout_build would fail the graph)
        const int hd = job.head_dim, half = job.rope.n_rot / 2;
        if (job.rope.mode != GGX_ROPE_NEOX) return P;
        for (int i = 0; i < job.n_mat; i++) {
            const ggx_qmatrix * q = (const ggx_qmatrix *)job.m[i].w->extra;
            if (job.m[i].rope && !ggx::tile_pair_order_ok(q->N, q->Np, hd, half)) return P;
        }
        P.pair_hd = hd;
        P.pair_half = half;
    }
    double bytes[GGX_TILE_STAGE_MATS] = {};
    for (int i = 0; i < job.n_mat; i++) {
        const ggx_qmatrix * q = (const ggx_qmatrix *)job.m[i].w->extra;
        bytes[i] = (double)q->qrows * q->Np;
    }
    P.ok = ggx_tile_split_shares(bytes, job.n_mat, ctx.n_sm, P.grid, P.block0);
    return P;
}

// Whether matrix w's tile copy is dealt and ordered as matrix i of plan P wants (rotated: the
// job's RoPE order; otherwise natural).
bool tile_fits(const ggx_tensor * w, const split_plan & P, int i, bool rotated) {
    const ggx_tile_step_matrix * t = tile_of(w);
    return t && t->grid == P.grid[i] && t->block0 == P.block0[i] && t->pair_hd == (rotated ? P.pair_hd : 0) &&
           t->pair_half == (rotated ? P.pair_half : 0);
}

}  // namespace

bool ggx_tile_split_shares(const double * bytes, int n, int n_sm, int * grid, int * block0) {
    if (n < 1 || n > n_sm) return false;
    double total = 0.0;
    for (int i = 0; i < n; i++) total += bytes[i];
    int left = n_sm;
    for (int i = 0; i < n; i++) {
        const int later = n - 1 - i;   // matrices still to come, one block each at least
        const int g = i + 1 == n ? left : (int)(total > 0.0 ? n_sm * bytes[i] / total + 0.5 : 1);
        grid[i] = std::max(1, std::min(g, left - later));
        block0[i] = n_sm - left;
        left -= grid[i];
    }
    return true;
}

ggx_status ggx_cuda_tile_prepare(ggx_cuda_ctx & ctx, ggx_tensor * t, const std::vector<uint16_t> & groups) {
    return tile_build(ctx, t, groups, ctx.n_sm, 0, 0, 0);
}

ggx_status ggx_cuda_tile_fit(ggx_cuda_ctx & ctx, const ggx_qgemv_job & job) {
    const split_plan P = plan_split(ctx, job);
    if (!P.ok) return GGX_STATUS_OK;
    for (int i = 0; i < job.n_mat; i++) {
        ggx_tensor * w = const_cast<ggx_tensor *>(job.m[i].w);
        if (!tile_of(w) || tile_fits(w, P, i, job.m[i].rope)) continue;   // (no copy: the layout does not take it)
        const ggx_qmatrix * q = (const ggx_qmatrix *)w->extra;
        std::vector<uint16_t> groups;
        GGX_RETURN_IF_ERR(ggx_cuda_exl2_host_groups(ctx, *q, &groups));
        ggx_cuda_tile_release((ggx_cuda_qextra *)q->backend_extra);
        const bool rot = job.m[i].rope;
        GGX_RETURN_IF_ERR(tile_build(ctx, w, groups, P.grid[i], P.block0[i], rot ? P.pair_hd : 0, rot ? P.pair_half : 0));
    }
    return GGX_STATUS_OK;
}

void ggx_cuda_tile_release(ggx_cuda_qextra * e) {
    ggx_tile_step_matrix * m = e->tile;
    if (!m) return;
    for (const void * p : {(const void *)m->words, (const void *)m->units, (const void *)m->chunks, (const void *)m->scales, (const void *)m->deal,
                           (const void *)m->deal_half, (const void *)m->tile0, (const void *)m->perm})
        (void)cudaFree((void *)p);
    delete m;
    e->tile = nullptr;
}

static ggx_strip_form form_of(const ggx_cuda_ctx & ctx) {
    ggx_strip_form f = {};
    f.ring = ctx.strip_ring;
    f.xpad = ctx.strip_xpad;
    f.depth_lo = ctx.strip_depth;
    f.prefetch = ctx.strip_prefetch;
    return f;
}

// A split job (q, k, v) as a tile step stage: every matrix's copy fitted (ggx_cuda_tile_fit),
// outputs f32 or a cache of f32 / f16 / bf16 rows, no residual.
static bool split_job_ok(const ggx_cuda_ctx & ctx, const ggx_qgemv_job & job) {
    const split_plan P = plan_split(ctx, job);
    if (!P.ok || (P.pair_hd > 0 && !job.pos)) return false;
    if (!job.pos && std::any_of(job.m, job.m + job.n_mat, [](const ggx_qgemv_job_mat & jm) { return jm.cache != nullptr; })) return false;
    for (int i = 0; i < job.n_mat; i++) {
        const ggx_qgemv_job_mat & jm = job.m[i];
        const ggx_tile_step_matrix * t = tile_of(jm.w);
        const ggx_qmatrix * q = (const ggx_qmatrix *)jm.w->extra;
        if (!tile_fits(jm.w, P, i, jm.rope) || t->warps != ctx.tile_warps || t->K != (int)job.x->ne[0] || q->N != q->Np) return false;
        if (jm.epi != GGX_QGEMV_STORE || jm.resid || !f32_or_null(jm.bias)) return false;
        if (jm.cache ? !ggx_cuda_is_ftype(jm.cache->type) || ggx_nelements(jm.cache) % q->N : !jm.out || jm.out->type != GGX_TYPE_F32)
            return false;
    }
    ggx_tile_stage S = {};
    fill_split_stage(job, &S);
    return ggx_tile_stage_smem(S) <= ctx.smem_optin;
}

bool ggx_cuda_strip_job_ok(const ggx_cuda_ctx & ctx, const ggx_qgemv_job & job) {
    if (!ctx.steps_on() || job.T != 1 || !job.x || job.x->type != GGX_TYPE_F32 || !ggx_aligned16(job.x->data)) return false;
    // norm weights are read four at a time
    if (job.norm_w && (!ggx_cuda_is_ftype(job.norm_w->type) || ((uintptr_t)job.norm_w->data & (job.norm_w->type == GGX_TYPE_F32 ? 15 : 7))))
        return false;
    if (job_is_split(job)) return ctx.step_tile && split_job_ok(ctx, job);
    const bool glu = job.n_mat == 2 && job.m[0].epi == GGX_QGEMV_GLU && job.m[1].epi == GGX_QGEMV_GLU &&
                     job.m[0].is_gate != job.m[1].is_gate;
    if (job.n_mat != 1 && !glu) return false;
    for (int i = 0; i < job.n_mat; i++) {
        const ggx_qgemv_job_mat & jm = job.m[i];
        if (jm.rope || jm.cache || !jm.out || !f32_or_null(jm.out) || !f32_or_null(jm.bias) || !f32_or_null(jm.resid)) return false;
        if (ctx.step_tile) {
            const ggx_tile_step_matrix * t = tile_of(jm.w);
            if (!t || t->grid != ctx.n_sm || t->block0 != 0 || t->pair_hd != 0 || t->warps != ctx.tile_warps || t->K != (int)job.x->ne[0])
                return false;
            continue;
        }
        const ggx_strip_matrix * s = strip_of(jm.w);
        if (!s || s->n_strips > ctx.n_sm || s->K != (int)job.x->ne[0]) return false;
        if (ggx_strip_stage_smem(job.n_mat, s->K, s->max_quads, s->max_units, form_of(ctx)) > ctx.smem_optin) return false;
    }
    if (!ctx.step_tile) return true;
    // a GLU's two matrices must share their tiles per block: the same columns (and grid, above)
    if (glu && tile_of(job.m[0].w)->Np != tile_of(job.m[1].w)->Np) return false;
    ggx_tile_stage S = {};
    fill_stage(job, &S, [](const ggx_tensor * w) { return *tile_of(w); });
    return ggx_tile_stage_smem(S) <= ctx.smem_optin;
}

ggx_status ggx_cuda_strip_run(ggx_cuda_ctx & ctx, const ggx_qgemv_job * const * jobs, int n) {
    if (n < 1 || n > GGX_STRIP_MAX_STAGES) {
        ggx_set_error("cuda: strip step of %d stages (1..%d)", n, GGX_STRIP_MAX_STAGES);
        return GGX_STATUS_FAILED;
    }
    ggx_trace_dev tr = {};
    if (ctx.trace) tr = ggx_cuda_trace_launch(ctx, std::string(ctx.step_tile ? "tile" : "strip") + " step x" + std::to_string(n));
    if (ctx.step_tile) {
        ggx_tile_step s = {};
        s.n_stages = n;
        s.counter = ctx.step_counter;
        static const int trace_stage = ggx_env_int("GGX_CUDA_TRACE_STAGE", -1);   // measurements only
        s.trace_stage = trace_stage;
        for (int i = 0; i < n; i++) {
            if (job_is_split(*jobs[i])) fill_split_stage(*jobs[i], &s.st[i]);
            else fill_stage(*jobs[i], &s.st[i], [](const ggx_tensor * w) { return *tile_of(w); });
        }
        GGX_CUDA_CHECK(ggx_cuda_tile_step(s, ctx.n_sm, ctx.stream, ctx.pdl, &tr));
    } else {
        ggx_strip_step s = {};
        s.n_stages = n;
        s.form = form_of(ctx);
        s.counter = ctx.step_counter;
        for (int i = 0; i < n; i++) fill_stage(*jobs[i], &s.st[i], [](const ggx_tensor * w) { return *strip_of(w); });
        GGX_CUDA_CHECK(ggx_cuda_strip_step(s, ctx.n_sm, ctx.stream, ctx.pdl, &tr));
    }
    ctx.strip_stages += n;
    return GGX_STATUS_OK;
}
