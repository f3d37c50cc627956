// The CUDA decode GEMV's launch plan for synthetic models, computed on the host (no GPU needed):
// for each model and bpw, the fine slices per warp group (m), blocks and waves of each one-row
// decode job of a layer (q/k/v, o, gate/up, down) and of the head (bench/synthetic-plan.h: every
// matrix in the EXL2 layout the synthetic model gives it), so a plan change can be checked on real
// shapes before a GPU measures it. The plan's knobs (GGX_QGEMV_SLICE_COST, GGX_QGEMV_PIECE_COSTS,
// GGX_QGEMV_PAIRS, GGX_QGEMV_ROWS_FOR, ...) act as in the backend.
//
//   make CUDA=1 bench-plan-report
//   build/bench-plan-report [--sm N] [MODEL[:BPW,BPW...]]...
//   GGX_QGEMV_SLICE_COST=0 build/bench-plan-report llama3.2-1b:2.5,4.0
//
// Without a MODEL: every synthetic model at 2.5, 3.0, 3.5, 4.0, 4.25, 4.5, 5.0, 6.0 and 8.0 bpw.
#include "bench/synthetic-plan.h"
#include "exl2/error.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

void report(const exl2::SyntheticSpec & sp, double bpw, int n_sm) {
    std::printf("%s %.2f bpw, %d SMs:\n", sp.name, bpw, n_sm);
    for (const exl2::SyntheticPlanJob & j : exl2::synthetic_plan(sp, bpw, n_sm)) {
        const int waves = (j.blocks + n_sm - 1) / n_sm;
        std::printf("  %-8s m %2d (%3d rows per warp group)  %4d blocks  %d wave%s  [%s]\n", j.label, j.m, j.m * GGX_QGEMV_FINE_ROWS, j.blocks,
                    waves, waves == 1 ? " " : "s", j.layouts.c_str());
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
