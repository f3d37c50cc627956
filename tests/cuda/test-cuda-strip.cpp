// The strip GEMV (backends/cuda/strip-step.h) against a double-precision product with the
// reference dequantizer's fp16 weights, on synthetic EXL2 layers of several width mixes, with
// act-order permutations and strips of uneven width (first passed on the H200 in run 83).
//
// Error model: the decode GEMV's (test-cuda-qmatmul.cpp): x rounded to fp16 after an exact
// power-of-two scaling, (q - z) x summed in fp16 pairs over 32 rows, the group scale applied in
// fp32: within 2^-10 S, S = sum_k |w_k x_k|, with +1e-6 for outputs near zero. A wrong unit,
// lane, word row or scale moves an output by ~S / sqrt(K), far outside.
#include "cuda-harness.h"

#include "backends/cuda/strip-step.h"
#include "ggx/ggx-strip-layout.h"
#include "upload.h"
#include "../synth-layer.h"

using namespace cudatest;

// Every form of the loop (registers one or two units deep, with and without L2 prefetching,
// shared-memory rings, padded x), on a narrow matrix (at most a unit or two per warp) and a
// wider one (many units per warp, so that the pipelines wrap around: a slot or scale taken from
// the wrong unit shows there).
TEST_CASE("strip gemv: synthetic EXL2 layers through the strip layout against a double reference") {
    REQUIRE_CUDA();
    const char * layouts[] = {"4 g128", "8/6/5 g32,128,128 .05/.1/.85", "6/3/2 g32,64,64 .05/.2/.75", "3/2 g64 .1/.9",
                              "5/4 g32 .25/.75"};
    uint64_t seed = 100;
    for (const char * lay : layouts)
        for (const auto & shape : {std::make_pair(2048, 200), std::make_pair(4096, 512)})
        for (int n_strips : {5, 48})
        for (const ggx_strip_form form : {ggx_strip_form{0, 0, 1, 0}, ggx_strip_form{0, 0, 2, 0}, ggx_strip_form{0, 0, 2, 3},
                                          ggx_strip_form{0, 1, 1, 2}, ggx_strip_form{1, 0, 1, 0}, ggx_strip_form{1, 1, 1, 0}}) {
            const int K = shape.first, N = shape.second;
            CAPTURE(lay);
            CAPTURE(K);
            CAPTURE(n_strips);
            CAPTURE(form.ring);
            CAPTURE(form.xpad);
            CAPTURE(form.depth_lo);
            CAPTURE(form.prefetch);
            const exl2::QLayerHost L = synth_layer(lay, K, N, seed++);
            const ggx_qmatrix q = exl2::qlayer_host_view(L);
            ggx::StripLayout S;
            std::string why;
            REQUIRE_MESSAGE(ggx::strip_layout_build(q, n_strips, true, &S, &why), why);
            const std::vector<int> deal = ggx::strip_layout_deal(S, GGX_STRIP_WARPS);


            const GemvReference R = gemv_reference(L, seed);

            ggx_strip_matrix m = {};
            m.words = (const uint4 *)upload(S.words);
            m.units = upload(ggx_strip_units(S));
            m.deal = upload(deal);
            m.scales = upload(S.scales);
            m.slice_group = upload(S.slice_group);
            m.width_unit0 = upload(S.width_unit0);
            m.K = K;
            m.Np = S.Np;
            m.n_strips = n_strips;
            m.max_quads = ggx_strip_max_quads(S);
            m.max_units = ggx_strip_max_units(S);
            float * xd = upload(R.xq);
            float * yd = upload(std::vector<float>(S.Np, -12345.0f));
            int * counter = upload(std::vector<int>(1, 0));
            REQUIRE(ggx_cuda_strip_gemv(m, xd, yd, counter, nullptr, form) == cudaSuccess);
            const std::vector<float> y = download(yd, N);
            check_bound(y, R.ref, R.bound, std::string("strip gemv ") + lay);
            for (const void * p : {(const void *)m.words, (const void *)m.units, (const void *)m.deal, (const void *)m.scales,
                                   (const void *)m.slice_group, (const void *)m.width_unit0, (const void *)xd, (const void *)yd, (const void *)counter})
                (void)cudaFree((void *)p);
        }
}
