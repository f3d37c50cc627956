// top_n: the n best of a row of floats, by an exact radix select in two levels.
//
// Each element becomes a 64-bit key that orders as the sampler ranks: the float's bits made
// monotone (NaN lowest, -0 as +0) above the complement of its index (the lower index wins a tie), so keys are
// unique and "the n best" is "the n largest keys". Level one: blocks of 256 threads, 16 elements
// each in registers, select their block's n largest; level two: one block of 1024 threads selects
// the n largest of those and sorts them. A select walks the key from its top byte down: a histogram
// of the byte among the keys still undecided picks the byte value where the n-th largest lies;
// keys above it are in, and it stops as soon as every key with the chosen prefix is in.
#include "topn.cuh"

#include "ggx/ggx-draw.h"

#include <cstring>

namespace {

constexpr int k_per_thread = 16;
constexpr int k_block1 = 256, k_chunk = k_block1 * k_per_thread;   // level one: elements per block
constexpr int k_block2 = 1024, k_max_cands = k_block2 * k_per_thread;   // level two: candidates

__device__ __forceinline__ unsigned long long key_of(float v, int64_t i) {
    const uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);   // -0 ties with +0, as values compare
    const uint32_t ord = v != v ? 0u : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (unsigned long long)ord << 32 | (0xffffffffu - (uint32_t)i);
}

__device__ __forceinline__ float value_of(unsigned long long key) {
    const uint32_t ord = (uint32_t)(key >> 32);
    if (ord == 0) return __uint_as_float(0x7fc00000u);
    return __uint_as_float((ord & 0x80000000u) ? (ord & 0x7fffffffu) : ~ord);
}

