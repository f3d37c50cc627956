// The strip layout of an EXL2 matrix: the weight order the CUDA backend's strip step streams
// (backends/cuda/strip-step.h; bench/NOTES-cuda-decode.md, "A step kernel"). Host code, so that it
// is tested without a GPU; it lives in ggx because a backend builds it from the ggx_qmatrix it is
// given (ggx never includes exl2: ggx-exl2-host.h restates what it reads of the format).
//
// Each of n_strips blocks owns a strip of whole quads (4 adjacent columns) over the full K, so
// that it finishes its outputs alone. Inside a strip the codes are regrouped into work units: a
// unit is up to 32 consecutive 32-row slices (quantized row order) of one quad, all of one bit
// width, so that lane l of a warp takes slice slice0 + l with no branch on the width. A 32-row
// slice at b bits is b words per column; the unit stores them as [b word rows][lanes] of uint4,
// the uint4 holding the quad's 4 columns, so that each word-row load of a warp is one coalesced
// run of lanes x 16 bytes. Units run width by width (widest first, as the rows), then quad by
// quad, then slice by slice: a warp taking consecutive units stays on one width and one quad for
// as long as possible. The layout is compact: a width run's last unit of a quad has fewer lanes
// and no padding, so the words take exactly the bytes of q_weight.
//
// The column scales are expanded to fp16 per (group, column) at the same time (EXL2 stores 4-bit
// codes and a group maximum): in the probes the codes decoded per item cost ~5 us per layer,
// fp16 scales ~1.7 (runs 79-81 of bench/RESULTS.md).
#pragma once

#include "ggx-qmatrix.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ggx {

struct StripUnit {
    uint32_t offset;   // first uint4 of the unit in StripLayout::words (as uint4 index)
    uint32_t quad;     // columns 4 quad .. 4 quad + 3
    uint32_t slice0;   // first 32-row slice, quantized order: rows 32 slice0 ..
    uint8_t  bits;     // width of every slice of the unit
    uint8_t  lanes;    // slices in the unit, 1 .. 32
};

struct StripLayout {
    int K = 0, Np = 0, n_strips = 0;
    std::vector<int>       strip_quad0;   // [n_strips + 1]: strip s owns quads strip_quad0[s] .. [s + 1) - 1
    std::vector<int>       strip_unit0;   // [n_strips + 1]: its units
    std::vector<int>       width_unit0;   // [n_strips][GGX_EXL2_N_WIDTHS + 1]: strip s's units of width
                                          // ggx_exl2_widths[r] are width_unit0[s][r] .. [s][r + 1] - 1
    std::vector<StripUnit> units;
    std::vector<uint32_t>  words;         // 4 words (one uint4) per quad, word row and slice (empty
                                          // when built without them)
    std::vector<int32_t>   slice_group;   // [K / 32] group of each slice
    std::vector<int32_t>   slice_qrow;    // [K / 32] first packed row of each slice in q_weight:
                                          // word row i of unit lane l is q_weight row
                                          // slice_qrow[slice0 + l] + i, columns 4 quad .. + 3
    std::vector<uint8_t>   group_bits;    // [G] width of each group
    std::vector<uint16_t>  scales;        // fp16 [G][Np]: h(h((c + 1)^2) * M'_g)
};

// Whether the matrix can take the strip layout; if not, *why (when given) names the reason. It
// needs K a multiple of 32 and groups that are whole 32-row slices (2-bit groups of 16 rows are
// valid EXL2 but split a slice between two scales; the converter never writes them).
bool strip_layout_supported(const ggx_qmatrix & q, std::string * why = nullptr);

// Builds the layout from an EXL2 matrix in host memory (q_scale, q_scale_max and groups_host on
// the host; q_weight too when copy_words), with the quads dealt to n_strips strips as evenly as
// possible (the first Np / 4 % n_strips strips take one more). False, with *why, when the matrix
// is not supported or n_strips is not in 1 .. Np / 4. The words are copied only when copy_words:
// on the host that runs at ~320 MB/s (91 ms for a 4096 x 14336 4-bit matrix), ~12 s for an 8B
// model, far over the 3 s load budget, so a backend builds the units here and gathers the words
// on its device from slice_qrow (a copy at memory speed). Without the words the build still takes
// ~5 ms for that matrix, mostly the fp16 scale expansion (~1 s for an 8B model).
bool strip_layout_build(const ggx_qmatrix & q, int n_strips, bool copy_words, StripLayout * out, std::string * why = nullptr);

// The units of each strip dealt to n_warps warps in contiguous runs (a warp's quad sums then stay
// in registers until its quad changes) of near-equal bytes, so that the warps of a block finish a
// stage together whatever the width mix (the stage-end barrier was 31% of the step probe's
// stalls, run 68). Returns [n_strips][n_warps + 1]: warp w of strip s takes units r[s][w] ..
// r[s][w + 1] - 1 (absolute indices into units); every warp's bytes exceed the strip's mean
// by at most one unit's. Empty when n_warps < 1.
std::vector<int> strip_layout_deal(const StripLayout & L, int n_warps);

}  // namespace ggx
