// Probe for session 10's proposal: can decode GEMVs stream packed weights through shared memory
// with TMA bulk copies (one producer thread, few registers per thread) at the rate the register
// double-buffered loads reach, and does the co-residency that frees (two 512-thread blocks per
// SM: the next kernel's block preloads its first stages and waits while this one streams)
// shorten a chain of PDL kernels? The kernels only stream and unpack 4-bit words into fp16 FMAs
// (no x staging, no split-K sums), so the chain time is loops + boundaries.
//
// Shapes per "layer" (llama3-8b at 4 bits; word rows = K / 8, tiles of 512 columns):
// qkv 512 x 6144 in 11 K-slices, o 512 x 4096 in 16, gate/up 512 x 28672 in 2, down 1792 x 4096
// in 16. 32 layers with their own buffers (3.5 GB), 128 kernels in one graph, PDL between them.
#include <cstdio>
#include <cstdint>
#include <vector>
#include <cuda_fp16.h>
static_assert(4 * 8 * 2048 <= 100 * 1024, "the ring fits the shared memory asked for");
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); return 1; } } while (0)

constexpr int kTile = 512;            // columns per block (128 threads x 4 per warp group)
constexpr int kRowBytes = kTile * 4;  // one word row of a tile
constexpr int kSR = 8;                // word rows per stage (16 KB)
constexpr int kDepth = 4;             // stages in the ring

struct job {
    const uint32_t * w; int R, Np, splits; float * out;
    const float * x; float * y;   // FULL: x [R * 8] from the previous kernel, y [Np] += the block's sums
};

__device__ __forceinline__ uint32_t sa(const void * p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_next() { asm volatile("griddepcontrol.launch_dependents;"); }

// one word row (8 K rows) of 4 columns: x8 holds its 8 rows of x as fp16 (4 pairs)
__device__ __forceinline__ void consume(const uint4 u, half2 & acc, const uint4 x8) {
    const uint32_t wv[4] = {u.x, u.y, u.z, u.w};
    const uint32_t xv[4] = {x8.x, x8.y, x8.z, x8.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const uint32_t h = ((wv[i] >> (4 * s)) & 0x000f000fu) | 0x64006400u;
            acc = __hfma2(*(const half2 *)&h, *(const half2 *)&xv[s], acc);
        }
    }
}

// FULL: the block's rows of x (previous kernel's output) into shared memory as fp16, after the
// PDL wait; the columns' sums of the 4 groups reduced in shared memory and added into y with
// atomics (no tile counter, no last block).
__device__ __forceinline__ void stage_x(const job & J, int r0, int r1, half * xs) {
    for (int k = threadIdx.x; k < (r1 - r0) * 8; k += blockDim.x) xs[k] = __float2half_rn(J.x[r0 * 8 + k]);
    __syncthreads();
}
__device__ __forceinline__ void finish(const job & J, int b, int tile, half2 acc, float * red) {
    const int grp = threadIdx.x / 128, lt = threadIdx.x % 128;
    const float v = __low2float(acc) + __high2float(acc);
    red[threadIdx.x] = v;
    __syncthreads();
    if (grp == 0) {
        const float t = red[lt] + red[128 + lt] + red[256 + lt] + red[384 + lt];
#pragma unroll
        for (int c = 0; c < 4; c++) atomicAdd(J.y + tile * kTile + lt * 4 + c, t * (c + 1));
    }
    (void)b;
}

// block b: tile b / splits, word rows [r0, r1) of slice b % splits
__device__ __forceinline__ void range_of(const job & J, int b, int & tile, int & r0, int & r1) {
    tile = b / J.splits;
    const int s = b % J.splits;
    const int per = ((J.R + J.splits - 1) / J.splits + kSR - 1) / kSR * kSR;
    r0 = min(J.R, s * per);
    r1 = min(J.R, r0 + per);
}

