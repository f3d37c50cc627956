// Every non-matmul op on CUDA against the CPU backend, on random inputs and awkward sizes.
// Tolerances: pure data movement (get_rows, kv_store, cpy) is exact. Element-wise maths differ
// only by the device's expf/tanhf (a few ulp): atol 1e-6, rtol 1e-5. Row reductions (norms,
// softmax) sum in a different order: rtol 1e-5 plus atol 1e-6. RoPE angles are formed in double
// on both sides, the rotation in f32: rtol 1e-5, atol 1e-5. Attention accumulates up to C terms
// in another order with online rescaling: atol 2e-5, rtol 2e-4 (outputs are O(1) averages). The
// tensor-core prefill path rounds q*scale and p to fp16 (2^-11 relative each; through hd = 128
// products the score error reaches ~1.5e-3): atol and rtol 5e-3 there.
#include "cuda-harness.h"
#include "tests/scoped-env.h"

using namespace cudatest;

TEST_CASE("cuda: get_rows f32/f16/bf16 tables, exact") {
    REQUIRE_CUDA();
    for (ggx_type tt : {GGX_TYPE_F32, GGX_TYPE_F16, GGX_TYPE_BF16})
        for (int64_t D : {100, 2500}) {   // 2500: three chunks of the kernel's 1024, the last one partial
            auto o = run_both([&](GraphRun & r) {
                ggx_tensor * tab = r.input_rand(tt, {D, 37});
                ggx_tensor * ids = r.input_i32({9}, {0, 36, 5, 5, 17, 1, 30, 2, 36});
                return ggx_get_rows(r.ctx, tab, ids);
            });
            check_close(o.cuda.f, o.cpu.f, 0, 0, std::string("get_rows ") + ggx_type_name(tt) + " D " + std::to_string(D));
        }
}

TEST_CASE("cuda: add/mul with full and broadcast operands") {
    REQUIRE_CUDA();
    for (ggx_op op : {GGX_OP_ADD, GGX_OP_MUL})
        for (ggx_type bt : {GGX_TYPE_F32, GGX_TYPE_F16, GGX_TYPE_BF16})
            for (bool bcast : {false, true})
                for (int64_t D : {131, 128}) {   // 128: the 16-byte path
                    auto o = run_both([&](GraphRun & r) {
                        ggx_tensor * a = r.input_f32({D, 7});
                        ggx_tensor * b = r.input_rand(bt, bcast ? std::vector<int64_t>{D} : std::vector<int64_t>{D, 7});
                        return op == GGX_OP_ADD ? ggx_add(r.ctx, a, b) : ggx_mul(r.ctx, a, b);
                    });
                    check_close(o.cuda.f, o.cpu.f, 0, 0, std::string(ggx_op_name(op)) + " " + ggx_type_name(bt) + (bcast ? " bcast" : "") +
                                                         " D " + std::to_string(D));
                }
}

TEST_CASE("cuda: unary ops and glu") {
    REQUIRE_CUDA();
    for (int which = 0; which < 8; which++) {
        auto o = run_both([&](GraphRun & r) {
            const int64_t D = which >= 6 ? 999 : 1000;   // 999 x 3: the glu's scalar path
            ggx_tensor * a = r.input_f32({D, 3}, 6.0f);
            switch (which) {
                case 0: return ggx_scale(r.ctx, a, 0.37f);
                case 1: return ggx_silu(r.ctx, a);
                case 2: return ggx_gelu(r.ctx, a);
                case 3: return ggx_softcap(r.ctx, a, 5.0f);
                case 4: case 6: return ggx_glu(r.ctx, a, r.input_f32({D, 3}), GGX_ACT_SILU);
                default: return ggx_glu(r.ctx, a, r.input_f32({D, 3}), GGX_ACT_GELU);
            }
        });
        check_close(o.cuda.f, o.cpu.f, 1e-6f, 1e-5f, "unary #" + std::to_string(which));
    }
}

