// Bit packing of EXL2 and GPTQ quantized weights (docs/exl2-format.md sections 3, 4.1 and 5).
//
// EXL2 q_weight: each column is packed on its own. A group of R rows at width b occupies R*b/32
// consecutive packed rows; for one column those words form a little-endian bit string in which
// value j sits at bits j*b .. j*b+b-1 (a value may straddle two words: low part in the earlier
// word). Groups start on a fresh word, so R*b must be a multiple of 32:
//
//   bits  8: 4 values/word       6: 16 values in 3 words   5: 32 values in 5 words
//   bits  4: 8 values/word       3: 32 values in 3 words   2: 16 values/word
//
//   4-bit, one column, v = [3 15 0 8 1 2 9 7]  ->  word 0x792180F3 (nibble j = v_j)
//
// GPTQ qweight is the 4-bit case of the same rule (rows of the whole matrix, 8 per word).
// Nibble packing (EXL2 q_scale, GPTQ qzeros) packs along columns instead: column n of a row sits
// at bits 4*(n%8) of word n/8.
//
// Shared by the loader, the reference dequantizer, the synthetic-model generator and the
// converter. Every function throws exl2::Error on arguments that cannot form a valid layout.
#pragma once

#include <cstdint>

namespace exl2 {

// True for the widths EXL2 can store: 8, 6, 5, 4, 3, 2.
bool exl2_bits_valid(int bits);
// Smallest row count of a width-`bits` group that fills whole words (4, 16, 32, 8, 32, 16).
int  exl2_rows_per_chunk(int bits);

// codes [R][N] (each < 2^bits)  ->  out [R*bits/32][N]. N is the row stride of both arrays.
// Throws when bits is not an EXL2 width, R*bits is not a multiple of 32, or a code is too wide.
void exl2_pack_group(const uint8_t * codes, int R, int N, int bits, uint32_t * out);
// Inverse of exl2_pack_group: in [R*bits/32][N] -> codes [R][N].
void exl2_unpack_group(const uint32_t * in, int R, int N, int bits, uint8_t * codes);

// One value of a packed group: value j of column n (the generic extractor of section 3.2).
// `group` points at the group's first packed row; `ld` is the row stride in words.
static inline uint32_t exl2_extract(const uint32_t * group, int64_t ld, int64_t n, int j, int bits) {
    const int bit = j * bits, w = bit >> 5, s = bit & 31;
    uint32_t v = group[(int64_t)w * ld + n] >> s;
    if (s + bits > 32) v |= group[(int64_t)(w + 1) * ld + n] << (32 - s);
    return v & ((1u << bits) - 1);
}

// GPTQ 4-bit rows: codes [K][N] (each < 16) -> out [K/8][N]; K must be a multiple of 8.
void gptq_pack_rows(const uint8_t * codes, int K, int N, uint32_t * out);
void gptq_unpack_rows(const uint32_t * in, int K, int N, uint8_t * codes);

// Nibbles along columns: codes [R][N] (each < 16) -> out [R][(N+7)/8]; unused high nibbles of
// the last word are 0.
void nibbles_pack(const uint8_t * codes, int R, int N, uint32_t * out);
void nibbles_unpack(const uint32_t * in, int R, int N, uint8_t * codes);

}  // namespace exl2
