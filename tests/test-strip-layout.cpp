// The strip layout (exl2/quant/strip-layout.h) on synthetic EXL2 layers of every width mix the
// converter writes: it must hold every code exactly once, compactly, in units of one width, and
// give back every weight bit for bit as the reference dequantizer does.
#include "exl2/error.h"
#include "exl2/quant/dequant.h"
#include "exl2/quant/qlayer.h"
#include "exl2/quant/strip-layout.h"
#include "exl2/quant/synthetic.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

using namespace exl2;

namespace {

QLayerHost synth_layer(const char * layout, int K, int N, uint64_t seed) {
    SafeTensors st;
    SynthExl2Options so;
    so.seed = seed;
    so.act_order = true;
    synth_add(st, synth_exl2_layer("L", K, N, exl2_layout_parse(layout), so));
    QLoadOptions lo;
    lo.N = N;
    return qlayer_load(st, "L", lo);
}

// Structural checks: strips, unit order and widths, the tiling of the words, coverage.
void check_structure(const QLayerHost & Q, const StripLayout & L) {
    const int n_quads = Q.Np / 4, n_slices = Q.K / 32;
    REQUIRE(L.strip_quad0.size() == (size_t)L.n_strips + 1);
    REQUIRE(L.width_unit0.size() == (size_t)L.n_strips * (GGX_EXL2_N_WIDTHS + 1));
    for (int s = 0; s < L.n_strips; s++) {
        CHECK(L.width_unit0[(size_t)s * (GGX_EXL2_N_WIDTHS + 1)] == L.strip_unit0[s]);
        CHECK(L.width_unit0[(size_t)s * (GGX_EXL2_N_WIDTHS + 1) + GGX_EXL2_N_WIDTHS] == L.strip_unit0[s + 1]);
    }
    CHECK(L.strip_quad0.front() == 0);
    CHECK(L.strip_quad0.back() == n_quads);
    for (int s = 0; s < L.n_strips; s++) {
        const int w = L.strip_quad0[s + 1] - L.strip_quad0[s];
        CHECK((w == n_quads / L.n_strips || w == n_quads / L.n_strips + 1));
    }
    CHECK(L.words.size() == (size_t)Q.QR * Q.Np);   // compact: exactly q_weight's bytes
    std::vector<int> seen((size_t)n_quads * n_slices, 0);
    uint32_t next = 0;
    for (int s = 0; s < L.n_strips; s++) {
        auto key = [&](const StripUnit & u) {
            int rank = 0;
            while (ggx_exl2_widths[rank] != u.bits) rank++;
            return std::make_tuple(rank, u.quad, u.slice0);
        };
        for (int i = L.strip_unit0[s]; i < L.strip_unit0[s + 1]; i++) {
            const StripUnit & u = L.units[i];
            CAPTURE(i);
            CHECK(u.offset == next);   // units follow each other without gaps
            next = u.offset + u.bits * u.lanes;
            CHECK((u.lanes >= 1 && u.lanes <= 32));
            CHECK((int)u.quad >= L.strip_quad0[s]);
            CHECK((int)u.quad < L.strip_quad0[s + 1]);
            if (i > L.strip_unit0[s]) CHECK(key(L.units[i - 1]) < key(u));
            // width_unit0 brackets the unit by its width
            const int * wu = &L.width_unit0[(size_t)s * (GGX_EXL2_N_WIDTHS + 1)];
            const int rank = std::get<0>(key(u));
            CHECK(wu[rank] <= i);
            CHECK(i < wu[rank + 1]);
            for (int l = 0; l < u.lanes; l++) {
                const int slice = u.slice0 + l;
                REQUIRE(slice < n_slices);
                CHECK(L.group_bits[L.slice_group[slice]] == u.bits);   // one width per unit
                seen[(size_t)u.quad * n_slices + slice]++;
            }
        }
    }
    CHECK(next * 4 == L.words.size());
    size_t wrong = 0;
    for (int c : seen) wrong += c != 1;
    CHECK_MESSAGE(wrong == 0, wrong << " (quad, slice) pairs not held exactly once");
}

}  // namespace

