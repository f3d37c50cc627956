// The strip step: one persistent kernel that runs several one-row EXL2 GEMV stages in a row (a
// layer's o, gate/up and down, then the head), each block owning a strip of every matrix's
// columns over the full K (ggx/ggx-strip-layout.h), with a grid-wide counter between stages
// instead of a kernel boundary. No split-K: a block finishes its columns alone and applies the
// epilogue (store, residual add, gated activation) itself. bench/NOTES-cuda-decode.md ("A step
// kernel") has the measurements this shape comes from.
//
// One block of GGX_STRIP_WARPS warps per strip, one block per SM, all resident (the grid is the
// SM count at most, one block fits an SM). A stage: read what no stage's results change (inverse
// permutations, slice groups, the strip's unit descriptors and plan) into shared memory, and ask
// L2 for each warp's first units; wait for every block to finish the previous stage; stage x
// (RMS-normalised when asked, scaled by a power of two into fp16, written straight into each
// matrix's quantized row order); each warp walks its dealt units (contiguous, by bytes) width run
// by width run, lane l of a unit multiplying slice slice0 + l of the unit's quad (4 columns) in
// fp16 pairs (exl2-unpack.cuh's piece_dot), the scales loaded a unit ahead, the quad's sums kept
// in registers until the quad changes; then one warp reduction into shared memory and the
// owners' epilogue. The words come through registers (ggx_strip_form: one or two units in
// flight, optionally L2 prefetch further ahead) or through shared-memory rings filled by cp.async.
// The warps' sums meet in shared memory through float atomics, so the last bits of an output may
// differ from run to run.
//
// Experimental: ~86% of the backend's default decode speed (runs 89-92). Its loop is issue-bound
// (~4 instructions per weight): bench/NOTES-cuda-decode.md, session 14.
#pragma once

#if defined(GGX_USE_HIP)
#include "backends/hip/hip-compat.h"
#else
#include <cuda_runtime.h>
#endif

#include "ggx/ggx-strip-layout.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#define GGX_STRIP_WARPS      16
#define GGX_STRIP_MAX_STAGES 6

// One unit (ggx::StripUnit's fields): word rows offset .. offset + bits * lanes - 1 (uint4),
// [bits][lanes].
struct ggx_strip_unit {
    uint32_t offset, quad, slice0;
    uint32_t bits_lanes;   // bits | lanes << 8
};

// The layout's units as the kernel reads them (host side, before the upload).
inline std::vector<ggx_strip_unit> ggx_strip_units(const ggx::StripLayout & L) {
    std::vector<ggx_strip_unit> units;
    units.reserve(L.units.size());
    for (const ggx::StripUnit & u : L.units) units.push_back({u.offset, u.quad, u.slice0, (uint32_t)u.bits | (uint32_t)u.lanes << 8});
    return units;
}

// Quads of the layout's widest strip (ggx_strip_matrix::max_quads).
inline int ggx_strip_max_quads(const ggx::StripLayout & L) {
    int q = 0;
    for (int s = 0; s < L.n_strips; s++) q = std::max(q, L.strip_quad0[s + 1] - L.strip_quad0[s]);
    return q;
}

// Units of the layout's strip with the most (ggx_strip_matrix::max_units).
inline int ggx_strip_max_units(const ggx::StripLayout & L) {
    int u = 0;
    for (int s = 0; s < L.n_strips; s++) u = std::max(u, L.strip_unit0[s + 1] - L.strip_unit0[s]);
    return u;
}

// A matrix in the strip layout, in device memory.
struct ggx_strip_matrix {
    const uint4 *          words;
    const ggx_strip_unit * units;
    const int *            deal;          // [n_strips][GGX_STRIP_WARPS + 1] unit ranges per warp
    const uint16_t *       scales;        // fp16 [G][Np]
    const int *            slice_group;   // [K / 32]
    const int *            inv_perm;      // [K]: x[k] goes to quantized row inv_perm[k]; null: identity
    const int *            width_unit0;   // [n_strips][7]: each strip's units of each width (StripLayout::width_unit0)
    int K, Np, n_strips;
    int max_quads;                        // quads of the widest strip
    int max_units;                        // units of the strip with the most
};

