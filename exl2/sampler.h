// Token sampling: repetition penalty, temperature, top-k, top-p (smallest prefix whose mass
// reaches p), min-p, then a seeded draw. Temperature <= 0 is greedy (ties to the lowest id).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace exl2 {

struct SamplerParams {
    float temperature = 0.8f;
    int top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    float repetition_penalty = 1.0f;
    int repetition_range = 64;
    uint64_t seed = 0;
};

class Sampler {
public:
    explicit Sampler(const SamplerParams & p);
    int32_t sample(const float * logits, int n_vocab);
    void accept(int32_t id) { history_.push_back(id); }
    const SamplerParams & params() const { return p_; }
    // The choice is the argmax of the logits as they are (no penalty applies to them).
    bool greedy() const {
        return (p_.temperature <= 0.0f || p_.top_k == 1) && (p_.repetition_penalty == 1.0f || history_.empty());
    }

    struct Cand { int32_t id; float logit; float p; };

private:
    size_t rank_candidates(const float * l, int n_vocab);
    SamplerParams p_;
    std::mt19937_64 rng_;
    std::vector<int32_t> history_;
    std::vector<Cand> cands_;
    std::vector<float> work_;
};

// Index of the largest value, lowest index on ties.
int32_t argmax(const float * v, int n);

}  // namespace exl2
