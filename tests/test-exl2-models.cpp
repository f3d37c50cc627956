// EXL2 models converted by ExLlamaV2 itself (fixtures/exl2): our logits against ExLlamaV2's, for
// the fp16 original and the 2.7/4.0/8.0 bpw conversions, without a cache (one pass over each
// prompt) and step by step with a cache (teacher-forced with ExLlamaV2's recorded tokens).
//
// Tolerance. ExLlamaV2 computes in fp16 (activations rounded to fp16 after every op, logits
// stored as fp16) and, for <= 32 rows, adds split-K partial sums atomically in varying order: its
// own runs differ by up to ~1e-2 (fixtures/exl2/README.md, item 3). We compute in f32 with
// bit-identical dequantized weights. The logits here are O(1) (|max| ~ 1-3), so the fp16 rounding
// of the logits alone is ~1e-3 and of the activations a few 1e-3; we require
//     max |ours - exllamav2| <= 2e-2
// per row (ExLlamaV2's own run-to-run spread of 9e-3 plus our fp16-vs-f32 rounding of ~5e-3,
// with margin; measured: 7e-3), and the same argmax wherever ExLlamaV2's top-2 margin exceeds
// that tolerance. The fp16 model (cuBLAS, deterministic, no atomics) must agree to 1e-2
// (measured: 3.5e-3).
//
// ExLlamaV2's recorded prefills are bidirectional: without flash-attn its SDPA path passes no
// causal mask, so the prompt tokens attend to each other both ways (row 0 of logits.p1 differs
// from logits.p0 by 2.9; with causal attention we differ from every multi-token row by 1-3, with
// bidirectional prefill by < 5e-3). The decode steps (one token) are causal either way, but read
// the cache the prefill wrote. We therefore reproduce that prefill with
// ContextParams::exllamav2_noncausal_prefill; causal correctness itself is tested against
// transformers in test-model.cpp.
#include "fixtures.h"

#include "exl2/context.h"
#include "exl2/json.h"
#include "exl2/model.h"
#include "exl2/safetensors.h"
#include "exl2/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace exl2;

namespace {

std::vector<float> rows_of(const SafeTensors & st, const std::string & name, int row) {
    const StTensor & t = st.get(name);
    REQUIRE(t.dtype == StDtype::F32);
    const int64_t n = t.shape[1];
    std::vector<float> v((size_t)n);
    memcpy(v.data(), t.data + (size_t)row * n * 4, (size_t)n * 4);
    return v;
}

double max_abs_diff(const float * a, const std::vector<float> & b) {
    double m = 0;
    for (size_t i = 0; i < b.size(); i++) m = std::max(m, (double)std::fabs(a[i] - b[i]));
    return m;
}

// Margin between the best and second-best logit.
double top2_margin(const std::vector<float> & v) {
    float a = -INFINITY, b = -INFINITY;
    for (float x : v) {
        if (x > a) { b = a; a = x; }
        else if (x > b) b = x;
    }
    return a - b;
}

void check_model(const std::string & root, const std::string & name, double tol) {
    CAPTURE(name);
    const std::string ref = root + "/ref";
    SafeTensors logits;
    logits.open_file(ref + "/" + name + ".logits.safetensors");
    const Json prompts = Json::parse_file(ref + "/prompts.json");
    const Json gens = Json::parse_file(ref + "/generations.json");
    auto model = Model::load(root + "/" + name, ModelParams(), false);
    const int V = model->cfg.n_vocab;
    double worst_pass = 0, worst_step = 0;
    int argmax_checked = 0;
    for (const Json & p : prompts.as_array()) {
        const std::string pn = p.get("name").as_string();
        CAPTURE(pn);
        std::vector<int32_t> ids;
        for (const Json & x : p.get("ids").as_array()) ids.push_back((int32_t)x.as_int());
        // 1. One pass over the whole prompt, every row.
        ContextParams cp;
        cp.n_ctx = 256;
        cp.cache_type = CacheType::F32;
        cp.exllamav2_noncausal_prefill = true;
        Context ctx(*model, cp);
        REQUIRE(ctx.decode(ids.data(), (int)ids.size(), true));
        for (size_t t = 0; t < ids.size(); t++) {
            const std::vector<float> want = rows_of(logits, "logits." + pn, (int)t);
            const double d = max_abs_diff(ctx.logits((int)t), want);
            worst_pass = std::max(worst_pass, d);
            CHECK(d <= tol);
        }
        // 2. Cached decoding, feeding ExLlamaV2's recorded greedy tokens.
        const Json & toks = gens.get(name).get(pn).get("tokens");
        Context c2(*model, cp);
        REQUIRE(c2.decode(ids.data(), (int)ids.size(), false));
        for (size_t k = 0; k < toks.size(); k++) {
            CAPTURE(k);
            const std::vector<float> want = rows_of(logits, "gen_logits." + pn, (int)k);
            const float * got = c2.logits(-1);
            const double d = max_abs_diff(got, want);
            worst_step = std::max(worst_step, d);
            CHECK(d <= tol);
            const int32_t rec = (int32_t)toks[k].as_int();
            if (top2_margin(want) > tol) {
                CHECK(argmax(got, V) == rec);
                argmax_checked++;
            }
            REQUIRE(c2.decode(&rec, 1, false));
        }
    }
    MESSAGE(name << ": worst |logit diff| one pass " << worst_pass << ", cached steps " << worst_step << ", "
                 << argmax_checked << " greedy steps with margin > tol all agree");
}

}  // namespace

TEST_CASE("exl2 fixtures: fp16 original vs ExLlamaV2") {
    REQUIRE_FIXTURE(root, "exl2");
    check_model(root, "fp16", 1e-2);
}

TEST_CASE("exl2 fixtures: 2.7 / 4.0 / 8.0 bpw vs ExLlamaV2") {
    REQUIRE_FIXTURE(root, "exl2");
    for (const char * m : {"2.7bpw", "4.0bpw", "8.0bpw"}) check_model(root, m, 2e-2);
}
