// A synthetic EXL2 layer (random codes and scales, act-order permutation) of a layout string such
// as "6/3/2 g32,64,64 .05/.2/.75", loaded as the engine loads one, and a double-precision
// reference product with it: for the layout tests and the GEMV tests on the GPU.
#pragma once

#include "exl2/quant/dequant.h"
#include "exl2/quant/qlayer.h"
#include "exl2/quant/synthetic.h"
#include "exl2/safetensors.h"
#include "ggx/fp16.h"

#include <cmath>
#include <random>
#include <vector>

inline exl2::QLayerHost synth_layer(const char * layout, int K, int N, uint64_t seed, bool bias = false,
                                    const char * name = "L") {
    exl2::SafeTensors st;
    exl2::SynthExl2Options so;
    so.seed = seed;
    so.act_order = true;
    so.bias = bias;
    exl2::synth_add(st, exl2::synth_exl2_layer(name, K, N, exl2::exl2_layout_parse(layout), so));
    exl2::QLoadOptions lo;
    lo.N = N;
    return exl2::qlayer_load(st, name, lo);
}

// The reference dequantizer's fp16 weights [K][N] of a loaded EXL2 or GPTQ layer, rows in its
// original input order
inline std::vector<uint16_t> qlayer_dequant(const exl2::QLayerHost & L) {
    std::vector<uint16_t> W((size_t)L.K * L.N);
    exl2::qmatrix_dequant(exl2::qlayer_host_view(L), L.format == exl2::QFormat::EXL2 ? GGX_TYPE_EXL2 : GGX_TYPE_GPTQ, W.data());
    return W;
}

// Random x in [-1, 1) (xq: the same in quantized row order) and y = W x through the reference
// dequantizer's fp16 weights, in double, with the bound the GEMV tests allow: 2^-10 of
// sum |w x| (+1e-6). The kernels apply a group's scale to a sum over the group (exact, or in fp16
// pairs) where the reference rounds each weight to fp16, so they differ by up to ~2^-11 of it;
// a wrong unit, register, scale or bias term moves an output by ~sum |w x| / sqrt(K).
struct GemvReference {
    std::vector<float>  x, xq;
    std::vector<double> ref, bound;
};

inline GemvReference gemv_reference(const exl2::QLayerHost & Q, uint64_t seed) {
    const int K = Q.K, N = Q.N;
    const std::vector<uint16_t> W = qlayer_dequant(Q);   // original row order
    GemvReference R;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    R.x.resize(K);
    R.xq.resize(K);
    for (float & v : R.x) v = dist(rng);
    for (int k = 0; k < K; k++) R.xq[k] = R.x[Q.q_perm[k]];
    R.ref.assign(N, 0.0);
    R.bound.resize(N);
    for (int n = 0; n < N; n++) {
        double mag = 0.0;
        for (int k = 0; k < K; k++) {
            const double p = (double)ggx_f16_to_f32(W[(size_t)k * N + n]) * R.x[k];
            R.ref[n] += p;
            mag += std::fabs(p);
        }
        R.bound[n] = mag / 1024.0 + 1e-6;
    }
    return R;
}
