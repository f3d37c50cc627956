// ggx_cpu_qmatmul (SIMD and scalar paths) against a double-precision matmul over the reference
// fp16 weights: ExLlamaV2's dequantized fixture layers, and synthetic layers dequantized by our
// oracle (bit-exact with ExLlamaV2, tests/test-exl2-format.cpp).
//
// Tolerance, per output element y[t][n] (derived, not tuned). The kernel computes, per group g,
// scale_gn * (sum_k v_kn x_k - zero_gn * sum_k x_k) in f32, while the reference uses
// W_kn = h((v_kn - zero_gn) * scale_gn), i.e. each weight rounded to fp16. So:
//   (1) fp16 rounding of W, absent from the kernel: |h(w) - w| <= 2^-11 |w| (normal) or 2^-25
//       (subnormal), summed: 2^-11 (1 + 2^-11) sum_k |x_k W_kn| + 2^-25 sum_k |x_k|;
//   (2) f32 accumulation: the group sums run over R rows (R <= 128) on terms bounded by
//       |v| + zero <= 2^(b+1), then G group terms are added: at most (R + G + 4) roundings
//       of 2^-24 on magnitudes bounded by S = sum_k |x_k| 2^(b_k+1) scale_kn; we allow twice that
//       (the scalar path rounds the product and the sum separately).
//   tol = 2^-11 (1 + 2^-11) sum|x W| + 2^-25 sum|x| + 2 (R + G + 4) 2^-24 S
// A sanity check below shows the bound is tight enough to catch a wrong permutation.
#include "fixtures.h"
#include "synth-layer.h"

#include "backends/cpu/cpu-qmatmul.h"
#include "exl2/quant/dequant.h"
#include "exl2/quant/qlayer.h"
#include "exl2/quant/synthetic.h"
#include "ggx/fp16.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace exl2;

