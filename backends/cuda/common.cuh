// Shared pieces of the CUDA (and HIP) backend: vendor headers, error checks that return ggx status
// codes (never exit), the backend context, small device helpers (type loads, reductions).
#pragma once

#include "ggx/ggx.h"
#include "ggx/ggx-backend.h"
#include "ggx/ggx-qmatrix.h"

#if defined(GGX_USE_HIP)
#include "backends/hip/hip-compat.h"
#else
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif  // GGX_USE_HIP

#include <stddef.h>
#include <stdint.h>
#include <vector>

#define GGX_CUDA_WARP 32

// ---- errors -----------------------------------------------------------------------------------
// Records a readable message in ggx_last_error() and maps the error to a status code.
enum ggx_status ggx_cuda_fail(cudaError_t err, const char * what, const char * file, int line);
enum ggx_status ggx_cublas_fail(cublasStatus_t st, const char * what, const char * file, int line);

#define GGX_CUDA_CHECK(expr)                                                            \
    do {                                                                                \
        cudaError_t err_ = (expr);                                                      \
        if (err_ != cudaSuccess) return ggx_cuda_fail(err_, #expr, __FILE__, __LINE__); \
    } while (0)

#define GGX_CUBLAS_CHECK(expr)                                                                     \
    do {                                                                                           \
        cublasStatus_t st_ = (expr);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS) return ggx_cublas_fail(st_, #expr, __FILE__, __LINE__); \
    } while (0)

// After every kernel launch: catches bad launch configurations immediately.
#define GGX_CUDA_LAUNCH_CHECK() GGX_CUDA_CHECK(cudaGetLastError())

// Propagates a ggx status from a callee.
#define GGX_RETURN_IF_ERR(expr)                        \
    do {                                               \
        enum ggx_status s_ = (expr);                   \
        if (s_ != GGX_STATUS_OK) return s_;            \
    } while (0)

// ---- backend context --------------------------------------------------------------------------
struct ggx_cuda_ctx {
    int            device = 0;
    cudaStream_t   stream = nullptr;
    cublasHandle_t cublas = nullptr;
    void *         cublas_ws = nullptr;      // fixed cuBLAS workspace: no allocation during capture
    size_t         cublas_ws_size = 0;
    // One scratch buffer shared by all nodes (they run in order on one stream). It only grows;
    // captured graphs keep pointers into older buffers, so those are kept until the backend dies.
    void *         scratch = nullptr;
    size_t         scratch_size = 0;
    std::vector<void *> retired;
    // The activation whose fp16 copy sits at the start of the scratch buffer (the quantized
    // prefill matmul's x16): a matmul reading the same x after it (q, k, v; gate, up) skips the
    // conversion. run_nodes clears it before any node that may use the scratch
    // (ggx_cuda_keeps_x16).
    const struct ggx_tensor * x16_of = nullptr;
    int            n_sm = 0;
    int            cc_major = 0, cc_minor = 0;
    size_t         smem_optin = 0;           // largest dynamic shared memory per block
    size_t         smem_per_sm = 0;          // shared memory of one SM (all its blocks together)
    // Tile counters of the fused decode GEMV (qgemv.cu): zero between launches, each launch's
    // last blocks reset the ones they used.
    int *          counters = nullptr;
    int            n_counters = 0;
    bool           pdl = false;              // programmatic dependent launch (sm_90+; GGX_CUDA_NO_PDL=1 off)
    bool           fuse = true;              // decode fusion (GGX_CUDA_NO_FUSE=1 off)
    bool           strip_step = false;       // one-row jobs as persistent strip steps (GGX_CUDA_STEP=1; strip-plan.cuh)
    bool           step_tile = false;        // ... as tile steps instead (GGX_CUDA_STEP=tile; tile-step.h)
    int            tile_warps = 16;          // ... of 12 or 16 warps per block (GGX_CUDA_STEP_TILE_WARPS)
    bool           tile_split = true;        // ... with q/k/v as split stages (GGX_CUDA_STEP_TILE_QKV=0: by the fused GEMV)
    bool           strip_ring = false;       // ... their words through shared-memory rings (GGX_CUDA_STEP_RING=1)
    bool           strip_xpad = false;       // ... x padded against bank conflicts (GGX_CUDA_STEP_XPAD=1)
    int            strip_depth = 1;          // ... units in flight per warp at 4-2 bits (GGX_CUDA_STEP_DEPTH=1|2)
    int            strip_prefetch = 0;       // ... units ahead asked of L2 (GGX_CUDA_STEP_PREFETCH=N)
    int *          step_counter = nullptr;   // the strip step's grid counter: counters[n_counters], zero between launches
    long           strip_stages = 0;         // jobs issued as strip-step stages (ggx_backend_cuda_strip_stages)
    bool           prefetch = true;          // decode GEMV warms L2 before its PDL wait (GGX_CUDA_NO_PREFETCH=1 off)
    bool           use_graphs = true;        // GGX_CUDA_NO_GRAPH=1 turns capture off (debugging)
    bool           profile = false;          // GGX_CUDA_PROFILE=1: time every node (eager), print at exit
    void *         prof = nullptr;           // per-op timing table (ggx-cuda.cu)
    struct ggx_cuda_trace * trace = nullptr; // GGX_CUDA_TRACE=N: in-graph timeline of step N (trace.cu)
    // get_begin / get_end: a pinned host mailbox and the event recorded after the copy into it.
    unsigned char * mailbox = nullptr;
    cudaEvent_t    mailbox_ready = nullptr;
    // Small uploads (token ids, positions) through pinned slots, each reused once the event
    // recorded after its copy has passed (ggx-cuda.cu, be_set).
    static constexpr int k_small_slots = 16, k_small_bytes = 256;
    unsigned char * small = nullptr;
    cudaEvent_t    small_done[k_small_slots] = {};
    bool           small_used[k_small_slots] = {};
    int            small_next = 0;
    // top_n (topn.cu): the first level's candidates, the result on the device and its pinned copy.
    unsigned long long * top_keys = nullptr;
    int2 *         top_out = nullptr;
    int2 *         top_host = nullptr;
    cudaEvent_t    top_ready = nullptr;      // recorded after the copy into top_host (top_n_begin)
    int            top_pending = 0;          // n of the queued ranking, negative with a draw; 0: none
    // RoPE factors of a decode step, computed once per step (rope-table.cu, GGX_QGEMV_ROPE_TABLE=1)
    // for the GEMV epilogues of every layer instead of in each block's prologue.
    bool           rope_table_on = false;
    float2 *       rope_table = nullptr;     // [T][n_rot / 2] (cos, sin): room for 8 tokens x 128 pairs
    struct ggx_cuda_rope_key {
        const void * pos = nullptr, * freq_div = nullptr;
        int T = 0;
        struct ggx_params_rope rope = {};
    } rope_key;                              // what the table holds; T = 0: nothing this run
    bool           rope_table_fresh = false; // launched just now: the next kernel may not read it early
    long           rope_table_jobs = 0;      // GEMV jobs recorded reading it (ggx_backend_cuda_rope_table_jobs)
    // Norm weights in q_perm order per matrix (norm-table.cu, GGX_QGEMV_NORM_TABLE=1), so that the
    // GEMV prologue's two dependent loads (q_perm, then the weight) become independent.
    bool           norm_table_on = false;
    long           norm_table_mats = 0;      // matrices of GEMV launches recorded reading one (ggx_backend_cuda_norm_table_mats)
    long           pair_group_pieces = 0;    // paired pieces joining two groups (decode-plan.h; ggx_backend_cuda_pair_group_pieces)
    // Attention in the q/k/v GEMV's tail while pos + 1 <= attn_tail keys (GGX_ATTN_TAIL=N; 0: off;
    // decode-plan.h, ggx_qgemv_attn), and the jobs recorded doing it (ggx_backend_cuda_attn_tail_jobs).
    int            attn_tail = 0;
    // One-row o and down GEMVs (ADD in place) add each K-slice's sums into the residual with vector
    // reductions instead of the split-K hand-off (qgemv.cu; GGX_QGEMV_RED=0 turns it off for logits
    // that are the same bits from run to run). Asked for repeatable results (deterministic), the
    // backend adds no K-slice with atomics (adds_slices) and sums the GPTQ GEMV's in order too.
    bool           red = true;
    bool           deterministic = false;
    bool           adds_slices() const { return red && !deterministic; }
    // The strip and tile steps (GGX_CUDA_STEP) add their warps' sums into shared memory with
    // atomics, in whatever order the warps get there, so repeatable results run without them: the
    // fused decode GEMVs take their jobs. (Their matrices stay prepared for them: the mode can be
    // switched off again.)
    bool           steps_on() const { return strip_step && !deterministic; }
    // The q/k/v rows (decode-plan.h, ggx_attn_rows): one-row q/k/v jobs add their K-slices' sums
    // there and the decode attention reads them, instead of the split-K hand-off (with red;
    // GGX_QKV_ROWS=0 turns it off). Cleared at the start of each run; grows only, like the
    // scratch (older buffers retired with it).
    bool           qkv_rows_on = true;
    float *        qkv_rows = nullptr;
    int64_t        qkv_rows_floats = 0;
    long           qkv_rows_jobs = 0;        // jobs recorded adding into them (ggx_backend_cuda_qkv_rows_jobs)
    long           attn_tail_jobs = 0;
    char           name[16] = {0};
};

// A fence for release / acquire patterns between blocks (fence.acq_rel.gpu): what a counter
// hand-off needs; __threadfence() is fence.sc.gpu. Both cost the same where one thread fences
// (run 170: the build variant fencesc, -DGGX_FENCE_SC=1 in bench/variants.sh, which makes this
// __threadfence(), measured within 0.2%); what paid in run 169 was fencing in one thread instead
// of all and resetting the counter after the acquire. HIP: __threadfence().
#ifndef GGX_FENCE_SC
#define GGX_FENCE_SC 0
#endif
static __device__ __forceinline__ void ggx_fence_acq_rel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700 && !defined(GGX_USE_HIP) && !GGX_FENCE_SC
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
#else
    __threadfence();
#endif
}