TEST_CASE("cuda: cpy between float types, exact (round to nearest even)") {
    REQUIRE_CUDA();
    for (ggx_type from : {GGX_TYPE_F32, GGX_TYPE_F16, GGX_TYPE_BF16})
        for (ggx_type to : {GGX_TYPE_F32, GGX_TYPE_F16, GGX_TYPE_BF16}) {
            auto o = run_both([&](GraphRun & r) { return ggx_cpy(r.ctx, r.input_rand(from, {77, 5}, 3.0f), to); });
            CHECK(o.cuda.bytes == o.cpu.bytes);
            check_close(o.cuda.f, o.cpu.f, 0, 0, std::string("cpy ") + ggx_type_name(from) + "->" + ggx_type_name(to));
        }
}

TEST_CASE("cuda: rms_norm and layer_norm") {
    REQUIRE_CUDA();
    for (int64_t D : {1, 17, 256, 4096})
        for (int variant = 0; variant < 6; variant++) {
            const int64_t rows = D == 256 ? 300 : 5;   // 300 rows: the many-rows launch shape
            auto o = run_both([&](GraphRun & r) {
                ggx_tensor * x = r.input_f32({D, rows}, 2.0f);
                if (variant == 5) {   // a residual add and the norm of its sum (one fused kernel): both results
                    ggx_tensor * sum = ggx_add(r.ctx, x, r.input_f32({D, rows}));
                    return ggx_add(r.ctx, ggx_rms_norm(r.ctx, sum, r.input_rand(GGX_TYPE_BF16, {D}), 1e-6f), sum);
                }
                switch (variant) {
                    case 0: return ggx_rms_norm(r.ctx, x, nullptr, 1e-5f);
                    case 1: return ggx_rms_norm(r.ctx, x, r.input_rand(GGX_TYPE_F32, {D}), 1e-6f);
                    case 2: return ggx_rms_norm(r.ctx, x, r.input_rand(GGX_TYPE_F16, {D}), 1e-6f);
                    case 3: return ggx_layer_norm(r.ctx, x, nullptr, nullptr, 1e-5f);
                    default: return ggx_layer_norm(r.ctx, x, r.input_rand(GGX_TYPE_F16, {D}), r.input_rand(GGX_TYPE_F16, {D}), 1e-5f);
                }
            });
            check_close(o.cuda.f, o.cpu.f, 1e-5f, 1e-5f, "norm D=" + std::to_string(D) + " variant " + std::to_string(variant));
        }
}

TEST_CASE("cuda: rope neox/interleave, partial rotation, divisors, yarn") {
    REQUIRE_CUDA();
    for (int mode : {GGX_ROPE_NEOX, GGX_ROPE_INTERLEAVE})
        for (int variant = 0; variant < 4; variant++) {
            // variant 3: llama's head (hd 128, all rotated), 9 heads: more pairs than threads
            const int64_t hd = variant == 3 ? 128 : 64, H = variant == 3 ? 9 : 3, T = 6;
            const int n_rot = variant == 1 ? 32 : (int)hd;
            auto o = run_both([&](GraphRun & r) {
                ggx_tensor * x = r.input_f32({hd, H, T});
                ggx_tensor * pos = r.input_i32({T}, {0, 1, 7, 100, 4095, 70000});
                ggx_tensor * div = nullptr;
                ggx_params_rope p = {};
                p.n_rot = n_rot;
                p.mode = mode;
                p.theta = 500000.0f;
                p.pos_scale = 1.0f;
                p.attn_factor = 1.0f;
                if (variant == 2) {
                    div = r.input_rand(GGX_TYPE_F32, {n_rot / 2}, 1.0f);
                    p.ext_factor = 1.0f;
                    p.pos_scale = 0.25f;
                    p.attn_factor = 1.1f;
                    p.beta_fast = 32.0f;
                    p.beta_slow = 1.0f;
                    p.n_ctx_orig = 4096;
                }
                if (div) {   // divisors in [0.5, 2]
                    auto & bytes = r.inputs.back().second;
                    for (size_t i = 0; i < bytes.size(); i += 4) {
                        float f;
                        memcpy(&f, &bytes[i], 4);
                        f = 1.25f + 0.75f * f;
                        memcpy(&bytes[i], &f, 4);
                    }
                }
                return ggx_rope(r.ctx, x, pos, div, p);
            });
            check_close(o.cuda.f, o.cpu.f, 1e-5f, 1e-5f, "rope mode " + std::to_string(mode) + " variant " + std::to_string(variant));
        }
}

