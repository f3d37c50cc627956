// The graph planner (ggx_graph_plan / ggx_graph_bind): memory is reused between tensors whose
// lifetimes do not overlap, and reuse never changes results. Each graph is built twice from the
// same recipe: once planned normally, once with every node given its own memory up front (the
// planner then has nothing to share). Both run on the CPU backend and must agree bit for bit.
#include "ggx/ggx-backend.h"
#include "ggx/ggx.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

namespace {

struct Graph {
    ggx_context * ctx = nullptr;
    ggx_graph * g = nullptr;
    std::vector<ggx_tensor *> inputs;    // INPUT leaves, filled with the same values in both runs
    std::vector<ggx_tensor *> outputs;   // compared between runs
    std::vector<ggx_tensor *> written;   // inputs written in place (caches)
};

// Builds a recipe into a fresh context: fn creates inputs and ops and names outputs.
using Recipe = std::function<void(Graph &)>;

ggx_tensor * new_input(Graph & G, ggx_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
    const int64_t ne[3] = {ne0, ne1, ne2};
    ggx_tensor * t = ggx_new_tensor(G.ctx, type, 3, ne);
    t->flags |= GGX_FLAG_INPUT;
    G.inputs.push_back(t);
    return t;
}

size_t aligned(size_t n, size_t a) { return (n + a - 1) / a * a; }

struct Run {
    std::vector<std::vector<uint8_t>> outputs;
    std::vector<std::vector<uint8_t>> inputs_after;   // inputs read back after compute
    size_t planned = 0;        // buffer size the planner asked for
    size_t sum_of_nodes = 0;   // what one buffer per node (and per input) would take
};

// A fresh context and graph from the recipe, its outputs marked.
Graph build(const Recipe & recipe) {
    Graph G;
    G.ctx = ggx_context_new();
    G.g = ggx_graph_new(G.ctx);
    recipe(G);
    for (ggx_tensor * o : G.outputs) {
        o->flags |= GGX_FLAG_OUTPUT;
        ggx_graph_build(G.g, o);
    }
    return G;
}

// Plans (optionally after giving every node its own memory), fills inputs from a seeded RNG,
// computes, and reads outputs and inputs back.
Run run(const Recipe & recipe, bool separate, uint64_t seed) {
    ggx_backend * be = ggx_backend_cpu_init(2);
    REQUIRE(be != nullptr);
    Graph G = build(recipe);
    std::vector<void *> mem;
    Run r;
    for (int i = 0; i < ggx_graph_n_nodes(G.g); i++) {
        ggx_tensor * n = ggx_graph_node(G.g, i);
        if (n->view_src) continue;
        r.sum_of_nodes += aligned(ggx_nbytes(n), be->alignment);
        if (separate) {
            void * p = nullptr;
            REQUIRE(be->iface.alloc(be, ggx_nbytes(n), &p) == GGX_STATUS_OK);
            memset(p, 0xEE, ggx_nbytes(n));
            mem.push_back(p);
            n->data = p;
        }
    }
    for (ggx_tensor * t : G.inputs) r.sum_of_nodes += aligned(ggx_nbytes(t), be->alignment);
    r.planned = ggx_graph_plan(G.g, be->alignment);
    void * buf = nullptr;
    REQUIRE(be->iface.alloc(be, r.planned, &buf) == GGX_STATUS_OK);
    memset(buf, 0xEE, r.planned);   // stale bytes, so a read-before-write shows up as a difference
    mem.push_back(buf);
    ggx_graph_bind(G.g, buf);

    std::mt19937_64 rng(seed);
    std::vector<std::vector<uint8_t>> in_bytes;
    for (ggx_tensor * t : G.inputs) {
        std::vector<uint8_t> b(ggx_nbytes(t));
        if (!t->data) {   // not reached from any output: not in the graph
            in_bytes.push_back(b);
            continue;
        }
        if (t->type == GGX_TYPE_I32) {
            // positions 0..T-1 (the recipes use i32 inputs only as positions)
            for (size_t i = 0; i < b.size() / 4; i++) {
                const int32_t v = (int32_t)i + 3;
                memcpy(&b[i * 4], &v, 4);
            }
        } else {
            for (size_t i = 0; i < b.size() / 4; i++) {
                const float v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
                memcpy(&b[i * 4], &v, 4);
            }
        }
        REQUIRE(ggx_backend_tensor_set(be, t, b.data(), 0, b.size()) == GGX_STATUS_OK);
        in_bytes.push_back(b);
    }
    const ggx_status st = ggx_backend_graph_compute(be, G.g);
    INFO(ggx_last_error());
    REQUIRE(st == GGX_STATUS_OK);
    for (ggx_tensor * o : G.outputs) {
        std::vector<uint8_t> b(ggx_nbytes(o));
        REQUIRE(ggx_backend_tensor_get(be, o, b.data(), 0, b.size()) == GGX_STATUS_OK);
        r.outputs.push_back(b);
    }
    for (ggx_tensor * t : G.inputs) {
        std::vector<uint8_t> b(ggx_nbytes(t));
        if (t->data) REQUIRE(ggx_backend_tensor_get(be, t, b.data(), 0, b.size()) == GGX_STATUS_OK);
        r.inputs_after.push_back(b);
    }
    // Inputs must survive the graph (the host may reuse them), except caches written in place.
    for (size_t i = 0; i < G.inputs.size(); i++)
        if (std::find(G.written.begin(), G.written.end(), G.inputs[i]) == G.written.end()) CHECK(r.inputs_after[i] == in_bytes[i]);
    for (void * p : mem) be->iface.dealloc(be, p);
    ggx_context_free(G.ctx);
    ggx_backend_free(be);
    return r;
}

void expect_same(const Recipe & recipe, uint64_t seed) {
    const Run a = run(recipe, false, seed), b = run(recipe, true, seed);
    REQUIRE(a.outputs.size() == b.outputs.size());
    for (size_t i = 0; i < a.outputs.size(); i++) {
        INFO("output " << i);
        CHECK(a.outputs[i] == b.outputs[i]);
    }
    CHECK(a.planned < a.sum_of_nodes);
}

// Builds the recipe's graph, plans it into a buffer of its own (64-byte alignment), runs `check`
// on the bound tensors' addresses, then checks the planned results against the unplanned ones.
void check_planned(const Recipe & recipe, uint64_t seed, const std::function<void()> & check) {
    Graph G = build(recipe);
    std::vector<uint8_t> buf(ggx_graph_plan(G.g, 64) + 64);
    ggx_graph_bind(G.g, buf.data());
    check();
    ggx_context_free(G.ctx);
    expect_same(recipe, seed);
}

// The recipe with one more output that reads t (set while the recipe builds) after the recipe's
// last node: t then stays alive to the end, so no result may take its memory.
Recipe read_late(const Recipe & recipe, ggx_tensor * const & t) {
    return [&recipe, &t](Graph & G) {
        recipe(G);
        G.outputs.push_back(ggx_scale(G.ctx, t, 2.0f));
    };
}

}  // namespace

