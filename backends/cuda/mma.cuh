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
