// The n best of a row of floats (larger value first, then lower index; NaN after everything), for a
// sampler that needs a few candidates rather than the whole vocabulary (ggx_backend_i::top_n).
#pragma once

#include "common.cuh"

// Writes ids[0, n) and vals[0, n) (host memory) and waits for them. 1 <= n <= GGX_BACKEND_TOP_MAX,
// n <= count, and ceil(count / 4096) * n <= 16384 (a 262144-entry vocabulary at n = 256; a longer
// row gives GGX_STATUS_UNSUPPORTED, and the caller reads the whole row instead).
enum ggx_status ggx_cuda_top_n(ggx_cuda_ctx & ctx, const float * src, int64_t count, int n, int32_t * ids, float * vals);
// The same queued (ggx_backend_i::top_n_begin / top_n_end), with an optional draw among the best
// (ggx/ggx-draw.h) whose id is stored at the device address id_dst.
enum ggx_status ggx_cuda_top_n_begin(ggx_cuda_ctx & ctx, const float * src, int64_t count, int n, const struct ggx_draw * draw,
                                     void * id_dst);
enum ggx_status ggx_cuda_top_n_end(ggx_cuda_ctx & ctx, int32_t * ids, float * vals, int32_t * drawn);
// The device buffers, the pinned result slot and the event it keeps between calls.
void            ggx_cuda_top_n_release(ggx_cuda_ctx & ctx);
