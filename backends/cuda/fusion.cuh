// Decode fusion: finds, in a bound ggx graph, the EXL2 matmuls with at most 8 rows and the ops
// around them that the fused GEMV (qgemv.cuh) can absorb:
//
//   RMS_NORM -> {MUL_MAT ...} sharing one input        the norm runs in the GEMV prologue
//   MUL_MAT -> ADD(bias)                                bias in the epilogue
//   MUL_MAT -> ROPE [-> KV_STORE]                       RoPE, and the store into the cache rows
//   MUL_MAT -> KV_STORE                                 store into the cache rows
//   MUL_MAT -> ADD(residual)                            residual add
//   MUL_MAT(gate), MUL_MAT(up) -> GLU                   the activation product
//
// A job runs at the position of its first matmul, so its outputs are written earlier than the
// graph says. The plan only fuses when the memory the planner assigned makes that safe: no byte
// the job writes is read or written by a node it passes over, and nothing it reads is
// overwritten in between. Otherwise each matmul runs alone, where the graph puts it.
#pragma once

#include "common.cuh"
#include "qgemv.cuh"

#include <vector>

struct ggx_cuda_plan {
    enum { RUN = -1, SKIP = -2 };
    std::vector<int>           action;   // per node: RUN, SKIP (folded into a job) or a job index
    std::vector<ggx_qgemv_job> jobs;
};

void ggx_cuda_plan_graph(const ggx_cuda_ctx & ctx, struct ggx_graph * g, ggx_cuda_plan & plan);
