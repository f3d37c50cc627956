// Load-time column order for a gated MLP (see glu-order.h).
#include "exl2/quant/glu-order.h"

#include "exl2/error.h"
#include "exl2/quant/exl2-pack.h"

namespace exl2 {

namespace {

// rows of `width` words: entry n < N of each row becomes old entry cols[n]
template <class T>
void permute_rows(std::vector<T> & v, size_t width, int N, const std::vector<int32_t> & cols) {
    std::vector<T> row(width);
    for (size_t r = 0; r + width <= v.size(); r += width) {
        std::copy(v.begin() + r, v.begin() + r + width, row.begin());
        for (int n = 0; n < N; n++) v[r + n] = row[cols[n]];
    }
}

// rows of `words` 32-bit words holding 8 nibbles each (nibble n % 8 of word n / 8 is column n):
// nibble n < N of each row becomes old nibble cols[n]
void permute_nibbles(std::vector<uint32_t> & v, size_t words, int N, const std::vector<int32_t> & cols) {
    const int R = (int)(v.size() / words), W = (int)words * 8;
    std::vector<uint8_t> codes((size_t)R * W);
    nibbles_unpack(v.data(), R, W, codes.data());
    permute_rows(codes, W, N, cols);
    nibbles_pack(codes.data(), R, W, v.data());
}

}  // namespace

void qlayer_permute_columns(QLayerHost & L, const std::vector<int32_t> & cols) {
    if (L.format == QFormat::NONE) throw Error(L.name + ": column order: the layer was not loaded");
    if ((int)cols.size() != L.N)
        throw Error(strfmt("%s: column order: %zu entries for %d columns", L.name.c_str(), cols.size(), L.N));
    std::vector<char> seen(L.N, 0);
    for (int32_t c : cols) {
        if (c < 0 || c >= L.N || seen[c])
            throw Error(strfmt("%s: column order: not a permutation of its %d columns (entry %d)", L.name.c_str(), L.N, (int)c));
        seen[c] = 1;
    }
    if (L.format == QFormat::EXL2) {
        permute_rows(L.q_weight, L.Np, L.N, cols);
        permute_nibbles(L.q_scale, L.Np / 8, L.N, cols);
    } else {
        permute_rows(L.q_weight, L.N, L.N, cols);
        permute_nibbles(L.qzeros, L.N / 8, L.N, cols);
        permute_rows(L.scales, L.N, L.N, cols);
    }
    if (!L.bias.empty()) permute_rows(L.bias, L.N, L.N, cols);
}

bool glu_order(QLayerHost & gate, QLayerHost & up, QLayerHost & down) {
    if (gate.K != up.K || gate.N != up.N || down.K != gate.N)
        throw Error(strfmt("%s, %s, %s: not a gated MLP (%d x %d, %d x %d, %d x %d)", gate.name.c_str(), up.name.c_str(),
                           down.name.c_str(), gate.K, gate.N, up.K, up.N, down.K, down.N));
    if (down.q_perm.empty()) return false;
    qlayer_permute_columns(gate, down.q_perm);
    qlayer_permute_columns(up, down.q_perm);
    down.q_perm.clear();
    return true;
}

}  // namespace exl2