TEST_CASE("cuda: softmax and argmax (ties to the lowest index)") {
    REQUIRE_CUDA();
    auto o = run_both([&](GraphRun & r) { return ggx_softmax(r.ctx, r.input_f32({1001, 4}, 10.0f), 0.7f); });
    check_close(o.cuda.f, o.cpu.f, 1e-7f, 1e-5f, "softmax");
    auto a = run_both([&](GraphRun & r) {
        std::vector<uint8_t> b(300 * 3 * 4);
        std::vector<float> v(300 * 3);
        for (size_t i = 0; i < v.size(); i++) v[i] = (float)((i * 7919) % 97);   // max 96 repeats in each row
        memcpy(b.data(), v.data(), b.size());
        return ggx_argmax(r.ctx, r.input(GGX_TYPE_F32, {300, 3}, b));
    });
    check_close(a.cuda.f, a.cpu.f, 0, 0, "argmax");
    auto a2 = run_both([&](GraphRun & r) { return ggx_argmax(r.ctx, r.input_f32({128256, 2})); });
    check_close(a2.cuda.f, a2.cpu.f, 0, 0, "argmax vocab-sized");
    // Rows of 1003 (every other row not 16-byte aligned: the kernel's scalar path), NaN, -inf
    // rows, and a vocabulary row whose maximum repeats in the float4 loop's lanes and its tail.
    auto a3 = run_both([&](GraphRun & r) {
        const int64_t D = 1003, R = 5;
        std::vector<float> v((size_t)(D * R));
        for (size_t i = 0; i < v.size(); i++) v[i] = (float)((i * 7919) % 89);
        v[0] = NAN;                                                   // row 0: NaN first, never chosen
        for (int64_t i = 0; i < D; i++) v[(size_t)(2 * D + i)] = i % 3 ? -INFINITY : NAN;   // row 2: no number
        for (int64_t i = 0; i < D; i++) v[(size_t)(3 * D + i)] = -INFINITY;                 // row 3: all -inf
        std::vector<uint8_t> b(v.size() * 4);
        memcpy(b.data(), v.data(), b.size());
        return ggx_argmax(r.ctx, r.input(GGX_TYPE_F32, {D, R}, b));
    });
    check_close(a3.cuda.f, a3.cpu.f, 0, 0, "argmax odd rows, NaN, -inf");
    auto a4 = run_both([&](GraphRun & r) {
        const int64_t D = 128256;
        std::vector<float> v((size_t)D);
        for (size_t i = 0; i < v.size(); i++) v[i] = (float)((i * 104729) % 1000) * 1e-3f;
        for (int64_t i : {(int64_t)128254, (int64_t)77777, (int64_t)4101, (int64_t)4102}) v[(size_t)i] = 7.5f;
        std::vector<uint8_t> b(v.size() * 4);
        memcpy(b.data(), v.data(), b.size());
        return ggx_argmax(r.ctx, r.input(GGX_TYPE_F32, {D, 1}, b));
    });
    check_close(a4.cuda.f, a4.cpu.f, 0, 0, "argmax vocab row, repeated maximum");
    REQUIRE(a4.cuda.f.size() == 1);
    CHECK(a4.cuda.f[0] == 4101.0f);   // the lowest of the four maxima
}

