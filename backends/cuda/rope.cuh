// ROPE on x {hd, H, T} with positions read from device memory (pos i32 {T}), so a captured graph
// stays valid for every step. Optional per-frequency divisors f32 {n_rot/2} (Llama-3, YaRN, ...
// folded on the host).
#pragma once

#include "common.cuh"

enum ggx_status ggx_cuda_op_rope(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);
bool            ggx_cuda_supports_rope(const struct ggx_tensor * dst);
