// The tile layout (ggx/ggx-tile-layout.h) on synthetic EXL2 layers of every width mix the
// converter writes: every (tile, step) in exactly one unit of its width, every code given back
// bit for bit by the register recipes; and the tensor-core product the layout is made for,
// emulated on the host, against the reference dequantizer's weights.
#include "exl2/quant/exl2-pack.h"
#include "ggx/ggx-tile-layout.h"
#include "synth-layer.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace exl2;
using ggx::TileLayout;
using ggx::TileUnit;

namespace {

TileLayout build(const ggx_qmatrix & q, int pair_hd = 0, int pair_half = 0) {
    TileLayout L;
    std::string why;
    REQUIRE_MESSAGE(ggx::tile_layout_build(q, &L, &why, true, pair_hd, pair_half), why);
    return L;
}

// The fp16 value 1024 + f v of register r's half e (0 low, 1 high) of plane p, step i, in a lane.
int reg_half(const TileLayout & L, const TileUnit & u, int lane, int p, int i, int r, int e) {
    uint32_t pw[32];
    const int base = ggx_tile_plane_base(u.bits, p);
    const int pb = ggx_tile_plane_bits(u.bits, p);
    for (int j = 0; j < ggx_tile_plane_words(pb, u.n_steps); j++) pw[j] = ggx::tile_word(L, u, lane, base + j);
    const uint32_t reg = ggx_tile_reg(pb, pw, i, r);
    return (int)ggx_f16_to_f32((uint16_t)(reg >> (16 * e)));
}

// The code at quantized row k, column n, from q_weight by the format's own extractor.
uint32_t code_at(const QLayerHost & Q, int k, int n) {
    int row0 = 0;
    for (int g = 0; g < Q.G; g++) {
        const int bits = Q.q_groups[2 * g], r0 = Q.q_groups[2 * g + 1], r1 = g + 1 < Q.G ? Q.q_groups[2 * g + 3] : Q.QR;
        const int rows = (r1 - r0) * 32 / bits;
        if (k < row0 + rows) return exl2_extract(Q.q_weight.data() + (size_t)r0 * Q.Np, Q.Np, n, k - row0, bits);
        row0 += rows;
    }
    return ~0u;
}

// Structure, and every code through the recipes (exact).
void check_codes(const QLayerHost & Q, const TileLayout & L) {
    const int n_steps = Q.K / 16;
    REQUIRE(L.n_tiles == Q.Np / 16);
    REQUIRE(L.tile_unit0.size() == (size_t)L.n_tiles + 1);
    // chunks: the steps in order, at most ggx_tile_chunk_steps each, each inside one group
    int step = 0;
    for (const ggx::TileChunk & c : L.chunks) {
        CHECK(c.step0 == step);
        CHECK((c.n_steps >= 1 && c.n_steps <= ggx_tile_chunk_steps(L.group_bits[c.group])));
        for (int i = 0; i < c.n_steps; i++) CHECK(L.step_group[c.step0 + i] == c.group);
        step += c.n_steps;
    }
    CHECK(step == n_steps);
    std::vector<int> seen((size_t)L.n_tiles * n_steps, 0);
    uint32_t next = 0;
    size_t wrong = 0;
    for (int t = 0; t < L.n_tiles; t++)
        for (int ui = L.tile_unit0[t]; ui < L.tile_unit0[t + 1]; ui++) {
            const TileUnit & u = L.units[ui];
            CAPTURE(ui);
            CHECK(u.tile == (uint32_t)t);
            CHECK(u.offset == next);   // units follow each other without gaps
            next = u.offset + u.n_uint4;
            CHECK((u.n_steps >= 1 && u.n_steps <= ggx_tile_max_steps(u.bits)));
            CHECK((u.n_uint4 >= 1 && u.n_uint4 <= GGX_TILE_UNIT_UINT4));   // one unit's registers in the kernels
            // units as long as they may be: a unit shorter than its width's most steps is followed
            // in its tile by one of another width, or by a chunk that would not fit
            if (ui + 1 < L.tile_unit0[t + 1] && u.n_steps < ggx_tile_max_steps(u.bits) && L.units[ui + 1].bits == u.bits)
                CHECK(u.n_steps + L.chunks[L.units[ui + 1].chunk0].n_steps > ggx_tile_max_steps(u.bits));
            if (ui > L.tile_unit0[t]) CHECK(L.units[ui - 1].step0 + L.units[ui - 1].n_steps == u.step0);   // rows in order
            // the unit is whole chunks, chunk_starts marking where each begins
            REQUIRE(u.chunk0 < L.chunks.size());
            CHECK(L.chunks[u.chunk0].step0 == (int)u.step0);
            for (int i = 0, c = (int)u.chunk0; i < u.n_steps; i++) {
                const bool starts = u.chunk_starts >> i & 1;
                if (starts && i > 0) c++;
                REQUIRE(c < (int)L.chunks.size());
                CHECK(starts == (L.chunks[c].step0 == (int)u.step0 + i));
                CHECK((int)u.step0 + i < L.chunks[c].step0 + L.chunks[c].n_steps);
            }
            for (int i = 0; i < u.n_steps; i++) {
                CHECK(L.group_bits[L.step_group[u.step0 + i]] == u.bits);   // one width per unit
                seen[(size_t)t * n_steps + u.step0 + i]++;
                for (int lane = 0; lane < 32; lane++)
                    for (int r = 0; r < 4; r++)
                        for (int e = 0; e < 2; e++) {
                            uint32_t code = 0;
                            for (int p = 0; p < ggx_tile_n_planes(u.bits); p++) {
                                const int pb = ggx_tile_plane_bits(u.bits, p), f = ggx_tile_factor(pb, r);
                                const int v = reg_half(L, u, lane, p, i, r, e) - 1024;
                                if (v < 0 || v % f || v / f >= (1 << pb)) wrong++;
                                code |= (uint32_t)(v / f) << ggx_tile_plane_shift(u.bits, p);
                            }
                            const int k = 16 * (u.step0 + i) + ggx_tile_row(lane, r, e), n = 16 * t + ggx_tile_col(lane, r);
                            wrong += code != code_at(Q, k, ggx::tile_src_col(L, n));
                        }
            }
        }
    CHECK(next * 32 * 4 == L.words.size());
    size_t missed = 0;
    for (int c : seen) missed += c != 1;
    CHECK_MESSAGE(missed == 0, missed << " (tile, step) pairs not held exactly once");
    CHECK_MESSAGE(wrong == 0, wrong << " codes (or register fields) wrong through the recipes");
}

// y = W xq (quantized row order, y in the layout's column order) as the tile kernel is to compute it: per unit, chunk by chunk
// (where chunk_starts says), per plane the tensor core's sum C[m] = sum_k (1024 + f_r v) B[k]
// (in double: the kernel's fp32 sums differ by far less than the bound), B[k] = xq[k], divided by
// V for each step's rows 8-15; then sum v x = C - 1024 T (rows 0-7) or (C - 1024 T) / H (rows
// 8-15), T the sum of B over the chunk; the code's sum is the planes' sums times 2^shift, less
// 2^(b-1) S; times the chunk's group scale.
std::vector<double> tile_product(const TileLayout & L, const std::vector<float> & xq) {
    std::vector<double> y((size_t)L.Np, 0.0);
    for (const TileUnit & u : L.units) {
        const int np = ggx_tile_n_planes(u.bits);
        int i0 = 0, c = (int)u.chunk0;
        while (i0 < u.n_steps) {   // chunk c: steps i0 .. i1 - 1 of the unit
            int i1 = i0 + 1;
            while (i1 < u.n_steps && !(u.chunk_starts >> i1 & 1)) i1++;
            const int g = L.chunks[c++].group;
            double S = 0.0;
            for (int k = 16 * ((int)u.step0 + i0); k < 16 * ((int)u.step0 + i1); k++) S += xq[k];
            double sum_vx[16] = {};
            for (int p = 0; p < np; p++) {
                const int pb = ggx_tile_plane_bits(u.bits, p);
                const double H = ggx_tile_factor(pb, 1) / (double)ggx_tile_factor(pb, 0), V = ggx_tile_factor(pb, 2) / (double)ggx_tile_factor(pb, 0);
                double C[16] = {}, T = 0.0;
                for (int i = i0; i < i1; i++) {
                    double B[16];
                    for (int kk = 0; kk < 16; kk++) {
                        B[kk] = xq[16 * (u.step0 + i) + kk] / (kk < 8 ? 1.0 : V);
                        T += B[kk];
                    }
                    for (int lane = 0; lane < 32; lane++)
                        for (int r = 0; r < 4; r++)
                            for (int e = 0; e < 2; e++)
                                C[ggx_tile_col(lane, r)] += reg_half(L, u, lane, p, i, r, e) * B[ggx_tile_row(lane, r, e)];
                }
                for (int m = 0; m < 16; m++) sum_vx[m] += ((C[m] - 1024.0 * T) / (m < 8 ? 1.0 : H)) * (1 << ggx_tile_plane_shift(u.bits, p));
            }
            for (int m = 0; m < 16; m++) {
                const int n = 16 * u.tile + m;
                y[n] += ggx_f16_to_f32(L.scales[ggx::tile_scale_index(L.Np, g, n)]) * (sum_vx[m] - (1 << (u.bits - 1)) * S);
            }
            i0 = i1;
        }
    }
    return y;
}

// The converter's width mixes, plus 16-row 2-bit groups and groups longer than a chunk (valid
// EXL2 that the strip layout refuses).
const char * k_layouts[] = {"4 g128", "8 g32", "3/2 g64 .1/.9", "4/3 g128 .1/.9", "5/4 g32 .25/.75",
                            "6/3/2 g32,64,64 .05/.2/.75", "8/6/5 g32,128,128 .05/.1/.85", "8/4/3 g32 .05/.1/.85",
                            "2 g16", "5/2 g512,16 .5/.5"};

}  // namespace