// top_n against a sort on the host by the same order (larger value, then lower index, NaN last):
// ids and values exact. Rows on a coarse grid tie at the n-th place; -inf and NaN fill others.
TEST_CASE("cuda: top_n of a row, exact, ties to the lower index") {
    REQUIRE_CUDA();
    ggx_backend * be = cuda_backend();
    REQUIRE((be->iface.top_n != nullptr));
    std::mt19937_64 rng(99);
    // kind 0 normal, 1 grid of 0.5, 2 -inf/NaN mixed in, 3 all equal, 4 -0, +0 and 1
    struct Row { int64_t count; int n; int kind; };
    const Row rows[] = {{1, 1, 0},      {50, 50, 0},     {50, 7, 1},     {4096, 41, 0},   {4097, 41, 1},
                        {5000, 256, 2}, {128256, 41, 0}, {128256, 41, 1}, {128256, 256, 0}, {152064, 100, 2},
                        {262144, 256, 0}, {9000, 3, 3}, {300, 256, 2}, {6000, 200, 4}};
    for (const Row & R : rows) {
        std::vector<float> v((size_t)R.count);
        std::normal_distribution<double> d(0.0, 3.0);
        for (size_t i = 0; i < v.size(); i++) {
            const double x = d(rng);
            v[i] = R.kind == 1 ? (float)(std::round(x * 2) / 2) : R.kind == 3 ? 1.25f : (float)x;
            if (R.kind == 4) v[i] = i % 7 == 0 ? 1.0f : i % 2 ? -0.0f : 0.0f;
            if (R.kind == 2 && i % 3 == 1) v[i] = i % 2 ? -INFINITY : NAN;
        }
        std::vector<int32_t> order((size_t)R.count);
        for (size_t i = 0; i < order.size(); i++) order[i] = (int32_t)i;
        auto better = [&](int32_t a, int32_t b) {
            const float x = v[(size_t)a], y = v[(size_t)b];
            const bool nx = std::isnan(x), ny = std::isnan(y);
            if (nx != ny) return ny;   // a number before NaN
            if (nx) return a < b;
            return x > y || (x == y && a < b);   // -0 == +0: a tie
        };
        std::partial_sort(order.begin(), order.begin() + R.n, order.end(), better);
        void * buf = nullptr;
        REQUIRE(be->iface.alloc(be, v.size() * 4, &buf) == GGX_STATUS_OK);
        REQUIRE(be->iface.set(be, buf, v.data(), v.size() * 4) == GGX_STATUS_OK);
        std::vector<int32_t> ids((size_t)R.n, -1);
        std::vector<float> vals((size_t)R.n, 0.0f);
        REQUIRE(be->iface.top_n(be, buf, R.count, R.n, ids.data(), vals.data()) == GGX_STATUS_OK);
        be->iface.dealloc(be, buf);
        for (int i = 0; i < R.n; i++) {
            const float want = v[(size_t)order[(size_t)i]];
            REQUIRE_MESSAGE(ids[(size_t)i] == order[(size_t)i], "count " << R.count << " n " << R.n << " kind " << R.kind << " place " << i);
            REQUIRE_MESSAGE((std::isnan(want) ? std::isnan(vals[(size_t)i]) : vals[(size_t)i] == want), "place " << i);
        }
    }
    // a row too long for the two levels: unsupported (the sampler reads the row instead)
    void * buf = nullptr;
    REQUIRE(be->iface.alloc(be, 300000 * 4, &buf) == GGX_STATUS_OK);
    int32_t ids[256];
    float vals[256];
    CHECK(be->iface.top_n(be, buf, 300000, 256, ids, vals) == GGX_STATUS_UNSUPPORTED);
    CHECK(be->iface.top_n(be, buf, 10, 11, ids, vals) == GGX_STATUS_FAILED);
    be->iface.dealloc(be, buf);
}

