// GET_ROWS (embedding lookup) and KV_STORE (scatter new K/V rows into the cache at pos[t]).
// Ids and positions are read from device memory, so captured graphs stay valid.
#pragma once

#include "common.cuh"

enum ggx_status ggx_cuda_op_get_rows(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);
enum ggx_status ggx_cuda_op_kv_store(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);
bool            ggx_cuda_supports_rows(const struct ggx_tensor * dst);
