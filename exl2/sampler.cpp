#include "sampler.h"

#include "ggx/ggx-draw.h"

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

// c[i].p = exp(c[i].logit - mx) / sum over c[0, n), the sum taken in double in c's order; returns
// it. The backends' draws (ggx_backend_i::top_n_begin) compute the same with the same code.
static double to_probabilities(Sampler::Cand * c, size_t n, float mx) {
    return ggx_draw_probabilities((int)n, mx, [c](int i) { return c[i].logit; }, [c](int i) -> float & { return c[i].p; });
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

std::vector<int32_t> Sampler::penalty_window() const {
    const size_t start = p_.repetition_range > 0 && history_.size() > (size_t)p_.repetition_range
                             ? history_.size() - (size_t)p_.repetition_range : 0;
    std::unordered_set<int32_t> seen(history_.begin() + (long)start, history_.end());
    return std::vector<int32_t>(seen.begin(), seen.end());
}

// The uniform of the next draw, scaled by the candidates' total in ggx_draw_select. It is what
// std::uniform_real_distribution<double>(0, total) used before (libstdc++ takes one
// generate_canonical and scales it: the exact-draw tests against that reference still pass), and
// a copy of the engine tells a device in advance which u the host will use (device_draw).
static double next_uniform(std::mt19937_64 & g) { return std::generate_canonical<double, 53>(g); }

int32_t Sampler::draw(size_t n) {
    const int i = ggx_draw_select([this](int j) { return cands_[(size_t)j].p; }, (int)n, p_.min_p, p_.top_p, next_uniform(rng_));
    return cands_[(size_t)i].id;
}

bool Sampler::device_draw(int n_vocab, int cap, ggx_draw * d) const {
    if (!top_k_draw(n_vocab) || p_.top_k + 1 > cap || penalized()) return false;
    std::mt19937_64 peek = rng_;
    d->temperature = p_.temperature;
    d->top_k = p_.top_k;
    d->top_p = p_.top_p;
    d->min_p = p_.min_p;
    d->u = next_uniform(peek);
    return true;
}

int32_t Sampler::sample(const float * logits, int n_vocab) {
    const float * l = logits;
    // Repetition penalty (HF style: positive logits divided, negative multiplied) over the window.
    if (penalized()) {
        work_.assign(logits, logits + n_vocab);
        for (int32_t id : penalty_window())
            if (id >= 0 && id < n_vocab) work_[id] = penalize(work_[id]);
        l = work_.data();
    }
    const int32_t chosen = p_.temperature <= 0.0f || p_.top_k == 1 ? argmax(l, n_vocab) : draw(rank_candidates(l, n_vocab));
    history_.push_back(chosen);
    return chosen;
}

int Sampler::top_needed(int n_vocab, int cap) const {
    if (!top_k_draw(n_vocab)) return 0;
    // A penalty of at least 1 only lowers logits, so the k best after it are among the k + P best
    // before it (P penalized ids), plus one more to show that nothing left out ties with them.
    size_t need = (size_t)p_.top_k + 1;
    if (penalized()) {
        if (p_.repetition_penalty < 1.0f) return 0;   // it raises logits: any id could rise
        need += penalty_window().size();
    }
    return need <= (size_t)cap ? (int)std::min(need, (size_t)n_vocab) : 0;
}

// The k best of the whole row by (l / t, then id) are the k best of these n when the k-th of them
// is strictly better than any logit left out: those are at most the lowest of the n before the
// penalty (which only lowers them), and so at most that / t after it. Ties and NaN fall back.
bool Sampler::sample_top(const int32_t * ids, const float * vals, int n, int n_vocab, int32_t * chosen) {
    const size_t k = (size_t)p_.top_k;
    if (!top_k_draw(n_vocab) || n < 1 || (size_t)n < std::min(k + 1, (size_t)n_vocab) || (penalized() && p_.repetition_penalty < 1.0f))
        return false;
    const float t = p_.temperature;
    std::vector<int32_t> window;
    if (penalized()) {
        window = penalty_window();
        std::sort(window.begin(), window.end());
    }
    cands_.resize((size_t)n);
    float lowest = INFINITY;   // the n-th best raw logit: nothing left out is above it
    for (int i = 0; i < n; i++) {
        if (std::isnan(vals[i]) || ids[i] < 0 || ids[i] >= n_vocab) return false;
        float x = vals[i];
        lowest = std::min(lowest, x);
        if (std::binary_search(window.begin(), window.end(), ids[i])) x = penalize(x);
        cands_[(size_t)i] = {ids[i], x / t, 0.0f};
    }
    std::sort(cands_.begin(), cands_.end(), by_logit);
    if ((size_t)n < (size_t)n_vocab && !(cands_[k - 1].logit > lowest / t)) return false;
    to_probabilities(cands_.data(), k, cands_[0].logit);
    *chosen = draw(k);
    history_.push_back(*chosen);
    return true;
}

}  // namespace exl2
