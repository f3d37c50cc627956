// Every ggx op on the CPU backend against a naive double-precision reference, on seeded random
// inputs and awkward shapes (1, 3, 17, 129, odd sizes), with 1 and several threads.
//
// Tolerances: U = 2^-24 is the unit roundoff of f32. Each check states its bound as a per-element
// error model (terms summed x U x magnitude), never a bare constant; on failure the worst element
// is printed with its bound and the number of elements outside. Conversions, copies and lookups
// are exact and compared bit for bit. Every result buffer has sentinel bytes on both sides, and
// the planned compute buffer too, to catch out-of-bounds writes.
#include "ggx/fp16.h"
#include "ggx/ggx-backend.h"
#include "ggx/ggx.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

const double U = 1.0 / 16777216.0;   // 2^-24
const uint8_t k_sentinel = 0xA5;
const size_t k_guard = 256;

struct Rng {
    std::mt19937_64 g;
    explicit Rng(uint64_t seed) : g(seed) {}
    double uni(double a, double b) { return std::uniform_real_distribution<double>(a, b)(g); }
    int64_t range(int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(g); }
    std::vector<float> floats(size_t n, double a = -1.0, double b = 1.0) {
        std::vector<float> v(n);
        for (float & x : v) x = (float)uni(a, b);
        return v;
    }
};

// A tensor's contents in its storage type (bytes) and the exact stored values (vals).
struct HostData {
    ggx_type type;
    std::vector<uint8_t> bytes;
    std::vector<double> vals;
};

HostData make(ggx_type type, const std::vector<float> & v) {
    HostData d{type, {}, std::vector<double>(v.size())};
    if (type == GGX_TYPE_F32) {
        d.bytes.resize(v.size() * 4);
        memcpy(d.bytes.data(), v.data(), d.bytes.size());
        for (size_t i = 0; i < v.size(); i++) d.vals[i] = v[i];
        return d;
    }
    d.bytes.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); i++) {
        const uint16_t h = type == GGX_TYPE_F16 ? ggx_f32_to_f16(v[i]) : ggx_f32_to_bf16(v[i]);
        memcpy(&d.bytes[i * 2], &h, 2);
        d.vals[i] = type == GGX_TYPE_F16 ? ggx_f16_to_f32(h) : ggx_bf16_to_f32(h);
    }
    return d;
}

HostData make_i32(const std::vector<int32_t> & v) {
    HostData d{GGX_TYPE_I32, std::vector<uint8_t>(v.size() * 4), std::vector<double>(v.begin(), v.end())};
    memcpy(d.bytes.data(), v.data(), d.bytes.size());
    return d;
}

const ggx_type k_float_types[] = {GGX_TYPE_F32, GGX_TYPE_F16, GGX_TYPE_BF16};

// One backend, one context; inputs are planned INPUT leaves set before compute.
class Bench {
public:
    explicit Bench(int n_threads) {
        be = ggx_backend_cpu_init(n_threads);
        REQUIRE(be != nullptr);
        ctx = ggx_context_new();
    }
    ~Bench() {
        for (const Guarded & g : guarded) be->iface.dealloc(be, g.base);
        ggx_context_free(ctx);
        ggx_backend_free(be);
    }
    Bench(const Bench &) = delete;
    Bench & operator=(const Bench &) = delete;

    ggx_tensor * input(const HostData & d, std::vector<int64_t> ne, const char * name = "in") {
        ggx_tensor * t = ggx_new_tensor(ctx, d.type, (int)ne.size(), ne.data());
        ggx_set_name(t, "%s", name);
        t->flags |= GGX_FLAG_INPUT;
        REQUIRE(ggx_nbytes(t) == d.bytes.size());
        inputs.push_back({t, d.bytes});
        return t;
    }

    // Gives t its own buffer with sentinels on both sides (call before compute).
    void guard(ggx_tensor * t) { t->data = guarded_alloc(ggx_nbytes(t), t->name); }

    // Plans and runs the graph ending in `out`; returns the backend's status.
    ggx_status compute(ggx_tensor * out) {
        out->flags |= GGX_FLAG_OUTPUT;
        if (!out->view_src && !out->data) guard(out);
        ggx_graph * g = ggx_graph_new(ctx);
        ggx_graph_build(g, out);
        const size_t size = ggx_graph_plan(g, be->alignment);
        ggx_graph_bind(g, guarded_alloc(size, "compute buffer"));
        for (const auto & in : inputs)
            REQUIRE(ggx_backend_tensor_set(be, in.first, in.second.data(), 0, in.second.size()) == GGX_STATUS_OK);
        const ggx_status st = ggx_backend_graph_compute(be, g);
        check_sentinels();
        return st;
    }

    std::vector<uint8_t> get(const ggx_tensor * t) {
        std::vector<uint8_t> v(ggx_nbytes(t));
        REQUIRE(ggx_backend_tensor_get(be, t, v.data(), 0, v.size()) == GGX_STATUS_OK);
        return v;
    }
    std::vector<float> get_f32(const ggx_tensor * t) {
        REQUIRE(t->type == GGX_TYPE_F32);
        std::vector<uint8_t> b = get(t);
        std::vector<float> v(b.size() / 4);
        memcpy(v.data(), b.data(), b.size());
        return v;
    }
    // Runs and requires success.
    std::vector<float> run_f32(ggx_tensor * out) {
        const ggx_status st = compute(out);
        INFO("compute failed: " << ggx_last_error());
        REQUIRE(st == GGX_STATUS_OK);
        return get_f32(out);
    }

    ggx_backend * be = nullptr;
    ggx_context * ctx = nullptr;

private:
    struct Guarded {
        void * base;
        size_t size;
        std::string what;
    };
    void * guarded_alloc(size_t size, const char * what) {
        void * base = nullptr;
        REQUIRE(be->iface.alloc(be, size + 2 * k_guard, &base) == GGX_STATUS_OK);
        memset(base, k_sentinel, size + 2 * k_guard);
        guarded.push_back({base, size, what});
        return (char *)base + k_guard;
    }
    void check_sentinels() {
        for (const Guarded & g : guarded) {
            const uint8_t * b = (const uint8_t *)g.base;
            size_t bad = 0;
            for (size_t i = 0; i < k_guard; i++) bad += (b[i] != k_sentinel) + (b[k_guard + g.size + i] != k_sentinel);
            INFO("sentinel bytes overwritten around " << g.what);
            CHECK(bad == 0);
        }
    }
    std::vector<std::pair<ggx_tensor *, std::vector<uint8_t>>> inputs;
    std::vector<Guarded> guarded;
};

// |got - ref| <= bound per element; prints the worst element on failure.
void expect_close(const std::string & what, const std::vector<float> & got, const std::vector<double> & ref,
                  const std::vector<double> & bound) {
    REQUIRE(got.size() == ref.size());
    REQUIRE(bound.size() == ref.size());
    size_t n_bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < got.size(); i++) {
        const double err = std::fabs((double)got[i] - ref[i]);
        const double ratio = std::isnan(err) ? INFINITY : err / std::max(bound[i], 1e-300);
        if (!(err <= bound[i])) n_bad++;
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            worst = i;
        }
    }
    if (std::getenv("GGX_TEST_VERBOSE")) MESSAGE(what << ": worst error / bound = " << worst_ratio);
    INFO(what << ": worst element " << worst << " got " << got[worst] << " expected " << ref[worst] << " bound "
              << bound[worst] << "; " << n_bad << " of " << got.size() << " outside");
    CHECK(n_bad == 0);
}

