// The C API as a program embedding it sees it: handles, return codes, exl2_last_error(), and a
// full generate loop that reproduces the transformers greedy reference.
#include "fixtures.h"

#include "exl2.h"
#include "exl2/json.h"
#include "exl2/sampler.h"

#include <cstring>
#include <string>
#include <vector>

TEST_CASE("c api: errors are codes and messages, never crashes") {
    exl2_model_params mp = exl2_model_default_params();
    CHECK(exl2_model_load(nullptr, mp) == nullptr);
    CHECK(std::string(exl2_last_error()).find("NULL") != std::string::npos);
    CHECK(exl2_model_load("/nonexistent/dir", mp) == nullptr);
    CHECK(std::string(exl2_last_error()).find("/nonexistent/dir") != std::string::npos);
    mp.device = "tpu:3";
    CHECK(exl2_model_load("models/kjv-6m", mp) == nullptr);
    CHECK(std::string(exl2_last_error()).find("tpu") != std::string::npos);
    CHECK(exl2_context_new(nullptr, exl2_context_default_params()) == nullptr);
    CHECK(exl2_decode(nullptr, nullptr, 0, 0) == EXL2_ERR_INVALID_ARG);
    CHECK(exl2_get_logits(nullptr, 0) == nullptr);
    CHECK(exl2_sampler_sample(nullptr, nullptr, 0) == EXL2_ERR_INVALID_ARG);
    exl2_model_free(nullptr);
    exl2_context_free(nullptr);
    exl2_sampler_free(nullptr);
}

// "auto" (the tools' default): the first GPU when the build has a GPU backend and it answers, else
// the CPU with the GPU's error kept as the note. Which branch runs depends on the machine: a
// CPU-only build, a GPU build without a GPU (CI), or one with.
TEST_CASE("c api: device auto takes the GPU when one answers, else the CPU and says why") {
    struct exl2_model_params mp = exl2_model_default_params();
    mp.device = "auto";
    mp.n_threads = 2;
    exl2_model * m = exl2_model_load("models/kjv-6m", mp);
    REQUIRE_MESSAGE(m, exl2_last_error());
    const std::string desc = exl2_model_desc(m), note = exl2_model_device_note(m), built = exl2_backends();
    const bool gpu_built = built != "cpu";
    const bool on_cpu = desc.find(" on CPU") != std::string::npos;
    CAPTURE(desc);
    CAPTURE(note);
    if (!gpu_built) {
        CHECK(note.empty());
        CHECK(on_cpu);
    } else if (note.empty()) {
        CHECK_FALSE(on_cpu);   // a GPU answered
    } else {
        CHECK(on_cpu);
        CHECK(note.find("no usable") != std::string::npos);
    }
    exl2_model_free(m);
    CHECK(exl2_model_device_note(nullptr) == std::string());
    // The device facts take "auto" as loading does: the memory of whichever device it picks
    uint64_t fr = 0, tot = 0;
    CHECK_MESSAGE(exl2_device_memory("auto", &fr, &tot) == EXL2_OK, exl2_last_error());
    CHECK(tot > 0);
    CHECK(fr <= tot);
    CHECK(exl2_device_memory("nonsense", &fr, &tot) < 0);
}

// exl2_model_params.deterministic defaults to off; on the CPU, whose sums always repeat, a model
// loaded with it gives the logits of one loaded without, bit for bit (on a GPU, test-cuda checks
// that it makes the logits repeat).
TEST_CASE("c api: deterministic model parameter") {
    exl2_model_params mp = exl2_model_default_params();
    CHECK(mp.deterministic == 0);
    mp.n_threads = 2;
    std::vector<float> logits[2];
    for (int det = 0; det < 2; det++) {
        mp.deterministic = det;
        exl2_model * model = exl2_model_load("models/kjv-6m", mp);
        REQUIRE_MESSAGE(model, exl2_last_error());
        exl2_context * ctx = exl2_context_new(model, exl2_context_default_params());
        REQUIRE_MESSAGE(ctx, exl2_last_error());
        const int32_t ids[] = {1, 306, 337, 5, 99, 1200};
        REQUIRE(exl2_decode(ctx, ids, 6, 1) == EXL2_OK);
        for (int t = 0; t < 6; t++) logits[det].insert(logits[det].end(), exl2_get_logits(ctx, t), exl2_get_logits(ctx, t) + 4096);
        exl2_context_free(ctx);
        exl2_model_free(model);
    }
    REQUIRE(logits[0].size() == logits[1].size());
    CHECK(memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)) == 0);
}

