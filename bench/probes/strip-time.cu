// Times the engine's strip GEMV (backends/cuda/strip-step.cu) on llama3-8b-shaped EXL2 layers at
// a chosen bpw: the seven matrices of a layer (q, k, v, o, gate, up, down) as seven launches per
// layer, 32 layers in one CUDA graph, cycling over enough device copies of the layer that nothing
// is served from L2. Prints us per layer and the read rate, then each matrix alone. Form "tile"
// times the tensor-core tile GEMV (backends/cuda/tile-gemv.h) the same way instead.
// Their correctness is test-cuda's "strip gemv" and "tile gemv" cases; this only times them.
//
// Build (after make BUILD=build-dev CUDA_ARCH=90 build-dev/libexl2.a):
//   nvcc -O3 -std=c++17 -arch=sm_90 -I. -Iinclude -Ibackends/cuda bench/probes/strip-time.cu \
//        build-dev/libexl2.a -lcublas -o strip-time
// Run: ./strip-time [BPW] [N_STRIPS (0: one per SM)] [FORM: ring, xpad, d2, pfN, joined with +;
//      or tile: the tensor-core tile GEMV (backends/cuda/tile-gemv.h) on N_STRIPS blocks; tile0:
//      the same launches with no units dealt (the fixed part alone)]
#include "backends/cuda/strip-step.h"
#include "backends/cuda/tile-gemv.h"
#include "exl2/quant/qlayer.h"
#include "exl2/quant/synthetic.h"
#include "exl2/safetensors.h"
#include "ggx/ggx-strip-layout.h"
#include "ggx/ggx-tile-layout.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            std::exit(1);                                                                       \
        }                                                                                       \
    } while (0)

template <typename T> static T * upload(const std::vector<T> & v) {
    void * p = nullptr;
    CK(cudaMalloc(&p, v.size() * sizeof(T)));
    CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return (T *)p;
}

struct Mat {
    const char * name;
    int K, N;
    ggx_strip_matrix m[16];   // one per device copy (words differ, tables shared)
    ggx_tile_matrix  t[16];   // the same, in the tile layout (form "tile")
    size_t bytes;             // words + scales read per call
};

