// The gated MLP's load-time column order (exl2/quant/glu-order.h): columns move whole, bit for
// bit, and the MLP computes what it did. References: the scalar dequantizer (itself checked
// bit for bit against ExLlamaV2's reconstruct in test-exl2-format.cpp) on the layer before the
// transform, and a double-precision MLP over the dequantized matrices.
#include "synth-layer.h"

#include "exl2/error.h"
#include "exl2/quant/dequant.h"
#include "exl2/quant/glu-order.h"
#include "exl2/quant/qlayer.h"
#include "exl2/quant/synthetic.h"
#include "ggx/fp16.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace exl2;

namespace {

QLayerHost gptq_layer(const std::string & name, int K, int N, bool act_order, uint64_t seed) {
    SafeTensors st;
    SynthGptqOptions o;
    o.group_size = 32;
    o.act_order = act_order;
    o.bias = true;
    o.seed = seed;
    synth_add(st, synth_gptq_layer(name, K, N, o));
    return qlayer_load(st, name);
}

std::vector<int32_t> shuffled(int n, uint64_t seed) {
    std::vector<int32_t> p(n);
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), std::mt19937_64(seed));
    return p;
}

// every column n of `after` is column cols[n] of `before`, bit for bit
void check_columns(const std::vector<uint16_t> & before, const std::vector<uint16_t> & after, int K, int N,
                   const std::vector<int32_t> & cols) {
    size_t bad = 0;
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) bad += after[(size_t)k * N + n] != before[(size_t)k * N + cols[n]];
    CHECK(bad == 0);
}

// y = down (silu(gate x) * up x), in double over the dequantized matrices; rows of down in its
// input order (`hperm`: input k of down is h[hperm[k]], or h[k] when empty)
std::vector<double> mlp(const QLayerHost & gate, const QLayerHost & up, const QLayerHost & down, const std::vector<double> & x) {
    const std::vector<uint16_t> G = qlayer_dequant(gate), U = qlayer_dequant(up), D = qlayer_dequant(down);
    const int K = gate.K, F = gate.N, H = down.N;
    std::vector<double> h(F, 0.0), y(H, 0.0);
    for (int f = 0; f < F; f++) {
        double g = 0.0, u = 0.0;
        for (int k = 0; k < K; k++) {
            g += (double)ggx_f16_to_f32(G[(size_t)k * F + f]) * x[k];
            u += (double)ggx_f16_to_f32(U[(size_t)k * F + f]) * x[k];
        }
        h[f] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int f = 0; f < F; f++)
        for (int n = 0; n < H; n++) y[n] += (double)ggx_f16_to_f32(D[(size_t)f * H + n]) * h[f];
    return y;
}

}  // namespace

TEST_CASE("glu order: an EXL2 layer's columns move whole, bit for bit, padding and bias included") {
    // 72 columns pad to 96: the padding's codes must stay where the kernels expect them
    QLayerHost L = synth_layer("6/3/2 g32,64,64 .05/.2/.75", 256, 72, 7, true);
    const std::vector<uint16_t> before = qlayer_dequant(L);
    const std::vector<uint32_t> qw = L.q_weight, qs = L.q_scale;
    const std::vector<float> bias = L.bias;
    const std::vector<int32_t> cols = shuffled(72, 11);
    qlayer_permute_columns(L, cols);
    check_columns(before, qlayer_dequant(L), 256, 72, cols);
    REQUIRE(L.bias.size() == 72);
    for (int n = 0; n < 72; n++) CHECK(L.bias[n] == bias[cols[n]]);
    size_t pad_changed = 0;
    for (int r = 0; r < L.QR; r++)
        for (int n = 72; n < L.Np; n++) pad_changed += L.q_weight[(size_t)r * L.Np + n] != qw[(size_t)r * L.Np + n];
    for (int g = 0; g < L.G; g++)   // words 9..11 of each group's row hold only padding codes
        for (int w = 9; w < L.Np / 8; w++) pad_changed += L.q_scale[(size_t)g * (L.Np / 8) + w] != qs[(size_t)g * (L.Np / 8) + w];
    CHECK(pad_changed == 0);
    // and back: the inverse order restores every word
    std::vector<int32_t> inv(72);
    for (int n = 0; n < 72; n++) inv[cols[n]] = n;
    qlayer_permute_columns(L, inv);
    CHECK(L.q_weight == qw);
    CHECK(L.q_scale == qs);
    CHECK(L.bias == bias);
}

