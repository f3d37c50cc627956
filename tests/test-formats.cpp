// File-format building blocks: JSON reader, safetensors reader/writer, config.json, RoPE tables,
// fp16/bf16 conversions, sampler.
#include "fixtures.h"

#include "exl2/config.h"
#include "exl2/error.h"
#include "exl2/json.h"
#include "exl2/safetensors.h"
#include "exl2/sampler.h"
#include "ggx/fp16.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <unistd.h>

using namespace exl2;

TEST_CASE("json: values, escapes, surrogates, errors with position") {
    Json j = Json::parse(R"({"a": [1, -2.5e3, true, null], "s": "x\u00e9\ud83d\ude00\n", "big": 9007199254740993})");
    CHECK(j.get("a")[0].as_int() == 1);
    CHECK(j.get("a")[1].as_number() == -2500.0);
    CHECK(j.get("a")[2].as_bool());
    CHECK(j.get("a")[3].is_null());
    CHECK(j.get("s").as_string() == "x\xc3\xa9\xf0\x9f\x98\x80\n");
    CHECK(j.get("big").as_int() == 9007199254740993LL);   // exact beyond double precision
    CHECK(Json::parse(j.dump()).dump() == j.dump());
    for (const char * bad : {"{", "[1,]", "{\"a\" 1}", "\"abc", "tru", "[1] x", "{\"a\":\"\\q\"}"}) {
        CAPTURE(bad);
        try {
            Json::parse(bad, "t.json");
            FAIL("no error");
        } catch (const Error & e) {
            CHECK(std::string(e.what()).find("t.json: invalid JSON at byte") == 0);
        }
    }
    CHECK_THROWS_AS(j.get("s").as_int(), Error);
}

TEST_CASE("safetensors: write, read back, refuse overwrite, detect corruption") {
    char tmpl[] = "/tmp/exl2-st-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    const std::string dir = tmpl, f = dir + "/a.safetensors";
    std::vector<uint16_t> h = {1, 2, 3, 4, 5, 6};
    std::vector<int32_t> i = {7, -8};
    safetensors_write(f, {{"w", StDtype::F16, {2, 3}, h.data(), 12}, {"i", StDtype::I32, {2}, i.data(), 8}});
    CHECK_THROWS_WITH_AS(safetensors_write(f, {}), doctest::Contains("refusing to overwrite"), Error);
    SafeTensors st;
    st.open_dir(dir);
    const StTensor & w = st.get("w");
    CHECK(w.shape == std::vector<int64_t>{2, 3});
    CHECK(w.dtype == StDtype::F16);
    CHECK(memcmp(w.data, h.data(), 12) == 0);
    CHECK(memcmp(st.get("i").data, i.data(), 8) == 0);
    CHECK((reinterpret_cast<uintptr_t>(w.data) % 8) == 0);
    CHECK_THROWS_WITH_AS(st.get("nope"), doctest::Contains("tensor nope not found"), Error);
    // An index naming a shard that does not exist.
    FILE * idx = fopen((dir + "/model.safetensors.index.json").c_str(), "w");
    fputs(R"({"weight_map": {"w": "a.safetensors", "z": "b.safetensors"}})", idx);
    fclose(idx);
    SafeTensors st2;
    CHECK_THROWS_WITH_AS(st2.open_dir(dir), doctest::Contains("shard b.safetensors named for tensor z is missing"), Error);
    (void)!system(("rm -rf " + dir).c_str());
}