// Adds one to hist[bin] for each calling lane; lanes of a warp with the same bin add once together
// (the first byte of similar logits is one or two values: plain atomics would serialise).
__device__ __forceinline__ void hist_add(int * hist, int bin) {
#if defined(GGX_USE_HIP)
    atomicAdd(&hist[bin], 1);
#else
    const unsigned peers = __match_any_sync(__activemask(), bin);
    if ((int)(threadIdx.x % GGX_CUDA_WARP) == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
#endif
}

struct select_smem {
    int hist[256];
    int warp_total[256 / GGX_CUDA_WARP];
    int sel, need, all;
};

// The smallest key t such that exactly min(n, keys) of the block's keys are >= t (pads, key 0,
// excepted: several pads may tie, and a caller drops the extras). Every thread returns it.
template <int NT>
__device__ unsigned long long select_threshold(const unsigned long long (&key)[k_per_thread], int n, select_smem & s) {
    unsigned long long prefix = 0, mask = 0;
    int need = n;
    for (int d = 7; d >= 0; d--) {
        const int shift = 8 * d;
        for (int b = threadIdx.x; b < 256; b += NT) s.hist[b] = 0;
        if (threadIdx.x == 0) { s.sel = -1; s.all = 1; }
        __syncthreads();
#pragma unroll
        for (int e = 0; e < k_per_thread; e++)
            if ((key[e] & mask) == prefix) hist_add(s.hist, (int)(key[e] >> shift) & 255);
        __syncthreads();
        // counts above each byte value, from 255 down: a scan over 256 threads
        const int t = threadIdx.x, lane = t % GGX_CUDA_WARP, w = t / GGX_CUDA_WARP;
        int h = 0, incl = 0;
        if (t < 256) {
            h = s.hist[255 - t];
            incl = h;
#pragma unroll
            for (int o = 1; o < GGX_CUDA_WARP; o <<= 1) {
                const int up = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += up;
            }
            if (lane == GGX_CUDA_WARP - 1) s.warp_total[w] = incl;
        }
        __syncthreads();
        if (t < 256) {
            for (int i = 0; i < w; i++) incl += s.warp_total[i];
            const int above = incl - h;
            if (above < need && need <= incl) {
                s.sel = 255 - t;
                s.need = need - above;
                s.all = h == need - above;
            }
        }
        __syncthreads();
        if (s.sel < 0) return 0;   // fewer keys than n: all of them
        prefix |= (unsigned long long)s.sel << shift;
        mask |= 255ull << shift;
        need = s.need;
        const bool all = s.all;
        __syncthreads();   // s is rewritten by the next digit
        if (all) break;
    }
    return prefix;
}

// Appends this thread's keys >= thr (pads excepted) to out through the block's counter `filled`,
// at most n of them in all.
__device__ __forceinline__ void keep_selected(const unsigned long long (&key)[k_per_thread], unsigned long long thr, int n,
                                              int * filled, unsigned long long * out) {
#pragma unroll
    for (int e = 0; e < k_per_thread; e++)
        if (key[e] >= thr && key[e] != 0ull) {
            const int slot = atomicAdd(filled, 1);
            if (slot < n) out[slot] = key[e];
        }
}

// Level one: block b's n largest keys (pads of 0 where it has fewer) into cand[b * n ..).
__global__ void __launch_bounds__(k_block1) k_top_level1(const float * __restrict__ x, int64_t count, int n,
                                                         unsigned long long * __restrict__ cand) {
    __shared__ select_smem s;
    __shared__ int filled;
    const int64_t base = (int64_t)blockIdx.x * k_chunk;
    unsigned long long key[k_per_thread];
#pragma unroll
    for (int e = 0; e < k_per_thread; e++) {
        const int64_t i = base + e * k_block1 + threadIdx.x;
        key[e] = i < count ? key_of(x[i], i) : 0ull;
    }
    if (threadIdx.x == 0) filled = 0;
    const unsigned long long thr = select_threshold<k_block1>(key, n, s);
    unsigned long long * out = cand + (size_t)blockIdx.x * n;
    keep_selected(key, thr, n, &filled, out);
    __syncthreads();
    for (int i = filled + threadIdx.x; i < n; i += k_block1) out[i] = 0ull;
}

// Level two: the n largest of m candidates, sorted, as (index, value bits) into out[0, n). DRAW:
// then one thread draws among the first draw.top_k in the host sampler's order and arithmetic
// (ggx/ggx-draw.h), storing the id at id_dst and as out[n].x.
template <bool DRAW>
__global__ void __launch_bounds__(k_block2) k_top_level2(const unsigned long long * __restrict__ cand, int m, int n,
                                                         int2 * __restrict__ out, const ggx_draw draw, int32_t * id_dst) {
    __shared__ select_smem s;
    __shared__ unsigned long long best[GGX_BACKEND_TOP_MAX];
    __shared__ float sorted_val[DRAW ? GGX_BACKEND_TOP_MAX : 1], p[DRAW ? GGX_BACKEND_TOP_MAX : 1];
    __shared__ int32_t sorted_id[DRAW ? GGX_BACKEND_TOP_MAX : 1];
    __shared__ int filled;
    unsigned long long key[k_per_thread];
#pragma unroll
    for (int e = 0; e < k_per_thread; e++) {
        const int i = e * k_block2 + threadIdx.x;
        key[e] = i < m ? cand[i] : 0ull;
    }
    if (threadIdx.x == 0) filled = 0;
    const unsigned long long thr = select_threshold<k_block2>(key, n, s);
    keep_selected(key, thr, n, &filled, best);
    __syncthreads();
    // rank of each (unique) key among the n: its place in the answer
    const int t = threadIdx.x;
    if (t < filled && t < n) {
        const unsigned long long k = best[t];
        int rank = 0;
        for (int j = 0; j < min(filled, n); j++) rank += best[j] > k;
        out[rank] = make_int2((int)(0xffffffffu - (uint32_t)k), __float_as_int(value_of(k)));
        if constexpr (DRAW) {
            sorted_id[rank] = (int32_t)(0xffffffffu - (uint32_t)k);
            sorted_val[rank] = value_of(k);
        }
    }
    if constexpr (DRAW) {
        __syncthreads();
        if (t == 0) {
            const int m = min(filled, n), k = min(draw.top_k, m);
            const float t = draw.temperature;
            ggx_draw_order(m, t, [](int j) -> float & { return sorted_val[j]; }, [](int j) -> int32_t & { return sorted_id[j]; });
            ggx_draw_probabilities(k, sorted_val[0] / t, [t](int j) { return sorted_val[j] / t; }, [](int j) -> float & { return p[j]; });
            const int i = ggx_draw_select([](int j) { return p[j]; }, k, draw.min_p, draw.top_p, draw.u);
            *id_dst = sorted_id[i];
            out[n] = make_int2(sorted_id[i], 0);
        }
    }
}

}  // namespace

