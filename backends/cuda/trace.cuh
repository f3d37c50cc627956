// In-graph timeline of the decode kernels (GGX_CUDA_TRACE=N, measurements only).
//
// ncu replays each kernel alone (cold caches, no overlap with its neighbours) and nsys is not
// always at hand, so the kernels can stamp their own phases: thread 0 of every block writes
// %globaltimer at fixed points (entry, past the PDL wait, start and end of its main loop, past
// the split-K hand-off, exit) into a device table. The N-th graph_compute of the backend is
// recorded, and a summary per kernel kind (layer numbers folded) is printed to stderr: where a
// decode step's time goes between launches, prologues, loops and tails, inside the real graph.
// Off (the default), a kernel pays one untaken branch per stamp.
#pragma once

#include "common.cuh"

#include <string>

enum {
    GGX_TRACE_ENTRY, GGX_TRACE_WAITED, GGX_TRACE_LOOP, GGX_TRACE_LOOP_END, GGX_TRACE_HANDOFF, GGX_TRACE_EXIT,
    GGX_TRACE_A, GGX_TRACE_B, GGX_TRACE_C,   // free points inside a kernel's loop (printed after LOOP)
    GGX_TRACE_N
};

struct ggx_trace_rec {
    uint32_t launch, block, smid, pad;
    uint64_t t[GGX_TRACE_N];   // 0: the block did not pass this point
};

// What a kernel receives: rec == nullptr when tracing is off.
struct ggx_trace_dev {
    ggx_trace_rec * rec;
    unsigned *      count;
    unsigned        cap;
    unsigned        launch;
};

static __device__ __forceinline__ uint64_t ggx_trace_now() {
#if defined(__CUDA_ARCH__) && !defined(GGX_USE_HIP)
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#else
    return 0;
#endif
}

// Thread 0 of a block takes a record (its index in *slot, a __shared__ int) and stamps the entry.
static __device__ __forceinline__ void ggx_trace_begin(const ggx_trace_dev & tr, int * slot) {
    if (!tr.rec || threadIdx.x != 0) return;
    const unsigned i = atomicAdd(tr.count, 1u);
    *slot = (int)(i < tr.cap ? i : tr.cap);
    if (i >= tr.cap) return;
    ggx_trace_rec & r = tr.rec[i];
    unsigned sm = 0;
#if defined(__CUDA_ARCH__) && !defined(GGX_USE_HIP)
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
#endif
    r.launch = tr.launch;
    r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    r.smid = sm;
    for (int k = 0; k < GGX_TRACE_N; k++) r.t[k] = 0;
    r.t[GGX_TRACE_ENTRY] = ggx_trace_now();
}

// Whether this launch is traced (uniform over the grid: a kernel may add barriers only then).
static __device__ __forceinline__ bool ggx_trace_on(const ggx_trace_dev & tr) { return tr.rec != nullptr; }

// Thread 0 stamps a time taken earlier, e.g. the latest of the block's warps' times at a point
// (each warp's ggx_trace_now() folded with an atomicMax into shared memory)
static __device__ __forceinline__ void ggx_trace_stamp_at(const ggx_trace_dev & tr, const int * slot, int point, uint64_t t) {
    if (!tr.rec || threadIdx.x != 0) return;
    const int i = *slot;
    if ((unsigned)i < tr.cap) tr.rec[i].t[point] = t;
}

static __device__ __forceinline__ void ggx_trace_stamp(const ggx_trace_dev & tr, const int * slot, int point) {
    if (!tr.rec || threadIdx.x != 0) return;
    ggx_trace_stamp_at(tr, slot, point, ggx_trace_now());
}

// Host side (trace.cu). The launch sites ask for a record stream per launch, named after what it
// computes; graph_compute brackets each step with begin/end.
void            ggx_cuda_trace_init(ggx_cuda_ctx & ctx);          // reads GGX_CUDA_TRACE
// `detail` (e.g. the first block of each matrix of a job) heads the launch's block dump only.
ggx_trace_dev   ggx_cuda_trace_launch(ggx_cuda_ctx & ctx, const std::string & name, const std::string & detail = "");
bool            ggx_cuda_trace_step_begin(ggx_cuda_ctx & ctx);   // true: this step is recorded
enum ggx_status ggx_cuda_trace_step_end(ggx_cuda_ctx & ctx);     // waits, prints the summary
void            ggx_cuda_trace_free(ggx_cuda_ctx & ctx);