TEST_CASE("config: rope_parameters block, GQA, defaults, llama3 scaling") {
    Json j = Json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 131072, "eos_token_id": [128001, 128008],
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192}, "rope_theta": 500000.0})");
    ModelConfig c = config_parse(j, "c.json");
    CHECK(c.head_dim == 128);
    CHECK(c.n_head_kv == 8);
    CHECK(c.eos_ids.size() == 2);
    CHECK(c.rope.type == RopeType::Llama3);
    RopeTables t = rope_tables(c, 4096);
    REQUIRE(t.freq_div.size() == 64);
    // High frequencies (short wavelengths) are untouched, low ones divided by the factor.
    CHECK(t.freq_div[0] == doctest::Approx(1.0));
    CHECK(t.freq_div[63] == doctest::Approx(8.0));
    for (size_t i = 1; i < t.freq_div.size(); i++) CHECK(t.freq_div[i] >= t.freq_div[i - 1] - 1e-6f);
    Json k = Json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 6, "num_attention_heads": 4, "vocab_size": 4096,
        "rope_parameters": {"rope_theta": 20000.0, "rope_type": "default"}})");
    ModelConfig kc = config_parse(k, "k.json");
    CHECK(kc.rope.theta == 20000.0f);
    CHECK(kc.n_head_kv == 4);
    CHECK(kc.n_ctx_train == 2048);
    Json bad = Json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 6, "num_attention_heads": 3, "vocab_size": 4096})");
    CHECK_THROWS_WITH_AS(config_parse(bad, "b.json"), doctest::Contains("b.json: hidden_size 256 is not a multiple"), Error);
}

