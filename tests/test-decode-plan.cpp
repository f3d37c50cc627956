// The CUDA backend's decode fusion plan (backends/cuda/fusion.cu) on Llama-shaped decode graphs.
// The plan is host code: it reads only tensor metadata and the addresses the planner assigned,
// so it is checked here without a GPU, on EXL2 tensors that look prepared (their tables are
// never read). Built when the CUDA backend is (GGX_USE_CUDA).
#if defined(GGX_USE_CUDA)

#include "backends/cuda/decode-plan.h"
#include "backends/cuda/env-knobs.h"
#include "bench/synthetic-plan.h"
#include "exl2/quant/synthetic.h"
#include "tests/scoped-env.h"
#include "ggx/ggx-backend.h"
#include "ggx/ggx.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

struct DecodeGraph {
    ggx_context * ctx = ggx_context_new();
    ggx_graph * g = nullptr;
    std::vector<std::unique_ptr<ggx_cuda_plan_matrix>> mats;   // EXL2 matrices as qmatrix_prepare leaves them, without data
    std::vector<std::vector<uint8_t>> leaf_data;   // weights, caches: memory the planner does not own
    std::vector<uint8_t> arena;                    // the planned compute buffer
    ggx_tensor * logits = nullptr;
    std::vector<ggx_tensor *> k_cache, v_cache;
    ~DecodeGraph() { ggx_context_free(ctx); }

    ggx_tensor * weight(ggx_type type, int64_t ne0, int64_t ne1 = 1) {
        ggx_tensor * t = ggx_new_tensor_2d(ctx, type, ne0, ne1);
        leaf_data.emplace_back(ggx_nbytes(t) + 16);
        t->data = leaf_data.back().data();
        t->flags |= GGX_FLAG_WEIGHT;
        return t;
    }
    ggx_tensor * exl2(int K, int N) {
        auto m = std::make_unique<ggx_cuda_plan_matrix>();
        ggx_cuda_plan_matrix_init(*m, K, N, nullptr);
        m->q.qrows = K / 8;   // as if 4-bit: the plan's weight bytes (qrows x Np words)
        ggx_tensor * t = ggx_new_tensor_2d(ctx, GGX_TYPE_EXL2, K, N);
        leaf_data.emplace_back(16);
        t->data = leaf_data.back().data();
        t->extra = &m->q;
        t->flags |= GGX_FLAG_WEIGHT;
        mats.push_back(std::move(m));
        return t;
    }
    // A one-row decode GEMV job over new EXL2 matrices of these {K, N}, nothing else set.
    ggx_qgemv_job gemv_job(std::initializer_list<std::pair<int, int>> kn) {
        ggx_qgemv_job j;
        j.n_mat = 0;
        j.T = 1;
        for (const auto & p : kn) j.m[j.n_mat++].w = exl2(p.first, p.second);
        return j;
    }
    ggx_tensor * input(ggx_type type, int64_t ne0, int64_t ne1 = 1) {
        ggx_tensor * t = ggx_new_tensor_2d(ctx, type, ne0, ne1);
        t->flags |= GGX_FLAG_INPUT;
        return t;
    }

    // Llama decoder (D = 256, 4 heads of 64, 2 KV heads, FFN 512) over T tokens, n_layer layers,
    // caches of C = 64 rows of cache_type, attention with this softcap.
    std::vector<ggx_tensor *> attn;
    void build(int T, int n_layer, ggx_type cache_type = GGX_TYPE_F16, float softcap = 0.0f) {
        const int D = 256, hd = 64, H = 4, Hkv = 2, F = 512, V = 1000, C = 64;
        ggx_tensor * ids = input(GGX_TYPE_I32, T);
        ggx_tensor * pos = input(GGX_TYPE_I32, T);
        ggx_tensor * x = ggx_get_rows(ctx, weight(GGX_TYPE_F16, D, V), ids);
        ggx_params_rope rp = {};
        rp.n_rot = hd;
        rp.mode = GGX_ROPE_NEOX;
        rp.theta = 10000.0f;
        rp.pos_scale = 1.0f;
        rp.attn_factor = 1.0f;
        ggx_params_attn ap = {};
        ap.scale = 0.125f;
        ap.softcap = softcap;
        for (int il = 0; il < n_layer; il++) {
            k_cache.push_back(weight(cache_type, hd * Hkv, C));
            v_cache.push_back(weight(cache_type, hd * Hkv, C));
            ggx_tensor * h = ggx_rms_norm(ctx, x, weight(GGX_TYPE_F16, D), 1e-5f);
            ggx_tensor * q = ggx_mul_mat(ctx, exl2(D, hd * H), h);
            ggx_tensor * k = ggx_mul_mat(ctx, exl2(D, hd * Hkv), h);
            ggx_tensor * v = ggx_mul_mat(ctx, exl2(D, hd * Hkv), h);
            q = ggx_rope(ctx, ggx_reshape_3d(ctx, q, hd, H, T), pos, nullptr, rp);
            k = ggx_rope(ctx, ggx_reshape_3d(ctx, k, hd, Hkv, T), pos, nullptr, rp);
            ggx_tensor * kc = ggx_kv_store(ctx, ggx_reshape_2d(ctx, k, hd * Hkv, T), k_cache.back(), pos);
            ggx_tensor * vc = ggx_kv_store(ctx, v, v_cache.back(), pos);
            ggx_tensor * a = ggx_attn(ctx, q, ggx_reshape_3d(ctx, kc, hd, Hkv, C), ggx_reshape_3d(ctx, vc, hd, Hkv, C), pos, ap);
            attn.push_back(a);
            x = ggx_add(ctx, x, ggx_mul_mat(ctx, exl2(hd * H, D), ggx_reshape_2d(ctx, a, hd * H, T)));
            h = ggx_rms_norm(ctx, x, weight(GGX_TYPE_F16, D), 1e-5f);
            ggx_tensor * gu = ggx_glu(ctx, ggx_mul_mat(ctx, exl2(D, F), h), ggx_mul_mat(ctx, exl2(D, F), h), GGX_ACT_SILU);
            x = ggx_add(ctx, x, ggx_mul_mat(ctx, exl2(F, D), gu));
        }
        logits = ggx_mul_mat(ctx, exl2(D, V), ggx_rms_norm(ctx, x, weight(GGX_TYPE_F16, D), 1e-5f));
        logits->flags |= GGX_FLAG_OUTPUT;
        g = ggx_graph_new(ctx);
        ggx_graph_build(g, logits);
        arena.resize(ggx_graph_plan(g, 256) + 256);
        ggx_graph_bind(g, arena.data());
    }

