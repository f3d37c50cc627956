// Greedy run-ahead (Context::greedy_last) against the same model without it: the same tokens and
// the same logits, the queued step taken when the chosen id is decoded, dropped by any other
// decode or a truncate, and nothing queued at a full cache. Used by the CPU suite (run-ahead
// forced on) and by the GPU suite (on by default there).
// Exact comparison: the step ahead is the same graph with the same inputs (the id copied on the
// device instead of uploaded, the same position), so every kernel sums the same values in the
// same order and the logits are the same bits.
#pragma once

#include "exl2/context.h"
#include "exl2/model.h"

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

namespace exl2test {

inline void check_same_logits(exl2::Context & a, exl2::Context & b, int V, const char * where) {
    const float * la = a.logits(-1);
    const float * lb = b.logits(-1);
    REQUIRE(la);
    REQUIRE(lb);
    int first_diff = -1;
    for (int i = 0; i < V && first_diff < 0; i++)
        if (memcmp(&la[i], &lb[i], sizeof(float)) != 0) first_diff = i;
    CHECK_MESSAGE(first_diff < 0, where << ": logit " << first_diff << " differs: "
                                        << (first_diff >= 0 ? la[first_diff] : 0.0f) << " against "
                                        << (first_diff >= 0 ? lb[first_diff] : 0.0f));
}

// ahead_params: the parameters of the context that runs ahead (run_ahead 1 or 0); n_ctx small
// enough that the loop reaches a full cache.
inline void check_greedy_run_ahead(exl2::Model & model, exl2::ContextParams ahead_params) {
    using exl2::Context;
    const int V = model.cfg.n_vocab;
    const int n_ctx = 48;
    exl2::ContextParams plain_params = ahead_params;
    ahead_params.n_ctx = plain_params.n_ctx = n_ctx;
    plain_params.run_ahead = -1;
    Context a(model, ahead_params), b(model, plain_params);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 8; i++) prompt.push_back((int32_t)((i * 131 + 7) % V));
    REQUIRE(a.decode(prompt.data(), (int)prompt.size(), false));
    REQUIRE(b.decode(prompt.data(), (int)prompt.size(), false));

    // Generation: after the prompt's batch nothing runs ahead; after every single-token step it does.
    const int steps = 20;
    for (int s = 0; s < steps; s++) {
        const int32_t ta = a.greedy_last(), tb = b.greedy_last();
        REQUIRE(ta == tb);
        if (s % 3 == 0) check_same_logits(a, b, V, "logits after a greedy choice");
        if (s % 5 == 1) CHECK(a.greedy_last() == ta);   // asked again: the same id, no second step ahead
        REQUIRE(a.decode(&ta, 1, false));
        REQUIRE(b.decode(&tb, 1, false));
    }
    CHECK(a.steps_taken_ahead() == steps - 1);
    check_same_logits(a, b, V, "logits of a step taken from ahead");
    CHECK(a.n_past() == b.n_past());

    // Another id than the chosen one: the step ahead is dropped and this one runs.
    const long taken = a.steps_taken_ahead();
    int32_t other = (a.greedy_last() + 1) % V;
    REQUIRE(b.greedy_last() + 1 == other + (other == 0 ? V : 0));
    REQUIRE(a.decode(&other, 1, false));
    REQUIRE(b.decode(&other, 1, false));
    CHECK(a.steps_taken_ahead() == taken);
    check_same_logits(a, b, V, "logits after a dropped step");

    // A truncate drops it too; the cache rows it wrote are written again before they are read.
    (void)a.greedy_last();
    (void)b.greedy_last();
    a.truncate(a.n_past() - 3);
    b.truncate(b.n_past() - 3);
    REQUIRE(a.n_past() == b.n_past());
    const int32_t t3[3] = {(int32_t)(5 % V), (int32_t)(77 % V), (int32_t)(300 % V)};
    REQUIRE(a.decode(t3, 3, false));
    REQUIRE(b.decode(t3, 3, false));
    check_same_logits(a, b, V, "logits after a truncate");

    // Asked again after a truncate dropped its step ahead, the sampled row is still itself: its
    // id and logits, not the dropped step's (which overwrote the graph's output and argmax).
    {
        const int32_t ta = a.greedy_last(), tb = b.greedy_last();
        REQUIRE(ta == tb);
        REQUIRE(a.decode(&ta, 1, false));
        REQUIRE(b.decode(&tb, 1, false));
        const long before = a.steps_taken_ahead();
        REQUIRE(a.greedy_last() == b.greedy_last());   // a queues the next step here
        a.truncate(a.n_past() - 1);
        b.truncate(b.n_past() - 1);
        CHECK(a.greedy_last() == b.greedy_last());
        check_same_logits(a, b, V, "logits after a truncate dropped the step ahead");
        CHECK(a.steps_taken_ahead() == before);
    }

    // Up to a full cache: the last choice has no room for a step ahead.
    while (b.n_past() < n_ctx) {
        const int32_t ta = a.greedy_last(), tb = b.greedy_last();
        REQUIRE(ta == tb);
        REQUIRE(a.decode(&ta, 1, false));
        REQUIRE(b.decode(&tb, 1, false));
    }
    CHECK(a.n_past() == n_ctx);
    const int32_t last = a.greedy_last();
    CHECK(last == b.greedy_last());
    check_same_logits(a, b, V, "logits at a full cache");
    CHECK_FALSE(a.decode(&last, 1, false));
    CHECK(a.n_past() == n_ctx);
}

}  // namespace exl2test