TEST_CASE("tile layout: every width mix, every code bit for bit through the register recipes") {
    uint64_t seed = 300;
    for (const char * lay : k_layouts)
        for (const auto & kn : {std::make_pair(512, 48), std::make_pair(1024, 100)}) {
            CAPTURE(lay);
            CAPTURE(kn.first);
            const QLayerHost Q = synth_layer(lay, kn.first, kn.second, seed++);
            check_codes(Q, build(qlayer_host_view(Q)));
        }
}

// The bound: gemv_reference's (synth-layer.h).
TEST_CASE("tile layout: the tensor-core product it is made for matches the reference weights") {
    uint64_t seed = 400;
    for (const char * lay : k_layouts) {
        CAPTURE(lay);
        const int K = 1024, N = 40;
        const QLayerHost Q = synth_layer(lay, K, N, seed++);
        const TileLayout L = build(qlayer_host_view(Q));
        const GemvReference R = gemv_reference(Q, seed);
        const std::vector<double> y = tile_product(L, R.xq);
        size_t bad = 0;
        for (int n = 0; n < N; n++) bad += std::fabs(y[n] - R.ref[n]) > R.bound[n];
        CHECK_MESSAGE(bad == 0, bad << " of " << N << " outputs outside the bound");
    }
}

// The RoPE pair order (ggx_tile_src_col): every matrix column in exactly one layout column, each
// rotation pair (d, d + half) of a head in one tile as columns g and g + 8, the dims past 2 half
// in order; the codes and the product as the natural layout's, column for column (exact codes,
// the reference's bound for the product).
TEST_CASE("tile layout: RoPE pair order keeps each rotation pair in one tile") {
    const int cases[][3] = {{128, 64, 256}, {64, 32, 192}, {128, 32, 128}, {64, 8, 64}};   // head, half, N
    uint64_t seed = 450;
    for (const auto & c : cases) {
        const int hd = c[0], half = c[1], N = c[2];
        CAPTURE(hd);
        CAPTURE(half);
        std::vector<int> hit(N, 0);
        for (int n = 0; n < N; n++) {
            const int s = ggx_tile_src_col(n, hd, half);
            REQUIRE((s >= 0 && s < N));
            hit[s]++;
            CHECK(s / hd == n / hd);   // within its head
            const int d = s % hd;
            if (d < half) CHECK(ggx_tile_src_col(n + 8, hd, half) == s + half);   // the pair: columns g and g + 8 of one tile
            if (d >= 2 * half) CHECK(s == n);
        }
        CHECK(std::count(hit.begin(), hit.end(), 1) == N);
        for (const char * lay : {"4 g128", "6/3/2 g32,64,64 .05/.2/.75"}) {
            CAPTURE(lay);
            const QLayerHost Q = synth_layer(lay, 512, N, seed++);
            const TileLayout L = build(qlayer_host_view(Q), hd, half);
            CHECK(L.pair_hd == hd);
            check_codes(Q, L);
            const GemvReference R = gemv_reference(Q, seed);
            const std::vector<double> y = tile_product(L, R.xq);
            size_t bad = 0;
            for (int n = 0; n < N; n++) {
                const int s = ggx::tile_src_col(L, n);
                bad += std::fabs(y[n] - R.ref[s]) > R.bound[s];
            }
            CHECK_MESSAGE(bad == 0, bad << " of " << N << " outputs outside the bound");
        }
    }
    // refused with the reason: a head that is not whole tiles, an odd half, N not whole heads
    const QLayerHost Q = synth_layer("4 g128", 512, 96, 9);
    for (const auto & p : {std::make_pair(24, 8), std::make_pair(64, 12), std::make_pair(64, 32)}) {
        TileLayout L;
        std::string why;
        CHECK_FALSE(ggx::tile_layout_build(qlayer_host_view(Q), &L, &why, false, p.first, p.second));
        CHECK(why.find("RoPE pair order") != std::string::npos);
    }
}