TEST_CASE("c api: generate greedily, context full, truncate") {
    REQUIRE_FIXTURE(ref_path, "kjv-6m/reference.json");
    const exl2::Json ref = exl2::Json::parse_file(ref_path);
    const exl2::Json & r = ref.get("refs")[2];
    exl2_model_params mp = exl2_model_default_params();
    mp.n_threads = 1;
    exl2_model * model = exl2_model_load("models/kjv-6m", mp);
    REQUIRE_MESSAGE(model, exl2_last_error());
    CHECK(exl2_model_n_vocab(model) == 4096);
    CHECK(exl2_model_n_layer(model) == 6);
    CHECK(exl2_model_weight_bytes(model) > 0);
    const exl2_tokenizer * tok = exl2_model_tokenizer(model);
    REQUIRE(tok);
    const std::string prompt = r.get("prompt").as_string();
    // Size query, then the real call.
    int32_t n = exl2_tokenize(tok, prompt.c_str(), -1, nullptr, 0, 1, 0);
    REQUIRE(n > 0);
    std::vector<int32_t> ids((size_t)n);
    REQUIRE(exl2_tokenize(tok, prompt.c_str(), -1, ids.data(), n, 1, 0) == n);
    std::vector<int32_t> want_ids;
    for (const auto & x : r.get("ids").as_array()) want_ids.push_back((int32_t)x.as_int());
    CHECK(ids == want_ids);

    exl2_context_params cp = exl2_context_default_params();
    cp.n_ctx = 80;
    cp.cache_type = EXL2_CACHE_F32;
    exl2_context * ctx = exl2_context_new(model, cp);
    REQUIRE_MESSAGE(ctx, exl2_last_error());
    exl2_sampler_params sp = exl2_sampler_default_params();
    sp.temperature = 0;
    exl2_sampler * smp = exl2_sampler_new(sp);
    REQUIRE(smp);
    REQUIRE(exl2_decode(ctx, ids.data(), n, 0) == EXL2_OK);
    CHECK(exl2_get_logits(ctx, 1) == nullptr);   // only the last row was kept
    std::vector<int32_t> out;
    for (int i = 0; i < 64; i++) {
        int32_t next = exl2_sampler_sample(smp, ctx, -1);
        REQUIRE(next >= 0);
        out.push_back(next);
        if (i < 63) REQUIRE(exl2_decode(ctx, &next, 1, 0) == EXL2_OK);
    }
    std::vector<int32_t> want;
    for (const auto & x : r.get("greedy_ids").as_array()) want.push_back((int32_t)x.as_int());
    CHECK(out == want);
    // The greedy path reads only the sampled id; the logits come on demand and agree with it.
    const float * last = exl2_get_logits(ctx, -1);
    REQUIRE(last);
    CHECK(exl2::argmax(last, 4096) == out.back());
    CHECK(exl2_context_n_past(ctx) == n + 63);
    // 80 slots: 67 used, 20 more do not fit and change nothing.
    std::vector<int32_t> more(20, 5);
    CHECK(exl2_decode(ctx, more.data(), 20, 0) == EXL2_ERR_CONTEXT_FULL);
    CHECK(std::string(exl2_last_error()).find("context full") != std::string::npos);
    CHECK(exl2_context_n_past(ctx) == n + 63);
    CHECK(exl2_context_truncate(ctx, n) == EXL2_OK);
    CHECK(exl2_decode(ctx, more.data(), 20, 1) == EXL2_OK);
    CHECK(exl2_get_logits(ctx, 19) != nullptr);
    // Ids outside the vocabulary are rejected with a message.
    int32_t bad = 4096;
    CHECK(exl2_decode(ctx, &bad, 1, 0) < 0);
    CHECK(std::string(exl2_last_error()).find("4096") != std::string::npos);
    exl2_sampler_free(smp);
    exl2_context_free(ctx);
    exl2_model_free(model);
}

TEST_CASE("c api: memory figures (weights on the backend, KV cache, compute buffer)") {
    exl2_model_params mp = exl2_model_default_params();
    mp.n_threads = 1;
    exl2_model * model = exl2_model_load("models/kjv-6m", mp);
    REQUIRE_MESSAGE(model, exl2_last_error());
    // kjv-6m is unquantized: on the CPU its tensors are used in place from the file mapping.
    CHECK(exl2_model_device_bytes(model) == 0);
    exl2_context_params cp = exl2_context_default_params();
    cp.n_ctx = 80;   // n_batch 512 is clamped to the context: 80-token batches
    cp.cache_type = EXL2_CACHE_F32;
    exl2_context * ctx = exl2_context_new(model, cp);
    REQUIRE_MESSAGE(ctx, exl2_last_error());
    // K and V for 6 layers of 2 KV heads x 64 dims x 80 positions x 4 bytes (40960: already
    // a multiple of the CPU backend's 64-byte alignment).
    CHECK(exl2_context_cache_bytes(ctx) == 2ull * 6 * 2 * 64 * 80 * 4);
    const uint64_t reserved = exl2_context_compute_bytes(ctx);
    CHECK(reserved > 0);
    std::vector<int32_t> ids(80);
    for (int i = 0; i < 80; i++) ids[i] = (i * 37 + 11) % 4096;
    // A full batch keeping the last row's logits fits what was reserved at creation...
    REQUIRE(exl2_decode(ctx, ids.data(), 80, 0) == EXL2_OK);
    CHECK(exl2_context_compute_bytes(ctx) == reserved);
    // ...and the first batch keeping all 80 rows (80 x 4096 floats of logits alone) grows it.
    REQUIRE(exl2_context_truncate(ctx, 0) == EXL2_OK);
    REQUIRE(exl2_decode(ctx, ids.data(), 80, 1) == EXL2_OK);
    CHECK(exl2_context_compute_bytes(ctx) > reserved);
    CHECK(exl2_context_compute_bytes(ctx) >= 80ull * 4096 * 4);
    CHECK(exl2_get_logits(ctx, 79) != nullptr);
    CHECK(exl2_context_cache_bytes(nullptr) == 0);
    CHECK(exl2_context_compute_bytes(nullptr) == 0);
    CHECK(exl2_model_device_bytes(nullptr) == 0);
    exl2_context_free(ctx);
    exl2_model_free(model);
}
