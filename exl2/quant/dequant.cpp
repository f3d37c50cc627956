#include "dequant.h"

#include "exl2-pack.h"
#include "exl2/error.h"

#include <vector>

namespace exl2 {

void exl2_dequant_ref(const Exl2Raw & t, float prescale, uint16_t * out) {
    if (t.K <= 0 || t.N <= 0 || t.Np < t.N || t.Np % 32 || t.G <= 0)
        fail("exl2_dequant_ref: bad dimensions K=%d N=%d Np=%d G=%d", t.K, t.N, t.Np, t.G);
    std::vector<int> perm(t.K, -1);
    for (int i = 0; i < t.K; i++) {
        const int q = t.q_invperm[i];
        if (q < 0 || q >= t.K || perm[q] >= 0) fail("exl2_dequant_ref: q_invperm is not a permutation (entry %d = %d)", i, q);
        perm[q] = i;
    }
    const int sw = t.Np / 8;
    int k = 0;
    for (int g = 0; g < t.G; g++) {
        const int b = t.q_groups[2 * g], r0 = t.q_groups[2 * g + 1];
        const int r1 = g + 1 < t.G ? t.q_groups[2 * g + 3] : t.QR;
        if (!exl2_bits_valid(b) || r1 <= r0 || r1 > t.QR || (r1 - r0) * 32 % b)
            fail("exl2_dequant_ref: group %d (bits %d, packed rows %d..%d of %d) is malformed", g, b, r0, r1, t.QR);
        const int rows = (r1 - r0) * 32 / b;
        if (k + rows > t.K) fail("exl2_dequant_ref: groups hold more than K=%d rows", t.K);
        const uint16_t m = exl2_prescale_max(t.q_scale_max[g], prescale);
        uint16_t scale[16];   // the group's scale for each of the 16 codes
        for (uint32_t c = 0; c < 16; c++) scale[c] = exl2_dq_scale(c, m);
        const uint32_t * qs = t.q_scale + (size_t)g * sw;
        const uint32_t * grp = t.q_weight + (size_t)r0 * t.Np;
        for (int j = 0; j < rows; j++, k++) {
            uint16_t * dst = out + (size_t)perm[k] * t.N;
            for (int n = 0; n < t.N; n++) {
                const uint32_t c = (qs[n / 8] >> (4 * (n % 8))) & 15;
                dst[n] = exl2_dq_weight(exl2_extract(grp, t.Np, n, j, b), b, scale[c]);
            }
        }
    }
    if (k != t.K) fail("exl2_dequant_ref: groups hold %d rows, K=%d", k, t.K);
}

int gptq_group_size(int K, int G) {
    int gs = 1;
    while ((int64_t)gs * G < K) gs *= 2;
    return gs;
}

void gptq_dequant_ref(const GptqRaw & t, bool v2, float prescale, uint16_t * out) {
    if (t.K <= 0 || t.K % 8 || t.N <= 0 || t.N % 8 || t.G <= 0)
        fail("gptq_dequant_ref: bad dimensions K=%d N=%d G=%d", t.K, t.N, t.G);
    const int gs = gptq_group_size(t.K, t.G);
    bool trivial = t.g_idx == nullptr;
    if (!trivial) {
        trivial = true;
        for (int k = 0; k < t.K; k++) trivial = trivial && t.g_idx[k] == 0;
    }
    const int zw = t.N / 8;
    for (int k = 0; k < t.K; k++) {
        const int g = trivial ? k / gs : t.g_idx[k];
        if (g < 0 || g >= t.G) fail("gptq_dequant_ref: row %d is in group %d of %d", k, g, t.G);
        for (int n = 0; n < t.N; n++) {
            const uint32_t q = (t.qweight[(size_t)(k / 8) * t.N + n] >> (4 * (k % 8))) & 15;
            uint32_t zword = t.qzeros[(size_t)g * zw + n / 8];
            if (v2) zword -= 0x11111111u;   // whole-word subtraction: a 0 nibble borrows (section 11.12)
            const uint32_t z = (zword >> (4 * (n % 8))) & 15;
            const float sc = ggx_round_f16(ggx_f16_to_f32(t.scales[(size_t)g * t.N + n]) * prescale);
            out[(size_t)k * t.N + n] = ggx_f32_to_f16((float)((int)q - (int)(z + 1)) * sc);
        }
    }
}

void qmatrix_dequant(const ggx_qmatrix & q, enum ggx_type type, uint16_t * out) {
    if (type == GGX_TYPE_EXL2) {
        const uint16_t * groups = q.groups_host ? q.groups_host : q.q_groups;
        const int sw = q.Np / 8;
        int k = 0;
        for (int g = 0; g < q.n_groups; g++) {
            const int b = groups[2 * g], r0 = groups[2 * g + 1];
            const int r1 = g + 1 < q.n_groups ? groups[2 * g + 3] : q.qrows;
            const int rows = (r1 - r0) * 32 / b;
            uint16_t scale[16];
            for (uint32_t c = 0; c < 16; c++) scale[c] = exl2_dq_scale(c, q.q_scale_max[g]);
            const uint32_t * grp = q.q_weight + (size_t)r0 * q.Np;
            for (int j = 0; j < rows; j++, k++) {
                uint16_t * dst = out + (size_t)(q.q_perm ? q.q_perm[k] : k) * q.N;
                for (int n = 0; n < q.N; n++) {
                    const uint32_t c = (q.q_scale[(size_t)g * sw + n / 8] >> (4 * (n % 8))) & 15;
                    dst[n] = exl2_dq_weight(exl2_extract(grp, q.Np, n, j, b), b, scale[c]);
                }
            }
        }
        return;
    }
    if (type != GGX_TYPE_GPTQ) fail("qmatrix_dequant: tensor type %d is not a quantized matrix", (int)type);
    const int zw = q.N / 8;
    for (int s = 0; s < q.K; s++) {
        const int g = s / q.group_size;
        uint16_t * dst = out + (size_t)(q.q_perm ? q.q_perm[s] : s) * q.N;
        for (int n = 0; n < q.N; n++) {
            const uint32_t v = (q.q_weight[(size_t)(s / 8) * q.N + n] >> (4 * (s % 8))) & 15;
            const uint32_t z = (q.qzeros[(size_t)g * zw + n / 8] >> (4 * (n % 8))) & 15;
            dst[n] = ggx_f32_to_f16((float)((int)v - (int)(z + 1)) * ggx_f16_to_f32(q.scales[(size_t)g * q.N + n]));
        }
    }
}

}  // namespace exl2
