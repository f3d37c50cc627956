#include "ggx-exl2-host.h"

namespace ggx {

int exl2_width_rank(int bits) {
    for (int i = 0; i < GGX_EXL2_N_WIDTHS; i++)
        if (ggx_exl2_widths[i] == bits) return i;
    return -1;
}

bool exl2_groups(const ggx_qmatrix & q, int row_multiple, std::vector<Exl2Group> * out, std::string * why) {
    auto no = [&](const std::string & s) {
        if (why) *why = s;
        return false;
    };
    if (!q.groups_host) return no("no host copy of q_groups");
    if (q.K <= 0 || q.Np <= 0 || q.Np % 32 || q.n_groups <= 0) return no("bad dimensions");
    if (q.K % row_multiple) return no("K = " + std::to_string(q.K) + " is not a multiple of " + std::to_string(row_multiple));
    int rows = 0, prev_bits = 8;
    for (int g = 0; g < q.n_groups; g++) {
        const int b = q.groups_host[2 * g], r0 = q.groups_host[2 * g + 1];
        const int r1 = g + 1 < q.n_groups ? q.groups_host[2 * g + 3] : q.qrows;
        if (exl2_width_rank(b) < 0 || b > prev_bits || r1 <= r0 || (r1 - r0) * 32 % b)
            return no("group " + std::to_string(g) + " (bits " + std::to_string(b) + ", packed rows " + std::to_string(r0) +
                      ".." + std::to_string(r1) + ") is malformed");
        const int n = (r1 - r0) * 32 / b;
        if (n % row_multiple || rows % row_multiple)
            return no("group " + std::to_string(g) + " has " + std::to_string(n) + " rows, not whole " + std::to_string(row_multiple) +
                      "-row blocks");
        if (out) out->push_back({b, r0, rows, n});
        rows += n;
        prev_bits = b;
    }
    if (rows != q.K) return no("groups cover " + std::to_string(rows) + " of " + std::to_string(q.K) + " rows");
    return true;
}

uint32_t exl2_code(const ggx_qmatrix & q, const Exl2Group & g, int j, int n) {
    return ggx_exl2_code(q.q_weight, q.Np, g.bits, g.qrow0, j, n);
}

std::vector<uint16_t> exl2_scales_f16(const ggx_qmatrix & q) {
    std::vector<uint16_t> r((size_t)q.n_groups * q.Np);
    for (int g = 0; g < q.n_groups; g++)
        for (int n = 0; n < q.Np; n++) {
            const uint32_t c = (q.q_scale[(size_t)g * (q.Np / 8) + n / 8] >> (4 * (n % 8))) & 15;
            r[(size_t)g * q.Np + n] = ggx_f32_to_f16((float)((c + 1) * (c + 1)) * ggx_f16_to_f32(q.q_scale_max[g]));
        }
    return r;
}

}  // namespace ggx