namespace {

// 2^(b+1) * scale for every weight (original row order), the magnitude bound used by the tolerance.
std::vector<double> weight_bounds(const QLayerHost & L, int * max_rows) {
    std::vector<double> s((size_t)L.K * L.N);
    *max_rows = 0;
    if (L.format == QFormat::EXL2) {
        int k = 0;
        for (int g = 0; g < L.G; g++) {
            const int b = L.q_groups[2 * g], r0 = L.q_groups[2 * g + 1];
            const int rows = ((g + 1 < L.G ? L.q_groups[2 * g + 3] : L.QR) - r0) * 32 / b;
            *max_rows = std::max(*max_rows, rows);
            for (int j = 0; j < rows; j++, k++)
                for (int n = 0; n < L.N; n++) {
                    const uint32_t c = (L.q_scale[(size_t)g * (L.Np / 8) + n / 8] >> (4 * (n % 8))) & 15;
                    s[(size_t)L.q_perm[k] * L.N + n] = std::ldexp(ggx_f16_to_f32(exl2_dq_scale(c, L.q_scale_max[g])), b + 1);
                }
        }
    } else {
        *max_rows = L.group_size;
        for (int r = 0; r < L.K; r++)
            for (int n = 0; n < L.N; n++) {
                const int orig = L.q_perm.empty() ? r : L.q_perm[r];
                s[(size_t)orig * L.N + n] = 32.0 * std::fabs(ggx_f16_to_f32(L.scales[(size_t)(r / L.group_size) * L.N + n]));
            }
    }
    return s;
}

struct Run {
    int T = 1;
    int nth = 1;
    bool simd = true;
    bool threads = false;   // run the nth parts on real threads (thread-local scratch)
    bool drop_perm = false; // sabotage: ignore the permutation (the comparison must then fail)
};

// Runs the kernel on random x and returns the number of elements outside the tolerance.
int check_layer(const QLayerHost & L, const std::vector<uint16_t> & W, const Run & r, uint32_t seed, double * worst_ratio) {
    const int K = L.K, N = L.N, T = r.T;
    const int64_t ldx = K + 3, ldy = N + 5;   // strided rows; the gaps must stay untouched
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    std::vector<float> x((size_t)T * ldx), y((size_t)T * ldy, 12345.0f);
    for (auto & v : x) v = U(rng);

    ggx_qmatrix view = qlayer_host_view(L);
    if (r.drop_perm) view.q_perm = nullptr;
    ggx_tensor w;
    memset(&w, 0, sizeof w);
    w.type = L.format == QFormat::EXL2 ? GGX_TYPE_EXL2 : GGX_TYPE_GPTQ;
    w.ne[0] = K; w.ne[1] = N; w.ne[2] = w.ne[3] = 1;
    w.extra = &view;
    auto part = [&](int ith) {
        if (r.simd) ggx_cpu_qmatmul(&w, x.data(), ldx, y.data(), ldy, T, ith, r.nth);
        else ggx_cpu_qmatmul_scalar(&w, x.data(), ldx, y.data(), ldy, T, ith, r.nth);
    };
    if (r.threads) {
        std::vector<std::thread> th;
        for (int i = 0; i < r.nth; i++) th.emplace_back(part, i);
        for (auto & t : th) t.join();
    } else {
        for (int i = 0; i < r.nth; i++) part(i);
    }

    int max_rows = 0;
    const std::vector<double> S = weight_bounds(L, &max_rows);
    const double c_acc = 2.0 * (max_rows + L.G + 4) * std::ldexp(1.0, -24);
    int bad = 0;
    *worst_ratio = 0;
    for (int t = 0; t < T; t++) {
        for (int n = 0; n < N; n++) {
            double ref = 0, axw = 0, ax = 0, s = 0;
            for (int k = 0; k < K; k++) {
                const double xv = x[(size_t)t * ldx + k], wv = ggx_f16_to_f32(W[(size_t)k * N + n]);
                ref += xv * wv;
                axw += std::fabs(xv * wv);
                ax += std::fabs(xv);
                s += std::fabs(xv) * S[(size_t)k * N + n];
            }
            const double tol = std::ldexp(1.0, -11) * (1 + std::ldexp(1.0, -11)) * axw + std::ldexp(ax, -25) + c_acc * s;
            const double err = std::fabs((double)y[(size_t)t * ldy + n] - ref);
            if (!(err <= tol)) {
                if (bad++ == 0 && !r.drop_perm)
                    MESSAGE("first mismatch t=" << t << " n=" << n << ": got " << y[(size_t)t * ldy + n] << ", want " << ref
                                                << " (tol " << tol << ")");
            }
            *worst_ratio = std::max(*worst_ratio, err / tol);
        }
        for (int64_t n = N; n < ldy; n++)
            if (y[(size_t)t * ldy + n] != 12345.0f) bad++;   // wrote outside [0, N)
    }
    return bad;
}

// Runs the layer at T rows with the SIMD and with the scalar kernel; keeps each one's worst
// error / tolerance ratio in worst[0] (SIMD) and worst[1] (scalar).
void check_simd_and_scalar(const QLayerHost & L, const std::vector<uint16_t> & W, int T, int nth, uint32_t seed,
                           double (&worst)[2]) {
    for (bool simd : {true, false}) {
        CAPTURE(simd);
        Run r;
        r.T = T;
        r.simd = simd;
        r.nth = nth;
        double ratio;
        CHECK(check_layer(L, W, r, seed, &ratio) == 0);
        worst[simd ? 0 : 1] = std::max(worst[simd ? 0 : 1], ratio);
    }
}

}  // namespace

TEST_CASE("qmatmul: every fixture layer, SIMD and scalar, against ExLlamaV2's dequantized weights") {
    REQUIRE_FIXTURE(root, "exl2");
    double worst[2] = {0, 0};   // SIMD, scalar
    int n = 0;
    for (const char * m : {"2.7bpw", "4.0bpw", "8.0bpw"}) {
        SafeTensors st, ref;
        st.open_file(root + "/" + m + "/output.safetensors");
        ref.open_file(root + "/ref/" + m + ".dequant.safetensors");
        for (const auto & kv : ref.tensors()) {
            const QLayerHost L = qlayer_load(st, kv.first);
            std::vector<uint16_t> W((size_t)L.K * L.N);
            memcpy(W.data(), kv.second.data, W.size() * 2);
            for (int T : {1, 4, 9, 33})
                for (bool simd : {true, false}) {
                    CAPTURE(m);
                    CAPTURE(kv.first);
                    CAPTURE(T);
                    CAPTURE(simd);
                    Run r;
                    r.T = T;
                    r.simd = simd;
                    r.nth = T == 9 ? 3 : 1;
                    double ratio;
                    CHECK(check_layer(L, W, r, (uint32_t)(n * 7 + T), &ratio) == 0);
                    worst[simd ? 0 : 1] = std::max(worst[simd ? 0 : 1], ratio);
                    n++;
                }
        }
    }
    CHECK(n == 66 * 8);
    MESSAGE("fixture layers: worst error / tolerance = " << worst[0] << " (SIMD), " << worst[1] << " (scalar)");
}