TEST_CASE("plan: a long chain reuses a few buffers") {
    const int64_t D = 1000, T = 7;
    const size_t node = aligned(D * T * 4, 64);
    Recipe chain = [&](Graph & G) {
        ggx_tensor * x = new_input(G, GGX_TYPE_F32, D, T);
        ggx_tensor * cur = x;
        for (int i = 0; i < 100; i++) {
            switch (i % 4) {
                case 0: cur = ggx_scale(G.ctx, cur, 0.9f); break;
                case 1: cur = ggx_silu(G.ctx, cur); break;
                case 2: cur = ggx_add(G.ctx, cur, x); break;
                default: cur = ggx_rms_norm(G.ctx, cur, nullptr, 1e-5f); break;
            }
        }
        G.outputs.push_back(cur);
    };
    const Run r = run(chain, false, 1);
    CHECK(r.sum_of_nodes == 101 * node);
    // input + the node being written + its source + the previous node's source (released one
    // node late, see ggx_graph_plan): four node-sized blocks suffice
    CHECK(r.planned <= 4 * node);
    expect_same(chain, 1);
}

TEST_CASE("plan: a transformer-like block (residuals, views, kv cache, attention) gives the same results") {
    const int64_t D = 64, hd = 16, H = 4, Hkv = 2, T = 5, C = 12, F = 96;
    Recipe block = [&](Graph & G) {
        ggx_tensor * x = new_input(G, GGX_TYPE_F32, D, T);
        ggx_tensor * pos = new_input(G, GGX_TYPE_I32, T);
        ggx_tensor * wq = new_input(G, GGX_TYPE_F32, D, H * hd), * wk = new_input(G, GGX_TYPE_F32, D, Hkv * hd);
        ggx_tensor * wv = new_input(G, GGX_TYPE_F32, D, Hkv * hd), * wo = new_input(G, GGX_TYPE_F32, H * hd, D);
        ggx_tensor * wg = new_input(G, GGX_TYPE_F32, D, F), * wu = new_input(G, GGX_TYPE_F32, D, F);
        ggx_tensor * wd = new_input(G, GGX_TYPE_F32, F, D);
        ggx_tensor * kc = ggx_new_tensor_3d(G.ctx, GGX_TYPE_F32, hd, Hkv, C), * vc = ggx_new_tensor_3d(G.ctx, GGX_TYPE_F32, hd, Hkv, C);
        kc->flags |= GGX_FLAG_INPUT;
        vc->flags |= GGX_FLAG_INPUT;
        G.inputs.push_back(kc);
        G.inputs.push_back(vc);
        G.written = {kc, vc};
        ggx_params_rope rp = {hd, GGX_ROPE_NEOX, 10000.0f, 1.0f, 1.0f, 0.0f, 32.0f, 1.0f, 0};
        ggx_tensor * cur = x;
        for (int layer = 0; layer < 2; layer++) {
            ggx_tensor * n = ggx_rms_norm(G.ctx, cur, nullptr, 1e-5f);
            ggx_tensor * q = ggx_rope(G.ctx, ggx_reshape_3d(G.ctx, ggx_mul_mat(G.ctx, wq, n), hd, H, T), pos, nullptr, rp);
            ggx_tensor * k = ggx_rope(G.ctx, ggx_reshape_3d(G.ctx, ggx_mul_mat(G.ctx, wk, n), hd, Hkv, T), pos, nullptr, rp);
            ggx_tensor * v = ggx_mul_mat(G.ctx, wv, n);
            ggx_tensor * ks = ggx_kv_store(G.ctx, ggx_reshape_2d(G.ctx, k, hd * Hkv, T), kc, pos);
            ggx_tensor * vs = ggx_kv_store(G.ctx, v, vc, pos);
            ggx_tensor * a = ggx_attn(G.ctx, q, ks, vs, pos, ggx_params_attn{0.25f, 0.0f, 0, 0});
            cur = ggx_add(G.ctx, cur, ggx_mul_mat(G.ctx, wo, ggx_reshape_2d(G.ctx, a, H * hd, T)));
            ggx_tensor * m = ggx_rms_norm(G.ctx, cur, nullptr, 1e-5f);
            cur = ggx_add(G.ctx, cur, ggx_mul_mat(G.ctx, wd, ggx_glu(G.ctx, ggx_mul_mat(G.ctx, wg, m), ggx_mul_mat(G.ctx, wu, m), GGX_ACT_SILU)));
            if (layer == 0) G.outputs.push_back(m);   // an intermediate that must stay readable
        }
        ggx_tensor * last = ggx_view_rows(G.ctx, cur, T - 1, 1);
        G.outputs.push_back(ggx_argmax(G.ctx, last));
        G.outputs.push_back(cur);
    };
    expect_same(block, 2);
}