// Bitwise equality of raw bytes, comparing NaN-ness only for NaNs (payloads may differ).
void expect_same_bits(const std::string & what, ggx_type type, const std::vector<uint8_t> & got,
                      const std::vector<uint8_t> & ref) {
    REQUIRE(got.size() == ref.size());
    const size_t ts = ggx_type_size(type);
    size_t n_bad = 0, first = 0;
    for (size_t i = 0; i < got.size() / ts; i++) {
        const uint8_t * a = &got[i * ts], * b = &ref[i * ts];
        bool same = memcmp(a, b, ts) == 0;
        if (!same) {
            auto as_f = [&](const uint8_t * p) {
                uint16_t h;
                float f;
                if (type == GGX_TYPE_F32) return (memcpy(&f, p, 4), (double)f);
                memcpy(&h, p, 2);
                return (double)(type == GGX_TYPE_F16 ? ggx_f16_to_f32(h) : ggx_bf16_to_f32(h));
            };
            same = type != GGX_TYPE_I32 && std::isnan(as_f(a)) && std::isnan(as_f(b));
        }
        if (!same && n_bad++ == 0) first = i;
    }
    INFO(what << ": " << n_bad << " elements differ, first at " << first);
    CHECK(n_bad == 0);
}

std::string tag(const char * op, std::initializer_list<long long> dims, ggx_type t = GGX_TYPE_F32, int nth = 1) {
    std::string s = std::string(op) + " " + ggx_type_name(t) + " nth=" + std::to_string(nth) + " {";
    for (long long d : dims) s += std::to_string(d) + ",";
    s.back() = '}';
    return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
TEST_CASE("ops: get_rows from f32/f16/bf16 tables is exact") {
    Rng rng(1);
    for (ggx_type ty : k_float_types)
        for (auto [D, V, T] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {3, 5, 7}, {17, 40, 3}, {129, 9, 70}, {4096, 3, 4}})
            for (int nth : {1, 3}) {
                Bench b(nth);
                HostData tab = make(ty, rng.floats((size_t)(D * V), -4, 4));
                std::vector<int32_t> ids((size_t)T);
                for (int32_t & id : ids) id = (int32_t)rng.range(0, V - 1);
                ggx_tensor * out = ggx_get_rows(b.ctx, b.input(tab, {D, V}), b.input(make_i32(ids), {T}));
                std::vector<float> got = b.run_f32(out);
                std::vector<uint8_t> got_b(got.size() * 4), ref_b(got.size() * 4);
                memcpy(got_b.data(), got.data(), got_b.size());
                for (int64_t t = 0; t < T; t++)
                    for (int64_t d = 0; d < D; d++) {
                        const float v = (float)tab.vals[(size_t)(ids[(size_t)t] * D + d)];
                        memcpy(&ref_b[(size_t)(t * D + d) * 4], &v, 4);
                    }
                expect_same_bits(tag("get_rows", {D, V, T}, ty, nth), GGX_TYPE_F32, got_b, ref_b);
            }
}

TEST_CASE("ops: get_rows with an id out of range fails naming the tensor") {
    for (int bad : {-1, 10}) {
        Bench b(2);
        ggx_tensor * out = ggx_get_rows(b.ctx, b.input(make(GGX_TYPE_F32, std::vector<float>(40, 1.0f)), {4, 10}, "tok_embd"),
                                        b.input(make_i32({1, bad, 2}), {3}));
        ggx_set_name(out, "embed");
        CHECK(b.compute(out) == GGX_STATUS_FAILED);
        const std::string msg = ggx_last_error();
        CHECK(msg.find("embed") != std::string::npos);
        CHECK(msg.find("tok_embd") != std::string::npos);
        CHECK(msg.find(std::to_string(bad)) != std::string::npos);
    }
}

// ---------------------------------------------------------------------------------------------
// MUL_MAT: y[t][n] = sum_k W[n][k] x[t][k]. Bound: recursive f32 summation of K products has
// |error| <= (K + 1) U sum_k |W x| (Higham's gamma_K; the blocked/vector order only lowers it).
TEST_CASE("ops: mul_mat with f32/f16/bf16 weights matches a double reference") {
    Rng rng(2);
    const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},   {3, 17, 1},  {17, 3, 5},   {8, 8, 2},
                                                        {129, 65, 7}, {256, 33, 16}, {300, 129, 70}, {1000, 40, 33},
                                                        {64, 130, 3}, {4096, 20, 1}};
    for (ggx_type ty : k_float_types)
        for (auto [K, N, T] : shapes)
            for (int nth : {1, 3}) {
                Bench b(nth);
                HostData w = make(ty, rng.floats((size_t)(K * N)));
                HostData x = make(GGX_TYPE_F32, rng.floats((size_t)(K * T), -2, 2));
                std::vector<float> got = b.run_f32(ggx_mul_mat(b.ctx, b.input(w, {K, N}), b.input(x, {K, T})));
                std::vector<double> ref((size_t)(N * T)), bound((size_t)(N * T));
                for (int64_t t = 0; t < T; t++)
                    for (int64_t n = 0; n < N; n++) {
                        double s = 0, mag = 0;
                        for (int64_t k = 0; k < K; k++) {
                            const double p = w.vals[(size_t)(n * K + k)] * x.vals[(size_t)(t * K + k)];
                            s += p;
                            mag += std::fabs(p);
                        }
                        ref[(size_t)(t * N + n)] = s;
                        bound[(size_t)(t * N + n)] = (double)(K + 1) * U * mag;
                    }
                expect_close(tag("mul_mat", {K, N, T}, ty, nth), got, ref, bound);
            }
}

