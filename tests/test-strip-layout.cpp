// The strip layout (ggx/ggx-strip-layout.h) on synthetic EXL2 layers of every width mix the
// converter writes: it must hold every code exactly once, compactly, in units of one width, and
// give back every weight bit for bit as the reference dequantizer does.
#include "exl2/quant/dequant.h"
#include "exl2/quant/exl2-pack.h"
#include "exl2/quant/qlayer.h"
#include "exl2/quant/synthetic.h"
#include "ggx/ggx-strip-layout.h"
#include "synth-layer.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

using namespace exl2;
using ggx::StripLayout;
using ggx::StripUnit;
using ggx::strip_layout_deal;
using ggx::strip_layout_supported;

namespace {

StripLayout build(const ggx_qmatrix & q, int n_strips, bool copy_words = true) {
    StripLayout L;
    std::string why;
    REQUIRE_MESSAGE(ggx::strip_layout_build(q, n_strips, copy_words, &L, &why), why);
    return L;
}

int width_rank(int bits) {
    int r = 0;
    while (ggx_exl2_widths[r] != bits) r++;
    return r;
}

// The fp16 weight of quantized row k, column n, read through the layout alone (units, words,
// slice groups and scales), as the strip step computes it; *ok false when no unit holds it.
uint16_t weight_through_units(const StripLayout & L, int k, int n, bool * ok) {
    const int quad = n / 4, slice = k / 32;
    const int s = (int)(std::upper_bound(L.strip_quad0.begin(), L.strip_quad0.end(), quad) - L.strip_quad0.begin()) - 1;
    // the strip's units are sorted by (width rank, quad, first slice); the slice's width is its group's
    const int g = L.slice_group[slice];
    const StripUnit * u0 = L.units.data() + L.strip_unit0[s], * u1 = L.units.data() + L.strip_unit0[s + 1];
    auto key = [](int bits_, uint32_t q_, uint32_t s_) { return std::make_tuple(width_rank(bits_), q_, s_); };
    const auto want = key(L.group_bits[g], (uint32_t)quad, (uint32_t)slice);
    const StripUnit * u = std::upper_bound(u0, u1, want, [&](const std::tuple<int, uint32_t, uint32_t> & w, const StripUnit & x) {
        return w < key(x.bits, x.quad, x.slice0);
    }) - 1;
    *ok = u >= u0 && u->quad == (uint32_t)quad && slice < (int)(u->slice0 + u->lanes);
    if (!*ok) return 0;
    // the slice's b words of column n, lanes x 4 words apart, are a packed group of 32 rows
    const int lane = slice - (int)u->slice0;
    const uint32_t * slice_words = &L.words[((size_t)u->offset + lane) * 4 + n % 4];
    const uint32_t v = exl2_extract(slice_words, (int64_t)u->lanes * 4, 0, k % 32, u->bits);
    return exl2_dq_weight(v, u->bits, L.scales[(size_t)g * L.Np + n]);
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
                const StripLayout L = build(q, n_strips);
                check_structure(Q, L);
                // Without the words (the loader's form): the same units, and slice_qrow gathers
                // the same words from q_weight, as the GPU gather will.
                const StripLayout U = build(q, n_strips, false);
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
                    for (int n = 0; n < N; n++) {
                        bool ok = false;
                        bad += weight_through_units(L, k, n, &ok) != W[(size_t)Q.q_perm[k] * N + n] || !ok;
                    }
                CHECK_MESSAGE(bad == 0, bad << " of " << (size_t)K * N << " weights differ");
            }
        }
}

TEST_CASE("strip layout: 16-row groups and bad strip counts are refused with a reason") {
    const QLayerHost Q = synth_layer("2 g16", 512, 64, 9);
    const ggx_qmatrix q = qlayer_host_view(Q);
    std::string why;
    CHECK_FALSE(strip_layout_supported(q, &why));
    CHECK(why.find("not whole 32-row blocks") != std::string::npos);
    StripLayout L;
    why.clear();
    CHECK_FALSE(ggx::strip_layout_build(q, 1, true, &L, &why));
    CHECK(why.find("group 0 has 16 rows") != std::string::npos);

    const QLayerHost Q4 = synth_layer("4 g128", 512, 64, 10);
    const ggx_qmatrix q4 = qlayer_host_view(Q4);
    CHECK_FALSE(ggx::strip_layout_build(q4, 0, true, &L, &why));
    CHECK(why == "0 strips for 16 quads");
    CHECK_FALSE(ggx::strip_layout_build(q4, 17, true, &L, &why));
    CHECK(why == "17 strips for 16 quads");
    CHECK(ggx::strip_layout_build(q4, 16, true, &L, &why));
}

TEST_CASE("strip layout: units dealt to warps in contiguous runs of near-equal bytes") {
    for (const char * lay : {"4 g128", "8/6/5 g32,128,128 .05/.1/.85", "6/3/2 g32,64,64 .05/.2/.75"}) {
        const QLayerHost Q = synth_layer(lay, 4096, 512, 11);
        const StripLayout L = build(qlayer_host_view(Q), 5);
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
    CHECK(strip_layout_deal(build(qlayer_host_view(Q), 2), 0).empty());
}