// p[0 .. 3] += v for the first `valid` of the four (p 16-byte aligned): one vector reduction on
// sm_90 (RED.E.ADD.F32x4, no value returned), else one scalar atomic per element. The order of the
// adds is not fixed, so sums made this way differ from run to run in their last bits.
static __device__ __forceinline__ void ggx_red_add4(float * p, float4 v, int valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GGX_USE_HIP)
    if (valid >= 4) {
        atomicAdd((float4 *)p, v);
        return;
    }
#endif
    const float f[4] = {v.x, v.y, v.z, v.w};
    for (int c = 0; c < 4 && c < valid; c++) atomicAdd(p + c, f[c]);
}

// ---- programmatic dependent launch (sm_90) ----------------------------------------------------
// A kernel launched with ggx_cuda_launch may start while the previous one finishes: it does what
// depends only on static data first, then ggx_pdl_wait() (returns once the previous grid has
// completed and its memory is visible), then ggx_pdl_launch_next() lets the following kernel start
// early in turn. Elsewhere (older GPUs, HIP, ctx.pdl off) both are no-ops and launches are plain.
static __device__ __forceinline__ void ggx_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GGX_USE_HIP)
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void ggx_pdl_launch_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GGX_USE_HIP)
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// A launch on `stream`, as a programmatic dependent of the previous kernel when pdl (sm_90;
// the HIP build launches plainly).
template <typename... Args, typename... Actual>
static cudaError_t ggx_cuda_launch_ex(cudaStream_t stream, bool pdl, void (*kernel)(Args...), dim3 grid, dim3 block, size_t smem,
                                      Actual &&... args) {
#if !defined(GGX_USE_HIP)
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<Actual &&>(args)...);
#else
    (void)pdl;
    kernel<<<grid, block, smem, stream>>>(static_cast<Actual &&>(args)...);
    return cudaGetLastError();