TEST_CASE("ops: results do not depend on the number of threads (bitwise)") {
    // Threads split columns, rows or heads, never one reduction, so every element sees the same
    // arithmetic whatever the split.
    Rng rng(3);
    const int64_t K = 200, N = 77, T = 9, hd = 32, H = 8, Hkv = 2, C = 40;
    HostData w = make(GGX_TYPE_F16, rng.floats((size_t)(K * N)));
    HostData x = make(GGX_TYPE_F32, rng.floats((size_t)(K * T)));
    HostData q = make(GGX_TYPE_F32, rng.floats((size_t)(hd * H * T)));
    HostData kc = make(GGX_TYPE_F16, rng.floats((size_t)(hd * Hkv * C)));
    HostData vc = make(GGX_TYPE_F16, rng.floats((size_t)(hd * Hkv * C)));
    std::vector<int32_t> pos((size_t)T);
    for (int64_t t = 0; t < T; t++) pos[(size_t)t] = (int32_t)(20 + t);
    std::vector<std::vector<float>> res;
    for (int nth : {1, 2, 3, 5}) {
        Bench b(nth);
        ggx_tensor * y = ggx_mul_mat(b.ctx, b.input(w, {K, N}), b.input(x, {K, T}));
        y->flags |= GGX_FLAG_OUTPUT;   // read back below, so its memory must not be reused
        std::vector<float> all = b.run_f32(ggx_silu(b.ctx, ggx_rms_norm(b.ctx, y, nullptr, 1e-5f)));
        std::vector<float> yv = b.get_f32(y);
        std::vector<float> av = b.run_f32(ggx_attn(b.ctx, b.input(q, {hd, H, T}), b.input(kc, {hd, Hkv, C}),
                                                   b.input(vc, {hd, Hkv, C}), b.input(make_i32(pos), {T}),
                                                   ggx_params_attn{0.2f, 0.0f, 0, 0}));
        all.insert(all.end(), yv.begin(), yv.end());
        all.insert(all.end(), av.begin(), av.end());
        res.push_back(all);
    }
    for (size_t i = 1; i < res.size(); i++) CHECK(memcmp(res[0].data(), res[i].data(), res[0].size() * 4) == 0);
}

// ---------------------------------------------------------------------------------------------
// ADD/MUL/SCALE: one f32 rounding of an exact result: |error| <= U |ref|.
TEST_CASE("ops: add and mul, same shape and broadcast rows, f32/f16/bf16 second operand") {
    Rng rng(4);
    for (bool is_mul : {false, true})
        for (ggx_type ty : k_float_types)
            for (auto [D, T] : std::vector<std::array<int64_t, 2>>{{1, 1}, {3, 17}, {129, 5}, {4096, 3}, {17, 70}})
                for (bool bcast : {false, true})
                    for (int nth : {1, 3}) {
                        Bench b(nth);
                        HostData a = make(GGX_TYPE_F32, rng.floats((size_t)(D * T), -3, 3));
                        HostData c = make(ty, rng.floats((size_t)(D * (bcast ? 1 : T)), -3, 3));
                        ggx_tensor * ta = b.input(a, {D, T});
                        ggx_tensor * tc = bcast ? b.input(c, {D}) : b.input(c, {D, T});
                        std::vector<float> got = b.run_f32(is_mul ? ggx_mul(b.ctx, ta, tc) : ggx_add(b.ctx, ta, tc));
                        std::vector<double> ref(got.size()), bound(got.size());
                        for (int64_t t = 0; t < T; t++)
                            for (int64_t d = 0; d < D; d++) {
                                const size_t i = (size_t)(t * D + d);
                                const double cv = c.vals[(size_t)(bcast ? d : t * D + d)];
                                ref[i] = is_mul ? a.vals[i] * cv : a.vals[i] + cv;
                                bound[i] = U * std::fabs(ref[i]);
                            }
                        expect_close(tag(is_mul ? "mul" : "add", {D, T, bcast}, ty, nth), got, ref, bound);
                    }
}

// Unary activations. Error models (e = the exp used, relative error <= 2U measured over the
// whole range; every other operation one rounding):
//   scale    U |ref|
//   silu     x / (1 + e^-x): 2U from e, U from the add, U from the divide -> 6U |ref| with margin
//   gelu     x / (1 + e^(-2u)), u = a(x + b x^3) carries 4U |u| absolute error, which moves the
//            result by |x| 2s(1-s) 4U|u| (s = sigmoid(2u)); plus 6U |ref| as for silu
//   softcap  c tanh(x / c) with tanh from e^(-2|y|): absolute error 2U of tanh (cancellation in
//            1 - e near 0), 1U relative from x / c and c * t: 3U c + 2U |ref|
// silu and gelu also get an absolute 2^-120: results that small leave the f32 normal range
// (e^(-2u) overflowing to inf gives 0 for a true value near 1e-38).
const double k_tiny = std::ldexp(1.0, -120);
TEST_CASE("ops: scale, silu, gelu, softcap") {
    Rng rng(5);
    const double a_g = std::sqrt(2.0 / M_PI), b_g = 0.044715;
    for (auto [D, T] : std::vector<std::array<int64_t, 2>>{{1, 1}, {3, 1}, {17, 3}, {129, 7}, {4096, 2}, {1000, 33}})
        for (int nth : {1, 3})
            for (int op = 0; op < 4; op++) {
                Bench b(nth);
                HostData x = make(GGX_TYPE_F32, rng.floats((size_t)(D * T), -12, 12));
                ggx_tensor * tx = b.input(x, {D, T});
                const float s = -0.37f, cap = 5.0f;
                ggx_tensor * out = op == 0 ? ggx_scale(b.ctx, tx, s)
                                 : op == 1 ? ggx_silu(b.ctx, tx)
                                 : op == 2 ? ggx_gelu(b.ctx, tx)
                                           : ggx_softcap(b.ctx, tx, cap);
                std::vector<float> got = b.run_f32(out);
                std::vector<double> ref(got.size()), bound(got.size());
                for (size_t i = 0; i < got.size(); i++) {
                    const double v = x.vals[i];
                    if (op == 0) {
                        ref[i] = v * (double)s;
                        bound[i] = U * std::fabs(ref[i]);
                    } else if (op == 1) {
                        ref[i] = v / (1 + std::exp(-v));
                        bound[i] = 6 * U * std::fabs(ref[i]) + k_tiny;
                    } else if (op == 2) {
                        const double u = a_g * (v + b_g * v * v * v), sg = 1 / (1 + std::exp(-2 * u));
                        ref[i] = v * sg;   // = 0.5 v (1 + tanh u), without the cancellation of 1 + tanh for u << 0
                        bound[i] = 6 * U * std::fabs(ref[i]) + std::fabs(v) * 2 * sg * (1 - sg) * 4 * U * std::fabs(u) + k_tiny;
                    } else {
                        ref[i] = cap * std::tanh(v / cap);
                        bound[i] = 3 * U * cap + 2 * U * std::fabs(ref[i]);
                    }
                }
                const char * names[] = {"scale", "silu", "gelu", "softcap"};
                expect_close(tag(names[op], {D, T}, GGX_TYPE_F32, nth), got, ref, bound);
            }
}

TEST_CASE("ops: glu (silu and gelu gates)") {
    // act(g) * u: the activation's bound (see above) times |u|, plus one rounding.
    Rng rng(6);
    const double a_g = std::sqrt(2.0 / M_PI), b_g = 0.044715;
    for (ggx_act act : {GGX_ACT_SILU, GGX_ACT_GELU})
        for (auto [D, T] : std::vector<std::array<int64_t, 2>>{{1, 1}, {17, 3}, {129, 7}, {14336, 1}, {300, 70}})
            for (int nth : {1, 2}) {
                Bench b(nth);
                HostData g = make(GGX_TYPE_F32, rng.floats((size_t)(D * T), -10, 10));
                HostData u = make(GGX_TYPE_F32, rng.floats((size_t)(D * T), -3, 3));
                std::vector<float> got = b.run_f32(ggx_glu(b.ctx, b.input(g, {D, T}), b.input(u, {D, T}), act));
                std::vector<double> ref(got.size()), bound(got.size());
                for (size_t i = 0; i < got.size(); i++) {
                    const double v = g.vals[i];
                    double a, ab;
                    if (act == GGX_ACT_SILU) {
                        a = v / (1 + std::exp(-v));
                        ab = 6 * U * std::fabs(a) + k_tiny;
                    } else {
                        const double w = a_g * (v + b_g * v * v * v), sg = 1 / (1 + std::exp(-2 * w));
                        a = v * sg;
                        ab = 6 * U * std::fabs(a) + std::fabs(v) * 2 * sg * (1 - sg) * 4 * U * std::fabs(w) + k_tiny;
                    }
                    ref[i] = a * u.vals[i];
                    bound[i] = ab * std::fabs(u.vals[i]) + U * std::fabs(ref[i]);
                }
                expect_close(tag(act == GGX_ACT_SILU ? "glu-silu" : "glu-gelu", {D, T}, GGX_TYPE_F32, nth), got, ref, bound);
            }
}