TEST_CASE("fp16/bf16 conversions: exhaustive round trip and rounding") {
    // Every finite half converts to float and back exactly.
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        REQUIRE(ggx_f32_to_f16(ggx_f16_to_f32((uint16_t)h)) == h);
    }
    // Round to nearest even against a double-precision oracle on random floats.
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> U(-70000.0f, 70000.0f);
    for (int i = 0; i < 200000; i++) {
        float x = U(rng) * std::pow(2.0f, (float)(int)(rng() % 40) - 30.0f);
        uint16_t h = ggx_f32_to_f16(x);
        if ((h & 0x7c00) == 0x7c00) { CHECK(std::fabs(x) >= 65520.0f); continue; }
        double got = ggx_f16_to_f32(h);
        // neighbours of h must not be closer
        double up = ggx_f16_to_f32((uint16_t)(h + 1)), dn = h & 0x7fff ? ggx_f16_to_f32((uint16_t)(h - 1)) : got;
        CHECK(std::fabs(got - x) <= std::fabs(up - x));
        CHECK(std::fabs(got - x) <= std::fabs(dn - x));
    }
    CHECK(ggx_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(ggx_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(ggx_f32_to_bf16(1.00390625f) == 0x3f80);   // tie to even
}

TEST_CASE("sampler: greedy ties, top-k 1, seeded reproducibility, distribution") {
    std::vector<float> l = {1.0f, 3.0f, 3.0f, -2.0f};
    SamplerParams g;
    g.temperature = 0;
    Sampler s(g);
    CHECK(s.sample(l.data(), 4) == 1);
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0;
    p.seed = 42;
    Sampler a(p), b(p);
    int counts[4] = {};
    for (int i = 0; i < 20000; i++) {
        int x = a.sample(l.data(), 4);
        CHECK(x == b.sample(l.data(), 4));
        counts[x]++;
    }
    // softmax(1,3,3,-2) = 0.0634, 0.4683, 0.4683, 0.0003: within 4 sigma of the expected counts.
    CHECK(std::abs(counts[0] - 1268) < 4 * 35);
    CHECK(std::abs(counts[1] - 9366) < 4 * 71);
    p.top_k = 1;
    Sampler c(p);
    for (int i = 0; i < 10; i++) CHECK(c.sample(l.data(), 4) == 1);
    // top-p 0.5 keeps the smallest prefix reaching half the mass: the two 0.468 tokens.
    p.top_k = 0;
    p.top_p = 0.5f;
    Sampler d(p);
    for (int i = 0; i < 200; i++) {
        int x = d.sample(l.data(), 4);
        CHECK((x == 1 || x == 2));
    }
}

namespace {
// The sampler's filters over a fully sorted vocabulary, as it first computed them: the reference
// for its faster ranking (a heap of top-k; a partition by min-p; a widening window under top-p).
int32_t sample_by_full_sort(const SamplerParams & p, std::mt19937_64 & rng, const std::vector<float> & l) {
    struct C { int32_t id; float logit; float p; };
    std::vector<C> c(l.size());
    for (size_t i = 0; i < l.size(); i++) c[i] = {(int32_t)i, l[i] / p.temperature, 0.0f};
    auto by = [](const C & a, const C & b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
    std::sort(c.begin(), c.end(), by);
    size_t n = p.top_k > 0 && (size_t)p.top_k < c.size() ? (size_t)p.top_k : c.size();
    double sum = 0;
    for (size_t i = 0; i < n; i++) { c[i].p = std::exp(c[i].logit - c[0].logit); sum += c[i].p; }
    for (size_t i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
    if (p.min_p > 0) {
        size_t k = 1;
        while (k < n && c[k].p >= c[0].p * p.min_p) k++;
        n = k;
    }
    if (p.top_p > 0 && p.top_p < 1) {
        double cum = 0;
        size_t k = 0;
        while (k < n) { cum += c[k].p; k++; if (cum >= p.top_p) break; }
        n = k;
    }
    double total = 0;
    for (size_t i = 0; i < n; i++) total += c[i].p;
    std::uniform_real_distribution<double> U(0.0, total);
    const double r = U(rng);
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += c[i].p;
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}
}  // namespace

// Exact for top-k (the same k candidates, order and sums). Without top-k the probabilities are
// normalised over the vocabulary in id order rather than in rank order, which can move the sum
// by an ulp of a double: a draw would differ only within ~1e-16 of a boundary, never in these.
TEST_CASE("sampler: its ranking draws what a full sort of the vocabulary draws") {
    struct P { int top_k; float top_p, min_p, temp; double sd, step; };
    const P ps[] = {
        {40, 0.95f, 0.05f, 0.8f, 3.0, 0},    // main's defaults
        {40, 0.95f, 0.05f, 0.8f, 3.0, 0.5},  // logits on a 0.5 grid: ties, broken by id
        {100, 1.0f, 0.0f, 1.3f, 1.0, 0},     {7, 0.5f, 0.0f, 0.7f, 2.0, 0.25},
        {0, 0.9f, 0.0f, 1.0f, 2.0, 0},       {0, 1.0f, 0.05f, 0.8f, 3.0, 0},
        {0, 0.5f, 0.0f, 1.0f, 0.05, 0},      // nearly flat: top-p's prefix spans thousands
        {0, 0.95f, 0.02f, 1.0f, 0.3, 0.1},
    };
    for (int V : {50, 5000, 128256})
        for (const P & q : ps) {
            std::mt19937_64 gen((uint64_t)V * 31 + (uint64_t)q.top_k);
            std::normal_distribution<double> d(0.0, q.sd);
            std::vector<float> l((size_t)V);
            SamplerParams sp;
            sp.top_k = q.top_k;
            sp.top_p = q.top_p;
            sp.min_p = q.min_p;
            sp.temperature = q.temp;
            sp.seed = 7;
            Sampler s(sp);
            std::mt19937_64 ref_rng(sp.seed);
            for (int draw = 0; draw < (V > 10000 ? 10 : 40); draw++) {
                for (float & x : l) {
                    const double v = d(gen);
                    x = (float)(q.step > 0 ? std::round(v / q.step) * q.step : v);
                }
                const int32_t want = sample_by_full_sort(sp, ref_rng, l);
                REQUIRE_MESSAGE(s.sample(l.data(), V) == want, "V " << V << " top_k " << q.top_k << " top_p " << q.top_p
                                                                    << " min_p " << q.min_p << " draw " << draw);
            }
        }
}

// A backend's ranking of a row (larger value, then lower id), as Context::top_candidates returns it.
static void best_raw(const std::vector<float> & l, int n, std::vector<int32_t> & ids, std::vector<float> & vals) {
    std::vector<int32_t> order(l.size());
    for (size_t i = 0; i < l.size(); i++) order[i] = (int32_t)i;
    std::partial_sort(order.begin(), order.begin() + n, order.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    ids.assign(order.begin(), order.begin() + n);
    vals.resize((size_t)n);
    for (int i = 0; i < n; i++) vals[(size_t)i] = l[(size_t)ids[(size_t)i]];
}

// sample_top must draw exactly what sample() draws from the whole row, or decline. Continuous
// logits never tie, so there it must always decide; on a coarse grid ties at the k-th place are
// common and it must decline those (never draw something else).
TEST_CASE("sampler: a top-k draw from the row's best candidates is the draw from the whole row") {
    struct P { int top_k; float top_p, min_p, temp, pen; double step; };
    const P ps[] = {
        {40, 0.95f, 0.05f, 0.8f, 1.0f, 0},   // main's defaults
        {40, 0.95f, 0.05f, 0.8f, 1.0f, 0.5}, // ties
        {100, 1.0f, 0.0f, 1.3f, 1.3f, 0},    // a penalty over the last 64 draws
        {7, 0.5f, 0.0f, 0.7f, 1.1f, 0.25},
        {2, 1.0f, 0.0f, 1.0f, 1.0f, 0},
    };
    int declined = 0, drawn = 0;
    for (int V : {60, 5000, 128256})
        for (const P & q : ps) {
            SamplerParams sp;
            sp.top_k = q.top_k;
            sp.top_p = q.top_p;
            sp.min_p = q.min_p;
            sp.temperature = q.temp;
            sp.repetition_penalty = q.pen;
            sp.seed = 11;
            Sampler whole(sp), top(sp);
            std::mt19937_64 gen((uint64_t)V * 7 + (uint64_t)q.top_k);
            std::normal_distribution<double> d(0.0, 2.0);
            std::vector<float> l((size_t)V);
            std::vector<int32_t> ids;
            std::vector<float> vals;
            std::vector<int32_t> history;
            for (int step = 0; step < (V > 10000 ? 12 : 80); step++) {
                for (float & x : l) {
                    const double v = d(gen);
                    x = (float)(q.step > 0 ? std::round(v / q.step) * q.step : v);
                }
                // the last draws' ids near the top, so that the penalty changes the ranking
                if (step > 0) l[(size_t)history.back()] = 9.0f;
                const std::set<int32_t> window(history.end() - std::min<long>(64, (long)history.size()), history.end());
                const int n = top.top_needed(V, 256);
                const int32_t want = whole.sample(l.data(), V);
                history.push_back(want);
                if (q.top_k >= V) {   // no top-k filter at all: the whole row decides
                    REQUIRE(n == 0);
                    CHECK(top.sample(l.data(), V) == want);
                    continue;
                }
                REQUIRE(n == std::min(V, q.top_k + 1 + (q.pen != 1.0f ? (int)window.size() : 0)));
                best_raw(l, n, ids, vals);
                int32_t got = -1;
                if (top.sample_top(ids.data(), vals.data(), n, V, &got)) {
                    REQUIRE_MESSAGE(got == want, "V " << V << " top_k " << q.top_k << " step " << step);
                    drawn++;
                } else {
                    CHECK_MESSAGE(q.step > 0, "declined with untied logits: V " << V << " top_k " << q.top_k);
                    CHECK(top.sample(l.data(), V) == want);   // what the API falls back to
                    declined++;
                }
            }
        }
    CHECK(drawn > 500);   // untied rows always decide; the grids' rows tie at the k-th place often
    CHECK(declined > 0);
    // what it cannot decide from candidates: greedy, no top-k, a penalty below 1, beyond the cap
    SamplerParams sp;
    sp.temperature = 0;
    CHECK(Sampler(sp).top_needed(1000, 256) == 0);
    sp.temperature = 0.8f;
    sp.top_k = 0;
    CHECK(Sampler(sp).top_needed(1000, 256) == 0);
    sp.top_k = 300;
    CHECK(Sampler(sp).top_needed(1000, 256) == 0);
    sp.top_k = 40;
    sp.repetition_penalty = 0.9f;
    Sampler low(sp);
    CHECK(low.top_needed(1000, 256) == 41);   // no history yet: no penalty applies
    low.accept(3);
    CHECK(low.top_needed(1000, 256) == 0);
}