#endif  // GGX_USE_HIP
}

// The L1 / shared memory carveout preference of the decode GEMV and attention kernels, in percent
// of the most shared memory an SM can have; GGX_CUDA_CARVEOUT=P overrides it, -1 leaves the
// driver's choice. Default 100, the same split for both: an SM whose running blocks use another
// split must drain before a block of the next kernel can start there, which costs the early
// starts PDL gives. ncu (runs 147-148): with the driver's choice the GEMVs ran at 8 or 16 KB of
// shared memory and attention at 168 KB (233 KB with 3 stages), so the split changed at 3 of a
// layer's 5 kernel boundaries; with 100 all run at 233 KB. H100, llama3-8b 4.0, tg128 @16 / @512 /
// @4096: 393.2 / 370.2 / 349.0 -> 401.1 / 380.6 / 349.9 (run 147; at 4096 attention's 3 stages
// already asked for the most); llama3.2-1b +5%; P = 0 or 72 lose 6% at 4096.
// Sets it on `kernel` once per process (host code): a decode kernel always, any other only with
// GGX_CUDA_CARVEOUT_ALL=1 (measurements: ggx_cuda_launch asks for every kernel it launches, so the
// step's small kernels and prefill's take it too). A no-op in the HIP build.
enum ggx_status ggx_cuda_carveout(const void * kernel, bool decode);   // ggx-cuda.cu

