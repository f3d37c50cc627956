// Probe (session 11): the decode GEMV's inner loop alone. One 512-thread block per SM streams its
// own contiguous strip (852 KB, a llama3-8b 4-bit layer's share of one SM: [word rows][16 quads]
// of uint4) into registers, four word rows (a 32-row slice) per item, and multiplies with an fp16
// x held in shared memory; 32 such layers back to back (3.49 GB), no barriers, no staging. The
// question: which form of the loop keeps up with the 4.2 TB/s that plain loads reach (run 69)?
//   stream  loads only (xor of the words): the loop's memory ceiling
//   fp16x4  4 columns per thread, exl2-unpack.cuh's fp16 pairs (the present form)
//   fp16x8  8 columns per thread (two quads share the x pairs and the per-slice epilogue)
//   dp4a    4 columns per thread, x as int8 per 32-row slice, DP4A on the 4-bit codes
//   fp16x4r64  4 columns per thread, 64-row items (two slices under one fp32 epilogue)
// Items run two batches ahead (loads of batch b+1 issued before batch b is used), U items a batch.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -Ibackends/cuda -I. -Iinclude bench/probes/loop-micro.cu
#include <vector>
#include "probe-common.cuh"

using namespace ggx_exl2_unpack;

constexpr int NB = 128, NT = 512, Q = 16, QR = 3328, NL = 32;   // 3328 x 16 x 16 B = 852 KB per block and layer
constexpr int K = QR * 8, NSL = QR / 4;                          // 26624 rows of x, 832 slices

enum { STREAM, FP16X4, FP16X8, DP4A, FP16R64 };

template <int MODE> struct shape {
    static constexpr int rows = MODE == FP16R64 ? 8 : 4;   // word rows per item
    static constexpr int nitems = QR / rows;
    static constexpr int qd = MODE == FP16X8 ? 2 : 1;   // quads per thread
    static constexpr int qp = Q / qd;                   // quad groups
    static constexpr int P = NT / qp;                   // phases: a thread takes slices p, p + P, ...
};

template <int MODE>
__device__ __forceinline__ void load_item(const uint4 * w, int j, uint4 (&b)[4][2]) {
    if constexpr (MODE == FP16R64) {   // b[i][h]: word row 8j + 4h + i
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 4; i++) b[i][h] = __ldcs(w + (size_t)(j * 8 + h * 4 + i) * Q);
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int d = 0; d < shape<MODE>::qd; d++) b[i][d] = __ldcs(w + (size_t)(j * 4 + i) * Q + d);
    }
}

template <int MODE>
__device__ __forceinline__ void use_item(const uint4 (&b)[4][2], int j, const half * xs, const uint32_t * xq,
                                         const float2 * xsc, const half * sc, float (&tot)[8], uint32_t & sink) {
    if constexpr (MODE == STREAM) {
#pragma unroll
        for (int i = 0; i < 4; i++) sink ^= b[i][0].x ^ b[i][0].y ^ b[i][0].z ^ b[i][0].w;
    } else if constexpr (MODE == DP4A) {
        const uint4 w[4] = {b[0][0], b[1][0], b[2][0], b[3][0]};
        const float4 d = slice_dot_dp4a(w, xq + j * 8, xsc[j]);
        const float f = __half2float(sc[j / 4]);
        tot[0] += d.x * f; tot[1] += d.y * f; tot[2] += d.z * f; tot[3] += d.w * f;
    } else if constexpr (MODE == FP16R64) {
        half2 acc[1][4], acc16[1][4];
#pragma unroll
        for (int c = 0; c < 4; c++) acc[0][c] = acc16[0][c] = __float2half2_rn(0.0f);
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint4 xv = ((const uint4 *)(xs + j * 64 + h * 32))[i];
                const uint32_t xu[1][4] = {{xv.x, xv.y, xv.z, xv.w}};
                const uint32_t w[4][1] = {{b[i][h].x}, {b[i][h].y}, {b[i][h].z}, {b[i][h].w}};
                chunk_dot_h2<4, 1, 0>::run(w, xu, acc, acc16);
            }
        const float f = __half2float(sc[j / 2]);
#pragma unroll
        for (int c = 0; c < 4; c++) tot[c] += pair_total(acc[0][c], acc16[0][c]) * f;
    } else {
        constexpr int qd = shape<MODE>::qd;
        half2 acc[qd][1][4], acc16[qd][1][4];
#pragma unroll
        for (int d = 0; d < qd; d++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[d][0][c] = acc16[d][0][c] = __float2half2_rn(0.0f);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 xv = ((const uint4 *)(xs + j * 32))[i];
            const uint32_t xu[1][4] = {{xv.x, xv.y, xv.z, xv.w}};
#pragma unroll
            for (int d = 0; d < qd; d++) {
                const uint32_t w[4][1] = {{b[i][d].x}, {b[i][d].y}, {b[i][d].z}, {b[i][d].w}};
                chunk_dot_h2<4, 1, 0>::run(w, xu, acc[d], acc16[d]);
            }
        }
        const float f = __half2float(sc[j / 4]);
#pragma unroll
        for (int d = 0; d < qd; d++)
#pragma unroll
            for (int c = 0; c < 4; c++) tot[d * 4 + c] += pair_total(acc[d][0][c], acc16[d][0][c]) * f;
    }
}

