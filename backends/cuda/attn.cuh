// ATTN: causal attention of q {hd, H, T} over the K/V caches {hd, Hkv, C} (f32/f16/bf16), query t
// seeing keys 0..pos[t] (pos read from device memory, so a captured graph serves every step).
// GQA: the G = H/Hkv query heads that share a KV head are handled by one block, so each K/V row
// is read once per block. Split-K over the cache (flash-decoding) with a combine pass when the
// query count is small; one pass per block otherwise.
#pragma once

#include "common.cuh"

bool            ggx_cuda_supports_attn(const struct ggx_tensor * dst);
size_t          ggx_cuda_attn_scratch(const struct ggx_tensor * dst);
// With x16 (prefill path only), the result goes there in fp16 instead of to dst (see
// ggx_cuda_ctx::x16_of). With tail_bound > 0 the q/k/v job before it computes the result while
// pos + 1 <= tail_bound (ggx_cuda_plan::attn_tail), and the kernel only waits for that job then.
// With rows (ggx_attn_rows, offsets into ctx.qkv_rows), q and k and v at pos come from the q/k/v
// job's f32 rows, and the kernel stores k and v into the caches at pos (ggx_cuda_attn_reads_rows).
enum ggx_status ggx_cuda_op_attn(ggx_cuda_ctx & ctx, struct ggx_tensor * dst, half * x16 = nullptr, int tail_bound = 0,
                                 const struct ggx_attn_rows * rows = nullptr);