TEST_CASE("plan: an output view of an intermediate stays intact while later nodes run") {
    const int64_t D = 300, T = 4;
    Recipe r = [&](Graph & G) {
        ggx_tensor * x = new_input(G, GGX_TYPE_F32, D, T);
        ggx_tensor * a = ggx_silu(G.ctx, x);
        G.outputs.push_back(ggx_view_rows(G.ctx, a, 1, 2));   // only the view is an output
        ggx_tensor * cur = ggx_scale(G.ctx, a, 2.0f);          // last use of a
        for (int i = 0; i < 6; i++) cur = ggx_silu(G.ctx, ggx_scale(G.ctx, cur, -1.5f));
        G.outputs.push_back(cur);
    };
    expect_same(r, 3);
}

TEST_CASE("plan: random DAGs with long-lived and short-lived tensors of several sizes") {
    for (uint64_t seed = 10; seed < 30; seed++) {
        Recipe r = [seed](Graph & G) {
            std::mt19937_64 rng(seed);
            auto pick = [&](size_t n) {
                // mostly recent tensors (short lifetimes), sometimes old ones (long lifetimes)
                const size_t back = rng() % 4 == 0 ? rng() % n : std::min<size_t>(n - 1, rng() % 3);
                return n - 1 - back;
            };
            const int64_t D = 40 + (int64_t)(rng() % 90), T = 1 + (int64_t)(rng() % 9);
            std::vector<ggx_tensor *> pool = {new_input(G, GGX_TYPE_F32, D, T), new_input(G, GGX_TYPE_F32, D, T)};
            ggx_tensor * w = new_input(G, GGX_TYPE_F32, D, D);
            for (int i = 0; i < 150; i++) {
                ggx_tensor * a = pool[pick(pool.size())], * b = pool[pick(pool.size())];
                ggx_tensor * t = nullptr;
                switch (rng() % 9) {
                    case 0: t = ggx_add(G.ctx, a, b); break;
                    case 1: t = ggx_rms_norm(G.ctx, ggx_mul(G.ctx, a, b), nullptr, 1e-5f); break;
                    case 2: t = ggx_scale(G.ctx, a, 0.5f); break;
                    case 3: t = ggx_silu(G.ctx, a); break;
                    case 4: t = ggx_glu(G.ctx, a, b, GGX_ACT_GELU); break;
                    case 5: t = ggx_cpy(G.ctx, ggx_cpy(G.ctx, a, GGX_TYPE_F16), GGX_TYPE_F32); break;   // other sizes
                    case 6: t = ggx_rms_norm(G.ctx, ggx_mul_mat(G.ctx, w, a), nullptr, 1e-5f); break;
                    case 7: t = ggx_reshape_2d(G.ctx, ggx_softmax(G.ctx, ggx_reshape_2d(G.ctx, a, D * T, 1), 1.0f), D, T); break;
                    default: t = ggx_softcap(G.ctx, a, 2.0f); break;
                }
                pool.push_back(t);
                if (rng() % 40 == 0) G.outputs.push_back(t);   // intermediates that must survive
            }
            ggx_tensor * sum = pool.back();
            for (int i = 0; i < 5; i++) sum = ggx_add(G.ctx, sum, pool[pool.size() / 2 + rng() % (pool.size() / 2)]);
            G.outputs.push_back(sum);
        };
        INFO("seed " << seed);
        expect_same(r, seed);
    }
}