TEST_CASE("glu order: a GPTQ layer's columns move whole, bit for bit (weights, zeros, scales, bias)") {
    QLayerHost L = gptq_layer("L", 128, 64, true, 3);
    const std::vector<uint16_t> before = qlayer_dequant(L);
    const std::vector<float> bias = L.bias;
    const std::vector<int32_t> cols = shuffled(64, 5);
    qlayer_permute_columns(L, cols);
    check_columns(before, qlayer_dequant(L), 128, 64, cols);
    for (int n = 0; n < 64; n++) CHECK(L.bias[n] == bias[cols[n]]);
}

TEST_CASE("glu order: down reads h in its quantized order and the MLP computes what it did") {
    for (const char * fmt : {"exl2", "gptq"}) {
        CAPTURE(fmt);
        const bool exl2 = std::string(fmt) == "exl2";
        QLayerHost gate = exl2 ? synth_layer("4/3 g32 .25/.75", 128, 256, 1, false, "gate") : gptq_layer("gate", 128, 256, true, 1);
        QLayerHost up = exl2 ? synth_layer("5/4 g64 .5/.5", 128, 256, 2, false, "up") : gptq_layer("up", 128, 256, true, 2);
        QLayerHost down = exl2 ? synth_layer("8/4/2 g32 .1/.6/.3", 256, 96, 3, false, "down") : gptq_layer("down", 256, 96, true, 3);
        REQUIRE(down.q_perm.size() == 256);
        std::vector<double> x(128);
        for (int k = 0; k < 128; k++) x[k] = std::sin(0.7 * k + 0.3);
        const std::vector<double> y0 = mlp(gate, up, down, x);
        const std::vector<uint16_t> G0 = qlayer_dequant(gate), D0 = qlayer_dequant(down);
        const std::vector<int32_t> perm = down.q_perm;
        REQUIRE(glu_order(gate, up, down));
        CHECK(down.q_perm.empty());
        check_columns(G0, qlayer_dequant(gate), 128, 256, perm);
        // down's rows in quantized order: row k is the old input row perm[k]
        const std::vector<uint16_t> D1 = qlayer_dequant(down);
        size_t bad = 0;
        for (int k = 0; k < 256; k++)
            for (int n = 0; n < 96; n++) bad += D1[(size_t)k * 96 + n] != D0[(size_t)perm[k] * 96 + n];
        CHECK(bad == 0);
        // the same products in another order: only the double sums' rounding differs
        const std::vector<double> y1 = mlp(gate, up, down, x);
        double ymax = 0.0, emax = 0.0;
        for (int n = 0; n < 96; n++) {
            ymax = std::max(ymax, std::fabs(y0[n]));
            emax = std::max(emax, std::fabs(y1[n] - y0[n]));
        }
        REQUIRE(ymax > 0.0);
        CHECK(emax <= 1e-12 * ymax);
        // a second call finds no permutation left: nothing changes
        const std::vector<uint32_t> gw = gate.q_weight;
        CHECK_FALSE(glu_order(gate, up, down));
        CHECK(gate.q_weight == gw);
    }
}

TEST_CASE("glu order: wrong orders and shapes are refused with the layer's name") {
    QLayerHost L = synth_layer("4 g32", 64, 32, 9, false, "model.layers.0.mlp.gate_proj");
    std::vector<int32_t> cols = shuffled(32, 1);
    const std::vector<uint32_t> qw = L.q_weight;
    auto message = [&](const std::vector<int32_t> & c) {
        try {
            qlayer_permute_columns(L, c);
        } catch (const Error & e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(message(std::vector<int32_t>(cols.begin(), cols.end() - 1)).find("model.layers.0.mlp.gate_proj: column order: 31 entries for 32 columns") !=
          std::string::npos);
    std::vector<int32_t> dup = cols;
    dup[3] = dup[4];
    CHECK(message(dup).find("not a permutation of its 32 columns") != std::string::npos);
    std::vector<int32_t> out = cols;
    out[0] = 32;
    CHECK(message(out).find("(entry 32)") != std::string::npos);
    CHECK(L.q_weight == qw);   // refused orders change nothing
    QLayerHost up = synth_layer("4 g32", 64, 32, 10, false, "up");
    QLayerHost down = synth_layer("4 g32", 64, 16, 11, false, "down");   // K 64, not 32
    CHECK_THROWS_WITH_AS(glu_order(L, up, down), doctest::Contains("not a gated MLP"), Error);
    // a down without a permutation (GPTQ without act-order): nothing to do
    QLayerHost g2 = gptq_layer("g", 64, 32, false, 1), u2 = gptq_layer("u", 64, 32, false, 2), d2 = gptq_layer("d", 32, 16, false, 3);
    REQUIRE(d2.q_perm.empty());
    const std::vector<uint32_t> g2w = g2.q_weight;
    CHECK_FALSE(glu_order(g2, u2, d2));
    CHECK(g2.q_weight == g2w);
}