template <typename... Args, typename... Actual>
static enum ggx_status ggx_cuda_launch(const ggx_cuda_ctx & ctx, void (*kernel)(Args...), dim3 grid, dim3 block, size_t smem,
                                       Actual &&... args) {
    GGX_RETURN_IF_ERR(ggx_cuda_carveout((const void *)kernel, false));
    GGX_CUDA_CHECK(ggx_cuda_launch_ex(ctx.stream, ctx.pdl, kernel, grid, block, smem, static_cast<Actual &&>(args)...));
    return GGX_STATUS_OK;
}

// 16-byte alignment, which the float4 / uint4 paths of the kernels need.
static __host__ __device__ inline bool ggx_aligned16(const void * p) { return ((uintptr_t)p & 15) == 0; }

// ---- device helpers ---------------------------------------------------------------------------
static __device__ __forceinline__ float ggx_load_f(const float * p, int64_t i) { return p[i]; }
static __device__ __forceinline__ float ggx_load_f(const half * p, int64_t i) { return __half2float(p[i]); }
static __device__ __forceinline__ float ggx_load_f(const nv_bfloat16 * p, int64_t i) { return __bfloat162float(p[i]); }

static __device__ __forceinline__ void ggx_store_f(float * p, int64_t i, float v) { p[i] = v; }
static __device__ __forceinline__ void ggx_store_f(half * p, int64_t i, float v) { p[i] = __float2half_rn(v); }
static __device__ __forceinline__ void ggx_store_f(nv_bfloat16 * p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
// Element i of a row of f32, f16 or bf16 chosen at run time (type: enum ggx_type; others read as f32).
static __device__ __forceinline__ float ggx_load_any(const void * p, int type, int64_t i) {
    switch (type) {
        case GGX_TYPE_F16:  return ggx_load_f((const half *)p, i);
        case GGX_TYPE_BF16: return ggx_load_f((const nv_bfloat16 *)p, i);
        default:            return ggx_load_f((const float *)p, i);
    }
}
static __device__ __forceinline__ void ggx_store_any(void * p, int type, int64_t i, float v) {
    switch (type) {
        case GGX_TYPE_F16:  ggx_store_f((half *)p, i, v); break;
        case GGX_TYPE_BF16: ggx_store_f((nv_bfloat16 *)p, i, v); break;
        default:            ggx_store_f((float *)p, i, v); break;
    }
}

// Four floats to element 4 i.. (16-byte aligned float rows, 8-byte aligned half rows).
static __device__ __forceinline__ void ggx_store_f4(float * p, int64_t i, float4 v) { ((float4 *)p)[i] = v; }
static __device__ __forceinline__ void ggx_store_f4(half * p, int64_t i, float4 v) {
    const half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    uint2 u;
    memcpy(&u.x, &a, 4);
    memcpy(&u.y, &b, 4);
    ((uint2 *)p)[i] = u;
}

// Read-only loads of static data (tables, weights) through the non-coherent cache where there is
// one.
template <typename V> static __device__ __forceinline__ V ggx_load_ro(const V * p) {
#if defined(GGX_USE_HIP)
    return *p;
#else
    return __ldg(p);
#endif
}

// Loads of what other blocks wrote during this kernel, read after __threadfence() (split-K
// partials): past L1 on CUDA; on AMD the fence's acquire already invalidated the cache, so a plain
// load is fresh.
template <typename V> static __device__ __forceinline__ V ggx_load_cg(const V * p) {
#if defined(GGX_USE_HIP)
    return *p;
#else
    return __ldcg(p);
#endif
}

static __device__ __forceinline__ float ggx_warp_sum(float v) {
#pragma unroll
    for (int o = GGX_CUDA_WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float ggx_warp_max(float v) {
#pragma unroll
    for (int o = GGX_CUDA_WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// 4 values of every lane (4 columns) summed over the warp: lanes 0, 8, 16, 24 end with the sums
// of x, y, z, w (a transposed butterfly: 6 shuffles instead of 4 x 5).
static __device__ __forceinline__ float ggx_warp_sum4(float4 v) {
    const int lane = threadIdx.x % GGX_CUDA_WARP;
    const bool hi = lane & 16, mid = lane & 8;
    const float a0 = (hi ? v.z : v.x) + __shfl_xor_sync(0xffffffffu, hi ? v.x : v.z, 16);
    const float a1 = (hi ? v.w : v.y) + __shfl_xor_sync(0xffffffffu, hi ? v.y : v.w, 16);
    float b = (mid ? a1 : a0) + __shfl_xor_sync(0xffffffffu, mid ? a0 : a1, 8);
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) b += __shfl_xor_sync(0xffffffffu, b, o);
    return b;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024). `sh` holds 32 floats.
// Every thread gets the result.
static __device__ __forceinline__ float ggx_block_sum(float v, float * sh) {
    const int lane = threadIdx.x % GGX_CUDA_WARP, warp = threadIdx.x / GGX_CUDA_WARP;
    v = ggx_warp_sum(v);
    __syncthreads();                      // sh may still be read from a previous call
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    const int n_warps = blockDim.x / GGX_CUDA_WARP;
    v = lane < n_warps ? sh[lane] : 0.0f;
    return ggx_warp_sum(v);
}
static __device__ __forceinline__ float ggx_block_max(float v, float * sh) {
    const int lane = threadIdx.x % GGX_CUDA_WARP, warp = threadIdx.x / GGX_CUDA_WARP;
    v = ggx_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    const int n_warps = blockDim.x / GGX_CUDA_WARP;
    v = lane < n_warps ? sh[lane] : -INFINITY;
    return ggx_warp_max(v);
}

// Calls f with a typed pointer for a float tensor type (f32/f16/bf16). Returns false otherwise.
template <typename F> static bool ggx_cuda_dispatch_ftype(enum ggx_type t, const void * p, F && f) {
    switch (t) {
        case GGX_TYPE_F32:  f((const float *)p); return true;
        case GGX_TYPE_F16:  f((const half *)p); return true;
        case GGX_TYPE_BF16: f((const nv_bfloat16 *)p); return true;
        default: return false;
    }
}

static inline bool ggx_cuda_is_ftype(enum ggx_type t) {
    return t == GGX_TYPE_F32 || t == GGX_TYPE_F16 || t == GGX_TYPE_BF16;
}

static inline unsigned ggx_cuda_blocks(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }
