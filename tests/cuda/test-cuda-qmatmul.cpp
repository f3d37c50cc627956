// EXL2 and GPTQ MUL_MAT on CUDA: both paths (GEMV for T <= 8, dequantize + cuBLAS above) against
// (1) an independent double-precision product with the reference dequantizer's fp16 weights
// (exl2/quant/dequant.h, bit-exact with ExLlamaV2), and (2) the CPU backend.
//
// Error model, S = sum_k |w_k x_k|: the prefill path rounds x to fp16 (2^-11 relative) and
// accumulates in fp32: below 2^-10 S. The GEMV path rounds x to fp16 too (after an exact
// power-of-two scaling), sums (v - z) * x in fp16 pairs over at most 32 rows (16 products per
// half), then applies each group's scale (unrounded weight, <= 2^-11) in fp32. Its worst case
// is 16 roundings of 2^-11 per piece, but those roundings are independent and zero-mean, so the
// error grows like 2^-11 * sqrt(16) * (one piece's partial sums) and, over K/32 pieces, like
// 2^-11 * 2 * S / sqrt(K): ~5e-5 S at K = 512, far inside 2^-10 S (a wrong weight or scale
// moves an output by ~S / sqrt(K), above 2^-10 S for any K here). Outputs near zero get +1e-6;
// against the CPU backend, which has its own rounding, twice the bound.
#include "cuda-harness.h"
#include "backends/cuda/decode-plan.h"
#include "tests/scoped-env.h"

#include "exl2/quant/dequant.h"
#include "exl2/quant/qlayer.h"
#include "exl2/quant/synthetic.h"
#include "exl2/safetensors.h"

#include <algorithm>
#include <cstring>
#include <memory>

using namespace cudatest;

namespace {

struct QCase {
    std::unique_ptr<exl2::SafeTensors> st;
    exl2::QLayerHost L;
    std::vector<uint16_t> w16;   // dequantized reference [K][N] (original row order)
};

QCase make_exl2(int K, int N, const std::string & layout, bool act_order, uint64_t seed) {
    QCase c;
    c.st.reset(new exl2::SafeTensors());
    exl2::SynthExl2Options opt;
    opt.act_order = act_order;
    opt.seed = seed;
    exl2::synth_add(*c.st, exl2::synth_exl2_layer("w", K, N, exl2::exl2_layout_parse(layout), opt));
    exl2::QLoadOptions lo;
    lo.N = N;
    c.L = exl2::qlayer_load(*c.st, "w", lo);
    exl2::Exl2Raw raw;
    raw.K = K;
    raw.N = N;
    raw.Np = c.L.Np;
    raw.G = c.L.G;
    raw.QR = c.L.QR;
    raw.q_weight = (const uint32_t *)c.st->get("w.q_weight").data;
    raw.q_scale = (const uint32_t *)c.st->get("w.q_scale").data;
    raw.q_scale_max = (const uint16_t *)c.st->get("w.q_scale_max").data;
    raw.q_groups = (const uint16_t *)c.st->get("w.q_groups").data;
    raw.q_invperm = (const int32_t *)c.st->get("w.q_invperm").data;
    c.w16.resize((size_t)K * N);
    exl2::exl2_dequant_ref(raw, 1.0f, c.w16.data());
    return c;
}

QCase make_gptq(int K, int N, int gs, bool act_order, uint64_t seed) {
    QCase c;
    c.st.reset(new exl2::SafeTensors());
    exl2::SynthGptqOptions opt;
    opt.group_size = gs;
    opt.act_order = act_order;
    opt.seed = seed;
    exl2::synth_add(*c.st, exl2::synth_gptq_layer("w", K, N, opt));
    c.L = exl2::qlayer_load(*c.st, "w", {});
    exl2::GptqRaw raw;
    raw.K = K;
    raw.N = N;
    raw.G = (int)c.st->get("w.scales").shape[0];
    raw.qweight = (const uint32_t *)c.st->get("w.qweight").data;
    raw.qzeros = (const uint32_t *)c.st->get("w.qzeros").data;
    raw.scales = (const uint16_t *)c.st->get("w.scales").data;
    raw.g_idx = c.st->has("w.g_idx") ? (const int32_t *)c.st->get("w.g_idx").data : nullptr;
    c.w16.resize((size_t)K * N);
    exl2::gptq_dequant_ref(raw, false, 1.0f, c.w16.data());
    return c;
}

std::vector<float> random_x(int T, int K, uint64_t seed) {
    std::vector<float> x((size_t)T * K);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (float & v : x) v = d(rng);
    return x;
}

std::vector<uint8_t> bytes_of(const std::vector<float> & x) {
    std::vector<uint8_t> b(x.size() * 4);
    memcpy(b.data(), x.data(), b.size());
    return b;
}

// Adds x W (double, from the reference fp16 weights) into ref and sum_k |w_k x_k| into mag.
void add_ref_product(const QCase & c, const std::vector<float> & x, int T, std::vector<double> & ref, std::vector<double> & mag) {
    const int K = c.L.K, N = c.L.N;
    std::vector<double> wd((size_t)K * N);
    for (size_t i = 0; i < wd.size(); i++) wd[i] = ggx_f16_to_f32(c.w16[i]);
    ref.resize((size_t)T * N, 0.0);
    mag.resize((size_t)T * N, 0.0);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = 0, a = 0;
            for (int k = 0; k < K; k++) {
                const double p = wd[(size_t)k * N + n] * x[(size_t)t * K + k];
                s += p;
                a += std::fabs(p);
            }
            ref[(size_t)t * N + n] += s;
            mag[(size_t)t * N + n] += a;
        }
}