// SOFTMAX: z_i = s x_i carries U |z_i|, z_i - max another U |z_i - m|, e 2U; the row sum of D
// terms (D + 1) U; the final multiply by 1/sum 2U. Relative bound per element:
// 2U max_j(|z_j| + |z_j - m|) (numerator and, through the sum, denominator) + (D + 8) U.
TEST_CASE("ops: softmax with scale") {
    Rng rng(7);
    for (auto [D, T] : std::vector<std::array<int64_t, 2>>{{1, 1}, {3, 2}, {17, 5}, {129, 3}, {32000, 1}, {100, 70}})
        for (float s : {1.0f, 0.125f, -2.0f, 0.0f})
            for (int nth : {1, 3}) {
                Bench b(nth);
                HostData x = make(GGX_TYPE_F32, rng.floats((size_t)(D * T), -20, 20));
                std::vector<float> got = b.run_f32(ggx_softmax(b.ctx, b.input(x, {D, T}), s));
                const double se = s == 0.0f ? 1.0 : (double)s;   // 0 = not given = 1
                std::vector<double> ref(got.size()), bound(got.size());
                for (int64_t t = 0; t < T; t++) {
                    const double * xr = &x.vals[(size_t)(t * D)];
                    double m = -INFINITY, sum = 0, A = 0;
                    for (int64_t d = 0; d < D; d++) m = std::max(m, se * xr[d]);
                    for (int64_t d = 0; d < D; d++) {
                        sum += std::exp(se * xr[d] - m);
                        A = std::max(A, std::fabs(se * xr[d]) + std::fabs(se * xr[d] - m));
                    }
                    for (int64_t d = 0; d < D; d++) {
                        const size_t i = (size_t)(t * D + d);
                        ref[i] = std::exp(se * xr[d] - m) / sum;
                        bound[i] = ref[i] * U * (4 * A + (double)D + 8);
                    }
                }
                expect_close(tag("softmax", {D, T, (long long)(s * 1000)}, GGX_TYPE_F32, nth), got, ref, bound);
            }
}

TEST_CASE("ops: argmax picks the first maximum and ignores NaN") {
    Rng rng(8);
    for (auto [D, T] : std::vector<std::array<int64_t, 2>>{{1, 1}, {3, 4}, {17, 9}, {129, 3}, {128256, 2}})
        for (int nth : {1, 2}) {
            Bench b(nth);
            std::vector<float> x = rng.floats((size_t)(D * T), -5, 5);
            std::vector<int32_t> expect((size_t)T);
            for (int64_t t = 0; t < T; t++) {
                float * r = &x[(size_t)(t * D)];
                if (t % 3 == 1) for (int64_t d = 0; d < D; d++) r[d] = -INFINITY;   // all -inf: index 0
                // plant ties of the row maximum at two random places, and a NaN
                const int64_t i0 = rng.range(0, D - 1), i1 = rng.range(0, D - 1);
                if (t % 3 == 2) r[i0] = r[i1] = 7.0f;
                if (D > 2) r[rng.range(0, D - 1)] = NAN;
                float bv = -INFINITY;   // largest non-NaN value, then its first index
                for (int64_t d = 0; d < D; d++)
                    if (r[d] > bv) bv = r[d];
                int64_t best = 0;
                while (best < D && !(r[best] == bv)) best++;
                expect[(size_t)t] = (int32_t)(best < D ? best : 0);
            }
            ggx_tensor * out = ggx_argmax(b.ctx, b.input(make(GGX_TYPE_F32, x), {D, T}));
            REQUIRE(b.compute(out) == GGX_STATUS_OK);
            std::vector<uint8_t> got = b.get(out);
            std::vector<uint8_t> ref(expect.size() * 4);
            memcpy(ref.data(), expect.data(), ref.size());
            expect_same_bits(tag("argmax", {D, T}, GGX_TYPE_I32, nth), GGX_TYPE_I32, got, ref);
        }
}

// ---------------------------------------------------------------------------------------------
// RMS_NORM / LAYER_NORM. The kernels sum in blocks of 256 (or 32 lanes), so a sum of D terms has
// relative error <= S U with S = 256 + D/256 + 8 (within-block, across-block, lane reduction).
// rms: sqrt halves the relative error of the mean square; plus ~6 roundings (divide, sqrt,
// two multiplies): |error| <= (S/2 + 6) U |ref|.
// layer: the mean is off by S U mean|x| and the variance by S U relative, so
// |error| <= U (S mean|x| / sd + (S/2 + 6) |x - mean| / sd) |w| + 2U (|ref| + |b|).
TEST_CASE("ops: rms_norm and layer_norm with optional f32/f16/bf16 weight and bias") {
    Rng rng(9);
    for (bool layer : {false, true})
        for (auto [D, T] : std::vector<std::array<int64_t, 2>>{{1, 1}, {3, 2}, {17, 5}, {129, 3}, {4096, 2}, {1000, 33}})
            for (int wmode = 0; wmode < 4; wmode++)   // 0: none, 1: f32, 2: f16, 3: bf16
                for (int nth : {1, 3}) {
                    Bench b(nth);
                    const float eps = 1e-5f;
                    HostData x = make(GGX_TYPE_F32, rng.floats((size_t)(D * T), layer ? 2.0 : -2.0, 4.0));
                    const ggx_type wt = wmode == 3 ? GGX_TYPE_BF16 : wmode == 2 ? GGX_TYPE_F16 : GGX_TYPE_F32;
                    HostData w = make(wt, rng.floats((size_t)D, -2, 2));
                    HostData bb = make(wt, rng.floats((size_t)D, -1, 1));
                    ggx_tensor * tx = b.input(x, {D, T});
                    ggx_tensor * tw = wmode ? b.input(w, {D}) : nullptr;
                    ggx_tensor * tb = wmode && layer ? b.input(bb, {D}) : nullptr;
                    std::vector<float> got = b.run_f32(layer ? ggx_layer_norm(b.ctx, tx, tw, tb, eps) : ggx_rms_norm(b.ctx, tx, tw, eps));
                    const double S = 256 + D / 256.0 + 8;
                    std::vector<double> ref(got.size()), bound(got.size());
                    for (int64_t t = 0; t < T; t++) {
                        const double * xr = &x.vals[(size_t)(t * D)];
                        double mean = 0, mabs = 0, var = 0;
                        if (layer)
                            for (int64_t d = 0; d < D; d++) mean += xr[d] / (double)D;
                        for (int64_t d = 0; d < D; d++) {
                            var += (xr[d] - mean) * (xr[d] - mean) / (double)D;
                            mabs += std::fabs(xr[d]) / (double)D;
                        }
                        const double sd = std::sqrt(var + eps);
                        for (int64_t d = 0; d < D; d++) {
                            const size_t i = (size_t)(t * D + d);
                            const double wv = wmode ? w.vals[(size_t)d] : 1.0, bv = tb ? bb.vals[(size_t)d] : 0.0;
                            ref[i] = (xr[d] - mean) / sd * wv + bv;
                            bound[i] = U * ((layer ? S * mabs / sd : 0) + (S / 2 + 6) * std::fabs(xr[d] - mean) / sd) * std::fabs(wv) +
                                       2 * U * (std::fabs(ref[i]) + std::fabs(bv));
                        }
                    }
                    expect_close(tag(layer ? "layer_norm" : "rms_norm", {D, T, wmode}, wt, nth), got, ref, bound);
                }
}

