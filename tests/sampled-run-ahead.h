// Sampled run-ahead (Context::sample_ahead through exl2::sample_last) against the same model
// without it: the same ids drawn step after step (the host's draw from the candidates decides),
// the same logits (the step ahead is the same graph with the same inputs), the queued step taken
// whenever the device's draw agreed, and dropped by another id. Used by the CPU suite (run-ahead
// forced on, the CPU backend's draw) and by the GPU suite.
#pragma once

#include "greedy-run-ahead.h"

#include "exl2/sample-last.h"
#include "exl2/sampler.h"
#include "ggx/ggx-backend.h"

namespace exl2test {

// min_taken: single-token steps that must have been taken from ahead out of `steps` - 1 (all on
// the CPU, whose draw is the host's own code; a GPU's expf may differ by ulps near a boundary).
// hot_draws_vary: whether the model's logits are spread enough that hot draws leave the argmax
// (kjv-6m; a random synthetic model's rows can be too peaked for that).
inline void check_sampled_run_ahead(exl2::Model & model, exl2::ContextParams ahead_params, long min_taken,
                                    bool hot_draws_vary = true) {
    using exl2::Context;
    const int V = model.cfg.n_vocab;
    exl2::ContextParams plain_params = ahead_params;
    ahead_params.n_ctx = plain_params.n_ctx = 64;
    plain_params.run_ahead = -1;
    Context a(model, ahead_params), b(model, plain_params);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 6; i++) prompt.push_back((int32_t)((i * 97 + 3) % V));
    REQUIRE(a.decode(prompt.data(), (int)prompt.size(), false));
    REQUIRE(b.decode(prompt.data(), (int)prompt.size(), false));
    exl2::SamplerParams sp;   // main's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
    sp.seed = 21;
    exl2::Sampler sa(sp), sb(sp);
    const int steps = 24;
    for (int s = 0; s < steps; s++) {
        const int32_t ta = exl2::sample_last(a, sa), tb = exl2::sample_last(b, sb);
        REQUIRE_MESSAGE(ta == tb, "step " << s);
        if (s % 4 == 1) check_same_logits(a, b, V, "logits after a sampled choice");
        REQUIRE(a.decode(&ta, 1, false));
        REQUIRE(b.decode(&tb, 1, false));
    }
    CHECK(a.steps_taken_ahead() >= min_taken);
    CHECK(a.steps_taken_ahead() <= steps - 1);
    check_same_logits(a, b, V, "logits of a step taken from ahead");

    // Another id than the one drawn: the step ahead is dropped and this one runs.
    const long taken = a.steps_taken_ahead();
    const int32_t ta = exl2::sample_last(a, sa), tb = exl2::sample_last(b, sb);
    REQUIRE(ta == tb);
    const int32_t other = (ta + 1) % V;
    REQUIRE(a.decode(&other, 1, false));
    REQUIRE(b.decode(&other, 1, false));
    CHECK(a.steps_taken_ahead() == taken);
    check_same_logits(a, b, V, "logits after a dropped sampled step");

    // A penalty makes the draw depend on more than the device's ranking: no run-ahead, same ids.
    exl2::SamplerParams pp = sp;
    pp.repetition_penalty = 1.2f;
    exl2::Sampler pa(pp), pb(pp);
    for (int s = 0; s < 6; s++) {
        const int32_t xa = exl2::sample_last(a, pa), xb = exl2::sample_last(b, pb);
        REQUIRE(xa == xb);
        REQUIRE(a.decode(&xa, 1, false));
        REQUIRE(b.decode(&xb, 1, false));
    }
    CHECK(a.steps_taken_ahead() == taken);
    check_same_logits(a, b, V, "logits after penalised draws");

