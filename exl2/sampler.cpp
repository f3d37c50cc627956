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

// Best first: the larger logit, then the lower id.
static bool by_logit(const Sampler::Cand & a, const Sampler::Cand & b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// c[i].p = exp(c[i].logit - mx) / sum over c[0, n), the sum taken in double in c's order; returns it.
static double to_probabilities(Sampler::Cand * c, size_t n, float mx) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) { c[i].p = std::exp(c[i].logit - mx); sum += c[i].p; }
    for (size_t i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
    return sum;
}

// Fills cands_[0, n) best first with their probabilities and returns n. With top-k, the k best
// (one pass keeping a heap of k: sorting the whole vocabulary cost ~11 ms per token at 128k
// entries), their probabilities over the k. Without, the probabilities over the whole vocabulary;
// min-p's survivors are a prefix of the ranking (p grows with the logit), so only they are ranked,
// and under top-p only as far as its prefix reaches.
size_t Sampler::rank_candidates(const float * l, int n_vocab) {
    const float t = p_.temperature;
    if (p_.top_k > 0 && p_.top_k < n_vocab) {
        const size_t k = (size_t)p_.top_k;
        cands_.clear();
        float worst = -INFINITY;   // the raw logit of the worst kept, once k are kept
        for (int i = 0; i < n_vocab; i++) {
            // l / t is monotone in l, and ids only grow: a smaller raw logit cannot beat the worst
            if (l[i] < worst) continue;
            const Cand c = {i, l[i] / t, 0.0f};
            if (cands_.size() < k) {
                cands_.push_back(c);
                std::push_heap(cands_.begin(), cands_.end(), by_logit);   // front: the worst kept
            } else if (by_logit(c, cands_.front())) {
                std::pop_heap(cands_.begin(), cands_.end(), by_logit);
                cands_.back() = c;
                std::push_heap(cands_.begin(), cands_.end(), by_logit);
            } else {
                continue;
            }
            if (cands_.size() == k) worst = l[cands_.front().id];
        }
        std::sort_heap(cands_.begin(), cands_.end(), by_logit);
        to_probabilities(cands_.data(), k, cands_[0].logit);
        return k;
    }
    cands_.resize((size_t)n_vocab);
    float mx = -INFINITY;
    for (int i = 0; i < n_vocab; i++) {
        cands_[i] = {i, l[i] / t, 0.0f};
        mx = std::max(mx, cands_[i].logit);
    }
    const double sum = to_probabilities(cands_.data(), cands_.size(), mx);
    size_t n = cands_.size();
    if (p_.min_p > 0) {
        const float thr = (float)(1.0 / sum) * p_.min_p;   // the best one's p times min_p
        n = (size_t)(std::partition(cands_.begin(), cands_.end(), [thr](const Cand & c) { return c.p >= thr; }) - cands_.begin());
    }
    if (p_.top_p > 0 && p_.top_p < 1) {
        // rank a window; widen it while the window's mass stays below top_p
        for (size_t w = 1024; w < n; w *= 4) {
            std::partial_sort(cands_.begin(), cands_.begin() + (long)w, cands_.begin() + (long)n, by_logit);
            double cum = 0;
            for (size_t i = 0; i < w; i++) cum += cands_[i].p;
            if (cum >= p_.top_p) return n;   // the top-p prefix ends inside the ranked window
        }
    }
    std::sort(cands_.begin(), cands_.begin() + (long)n, by_logit);
    return n;
}

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
        size_t n = rank_candidates(l, n_vocab);
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
