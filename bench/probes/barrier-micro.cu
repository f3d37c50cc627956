// Cost of a dependency boundary between decode GEMV phases on a full grid (one 512-thread block
// per SM): (a) a grid barrier inside a persistent kernel (block barrier, one fence, atomic, poll)
// vs (b) a kernel boundary between PDL-chained kernels in a CUDA graph (griddepcontrol.wait /
// launch_dependents) vs (c) plain kernels in a graph. Each variant optionally stores one float4
// per thread before the boundary (the partial sums a split-K block publishes).
#include <cstdio>
#include <cstdint>
#include <vector>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__device__ __forceinline__ int ld_acq(const int * p) { int v; asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }

__global__ void __launch_bounds__(512, 1) k_persist(int * bar, float4 * buf, int n, int store) {
    for (int i = 0; i < n; i++) {
        if (store) buf[(size_t)blockIdx.x * 512 + threadIdx.x] = make_float4(i, i, i, i);
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(bar, 1);
            const int target = (i + 1) * gridDim.x;
            while (ld_acq(bar) < target) {}
        }
        __syncthreads();
    }
}
__global__ void k_reset(int * bar) { *bar = 0; }

__global__ void __launch_bounds__(512, 1) k_step(float4 * buf, int i, int store) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    if (store) buf[(size_t)blockIdx.x * 512 + threadIdx.x] = make_float4(i, i, i, i);
}

int main() {
    int dev = 0, n_sm = 0;
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    int * bar; float4 * buf;
    CK(cudaMalloc(&bar, 4)); CK(cudaMalloc(&buf, (size_t)n_sm * 512 * 16));
    cudaStream_t s; CK(cudaStreamCreate(&s));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const int N = 2000;
    for (int store = 0; store < 2; store++) {
        // (a) persistent grid barrier
        float best = 1e9f;
        for (int r = 0; r < 5; r++) {
            k_reset<<<1, 1, 0, s>>>(bar);
            CK(cudaEventRecord(e0, s));
            k_persist<<<n_sm, 512, 0, s>>>(bar, buf, N, store);
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (ms < best) best = ms;
        }
        printf("store=%d grid barrier (persistent, %d blocks x 512): %.3f us per barrier\n", store, n_sm, best * 1000 / N);
        // (b, c) kernel boundaries in a graph, with and without PDL
        for (int pdl = 1; pdl >= 0; pdl--) {
            cudaGraph_t g; cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            for (int i = 0; i < N; i++) {
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3(n_sm); cfg.blockDim = dim3(512); cfg.stream = s;
                cudaLaunchAttribute at[1];
                at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                at[0].val.programmaticStreamSerializationAllowed = 1;
                cfg.attrs = at; cfg.numAttrs = pdl;
                CK(cudaLaunchKernelEx(&cfg, k_step, buf, i, store));
            }
            CK(cudaStreamEndCapture(s, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            best = 1e9f;
            for (int r = 0; r < 5; r++) {
                CK(cudaEventRecord(e0, s));
                CK(cudaGraphLaunch(ge, s));
                CK(cudaEventRecord(e1, s));
                CK(cudaEventSynchronize(e1));
                float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (ms < best) best = ms;
            }
            printf("store=%d kernel boundary in a graph, PDL %s: %.3f us per kernel\n", store, pdl ? "on " : "off", best * 1000 / N);
            CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
        }
    }
    return 0;
}