    int count(const ggx_cuda_plan & p, int action) const {
        int n = 0;
        for (int a : p.action) n += a == action;
        return n;
    }
    int node_index(const ggx_tensor * t) const {
        for (int i = 0; i < ggx_graph_n_nodes(g); i++)
            if (ggx_graph_node(g, i) == t) return i;
        return -1;
    }
};

}  // namespace

TEST_CASE("decode plan: a Llama layer becomes four fused GEMV jobs and attention, the head one more job") {
    DecodeGraph G;
    G.build(1, 2);
    ggx_cuda_plan p;
    ggx_cuda_plan_graph(true, G.g, p);
    REQUIRE(p.jobs.size() == 2 * 4 + 1);
    // nothing but attention, the embedding lookup and views runs on its own
    for (int i = 0; i < ggx_graph_n_nodes(G.g); i++) {
        const ggx_tensor * n = ggx_graph_node(G.g, i);
        if (n->op == GGX_OP_ATTN || n->op == GGX_OP_GET_ROWS || n->op == GGX_OP_NONE) continue;
        CHECK_MESSAGE(p.action[i] != ggx_cuda_plan::RUN, "node " << i << " op " << ggx_op_name(n->op) << " runs unfused");
    }
    for (int il = 0; il < 2; il++) {
        const ggx_qgemv_job & qkv = p.jobs[4 * il];
        CHECK(qkv.n_mat == 3);
        CHECK(qkv.norm);
        CHECK(qkv.head_dim == 64);
        CHECK((qkv.m[0].rope && !qkv.m[0].cache && qkv.m[0].out->op == GGX_OP_ROPE));
        CHECK((qkv.m[1].rope && qkv.m[1].cache == G.k_cache[il]));
        CHECK((!qkv.m[2].rope && qkv.m[2].cache == G.v_cache[il]));
        const ggx_qgemv_job & o = p.jobs[4 * il + 1];
        CHECK((o.n_mat == 1 && !o.norm && o.m[0].epi == GGX_QGEMV_ADD && o.m[0].out->op == GGX_OP_ADD));
        const ggx_qgemv_job & ffn = p.jobs[4 * il + 2];
        CHECK((ffn.n_mat == 2 && ffn.norm && ffn.m[0].epi == GGX_QGEMV_GLU && ffn.m[1].epi == GGX_QGEMV_GLU));
        CHECK((ffn.m[0].pair == 1 && ffn.m[1].pair == 0 && ffn.m[0].is_gate && !ffn.m[1].is_gate));
        CHECK(ffn.m[0].out->op == GGX_OP_GLU);
        const ggx_qgemv_job & down = p.jobs[4 * il + 3];
        CHECK((down.n_mat == 1 && down.m[0].epi == GGX_QGEMV_ADD));
        // the residual adds update the residual stream in place (the planner: one buffer fewer)
        CHECK(down.m[0].out->data == down.m[0].resid->data);
        if (il > 0) CHECK(o.m[0].out->data == o.m[0].resid->data);
    }
    const ggx_qgemv_job & head = p.jobs.back();
    CHECK((head.n_mat == 1 && head.norm && head.m[0].epi == GGX_QGEMV_STORE && head.m[0].out == G.logits));
    // each job knows its successor's weight bytes (o: gate/up's two 256 x 512 4-bit matrices), but
    // for the head's predecessor and the head
    for (size_t j = 0; j + 2 < p.jobs.size(); j++) CHECK(p.jobs[j].next_weight_bytes == ggx_cuda_qgemv_weight_bytes(p.jobs[j + 1]));
    CHECK(p.jobs[1].next_weight_bytes == 2 * (256 / 8) * 512 * 4);
    CHECK(p.jobs[p.jobs.size() - 2].next_weight_bytes == 0);
    CHECK(head.next_weight_bytes == 0);
    CHECK(ggx_cuda_qgemv_reduces(p.jobs[5]));   // the second layer's o: in place
    CHECK(ggx_cuda_qgemv_reduces(p.jobs[7]));   // its down
    CHECK_FALSE(ggx_cuda_qgemv_reduces(p.jobs[6]));
}

// An int4 set member by member (HIP's int4 members are proxies, not plain fields)
static int4 i4(int x, int y, int z, int w) {
    int4 r;
    r.x = x; r.y = y; r.z = z; r.w = w;
    return r;
}

