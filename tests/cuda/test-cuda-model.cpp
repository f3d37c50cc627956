// End-to-end on the GPU: whole models run on CUDA against the same models on the CPU backend,
// through the library's loader and context (prefill with logits for every token, then decode
// steps that replay the captured single-token graph).
// Tolerance: the prefill path rounds activations to fp16 before the tensor-core GEMMs (2^-11
// relative per input) and the attention sums in another order; through a few layers this stays
// well below 1e-2 of the largest logit (max-norm), while a wrong kernel moves logits by O(1).
#include "tests/fixtures.h"

#include "cuda-harness.h"

#include "exl2/context.h"
#include "exl2/model.h"

#include <algorithm>
#include <cmath>
#include <memory>

using namespace exl2;

namespace {

double rel_err(const float * a, const float * b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num = std::max(num, (double)std::fabs(a[i] - b[i]));
        den = std::max(den, (double)std::fabs(b[i]));
    }
    return num / std::max(den, 1e-30);
}

int argmax(const float * v, int n) { return (int)(std::max_element(v, v + n) - v); }

void compare_model(const std::string & dir) {
    ModelParams cpu_p, gpu_p;
    cpu_p.device = "cpu";
    gpu_p.device = "cuda:0";
    auto cpu = Model::load(dir, cpu_p, false);
    auto gpu = Model::load(dir, gpu_p, false);
    const int V = cpu->cfg.n_vocab;
    ContextParams cp;
    cp.n_ctx = 256;
    cp.n_batch = 64;
    Context cc(*cpu, cp), gc(*gpu, cp);
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; i++) ids.push_back((int32_t)((i * 37 + 11) % std::min(V, 500)));
    REQUIRE(cc.decode(ids.data(), (int)ids.size(), true));
    REQUIRE(gc.decode(ids.data(), (int)ids.size(), true));
    int agree = 0;
    for (int t = 0; t < (int)ids.size(); t++) {
        const double e = rel_err(gc.logits(t), cc.logits(t), V);
        CHECK_MESSAGE(e < 1e-2, dir << " prefill token " << t << " rel err " << e);
        agree += argmax(gc.logits(t), V) == argmax(cc.logits(t), V);
    }
    CHECK(agree >= (int)ids.size() - 2);
    // decode steps: both follow the CPU's greedy choice so their inputs stay identical
    int32_t next = argmax(cc.logits(-1), V);
    for (int step = 0; step < 8; step++) {
        REQUIRE(cc.decode(&next, 1, false));
        REQUIRE(gc.decode(&next, 1, false));
        const double e = rel_err(gc.logits(-1), cc.logits(-1), V);
        CHECK_MESSAGE(e < 1e-2, dir << " decode step " << step << " rel err " << e);
        next = argmax(cc.logits(-1), V);
    }
}

}  // namespace

TEST_CASE("cuda: kjv-6m logits match the CPU backend") {
    REQUIRE_CUDA();
    compare_model("models/kjv-6m");
}

TEST_CASE("cuda: ExLlamaV2-made EXL2 models (2.7/4.0/8.0 bpw) match the CPU backend") {
    REQUIRE_CUDA();
    for (const std::string m : {"exl2/4.0bpw", "exl2/2.7bpw", "exl2/8.0bpw"}) {
        REQUIRE_FIXTURE(dir, m);
        compare_model(dir);
    }
}