TEST_CASE("strip layout: every width mix, every weight bit for bit through the units") {
    const char * layouts[] = {"4 g128", "8 g32", "3/2 g64 .1/.9", "4/3 g128 .1/.9", "5/4 g32 .25/.75",
                              "6/3/2 g32,64,64 .05/.2/.75", "8/6/5 g32,128,128 .05/.1/.85", "8/4/3 g32 .05/.1/.85"};
    uint64_t seed = 1;
    for (const char * lay : layouts)
        for (const auto & kn : {std::make_pair(1024, 100), std::make_pair(2048, 256)}) {
            const int K = kn.first, N = kn.second;
            const QLayerHost Q = synth_layer(lay, K, N, seed++);
            const ggx_qmatrix q = qlayer_host_view(Q);
            std::vector<uint16_t> W((size_t)K * N);
            qmatrix_dequant(q, GGX_TYPE_EXL2, W.data());
            std::string why;
            REQUIRE_MESSAGE(strip_layout_supported(q, &why), why);
            for (int n_strips : {1, 7, Q.Np / 4}) {
                CAPTURE(lay);
                CAPTURE(K);
                CAPTURE(N);
                CAPTURE(n_strips);
                const StripLayout L = strip_layout_build(q, n_strips);
                check_structure(Q, L);
                // Without the words (the loader's form): the same units, and slice_qrow gathers
                // the same words from q_weight, as the GPU gather will.
                const StripLayout U = strip_layout_build(q, n_strips, false);
                CHECK(U.words.empty());
                REQUIRE(U.units.size() == L.units.size());
                size_t gathered_bad = 0;
                for (size_t i = 0; i < U.units.size(); i++) {
                    const StripUnit & u = U.units[i];
                    CHECK((u.offset == L.units[i].offset && u.quad == L.units[i].quad && u.slice0 == L.units[i].slice0 &&
                           u.bits == L.units[i].bits && u.lanes == L.units[i].lanes));
                    for (int w = 0; w < u.bits; w++)
                        for (int l = 0; l < u.lanes; l++)
                            for (int c = 0; c < 4; c++)
                                gathered_bad += Q.q_weight[(size_t)(U.slice_qrow[u.slice0 + l] + w) * Q.Np + 4 * u.quad + c] !=
                                                L.words[((size_t)u.offset + (size_t)w * u.lanes + l) * 4 + c];
                }
                CHECK(gathered_bad == 0);
                size_t bad = 0;
                for (int k = 0; k < K; k++)
                    for (int n = 0; n < N; n++) bad += strip_layout_weight(L, k, n) != W[(size_t)Q.q_perm[k] * N + n];
                CHECK_MESSAGE(bad == 0, bad << " of " << (size_t)K * N << " weights differ");
            }
        }
}

TEST_CASE("strip layout: 16-row groups and bad strip counts are refused with a reason") {
    const QLayerHost Q = synth_layer("2 g16", 512, 64, 9);
    const ggx_qmatrix q = qlayer_host_view(Q);
    std::string why;
    CHECK_FALSE(strip_layout_supported(q, &why));
    CHECK(why.find("not whole 32-row slices") != std::string::npos);
    CHECK_THROWS_WITH_AS(strip_layout_build(q, 1), doctest::Contains("strip layout: group 0 has 16 rows"), Error);

    const QLayerHost Q4 = synth_layer("4 g128", 512, 64, 10);
    const ggx_qmatrix q4 = qlayer_host_view(Q4);
    CHECK_THROWS_WITH_AS(strip_layout_build(q4, 0), "strip layout: 0 strips for 16 quads", Error);
    CHECK_THROWS_WITH_AS(strip_layout_build(q4, 17), "strip layout: 17 strips for 16 quads", Error);
    const StripLayout L = strip_layout_build(q4, 16);
    CHECK_THROWS_WITH_AS(strip_layout_weight(L, 512, 0), "strip layout: weight (512, 0) outside 512 x 64", Error);
    CHECK_THROWS_WITH_AS(strip_layout_weight(strip_layout_build(q4, 16, false), 0, 0), "strip layout: built without its words",
                         Error);
}

TEST_CASE("strip layout: units dealt to warps in contiguous runs of near-equal bytes") {
    for (const char * lay : {"4 g128", "8/6/5 g32,128,128 .05/.1/.85", "6/3/2 g32,64,64 .05/.2/.75"}) {
        const QLayerHost Q = synth_layer(lay, 4096, 512, 11);
        const StripLayout L = strip_layout_build(qlayer_host_view(Q), 5);
        for (int n_warps : {1, 16, 200}) {   // 200: more warps than some strips have units
            CAPTURE(lay);
            CAPTURE(n_warps);
            const std::vector<int> r = strip_layout_deal(L, n_warps);
            REQUIRE(r.size() == (size_t)L.n_strips * (n_warps + 1));
            for (int s = 0; s < L.n_strips; s++) {
                const int * rs = &r[(size_t)s * (n_warps + 1)];
                CHECK(rs[0] == L.strip_unit0[s]);
                CHECK(rs[n_warps] == L.strip_unit0[s + 1]);
                uint64_t total = 0, biggest = 0;
                for (int u = L.strip_unit0[s]; u < L.strip_unit0[s + 1]; u++) {
                    const uint64_t b = (uint64_t)L.units[u].bits * L.units[u].lanes;
                    total += b;
                    biggest = std::max(biggest, b);
                }
                for (int w = 0; w < n_warps; w++) {
                    REQUIRE(rs[w] <= rs[w + 1]);
                    uint64_t bytes = 0;
                    for (int u = rs[w]; u < rs[w + 1]; u++) bytes += (uint64_t)L.units[u].bits * L.units[u].lanes;
                    CHECK(bytes <= (total + n_warps - 1) / n_warps + biggest);
                }
            }
        }
    }
    const QLayerHost Q = synth_layer("4 g128", 512, 64, 12);
    CHECK_THROWS_WITH_AS(strip_layout_deal(strip_layout_build(qlayer_host_view(Q), 2), 0),
                         "strip layout: 0 warps to deal units to", Error);
}