// The launch shape of the decode GEMV (qgemv.cu's cost model, host code) for the real shapes the
// decode notes discuss, at the H200's 132 SMs: llama3-8b's q/k/v at 3 fine slices per warp group
// (132 blocks), o 2, gate/up 16 (112 blocks), down 7, the head 32; llama3.2-1b's q/k/v and o at 1.
TEST_CASE("decode plan: fine slices per warp group of the decode GEMV at 132 SMs") {
    DecodeGraph G;
    auto job = [&](std::initializer_list<std::pair<int, int>> mats) { return G.gemv_job(mats); };
    struct Case {
        const char * name;
        ggx_qgemv_job job;
        int m;
    };
    const Case cases[] = {
        {"llama3-8b q/k/v", job({{4096, 4096}, {4096, 1024}, {4096, 1024}}), 3},
        {"llama3-8b o", job({{4096, 4096}}), 2},
        {"llama3-8b gate/up", job({{4096, 14336}, {4096, 14336}}), 16},
        {"llama3-8b down", job({{14336, 4096}}), 7},
        {"llama3-8b head", job({{4096, 128256}}), 32},
        {"llama3.2-1b q/k/v", job({{2048, 2048}, {2048, 512}, {2048, 512}}), 1},
        {"llama3.2-1b o", job({{2048, 2048}}), 1},
        {"llama3.2-1b gate/up", job({{2048, 8192}, {2048, 8192}}), 4},
        {"llama3.2-1b down", job({{8192, 2048}}), 2},
        {"qwen2.5-7b q/k/v", job({{3584, 3584}, {3584, 512}, {3584, 512}}), 2},
        {"qwen2.5-7b o", job({{3584, 3584}}), 2},
        {"qwen2.5-7b gate/up", job({{3584, 18944}, {3584, 18944}}), 10},
        {"qwen2.5-7b down", job({{18944, 3584}}), 9},
    };
    constexpr size_t n_cases = sizeof cases / sizeof cases[0];
    auto check_plans = [&](const int (&want)[n_cases]) {   // each case's m under the knobs set now
        for (size_t i = 0; i < n_cases; i++) {
            CAPTURE(cases[i].name);
            CHECK(ggx_cuda_qgemv_group_slices(cases[i].job, 132) == want[i]);
        }
    };
    for (const Case & c : cases) {
        CAPTURE(c.name);
        CHECK(ggx_cuda_qgemv_group_slices(c.job, 132) == c.m);
    }
    // GGX_QGEMV_SLICE_COST adds a cost per K-slice of a column tile: at 8 rows llama3-8b's o takes
    // 11 slices (m = 3: 88 blocks, 326 + 88 against 294 + 128 for m = 2) and its other jobs keep
    // their plan; llama3.2-1b's q/k/v and o take m = 2, its down m = 4 (16 slices, 64 blocks)
    {
        const ScopedEnv slice_cost("GGX_QGEMV_SLICE_COST", "8");
        check_plans({3, 3, 16, 7, 32, 2, 2, 4, 4, 2, 2, 10, 9});
    }
    // At 12 rows per slice, with 16 rows per block for an odd m of a one-row job (no paired
    // tables): llama3-8b's q/k/v and o take m = 4, down 8 (7 without the odd cost), and
    // llama3.2-1b's down keeps 4 (5 without: 390 + 13 x 12 = 546 against 358 + 16 x 12 = 550)
    {
        const ScopedEnv slice_cost("GGX_QGEMV_SLICE_COST", "12");
        CHECK(ggx_cuda_qgemv_group_slices(cases[3].job, 132) == 7);
        CHECK(ggx_cuda_qgemv_group_slices(cases[8].job, 132) == 5);
        const ScopedEnv odd_cost("GGX_QGEMV_ODD_COST", "16");
        check_plans({4, 4, 16, 8, 32, 2, 2, 4, 4, 4, 4, 10, 10});
    }
    // Piece costs (ggx_cuda_qgemv_run_costs) of real EXL2 layouts, as the synthetic models use them
    auto set_layout = [&](const char * layout) {
        const exl2::BitLayout L = exl2::exl2_layout_parse(layout);
        for (const Case & c : cases)
            for (int i = 0; i < c.job.n_mat; i++) {
                const ggx_qmatrix * q = (const ggx_qmatrix *)c.job.m[i].w->extra;
                ggx_cuda_layout_run_costs(exl2::exl2_layout_groups(L, q->K), q->K, ggx_cuda_qextra_of(c.job.m[i].w)->run_cost);
            }
    };
    // All 4-bit, a 32-row piece costs 46 rows against 63 for a 64-row one: llama3-8b's q/k/v take
    // m = 4 and down 8, qwen2.5-7b's down 10; with the cost per K-slice of a tile (4), llama3.2-1b's
    // q/k/v and o take one 64-row piece per warp group (m = 2: 63 + 8 x 4 against 46 + 16 x 4) and
    // its down m = 4; the other even plans stay
    const int rows_only[n_cases] = {3, 2, 16, 7, 32, 1, 1, 4, 2, 2, 2, 10, 9};
    set_layout("4 g128");
    check_plans({4, 2, 16, 8, 32, 2, 2, 4, 4, 2, 2, 10, 10});
    {
        const ScopedEnv no_slice_cost("GGX_QGEMV_SLICE_COST", "0");   // pieces only: llama3.2-1b stays
        check_plans({4, 2, 16, 8, 32, 1, 1, 4, 2, 2, 2, 10, 10});
    }
    {
        const ScopedEnv off("GGX_QGEMV_PIECE_COSTS", "0");   // every row costs one
        check_plans(rows_only);
    }
    {
        const ScopedEnv off("GGX_QGEMV_PAIRS", "0");   // no 64-row pieces: no reason to move
        check_plans(rows_only);
    }
    // Elsewhere the plans of rows: 3- and 2-bit rows (4/3: pairs joined but no cheaper; 6/3/2: its
    // groups start at odd fine slices, none joined), 5-8 bits, and the mixed layouts whose runs of
    // 32-row pieces (8-bit, or 4-bit groups behind 224 rows of 8 bits: every other pair split) are the
    // slowest for an even m as for an odd one; there two 32-row pieces cost 46 more than one, more
    // than the 8 slices saved (run 156: llama3.2-1b at m = 2 lost 2-8% at 2.5, 5.0 and 8.0 bpw)
    for (const char * layout : {"4/3 g128 .1/.9", "6/3/2 g32,64,64 .05/.2/.75", "5/4 g128 .1/.9", "8/4 g32,128 .05/.95",
                                "8/5/4 g32 .05/.1/.85", "8/4/3 g32 .05/.1/.85", "5 g64", "6 g128", "8 g128"}) {
        CAPTURE(std::string(layout));
        set_layout(layout);
        check_plans(rows_only);
    }
    for (const Case & c : cases)
        for (int i = 0; i < c.job.n_mat; i++) ggx_cuda_qextra_of(c.job.m[i].w)->run_cost[0][1] = 0;
    // GGX_QGEMV_ROWS_FOR forces the rows per warp group of the jobs whose first matrix's name
    // contains an entry's name; the others keep their plan (the fixture made the matrices: naming
    // them here changes nothing else)
    ggx_set_name(const_cast<ggx_tensor *>(cases[1].job.m[0].w), "blk.3.self_attn.o_proj");
    ggx_set_name(const_cast<ggx_tensor *>(cases[3].job.m[0].w), "blk.3.mlp.down_proj");
    {
        const ScopedEnv rows_for("GGX_QGEMV_ROWS_FOR", "o_proj:128");
        CHECK(ggx_cuda_qgemv_group_slices(cases[1].job, 132) == 4);
        CHECK(ggx_cuda_qgemv_group_slices(cases[3].job, 132) == 7);
    }
    {
        const ScopedEnv rows_for("GGX_QGEMV_ROWS_FOR", "gate:64,down_proj:96");
        CHECK(ggx_cuda_qgemv_group_slices(cases[1].job, 132) == 2);
        CHECK(ggx_cuda_qgemv_group_slices(cases[3].job, 132) == 3);
    }
    // GGX_QGEMV_GROUP_ROWS forces the rows per warp group of every job (in fine slices of 32 rows)
    const ScopedEnv rows("GGX_QGEMV_GROUP_ROWS", "128");
    CHECK(ggx_cuda_qgemv_group_slices(cases[0].job, 132) == 4);
    const ScopedEnv rows_for("GGX_QGEMV_ROWS_FOR", "o_proj:64");
    CHECK(ggx_cuda_qgemv_group_slices(cases[1].job, 132) == 4);
}

