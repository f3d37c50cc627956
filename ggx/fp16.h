// Scalar conversions between float and IEEE binary16 / bfloat16, round-to-nearest-even, keeping
// subnormals (EXL2 scales are often fp16 subnormals, so flush-to-zero would break bit-exactness).
// Usable from C++ host code and CUDA device code alike.
#pragma once

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define GGX_HD __host__ __device__ inline
#else
#define GGX_HD static inline
#endif

GGX_HD uint32_t ggx_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
GGX_HD float    ggx_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

GGX_HD float ggx_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp  = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) return ggx_bits_f32(sign | 0x7f800000u | (mant << 13));       // inf / nan
    if (exp == 0) {
        if (mant == 0) return ggx_bits_f32(sign);
        // subnormal: value = mant * 2^-24
        float v = (float)mant * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return ggx_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

GGX_HD uint16_t ggx_f32_to_f16(float f) {
    uint32_t x = ggx_f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (x > 0x7f800000u ? 0x200 : 0)); // inf/nan
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);        // rounds to >= 65520: inf
    if (x < 0x38800000u) {                                          // below 2^-14: subnormal or 0
        if (x < 0x33000000u) return sign;                           // < 2^-25: rounds to 0
        const uint32_t e = x >> 23;
        const uint32_t m = (x & 0x7fffff) | 0x800000;
        const uint32_t shift = 126 - e;                             // 14..24 for e in 102..112
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    // normal: rebias exponent, round mantissa from 23 to 10 bits
    uint32_t r = x + 0xfff + ((x >> 13) & 1) - (112u << 23);
    return (uint16_t)(sign | (r >> 13));
}

// h(x): round a float to the nearest fp16 value, returned as float.
GGX_HD float ggx_round_f16(float f) { return ggx_f16_to_f32(ggx_f32_to_f16(f)); }

GGX_HD float ggx_bf16_to_f32(uint16_t h) { return ggx_bits_f32((uint32_t)h << 16); }

GGX_HD uint16_t ggx_f32_to_bf16(float f) {
    uint32_t x = ggx_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  // quiet nan
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}
