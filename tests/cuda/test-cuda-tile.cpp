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
                    cudaFree(xd);
                    cudaFree(yd);
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
        for (const void * p : {(const void *)qw, (const void *)si, (const void *)ud, (const void *)wd}) cudaFree((void *)p);
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
                    cudaFree((void *)p);
            }
    CHECK(download(counter, 1)[0] == 0);   // the kernel leaves its counter as it found it
    cudaFree(counter);
}