// ---------------------------------------------------------------------------------------------
// ROPE reference in double. YaRN is written the way Hugging Face writes it (a mix of
// interpolated and extrapolated inverse frequencies, `_compute_yarn_parameters`), independently
// of the kernel's formulation. The kernel rounds cos/sin to f32 (U each, times attn_factor) and
// rotates in f32 (two products and a sum): |error| <= 4U af (|x0| + |x1|); other dims are exact.
namespace {
struct RopeCase {
    int64_t hd, H, T;
    int32_t n_rot;
    ggx_rope_mode mode;
    float theta, pos_scale, attn_factor, ext_factor;
    int32_t pos0;
    bool divisors;
};

void rope_reference(const RopeCase & rc, const std::vector<double> & x, const std::vector<int32_t> & pos,
                    const std::vector<float> & div, std::vector<double> & ref, std::vector<double> & bound,
                    float beta_fast, float beta_slow, int32_t n_ctx_orig) {
    const int64_t half = rc.n_rot / 2;
    std::vector<double> inv(half);
    for (int64_t i = 0; i < half; i++) {
        const double pos_freq = std::pow((double)rc.theta, (double)(2 * i) / rc.n_rot);
        double extrap = 1.0 / pos_freq;
        if (rc.divisors) extrap /= div[(size_t)i];
        const double interp = extrap * rc.pos_scale;   // HF: 1 / (factor * pos_freq), factor = 1/pos_scale
        if (rc.ext_factor == 0) {
            inv[i] = interp;
            continue;
        }
        auto corr = [&](double rot) {
            return rc.n_rot * std::log(n_ctx_orig / (rot * 2 * M_PI)) / (2 * std::log((double)rc.theta));
        };
        double low = std::max(std::floor(corr(beta_fast)), 0.0), high = std::min(std::ceil(corr(beta_slow)), (double)rc.n_rot - 1);
        if (low == high) high += 0.001;
        const double lin = std::min(1.0, std::max(0.0, (i - low) / (high - low)));
        const double extrap_factor = (1 - lin) * rc.ext_factor;
        inv[i] = interp * (1 - extrap_factor) + extrap * extrap_factor;
    }
    ref = x;
    bound.assign(x.size(), 0.0);
    for (int64_t t = 0; t < rc.T; t++)
        for (int64_t h = 0; h < rc.H; h++)
            for (int64_t i = 0; i < half; i++) {
                const double ang = pos[(size_t)t] * inv[i];
                const double c = std::cos(ang) * rc.attn_factor, s = std::sin(ang) * rc.attn_factor;
                const size_t base = (size_t)((t * rc.H + h) * rc.hd);
                const size_t i0 = base + (size_t)(rc.mode == GGX_ROPE_NEOX ? i : 2 * i);
                const size_t i1 = base + (size_t)(rc.mode == GGX_ROPE_NEOX ? i + half : 2 * i + 1);
                ref[i0] = x[i0] * c - x[i1] * s;
                ref[i1] = x[i0] * s + x[i1] * c;
                bound[i0] = bound[i1] = 4 * U * std::fabs(rc.attn_factor) * (std::fabs(x[i0]) + std::fabs(x[i1]));
            }
}
}  // namespace

TEST_CASE("ops: rope neox and interleaved, partial rotation, scaling, divisors, YaRN") {
    Rng rng(10);
    const std::vector<RopeCase> cases = {
        {64, 4, 1, 64, GGX_ROPE_NEOX, 10000, 1, 1, 0, 0, false},
        {64, 4, 1, 64, GGX_ROPE_INTERLEAVE, 10000, 1, 1, 0, 0, false},
        {128, 3, 17, 64, GGX_ROPE_NEOX, 500000, 1, 1, 0, 37, false},        // n_rot < hd, positions from 37
        {96, 5, 5, 32, GGX_ROPE_INTERLEAVE, 10000, 0.25f, 1, 0, 1000, false},  // linear scaling
        {128, 2, 70, 128, GGX_ROPE_NEOX, 500000, 1, 1.2f, 0, 7, true},      // divisors (llama3/longrope), attn_factor
        {2, 1, 3, 2, GGX_ROPE_NEOX, 10000, 1, 1, 0, 0, false},
        {34, 3, 4, 10, GGX_ROPE_INTERLEAVE, 10000, 1, 1, 0, 123456, true},  // awkward hd, large positions
        {64, 4, 9, 64, GGX_ROPE_NEOX, 10000, 0.25f, 1.1386f, 1, 5000, false},   // YaRN x4
        {128, 2, 3, 96, GGX_ROPE_INTERLEAVE, 1e6f, 0.125f, 1.2079f, 1, 20000, true},  // YaRN x8, partial
        {64, 2, 3, 64, GGX_ROPE_NEOX, 10000, 0.5f, 1, 0.5f, 3000, false},   // YaRN with a half mix
    };
    const float beta_fast = 32, beta_slow = 1;
    const int32_t n_ctx_orig = 4096;
    for (const RopeCase & rc : cases)
        for (int nth : {1, 3}) {
            Bench b(nth);
            HostData x = make(GGX_TYPE_F32, rng.floats((size_t)(rc.hd * rc.H * rc.T), -3, 3));
            std::vector<int32_t> pos((size_t)rc.T);
            for (int64_t t = 0; t < rc.T; t++) pos[(size_t)t] = rc.pos0 + (int32_t)(t * (1 + t % 3));   // not contiguous
            std::vector<float> div = rng.floats((size_t)rc.n_rot / 2, 1.0, 40.0);
            ggx_params_rope p = {rc.n_rot, rc.mode, rc.theta, rc.pos_scale, rc.attn_factor, rc.ext_factor, beta_fast, beta_slow, n_ctx_orig};
            ggx_tensor * tdiv = rc.divisors ? b.input(make(GGX_TYPE_F32, div), {rc.n_rot / 2}) : nullptr;
            std::vector<float> got = b.run_f32(ggx_rope(b.ctx, b.input(x, {rc.hd, rc.H, rc.T}), b.input(make_i32(pos), {rc.T}), tdiv, p));
            std::vector<double> ref, bound;
            rope_reference(rc, x.vals, pos, div, ref, bound, beta_fast, beta_slow, n_ctx_orig);
            expect_close(tag("rope", {rc.hd, rc.H, rc.T, rc.n_rot, rc.mode, (long long)(rc.ext_factor * 10)}, GGX_TYPE_F32, nth),
                         got, ref, bound);
        }
}

