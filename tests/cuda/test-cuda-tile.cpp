// The tensor-core tile GEMV (backends/cuda/tile-gemv.h) and the tile step (tile-step.h) against a double-precision product with
// the reference dequantizer's fp16 weights, on synthetic EXL2 layers of every width mix (act-order
// permutations, 16-row 2-bit groups, groups longer than a chunk), with few warps (many units
// each, tiles split between warps) and many.
//
// Error model: x rounded to fp16 after an exact power-of-two scaling; the products (1024 + f v) x
// exact in fp32, summed in fp32 over a chunk with the bias and zero point taken out by sums of
// the same fp16 values; the scale applied in fp32: within gemv_reference's bound (synth-layer.h).
#include "cuda-harness.h"

#include "backends/cuda/tile-gemv.h"
#include "backends/cuda/tile-step.h"
#include "ggx/ggx-tile-layout.h"
#include "upload.h"
#include "../synth-layer.h"

using namespace cudatest;

namespace {

// A synthetic layer of layout `lay`, its tile layout (with the words) and its double reference.
struct tile_case {
    exl2::QLayerHost Q;
    ggx::TileLayout  L;
    GemvReference    R;
};
tile_case make_case(const char * lay, int K, int N, uint64_t seed) {
    tile_case c;
    c.Q = synth_layer(lay, K, N, seed);
    std::string why;
    REQUIRE_MESSAGE(ggx::tile_layout_build(exl2::qlayer_host_view(c.Q), &c.L, &why), why);
    c.R = gemv_reference(c.Q, seed + 1);
    return c;
}

}  // namespace

TEST_CASE("tile gemv: synthetic EXL2 layers through the tile layout against a double reference") {
    REQUIRE_CUDA();
#if defined(GGX_USE_HIP)
    MESSAGE("the tile GEMV is CUDA-only (mma.sync)");
    return;
#endif
    // ("8/4/3 g32": 3-bit units of 10 chunks, a batch of 8 and a short one)
    const char * layouts[] = {"4 g128", "8/6/5 g32,128,128 .05/.1/.85", "6/3/2 g32,64,64 .05/.2/.75", "3/2 g64 .1/.9",
                              "5/4 g32 .25/.75", "8/4/3 g32 .05/.1/.85", "2 g16", "5/2 g512,16 .5/.5"};
    uint64_t seed = 500;
    for (const char * lay : layouts)
        for (const auto & shape : {std::make_pair(2048, 200), std::make_pair(4096, 512)})
            for (int grid : {2, 40})
                for (int prefetch : {0, 2}) {   // (L2 prefetch changes no result; its addresses must stay inside the words)
                    const int K = shape.first, N = shape.second;
                    CAPTURE(lay);
                    CAPTURE(K);
                    CAPTURE(grid);
                    CAPTURE(prefetch);
                    const tile_case c = make_case(lay, K, N, seed++);
                    const ggx::TileLayout & L = c.L;
                    const GemvReference & R = c.R;

                    ggx_tile_matrix m;
                    REQUIRE(ggx_cuda_tile_upload(L, grid, &m) == cudaSuccess);
                    m.prefetch = prefetch;
                    REQUIRE(m.K == K);
                    float * xd = upload(R.xq);
                    float * yd = upload(std::vector<float>(L.Np, 0.0f));
                    REQUIRE(ggx_cuda_tile_gemv(m, xd, yd, grid, nullptr) == cudaSuccess);
                    const std::vector<float> y = download(yd, N);
                    check_bound(y, R.ref, R.bound, std::string("tile gemv ") + lay);
                    ggx_cuda_tile_free(m);
                    (void)cudaFree(xd);
                    (void)cudaFree(yd);
                }
}