TEST_CASE("cuda: kv_store into f32/f16/bf16 caches, exact") {
    REQUIRE_CUDA();
    for (ggx_type ct : {GGX_TYPE_F32, GGX_TYPE_F16, GGX_TYPE_BF16}) {
        auto o = run_both([&](GraphRun & r) {
            ggx_tensor * cur = r.input_f32({64 * 2, 3});
            ggx_tensor * cache = r.input_rand(ct, {64 * 2, 20});
            ggx_tensor * pos = r.input_i32({3}, {4, 5, 19});
            return ggx_kv_store(r.ctx, cur, cache, pos);
        });
        CHECK(o.cuda.bytes == o.cpu.bytes);
    }
}

namespace {
struct AttnCase { int64_t hd, H, Hkv, C, T; ggx_type ct; float softcap; int window; int non_causal = 0; };

void check_attn_case(const AttnCase & c) {
    auto o = run_both([&](GraphRun & r) {
        ggx_tensor * q = r.input_f32({c.hd, c.H, c.T});
        ggx_tensor * k = r.input_rand(c.ct, {c.hd, c.Hkv, c.C});
        ggx_tensor * v = r.input_rand(c.ct, {c.hd, c.Hkv, c.C});
        std::vector<int32_t> pos(c.T);
        // a prompt chunk at the end of the filled part of the cache, or scattered decodes
        for (int64_t t = 0; t < c.T; t++) pos[t] = (int32_t)(c.C - c.T + t - (c.T == 1 ? c.C / 3 : 0));
        ggx_tensor * p = r.input_i32({c.T}, pos);
        ggx_params_attn ap = {};
        ap.scale = 1.0f / std::sqrt((float)c.hd);
        ap.softcap = c.softcap;
        ap.window = c.window;
        ap.non_causal = c.non_causal;
        return ggx_attn(r.ctx, q, k, v, p, ap);
    });
    // the tensor-core kernels round q and p to fp16: prefill, and decode with T x G <= 16 rows
    const bool tc = c.ct == GGX_TYPE_F16 && (c.hd == 64 || c.hd == 80 || c.hd == 96 || c.hd == 128) &&
                    (c.T > 8 || c.T * (c.H / c.Hkv) <= 16);
    check_close(o.cuda.f, o.cpu.f, tc ? 5e-3f : 2e-5f, tc ? 5e-3f : 2e-4f,
                "attn hd " + std::to_string(c.hd) + " H " + std::to_string(c.H) + "/" + std::to_string(c.Hkv) + " C " +
                    std::to_string(c.C) + " T " + std::to_string(c.T));
}
// Tensor-core decode shapes (f16 cache, T x G <= 16 query rows per KV head): one split, many
// splits merged per token, G = 1/2/4/8, softcap, window, non-causal (also with a window).
const AttnCase k_decode_mma_cases[] = {
    {128, 32, 8, 20, 1, GGX_TYPE_F16, 0, 0},    {128, 32, 8, 4096, 3, GGX_TYPE_F16, 0, 0},
    {96, 8, 4, 500, 2, GGX_TYPE_F16, 15.0f, 0}, {80, 8, 1, 300, 2, GGX_TYPE_F16, 0, 50},
    {64, 4, 4, 1000, 8, GGX_TYPE_F16, 0, 0},    {128, 8, 2, 200, 2, GGX_TYPE_F16, 0, 0, 1},
    {128, 8, 2, 200, 2, GGX_TYPE_F16, 0, 30, 1},
};
// Decode shapes for one split of up to 1024 keys (GGX_ATTN_MIN_SPLIT_KEYS=1024; see the test
// "attention decode in one split of up to 1024 keys").
const AttnCase k_one_split_cases[] = {
    {128, 32, 8, 20, 1, GGX_TYPE_F16, 0, 0},     {128, 32, 8, 140, 3, GGX_TYPE_F16, 0, 0},
    {64, 4, 4, 90, 8, GGX_TYPE_F16, 0, 0},       {96, 8, 4, 120, 2, GGX_TYPE_F16, 15.0f, 0},
    {80, 8, 1, 100, 2, GGX_TYPE_F16, 0, 20},     {128, 8, 2, 60, 1, GGX_TYPE_F16, 0, 0, 1},
    {64, 16, 2, 33, 2, GGX_TYPE_F16, 0, 0},      {128, 32, 8, 900, 1, GGX_TYPE_F16, 0, 0},
    {128, 32, 8, 1000, 2, GGX_TYPE_F16, 0, 100}, {64, 4, 2, 40, 8, GGX_TYPE_F16, 0, 4},
    {128, 8, 2, 60, 3, GGX_TYPE_F16, 0, 20, 1},
};
// Prefill shapes (T > 8, f16 cache): tensor-core tiles, partial tiles, GQA, softcap, windows;
// whole prompts (pos 0..T-1, many key tiles, partial last tile; a window shorter than a tile);
// non-causal (every query sees keys up to the last position; with a window of 40, the same 40
// keys for all 200 queries). Run with each prefill kernel form.
const AttnCase k_prefill_cases[] = {
    {128, 32, 8, 600, 100, GGX_TYPE_F16, 0, 0}, {96, 4, 1, 300, 70, GGX_TYPE_F16, 20.0f, 50},
    {80, 4, 2, 200, 40, GGX_TYPE_F16, 0, 0},    {64, 8, 8, 130, 129, GGX_TYPE_F16, 0, 0},
    {128, 32, 8, 300, 300, GGX_TYPE_F16, 0, 0}, {80, 6, 2, 217, 217, GGX_TYPE_F16, 0, 0},
    {128, 8, 2, 700, 150, GGX_TYPE_F16, 0, 40}, {96, 8, 4, 260, 190, GGX_TYPE_F16, 15.0f, 0},
    {64, 4, 2, 100, 20, GGX_TYPE_F16, 0, 0, 1}, {128, 8, 2, 500, 200, GGX_TYPE_F16, 0, 0, 1},
    {128, 8, 2, 500, 200, GGX_TYPE_F16, 0, 40, 1},
};
}  // namespace


