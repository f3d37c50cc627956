// Random but valid quantized layers, as safetensors-style tensors, so that tests and benchmarks
// go through the same loader path as real files (exl2::qlayer_load).
//
//   auto L = exl2::exl2_layout_for_bpw(4.0, K, N);             // -> "4 g128"
//   exl2::SafeTensors st;
//   exl2::synth_add(st, exl2::synth_exl2_layer("blk.0.q", K, N, L, {}));
//   exl2::QLayerHost h = exl2::qlayer_load(st, "blk.0.q", {});
//
// Layouts use the converter's notation (docs/exl2-format.md section 6.4): widths in row order,
// group size per width (one value = all), proportions of rows: "4 g128", "4/3 g128 .1/.9",
// "8/4/3 g32,128,128 .05/.1/.85". Group counts follow section 6.5 step 5 (the last group is
// clipped to end at row K). Generation is fast: packed words are random bits (every bit pattern
// is a valid code sequence), so a 4096 x 14336 layer takes a few tens of milliseconds.
#pragma once

#include "exl2/safetensors.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace exl2 {

struct BitPart {
    int    bits;
    double prop;
    int    group_size;
};

struct BitLayout {
    std::string          name;    // as parsed, e.g. "4/3 g128 .1/.9"
    std::vector<BitPart> parts;   // widths non-increasing
};

// Parses the section 6.4 notation; throws exl2::Error naming the string when malformed.
BitLayout exl2_layout_parse(const std::string & s);
// Every distinct option of the section 6.4 tables (attention, MLP and head columns).
const std::vector<std::string> & exl2_layout_options();
// (bits, rows) of each group for K rows. Throws when K is not a multiple of 32.
std::vector<std::pair<int, int>> exl2_layout_groups(const BitLayout & L, int K);
// Bits per weight of a K x N layer in this layout (section 6.8, no bias).
double exl2_layout_bpw(const BitLayout & L, int K, int N);
// The option of exl2_layout_options() whose bpw for K x N is closest to `target`.
BitLayout exl2_layout_for_bpw(double target, int K, int N);

struct SynthTensor {
    std::string          name;
    StDtype              dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};

struct SynthExl2Options {
    bool     act_order = true;    // random q_invperm (else identity)
    bool     bias      = false;   // add P.bias F16 [N]
    uint64_t seed      = 1;
    // With act_order: 0 draws q_invperm with the weights; else from its own generator seeded so,
    // which layers of one input share (a converter gives gate and up, which see the same
    // activations, the same order: ExLlamaV2's models do)
    uint64_t perm_seed = 0;
};
// P.q_weight, P.q_scale, P.q_scale_max (log-uniform in [1e-3, 1e-1], so M/256 is often an fp16
// subnormal), P.q_groups, P.q_invperm (+ P.bias). Padding columns hold the zero code 2^(b-1) and
// scale code 15, as the converter writes them. K must be a multiple of 32 and at most 65536.
std::vector<SynthTensor> synth_exl2_layer(const std::string & prefix, int K, int N, const BitLayout & layout,
                                          const SynthExl2Options & opt);

struct SynthGptqOptions {
    int      group_size = 128;    // power of two, multiple of 8
    bool     act_order  = false;  // non-trivial g_idx (each group still gets group_size rows)
    bool     g_idx      = true;   // write P.g_idx (trivial k / group_size unless act_order)
    bool     v2         = false;  // zeros stored as true zero points 1..15 (checkpoint_format gptq_v2)
    bool     scales_f32 = false;  // P.scales as F32 instead of F16
    bool     bias       = false;
    uint64_t seed       = 1;
};
// P.qweight, P.qzeros (nibbles 0..15; 1..15 for v2), P.scales (log-uniform in [1e-5, 1e-2]: some are
// fp16 subnormal), P.g_idx, P.bias. K and N must be multiples of 8.
std::vector<SynthTensor> synth_gptq_layer(const std::string & prefix, int K, int N, const SynthGptqOptions & opt);

// Moves the tensors into `st` (SafeTensors::add).
void synth_add(SafeTensors & st, std::vector<SynthTensor> && tensors);

}  // namespace exl2