TEST_CASE("plan: a GLU takes its gate's memory when the gate dies there, and results stay the same") {
    const int64_t D = 64, F = 160, T = 6;
    ggx_tensor * gate = nullptr, * up = nullptr, * act = nullptr;
    Recipe ffn = [&](Graph & G) {
        ggx_tensor * x = new_input(G, GGX_TYPE_F32, D, T);
        ggx_tensor * wg = new_input(G, GGX_TYPE_F32, D, F), * wu = new_input(G, GGX_TYPE_F32, D, F), * wd = new_input(G, GGX_TYPE_F32, F, D);
        ggx_tensor * n = ggx_rms_norm(G.ctx, x, nullptr, 1e-5f);
        gate = ggx_mul_mat(G.ctx, wg, n);
        up = ggx_mul_mat(G.ctx, wu, n);
        act = ggx_glu(G.ctx, gate, up, GGX_ACT_SILU);
        G.outputs.push_back(ggx_add(G.ctx, x, ggx_mul_mat(G.ctx, wd, act)));
    };
    check_planned(ffn, 3, [&] {
        CHECK(act->data == gate->data);
        CHECK(act->data != up->data);
    });

    // not when the gate is read after the GLU
    check_planned(read_late(ffn, gate), 4, [&] { CHECK(act->data != gate->data); });
}

TEST_CASE("plan: a residual add takes the memory of the residual that dies there, and results stay the same") {
    const int64_t D = 64, F = 96, T = 5;
    ggx_tensor * h0 = nullptr, * h1 = nullptr, * h2 = nullptr, * mm = nullptr;
    Recipe block = [&](Graph & G) {
        ggx_tensor * x = new_input(G, GGX_TYPE_F32, D, T);
        ggx_tensor * wo = new_input(G, GGX_TYPE_F32, D, D), * wd = new_input(G, GGX_TYPE_F32, F, D), * wu = new_input(G, GGX_TYPE_F32, D, F);
        h0 = ggx_scale(G.ctx, x, 0.5f);   // the residual stream (an intermediate: inputs keep their memory)
        mm = ggx_mul_mat(G.ctx, wo, ggx_rms_norm(G.ctx, h0, nullptr, 1e-5f));
        h1 = ggx_add(G.ctx, h0, mm);
        h2 = ggx_add(G.ctx, h1, ggx_mul_mat(G.ctx, wd, ggx_mul_mat(G.ctx, wu, ggx_rms_norm(G.ctx, h1, nullptr, 1e-5f))));
        G.outputs.push_back(ggx_scale(G.ctx, h2, 2.0f));
    };
    check_planned(block, 5, [&] {
        CHECK(h1->data == h0->data);
        CHECK(h2->data == h1->data);
        CHECK(h1->data != mm->data);
    });

    // not when the residual is read after the add; a broadcast operand is never taken
    check_planned(read_late(block, h0), 6, [&] { CHECK(h1->data != h0->data); });
    ggx_tensor * bsum = nullptr, * r = nullptr;
    Recipe bcast = [&](Graph & G3) {
        ggx_tensor * x = new_input(G3, GGX_TYPE_F32, D, T);
        ggx_tensor * b = new_input(G3, GGX_TYPE_F32, D);
        ggx_tensor * row = ggx_scale(G3.ctx, b, 2.0f);   // dies at the add, but is one row
        r = ggx_scale(G3.ctx, x, 1.5f);
        bsum = ggx_add(G3.ctx, r, row);
        G3.outputs.push_back(ggx_scale(G3.ctx, bsum, 2.0f));
    };
    check_planned(bcast, 7, [&] { CHECK(bsum->data == r->data); });   // the full operand may be taken, the broadcast one never
}