// The device gather writes the words the host builder writes, bit for bit (it runs the same
// ggx_tile_word over q_weight on the GPU).
TEST_CASE("tile gather: the device writes the tile layout's words as the host builder does") {
    REQUIRE_CUDA();
    const char * layouts[] = {"4 g128", "8/6/5 g32,128,128 .05/.1/.85", "6/3/2 g32,64,64 .05/.2/.75", "2 g16", "5/2 g512,16 .5/.5"};
    uint64_t seed = 600;
    for (const char * lay : layouts)
    for (const int hd : {0, 64}) {   // natural order, and RoPE pairs of 64-column heads (ggx_tile_src_col)
        CAPTURE(lay);
        CAPTURE(hd);
        const exl2::QLayerHost Q = synth_layer(lay, 2048, hd ? 192 : 200, seed++);
        const ggx_qmatrix q = exl2::qlayer_host_view(Q);
        ggx::TileLayout L, U;
        std::string why;
        REQUIRE_MESSAGE(ggx::tile_layout_build(q, &L, &why, true, hd, hd / 2), why);
        REQUIRE_MESSAGE(ggx::tile_layout_build(q, &U, &why, false, hd, hd / 2), why);
        CHECK(U.words.empty());
        std::vector<ggx_tile_unit_dev> units;
        std::vector<int4> chunks;
        REQUIRE(ggx_tile_units(U, &units, &chunks));
        const size_t n_uint4 = ggx::tile_layout_n_uint4(U);
        REQUIRE(n_uint4 * 32 * 4 == L.words.size());
        uint32_t * qw = upload(Q.q_weight);
        int4 * si = upload(ggx_tile_step_info(U));
        ggx_tile_unit_dev * ud = upload(units);
        uint32_t * wd = upload(std::vector<uint32_t>(L.words.size(), 0xdeadbeefu));
        REQUIRE(ggx_cuda_tile_gather(qw, Q.Np, si, ud, (int)units.size(), n_uint4, (uint4 *)wd, nullptr, hd, hd / 2) == cudaSuccess);
        const std::vector<uint32_t> words = download(wd, L.words.size());
        size_t wrong = 0;
        for (size_t i = 0; i < words.size(); i++) wrong += words[i] != L.words[i];
        CHECK_MESSAGE(wrong == 0, wrong << " of " << words.size() << " words differ from the host builder's");
        for (const void * p : {(const void *)qw, (const void *)si, (const void *)ud, (const void *)wd}) (void)cudaFree((void *)p);
    }
}

// The tile step (backends/cuda/tile-step.h) as one stage, one matrix: blocks owning whole tiles,
// the warps' sums meeting in shared memory; against the same double reference and bound as the
// tile GEMV (the same loop). Grids of 2 blocks of 16 warps (many tiles and units per warp) and 40
// of 12.
TEST_CASE("tile step: one stage over synthetic EXL2 layers against a double reference") {
    REQUIRE_CUDA();
#if defined(GGX_USE_HIP)
    MESSAGE("the tile step is CUDA-only (mma.sync)");
    return;
#endif
    const char * layouts[] = {"4 g128", "8/6/5 g32,128,128 .05/.1/.85", "6/3/2 g32,64,64 .05/.2/.75", "5/4 g32 .25/.75", "2 g16",
                              "5/2 g512,16 .5/.5"};
    uint64_t seed = 700;
    int * counter = upload(std::vector<int>(1, 0));
    for (const char * lay : layouts)
        for (const auto & shape : {std::make_pair(2048, 200), std::make_pair(4096, 512)})
            for (int grid : {2, 40}) {
                const int K = shape.first, N = shape.second, W = grid == 2 ? 16 : 12;   // both kernel forms
                CAPTURE(lay);
                CAPTURE(K);
                CAPTURE(grid);
                CAPTURE(W);
                const tile_case c = make_case(lay, K, N, seed++);
                const ggx::TileLayout & L = c.L;
                const GemvReference & R = c.R;
                std::vector<ggx_tile_unit_dev> units;
                std::vector<int4> chunks;
                REQUIRE(ggx_tile_units(L, &units, &chunks));
                const ggx_tile_step_plan P = ggx_tile_step_deal(L, grid, W);
                const std::vector<int> & tile0 = P.tile0, & deal = P.deal;
                REQUIRE(tile0.front() == 0);
                REQUIRE(tile0.back() == L.n_tiles);
                ggx_tile_step_matrix m = {};
                m.words = (const uint4 *)upload(L.words);
                m.units = upload(units);
                m.chunks = upload(chunks);
                m.scales = upload(L.scales);
                m.deal = upload(deal);
                m.tile0 = upload(tile0);
                m.K = K;
                m.Np = L.Np;
                m.n_chunks = (int)chunks.size();
                m.grid = grid;
                m.warps = W;
                m.max_tiles = P.max_tiles;
                m.max_units = P.max_units;
                m.variants = ggx::tile_layout_variants(L);
                for (int b = 0; b < grid; b++) CHECK(deal[(size_t)b * (W + 1)] == L.tile_unit0[tile0[b]]);   // a block's units are its tiles'
                float * xd = upload(R.xq);
                float * yd = upload(std::vector<float>(L.Np, 0.0f));
                REQUIRE(ggx_cuda_tile_step_gemv(m, xd, yd, counter, nullptr) == cudaSuccess);
                const std::vector<float> y = download(yd, N);
                check_bound(y, R.ref, R.bound, std::string("tile step ") + lay);
                for (const void * p : {(const void *)m.words, (const void *)m.units, (const void *)m.chunks, (const void *)m.scales,
                                       (const void *)m.deal, (const void *)m.tile0, (const void *)xd, (const void *)yd})
                    (void)cudaFree((void *)p);
            }
    CHECK(download(counter, 1)[0] == 0);   // the kernel leaves its counter as it found it
    (void)cudaFree(counter);
}

