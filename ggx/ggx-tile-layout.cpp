#include "ggx-tile-layout.h"

#include "ggx-deal.h"
#include "ggx-exl2-host.h"

#include <algorithm>

namespace ggx {

bool tile_layout_supported(const ggx_qmatrix & q, std::string * why) {
    return exl2_groups(q, 16, nullptr, why);
}

bool tile_layout_build(const ggx_qmatrix & q, TileLayout * out, std::string * why, bool copy_words, int pair_hd, int pair_half) {
    std::vector<Exl2Group> groups;
    if (!exl2_groups(q, 16, &groups, why)) return false;
    if (pair_hd > 0 && !tile_pair_order_ok(q.N, q.Np, pair_hd, pair_half)) {
        if (why)
            *why = "RoPE pair order needs heads of a multiple of 16 columns, half a multiple of 8 and N a multiple of the head "
                   "(head " + std::to_string(pair_hd) + ", half " + std::to_string(pair_half) + ", N " + std::to_string(q.N) + ")";
        return false;
    }
    TileLayout & L = *out;
    L = TileLayout();
    L.K = q.K;
    L.Np = q.Np;
    L.pair_hd = pair_hd > 0 ? pair_hd : 0;
    L.pair_half = pair_hd > 0 ? pair_half : 0;
    L.n_tiles = q.Np / 16;
    L.groups = groups;
    L.step_group.resize(q.K / 16);
    for (int g = 0; g < (int)groups.size(); g++) {
        L.group_bits.push_back((uint8_t)groups[g].bits);
        for (int s = 0; s < groups[g].n_rows / 16; s++) L.step_group[groups[g].row0 / 16 + s] = g;
    }
    // chunks, and units packing consecutive chunks of one width into at most ggx_tile_max_steps
    struct UnitSpan { int bits, step0, n_steps, chunk0; uint32_t starts; };
    std::vector<UnitSpan> spans;
    for (int g = 0; g < (int)groups.size(); g++)
        for (int s = groups[g].row0 / 16, cmax = ggx_tile_chunk_steps(groups[g].bits); s < (groups[g].row0 + groups[g].n_rows) / 16; s += cmax) {
            const int n = std::min(cmax, (groups[g].row0 + groups[g].n_rows) / 16 - s);
            const int c = (int)L.chunks.size();
            L.chunks.push_back({s, n, g});
            if (!spans.empty() && spans.back().bits == groups[g].bits && spans.back().n_steps + n <= ggx_tile_max_steps(groups[g].bits)) {
                spans.back().starts |= 1u << spans.back().n_steps;
                spans.back().n_steps += n;
            } else {
                spans.push_back({groups[g].bits, s, n, c, 1});
            }
        }

    uint32_t off = 0;   // uint4 index
    for (int tile = 0; tile < L.n_tiles; tile++) {
        L.tile_unit0.push_back((int)L.units.size());
        for (const UnitSpan & sp : spans) {
            const int bits = sp.bits, s0 = sp.step0, n_steps = sp.n_steps;
            const int n_uint4 = (ggx_tile_unit_words(bits, n_steps) + 3) / 4;
            L.units.push_back({off, (uint32_t)tile, (uint32_t)s0, (uint32_t)sp.chunk0, sp.starts, (uint8_t)n_steps, (uint8_t)bits,
                               (uint8_t)n_uint4});
            if (copy_words) L.words.resize(((size_t)off + n_uint4) * 32 * 4, 0u);
            for (int lane = 0; lane < 32 && copy_words; lane++) {
                auto code_of = [&](int i, int r, int e) {
                    const Exl2Group & grp = groups[L.step_group[s0 + i]];
                    const int k = 16 * (s0 + i) + ggx_tile_row(lane, r, e), n = tile_src_col(L, 16 * tile + ggx_tile_col(lane, r));
                    return exl2_code(q, grp, k - grp.row0, n);
                };
                for (int j = 0; j < n_uint4 * 4; j++)
                    L.words[(((size_t)off + j / 4) * 32 + lane) * 4 + j % 4] = ggx_tile_word(bits, n_steps, j, code_of);
            }
            off += n_uint4;
        }
    }
    L.tile_unit0.push_back((int)L.units.size());
    const std::vector<uint16_t> rows = exl2_scales_f16(q);   // [G][Np] in column order
    L.scales.resize(rows.size());
    for (size_t g = 0; g < rows.size() / q.Np; g++)
        for (int n = 0; n < q.Np; n++) L.scales[tile_scale_index(q.Np, (int)g, n)] = rows[g * q.Np + tile_src_col(L, n)];
    return true;
}

int tile_layout_variants(const TileLayout & L) {
    int mask = 0;
    for (uint8_t b : L.group_bits)
        for (int p = 0; p < ggx_tile_n_planes(b); p++) mask |= 1 << ggx_tile_variant(ggx_tile_plane_bits(b, p));
    return mask;
}

std::vector<int> tile_layout_deal(const TileLayout & L, int n_warps) {
    if (n_warps < 1) return {};
    std::vector<int> r((size_t)n_warps + 1);
    deal_by_weight(0, (int)L.units.size(), n_warps, [&](int u) { return (uint64_t)L.units[u].n_uint4; }, r.data());
    return r;
}

}  // namespace ggx