int main(int argc, char ** argv) {
    const double bpw = argc > 1 ? std::atof(argv[1]) : 4.0;
    const int n_strips_arg = argc > 2 ? std::atoi(argv[2]) : 0;
    const std::string form = argc > 3 ? argv[3] : "";
    ggx_strip_form F = {};   // the loop's form: words like "ring", "xpad", "d2" (depth 2), "pf4" (prefetch 4)
    F.ring = form.find("ring") != std::string::npos;
    F.xpad = form.find("xpad") != std::string::npos;
    F.depth_lo = form.find("d2") != std::string::npos ? 2 : 1;
    const bool tile = form.find("tile") != std::string::npos;   // the tensor-core tile GEMV instead
    const size_t pf_at = form.find("pf");
    F.prefetch = pf_at != std::string::npos ? std::atoi(form.c_str() + pf_at + 2) : 0;
    const int COPIES = 16;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int n_strips = n_strips_arg > 0 ? n_strips_arg : prop.multiProcessorCount;
    Mat mats[7] = {{"q", 4096, 4096}, {"k", 4096, 1024}, {"v", 4096, 1024}, {"o", 4096, 4096},
                   {"gate", 4096, 14336}, {"up", 4096, 14336}, {"down", 14336, 4096}};
    size_t layer_bytes = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (Mat & M : mats) {
        exl2::SafeTensors st;
        exl2::SynthExl2Options so;
        so.seed = 7;
        exl2::synth_add(st, exl2::synth_exl2_layer("w", M.K, M.N, exl2::exl2_layout_for_bpw(bpw, M.K, M.N), so));
        exl2::QLoadOptions lo;
        lo.N = M.N;
        const exl2::QLayerHost L = exl2::qlayer_load(st, "w", lo);
        const ggx_qmatrix q = exl2::qlayer_host_view(L);
        std::string why;
        if (tile) {   // one deal for the whole grid; y is not zeroed between calls (only timed)
            ggx::TileLayout T;
            if (!ggx::tile_layout_build(q, &T, &why)) {
                std::fprintf(stderr, "strip-time: %s: no tile layout: %s\n", M.name, why.c_str());
                return 1;
            }
            ggx_tile_matrix m;
            CK(ggx_cuda_tile_upload(T, n_strips, &m));
            m.prefetch = F.prefetch;   // "tile+pfN": words N units ahead asked of L2
            // "tile0": every warp dealt no units, so a launch is its fixed part alone (launch, x
            // staging and chunk sums): the full form less this one is the loop's time
            if (form.find("tile0") != std::string::npos) CK(cudaMemset((void *)m.deal, 0, ((size_t)n_strips * GGX_TILE_WARPS + 1) * sizeof(int)));
            for (int c = 0; c < COPIES; c++) {   // copy 0 keeps the upload's words
                M.t[c] = m;
                if (c > 0) M.t[c].words = (const uint4 *)upload(T.words);
            }
            M.bytes = T.words.size() * 4 + T.scales.size() * 2;
            layer_bytes += M.bytes;
            continue;
        }
        ggx::StripLayout S;
        if (!ggx::strip_layout_build(q, n_strips, true, &S, &why)) {
            std::fprintf(stderr, "strip-time: %s: %s\n", M.name, why.c_str());
            return 1;
        }
        const std::vector<int> deal = ggx::strip_layout_deal(S, GGX_STRIP_WARPS);
        ggx_strip_matrix m = {};
        m.units = upload(ggx_strip_units(S));
        m.deal = upload(deal);
        m.scales = upload(S.scales);
        m.slice_group = upload(S.slice_group);
        m.width_unit0 = upload(S.width_unit0);
        m.K = M.K;
        m.Np = S.Np;
        m.n_strips = n_strips;
        m.max_quads = ggx_strip_max_quads(S);
        m.max_units = ggx_strip_max_units(S);
        for (int c = 0; c < COPIES; c++) {
            M.m[c] = m;
            M.m[c].words = (const uint4 *)upload(S.words);
        }
        M.bytes = S.words.size() * 4 + S.scales.size() * 2;
        layer_bytes += M.bytes;
    }
    const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("strip-time: %s, %d strips, %s, bpw %.2f, %.1f MB per layer (words + fp16 scales), setup %.1f s\n", prop.name,
                n_strips, form.empty() ? "registers" : form.c_str(), bpw, layer_bytes / 1e6, setup_s);

    std::vector<float> xh(14336);
    for (size_t i = 0; i < xh.size(); i++) xh[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    float * x = upload(xh);
    float * y = nullptr;
    CK(cudaMalloc(&y, 14336 * 4));
    int * counter = upload(std::vector<int>(1, 0));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));

    auto time_graph = [&](auto && body, int reps) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        body();
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaStreamSynchronize(st));
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        std::vector<float> ms(reps);
        for (int r = 0; r < reps; r++) {
            CK(cudaEventRecord(a, st));
            CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(b, st));
            CK(cudaEventSynchronize(b));
            CK(cudaEventElapsedTime(&ms[r], a, b));
        }
        std::sort(ms.begin(), ms.end());
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
        return (double)ms[reps / 2];
    };

    auto run = [&](const Mat & M, int c) {
        return tile ? ggx_cuda_tile_gemv(M.t[c], x, y, n_strips, st) : ggx_cuda_strip_gemv(M.m[c], x, y, counter, st, F);
    };
    const int LAYERS = 32;
    const double step_ms = time_graph(
        [&] {
            for (int l = 0; l < LAYERS; l++)
                for (Mat & M : mats) CK(run(M, l % COPIES));
        },
        9);
    const double us_layer = step_ms * 1e3 / LAYERS;
    std::printf("layer (7 launches): %.2f us, %.2f TB/s (median of 9 graphs of %d layers)\n", us_layer,
                layer_bytes / (us_layer * 1e-6) / 1e12, LAYERS);
    for (Mat & M : mats) {
        const double ms = time_graph(
            [&] {
                for (int l = 0; l < LAYERS; l++) CK(run(M, l % COPIES));
            },
            9);
        const double us = ms * 1e3 / LAYERS;
        std::printf("  %-4s %5d x %5d: %6.2f us per call, %5.2f TB/s\n", M.name, M.K, M.N, us, M.bytes / (us * 1e-6) / 1e12);
    }
    return 0;
}