// Checks a request and makes the buffers (once); the first level's block count in *blocks.
static ggx_status prepare(ggx_cuda_ctx & ctx, int64_t count, int n, int64_t * blocks) {
    if (n < 1 || n > GGX_BACKEND_TOP_MAX || count < n || count > 0xffffffffll) {
        ggx_set_error("cuda: top_n of %d over %lld values (1..%d, at most the row)", n, (long long)count, GGX_BACKEND_TOP_MAX);
        return GGX_STATUS_FAILED;
    }
    *blocks = (count + k_chunk - 1) / k_chunk;
    if (*blocks * n > k_max_cands) {
        ggx_set_error("cuda: top_n of %d over %lld values: more than %d candidates", n, (long long)count, k_max_cands);
        return GGX_STATUS_UNSUPPORTED;
    }
    if (!ctx.top_keys) {   // sized for the most candidates level two takes: no regrowth
        GGX_CUDA_CHECK(cudaMalloc((void **)&ctx.top_keys, (size_t)k_max_cands * sizeof(unsigned long long)));
        GGX_CUDA_CHECK(cudaMalloc((void **)&ctx.top_out, (GGX_BACKEND_TOP_MAX + 1) * sizeof(int2)));
        GGX_CUDA_CHECK(cudaMallocHost((void **)&ctx.top_host, (GGX_BACKEND_TOP_MAX + 1) * sizeof(int2)));
        GGX_CUDA_CHECK(cudaEventCreateWithFlags(&ctx.top_ready, cudaEventDisableTiming));
    }
    return GGX_STATUS_OK;
}

static void unpack(const ggx_cuda_ctx & ctx, int n, int32_t * ids, float * vals) {
    for (int i = 0; i < n; i++) {
        ids[i] = ctx.top_host[i].x;
        memcpy(&vals[i], &ctx.top_host[i].y, sizeof(float));
    }
}

ggx_status ggx_cuda_top_n_begin(ggx_cuda_ctx & ctx, const float * src, int64_t count, int n, const ggx_draw * draw, void * id_dst) {
    int64_t blocks = 0;
    GGX_RETURN_IF_ERR(prepare(ctx, count, n, &blocks));
    if (draw && (draw->top_k < 1 || draw->top_k > n || !id_dst)) {
        ggx_set_error("cuda: top_n draw among %d of %d candidates", draw->top_k, n);
        return GGX_STATUS_FAILED;
    }
    GGX_CUDA_CHECK(ggx_cuda_launch_ex(ctx.stream, false, k_top_level1, dim3((unsigned)blocks), dim3(k_block1), 0, src, count, n,
                                      ctx.top_keys));
    GGX_CUDA_CHECK(ggx_cuda_launch_ex(ctx.stream, false, draw ? k_top_level2<true> : k_top_level2<false>, dim3(1), dim3(k_block2), 0,
                                      (const unsigned long long *)ctx.top_keys, (int)(blocks * n), n, ctx.top_out,
                                      draw ? *draw : ggx_draw{}, (int32_t *)(draw ? id_dst : nullptr)));
    GGX_CUDA_CHECK(cudaMemcpyAsync(ctx.top_host, ctx.top_out, (size_t)(n + (draw ? 1 : 0)) * sizeof(int2), cudaMemcpyDeviceToHost,
                                   ctx.stream));
    GGX_CUDA_CHECK(cudaEventRecord(ctx.top_ready, ctx.stream));
    ctx.top_pending = draw ? -n : n;
    return GGX_STATUS_OK;
}

ggx_status ggx_cuda_top_n_end(ggx_cuda_ctx & ctx, int32_t * ids, float * vals, int32_t * drawn) {
    if (ctx.top_pending == 0) {
        ggx_set_error("cuda: top_n_end without top_n_begin");
        return GGX_STATUS_FAILED;
    }
    GGX_CUDA_CHECK(cudaEventSynchronize(ctx.top_ready));
    const int n = ctx.top_pending < 0 ? -ctx.top_pending : ctx.top_pending;
    unpack(ctx, n, ids, vals);
    *drawn = ctx.top_pending < 0 ? ctx.top_host[n].x : -1;
    ctx.top_pending = 0;
    return GGX_STATUS_OK;
}

ggx_status ggx_cuda_top_n(ggx_cuda_ctx & ctx, const float * src, int64_t count, int n, int32_t * ids, float * vals) {
    GGX_RETURN_IF_ERR(ggx_cuda_top_n_begin(ctx, src, count, n, nullptr, nullptr));
    int32_t drawn = -1;
    return ggx_cuda_top_n_end(ctx, ids, vals, &drawn);
}

void ggx_cuda_top_n_release(ggx_cuda_ctx & ctx) {
    if (ctx.top_keys) (void)cudaFree(ctx.top_keys);
    if (ctx.top_out) (void)cudaFree(ctx.top_out);
    if (ctx.top_host) (void)cudaFreeHost(ctx.top_host);
    if (ctx.top_ready) (void)cudaEventDestroy(ctx.top_ready);
    ctx.top_ready = nullptr;
    ctx.top_keys = nullptr;
    ctx.top_out = nullptr;
    ctx.top_host = nullptr;
}