// The graph y = x W of a case, x given as bytes (T rows of K floats).
Builder qmatmul_graph(const QCase & c, int T, const std::vector<uint8_t> & xb) {
    return [&c, T, &xb](GraphRun & r) {
        ggx_tensor * w = r.qweight(c.L);
        ggx_tensor * xt = r.input(GGX_TYPE_F32, {c.L.K, T}, xb);
        return ggx_mul_mat(r.ctx, w, xt);
    };
}

// Runs y = x W on CUDA (and on the CPU when `with_cpu`), checks both bounds; returns the GPU's y.
std::vector<float> check_qmatmul(const QCase & c, int T, bool with_cpu, const std::string & what) {
    const int K = c.L.K, N = c.L.N;
    const std::vector<float> x = random_x(T, K, K * 31 + N * 7 + T);
    const std::vector<uint8_t> xb = bytes_of(x);
    const Builder build = qmatmul_graph(c, T, xb);
    Output gpu = run_graph(cuda_backend(), build);
    std::vector<double> ref, mag;
    add_ref_product(c, x, T, ref, mag);
    std::vector<double> bound((size_t)T * N), bound2((size_t)T * N);
    for (size_t i = 0; i < ref.size(); i++) {
        bound[i] = mag[i] / 1024.0 + 1e-6;
        bound2[i] = mag[i] / 512.0 + 2e-6;
    }
    check_bound(gpu.f, ref, bound, what + " vs double reference");
    if (with_cpu) {
        Output cpu = run_graph(cpu_backend(), build);
        std::vector<double> cpud(cpu.f.begin(), cpu.f.end());
        check_bound(gpu.f, cpud, bound2, what + " vs cpu backend");
    }
    return gpu.f;
}

}  // namespace

TEST_CASE("cuda: EXL2 matmul, every width alone and mixed, GEMV and prefill paths") {
    REQUIRE_CUDA();
    const char * layouts[] = {"8 g32", "6 g32", "5 g32", "4 g128", "3/2 g64 .05/.95", "6/3/2 g32,64,64 .05/.2/.75",
                              "8/6/5 g32 .05/.1/.85", "8/4/3 g32,128,128 .05/.1/.85", "4/3 g32 .25/.75"};
    uint64_t seed = 1;
    for (const char * lay : layouts)
        for (bool act : {false, true}) {
            QCase c = make_exl2(512, 200, lay, act, seed++);   // N=200: padded to 224 on disk
            for (int T : {1, 3, 8, 9, 40})
                check_qmatmul(c, T, T == 1 || T == 9, std::string("exl2 '") + lay + "' act " + std::to_string(act) + " T " + std::to_string(T));
        }
}

