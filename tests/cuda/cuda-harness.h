// Test harness for the GPU suite: runs one graph builder on the CUDA backend and on the CPU
// reference backend with identical inputs and compares the outputs.
//
//   auto out = run_both([&](GraphRun & r) {
//       ggx_tensor * x = r.input_f32({64, 3}, 1.0f);     // random, same values on both backends
//       return ggx_rms_norm(r.ctx, x, nullptr, 1e-5f);
//   });
//   check_close(out.cuda, out.cpu, tol, "rms_norm");
//
// Every test starts with REQUIRE_CUDA(): without a usable GPU it skips with a message.
#pragma once

#include "ggx/fp16.h"
#include "ggx/ggx-backend.h"
#include "ggx/ggx.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace exl2 { struct QLayerHost; }

namespace cudatest {

// The shared CUDA backend of this process (nullptr, with a message printed once, if none).
ggx_backend * cuda_backend();
ggx_backend * cpu_backend();

struct GraphRun {
    ggx_backend * be = nullptr;
    ggx_context * ctx = nullptr;
    std::mt19937_64 rng{1234};
    std::vector<std::pair<ggx_tensor *, std::vector<uint8_t>>> inputs;
    std::vector<std::pair<ggx_tensor *, void *>> qweights;   // uploaded quantized layers

    ggx_tensor * input(ggx_type type, std::vector<int64_t> ne, std::vector<uint8_t> bytes);
    // Random values uniform in [-amp, amp], stored as `type` (f32/f16/bf16).
    ggx_tensor * input_rand(ggx_type type, std::vector<int64_t> ne, float amp = 1.0f);
    ggx_tensor * input_f32(std::vector<int64_t> ne, float amp = 1.0f) { return input_rand(GGX_TYPE_F32, ne, amp); }
    ggx_tensor * input_i32(std::vector<int64_t> ne, const std::vector<int32_t> & v);
    // Uploads a quantized layer (EXL2/GPTQ) to this run's backend; released after the run.
    ggx_tensor * qweight(const exl2::QLayerHost & L);
    float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }
};

struct Output {
    ggx_type type = GGX_TYPE_F32;
    std::vector<uint8_t> bytes;
    std::vector<float> f;         // bytes as float (f32/f16/bf16/i32)
};

using Builder = std::function<ggx_tensor *(GraphRun &)>;

// Builds, plans, uploads, computes `reps` times (inputs set before each), downloads. Throws a
// doctest failure on any backend error.
Output run_graph(ggx_backend * be, const Builder & build, int reps = 1);

struct Both { Output cuda, cpu; };
Both run_both(const Builder & build);

// |a - ref| <= atol + rtol * |ref| for every element; reports the worst element and the count
// outside. Returns true when all pass.
bool check_close(const std::vector<float> & a, const std::vector<float> & ref, float atol, float rtol, const std::string & what);
// Per-element bounds: |a - ref| <= bound[i].
bool check_bound(const std::vector<float> & a, const std::vector<double> & ref, const std::vector<double> & bound,
                 const std::string & what);

// Without a GPU the cases skip, so that CI can build and start the suite; where one must be
// there (EXL2_REQUIRE_GPU=1, set by bench/device-suite.sh) its absence fails every case instead of
// passing them all with no assertion.
inline bool gpu_required() {
    const char * v = getenv("EXL2_REQUIRE_GPU");
    return v && *v && strcmp(v, "0") != 0;
}

}  // namespace cudatest

#define REQUIRE_CUDA()                                                                            \
    if (!cudatest::cuda_backend()) {                                                              \
        const std::string why_ = ggx_last_error();                                                \
        if (cudatest::gpu_required()) FAIL("no usable GPU, and EXL2_REQUIRE_GPU is set: " << why_); \
        MESSAGE("skipped: no usable CUDA device: " << why_);                                      \
        return;                                                                                   \
    }
