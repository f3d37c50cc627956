// The CUDA decode GEMV's launch plan for synthetic models, computed on the host (no GPU needed):
// for each model and bpw, the fine slices per warp group (m), blocks and waves of each one-row
// decode job of a layer (q/k/v, o, gate/up, down) and of the head, from the piece tables and the
// cost model the backend uses when it prepares and launches them (qmatrix.cu, qgemv.cu). Every
// matrix takes the EXL2 layout the synthetic model gives it (exl2_layout_for_bpw of its K x N;
// the head 6 bits, 8 above 6 bpw), so a plan change can be checked on real shapes before a GPU
// measures it. The plan's knobs (GGX_QGEMV_SLICE_COST, GGX_QGEMV_PIECE_COSTS, GGX_QGEMV_PAIRS,
// GGX_QGEMV_ROWS_FOR, ...) act as in the backend.
//
//   make CUDA=1 bench-plan-report
//   build/bench-plan-report [--sm N] [MODEL[:BPW,BPW...]]...
//   GGX_QGEMV_SLICE_COST=0 build/bench-plan-report llama3.2-1b:2.5,4.0
//
// Without a MODEL: every synthetic model at 2.5, 3.0, 3.5, 4.0, 4.25, 4.5, 5.0, 6.0 and 8.0 bpw.
#include "backends/cuda/decode-plan.h"
#include "exl2/error.h"
#include "exl2/quant/synthetic.h"
#include "exl2/synthetic-model.h"
#include "ggx/ggx.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

// An EXL2 matrix with the tables qmatrix.cu would build for it (no weights, no device memory).
struct PlannedMatrix {
    ggx_qmatrix     q = {};
    ggx_cuda_qextra e;
    std::string     layout;
};

struct Report {
    ggx_context *             ctx = ggx_context_new();
    std::deque<PlannedMatrix> mats;   // stable addresses: tensors point at them
    ~Report() { ggx_context_free(ctx); }

    ggx_tensor * matrix(const char * name, int K, int N, double bpw) {
        PlannedMatrix & m = mats.emplace_back();
        const exl2::BitLayout L = exl2::exl2_layout_for_bpw(bpw, K, N);
        m.layout = L.name;
        m.q.K = K;
        m.q.N = N;
        m.q.Np = (N + 31) / 32 * 32;
        m.e.slice_rows = GGX_QGEMV_FINE_ROWS;
        m.e.n_slices = (K + GGX_QGEMV_FINE_ROWS - 1) / GGX_QGEMV_FINE_ROWS;
        ggx_cuda_piece_tables tables;
        ggx_cuda_build_piece_tables(ggx_cuda_group_table(exl2::exl2_layout_groups(L, K)), K, (1 << 2) | (1 << 3) | (1 << 4), 0, &tables,
                                    m.e.run_cost);
        m.q.backend_extra = &m.e;
        ggx_tensor * t = ggx_new_tensor_2d(ctx, GGX_TYPE_EXL2, K, N);
        ggx_set_name(t, name);   // GGX_QGEMV_ROWS_FOR matches these
        t->extra = &m.q;
        return t;
    }
};

struct JobSpec {
    const char * label;
    std::vector<std::pair<const char *, std::pair<int, int>>> mats;   // name, {K, N}
    bool head;
};

