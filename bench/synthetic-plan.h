// The CUDA decode GEMV's launch plan of a synthetic model's one-row jobs (a layer's q/k/v, o,
// gate/up and down, and the head), computed on the host from the piece tables and cost model the
// backend uses when it prepares and launches them (qmatrix.cu, qgemv.cu). Every matrix takes the
// EXL2 layout the synthetic model gives it (exl2_layout_for_bpw of its own K x N; the head 6 bits,
// 8 above 6 bpw). The plan's knobs (GGX_QGEMV_SLICE_COST, GGX_QGEMV_PIECE_COSTS, ...) act as in
// the backend. Used by bench/plan-report.cpp and the decode plan tests. CUDA builds only.
#pragma once

#include "backends/cuda/decode-plan.h"
#include "exl2/quant/synthetic.h"
#include "exl2/synthetic-model.h"
#include "ggx/ggx.h"

#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace exl2 {

struct SyntheticPlanJob {
    const char * label;    // "q/k/v", "o", "gate/up", "down", "head"
    int          m;        // fine slices per warp group
    int          blocks;
    std::string  layouts;  // the matrices' EXL2 layouts, distinct ones joined by "; "
};

inline std::vector<SyntheticPlanJob> synthetic_plan(const SyntheticSpec & sp, double bpw, int n_sm) {
    // EXL2 matrices with the tables qmatrix.cu would build for them (no weights, no device memory)
    struct Arena {
        ggx_context *                    ctx = ggx_context_new();
        std::deque<ggx_cuda_plan_matrix> mats;   // stable addresses: the tensors point at them
        ~Arena() { ggx_context_free(ctx); }
    } arena;
    const int D = sp.n_embd, Dq = sp.n_head * sp.head_dim, Dkv = sp.n_head_kv * sp.head_dim, F = sp.n_ff;
    struct Spec {
        const char * label;
        std::vector<std::pair<const char *, std::pair<int, int>>> mats;   // name, {K, N}
        bool head;
        bool add = false;   // adds the residual in place, as the graph's o and down do
    };
    const Spec jobs[] = {
        {"q/k/v", {{"blk.0.self_attn.q_proj", {D, Dq}}, {"blk.0.self_attn.k_proj", {D, Dkv}}, {"blk.0.self_attn.v_proj", {D, Dkv}}}, false},
        {"o", {{"blk.0.self_attn.o_proj", {Dq, D}}}, false, true},
        {"gate/up", {{"blk.0.mlp.gate_proj", {D, F}}, {"blk.0.mlp.up_proj", {D, F}}}, false},
        {"down", {{"blk.0.mlp.down_proj", {F, D}}}, false, true},
        {"head", {{"lm_head", {D, sp.n_vocab}}}, true},
    };
    std::vector<SyntheticPlanJob> out;
    std::vector<ggx_qgemv_job> built;
    for (const Spec & js : jobs) {
        ggx_qgemv_job job;
        job.T = 1;
        std::string layouts;
        for (const auto & mm : js.mats) {
            const int K = mm.second.first, N = mm.second.second;
            const BitLayout L = exl2_layout_for_bpw(js.head ? (bpw > 6.0 ? 8.0 : 6.0) : bpw, K, N);
            if (layouts.find(L.name) == std::string::npos) layouts += (layouts.empty() ? "" : "; ") + L.name;
            ggx_cuda_plan_matrix & p = arena.mats.emplace_back();
            const std::vector<std::pair<int, int>> groups = exl2_layout_groups(L, K);
            ggx_cuda_plan_matrix_init(p, K, N, &groups);
            ggx_tensor * t = ggx_new_tensor_2d(arena.ctx, GGX_TYPE_EXL2, K, N);
            ggx_set_name(t, mm.first);   // GGX_QGEMV_ROWS_FOR matches these
            t->extra = &p.q;
            ggx_qgemv_job_mat & jm = job.m[job.n_mat++];
            jm.w = t;
            if (js.add) {   // y is the residual's memory (no data needed: the plan compares addresses)
                ggx_tensor * y = ggx_new_tensor_2d(arena.ctx, GGX_TYPE_F32, N, 1);
                y->data = &arena;
                jm.epi = GGX_QGEMV_ADD;
                jm.out = y;
                jm.resid = y;
            }
        }
        built.push_back(job);
        out.push_back({js.label, 0, 0, layouts});
    }
    // each job's successor as the graph runs them: o -> gate/up, down -> the next layer's q/k/v
    for (size_t j = 0; j + 1 < built.size(); j++) {
        const bool down = std::string(jobs[j].label) == "down";
        built[j].next_weight_bytes = ggx_cuda_qgemv_weight_bytes(built[down ? 0 : j + 1]);
    }
    for (size_t j = 0; j < built.size(); j++) {
        out[j].m = ggx_cuda_qgemv_group_slices(built[j], n_sm);
        out[j].blocks = ggx_cuda_qgemv_blocks(built[j], out[j].m);
    }
    return out;
}

}  // namespace exl2