// U items per batch; batches A and B alternate so that no registers are copied
template <int MODE, int U>
__global__ void __launch_bounds__(NT, 1) k_loop(const uint4 * W, const half * scales, const half * xg, const uint32_t * xqg,
                                                const float2 * xscg, float * out, int nl) {
    extern __shared__ __align__(16) unsigned char smem[];
    half * xs = (half *)smem;                                 // [K]
    uint32_t * xq = (uint32_t *)(smem + K * 2);               // [K / 4]
    float2 * xsc = (float2 *)(smem + K * 2 + K);              // [NSL]
    for (int i = threadIdx.x; i < K / 8; i += NT) ((uint4 *)xs)[i] = ((const uint4 *)xg)[i];
    for (int i = threadIdx.x; i < K / 4; i += NT) xq[i] = xqg[i];
    for (int i = threadIdx.x; i < NSL; i += NT) xsc[i] = xscg[i];
    __syncthreads();
    using S = shape<MODE>;
    const int q = threadIdx.x % S::qp, p = threadIdx.x / S::qp;
    float tot[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t sink = 0;
    const int n_items = (S::nitems - p + S::P - 1) / S::P;
    const int n_batches = (n_items + U - 1) / U;
    for (int l = 0; l < nl; l++) {
        const uint4 * w = W + ((size_t)l * NB + blockIdx.x) * QR * Q + q * S::qd;
        const half * sc = scales + (size_t)l * (NSL / 4);
        uint4 A[U][4][2], B[U][4][2];
        auto load = [&](uint4 (&buf)[U][4][2], int bt) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int k = bt * U + u;
                if (k < n_items) load_item<MODE>(w, p + k * S::P, buf[u]);
            }
        };
        auto use = [&](const uint4 (&buf)[U][4][2], int bt) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int k = bt * U + u;
                if (k < n_items) use_item<MODE>(buf[u], p + k * S::P, xs, xq, xsc, sc, tot, sink);
            }
        };
        load(A, 0);
        for (int bt = 0; bt < n_batches; bt += 2) {
            load(B, bt + 1);
            use(A, bt);
            load(A, bt + 2);
            use(B, bt + 1);
        }
    }
    tot[0] += (float)(sink & 1);
#pragma unroll
    for (int i = 0; i < 8; i++) out[((size_t)blockIdx.x * NT + threadIdx.x) * 8 + i] = tot[i];
}

