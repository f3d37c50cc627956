// Load-time column order for a gated MLP (gate, up, down), made so that a decode kernel could
// compute gate and up for a run of columns and multiply the same block's rows of down at once
// (bench/NOTES-cuda-decode.md, sessions 47-52: that kernel measured slower and was removed; the
// order stays for what follows). Down reads its input through q_perm: row k of its quantized matrix
// multiplies input q_perm[k]. Putting gate's and up's output columns in that order (column n of
// each becomes old column q_perm[n]) makes h arrive in down's quantized order, so down's perm
// can go. Exact: every column moves whole (codes, scale codes, bias), and down's rows keep their
// groups. Every backend then skips down's gather.
#pragma once

#include "exl2/quant/qlayer.h"

#include <cstdint>
#include <vector>

namespace exl2 {

// Column n of L becomes old column cols[n] (cols: a permutation of 0..N-1): q_weight / qweight,
// the 4-bit scale codes (EXL2 q_scale) or zeros (GPTQ qzeros) and scales, and the bias. Padding
// columns (N..Np-1) stay. Throws exl2::Error naming the layer when cols is not a permutation of
// its N columns.
void qlayer_permute_columns(QLayerHost & L, const std::vector<int32_t> & cols);

// Orders gate's and up's columns by down's input permutation and drops it (down.q_perm becomes
// empty: input k is h[k]). Returns false, changing nothing, when down has no permutation. Throws
// exl2::Error when the three do not form a gated MLP (gate and up K x F, down F x D).
bool glu_order(QLayerHost & gate, QLayerHost & up, QLayerHost & down);

}  // namespace exl2