TEST_CASE("cuda: EXL2 matmul, every converter layout option (T=1 and T=12)") {
    REQUIRE_CUDA();
    uint64_t seed = 100;
    for (const std::string & lay : exl2::exl2_layout_options()) {
        QCase c = make_exl2(384, 96, lay, true, seed++);
        check_qmatmul(c, 1, false, "exl2 '" + lay + "' T 1");
        check_qmatmul(c, 12, false, "exl2 '" + lay + "' T 12");
    }
}

TEST_CASE("cuda: EXL2 matmul at real shapes (4096 x 1024, 14336 x 4096)") {
    REQUIRE_CUDA();
    QCase a = make_exl2(4096, 1024, "4/3 g128 .1/.9", true, 7);
    for (int T : {1, 4, 64}) check_qmatmul(a, T, T != 64, "exl2 4096x1024 T " + std::to_string(T));
    QCase b = make_exl2(14336, 4096, "4 g128", true, 8);
    for (int T : {1, 2}) check_qmatmul(b, T, false, "exl2 14336x4096 T " + std::to_string(T));
}

// One-row GEMVs whose warp groups own whole pairs of fine slices walk the paired piece tables
// (4-bit pieces of 64 rows, summed as two 32-row halves): the same sums in the same order as the
// plain tables, so the same bits. GGX_QGEMV_GROUP_ROWS forces the rows per warp group (64, 128:
// pairs; 96: an odd number of slices, the plain tables), GGX_QGEMV_PAIRS=0 the plain tables.
TEST_CASE("cuda: EXL2 one-row GEMV, paired piece tables give the same bits as the plain ones") {
    REQUIRE_CUDA();
    uint64_t seed = 300;
    for (const char * lay : {"4 g128", "4 g32", "4/3 g32 .25/.75", "8/4/3 g32,128,128 .05/.1/.85", "6/3/2 g32,64,64 .05/.2/.75"}) {
        QCase c = make_exl2(1024, 520, lay, true, seed++);
        const int K = c.L.K;
        const std::vector<uint8_t> xb = bytes_of(random_x(1, K, seed * 13));
        Builder build = [&](GraphRun & r) {
            return ggx_mul_mat(r.ctx, r.qweight(c.L), r.input(GGX_TYPE_F32, {K, 1}, xb));
        };
        for (const char * rows : {"64", "128", "96"}) {
            const ScopedEnv group_rows("GGX_QGEMV_GROUP_ROWS", rows);
            Output plain, paired;
            {
                const ScopedEnv pairs("GGX_QGEMV_PAIRS", "0");
                plain = run_graph(cuda_backend(), build);
            }
            {
                const ScopedEnv pairs("GGX_QGEMV_PAIRS", "1");
                paired = run_graph(cuda_backend(), build);
            }
            REQUIRE(plain.bytes.size() == paired.bytes.size());
            CHECK_MESSAGE(memcmp(plain.bytes.data(), paired.bytes.data(), plain.bytes.size()) == 0,
                          "exl2 '" << std::string(lay) << "' at " << std::string(rows) << " rows per warp group: paired tables differ");
        }
        check_qmatmul(c, 1, false, std::string("exl2 '") + lay + "' T 1 (paired tables where chosen)");
    }
}