// TMA ring: thread 0 issues kSR bulk copies of 2 KB per stage; all threads wait on the stage's
// mbarrier, consume their 16 bytes of 2 of its rows (warp group g takes rows 2g, 2g + 1), then
// a block barrier frees the slot and thread 0 refills it.
template <int MINB, bool FULL>
__global__ void __launch_bounds__(512, MINB) k_tma(const job J) {
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) uint64_t full[kDepth];
    __shared__ __align__(16) half xs[2048];   // a block's x rows (at most 256 word rows: gate/up)
    __shared__ float red[512];
    int tile, r0, r1;
    range_of(J, blockIdx.x, tile, r0, r1);
    const int n_st = (r1 - r0) / kSR;
    const unsigned char * src = (const unsigned char *)(J.w) + (size_t)tile * kRowBytes;
    const size_t pitch = (size_t)J.Np * 4;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kDepth; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&full[s])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](int i) {
        const int s = i % kDepth;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sa(&full[s])), "r"(kSR * kRowBytes) : "memory");
        for (int r = 0; r < kSR; r++)
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(sa(ring + ((size_t)s * kSR + r) * kRowBytes)), "l"(src + (size_t)(r0 + i * kSR + r) * pitch),
                            "r"(kRowBytes), "r"(sa(&full[s])) : "memory");
    };
    if (threadIdx.x == 0)
        for (int i = 0; i < kDepth && i < n_st; i++) issue(i);   // static data: before the wait
    pdl_wait();
    pdl_next();
    const int grp = threadIdx.x / 128, lt = threadIdx.x % 128;
    half2 acc = __float2half2_rn(0.0f);
    if (FULL) stage_x(J, r0, r1, xs);
    for (int i = 0; i < n_st; i++) {
        const int s = i % kDepth;
        const uint32_t par = (i / kDepth) & 1;
        uint32_t ok = 0;
        while (!ok)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(ok) : "r"(sa(&full[s])), "r"(par) : "memory");
        const uint4 * st = (const uint4 *)(ring + (size_t)s * kSR * kRowBytes);
        const int ra = i * kSR + 2 * grp;   // the group's two rows, relative to r0
        const uint4 xa = FULL ? *(const uint4 *)(xs + ra * 8) : make_uint4(0x1c001c00u, 0x1c001c00u, 0x1c001c00u, 0x1c001c00u);
        const uint4 xb = FULL ? *(const uint4 *)(xs + ra * 8 + 8) : xa;
        consume(st[(2 * grp) * (kRowBytes / 16) + lt], acc, xa);
        consume(st[(2 * grp + 1) * (kRowBytes / 16) + lt], acc, xb);
        __syncthreads();
        if (threadIdx.x == 0 && i + kDepth < n_st) issue(i + kDepth);
    }
    if (FULL) finish(J, blockIdx.x, tile, acc, red);
    else J.out[(size_t)blockIdx.x * 512 + threadIdx.x] = __low2float(acc) + __high2float(acc);
}

// Registers: each thread loads its 16 bytes of 8 rows at a time (8 loads in flight), the first
// batch before the wait; one 512-thread block per SM (the project's GEMV shape).
template <bool FULL>
__global__ void __launch_bounds__(512, 1) k_reg(const job J) {
    __shared__ __align__(16) half xs[2048];
    __shared__ float red[512];
    int tile, r0, r1;
    range_of(J, blockIdx.x, tile, r0, r1);
    const int grp = threadIdx.x / 128, lt = threadIdx.x % 128;
    const uint4 * base = (const uint4 *)(J.w) + (size_t)tile * (kRowBytes / 16) + lt;
    const size_t pitch = (size_t)J.Np / 4;   // uint4 per row
    half2 acc = __float2half2_rn(0.0f);
    const uint4 xc = make_uint4(0x1c001c00u, 0x1c001c00u, 0x1c001c00u, 0x1c001c00u);
    // group g takes rows r0 + g, r0 + g + 4, ...: 8 of them per batch
    uint4 a[8];
    int r = r0 + grp;
#pragma unroll
    for (int k = 0; k < 8; k++) a[k] = r + 4 * k < r1 ? __ldg(base + (size_t)(r + 4 * k) * pitch) : make_uint4(0, 0, 0, 0);
    pdl_wait();
    pdl_next();
    if (FULL) stage_x(J, r0, r1, xs);
    for (; r < r1; r += 32) {
        uint4 b[8];
#pragma unroll
        for (int k = 0; k < 8; k++) b[k] = r + 32 + 4 * k < r1 ? __ldg(base + (size_t)(r + 32 + 4 * k) * pitch) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (r + 4 * k < r1) consume(a[k], acc, FULL ? *(const uint4 *)(xs + (r + 4 * k - r0) * 8) : xc);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] = b[k];
    }
    if (FULL) finish(J, blockIdx.x, tile, acc, red);
    else J.out[(size_t)blockIdx.x * 512 + threadIdx.x] = __low2float(acc) + __high2float(acc);
}