// Every synthetic model and width, each matrix in the layout the synthetic model gives it
// (bench/synthetic-plan.h), planned as the environment stands and with `env` set (the names and
// values of the knobs): f(name, bpw, job label, m as planned, m with env, blocks as planned, blocks
// with env) per job. Returns the jobs whose m differs.
template <class F>
int plans_moved(std::initializer_list<std::pair<const char *, const char *>> env, F f) {
    int moved = 0;
    for (const exl2::SyntheticSpec & sp : exl2::synthetic_specs())
        for (double bpw : {2.5, 3.0, 3.5, 4.0, 4.25, 4.5, 5.0, 6.0, 8.0}) {
            const std::vector<exl2::SyntheticPlanJob> planned = exl2::synthetic_plan(sp, bpw, 132);
            std::vector<exl2::SyntheticPlanJob> other;
            {
                std::vector<std::unique_ptr<ScopedEnv>> set;
                for (const auto & e : env) set.push_back(std::make_unique<ScopedEnv>(e.first, e.second));
                other = exl2::synthetic_plan(sp, bpw, 132);
            }
            REQUIRE(planned.size() == other.size());
            for (size_t i = 0; i < planned.size(); i++) {
                CAPTURE(sp.name);
                CAPTURE(bpw);
                CAPTURE(planned[i].label);
                f(std::string(sp.name), bpw, std::string(planned[i].label), planned[i].m, other[i].m, planned[i].blocks, other[i].blocks);
                moved += planned[i].m != other[i].m;
            }
        }
    return moved;
}

// The cost per K-slice of a tile (qgemv.cu, default 4) on every synthetic model and width (the case
// above uses one layout per width for all shapes): it moves llama3.2-1b 4.0 bpw's q/k/v and o to
// one 64-row piece per warp group and its down to m = 4, the plan run 156 measured at +2.2%, and
// nothing else (at 2.5, 5.0 and 8.0 the same move lost 2-8%; no other model's plans were measured
// with it).
TEST_CASE("decode plan: the cost per K-slice moves only llama3.2-1b 4.0's plans, on every synthetic model") {
    const ScopedEnv red_cost("GGX_QGEMV_RED_SLICE_COST", "4");   // o and down as the other jobs (the next case)
    const int moved = plans_moved({{"GGX_QGEMV_SLICE_COST", "0"}, {"GGX_QGEMV_RED_SLICE_COST", "0"}},
                                  [](const std::string & name, double bpw, const std::string & job, int m, int m_without, int, int) {
                                      const bool one_b4 = name == "llama3.2-1b" && bpw == 4.0;
                                      const bool expect = one_b4 && (job == "q/k/v" || job == "o" || job == "down");
                                      CHECK((m != m_without) == expect);
                                      if (one_b4 && (job == "q/k/v" || job == "o")) CHECK(m == 2);
                                      if (one_b4 && job == "down") CHECK(m == 4);
                                  });
    CHECK(moved == 3);
}

// o and down add their K-slices into the residual (qgemv.cu: ggx_cuda_qgemv_reduces); before a job
// of at least 48 MB of weights they pay 8 per K-slice instead of 4 (fewer blocks, more SMs for that
// job's first blocks). Among the synthetic models that moves only llama3-8b's and mistral-7b's o at
// 4.0 bpw (before a 58.7 MB gate/up) to 8 K-slices, 64 blocks: run 180 measured +2.5% on both,
// where the same cost for llama3.2-1b's o and down (next jobs of 3-34 MB) lost 7-9%.
TEST_CASE("decode plan: o before a large gate/up takes fewer K-slices only where measured") {
    const int moved = plans_moved({{"GGX_QGEMV_RED_SLICE_COST", "4"}},
                                  [](const std::string & name, double bpw, const std::string & job, int m, int m_flat, int blocks, int blocks_flat) {
                                      const bool expect = (name == "llama3-8b" || name == "mistral-7b") && bpw == 4.0 && job == "o";
                                      CHECK((m != m_flat) == expect);
                                      if (expect) CHECK((m == 4 && blocks == 64 && blocks_flat == 128));
                                  });
    CHECK(moved == 2);
}

