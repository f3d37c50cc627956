// Greedy run-ahead on the CPU backend (forced on: graphs there finish before compute returns, so
// by default it is off) and its C API switch.
#include "fixtures.h"
#include "greedy-run-ahead.h"
#include "sampled-run-ahead.h"

#include "exl2.h"

#include <string>

TEST_CASE("greedy run-ahead: same tokens and logits as without, on kjv-6m") {
    exl2::ModelParams mp;
    mp.n_threads = 2;
    auto model = exl2::Model::load("models/kjv-6m", mp, false);
    exl2::ContextParams cp;
    cp.run_ahead = 1;
    exl2test::check_greedy_run_ahead(*model, cp);

    // By default a host backend does not run ahead: it would only add a step of work to the end.
    exl2::ContextParams dflt;
    dflt.n_ctx = 32;
    exl2::Context c(*model, dflt);
    int32_t t = 5;
    for (int i = 0; i < 4; i++) {
        REQUIRE(c.decode(&t, 1, false));
        t = c.greedy_last();
    }
    CHECK(c.steps_taken_ahead() == 0);
}

TEST_CASE("greedy run-ahead: the C API's switch") {
    exl2_model_params mp = exl2_model_default_params();
    mp.device = "cpu";
    mp.n_threads = 1;
    exl2_model * model = exl2_model_load("models/kjv-6m", mp);
    REQUIRE_MESSAGE(model, exl2_last_error());
    exl2_context_params cp = exl2_context_default_params();
    CHECK(cp.run_ahead == 0);
    cp.n_ctx = 32;
    for (int bad : {2, -2}) {
        cp.run_ahead = bad;
        CHECK(exl2_context_new(model, cp) == nullptr);
        CHECK(std::string(exl2_last_error()).find("run_ahead " + std::to_string(bad)) != std::string::npos);
    }
    // On, through the API's greedy sampler, against off: the same ids.
    std::vector<int32_t> got[2];
    for (int on = 0; on < 2; on++) {
        cp.run_ahead = on ? 1 : -1;
        exl2_context * ctx = exl2_context_new(model, cp);
        REQUIRE_MESSAGE(ctx, exl2_last_error());
        exl2_sampler_params sp = exl2_sampler_default_params();
        sp.temperature = 0;
        exl2_sampler * smp = exl2_sampler_new(sp);
        int32_t t = 5;
        for (int i = 0; i < 12; i++) {
            REQUIRE(exl2_decode(ctx, &t, 1, 0) == EXL2_OK);
            t = exl2_sampler_sample(smp, ctx, -1);
            REQUIRE(t >= 0);
            got[on].push_back(t);
        }
        CHECK(exl2_context_n_past(ctx) == 12);
        exl2_sampler_free(smp);
        exl2_context_free(ctx);
    }
    CHECK(got[0] == got[1]);
    exl2_model_free(model);
}

// The CPU backend draws where the logits are with the host sampler's own code, so every sampled
// step is taken from ahead.
TEST_CASE("sampled run-ahead: same ids and logits as without, every step taken ahead, on kjv-6m") {
    exl2::ModelParams mp;
    mp.n_threads = 2;
    auto model = exl2::Model::load("models/kjv-6m", mp, false);
    exl2::ContextParams cp;
    cp.run_ahead = 1;
    exl2test::check_sampled_run_ahead(*model, cp, 23);
}

TEST_CASE("sampled run-ahead: the backend's draw orders a tie after the temperature as the host does") {
    ggx_backend * be = ggx_backend_init("cpu", 1);
    REQUIRE(be);
    exl2test::check_draw_on_quotient_tie(be);
    ggx_backend_free(be);
}