void report(const exl2::SyntheticSpec & sp, double bpw, int n_sm) {
    Report r;
    const int D = sp.n_embd, Dq = sp.n_head * sp.head_dim, Dkv = sp.n_head_kv * sp.head_dim, F = sp.n_ff;
    const JobSpec jobs[] = {
        {"q/k/v", {{"blk.0.self_attn.q_proj", {D, Dq}}, {"blk.0.self_attn.k_proj", {D, Dkv}}, {"blk.0.self_attn.v_proj", {D, Dkv}}}, false},
        {"o", {{"blk.0.self_attn.o_proj", {Dq, D}}}, false},
        {"gate/up", {{"blk.0.mlp.gate_proj", {D, F}}, {"blk.0.mlp.up_proj", {D, F}}}, false},
        {"down", {{"blk.0.mlp.down_proj", {F, D}}}, false},
        {"head", {{"lm_head", {D, sp.n_vocab}}}, true},
    };
    std::printf("%s %.2f bpw, %d SMs:\n", sp.name, bpw, n_sm);
    for (const JobSpec & js : jobs) {
        ggx_qgemv_job job;
        job.T = 1;
        std::string layouts;
        for (const auto & m : js.mats) {
            job.m[job.n_mat++].w = r.matrix(m.first, m.second.first, m.second.second, js.head ? (bpw > 6.0 ? 8.0 : 6.0) : bpw);
            const std::string & l = r.mats.back().layout;
            if (layouts.find(l) == std::string::npos) layouts += (layouts.empty() ? "" : "; ") + l;
        }
        const int m = ggx_cuda_qgemv_group_slices(job, n_sm);
        const int blocks = ggx_cuda_qgemv_blocks(job, m);
        std::printf("  %-8s m %2d (%3d rows per warp group)  %4d blocks  %d wave%s  [%s]\n", js.label, m, m * GGX_QGEMV_FINE_ROWS, blocks,
                    (blocks + n_sm - 1) / n_sm, (blocks + n_sm - 1) / n_sm == 1 ? " " : "s", layouts.c_str());
    }
}

[[noreturn]] void usage(int rc) {
    std::fprintf(rc ? stderr : stdout,
                 "usage: bench-plan-report [--sm N] [MODEL[:BPW,BPW...]]...\n"
                 "  the decode GEMV plan (fine slices per warp group, blocks, waves) of a layer's one-row jobs\n"
                 "  and the head of synthetic models, on the host; models: %s\n"
                 "  --sm N   SMs of the GPU (default 132, the H100 SXM and H200)\n",
                 exl2::synthetic_names().c_str());
    std::exit(rc);
}

}  // namespace

int main(int argc, char ** argv) {
    int n_sm = 132;
    std::vector<std::pair<std::string, std::vector<double>>> runs;
    const std::vector<double> all_bpw = {2.5, 3.0, 3.5, 4.0, 4.25, 4.5, 5.0, 6.0, 8.0};
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") usage(0);
        if (a == "--sm") {
            if (i + 1 >= argc) usage(2);
            char * end = nullptr;
            const long v = std::strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1024) {
                std::fprintf(stderr, "bench-plan-report: error: --sm '%s' is not a count of SMs (1-1024)\n", argv[i]);
                return 2;
            }
            n_sm = (int)v;
            continue;
        }
        const size_t colon = a.find(':');
        std::vector<double> bpws;
        if (colon == std::string::npos) {
            bpws = all_bpw;
        } else {
            for (size_t at = colon + 1; at <= a.size();) {
                const size_t comma = std::min(a.find(',', at), a.size());
                const std::string item = a.substr(at, comma - at);
                char * end = nullptr;
                const double b = std::strtod(item.c_str(), &end);
                if (item.empty() || *end || !(b >= 2.0 && b <= 8.0)) {
                    std::fprintf(stderr, "bench-plan-report: error: bpw '%s' in '%s' is not a number in [2, 8]\n", item.c_str(), a.c_str());
                    return 2;
                }
                bpws.push_back(b);
                at = comma + 1;
            }
        }
        runs.emplace_back(a.substr(0, colon), bpws);
    }
    try {
        if (runs.empty())
            for (const exl2::SyntheticSpec & sp : exl2::synthetic_specs()) runs.emplace_back(sp.name, all_bpw);
        for (const auto & run : runs) {
            const exl2::SyntheticSpec & sp = exl2::synthetic_spec(run.first);
            for (double b : run.second) report(sp, b, n_sm);
        }
    } catch (const exl2::Error & e) {
        std::fprintf(stderr, "bench-plan-report: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
