// Decode matmul for EXL2 weights (T <= 8 rows): one launch computes up to four matrices that
// share an input, with the ops around them folded in so that a Llama layer takes five launches
// instead of twenty-five:
//
//   prologue  optional RMS norm of the input row(s) (the norm node is not run separately)
//   body      split-K GEMV over the packed words (16-byte loads, scales applied per group piece)
//   epilogue  the last block of each column tile sums the K-slices in a fixed order (results do
//             not depend on scheduling), then: + bias; one of store / + residual / GLU of a
//             gate-up pair; optional RoPE (whole heads per tile); optional store straight into
//             the KV cache rows at pos. One-row jobs adding a residual in place (o, down) and
//             q/k/v jobs whose attention reads the q/k/v rows (decode-plan.h, ggx_attn_rows)
//             skip the last block: every K-slice adds its sums (q/k/v's rotated) with atomics.
//
// The job descriptions come from fusion.cu, which matches these patterns in a ggx graph.
#pragma once

#include "common.cuh"
#include "decode-plan.h"

// Jobs and plans: decode-plan.h.
size_t          ggx_cuda_qgemv_scratch(const ggx_cuda_ctx & ctx, const ggx_qgemv_job & job);
enum ggx_status ggx_cuda_qgemv_run(ggx_cuda_ctx & ctx, const ggx_qgemv_job & job);
