// How many thread-block clusters of one whole-SM block each (the decode GEMV's shape: 512
// threads, one block per SM) this GPU holds at once, per cluster size, and where they land.
// Split-K through clusters (a tile's K-slices adding their partials over distributed shared
// memory) needs a tile's 16 slices (llama3-8b's o and down) or 11 (q/k/v) in one cluster; a
// cluster lives in one GPC, and the SMs are floor-swept unevenly over the GPCs. Session 26 (no
// device) judged the idea by an H100 SM -> GPC map found in public; this checks the device itself.
//
// For each size: cudaOccupancyMaxActiveClusters, then a launch of that many clusters that records
// each block's SM (%smid), printing the SMs used and the SM sets of the clusters (which SMs share a
// GPC, as far as clusters reveal it).
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/cluster-fit.cu -o cluster-fit
#include <cstdio>
#include <set>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); return 1; } } while (0)

constexpr int k_threads = 512;

// Launched with more than half an SM's shared memory (dynamic, unused): one block per SM.
__global__ void __launch_bounds__(k_threads, 1) k_where(int * smid) {
    if (threadIdx.x == 0) {
        unsigned s;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
        smid[blockIdx.x] = (int)s;
    }
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s: %d SMs, %zu bytes of shared memory per SM\n", prop.name, prop.multiProcessorCount, prop.sharedMemPerMultiprocessor);
    const size_t smem = prop.sharedMemPerMultiprocessor / 2 + 1024;
    CK(cudaFuncSetAttribute(k_where, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaFuncSetAttribute(k_where, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    int * d = nullptr;
    CK(cudaMalloc(&d, sizeof(int) * 4096));
    for (int size : {1, 2, 4, 8, 11, 12, 16}) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = size;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.blockDim = dim3(k_threads);
        cfg.dynamicSmemBytes = smem;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        cfg.gridDim = dim3(size);
        int clusters = 0;
        const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, (void *)k_where, &cfg);
        if (e != cudaSuccess) {
            printf("cluster size %2d: %s\n", size, cudaGetErrorString(e));
            (void)cudaGetLastError();
            continue;
        }
        printf("cluster size %2d: %3d clusters at once = %3d of %d SMs", size, clusters, clusters * size, prop.multiProcessorCount);
        if (clusters < 1) { printf("\n"); continue; }
        cfg.gridDim = dim3(clusters * size);
        CK(cudaLaunchKernelEx(&cfg, k_where, d));
        CK(cudaDeviceSynchronize());
        std::vector<int> sm(clusters * size);
        CK(cudaMemcpy(sm.data(), d, sizeof(int) * sm.size(), cudaMemcpyDeviceToHost));
        std::set<int> used(sm.begin(), sm.end());
        printf("; %zu distinct SMs touched\n", used.size());
        if (size >= 8)
            for (int c = 0; c < clusters; c++) {
                printf("    cluster %2d:", c);
                for (int b = 0; b < size; b++) printf(" %3d", sm[c * size + b]);
                printf("\n");
            }
    }
    CK(cudaFree(d));
    return 0;
}
