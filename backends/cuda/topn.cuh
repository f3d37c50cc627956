// The n best of a row of floats (larger value first, then lower index; NaN after everything), for a
// sampler that needs a few candidates rather than the whole vocabulary (ggx_backend_i::top_n).
#pragma once

#include "common.cuh"

// Writes ids[0, n) and vals[0, n) (host memory) and waits for them. 1 <= n <= GGX_BACKEND_TOP_MAX,
// n <= count, and ceil(count / 4096) * n <= 16384 (a 262144-entry vocabulary at n = 256; a longer
// row gives GGX_STATUS_UNSUPPORTED, and the caller reads the whole row instead).
enum ggx_status ggx_cuda_top_n(ggx_cuda_ctx & ctx, const float * src, int64_t count, int n, int32_t * ids, float * vals);
// The device buffers and the pinned result slot it keeps between calls.
void            ggx_cuda_top_n_release(ggx_cuda_ctx & ctx);