TEST_CASE("decode plan: without fusion every node runs as it is") {
    DecodeGraph G;
    G.build(3, 1);
    ggx_cuda_plan p;
    ggx_cuda_plan_graph(false, G.g, p);
    CHECK(p.jobs.empty());
    CHECK(G.count(p, ggx_cuda_plan::RUN) == ggx_graph_n_nodes(G.g));
}

TEST_CASE("decode plan: prompts longer than 8 tokens are not decode work") {
    DecodeGraph G;
    G.build(9, 1);
    ggx_cuda_plan p;
    ggx_cuda_plan_graph(true, G.g, p);
    CHECK(p.jobs.empty());
    // the two residual adds each compute the norm after them (those norms are skipped)
    CHECK(G.count(p, ggx_cuda_plan::SKIP) == 2);
    for (int i = 0; i < ggx_graph_n_nodes(G.g); i++)
        if (p.add_norm[i] >= 0) {
            CHECK(ggx_graph_node(G.g, i)->op == GGX_OP_ADD);
            CHECK(ggx_graph_node(G.g, p.add_norm[i])->op == GGX_OP_RMS_NORM);
            CHECK(p.action[p.add_norm[i]] == ggx_cuda_plan::SKIP);
        }
    // the producers that write the prefill matmuls' fp16 x: the attention norm (q's reshape and
    // RoPE run between its readers: they leave the fp16 x alone), the attention (for the o
    // matmul, through its reshape), the FFN norm, the GLU and the final norm
    std::vector<ggx_op> producers;
    std::string seen;
    for (int i = 0; i < ggx_graph_n_nodes(G.g); i++)
        if (p.x16_out[i]) {
            const ggx_tensor * t = ggx_graph_node(G.g, i);
            CHECK((p.x16_out[i] == t || (t->op == GGX_OP_ATTN && p.x16_out[i]->view_src == t)));
            producers.push_back(t->op);
            seen += std::string(ggx_op_name(t->op)) + " ";
        }
#if defined(GGX_USE_HIP)
    // HIP's prefill attention is the SIMT kernel, which writes fp32 only (attn-common.cuh)
    const std::vector<ggx_op> expected = {GGX_OP_RMS_NORM, GGX_OP_RMS_NORM, GGX_OP_GLU, GGX_OP_RMS_NORM};
#else
    const std::vector<ggx_op> expected = {GGX_OP_RMS_NORM, GGX_OP_ATTN, GGX_OP_RMS_NORM, GGX_OP_GLU, GGX_OP_RMS_NORM};
#endif
    CHECK_MESSAGE(producers == expected, seen);
    // without fusion, none
    ggx_cuda_plan q;
    ggx_cuda_plan_graph(false, G.g, q);
    for (const ggx_tensor * t : q.x16_out) CHECK(t == nullptr);
    for (int f : q.add_norm) CHECK(f == -1);
}

TEST_CASE("decode plan: a residual computed after the matmul is not added early") {
    // y = W x + s(x2) where s(x2) is a node after the matmul: the add must stay where it is
    DecodeGraph G;
    ggx_tensor * x = G.input(GGX_TYPE_F32, 256);
    ggx_tensor * x2 = G.input(GGX_TYPE_F32, 128);
    ggx_tensor * mm = ggx_mul_mat(G.ctx, G.exl2(256, 128), x);
    ggx_tensor * s = ggx_scale(G.ctx, x2, 2.0f);
    ggx_tensor * y = ggx_add(G.ctx, mm, s);
    y->flags |= GGX_FLAG_OUTPUT;
    G.g = ggx_graph_new(G.ctx);
    ggx_graph_build(G.g, y);
    G.arena.resize(ggx_graph_plan(G.g, 256) + 256);
    ggx_graph_bind(G.g, G.arena.data());
    REQUIRE(G.node_index(mm) < G.node_index(s));
    ggx_cuda_plan p;
    ggx_cuda_plan_graph(true, G.g, p);
    REQUIRE(p.jobs.size() == 1);
    CHECK(p.jobs[0].m[0].epi == GGX_QGEMV_STORE);
    CHECK(p.jobs[0].m[0].out == mm);
    CHECK(p.action[G.node_index(y)] == ggx_cuda_plan::RUN);
}

TEST_CASE("decode plan: a matmul result read twice keeps its own output") {
    DecodeGraph G;
    ggx_tensor * x = G.input(GGX_TYPE_F32, 256, 2);
    ggx_tensor * r = G.input(GGX_TYPE_F32, 128, 2);
    ggx_tensor * mm = ggx_mul_mat(G.ctx, G.exl2(256, 128), x);
    ggx_tensor * y = ggx_add(G.ctx, ggx_add(G.ctx, r, mm), ggx_scale(G.ctx, mm, 0.5f));
    y->flags |= GGX_FLAG_OUTPUT;
    G.g = ggx_graph_new(G.ctx);
    ggx_graph_build(G.g, y);
    G.arena.resize(ggx_graph_plan(G.g, 256) + 256);
    ggx_graph_bind(G.g, G.arena.data());
    ggx_cuda_plan p;
    ggx_cuda_plan_graph(true, G.g, p);
    REQUIRE(p.jobs.size() == 1);
    CHECK(p.jobs[0].T == 2);
    CHECK(p.jobs[0].m[0].out == mm);
    CHECK(G.count(p, ggx_cuda_plan::SKIP) == 0);
}