TEST_CASE("cuda: attention decode (split-K) and prefill paths, GQA, softcap, window") {
    REQUIRE_CUDA();
    const AttnCase cases[] = {
        {64, 4, 4, 40, 1, GGX_TYPE_F16, 0, 0},     {128, 8, 2, 700, 1, GGX_TYPE_F16, 0, 0},
        {128, 32, 8, 4096, 1, GGX_TYPE_F16, 0, 0}, {80, 6, 3, 300, 3, GGX_TYPE_F32, 0, 0},
        {128, 16, 2, 1000, 8, GGX_TYPE_BF16, 0, 0}, {64, 8, 1, 513, 4, GGX_TYPE_F16, 30.0f, 0},
        {64, 4, 2, 600, 2, GGX_TYPE_F16, 0, 100},  {64, 4, 2, 200, 17, GGX_TYPE_F16, 0, 0},
        {128, 8, 2, 300, 64, GGX_TYPE_F32, 0, 0},  {256, 4, 1, 150, 33, GGX_TYPE_F16, 20.0f, 40},
        {8, 4, 2, 64, 12, GGX_TYPE_F32, 0, 0},
        // non-causal decode (every query sees keys up to the last position); with a window, the
        // same 30 keys before it for every query (a window from each query's own position would
        // show the first query two keys more)
        {64, 4, 2, 100, 3, GGX_TYPE_F16, 0, 0, 1}, {64, 4, 2, 100, 3, GGX_TYPE_F16, 0, 30, 1},
        {64, 4, 2, 100, 3, GGX_TYPE_F32, 0, 30, 1},
    };
    for (const AttnCase & c : cases) check_attn_case(c);
    for (const AttnCase & c : k_decode_mma_cases) check_attn_case(c);
    const ScopedEnv rows("GGX_ATTN_FA_ROWS", "16");   // (the default picks 32 only for large grids)
    for (const AttnCase & c : k_prefill_cases) check_attn_case(c);
}