// ---------------------------------------------------------------------------------------------
TEST_CASE("ops: cpy between f32, f16 and bf16 is exact, including subnormals, overflow and NaN") {
    Rng rng(11);
    std::vector<float> special = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 1e6f, -1e6f, 6e-8f, 3e-8f, 2.98e-8f,
                                  6.1e-5f, 6.09e-5f, 1e-40f, INFINITY, -INFINITY, NAN, 3.1415926f, 1.00048828125f, 1.0009765625f};
    for (ggx_type from : k_float_types)
        for (ggx_type to : k_float_types)
            for (auto [D, T] : std::vector<std::array<int64_t, 2>>{{20, 1}, {17, 3}, {4096, 3}, {129, 70}})
                for (int nth : {1, 3}) {
                    Bench b(nth);
                    std::vector<float> v = rng.floats((size_t)(D * T), -100, 100);
                    for (size_t i = 0; i < v.size(); i++) {
                        if (i % 7 == 0) v[i] = special[(i / 7) % special.size()];
                        else if (i % 7 == 1) v[i] = (float)(rng.uni(-1, 1) * std::ldexp(1.0, (int)rng.range(-30, 20)));
                    }
                    HostData in = make(from, v);
                    ggx_tensor * out = ggx_cpy(b.ctx, b.input(in, {D, T}), to);
                    REQUIRE(b.compute(out) == GGX_STATUS_OK);
                    // Reference: the exact source value rounded once by ggx/fp16.h.
                    std::vector<float> exact(in.vals.begin(), in.vals.end());
                    expect_same_bits(tag("cpy", {D, T, from}, to, nth), to, b.get(out), make(to, exact).bytes);
                }
}

// ---------------------------------------------------------------------------------------------
TEST_CASE("ops: kv_store writes rows at the given positions and leaves the rest") {
    Rng rng(12);
    for (ggx_type ty : k_float_types)
        for (bool three_d : {false, true})
            for (auto [hd, Hkv, C, T] : std::vector<std::array<int64_t, 4>>{{1, 1, 1, 1}, {17, 3, 40, 5}, {128, 8, 300, 70}, {64, 2, 100, 1}})
                for (int nth : {1, 3}) {
                    Bench b(nth);
                    std::vector<float> init = rng.floats((size_t)(hd * Hkv * C), -2, 2);
                    std::vector<float> cur = rng.floats((size_t)(hd * Hkv * T), -70000, 70000);   // beyond f16 range too
                    for (size_t i = 0; i < cur.size(); i += 5) cur[i] = (float)rng.uni(-1e-6, 1e-6);  // f16 subnormals
                    std::vector<int32_t> slots((size_t)C);
                    std::iota(slots.begin(), slots.end(), 0);
                    std::shuffle(slots.begin(), slots.end(), rng.g);
                    std::vector<int32_t> pos(slots.begin(), slots.begin() + T);   // distinct, in random order
                    HostData cache = make(ty, init);
                    ggx_tensor * tcache = three_d ? b.input(cache, {hd, Hkv, C}, "k_cache") : b.input(cache, {hd * Hkv, C}, "k_cache");
                    b.guard(tcache);
                    ggx_tensor * tcur = three_d ? b.input(make(GGX_TYPE_F32, cur), {hd, Hkv, T}) : b.input(make(GGX_TYPE_F32, cur), {hd * Hkv, T});
                    ggx_tensor * out = ggx_kv_store(b.ctx, tcur, tcache, b.input(make_i32(pos), {T}));
                    REQUIRE(b.compute(out) == GGX_STATUS_OK);
                    std::vector<float> expect(cache.vals.begin(), cache.vals.end());
                    for (int64_t t = 0; t < T; t++)
                        for (int64_t i = 0; i < hd * Hkv; i++) expect[(size_t)(pos[(size_t)t] * hd * Hkv + i)] = cur[(size_t)(t * hd * Hkv + i)];
                    expect_same_bits(tag("kv_store", {hd, Hkv, C, T, three_d}, ty, nth), ty, b.get(tcache), make(ty, expect).bytes);
                }
}

TEST_CASE("ops: kv_store and attn with a position outside the cache fail naming the tensors") {
    for (int32_t bad : {-3, 8}) {
        Bench b(2);
        ggx_tensor * cache = b.input(make(GGX_TYPE_F16, std::vector<float>(4 * 8)), {4, 8}, "cache_k_l0");
        ggx_tensor * st = ggx_kv_store(b.ctx, b.input(make(GGX_TYPE_F32, std::vector<float>(8)), {4, 2}), cache,
                                       b.input(make_i32({1, bad}), {2}));
        ggx_set_name(st, "store_k_l0");
        CHECK(b.compute(st) == GGX_STATUS_FAILED);
        std::string msg = ggx_last_error();
        CHECK(msg.find("store_k_l0") != std::string::npos);
        CHECK(msg.find("cache_k_l0") != std::string::npos);
        CHECK(msg.find(std::to_string(bad)) != std::string::npos);

        ggx_tensor * kc = b.input(make(GGX_TYPE_F16, std::vector<float>(4 * 8)), {4, 1, 8});
        ggx_tensor * a = ggx_attn(b.ctx, b.input(make(GGX_TYPE_F32, std::vector<float>(8)), {4, 1, 2}), kc, kc,
                                  b.input(make_i32({bad, 1}), {2}), ggx_params_attn{1.0f, 0.0f, 0, 0});
        ggx_set_name(a, "attn_l0");
        CHECK(b.compute(a) == GGX_STATUS_FAILED);
        msg = ggx_last_error();
        CHECK(msg.find("attn_l0") != std::string::npos);
        CHECK(msg.find(std::to_string(bad)) != std::string::npos);
    }
}

