// Decode matmul for EXL2 weights (T <= 8 rows): one launch computes up to four matrices that
// share an input, with the ops around them folded in so that a Llama layer takes five launches
// instead of twenty-five:
//
//   prologue  optional RMS norm of the input row(s) (the norm node is not run separately)
//   body      split-K GEMV over the packed words (16-byte loads, scales applied per group piece)
//   epilogue  the last block of each column tile sums the K-slices in a fixed order (results do
//             not depend on scheduling), then: + bias; one of store / + residual / GLU of a
//             gate-up pair; optional RoPE (whole heads per tile); optional store straight into
//             the KV cache rows at pos.
//
// The job descriptions come from fusion.cu, which matches these patterns in a ggx graph.
#pragma once

#include "common.cuh"

#define GGX_QGEMV_MAX_MATS 4

enum ggx_qgemv_epi {
    GGX_QGEMV_STORE = 0,   // y = W x (+ bias)
    GGX_QGEMV_ADD   = 1,   // y = resid + W x (+ bias)
    GGX_QGEMV_GLU   = 2,   // y = act(W_gate x) * (W_up x); the pair is two matrices of one job
};

struct ggx_qgemv_job_mat {
    const struct ggx_tensor * w = nullptr;       // EXL2 matrix {K, N}
    const struct ggx_tensor * bias = nullptr;    // f32 {N} or null
    struct ggx_tensor *       out = nullptr;     // result tensor [T][N] (unused when cache is set)
    const struct ggx_tensor * resid = nullptr;   // GGX_QGEMV_ADD
    struct ggx_tensor *       cache = nullptr;   // KV cache {N, C}: rows pos[t] receive the result
    int  epi = GGX_QGEMV_STORE;
    bool rope = false;                           // RoPE over heads of job.head_dim columns
    int  pair = -1;                              // GLU: index of the partner matrix
    bool is_gate = false;
};

struct ggx_qgemv_job {
    int n_mat = 0;
    int T = 0;
    const struct ggx_tensor * x = nullptr;       // f32 [T][K]
    bool norm = false;                           // RMS-normalise x first
    const struct ggx_tensor * norm_w = nullptr;  // norm weights {K} (f32/f16/bf16) or null
    float norm_eps = 0.0f;
    const struct ggx_tensor * pos = nullptr;     // i32 {T} (rope, cache rows)
    const struct ggx_tensor * freq_div = nullptr;
    struct ggx_params_rope rope = {};
    int head_dim = 0;
    int act = 0;                                 // enum ggx_act for GLU
    ggx_qgemv_job_mat m[GGX_QGEMV_MAX_MATS];
};

// K-slice height for a matrix of K rows and Np columns on this device (a multiple of 32).
int             ggx_cuda_qgemv_slice_rows(int K, int Np, int n_sm);
bool            ggx_cuda_qgemv_supports(const struct ggx_tensor * mul_mat);
// The job of one MUL_MAT node on its own: y = W x into the node's result.
ggx_qgemv_job   ggx_cuda_qgemv_single(struct ggx_tensor * mul_mat);
size_t          ggx_cuda_qgemv_scratch(const ggx_qgemv_job & job);
enum ggx_status ggx_cuda_qgemv_run(ggx_cuda_ctx & ctx, const ggx_qgemv_job & job);
