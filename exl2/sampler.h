// Token sampling: repetition penalty, temperature, top-k, top-p (smallest prefix whose mass
// reaches p), min-p, then a seeded draw. Temperature <= 0 is greedy (ties to the lowest id).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

struct ggx_draw;

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
    // A top-k draw depends only on the best logits of the row, so a backend can rank the row where
    // it is and hand over a few candidates instead of the whole vocabulary. top_needed: how many of
    // the row's best raw logits (at most `cap`) sample_top wants, or 0 when the draw needs the
    // whole row (greedy, no top-k, a penalty below 1, or more than cap).
    int top_needed(int n_vocab, int cap) const;
    // Draws from the n best raw logits of a row of n_vocab (ids / vals best first: larger value,
    // then lower id) exactly what sample() draws from the whole row. False, with nothing drawn or
    // recorded, when those n do not decide it (a tie with the logits left out, or a NaN).
    bool sample_top(const int32_t * ids, const float * vals, int n, int n_vocab, int32_t * chosen);
    // The parameters of the next draw for a backend that draws where the logits are (ggx_draw:
    // top-k, temperature, min-p, top-p and the uniform the host's next draw will use), when
    // top_needed's candidates are k + 1 (no penalty applies) and k + 1 <= cap; else false. The
    // host still draws (sample_top): a device's choice is only a guess to run ahead with.
    bool device_draw(int n_vocab, int cap, struct ggx_draw * d) const;
    const SamplerParams & params() const { return p_; }
    // The choice is the argmax of the logits as they are (no penalty applies to them).
    bool greedy() const {
        return (p_.temperature <= 0.0f || p_.top_k == 1) && (p_.repetition_penalty == 1.0f || history_.empty());
    }

    struct Cand { int32_t id; float logit; float p; };

private:
    size_t rank_candidates(const float * l, int n_vocab);
    // A seeded draw among the top k of a longer row: what top_needed, sample_top and device_draw
    // can serve from candidates.
    bool top_k_draw(int n_vocab) const { return p_.temperature > 0.0f && p_.top_k > 1 && p_.top_k < n_vocab; }
    bool penalized() const { return p_.repetition_penalty != 1.0f && !history_.empty(); }
    std::vector<int32_t> penalty_window() const;   // the distinct ids the penalty applies to
    float penalize(float x) const { return x > 0 ? x / p_.repetition_penalty : x * p_.repetition_penalty; }
    int32_t draw(size_t n);   // min-p, top-p and the seeded draw over cands_[0, n)
    SamplerParams p_;
    std::mt19937_64 rng_;
    std::vector<int32_t> history_;
    std::vector<Cand> cands_;
    std::vector<float> work_;
};

// Index of the largest value, lowest index on ties.
int32_t argmax(const float * v, int n);

}  // namespace exl2