// ---------------------------------------------------------------------------------------------
// ATTN reference in double. Error model per output element:
//   score s_j: a dot of hd f32 products, (hd + 1) U |scale| sum|q k| + U |s_j| for the scaling;
//              softcap then adds 3U cap + U |s_j| (tanh's absolute error, see above);
//   p_j = e^(s_j - m) is off by delta = 2 Emax + U max|s_j - m| + 2U relative (E = score error);
//   sum p_j v_j and sum p_j, over n keys with per-block rescaling: (2n + 16) U relative.
//   |error| <= sum_j p^_j |v_j| (2 delta + (2n + 16) U), p^ = normalised weights.
namespace {
struct AttnShape {
    int64_t hd, H, Hkv, T, C;
    int32_t pos0, window;
    float softcap;
    bool shuffled;   // positions in random order instead of pos0, pos0 + 1, ...
    int32_t non_causal = 0;   // every query sees keys up to pos[T - 1]
};

void attn_reference(const AttnShape & a, float scale, const std::vector<double> & q, const std::vector<double> & k,
                    const std::vector<double> & v, const std::vector<int32_t> & pos, std::vector<double> & ref,
                    std::vector<double> & bound) {
    const int64_t G = a.H / a.Hkv;
    ref.assign((size_t)(a.hd * a.H * a.T), 0.0);
    bound.assign(ref.size(), 0.0);
    for (int64_t t = 0; t < a.T; t++)
        for (int64_t h = 0; h < a.H; h++) {
            const int64_t hk = h / G, P = a.non_causal ? pos[(size_t)a.T - 1] : pos[(size_t)t];
            const int64_t j0 = a.window > 0 ? std::max<int64_t>(0, P - a.window + 1) : 0, n = P + 1 - j0;
            std::vector<double> s((size_t)n);
            double Emax = 0, m = -INFINITY;
            const double * qv = &q[(size_t)((t * a.H + h) * a.hd)];
            for (int64_t j = 0; j < n; j++) {
                const double * kv = &k[(size_t)(((j0 + j) * a.Hkv + hk) * a.hd)];
                double d = 0, mag = 0;
                for (int64_t i = 0; i < a.hd; i++) {
                    d += qv[i] * kv[i];
                    mag += std::fabs(qv[i] * kv[i]);
                }
                double sj = d * scale, E = (double)(a.hd + 1) * U * std::fabs(scale) * mag + U * std::fabs(sj);
                if (a.softcap != 0) {
                    sj = a.softcap * std::tanh(sj / a.softcap);
                    E += 3 * U * a.softcap + U * std::fabs(sj);
                }
                s[(size_t)j] = sj;
                Emax = std::max(Emax, E);
                m = std::max(m, sj);
            }
            double Z = 0, spread = 0;
            for (int64_t j = 0; j < n; j++) {
                Z += std::exp(s[(size_t)j] - m);
                spread = std::max(spread, m - s[(size_t)j]);
            }
            const double delta = 2 * Emax + U * spread + 2 * U;
            for (int64_t i = 0; i < a.hd; i++) {
                double o = 0, mag = 0;
                for (int64_t j = 0; j < n; j++) {
                    const double pj = std::exp(s[(size_t)j] - m) / Z;
                    const double vj = v[(size_t)(((j0 + j) * a.Hkv + hk) * a.hd + i)];
                    o += pj * vj;
                    mag += pj * std::fabs(vj);
                }
                const size_t idx = (size_t)((t * a.H + h) * a.hd + i);
                ref[idx] = o;
                bound[idx] = mag * (2 * delta + (double)(2 * n + 16) * U);
            }
        }
}

std::vector<int32_t> attn_positions(const AttnShape & a, Rng & rng) {
    std::vector<int32_t> pos((size_t)a.T);
    for (int64_t t = 0; t < a.T; t++) pos[(size_t)t] = a.pos0 + (int32_t)t;
    if (a.shuffled) std::shuffle(pos.begin(), pos.end(), rng.g);
    return pos;
}

const std::vector<AttnShape> k_attn_shapes = {
    {1, 1, 1, 1, 1, 0, 0, 0, false},      {3, 2, 1, 5, 10, 2, 0, 0, false},       {17, 4, 1, 3, 50, 37, 0, 0, true},
    {64, 8, 2, 1, 300, 250, 0, 0, false}, {128, 4, 4, 70, 100, 0, 0, 0, false},   {64, 8, 2, 33, 200, 100, 16, 0, false},
    {32, 4, 2, 5, 90, 60, 0, 20, false},  {128, 32, 8, 1, 1000, 999, 0, 0, false}, {40, 6, 3, 9, 140, 129, 100, 30, true},
    {8, 8, 1, 2, 70, 64, 0, 0, false},    {64, 4, 2, 20, 50, 0, 0, 0, false, 1},  {24, 4, 4, 9, 40, 30, 5, 0, true, 1},
};
}  // namespace

TEST_CASE("ops: attn over f32/f16/bf16 caches: GQA, positions, window, softcap") {
    Rng rng(13);
    for (ggx_type ty : k_float_types)
        for (const AttnShape & a : k_attn_shapes)
            for (int nth : {1, 3}) {
                Bench b(nth);
                const float scale = 1.0f / std::sqrt((float)a.hd);
                HostData q = make(GGX_TYPE_F32, rng.floats((size_t)(a.hd * a.H * a.T), -2, 2));
                HostData k = make(ty, rng.floats((size_t)(a.hd * a.Hkv * a.C), -2, 2));
                HostData v = make(ty, rng.floats((size_t)(a.hd * a.Hkv * a.C), -1, 1));
                const std::vector<int32_t> pos = attn_positions(a, rng);
                ggx_tensor * tk = b.input(k, {a.hd, a.Hkv, a.C}), * tv = b.input(v, {a.hd, a.Hkv, a.C});
                b.guard(tk);
                b.guard(tv);
                std::vector<float> got = b.run_f32(ggx_attn(b.ctx, b.input(q, {a.hd, a.H, a.T}), tk, tv, b.input(make_i32(pos), {a.T}),
                                                            ggx_params_attn{scale, a.softcap, a.window, a.non_causal}));
                std::vector<double> ref, bound;
                attn_reference(a, scale, q.vals, k.vals, v.vals, pos, ref, bound);
                expect_close(tag("attn", {a.hd, a.H, a.Hkv, a.T, a.C, a.pos0, a.window, (long long)a.softcap}, ty, nth), got, ref, bound);
            }
}

TEST_CASE("ops: kv_store then attn in one graph (the decode/prefill pattern)") {
    Rng rng(14);
    for (ggx_type ty : k_float_types)
        for (const AttnShape & a : std::vector<AttnShape>{{64, 8, 2, 1, 100, 57, 0, 0, false}, {32, 4, 1, 20, 60, 13, 0, 0, false},
                                                          {16, 2, 2, 7, 7, 0, 3, 0, false}})
            for (int nth : {1, 2}) {
                Bench b(nth);
                const float scale = 0.3f;
                const int64_t row = a.hd * a.Hkv;
                std::vector<float> kinit = rng.floats((size_t)(row * a.C)), vinit = rng.floats((size_t)(row * a.C));
                std::vector<float> kcur = rng.floats((size_t)(row * a.T)), vcur = rng.floats((size_t)(row * a.T));
                HostData q = make(GGX_TYPE_F32, rng.floats((size_t)(a.hd * a.H * a.T), -2, 2));
                const std::vector<int32_t> pos = attn_positions(a, rng);
                ggx_tensor * tpos = b.input(make_i32(pos), {a.T});
                ggx_tensor * kc = b.input(make(ty, kinit), {a.hd, a.Hkv, a.C}), * vc = b.input(make(ty, vinit), {a.hd, a.Hkv, a.C});
                ggx_tensor * ks = ggx_kv_store(b.ctx, b.input(make(GGX_TYPE_F32, kcur), {row, a.T}), kc, tpos);
                ggx_tensor * vs = ggx_kv_store(b.ctx, b.input(make(GGX_TYPE_F32, vcur), {row, a.T}), vc, tpos);
                std::vector<float> got = b.run_f32(ggx_attn(b.ctx, b.input(q, {a.hd, a.H, a.T}), ks, vs, tpos, ggx_params_attn{scale, 0, a.window, 0}));
                for (int64_t t = 0; t < a.T; t++)
                    for (int64_t i = 0; i < row; i++) {
                        kinit[(size_t)(pos[(size_t)t] * row + i)] = kcur[(size_t)(t * row + i)];
                        vinit[(size_t)(pos[(size_t)t] * row + i)] = vcur[(size_t)(t * row + i)];
                    }
                std::vector<double> ref, bound;
                attn_reference(a, scale, q.vals, make(ty, kinit).vals, make(ty, vinit).vals, pos, ref, bound);
                expect_close(tag("kv_store+attn", {a.hd, a.H, a.Hkv, a.T, a.C}, ty, nth), got, ref, bound);
            }
}