TEST_CASE("tile layout: a matrix without host groups or with a ragged K is refused with a reason") {
    const QLayerHost Q = synth_layer("4 g128", 512, 32, 7);
    ggx_qmatrix q = qlayer_host_view(Q);
    std::string why;
    TileLayout L;
    q.groups_host = nullptr;
    CHECK_FALSE(ggx::tile_layout_build(q, &L, &why));
    CHECK(why.find("no host copy of q_groups") != std::string::npos);
    q = qlayer_host_view(Q);
    q.K = 520;
    CHECK_FALSE(ggx::tile_layout_supported(q, &why));
    CHECK(why.find("not a multiple of 16") != std::string::npos);
}

TEST_CASE("tile layout: units dealt to warps in contiguous runs of near-equal bytes") {
    const QLayerHost Q = synth_layer("8/6/5 g32,128,128 .05/.1/.85", 2048, 200, 13);
    const TileLayout L = build(qlayer_host_view(Q));
    uint64_t total = 0, biggest = 0;
    for (const TileUnit & u : L.units) {
        total += u.n_uint4;
        biggest = std::max<uint64_t>(biggest, u.n_uint4);
    }
    for (int n_warps : {1, 16, 1000}) {   // 1000: more warps than units
        CAPTURE(n_warps);
        const std::vector<int> r = ggx::tile_layout_deal(L, n_warps);
        REQUIRE(r.size() == (size_t)n_warps + 1);
        CHECK(r.front() == 0);
        CHECK(r.back() == (int)L.units.size());
        for (int w = 0; w < n_warps; w++) {
            REQUIRE(r[w] <= r[w + 1]);
            uint64_t bytes = 0;
            for (int u = r[w]; u < r[w + 1]; u++) bytes += L.units[u].n_uint4;
            CHECK(bytes <= (total + n_warps - 1) / n_warps + biggest);
        }
    }
    CHECK(ggx::tile_layout_deal(L, 0).empty());
}

TEST_CASE("tile layout: the x variants a layout's planes read") {
    // 8 and 4 bits read V = 1 (bit 0); 1-bit planes V = 4 (bit 1); 2-bit planes V = 16 (bit 2)
    const std::pair<const char *, int> cases[] = {{"4 g128", 1}, {"8 g32", 1}, {"5/4 g32 .25/.75", 3}, {"6 g32", 5}, {"3/2 g64 .1/.9", 6},
                                                  {"6/3/2 g32,64,64 .05/.2/.75", 7}};
    for (const auto & c : cases) {
        CAPTURE(c.first);
        CHECK(ggx::tile_layout_variants(build(qlayer_host_view(synth_layer(c.first, 512, 32, 9)))) == c.second);
    }
}