// GGX_ATTN_FA_ROWS=32: the prefill kernel with two 16-row tiles per warp, 128 queries per block
// and 32-key tiles (the default where its grid gives every SM two blocks; forced here). The prefill shapes (k_prefill_cases) against the CPU with
// the same bounds (fp16 q and p as before), plus whole prompts that end inside a 128-query block and a
// 32-key tile, a window that leaves some warps of a block without a visible key in a tile, and
// one of 64 keys at an offset where a tile is wholly visible to one row tile of a warp and not
// the other (a "fully visible" test that looked at one row tile fails only there; found by
// review, with a host emulation of the kernel).
TEST_CASE("cuda: prefill attention with 32 query rows per warp") {
    REQUIRE_CUDA();
    const AttnCase cases[] = {
        {128, 8, 2, 397, 397, GGX_TYPE_F16, 0, 0},  {64, 4, 4, 300, 260, GGX_TYPE_F16, 0, 20},
        {128, 8, 2, 700, 180, GGX_TYPE_F16, 0, 64},
    };
    const ScopedEnv rows("GGX_ATTN_FA_ROWS", "32");
    for (const AttnCase & c : k_prefill_cases) check_attn_case(c);
    for (const AttnCase & c : cases) check_attn_case(c);
}

// GGX_ATTN_MIN_SPLIT_KEYS (measurements): decode splits of at least 64 keys (the default before
// run 132) and 256 keys, so one split walks up to that many keys alone and longer contexts merge
// more or fewer splits than the default's. The same bounds hold.
TEST_CASE("cuda: attention decode with 64 and 256 keys at least per split (the default is 128)") {
    REQUIRE_CUDA();
    const AttnCase cases[] = {
        {128, 32, 8, 200, 1, GGX_TYPE_F16, 0, 0},  {128, 32, 8, 4096, 1, GGX_TYPE_F16, 0, 0},
        {128, 32, 8, 700, 3, GGX_TYPE_F16, 0, 0},  {96, 8, 4, 500, 2, GGX_TYPE_F16, 15.0f, 0},
        {80, 8, 1, 300, 2, GGX_TYPE_F16, 0, 50},   {64, 4, 4, 1000, 8, GGX_TYPE_F16, 0, 0},
        {128, 8, 2, 700, 1, GGX_TYPE_F16, 0, 0},   {80, 6, 3, 300, 3, GGX_TYPE_F32, 0, 0},
    };
    for (const char * keys : {"64", "256"}) {
        CAPTURE(keys);
        const ScopedEnv split_keys("GGX_ATTN_MIN_SPLIT_KEYS", keys);
        for (const AttnCase & c : cases) check_attn_case(c);
    }
}

// GGX_ATTN_MIN_SPLIT_KEYS=1024: one split takes every visible key, and the block's four warps
// walk them and write the output without a split merge. A warp walks up to 10 tiles here (600
// visible keys of 900), reusing its stages many times (3 of them: the default for splits this
// long); the default's splits give it at most 2 tiles up to 4096 keys. Against the CPU: short
// contexts, T x G up to 16 rows (G at most 8, as the backend supports), softcap, windows (one of
// 4 keys over 8 tokens: the last token's rows mask the whole first tile the block walks),
// non-causal.
TEST_CASE("cuda: attention decode in one split of up to 1024 keys") {
    REQUIRE_CUDA();
    const ScopedEnv split_keys("GGX_ATTN_MIN_SPLIT_KEYS", "1024");
    for (const AttnCase & c : k_one_split_cases) check_attn_case(c);
}

