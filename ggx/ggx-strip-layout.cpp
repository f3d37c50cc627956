#include "ggx-strip-layout.h"

#include "ggx-deal.h"
#include "ggx-exl2-host.h"

#include <algorithm>

namespace ggx {

bool strip_layout_supported(const ggx_qmatrix & q, std::string * why) {
    return exl2_groups(q, 32, nullptr, why);
}

bool strip_layout_build(const ggx_qmatrix & q, int n_strips, bool copy_words, StripLayout * out, std::string * why) {
    std::vector<Exl2Group> groups;
    if (!exl2_groups(q, 32, &groups, why)) return false;
    const int n_quads = q.Np / 4, n_slices = q.K / 32;
    if (n_strips < 1 || n_strips > n_quads) {
        if (why) *why = std::to_string(n_strips) + " strips for " + std::to_string(n_quads) + " quads";
        return false;
    }

    StripLayout & L = *out;
    L = StripLayout();
    L.K = q.K;
    L.Np = q.Np;
    L.n_strips = n_strips;
    L.slice_group.resize(n_slices);
    for (const Exl2Group & gs : groups) L.group_bits.push_back((uint8_t)gs.bits);
    L.slice_qrow.resize(n_slices);
    for (int g = 0; g < (int)groups.size(); g++)
        for (int t = 0; t < groups[g].n_rows / 32; t++) {
            L.slice_group[groups[g].row0 / 32 + t] = g;
            L.slice_qrow[groups[g].row0 / 32 + t] = groups[g].qrow0 + t * groups[g].bits;
        }

    // Width runs: consecutive groups of one width.
    struct Run { int bits, slice0, n; };
    std::vector<Run> runs;
    for (const Exl2Group & gs : groups) {
        if (runs.empty() || runs.back().bits != gs.bits) runs.push_back({gs.bits, gs.row0 / 32, 0});
        runs.back().n += gs.n_rows / 32;
    }

    L.strip_quad0.resize(n_strips + 1);
    for (int s = 0; s <= n_strips; s++) L.strip_quad0[s] = s * (n_quads / n_strips) + std::min(s, n_quads % n_strips);
    if (copy_words) L.words.resize((size_t)q.qrows * q.Np);
    uint32_t off = 0;   // in uint4
    for (int s = 0; s < n_strips; s++) {
        L.strip_unit0.push_back((int)L.units.size());
        for (const Run & r : runs)
            for (int quad = L.strip_quad0[s]; quad < L.strip_quad0[s + 1]; quad++)
                for (int u0 = r.slice0; u0 < r.slice0 + r.n; u0 += 32) {
                    const int lanes = std::min(32, r.slice0 + r.n - u0);
                    L.units.push_back({off, (uint32_t)quad, (uint32_t)u0, (uint8_t)r.bits, (uint8_t)lanes});
                    for (int i = 0; i < r.bits && copy_words; i++)
                        for (int l = 0; l < lanes; l++) {
                            const uint32_t * src = q.q_weight + (size_t)(L.slice_qrow[u0 + l] + i) * q.Np + 4 * quad;
                            std::copy(src, src + 4, &L.words[((size_t)off + i * lanes + l) * 4]);
                        }
                    off += r.bits * lanes;
                }
    }
    L.strip_unit0.push_back((int)L.units.size());
    for (int s = 0; s < n_strips; s++) {
        int u = L.strip_unit0[s];
        for (int r = 0; r <= GGX_EXL2_N_WIDTHS; r++) {
            while (u < L.strip_unit0[s + 1] && exl2_width_rank(L.units[u].bits) < r) u++;
            L.width_unit0.push_back(u);
        }
    }
    if ((size_t)off * 4 != (size_t)q.qrows * q.Np) {   // cannot happen once the groups walked cleanly
        if (why) *why = "the units hold " + std::to_string((size_t)off * 4) + " words of " + std::to_string((size_t)q.qrows * q.Np);
        return false;
    }

    L.scales = exl2_scales_f16(q);
    return true;
}

std::vector<int> strip_layout_deal(const StripLayout & L, int n_warps) {
    if (n_warps < 1) return {};
    std::vector<int> r((size_t)L.n_strips * (n_warps + 1));
    for (int s = 0; s < L.n_strips; s++)
        deal_by_weight(L.strip_unit0[s], L.strip_unit0[s + 1], n_warps,
                       [&](int u) { return (uint64_t)L.units[u].bits * L.units[u].lanes; }, &r[(size_t)s * (n_warps + 1)]);
    return r;
}

}  // namespace ggx
