// One block per gathered/scattered row. Out-of-range ids or positions cannot raise an error from
// inside a kernel: a bad id yields a row of zeros, a bad position writes nothing (the host side
// validates both before upload).
#include "getrows.cuh"
#include "trace.cuh"

#include <type_traits>

namespace {

constexpr int GET_ROWS_PER_THREAD = 4, GET_ROWS_THREADS = 256;

template <typename TT>
__global__ void k_get_rows(const TT * __restrict__ table,   // [V][D]
                           const int32_t * __restrict__ ids, // [T]
                           float * __restrict__ y, int64_t D, int64_t V, const ggx_trace_dev trace) {
    __shared__ int trace_slot;
    ggx_trace_begin(trace, &trace_slot);   // the step's first kernel: where a decode step starts
    const int32_t id = ids[blockIdx.x];
    float * yr = y + blockIdx.x * D;
    const bool ok = id >= 0 && id < V;
    // blockIdx.y: GET_ROWS_PER_THREAD x blockDim.x elements of the row, all loads issued before
    // the stores (one block walking a 4096-wide row took 16 dependent round trips: 6 us per step)
    const int64_t i0 = (int64_t)blockIdx.y * blockDim.x * GET_ROWS_PER_THREAD + threadIdx.x;
    float v[GET_ROWS_PER_THREAD];
#pragma unroll
    for (int u = 0; u < GET_ROWS_PER_THREAD; u++) {
        const int64_t i = i0 + (int64_t)u * blockDim.x;
        v[u] = ok && i < D ? ggx_load_f(table, (int64_t)id * D + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < GET_ROWS_PER_THREAD; u++) {
        const int64_t i = i0 + (int64_t)u * blockDim.x;
        if (i < D) yr[i] = v[u];
    }
    ggx_trace_stamp(trace, &trace_slot, GGX_TRACE_EXIT);
}

template <typename TC>
__global__ void k_kv_store(const float * __restrict__ cur,   // [T][D]
                           TC * __restrict__ cache,          // [C][D]
                           const int32_t * __restrict__ pos, int64_t D, int64_t C) {
    const int32_t p = pos[blockIdx.x];
    if (p < 0 || p >= C) return;
    const float * src = cur + blockIdx.x * D;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ggx_store_f(cache, (int64_t)p * D + i, src[i]);
}

}  // namespace

bool ggx_cuda_supports_rows(const ggx_tensor * dst) {
    if (dst->op == GGX_OP_GET_ROWS)
        return ggx_cuda_is_ftype(dst->src[0]->type) && dst->src[1]->type == GGX_TYPE_I32;
    // KV_STORE
    const ggx_tensor * cur = dst->src[0];
    const ggx_tensor * cache = dst->src[1];
    const ggx_tensor * pos = dst->src[2];
    if (cur->type != GGX_TYPE_F32 || pos->type != GGX_TYPE_I32) return false;
    if (cache->type != GGX_TYPE_F32 && cache->type != GGX_TYPE_F16 && cache->type != GGX_TYPE_BF16) return false;
    const int64_t T = ggx_nelements(pos);
    return T > 0 && ggx_nelements(cur) % T == 0 && ggx_nelements(cache) % (ggx_nelements(cur) / T) == 0;
}

ggx_status ggx_cuda_op_get_rows(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const ggx_tensor * table = dst->src[0];
    const ggx_tensor * ids = dst->src[1];
    const int64_t D = table->ne[0], V = ggx_nrows(table), T = ggx_nelements(ids);
    if (T == 0) return GGX_STATUS_OK;
    constexpr int per_block = GET_ROWS_THREADS * GET_ROWS_PER_THREAD;
    const int64_t chunks = (D + per_block - 1) / per_block;
    if (chunks > 65535 || T > 0x7fffffff) {
        ggx_set_error("cuda: get_rows of %lld rows of %lld elements: too large for one launch", (long long)T, (long long)D);
        return GGX_STATUS_UNSUPPORTED;
    }
    const ggx_trace_dev trace = ctx.trace ? ggx_cuda_trace_launch(ctx, "get_rows") : ggx_trace_dev{};
    ggx_cuda_dispatch_ftype(table->type, table->data, [&](auto tp) {
        const dim3 grid((unsigned)T, (unsigned)chunks);
        k_get_rows<<<grid, GET_ROWS_THREADS, 0, ctx.stream>>>(tp, (const int32_t *)ids->data, (float *)dst->data, D, V, trace);
    });
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}

ggx_status ggx_cuda_op_kv_store(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const ggx_tensor * cur = dst->src[0];
    const ggx_tensor * cache = dst->src[1];
    const ggx_tensor * pos = dst->src[2];
    const int64_t T = ggx_nelements(pos);
    const int64_t D = ggx_nelements(cur) / T, C = ggx_nelements(cache) / D;
    void * cd = dst->data ? dst->data : cache->data;
    switch (cache->type) {
        case GGX_TYPE_F32:  k_kv_store<<<(unsigned)T, 256, 0, ctx.stream>>>((const float *)cur->data, (float *)cd, (const int32_t *)pos->data, D, C); break;
        case GGX_TYPE_F16:  k_kv_store<<<(unsigned)T, 256, 0, ctx.stream>>>((const float *)cur->data, (half *)cd, (const int32_t *)pos->data, D, C); break;
        case GGX_TYPE_BF16: k_kv_store<<<(unsigned)T, 256, 0, ctx.stream>>>((const float *)cur->data, (nv_bfloat16 *)cd, (const int32_t *)pos->data, D, C); break;
        default: ggx_set_error("cuda: kv_store into %s cache", ggx_type_name(cache->type)); return GGX_STATUS_UNSUPPORTED;
    }
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}
