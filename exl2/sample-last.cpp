#include "sample-last.h"

#include "ggx/ggx-backend.h"

namespace exl2 {

int32_t sample_last(Context & c, Sampler & s) {
    const int V = c.model().cfg.n_vocab;
    if (s.greedy()) {
        const int32_t id = c.greedy_last();
        s.accept(id);
        return id;
    }
    const int n = s.top_needed(V, GGX_BACKEND_TOP_MAX);
    if (n > 0) {
        int32_t ids[GGX_BACKEND_TOP_MAX], chosen = -1, guess = -1;
        float vals[GGX_BACKEND_TOP_MAX];
        ggx_draw d;
        const bool have = (s.device_draw(V, GGX_BACKEND_TOP_MAX, &d) && c.sample_ahead(n, d, ids, vals, &guess)) ||
                          c.top_candidates(n, ids, vals);
        if (have && s.sample_top(ids, vals, n, V, &chosen)) return chosen;
    }
    return s.sample(c.logits(-1), V);
}

}  // namespace exl2
