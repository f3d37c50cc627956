// Synthetic EXL2 models (exl2/synthetic-model.h): valid layers at the requested bit rate,
// reproducible bytes, a folder that loads through the ordinary loader, clear errors.
#include "exl2/context.h"
#include "exl2/error.h"
#include "exl2/model.h"
#include "exl2/synthetic-model.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

using namespace exl2;

TEST_CASE("synthetic model: shapes, bit rate, reproducibility") {
    SyntheticModel a = synthetic_build("llama3.2-1b", 3.0, 1, 7);
    const SyntheticSpec & sp = synthetic_spec("llama3.2-1b");
    CHECK(a.config.get_int("num_hidden_layers", 0) == 1);
    CHECK(a.config.get_int("hidden_size", 0) == sp.n_embd);
    const StTensor & qw = a.st->get("model.layers.0.mlp.down_proj.q_weight");
    CHECK(qw.shape[1] == sp.n_embd);                        // Np = N (a multiple of 32)
    CHECK(a.st->has("lm_head.q_weight"));
    CHECK(!a.st->has("model.layers.1.mlp.down_proj.q_weight"));
    // the closest converter option, not the exact target: within half a bit
    CHECK(a.bpw_layers > 2.5);
    CHECK(a.bpw_layers < 3.5);
    CHECK(a.bpw_head > 5.5);
    SyntheticModel b = synthetic_build("llama3.2-1b", 3.0, 1, 7);
    const StTensor & qb = b.st->get("model.layers.0.mlp.down_proj.q_weight");
    REQUIRE(qb.nbytes == qw.nbytes);
    CHECK(memcmp(qb.data, qw.data, qw.nbytes) == 0);
    SyntheticModel c = synthetic_build("llama3.2-1b", 3.0, 1, 8);
    CHECK(memcmp(c.st->get("model.layers.0.mlp.down_proj.q_weight").data, qw.data, qw.nbytes) != 0);
}

TEST_CASE("synthetic model: bad arguments are errors naming the value") {
    CHECK_THROWS_WITH_AS(synthetic_build("llama9-1t", 4.0, 1, 1), doctest::Contains("llama9-1t"), Error);
    CHECK_THROWS_WITH_AS(synthetic_build("llama3-8b", 1.0, 1, 1), doctest::Contains("bpw"), Error);
    CHECK_THROWS_WITH_AS(synthetic_build("llama3-8b", 4.0, 33, 1), doctest::Contains("33 layers"), Error);
}

TEST_CASE("synthetic model: saved folder loads and runs on the CPU") {
    char tmpl[] = "/tmp/exl2-synth-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    const std::string dir = std::string(tmpl) + "/m";
    synthetic_save("llama3.2-1b", 4.0, 1, 3, dir);
    CHECK_THROWS_AS(synthetic_save("llama3.2-1b", 4.0, 1, 3, dir), Error);   // never overwrites
    ModelParams p;
    p.device = "cpu";
    auto m = Model::load(dir, p);
    CHECK(m->cfg.n_layer == 1);
    ContextParams cp;
    cp.n_ctx = 16;
    cp.n_batch = 4;
    Context ctx(*m, cp);
    const int32_t ids[3] = {1, 100, 200};
    REQUIRE(ctx.decode(ids, 3, false));
    const float * l = ctx.logits(-1);
    REQUIRE(l != nullptr);
    bool finite = true;
    for (int i = 0; i < m->cfg.n_vocab; i++) finite = finite && std::isfinite(l[i]);
    CHECK(finite);
    for (const char * f : {"config.json", "output.safetensors", "tokenizer.json"}) unlink((dir + "/" + f).c_str());
    rmdir(dir.c_str());
    rmdir(tmpl);
}
