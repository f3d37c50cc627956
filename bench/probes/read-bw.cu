// Session 11: read bandwidth of the access patterns a decode megakernel could use, over 3.5 GB
// (a step's weights): grid-stride (the classic test), one contiguous region per block, and 16 KB
// chunks dealt round-robin to the blocks. Plain 16-byte loads, 4 in flight per thread per round.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__global__ void k_grid(const uint4 * p, size_t n, uint32_t * out) {
    uint32_t acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n; i += stride) acc ^= __ldcs(p + i).x;
    if (acc == 0x12345678u) out[0] = acc;
}
// block b reads region b of n / gridDim.x elements, the block's threads side by side
__global__ void k_region(const uint4 * p, size_t n, uint32_t * out) {
    const size_t per = n / gridDim.x, base = blockIdx.x * per;
    uint32_t acc = 0;
    const int s = blockDim.x;
    size_t i = threadIdx.x;
    for (; i + 3 * s < per; i += 4 * s) {
        uint4 a = __ldcs(p + base + i), b = __ldcs(p + base + i + s), c = __ldcs(p + base + i + 2 * s), d = __ldcs(p + base + i + 3 * s);
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < per; i += s) acc ^= __ldcs(p + base + i).x;
    if (acc == 0x12345678u) out[0] = acc;
}
// 16 KB chunks (1024 uint4) dealt round-robin: block b reads chunks b, b + G, b + 2G, ...
__global__ void k_chunks(const uint4 * p, size_t n, uint32_t * out) {
    uint32_t acc = 0;
    for (size_t c = blockIdx.x; (c + 1) * 1024 <= n; c += gridDim.x) {
        const uint4 * q = p + c * 1024;
        for (int i = threadIdx.x; i < 1024; i += 4 * blockDim.x) {
            uint4 a = __ldcs(q + i), b = i + blockDim.x < 1024 ? __ldcs(q + i + blockDim.x) : a;
            uint4 cc = i + 2 * blockDim.x < 1024 ? __ldcs(q + i + 2 * blockDim.x) : a, d = i + 3 * blockDim.x < 1024 ? __ldcs(q + i + 3 * blockDim.x) : a;
            acc ^= a.x ^ b.y ^ cc.z ^ d.w;
        }
    }
    if (acc == 0x12345678u) out[0] = acc;
}

int main() {
    const size_t bytes = 3490000000ull, n = bytes / 16;
    uint4 * p;
    uint32_t * out;
    CK(cudaMalloc(&p, bytes));
    CK(cudaMalloc(&out, 4));
    CK(cudaMemset(p, 1, bytes));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    auto time = [&](const char * name, void (*k)(const uint4 *, size_t, uint32_t *), int grid, int block) {
        float best = 1e30f;
        for (int r = 0; r < 6; r++) {
            cudaEventRecord(e0);
            k<<<grid, block>>>(p, n, out);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            if (r && ms < best) best = ms;
        }
        printf("%-44s grid %5d x %4d: %7.3f ms  %5.2f TB/s  (%.1f us per 109.1 MB layer)\n", name, grid, block, best,
               bytes / best / 1e9, best * 1000 * 109.1e6 / bytes);
        return 0;
    };
    time("grid-stride", k_grid, 132 * 4, 512);
    time("grid-stride", k_grid, 132 * 2, 1024);
    time("grid-stride, 1 block x 256 per SM", k_grid, 132, 256);
    time("grid-stride, 1 block x 512 per SM", k_grid, 132, 512);
    time("contiguous region per block", k_region, 128, 512);
    time("contiguous region per block", k_region, 132, 1024);
    time("contiguous region per block", k_region, 264, 1024);
    time("16 KB chunks round-robin", k_chunks, 128, 512);
    time("16 KB chunks round-robin", k_chunks, 132, 1024);
    time("16 KB chunks round-robin", k_chunks, 264, 1024);
    CK(cudaGetLastError());
    return 0;
}
