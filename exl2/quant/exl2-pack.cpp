#include "exl2-pack.h"

#include "exl2/error.h"

#include <cstring>
#include <numeric>

namespace exl2 {

bool exl2_bits_valid(int bits) {
    return bits == 8 || bits == 6 || bits == 5 || bits == 4 || bits == 3 || bits == 2;
}

int exl2_rows_per_chunk(int bits) {
    if (!exl2_bits_valid(bits)) fail("EXL2 packing: bit width %d is not one of 8, 6, 5, 4, 3, 2", bits);
    return 32 / std::gcd(bits, 32);
}

static void check_group(const char * what, int R, int N, int bits) {
    if (!exl2_bits_valid(bits)) fail("%s: bit width %d is not one of 8, 6, 5, 4, 3, 2", what, bits);
    if (R < 0 || N < 0) fail("%s: negative size (%d rows, %d columns)", what, R, N);
    if ((int64_t)R * bits % 32 != 0)
        fail("%s: %d rows of %d bits do not fill whole 32-bit words (need a multiple of %d rows)", what, R, bits,
             exl2_rows_per_chunk(bits));
}

void exl2_pack_group(const uint8_t * codes, int R, int N, int bits, uint32_t * out) {
    check_group("exl2_pack_group", R, N, bits);
    const uint32_t limit = 1u << bits;
    memset(out, 0, sizeof(uint32_t) * (size_t)R * bits / 32 * (size_t)N);
    for (int j = 0; j < R; j++) {
        const int bit = j * bits, w = bit >> 5, s = bit & 31;
        const uint8_t * src = codes + (size_t)j * N;
        uint32_t * lo = out + (size_t)w * N;
        for (int n = 0; n < N; n++) {
            const uint32_t v = src[n];
            if (v >= limit) fail("exl2_pack_group: code %u at row %d, column %d does not fit in %d bits", v, j, n, bits);
            lo[n] |= v << s;
        }
        if (s + bits > 32) {   // straddles: high part goes to the start of the next word
            uint32_t * hi = lo + N;
            for (int n = 0; n < N; n++) hi[n] |= (uint32_t)src[n] >> (32 - s);
        }
    }
}

void exl2_unpack_group(const uint32_t * in, int R, int N, int bits, uint8_t * codes) {
    check_group("exl2_unpack_group", R, N, bits);
    for (int j = 0; j < R; j++)
        for (int n = 0; n < N; n++) codes[(size_t)j * N + n] = (uint8_t)exl2_extract(in, N, n, j, bits);
}

void gptq_pack_rows(const uint8_t * codes, int K, int N, uint32_t * out) {
    if (K % 8) fail("gptq_pack_rows: %d rows is not a multiple of 8", K);
    exl2_pack_group(codes, K, N, 4, out);
}

void gptq_unpack_rows(const uint32_t * in, int K, int N, uint8_t * codes) {
    if (K % 8) fail("gptq_unpack_rows: %d rows is not a multiple of 8", K);
    exl2_unpack_group(in, K, N, 4, codes);
}

void nibbles_pack(const uint8_t * codes, int R, int N, uint32_t * out) {
    if (R < 0 || N < 0) fail("nibbles_pack: negative size (%d rows, %d columns)", R, N);
    const int W = (N + 7) / 8;
    memset(out, 0, sizeof(uint32_t) * (size_t)R * W);
    for (int r = 0; r < R; r++)
        for (int n = 0; n < N; n++) {
            const uint32_t v = codes[(size_t)r * N + n];
            if (v > 15) fail("nibbles_pack: code %u at row %d, column %d does not fit in 4 bits", v, r, n);
            out[(size_t)r * W + n / 8] |= v << (4 * (n % 8));
        }
}

void nibbles_unpack(const uint32_t * in, int R, int N, uint8_t * codes) {
    if (R < 0 || N < 0) fail("nibbles_unpack: negative size (%d rows, %d columns)", R, N);
    const int W = (N + 7) / 8;
    for (int r = 0; r < R; r++)
        for (int n = 0; n < N; n++) codes[(size_t)r * N + n] = (uint8_t)((in[(size_t)r * W + n / 8] >> (4 * (n % 8))) & 15);
}

}  // namespace exl2