// A split stage (tile-step.h): q, k and v of one x, each on its own share of the blocks, x gathered
// through each matrix's own q_perm. q and k are in RoPE pair order and rotated by the epilogue
// (heads of 64 columns, all rotated, cos and sin at position `pos`); q gets a bias and goes to f32,
// k (with a bias) to row pos of an f16 cache, v to row pos of an f32 cache, the other rows
// untouched. Against gemv_reference's double product (the same x for all three: the same seed)
// with the bias added and the rotation applied in double; bound: the tile GEMV's bound carried
// through the rotation (|cos| b_first + |sin| b_second), 2^-20 of the value for the fp32 rotation
// and cos / sin rounded to float, and for the f16 cache 2^-11 of the value (its rounding).
TEST_CASE("tile step: a split q/k/v stage with RoPE and cache rows against a double reference") {
    REQUIRE_CUDA();
#if defined(GGX_USE_HIP)
    MESSAGE("the tile step is CUDA-only (mma.sync)");
    return;
#endif
    const int K = 1024, hd = 64, half = 32, pos = 5, rows = 8, grid = 12, W = 16;
    const int Ns[3] = {256, 128, 128};
    // shares of the 12 blocks: by bytes, roughly; then q on one block (128 RoPE pairs), k on one,
    // v on ten (two of them without a tile)
    for (const auto & sh : {std::vector<int>{6, 3, 3}, std::vector<int>{1, 1, 10}}) {
        const int * shares = sh.data();
        CAPTURE(shares[0]);
        const char * lays[3] = {"4 g128", "6/3/2 g32,64,64 .05/.2/.75", "5/4 g32 .25/.75"};
        exl2::QLayerHost Q[3];
        ggx::TileLayout L[3];
        GemvReference R[3];
        std::vector<const void *> allocs;
        auto keep = [&](auto * p) {
            allocs.push_back((const void *)p);
            return p;
        };
        ggx_tile_stage S = {};
        std::mt19937_64 rng(31);
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        std::vector<float> bias[2];
        for (int i = 0, block0 = 0; i < 3; block0 += shares[i], i++) {
            Q[i] = synth_layer(lays[i], K, Ns[i], 900 + i);
            std::string why;
            REQUIRE_MESSAGE(ggx::tile_layout_build(exl2::qlayer_host_view(Q[i]), &L[i], &why, true, i < 2 ? hd : 0, i < 2 ? half : 0), why);
            R[i] = gemv_reference(Q[i], 77);   // (one seed: one x)
            REQUIRE(R[i].x == R[0].x);
            std::vector<ggx_tile_unit_dev> units;
            std::vector<int4> chunks;
            REQUIRE(ggx_tile_units(L[i], &units, &chunks));
            const ggx_tile_step_plan P = ggx_tile_step_deal(L[i], shares[i], W);
            ggx_tile_step_matrix & m = S.m[i];
            m.words = keep((const uint4 *)upload(L[i].words));
            m.units = keep(upload(units));
            m.chunks = keep(upload(chunks));
            m.scales = keep(upload(L[i].scales));
            m.deal = keep(upload(P.deal));
            m.tile0 = keep(upload(P.tile0));
            m.perm = keep(upload(std::vector<uint16_t>(Q[i].q_perm.begin(), Q[i].q_perm.end())));
            m.K = K;
            m.Np = Ns[i];
            m.n_chunks = (int)chunks.size();
            m.grid = shares[i];
            m.block0 = block0;
            m.pair_hd = L[i].pair_hd;
            m.pair_half = L[i].pair_half;
            m.warps = W;
            m.max_tiles = P.max_tiles;
            m.max_units = P.max_units;
            m.variants = ggx::tile_layout_variants(L[i]);
            if (i < 2) {
                for (int n = 0; n < Ns[i]; n++) bias[i].push_back(dist(rng));
                S.bias[i] = keep(upload(bias[i]));
            }
        }
        float * yq = keep(upload(std::vector<float>(Ns[0], 0.0f)));
        uint16_t * kc = keep(upload(std::vector<uint16_t>((size_t)rows * Ns[1], 0x3c00)));   // f16 1.0
        float * vc = keep(upload(std::vector<float>((size_t)rows * Ns[2], 1.0f)));
        S.split = 1;
        S.n_mat = 3;
        S.out[0] = yq;
        S.out_type[0] = GGX_TYPE_F32;
        S.out[1] = kc;
        S.out_type[1] = GGX_TYPE_F16;
        S.out_rows[1] = rows;
        S.out[2] = vc;
        S.out_type[2] = GGX_TYPE_F32;
        S.out_rows[2] = rows;
        S.rope_mask = 3;
        S.pos = keep(upload(std::vector<int32_t>(1, pos)));
        S.rope.n_rot = hd;
        S.rope.mode = GGX_ROPE_NEOX;
        S.rope.theta = 10000.0f;
        S.rope.pos_scale = 1.0f;
        S.rope.attn_factor = 1.0f;
        S.x = keep(upload(R[0].x));
        S.K = K;
        S.N = Ns[0];
        S.norm_type = GGX_TYPE_F32;
        S.epi = GGX_STRIP_STORE;
        ggx_tile_step s = {};
        s.n_stages = 1;
        s.counter = keep(upload(std::vector<int>(1, 0)));
        s.trace_stage = -1;
        s.st[0] = S;
        REQUIRE(ggx_cuda_tile_step(s, grid, nullptr) == cudaSuccess);
        const std::vector<float> q = download(yq, Ns[0]), v = download(vc, (size_t)rows * Ns[2]);
        const std::vector<uint16_t> k = download(kc, (size_t)rows * Ns[1]);

        // the double reference of matrix i, column n: bias, then RoPE for q and k
        auto expect = [&](int i, int n, double * bound) {
            const GemvReference & r = R[i];
            if (i == 2) {
                *bound = r.bound[n];
                return r.ref[n];
            }
            const int d = n % hd, a = d < half ? n : n - half, b = a + half;   // the pair (a, b)
            const double va = r.ref[a] + bias[i][a], vb = r.ref[b] + bias[i][b];
            const double ang = pos * std::pow(10000.0, -2.0 * (d % half) / hd), c = std::cos(ang), sn = std::sin(ang);
            const double out = d < half ? va * c - vb * sn : va * sn + vb * c;
            *bound = std::fabs(c) * r.bound[d < half ? a : b] + std::fabs(sn) * r.bound[d < half ? b : a] + std::fabs(out) * 1e-6 + 1e-6;
            return out;
        };
        size_t bad[3] = {0, 0, 0}, touched = 0;
        for (int n = 0; n < Ns[0]; n++) {
            double b;
            const double e = expect(0, n, &b);
            bad[0] += std::fabs(q[n] - e) > b;
        }
        for (int r = 0; r < rows; r++)
            for (int n = 0; n < Ns[1]; n++) {
                const float kv = ggx_f16_to_f32(k[(size_t)r * Ns[1] + n]), vv = v[(size_t)r * Ns[2] + n];
                if (r != pos) {
                    touched += kv != 1.0f || vv != 1.0f;
                    continue;
                }
                double b;
                const double e = expect(1, n, &b);
                bad[1] += std::fabs(kv - e) > b + std::fabs(e) / 2048.0;
                const double ev = expect(2, n, &b);
                bad[2] += std::fabs(vv - ev) > b;
            }
        CHECK_MESSAGE(bad[0] == 0, bad[0] << " of " << Ns[0] << " q outputs outside the bound");
        CHECK_MESSAGE(bad[1] == 0, bad[1] << " of " << Ns[1] << " k cache values outside the bound");
        CHECK_MESSAGE(bad[2] == 0, bad[2] << " of " << Ns[2] << " v cache values outside the bound");
        CHECK_MESSAGE(touched == 0, touched << " cache values outside row " << pos << " written");
        CHECK(download(s.counter, 1)[0] == 0);
        for (const void * p : allocs) (void)cudaFree((void *)p);
    }
}