// One-row GEMVs take the pairs of 3-, 5- and 6-bit codes through byte-permuted windows
// (backends/cuda/pair-window.h); multi-row GEMVs place each code with its own shift. Both give
// the same pairs, and a row's sums are the same operations in the same order whatever T (x scaled
// per row, the same slices, partials added in slice order), so the one-row result is row 0 of the
// two-row one, bit for bit. 96 rows per warp group: the plain piece tables for both; 64: the
// paired tables for one row (the same bits as the plain ones, see the case above).
// No 2-bit codes here: one-row GEMVs sum half of their pairs 16 times too large in a second
// accumulator (exl2-unpack.cuh, pair_shape), a different order of sums; the case "every converter
// layout option" checks them against the CPU. Nor 4-bit codes in a build whose one-row GEMV takes
// them on the tensor cores (GGX_QGEMV_MMA4: fp32 sums; a switch of the kernels' build, so asked at run time).
TEST_CASE("cuda: EXL2 one-row GEMV gives row 0 of the two-row GEMV bit for bit (pair windows against per-code shifts)") {
    REQUIRE_CUDA();
    uint64_t seed = 400;
    for (const char * lay : {"6 g32", "5 g32", "3 g64", "8/6/5 g32 .05/.1/.85", "6/3 g32,64 .05/.95", "4/3 g32 .25/.75"}) {
        const std::vector<exl2::BitPart> parts = exl2::exl2_layout_parse(lay).parts;
        const bool has_4bit = std::any_of(parts.begin(), parts.end(), [](const exl2::BitPart & p) { return p.bits == 4; });
        if (ggx_cuda_qgemv_mma4() && has_4bit) {
            seed++;
            continue;
        }
        QCase c = make_exl2(1024, 520, lay, true, seed++);
        const int K = c.L.K, N = c.L.N;
        const std::vector<float> x2 = random_x(2, K, seed * 17);
        const std::vector<uint8_t> xb1 = bytes_of(std::vector<float>(x2.begin(), x2.begin() + K)), xb2 = bytes_of(x2);
        for (const char * rows : {"96", "64"}) {
            const ScopedEnv group_rows("GGX_QGEMV_GROUP_ROWS", rows);
            const Output one = run_graph(cuda_backend(), [&](GraphRun & r) {
                return ggx_mul_mat(r.ctx, r.qweight(c.L), r.input(GGX_TYPE_F32, {K, 1}, xb1));
            });
            const Output two = run_graph(cuda_backend(), [&](GraphRun & r) {
                return ggx_mul_mat(r.ctx, r.qweight(c.L), r.input(GGX_TYPE_F32, {K, 2}, xb2));
            });
            REQUIRE(one.bytes.size() == (size_t)N * sizeof(float));
            REQUIRE(two.bytes.size() == 2 * one.bytes.size());
            CHECK_MESSAGE(memcmp(one.bytes.data(), two.bytes.data(), one.bytes.size()) == 0,
                          "exl2 '" << std::string(lay) << "' at " << std::string(rows) << " rows per warp group: one row differs from row 0 of two");
        }
    }
}

TEST_CASE("cuda: prefill matmuls reading one x in a row convert it once, a different x again") {
    REQUIRE_CUDA();
    // Nodes in order: a x1, b x1 (reuses x1's fp16 copy), a x2 (must convert x2), b x1 (must
    // convert x1 again), then the adds. A stale copy would put x1's product where x2's belongs
    // (an error of ~S / sqrt(K), far above the bound).
    const int K = 512, N = 200, T = 16;
    QCase a = make_exl2(K, N, "4 g128", true, 201), b = make_exl2(K, N, "6/3/2 g32,64,64 .05/.2/.75", false, 202);
    const std::vector<float> x1 = random_x(T, K, 1), x2 = random_x(T, K, 2);
    const std::vector<uint8_t> b1 = bytes_of(x1), b2 = bytes_of(x2);
    Output gpu = run_graph(cuda_backend(), [&](GraphRun & r) {
        ggx_tensor * wa = r.qweight(a.L);
        ggx_tensor * wb = r.qweight(b.L);
        ggx_tensor * t1 = r.input(GGX_TYPE_F32, {K, T}, b1);
        ggx_tensor * t2 = r.input(GGX_TYPE_F32, {K, T}, b2);
        ggx_tensor * p = ggx_mul_mat(r.ctx, wa, t1);
        ggx_tensor * q = ggx_mul_mat(r.ctx, wb, t1);
        ggx_tensor * u = ggx_mul_mat(r.ctx, wa, t2);
        ggx_tensor * v = ggx_mul_mat(r.ctx, wb, t1);
        return ggx_add(r.ctx, ggx_add(r.ctx, p, q), ggx_add(r.ctx, u, v));
    });
    std::vector<double> ref, mag;
    add_ref_product(a, x1, T, ref, mag);
    add_ref_product(b, x1, T, ref, mag);
    add_ref_product(a, x2, T, ref, mag);
    add_ref_product(b, x1, T, ref, mag);
    std::vector<double> bound(ref.size());
    for (size_t i = 0; i < ref.size(); i++) bound[i] = mag[i] / 1024.0 + 4e-6;   // four products, each within 2^-10 S
    check_bound(gpu.f, ref, bound, "a x1 + b x1 + a x2 + b x1");
}

