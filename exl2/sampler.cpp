#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace exl2 {

int32_t argmax(const float * v, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

Sampler::Sampler(const SamplerParams & p) : p_(p), rng_(p.seed) {}

int32_t Sampler::sample(const float * logits, int n_vocab) {
    const float * l = logits;
    // Repetition penalty (HF style: positive logits divided, negative multiplied) over the window.
    if (p_.repetition_penalty != 1.0f && !history_.empty()) {
        work_.assign(logits, logits + n_vocab);
        const size_t start = p_.repetition_range > 0 && history_.size() > (size_t)p_.repetition_range
                                 ? history_.size() - (size_t)p_.repetition_range : 0;
        std::unordered_set<int32_t> seen(history_.begin() + (long)start, history_.end());
        for (int32_t id : seen) {
            if (id < 0 || id >= n_vocab) continue;
            float & x = work_[id];
            x = x > 0 ? x / p_.repetition_penalty : x * p_.repetition_penalty;
        }
        l = work_.data();
    }
    int32_t chosen;
    if (p_.temperature <= 0.0f || p_.top_k == 1) {
        chosen = argmax(l, n_vocab);
    } else {
        cands_.resize(n_vocab);
        for (int i = 0; i < n_vocab; i++) cands_[i] = {i, l[i] / p_.temperature, 0.0f};
        auto by_logit = [](const Cand & a, const Cand & b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
        size_t n = cands_.size();
        if (p_.top_k > 0 && (size_t)p_.top_k < n) {
            std::partial_sort(cands_.begin(), cands_.begin() + p_.top_k, cands_.end(), by_logit);
            n = (size_t)p_.top_k;
        } else {
            std::sort(cands_.begin(), cands_.end(), by_logit);
        }
        const float mx = cands_[0].logit;
        double sum = 0;
        for (size_t i = 0; i < n; i++) { cands_[i].p = std::exp(cands_[i].logit - mx); sum += cands_[i].p; }
        for (size_t i = 0; i < n; i++) cands_[i].p = (float)(cands_[i].p / sum);
        if (p_.min_p > 0) {
            const float thr = cands_[0].p * p_.min_p;
            size_t k = 1;
            while (k < n && cands_[k].p >= thr) k++;
            n = k;
        }
        if (p_.top_p > 0 && p_.top_p < 1) {
            double cum = 0;
            size_t k = 0;
            while (k < n) { cum += cands_[k].p; k++; if (cum >= p_.top_p) break; }
            n = k;
        }
        double total = 0;
        for (size_t i = 0; i < n; i++) total += cands_[i].p;
        std::uniform_real_distribution<double> U(0.0, total);
        double r = U(rng_), acc = 0;
        chosen = cands_[n - 1].id;
        for (size_t i = 0; i < n; i++) {
            acc += cands_[i].p;
            if (r < acc) { chosen = cands_[i].id; break; }
        }
    }
    history_.push_back(chosen);
    return chosen;
}

}  // namespace exl2