// The tile step's split stage shares (q, k, v on their own blocks): by bytes, every matrix at
// least one block, contiguous, the whole grid.
TEST_CASE("decode plan: split stage shares of the grid") {
    struct Case {
        std::vector<double> bytes;
        int n_sm;
        std::vector<int> grid;
    };
    const Case cases[] = {
        {{4, 1, 1}, 132, {88, 22, 22}},        // llama3-8b q, k, v
        {{7, 1, 1}, 132, {103, 15, 14}},       // qwen2.5-7b
        {{1000, 1, 1}, 132, {130, 1, 1}},      // every share at least one block
        {{1, 1, 1}, 3, {1, 1, 1}},
        {{1, 1000, 1}, 3, {1, 1, 1}},
        {{5}, 16, {16}},
        {{0, 0}, 8, {1, 7}},                   // (no bytes: the last takes the rest)
    };
    for (const Case & c : cases) {
        CAPTURE(c.n_sm);
        CAPTURE(c.bytes[0]);
        const int n = (int)c.bytes.size();
        int grid[3] = {}, block0[3] = {};
        REQUIRE(ggx_tile_split_shares(c.bytes.data(), n, c.n_sm, grid, block0));
        int next = 0;
        for (int i = 0; i < n; i++) {
            CHECK(grid[i] == c.grid[i]);
            CHECK(block0[i] == next);
            next += grid[i];
        }
        CHECK(next == c.n_sm);
    }
    int grid[3], block0[3];
    const double bytes[3] = {1, 1, 1};
    CHECK_FALSE(ggx_tile_split_shares(bytes, 3, 2, grid, block0));   // more matrices than blocks
    CHECK_FALSE(ggx_tile_split_shares(bytes, 0, 2, grid, block0));
}

// The paired piece tables (ggx_cuda_qextra::pieces2) against the plain ones: pair j, with its
// 64-row pieces cut back into 32-row halves, must be exactly slices 2j and 2j + 1 of the plain
// table, in order: the one-row GEMV's two-halves sum relies on it (same sums, same order).
TEST_CASE("decode plan: paired piece tables are the plain ones with 2-4-bit pieces joined across each pair") {
    struct Layout { std::vector<std::pair<int, int>> groups; };   // (bits, rows) in order
    const Layout layouts[] = {
        {{{4, 128}, {4, 128}, {4, 128}, {4, 128}}},                          // all 4-bit, groups of 128
        {{{4, 32}, {4, 32}, {4, 64}, {4, 96}, {4, 32}}},                     // groups of 32..96: pairs across groups
        {{{8, 32}, {6, 64}, {5, 32}, {4, 128}, {3, 64}, {2, 64}}},           // every width
        {{{4, 64}, {2, 48}, {4, 96}, {2, 16}, {2, 32}}},                     // 2-bit groups of 16: 4-bit off the pairs' grid
        {{{4, 96}, {3, 32}}},                                                // K = 128 = two whole pairs
        {{{4, 160}}},                                                        // K = 160: an odd number of slices
        {{{3, 96}, {2, 128}, {2, 16}, {2, 48}}},                            // 3 and 2 bits only
        {{{8, 32}, {8, 32}, {8, 32}, {4, 128}, {4, 128}, {4, 32}, {4, 32}}}, // 4-bit groups at odd slices (as 8/4 g32,128)
        {{{2, 64}, {6, 32}, {2, 64}, {2, 64}}},                              // 2-bit groups at odd slices (as 6/3/2)
    };
    const int joins[] = {1 << 4, (1 << 2) | (1 << 3) | (1 << 4), 1 << 3, 0};
    for (const Layout & L : layouts)
    for (int join : joins)
    for (int across : {0, 1 << 2, (1 << 2) | (1 << 3) | (1 << 4)}) {   // widths that may join two groups
        const std::vector<int4> gtab = ggx_cuda_group_table(L.groups);
        const int k = gtab.back().x + gtab.back().w;
        std::vector<int4> plain, paired;
        std::vector<int> pf, qf;
        ggx_cuda_list_pieces(gtab, k, false, 0, 0, &plain, &pf);
        ggx_cuda_list_pieces(gtab, k, true, join, across, &paired, &qf);
        const int n_slices = (k + 31) / 32;
        REQUIRE(pf.size() == (size_t)n_slices + 1);
        REQUIRE(qf.size() == (size_t)(n_slices + 1) / 2 + 1);
        CHECK(pf.back() == (int)plain.size());
        CHECK(qf.back() == (int)paired.size());
        int joined = 0, joined_across = 0;
        for (int j = 0; 2 * j < n_slices; j++) {
            std::vector<int4> want(plain.begin() + pf[2 * j], plain.begin() + pf[std::min(2 * j + 2, n_slices)]);
            std::vector<int4> got;
            for (int p = qf[j]; p < qf[j + 1]; p++) {
                const int4 a = paired[p];
                if (a.w > 32) {
                    const int bits = a.z & 15, g = a.z >> 5, next = (a.z & 16) ? 1 : 0;
                    REQUIRE((int)a.w == 64);
                    CHECK((join >> bits & 1) == 1);
                    CHECK(bits <= 4);
                    CHECK((int)a.x == 64 * j);   // a whole pair
                    CHECK((!next || (across >> bits & 1)));
                    // the halves as the plain table has them: 32 rows of `bits` are `bits` words,
                    // and an across piece's second half is the next group's
                    got.push_back(i4(a.x, a.y, g << 5 | bits, 32));
                    got.push_back(i4(a.x + 32, a.y + bits, (g + next) << 5 | bits, 32));
                    joined++;
                    joined_across += next;
                } else {
                    got.push_back(a);
                }
            }
            REQUIRE(got.size() == want.size());
            for (size_t i = 0; i < got.size(); i++) {
                // (int): HIP's int4 members are proxies doctest cannot print
                CHECK((int)got[i].x == (int)want[i].x);
                CHECK((int)got[i].y == (int)want[i].y);
                CHECK((int)got[i].z == (int)want[i].z);
                CHECK((int)got[i].w == (int)want[i].w);
            }
        }
        // every layout holds a whole pair of one 2-4-bit group, all but the seventh and the last
        // one of 4 bits; the second and the eighth have 4-bit groups meeting at a pair's middle,
        // the last 2-bit ones
        bool has4 = false;
        for (auto g : L.groups) has4 |= g.first == 4;
        if (join == 0) CHECK(joined == 0);
        if (join == ((1 << 2) | (1 << 3) | (1 << 4)) || (join == (1 << 4) && has4)) CHECK(joined > 0);
        const bool meets = &L == &layouts[1] || &L == &layouts[7];
        if ((across & join & (1 << 4)) && meets) CHECK(joined_across > 0);
        if ((across & join & (1 << 2)) && &L == &layouts[8]) CHECK(joined_across > 0);
        if (across == 0) CHECK(joined_across == 0);
    }
}

