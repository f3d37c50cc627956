// Element-wise ops: ADD, MUL (with {D} broadcast over rows), SCALE, SILU, GELU, SOFTCAP, GLU, CPY.
#pragma once

#include "common.cuh"

enum ggx_status ggx_cuda_op_binary(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);   // ADD, MUL
enum ggx_status ggx_cuda_op_unary(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);    // SCALE, SILU, GELU, SOFTCAP
// With x16, the result goes there in fp16 instead of to dst (see ggx_cuda_ctx::x16_of).
enum ggx_status ggx_cuda_op_glu(ggx_cuda_ctx & ctx, struct ggx_tensor * dst, half * x16 = nullptr);
enum ggx_status ggx_cuda_op_cpy(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);
bool            ggx_cuda_supports_elementwise(const struct ggx_tensor * dst);
