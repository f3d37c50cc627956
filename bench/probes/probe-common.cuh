// Pieces shared by the probes that multiply 4-bit slices (mega-probe.cu, loop-micro.cu; ffn-fused.cu
// takes CK and k_fill). A 32-row slice of one quad (4 adjacent columns) is 4 word rows of one
// uint4 each: word c of row i holds rows 8i..8i+7 of column c, one nibble each, zero point 8.
#pragma once

#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cmath>
#include <cuda_fp16.h>
#include "exl2-unpack.cuh"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1); } } while (0)

// Hash-random words: weights whose codes are uniform over 0..15.
__global__ void k_fill(uint32_t * p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed;
        x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
        p[i] = x;
    }
}

// A column's sum from exl2-unpack.cuh's fp16 pair accumulators (acc16 holds 16 times its pairs).
__device__ __forceinline__ float pair_total(half2 acc, half2 acc16) {
    return __low2float(acc) + __high2float(acc) + (__low2float(acc16) + __high2float(acc16)) * 0.0625f;
}

// The slice's 4 column sums of (code - 8) * x, x as 32 fp16 values (4 chunks of 8), in fp16 pairs.
__device__ __forceinline__ float4 slice_dot_h2(const uint4 (&w)[4], const uint4 (&xv)[4]) {
    using namespace ggx_exl2_unpack;
    half2 acc[1][4], acc16[1][4];
#pragma unroll
    for (int c = 0; c < 4; c++) acc[0][c] = acc16[0][c] = __float2half2_rn(0.0f);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t wc[4][1] = {{w[i].x}, {w[i].y}, {w[i].z}, {w[i].w}};
        const uint32_t xu[1][4] = {{xv[i].x, xv[i].y, xv[i].z, xv[i].w}};
        chunk_dot_h2<4, 1, 0>::run(wc, xu, acc, acc16);
    }
    return make_float4(pair_total(acc[0][0], acc16[0][0]), pair_total(acc[0][1], acc16[0][1]),
                       pair_total(acc[0][2], acc16[0][2]), pair_total(acc[0][3], acc16[0][3]));
}
__device__ __forceinline__ float4 slice_dot_h2(const uint4 (&w)[4], const half * xs) {
    const uint4 xv[4] = {((const uint4 *)xs)[0], ((const uint4 *)xs)[1], ((const uint4 *)xs)[2], ((const uint4 *)xs)[3]};
    return slice_dot_h2(w, xv);
}

// x of one slice as int8 for DP4A: for the word row c, xq[2c] holds rows 8c + {0, 2, 4, 6} and
// xq[2c + 1] rows 8c + {1, 3, 5, 7}, as a word's nibbles split into even and odd. Returns
// (scale, sum of the int8 values).
__host__ __device__ inline float2 quantize_slice32(const float (&v)[32], uint32_t (&xq)[8]) {
    float mx = 0.0f;
    for (int i = 0; i < 32; i++) mx = fmaxf(mx, fabsf(v[i]));
    const float inv = mx > 0.0f ? 127.0f / mx : 0.0f;
    int sum = 0;
    for (int c = 0; c < 4; c++) {
        uint32_t e = 0, o = 0;
        for (int j = 0; j < 4; j++) {
            const int qe = (int)rintf(v[c * 8 + 2 * j] * inv), qo = (int)rintf(v[c * 8 + 2 * j + 1] * inv);
            sum += qe + qo;
            e |= (uint32_t)(qe & 0xff) << (8 * j);
            o |= (uint32_t)(qo & 0xff) << (8 * j);
        }
        xq[2 * c] = e;
        xq[2 * c + 1] = o;
    }
    return make_float2(mx / 127.0f, (float)sum);
}

// The slice's 4 column sums with x in its int8 form (xq: 8 words, 16-byte aligned; xsc: its
// scale and sum): DP4A on the codes, the zero point taken off as 8 times the sum.
__device__ __forceinline__ float4 slice_dot_dp4a(const uint4 (&w)[4], const uint32_t * xq, float2 xsc) {
    int d[4] = {0, 0, 0, 0};
    const uint4 x01 = ((const uint4 *)xq)[0], x23 = ((const uint4 *)xq)[1];
    const uint32_t xv[8] = {x01.x, x01.y, x01.z, x01.w, x23.x, x23.y, x23.z, x23.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t wc[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
#pragma unroll
        for (int c = 0; c < 4; c++) {
            d[c] = __dp4a((int)(wc[c] & 0x0f0f0f0fu), (int)xv[2 * i], d[c]);
            d[c] = __dp4a((int)((wc[c] >> 4) & 0x0f0f0f0fu), (int)xv[2 * i + 1], d[c]);
        }
    }
    return make_float4((d[0] - 8.0f * xsc.y) * xsc.x, (d[1] - 8.0f * xsc.y) * xsc.x, (d[2] - 8.0f * xsc.y) * xsc.x,
                       (d[3] - 8.0f * xsc.y) * xsc.x);
}