// The head records (ggx_cuda_qextra::heads: where the decode GEMV finds a warp group's first
// pieces and its piece range): for every slice or pair u, the first three descriptors from
// first[u] on, and {first[u], the word row where the piece before it ends}. That word row is
// reckoned here from the groups alone (rows before the piece's end, times their widths, / 32).
TEST_CASE("decode plan: head records hold each run's first descriptors, its first piece and the word row before it") {
    const std::vector<std::vector<std::pair<int, int>>> layouts = {
        {{4, 128}, {4, 128}, {4, 128}, {4, 128}},
        {{8, 32}, {6, 64}, {5, 32}, {4, 128}, {3, 64}, {2, 64}},
        {{4, 64}, {2, 48}, {4, 96}, {2, 16}, {2, 32}},   // 2-bit groups of 16: two pieces in a slice
        {{4, 160}},                                        // an odd number of slices
        {{4, 32}},                                         // one piece
    };
    for (const auto & L : layouts) {
        const std::vector<int4> gtab = ggx_cuda_group_table(L);
        const int k = gtab.back().x + gtab.back().w;
        auto word_row = [&](int row) {   // packed word rows before K-row `row`
            int w = 0;
            for (const auto & g : gtab) w += std::max(0, std::min(row, g.x + g.w) - g.x) * g.z / 32;
            return w;
        };
        ggx_cuda_piece_tables t;
        int run_cost[4][GGX_QGEMV_MAX_RUN + 1];
        ggx_cuda_build_piece_tables(gtab, k, (1 << 2) | (1 << 3) | (1 << 4), 0, &t, run_cost);
        for (int paired = 0; paired < 2; paired++) {
            const std::vector<int4> & pieces = paired ? t.pieces2 : t.pieces;
            const std::vector<int> & first = paired ? t.first2 : t.first;
            const std::vector<int4> & heads = paired ? t.heads2 : t.heads;
            const int n = (int)pieces.size();
            REQUIRE(heads.size() == 4 * first.size());
            for (size_t u = 0; u < first.size(); u++) {
                const int f = first[u];
                for (int i = 0; i < 3; i++) {
                    const int4 want = pieces[std::min(f + i, n - 1)], got = heads[4 * u + i];
                    CHECK((int)got.x == (int)want.x);
                    CHECK((int)got.y == (int)want.y);
                    CHECK((int)got.z == (int)want.z);
                    CHECK((int)got.w == (int)want.w);
                }
                const int4 rec = heads[4 * u + 3];
                CHECK((int)rec.x == f);
                CHECK((int)rec.y == (f > 0 ? word_row(pieces[f - 1].x + pieces[f - 1].w) : 0));
            }
            CHECK((int)heads.back().y == word_row(k));   // the end marker: every word row
        }
    }
}

// Attention in the q/k/v job's tail (decode-plan.h, ggx_qgemv_attn): planned for one-row q/k/v
// jobs whose attention reads their q and caches, with the bound clipped to the cache rows; the
// ATTN node stays in the plan (its kernel orders o after the job) and knows the bound. Not for
// two rows, f32 caches, a softcap, or without the switch.
TEST_CASE("decode plan: attention in the q/k/v tail where it applies") {
    for (int bound : {48, 100, 0}) {
        CAPTURE(bound);
        DecodeGraph G;
        G.build(1, 2);
        ggx_cuda_plan p;
        ggx_cuda_plan_graph(true, G.g, p, bound);
        int tails = 0;
        for (const ggx_qgemv_job & j : p.jobs) {
            if (j.attn.bound == 0) continue;
            tails++;
            CHECK(j.attn.bound == std::min(bound, 64));
            REQUIRE(j.attn.q >= 0);
            CHECK(j.m[j.attn.q].rope);
            CHECK(j.m[j.attn.q].cache == nullptr);
            CHECK(j.m[j.attn.k].cache == G.k_cache[tails - 1]);
            CHECK(j.m[j.attn.v].cache == G.v_cache[tails - 1]);
            CHECK(j.attn.out == G.attn[tails - 1]);
            CHECK(j.attn.H == 4);
            CHECK(j.attn.Hkv == 2);
            CHECK(j.attn.scale == 0.125f);
            const int ia = G.node_index(G.attn[tails - 1]);
            CHECK(p.action[ia] == ggx_cuda_plan::RUN);
            CHECK(p.attn_tail[ia] == j.attn.bound);
        }
        CHECK(tails == (bound > 0 ? 2 : 0));
    }
    auto no_tail = [](DecodeGraph & G) {
        ggx_cuda_plan p;
        ggx_cuda_plan_graph(true, G.g, p, 48);
        for (const ggx_qgemv_job & j : p.jobs) CHECK(j.attn.bound == 0);
        for (int b : p.attn_tail) CHECK(b == 0);
        CHECK(p.jobs.size() > 4);   // the GEMV jobs themselves are fused as before
    };
    SUBCASE("two rows") { DecodeGraph G; G.build(2, 2); no_tail(G); }
    SUBCASE("f32 caches") { DecodeGraph G; G.build(1, 2, GGX_TYPE_F32); no_tail(G); }
    SUBCASE("softcap") { DecodeGraph G; G.build(1, 2, GGX_TYPE_F16, 30.0f); no_tail(G); }
}