TEST_CASE("cuda: an RMS norm and a GLU feeding prefill matmuls write the fp16 x themselves") {
    REQUIRE_CUDA();
    // The plan lets both producers write the matmuls' fp16 x instead of their fp32 results
    // (ggx_cuda_plan::x16_out); the products are checked against double-precision ones from the
    // double norm and GLU, with the prefill bound (the fp16 rounding of x is inside it).
    const int K = 512, N = 200, T = 16;
    QCase a = make_exl2(K, N, "4 g128", true, 301), b = make_exl2(K, N, "5 g32", false, 302), c = make_exl2(K, N, "8/4/3 g32,128,128 .05/.1/.85", true, 303);
    const std::vector<float> x = random_x(T, K, 11), g = random_x(T, K, 12), u = random_x(T, K, 13), nw = random_x(1, K, 14);
    const std::vector<uint8_t> xb = bytes_of(x), gb = bytes_of(g), ub = bytes_of(u), nwb = bytes_of(nw);
    const float eps = 1e-5f;
    Output gpu = run_graph(cuda_backend(), [&](GraphRun & r) {
        ggx_tensor * wa = r.qweight(a.L);
        ggx_tensor * wb = r.qweight(b.L);
        ggx_tensor * wc = r.qweight(c.L);
        ggx_tensor * h = ggx_rms_norm(r.ctx, r.input(GGX_TYPE_F32, {K, T}, xb), r.input(GGX_TYPE_F32, {K}, nwb), eps);
        ggx_tensor * p = ggx_mul_mat(r.ctx, wa, h);
        ggx_tensor * q = ggx_mul_mat(r.ctx, wb, h);
        ggx_tensor * act = ggx_glu(r.ctx, r.input(GGX_TYPE_F32, {K, T}, gb), r.input(GGX_TYPE_F32, {K, T}, ub), GGX_ACT_SILU);
        ggx_tensor * s = ggx_mul_mat(r.ctx, wc, act);
        return ggx_add(r.ctx, ggx_add(r.ctx, p, q), s);
    });
    std::vector<float> h((size_t)T * K), act((size_t)T * K);
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int k = 0; k < K; k++) ss += (double)x[(size_t)t * K + k] * x[(size_t)t * K + k];
        const double rs = 1.0 / std::sqrt(ss / K + eps);
        for (int k = 0; k < K; k++) {
            const size_t i = (size_t)t * K + k;
            h[i] = (float)(x[i] * rs * nw[k]);
            act[i] = (float)((double)g[i] / (1.0 + std::exp(-(double)g[i])) * u[i]);
        }
    }
    std::vector<double> ref, mag;
    add_ref_product(a, h, T, ref, mag);
    add_ref_product(b, h, T, ref, mag);
    add_ref_product(c, act, T, ref, mag);
    std::vector<double> bound(ref.size());
    for (size_t i = 0; i < ref.size(); i++) bound[i] = mag[i] / 1024.0 + 3e-6;
    check_bound(gpu.f, ref, bound, "norm(x) a + norm(x) b + glu(g, u) c");
}