// ---------------------------------------------------------------------------------------------
TEST_CASE("ops: unsupported nodes and unbound graphs are errors, not crashes") {
    Bench b(2);
    // i32 weights are not a matmul type
    ggx_tensor * w = b.input(make_i32(std::vector<int32_t>(12)), {4, 3}, "w_i32");
    ggx_tensor * y = ggx_mul_mat(b.ctx, w, b.input(make(GGX_TYPE_F32, std::vector<float>(8)), {4, 2}));
    ggx_set_name(y, "bad_matmul");
    CHECK(b.be->iface.supports_op(b.be, y) == 0);
    CHECK(b.compute(y) == GGX_STATUS_UNSUPPORTED);
    CHECK(std::string(ggx_last_error()).find("bad_matmul") != std::string::npos);
    // mismatched inner sizes
    ggx_tensor * y2 = ggx_mul_mat(b.ctx, b.input(make(GGX_TYPE_F32, std::vector<float>(12)), {4, 3}),
                                  b.input(make(GGX_TYPE_F32, std::vector<float>(10)), {5, 2}));
    CHECK(b.be->iface.supports_op(b.be, y2) == 0);
    // a node whose data was never bound
    ggx_context * ctx = ggx_context_new();
    ggx_tensor * a = ggx_new_tensor_1d(ctx, GGX_TYPE_F32, 8);
    ggx_tensor * s = ggx_silu(ctx, a);
    ggx_graph * g = ggx_graph_new(ctx);
    ggx_graph_build(g, s);
    CHECK(b.be->iface.supports_op(b.be, s) == 1);
    CHECK(ggx_backend_graph_compute(b.be, g) == GGX_STATUS_FAILED);
    CHECK(std::string(ggx_last_error()).find("no data") != std::string::npos);
    ggx_context_free(ctx);
}

TEST_CASE("backend: init by name, list, tensor_set/get bounds, thread count") {
    ggx_backend * be = ggx_backend_init("cpu", 2);
    REQUIRE(be != nullptr);
    CHECK(std::string(be->name) == "cpu");
    CHECK(be->is_host == 1);
    CHECK(be->alignment >= 64);
    CHECK(std::string(be->description).find("2 threads") != std::string::npos);
    CHECK(std::string(ggx_backend_list()).find("cpu") == 0);

    CHECK(ggx_backend_init("tpu", 1) == nullptr);
    CHECK(std::string(ggx_last_error()).find("tpu") != std::string::npos);
    CHECK(ggx_backend_init("cuda:x", 1) == nullptr);
#ifndef GGX_USE_CUDA
    CHECK(ggx_backend_init("cuda:0", 1) == nullptr);
    CHECK(std::string(ggx_last_error()).find("not compiled in") != std::string::npos);
    CHECK(ggx_backend_init("hip", 1) == nullptr);
#endif

    ggx_context * ctx = ggx_context_new();
    ggx_tensor * t = ggx_new_tensor_2d(ctx, GGX_TYPE_F16, 5, 3);   // 30 bytes
    std::vector<uint8_t> src(64, 7), dst(64, 0);
    CHECK(ggx_backend_tensor_set(be, t, src.data(), 0, 2) == GGX_STATUS_FAILED);   // no data yet
    void * buf = nullptr;
    REQUIRE(be->iface.alloc(be, ggx_nbytes(t), &buf) == GGX_STATUS_OK);
    t->data = buf;
    CHECK(ggx_backend_tensor_set(be, t, src.data(), 0, 30) == GGX_STATUS_OK);
    CHECK(ggx_backend_tensor_set(be, t, src.data(), 10, 21) == GGX_STATUS_FAILED);
    CHECK(std::string(ggx_last_error()).find("outside") != std::string::npos);
    CHECK(ggx_backend_tensor_set(be, t, src.data(), SIZE_MAX, 2) == GGX_STATUS_FAILED);   // no wrap-around
    CHECK(ggx_backend_tensor_get(be, t, dst.data(), 4, 26) == GGX_STATUS_OK);
    CHECK(dst[0] == 7);
    CHECK(dst[25] == 7);
    CHECK(dst[26] == 0);
    CHECK(ggx_backend_tensor_get(be, t, dst.data(), 31, 0) == GGX_STATUS_FAILED);
    be->iface.dealloc(be, buf);
    ggx_context_free(ctx);

    // Changing the thread count between computes keeps results.
    for (int n : {1, 4, 0, 3}) {
        ggx_backend_cpu_set_n_threads(be, n);
        ggx_context * c2 = ggx_context_new();
        ggx_tensor * x = ggx_new_tensor_2d(c2, GGX_TYPE_F32, 4099, 3);
        x->flags |= GGX_FLAG_INPUT;
        ggx_tensor * y = ggx_scale(c2, x, 2.0f);
        y->flags |= GGX_FLAG_OUTPUT;
        ggx_graph * g = ggx_graph_new(c2);
        ggx_graph_build(g, y);
        void * mem = nullptr;
        REQUIRE(be->iface.alloc(be, ggx_graph_plan(g, be->alignment), &mem) == GGX_STATUS_OK);
        ggx_graph_bind(g, mem);
        std::vector<float> xs(4099 * 3), ys(xs.size());
        for (size_t i = 0; i < xs.size(); i++) xs[i] = (float)i;
        REQUIRE(ggx_backend_tensor_set(be, x, xs.data(), 0, xs.size() * 4) == GGX_STATUS_OK);
        for (int rep = 0; rep < 50; rep++) REQUIRE(ggx_backend_graph_compute(be, g) == GGX_STATUS_OK);
        REQUIRE(ggx_backend_tensor_get(be, y, ys.data(), 0, ys.size() * 4) == GGX_STATUS_OK);
        size_t bad = 0;
        for (size_t i = 0; i < xs.size(); i++) bad += ys[i] != 2.0f * xs[i];
        CHECK(bad == 0);
        be->iface.dealloc(be, mem);
        ggx_context_free(c2);
    }
    ggx_backend_free(be);
}