    // A greedy choice on logits that a sampled step was queued for is their argmax, not the draw
    // (session 23's review found greedy_last handing out the queued draw). A hot sampler makes the
    // draw differ from the argmax on most steps, so that the check can fail.
    exl2::SamplerParams hp = sp;
    hp.temperature = 1.5f;
    exl2::SamplerParams gp = sp;
    gp.temperature = 0.0f;
    exl2::Sampler ha(hp), hb(hp), ga(gp), gb(gp);
    int draws_off_argmax = 0;
    for (int s = 0; s < 8; s++) {
        const int32_t xa = exl2::sample_last(a, ha), xb = exl2::sample_last(b, hb);
        REQUIRE(xa == xb);
        const int32_t best = exl2::argmax(b.logits(-1), V);
        draws_off_argmax += xb != best;
        const int32_t ya = exl2::sample_last(a, ga), yb = exl2::sample_last(b, gb);
        CHECK_MESSAGE(ya == best, "step " << s << ": greedy after a sampled draw " << xa);
        CHECK(yb == best);
        REQUIRE(a.decode(&ya, 1, false));
        REQUIRE(b.decode(&yb, 1, false));
    }
    if (hot_draws_vary) CHECK_MESSAGE(draws_off_argmax > 0, "vocab " << V << ": every hot draw was the argmax");
    check_same_logits(a, b, V, "logits after greedy choices on sampled rows");
}

// A backend's draw (top_n_begin) against the host's exact draw from the same candidates, on a row
// whose two best values tie after the temperature's division (1.60000014f and 1.60000026f at t =
// 0.8), the larger at the higher id: the backend ranks by value, the host by value / t then id, so
// without ggx_draw_order every draw here took the other id. p is 1/2 each, exactly (exp(0)).
inline void check_draw_on_quotient_tie(ggx_backend * be) {
    REQUIRE((be->iface.top_n_begin && be->iface.top_n_end));
    const int V = 1000;
    const float lo = 1.60000014f, hi = 1.60000026f, t = 0.8f;
    REQUIRE(lo < hi);
    REQUIRE(lo / t == hi / t);   // the tie this case is about
    std::vector<float> row((size_t)V);
    for (int i = 0; i < V; i++) row[(size_t)i] = -10.0f - 0.001f * (float)i;
    row[5] = lo;
    row[9] = hi;
    void * buf = nullptr, * id_buf = nullptr;
    REQUIRE(be->iface.alloc(be, row.size() * sizeof(float), &buf) == GGX_STATUS_OK);
    REQUIRE(be->iface.set(be, buf, row.data(), row.size() * sizeof(float)) == GGX_STATUS_OK);
    REQUIRE(be->iface.alloc(be, sizeof(int32_t), &id_buf) == GGX_STATUS_OK);
    exl2::SamplerParams sp;
    sp.top_k = 2;
    sp.temperature = t;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    int drew[2] = {0, 0};   // draws of id 5, of id 9
    for (uint64_t seed = 1; seed <= 16; seed++) {
        sp.seed = seed;
        exl2::Sampler s(sp);
        const int n = s.top_needed(V, GGX_BACKEND_TOP_MAX);
        ggx_draw d;
        REQUIRE(n >= 2);
        REQUIRE(s.device_draw(V, GGX_BACKEND_TOP_MAX, &d));
        REQUIRE(be->iface.top_n_begin(be, buf, V, n, &d, id_buf) == GGX_STATUS_OK);
        int32_t ids[GGX_BACKEND_TOP_MAX], guess = -1, chosen = -1;
        float vals[GGX_BACKEND_TOP_MAX];
        REQUIRE(be->iface.top_n_end(be, ids, vals, &guess) == GGX_STATUS_OK);
        REQUIRE(s.sample_top(ids, vals, n, V, &chosen));
        CHECK_MESSAGE(guess == chosen, "seed " << seed << ": the backend drew " << guess << ", the host " << chosen);
        drew[chosen == 9]++;
    }
    CHECK(drew[0] > 0);
    CHECK(drew[1] > 0);
    be->iface.dealloc(be, buf);
    be->iface.dealloc(be, id_buf);
}

}  // namespace exl2test