TEST_CASE("qmatmul: synthetic EXL2 layers, every width, odd T, N not a multiple of 8 or 32") {
    const char * layouts[] = {
        "8 g32", "6 g32", "5 g64", "4 g128", "3 g32", "2 g16", "2 g32",
        "8/6/5 g32 .05/.1/.85", "6/3/2 g32,64,64 .05/.2/.75", "8/4/3 g32,128,128 .05/.1/.85", "4/2 g32 .3/.7",
    };
    double worst[2] = {0, 0};   // SIMD, scalar
    int idx = 0;
    for (const char * lay : layouts) {
        for (int N : {100, 40, 33, 256}) {
            const int K = idx % 2 ? 512 : 256;
            SafeTensors st;
            SynthExl2Options so;
            so.seed = (uint64_t)idx + 1;
            so.act_order = idx % 3 != 0;
            synth_add(st, synth_exl2_layer("L", K, N, exl2_layout_parse(lay), so));
            QLoadOptions lo;
            lo.N = N;
            const QLayerHost L = qlayer_load(st, "L", lo);
            const std::vector<uint16_t> W = qlayer_dequant(L);
            std::vector<int> Ts = {1, 8, 17};
            if (N == 100)
                for (int T = 3; T <= 33; T += 2) Ts.push_back(T);
            for (int T : Ts) {
                CAPTURE(lay);
                CAPTURE(N);
                CAPTURE(T);
                check_simd_and_scalar(L, W, T, 1 + T % 4, (uint32_t)(idx * 100 + T), worst);
            }
            idx++;
        }
    }
    MESSAGE("synthetic EXL2: worst error / tolerance = " << worst[0] << " (SIMD), " << worst[1] << " (scalar)");
}

TEST_CASE("qmatmul: synthetic GPTQ layers, act-order and not, v1 and v2") {
    double worst[2] = {0, 0};   // SIMD, scalar
    int idx = 0;
    for (bool act : {false, true})
        for (bool v2 : {false, true})
            for (int gs : {32, 128})
                for (int N : {24, 200}) {
                    const int K = gs == 32 ? 256 : 384;   // 384 = 3 groups of 128
                    SynthGptqOptions o;
                    o.group_size = gs;
                    o.act_order = act;
                    o.v2 = v2;
                    o.seed = (uint64_t)idx + 50;
                    SafeTensors st;
                    synth_add(st, synth_gptq_layer("L", K, N, o));
                    QLoadOptions lo;
                    lo.gptq_v2 = v2;
                    const QLayerHost L = qlayer_load(st, "L", lo);
                    const std::vector<uint16_t> W = qlayer_dequant(L);
                    for (int T : {1, 3, 8, 15, 33}) {
                        CAPTURE(act);
                        CAPTURE(v2);
                        CAPTURE(gs);
                        CAPTURE(N);
                        CAPTURE(T);
                        check_simd_and_scalar(L, W, T, 1 + T % 3, (uint32_t)(idx * 100 + T), worst);
                    }
                    idx++;
                }
    MESSAGE("synthetic GPTQ: worst error / tolerance = " << worst[0] << " (SIMD), " << worst[1] << " (scalar)");
}

TEST_CASE("qmatmul: threads share nothing; more threads than panels; a dropped permutation is caught") {
    SafeTensors st;
    synth_add(st, synth_exl2_layer("L", 1024, 200, exl2_layout_parse("4/3 g128 .1/.9"), {}));
    QLoadOptions lo;
    lo.N = 200;
    const QLayerHost L = qlayer_load(st, "L", lo);
    const std::vector<uint16_t> W = qlayer_dequant(L);
    double ratio;
    for (int nth : {2, 3, 8, 13}) {   // 200 columns = 7 panels of 32: 8 and 13 leave threads idle
        CAPTURE(nth);
        Run r;
        r.T = 5;
        r.nth = nth;
        r.threads = true;
        CHECK(check_layer(L, W, r, 7, &ratio) == 0);
    }
    Run r;
    r.T = 2;
    r.drop_perm = true;
    CHECK(check_layer(L, W, r, 8, &ratio) > 200);   // most of the 400 outputs are wrong
}