TEST_CASE("cuda: GPTQ matmul with and without act-order, GEMV and prefill") {
    REQUIRE_CUDA();
    uint64_t seed = 50;
    for (int gs : {32, 128})
        for (bool act : {false, true}) {
            QCase c = make_gptq(512, 192, gs, act, seed++);
            for (int T : {1, 5, 8, 20})
                check_qmatmul(c, T, T == 1 || T == 20, "gptq g" + std::to_string(gs) + " act " + std::to_string(act) + " T " + std::to_string(T));
        }
}

// The backend asked for repeatable results (ggx_backend_set_deterministic, exl2_model_params::
// deterministic): the GPTQ GEMV's K-slices store their partial sums and one kernel adds them in
// slice order, instead of adding into y with atomics in whatever order the blocks finish. At a
// real shape (4096 rows: 16 K-slices of 256) the result must be the same bits on every run and
// within the double reference's bound; the default path's runs are counted where they differ
// (reported, not required: atomics may happen to agree), which shows the check can fail.
TEST_CASE("cuda: GPTQ GEMV with deterministic sums gives the same bits every run") {
    REQUIRE_CUDA();
    struct Deterministic {
        Deterministic() { REQUIRE(ggx_backend_set_deterministic(cuda_backend(), 1) == GGX_STATUS_OK); }
        ~Deterministic() { ggx_backend_set_deterministic(cuda_backend(), 0); }
    };
    const QCase c = make_gptq(4096, 1024, 128, true, 91);
    for (int T : {1, 8}) {
        const std::vector<float> x = random_x(T, c.L.K, 5 + T);
        const std::vector<uint8_t> xb = bytes_of(x);
        const Builder build = qmatmul_graph(c, T, xb);
        // of 6 more runs, those whose y is not the bits of `first`
        auto differing = [&](const std::vector<float> & first) {
            int n = 0;
            for (int r = 0; r < 6; r++) {
                const std::vector<float> y = run_graph(cuda_backend(), build).f;
                n += y.size() != first.size() || memcmp(y.data(), first.data(), y.size() * sizeof(float)) != 0;
            }
            return n;
        };
        const std::vector<float> fast0 = run_graph(cuda_backend(), build).f;
        int det_differ = 0;
        {
            const Deterministic det;
            check_qmatmul(c, T, false, "gptq deterministic T " + std::to_string(T));
            det_differ = differing(run_graph(cuda_backend(), build).f);
        }
        const int fast_differ = differing(fast0);
        CHECK_MESSAGE(det_differ == 0, "T " << T << ": " << det_differ << " of 6 deterministic runs differed from the first");
        MESSAGE("GPTQ GEMV T " << T << ": " << fast_differ << " of 6 runs in the default order differed from its first");
    }
}

TEST_CASE("cuda: matmul with f32/f16/bf16 weights, GEMV and cuBLAS paths") {
    REQUIRE_CUDA();
    // cuBLAS path converts x to the weight type (rel 2^-8 for bf16, 2^-11 for f16); tolerance
    // relative to sqrt(K) * typical |w x| ~ 1.
    for (ggx_type wt : {GGX_TYPE_F32, GGX_TYPE_F16, GGX_TYPE_BF16})
        for (int64_t K : {96, 100, 1024})
            for (int64_t T : {1, 3, 8, 9, 64}) {
                auto o = run_both([&](GraphRun & r) {
                    ggx_tensor * w = r.input_rand(wt, {K, 33});
                    ggx_tensor * x = r.input_f32({K, T});
                    return ggx_mul_mat(r.ctx, w, x);
                });
                const float tol = (T > 8 ? (wt == GGX_TYPE_BF16 ? 1e-2f : wt == GGX_TYPE_F16 ? 2e-3f : 1e-4f) : 1e-5f) *
                                  std::sqrt((float)K);
                check_close(o.cuda.f, o.cpu.f, tol, 0, std::string("mul_mat ") + ggx_type_name(wt) + " K " +
                                                           std::to_string(K) + " T " + std::to_string(T));
            }
}
