// RMS_NORM and LAYER_NORM over rows of ne0 elements, optional weight/bias (f32/f16/bf16).
#pragma once

#include "common.cuh"

// With x16, the result goes there in fp16 instead of to dst (see ggx_cuda_ctx::x16_of).
enum ggx_status ggx_cuda_op_rms_norm(ggx_cuda_ctx & ctx, struct ggx_tensor * dst, half * x16 = nullptr);
enum ggx_status ggx_cuda_op_layer_norm(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);
bool            ggx_cuda_supports_norm(const struct ggx_tensor * dst);
// An ADD and the RMS_NORM right after it that reads its result (ggx_cuda_add_rms_norm_ok,
// decode-plan.h) in one kernel: it writes the sum and the norm (or, with x16, the norm in fp16
// for the prefill matmuls).
enum ggx_status ggx_cuda_op_add_rms_norm(ggx_cuda_ctx & ctx, struct ggx_tensor * add, struct ggx_tensor * norm,
                                         half * x16 = nullptr);

// The fused GEMVs' norm weights in q_perm order (norm-table.cu; ctx.norm_table_on): prepare builds,
// before a graph is captured, one table per matrix of the plan's normalising jobs that has a
// q_perm; table_for gives matrix i of a job its table, or null (the kernel then reads the norm
// weights through q_perm itself).
struct ggx_cuda_plan;
struct ggx_qgemv_job;
enum ggx_status ggx_cuda_norm_tables_prepare(ggx_cuda_ctx & ctx, const ggx_cuda_plan & plan);
const float *   ggx_cuda_norm_table_for(ggx_cuda_ctx & ctx, const ggx_qgemv_job & job, int i);