int main() {
    int n_sm = 0;
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
    const int L = 32;
    struct shape { int R, Np, splits; };
    const shape sh[4] = {{512, 6144, 11}, {512, 4096, 16}, {512, 28672, 2}, {1792, 4096, 16}};
    std::vector<job> jobs;
    double bytes = 0;
    float * out;
    CK(cudaMalloc(&out, (size_t)1024 * 512 * 4));
    float * prev_y = nullptr;
    for (int l = 0; l < L; l++)
        for (const shape & s : sh) {
            job J;
            const size_t n = (size_t)s.R * s.Np * 4;
            uint32_t * w;
            float * y;
            CK(cudaMalloc(&w, n));
            CK(cudaMemset(w, 0x37, n));
            CK(cudaMalloc(&y, 32768 * 4));
            CK(cudaMemset(y, 0, 32768 * 4));
            J.w = w; J.R = s.R; J.Np = s.Np; J.splits = s.splits; J.out = out;
            J.x = prev_y ? prev_y : y;   // the previous kernel's output (its first K entries)
            J.y = y;
            prev_y = y;
            jobs.push_back(J);
            bytes += n;
        }
    // the ring takes 64 KB; the dynamic shared memory asked for sets the blocks per SM: 100 KB
    // allows two (co-resident), 120 KB one
    struct variant { const char * name; void (*k)(job); size_t smem; };
    const variant vs[6] = {
        {"tma, 2 blocks/SM, stream only", k_tma<2, false>, 100 * 1024},
        {"tma, 1 block/SM, stream only", k_tma<1, false>, 120 * 1024},
        {"registers, stream only", k_reg<false>, 0},
        {"tma, 2 blocks/SM, x + atomics", k_tma<2, true>, 100 * 1024},
        {"tma, 1 block/SM, x + atomics", k_tma<1, true>, 120 * 1024},
        {"registers, x + atomics", k_reg<true>, 0},
    };
    for (const variant & v : vs) {
        if (v.smem) CK(cudaFuncSetAttribute(v.k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)v.smem));
        int occ = 0;
        cudaFuncAttributes fa;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, v.k, 512, v.smem));
        CK(cudaFuncGetAttributes(&fa, v.k));
        printf("%-34s %3d registers, %d blocks per SM\n", v.name, fa.numRegs, occ);
    }
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (const variant & v : vs) {
        for (int pdl = 1; pdl >= 0; pdl--) {
            cudaGraph_t g; cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (const job & J : jobs) {
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3((J.Np / kTile) * J.splits); cfg.blockDim = dim3(512); cfg.stream = st;
                cfg.dynamicSmemBytes = v.smem;
                cudaLaunchAttribute at[1];
                at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                at[0].val.programmaticStreamSerializationAllowed = 1;
                cfg.attrs = at; cfg.numAttrs = pdl;
                CK(cudaLaunchKernelEx(&cfg, v.k, J));
            }
            CK(cudaStreamEndCapture(st, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            float best = 1e9f;
            for (int r = 0; r < 6; r++) {
                CK(cudaEventRecord(e0, st));
                CK(cudaGraphLaunch(ge, st));
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
                if (r > 0 && ms < best) best = ms;
            }
            printf("%-34s PDL %s: %.1f us per layer (4 kernels), %.0f GB/s (%.2f GB per pass)\n", v.name, pdl ? "on " : "off",
                   best * 1000 / L, bytes / (best * 1e-3) / 1e9, bytes / 1e9);
            CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
        }
    }
    return 0;
}