// GGX_ATTN_STAGES=2|3: each warp of the tensor-core decode kernel keeps two or three K/V tiles in
// flight (the default takes 3 only where a split can give a warp more than 2 tiles: caches past
// 4096 keys, or more keys per split). Both forced, over the tensor-core decode shapes against the
// CPU with the same bounds, plus the shape of tg128 at --ctx 4096 on llama3-8b (22 active splits
// of 192 keys: 3 tiles per warp), and the shapes of one split walking up to 1024 keys (a warp
// reuses its stages many times).
TEST_CASE("cuda: attention decode with two and three K/V tiles in flight per warp") {
    REQUIRE_CUDA();
    const AttnCase long_cache[] = {
        {128, 32, 8, 6200, 1, GGX_TYPE_F16, 0, 0}, {128, 8, 2, 700, 1, GGX_TYPE_F16, 0, 0},
    };
    for (const char * st : {"2", "3"}) {
        CAPTURE(st);
        const ScopedEnv stages("GGX_ATTN_STAGES", st);
        for (const AttnCase & c : k_decode_mma_cases) check_attn_case(c);
        for (const AttnCase & c : long_cache) check_attn_case(c);
        const ScopedEnv split_keys("GGX_ATTN_MIN_SPLIT_KEYS", "1024");
        for (const AttnCase & c : k_one_split_cases) check_attn_case(c);
    }
}

TEST_CASE("cuda: a captured graph replays with new inputs") {
    REQUIRE_CUDA();
    // Same graph object computed twice; the second set of inputs must be honoured by the replay.
    ggx_backend * be = cuda_backend();
    ggx_context * ctx = ggx_context_new();
    ggx_tensor * x = ggx_new_tensor_2d(ctx, GGX_TYPE_F32, 256, 2);
    x->flags |= GGX_FLAG_INPUT;
    ggx_tensor * y = ggx_scale(ctx, ggx_rms_norm(ctx, x, nullptr, 1e-6f), 2.0f);
    y->flags |= GGX_FLAG_OUTPUT;
    ggx_graph * g = ggx_graph_new(ctx);
    ggx_graph_build(g, y);
    void * buf = nullptr;
    REQUIRE(be->iface.alloc(be, ggx_graph_plan(g, be->alignment), &buf) == GGX_STATUS_OK);
    ggx_graph_bind(g, buf);
    std::vector<float> in(512), out(512);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < 512; i++) in[i] = (float)((i * (step + 3)) % 11) - 5.0f + 0.5f * step;
        REQUIRE(ggx_backend_tensor_set(be, x, in.data(), 0, 2048) == GGX_STATUS_OK);
        REQUIRE(ggx_backend_graph_compute(be, g) == GGX_STATUS_OK);
        REQUIRE(ggx_backend_tensor_get(be, y, out.data(), 0, 2048) == GGX_STATUS_OK);
        for (int row = 0; row < 2; row++) {
            double ss = 0;
            for (int i = 0; i < 256; i++) ss += (double)in[row * 256 + i] * in[row * 256 + i];
            const double rr = 1.0 / std::sqrt(ss / 256 + 1e-6);
            for (int i = 0; i < 256; i++) CHECK(std::fabs(out[row * 256 + i] - 2.0 * in[row * 256 + i] * rr) < 1e-5);
        }
    }
    be->iface.dealloc(be, buf);
    ggx_context_free(ctx);
}

TEST_CASE("cuda: out-of-memory and bad device give a message, not a crash") {
    REQUIRE_CUDA();
    ggx_backend * be = cuda_backend();
    void * p = nullptr;
    CHECK(be->iface.alloc(be, (size_t)1 << 50, &p) == GGX_STATUS_ALLOC_FAILED);
    CHECK(p == nullptr);
    CHECK(std::string(ggx_last_error()).find("out of memory") != std::string::npos);
    CHECK(ggx_backend_init("cuda:999", 0) == nullptr);
    CHECK(std::string(ggx_last_error()).find("does not exist") != std::string::npos);
}
