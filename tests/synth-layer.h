// A synthetic EXL2 layer (random codes and scales, act-order permutation) of a layout string such
// as "6/3/2 g32,64,64 .05/.2/.75", loaded as the engine loads one: for the host layout tests.
#pragma once

#include "exl2/quant/qlayer.h"
#include "exl2/quant/synthetic.h"
#include "exl2/safetensors.h"

inline exl2::QLayerHost synth_layer(const char * layout, int K, int N, uint64_t seed) {
    exl2::SafeTensors st;
    exl2::SynthExl2Options so;
    so.seed = seed;
    so.act_order = true;
    exl2::synth_add(st, exl2::synth_exl2_layer("L", K, N, exl2::exl2_layout_parse(layout), so));
    exl2::QLoadOptions lo;
    lo.N = N;
    return exl2::qlayer_load(st, "L", lo);
}