int main() {
    const size_t words = (size_t)NL * NB * QR * Q * 4, bytes = words * 4;
    uint32_t * W;
    CK(cudaMalloc(&W, bytes));
    k_fill<<<2048, 256>>>(W, words, 7);
    half * sc;
    CK(cudaMalloc(&sc, NL * (NSL / 4) * 2));
    std::vector<half> sch(NL * (NSL / 4));
    for (size_t i = 0; i < sch.size(); i++) sch[i] = __float2half(0.002f * (1 + i % 5));
    CK(cudaMemcpy(sc, sch.data(), sch.size() * 2, cudaMemcpyHostToDevice));
    half * x;
    uint32_t * xq;
    float2 * xsc;
    float * out;
    CK(cudaMalloc(&x, K * 2));
    CK(cudaMalloc(&xq, K));
    CK(cudaMalloc(&xsc, NSL * 8));
    CK(cudaMalloc(&out, NB * NT * 8 * 4));
    // x in fp16, and its int8 form per 32-row slice for DP4A (quantize_slice32)
    std::vector<half> xh(K);
    std::vector<uint32_t> xqh(K / 4);
    std::vector<float2> xsch(NSL);
    for (int k = 0; k < K; k++) xh[k] = __float2half(0.9f * sinf(0.37f * k + 0.1f * (k % 7)));
    for (int sl = 0; sl < NSL; sl++) {
        float v[32];
        for (int i = 0; i < 32; i++) v[i] = __half2float(xh[sl * 32 + i]);
        uint32_t w[8];
        xsch[sl] = quantize_slice32(v, w);
        for (int i = 0; i < 8; i++) xqh[sl * 8 + i] = w[i];
    }
    CK(cudaMemcpy(x, xh.data(), K * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(xq, xqh.data(), K, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(xsc, xsch.data(), NSL * 8, cudaMemcpyHostToDevice));
    // the reference: block 0's 64 column sums over layer 0, in double precision from the fp16 x
    std::vector<uint32_t> w0((size_t)QR * Q * 4);
    CK(cudaMemcpy(w0.data(), W, w0.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<double> ref(Q * 4, 0.0);
    double refmax = 0;
    for (int col = 0; col < Q * 4; col++) {
        for (int k = 0; k < K; k++) {
            const uint32_t word = w0[((size_t)(k / 8) * Q + col / 4) * 4 + col % 4];
            const int v = (word >> (4 * (k % 8))) & 15;
            ref[col] += (double)(v - 8) * __half2float(xh[k]) * __half2float(sch[k / 128]);
        }
        refmax = fmax(refmax, fabs(ref[col]));
    }
    CK(cudaDeviceSynchronize());
    const size_t smem = K * 2 + K + NSL * 8;
    printf("%.2f GB: %d layers x %d blocks x %d KB; shared memory %zu B\n", bytes / 1e9, NL, NB, QR * Q * 16 / 1024, smem);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> o((size_t)NB * NT * 8);
    auto time = [&](const char * name, auto kernel, int mode) {
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        if (mode != STREAM) {   // one layer, block 0's column sums against the reference
            kernel<<<NB, NT, smem>>>((const uint4 *)W, sc, x, xq, xsc, out, 1);
            CK(cudaMemcpy(o.data(), out, o.size() * 4, cudaMemcpyDeviceToHost));
            const int qd = mode == FP16X8 ? 2 : 1, qp = Q / qd;
            std::vector<double> got(Q * 4, 0.0);
            for (int t = 0; t < NT; t++)
                for (int d = 0; d < qd; d++)
                    for (int c = 0; c < 4; c++) got[((t % qp) * qd + d) * 4 + c] += o[(size_t)t * 8 + d * 4 + c];
            double err = 0;
            for (int col = 0; col < Q * 4; col++) err = fmax(err, fabs(got[col] - ref[col]));
            const double tol = (mode == DP4A ? 3e-2 : 1e-2) * refmax;
            printf("check %-16s max |err| %.3g of max |y| %.3g -> %s\n", name, err, refmax, err < tol ? "ok" : "WRONG");
        }
        float best = 1e30f;
        for (int r = 0; r < 6; r++) {
            CK(cudaEventRecord(e0));
            kernel<<<NB, NT, smem>>>((const uint4 *)W, sc, x, xq, xsc, out, NL);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r && ms < best) best = ms;
        }
        const double us = best * 1000.0 / NL;
        printf("%-22s %7.3f ms  %6.2f us/layer  %5.2f TB/s\n", name, best, us, bytes / NL / us / 1e6);
    };
    time("stream U=1", k_loop<STREAM, 1>, STREAM);
    time("stream U=2", k_loop<STREAM, 2>, STREAM);
    time("fp16x4 U=1", k_loop<FP16X4, 1>, FP16X4);
    time("fp16x4 U=2", k_loop<FP16X4, 2>, FP16X4);
    time("fp16x8 U=1", k_loop<FP16X8, 1>, FP16X8);
    time("dp4a U=1", k_loop<DP4A, 1>, DP4A);
    time("dp4a U=2", k_loop<DP4A, 2>, DP4A);
    time("fp16x4r64 U=1", k_loop<FP16R64, 1>, FP16R64);
    return 0;
}
