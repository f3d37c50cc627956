// The warp-level tensor-core product the kernels share (inline PTX: CUDA only, sm_80+).
#pragma once

#include "common.cuh"

#if !defined(GGX_USE_HIP)
// c += a b, a 16x16 row-major, b 16x8 column-major, c 16x8 (f32), fp16 inputs. Lane l = 4 g + t
// holds a: (row g, k 2t, 2t + 1), (row g + 8, same k), (row g, k 2t + 8, 2t + 9), (row g + 8,
// same k); b: (k 2t, 2t + 1; column g), (k 2t + 8, 2t + 9; column g); c: (row g, columns 2t,
// 2t + 1), (row g + 8, same columns).
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

// (w & mask) | 0x64006400: two fp16 1024 + f v from the fields the mask selects (the tensor-core
// loops' A registers). On the device one LOP3 with the constant in a register (the asm operand);
// as a plain expression it compiled to two, an AND and an OR with an immediate each (run 94's
// profile). The host form is for emulations of those loops.
__host__ __device__ __forceinline__ uint32_t lop3_or_bias(uint32_t w, uint32_t mask) {
#if defined(__CUDA_ARCH__) && !defined(GGX_USE_HIP)
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(w), "r"(mask), "r"(0x64006400u));
    return d;
#else
    return (w & mask) | 0x64006400u;
#endif
}