enum ggx_strip_epi {
    GGX_STRIP_STORE = 0,   // y = W x (+ bias)
    GGX_STRIP_ADD   = 1,   // y = resid + W x (+ bias); y may be resid (in place)
    GGX_STRIP_GLU   = 2,   // y = act(W_0 x + b_0) * (W_1 x + b_1): m[0] is the gate, m[1] the up
};

// One GEMV stage: one matrix, or the two of a GLU (same N, so the same strips).
struct ggx_strip_stage {
    ggx_strip_matrix m[2];
    const float *    bias[2];    // f32 [N] or null
    int              n_mat;
    const float *    x;          // f32 [K], possibly written by an earlier stage
    int              K, N;
    const void *     norm_w;     // RMS norm weights {K} (norm_type f32 / f16 / bf16) or null
    int              norm, norm_type;
    float            norm_eps;
    int              epi, act;   // ggx_strip_epi; act: enum ggx_act for GLU
    float *          y;          // f32 [N]
    const float *    resid;      // GGX_STRIP_ADD
};

// How the loop reads the words and x. Every form computes the same sums; the forms exist to be
// measured against each other (bench/NOTES-cuda-decode.md, sessions 13-14).
struct ggx_strip_form {
    int ring;       // stream the words through shared memory (cp.async) instead of registers
    int xpad;       // x in shared memory padded to 40 halves per 32-row slice, so that a quarter-warp's
                    // 16-byte reads of 8 slices hit distinct banks (at 32: 4-way conflicts; the padding
                    // removed them but changed no time, run 89)
    int depth_lo;   // register form: units in flight per warp at 4, 3 and 2 bits, 1 or 2 (the wider
                    // widths keep 1: two of their units do not fit in 128 registers)
    int prefetch;   // units ahead of the multiply whose words each warp asks L2 for (sm_90; 0: none),
                    // and as many of each stage's first units before the stage's wait
};

struct ggx_strip_step {
    ggx_strip_stage st[GGX_STRIP_MAX_STAGES];
    int             n_stages;
    ggx_strip_form  form;
    int *           counter;     // zero before the launch; the kernel leaves it zero
};

// Dynamic shared memory a stage needs (x w in fp32 during the staging, or the warps' rings in
// the ring form; x in fp16 for every matrix; the column sums), and a whole step (the largest).
size_t ggx_strip_stage_smem(int n_mat, int K, int max_quads, int max_units, const ggx_strip_form & form);
size_t ggx_strip_step_smem(const ggx_strip_step & s);

struct ggx_trace_dev;   // trace.cuh (GGX_CUDA_TRACE)

// Runs the stages on `grid` blocks (at least every stage's n_strips, at most one per SM). The
// caller checks the shared memory against the device's limit first. trace: null, or where the
// backend's in-graph timeline records this launch (entry, stage 0's loop, the first three stage
// ends as points A, B, C, exit).
// pdl: launch as a programmatic dependent of the previous kernel (sm_90; the kernel waits for it
// before reading anything, and lets the next kernel launch once its last stage begins).
cudaError_t ggx_cuda_strip_step(const ggx_strip_step & s, int grid, cudaStream_t stream, bool pdl = false,
                                const ggx_trace_dev * trace = nullptr);

// One stage, one matrix, no norm, x already in quantized order (inv_perm ignored): y = W_q xq
// for the Np columns (tests and bench/probes/strip-time.cu). counter: one int of device memory.
cudaError_t ggx_cuda_strip_gemv(const ggx_strip_matrix & m, const float * xq, float * y, int * counter, cudaStream_t stream,
                                const ggx_strip_form & form = {});