// The q/k/v rows (ggx_attn_rows): each layer's one-row q/k/v job adds its matrices' sums into its
// own rows (16-byte aligned, N floats each, no two overlapping), the ATTN node after it reads
// exactly those, and nothing else changes: the jobs and their matrices are the same, only the
// destinations. Not with more rows, f32 caches, a softcap (the tensor-core decode kernel alone
// reads rows), or where the attention tail takes the job.
TEST_CASE("decode plan: q/k/v rows for the decode attention where it reads them") {
    auto no_rows = [](DecodeGraph & G, int tail) {
        ggx_cuda_plan p;
        ggx_cuda_plan_graph(true, G.g, p, tail, true);
        CHECK(p.rows_floats == 0);
        for (const ggx_qgemv_job & j : p.jobs)
            for (int i = 0; i < j.n_mat; i++) CHECK(j.m[i].rows == -1);
        for (const ggx_attn_rows & ar : p.attn_rows) CHECK(ar.q == -1);
    };
#if defined(GGX_USE_HIP)
    // the one kernel that reads rows (the tensor-core decode attention) is CUDA-only
    DecodeGraph H;
    H.build(1, 2);
    no_rows(H, 0);
    return;
#endif
    DecodeGraph G;
    G.build(1, 2);
    ggx_cuda_plan plain, p;
    ggx_cuda_plan_graph(true, G.g, plain);
    ggx_cuda_plan_graph(true, G.g, p, 0, true);
    CHECK(plain.rows_floats == 0);
    REQUIRE(p.jobs.size() == plain.jobs.size());
    CHECK(p.action == plain.action);
    int64_t next = 0;
    int layer = 0;
    for (size_t ji = 0; ji < p.jobs.size(); ji++) {
        const ggx_qgemv_job & j = p.jobs[ji];
        const bool qkv = j.n_mat == 3 && j.head_dim == 64;
        for (int i = 0; i < j.n_mat; i++) {
            CHECK(plain.jobs[ji].m[i].rows == -1);
            CHECK(j.m[i].w == plain.jobs[ji].m[i].w);
            if (!qkv) CHECK(j.m[i].rows == -1);
        }
        if (!qkv) continue;
        REQUIRE(layer < 2);
        const int ia = G.node_index(G.attn[layer]);
        const ggx_attn_rows & ar = p.attn_rows[ia];
        for (int i = 0; i < 3; i++) {
            const ggx_qgemv_job_mat & m = j.m[i];
            CHECK(m.rows == next);   // in order, packed, each 4-float aligned
            CHECK(m.rows % 4 == 0);
            next += (((const ggx_qmatrix *)m.w->extra)->N + 3) / 4 * 4;
            CHECK(m.rows == (m.rope && !m.cache ? ar.q : m.rope ? ar.k : ar.v));
        }
        CHECK(ar.q >= 0);
        CHECK(ar.k >= 0);
        CHECK(ar.v >= 0);
        layer++;
    }
    CHECK(layer == 2);
    CHECK(p.rows_floats == next);
    CHECK(next == 2 * (256 + 128 + 128));
    int readers = 0;
    for (const ggx_attn_rows & ar : p.attn_rows) readers += ar.q >= 0;
    CHECK(readers == 2);
    SUBCASE("two rows") { DecodeGraph H; H.build(2, 2); no_rows(H, 0); }
    SUBCASE("f32 caches") { DecodeGraph H; H.build(1, 2, GGX_TYPE_F32); no_rows(H, 0); }
    SUBCASE("softcap") { DecodeGraph H; H.build(1, 2, GGX_TYPE_F16, 30.0f); no_rows(H, 0); }
    SUBCASE("the attention tail") { DecodeGraph H; H.build(1, 2); no_rows(H, 48); }
}

// The name lists of the CUDA knobs (GGX_QGEMV_ROWS_FOR, GGX_CUDA_TRACE_BLOCKS): the first item whose
// key the name contains, the key before the last ':' of a valued item.
TEST_CASE("cuda knobs: a name list gives the first item whose key the name contains") {
    const std::string o = "model.layers.5.self_attn.o_proj", q = "model.layers.5.self_attn.q_proj";
    CHECK(ggx_list_match("q_proj:64,o_proj:128", o, true) == "o_proj:128");
    CHECK(ggx_list_match("proj:32,o_proj:128", o, true) == "proj:32");
    CHECK(ggx_list_match("o_proj,q_proj:64", q, true) == "q_proj:64");   // an item without ':' is no key
    CHECK(ggx_list_match(":5,,down_proj:2", o, true).empty());        // empty keys match nothing
    CHECK(ggx_list_match("a:b:3", "xa:by", true) == "a:b:3");         // the key ends at the last ':'
    CHECK(ggx_list_match("layers.4.,layers.5.self_attn.q", q, false) == "layers.5.self_attn.q");
    CHECK(ggx_list_match(",,", q, false).empty());
    CHECK(ggx_list_match("", q, false).empty());
    CHECK(ggx_list_match("gate_proj", q, false).empty());
}

#endif  // GGX_USE_CUDA
