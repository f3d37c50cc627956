// Host-side data of the CUDA backend's quantized decode path, with no CUDA device code so that
// host-only tests can include it: the per-matrix tables, the fused GEMV jobs (qgemv.cuh runs
// them) and the plan that finds them in a graph (fusion.cu).
//
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

#include "ggx/ggx.h"
#include "ggx/ggx-qmatrix.h"

#if defined(GGX_USE_HIP)
#include <hip/hip_vector_types.h>
#else
#include <vector_types.h>   // int4
#endif  // GGX_USE_HIP

#include <stddef.h>
#include <utility>
#include <vector>

#define GGX_CUDA_QGEMV_MAX_T 8

// Height of the fine K-slices of an EXL2 matrix's tables: a multiple of 32, so a chunk boundary at
// every width. The decode GEMV gives each warp group a run of them, its length chosen per launch.
#define GGX_QGEMV_FINE_ROWS 32
#define GGX_QGEMV_MAX_RUN 32   // fine slices per warp group at most (1024 rows of x in shared memory)
// Built with -DGGX_QGEMV_PAIR_GROUPS=1 (bench/variants.sh: pairgroups; measurements: tg128@16 -2.8%
// to +2% across layouts, runs 155 and 157, so not the default), the paired tables also join two
// adjacent groups' 32-row pieces at a pair's middle, and the decode GEMV scales the second half
// with the next group's scales. GGX_QGEMV_PAIR_GROUPS=0 in
// the environment turns that build's joins off, =2, =23 etc. allows them for those widths only
// (read as each matrix is prepared).
#ifndef GGX_QGEMV_PAIR_GROUPS
#define GGX_QGEMV_PAIR_GROUPS 0
#endif
// Built with -DGGX_QGEMV_COMPACT_HALVES=1 (bench/variants.sh: compact), a one-row GEMV walks the
// two halves of a 64-row piece with one copy of the code (qgemv.cu, piece_halves): a smaller loop
// body for the instruction cache, but tg128@16 -2.4% on llama3-8b 4.0 bpw (run 161), so a switch.
#ifndef GGX_QGEMV_COMPACT_HALVES
#define GGX_QGEMV_COMPACT_HALVES 0
#endif
// Built with -DGGX_QGEMV_MMA4=1 (bench/variants.sh: mma4), a one-row decode GEMV multiplies its
// 4-bit pieces on the tensor cores (qgemv.cu: tc4_apply) wherever all 128 columns of a warp exist:
// 294 instructions per 64-row piece instead of 548, but tg128@16 -5 to -7% on the H100 (run 212:
// the mma chains wait, and the build's other costs); -2.8% after the staging fix and one bias mma
// per chain (run 215). Not the default: on the H100 the loop cannot gain (112 SMs meet DRAM).
// CUDA only (HIP keeps the fp16 pairs).
#ifndef GGX_QGEMV_MMA4
#define GGX_QGEMV_MMA4 0
#endif
// Built with -DGGX_QGEMV_UNEVEN=1 (bench/variants.sh: uneven; a measurement), the decode GEMV's grid
// is (tiles, K-slices), so its blocks start K-slice by K-slice (all tiles' first K-slices, then
// their second, ...), and a one-row job may give the first half of its K-slices D more fine slices
// per warp group than m and the second half D fewer (GGX_QGEMV_UNEVEN_FOR=NAME:D; that build's
// default gate_proj:-1, D = m / 8 rounded down to even): the blocks that enter last, as the
// previous kernel's blocks exit, then have less to do (qgemv.cu, uneven_dm).
#ifndef GGX_QGEMV_UNEVEN
#define GGX_QGEMV_UNEVEN 0
#endif

// Per-matrix tables in device memory (ggx_qmatrix::backend_extra). The rows are cut into slices of
// slice_rows (GGX_QGEMV_FINE_ROWS for EXL2, whose slices are described by "pieces" (slice ∩ group)
// int4 {k0, qrow0, group << 5 | bits (bit 4: a 64-row piece across two groups), rows}, slice s
// owning pieces[first[s] .. first[s + 1]) of the host's ggx_cuda_piece_tables; the GPTQ GEMV's own
// height otherwise).
struct ggx_cuda_qextra {
    int    slice_rows = 0;
    int    n_slices = 0;
    int4 * pieces = nullptr;
    // The same over pairs of slices (EXL2): a 2-, 3- or 4-bit group's two 32-row pieces that meet
    // at the pair's middle are one piece of 64 rows. One-row GEMVs whose warp groups own whole pairs walk
    // it (fewer pieces, twice the bytes per piece in flight); results are the same bits.
    int4 * pieces2 = nullptr;
    // Head records of both tables (ggx_cuda_piece_heads): per slice (or pair) u, 4 int4s: the
    // descriptors of pieces first[u], first[u] + 1 and first[u] + 2, and {first[u], the word row
    // where piece first[u] - 1 ends, 0, 0}; u runs to the end marker, so [4 (n + 1)]. The decode
    // GEMV reads a warp group's first descriptors and its piece range from them in one L2 round
    // trip (a table of each slice's first piece, then the pieces, took two).
    int4 * heads = nullptr;
    int4 * heads2 = nullptr;
    // What the runs of m fine slices (m = 1 .. GGX_QGEMV_MAX_RUN) that the warp groups of a one-row
    // job walk cost, in rows of 64-row 4-bit pieces: the costliest run ([0][m]: the single tables,
    // [1][m]: the paired ones) and the mean ([2][m], [3][m]); ggx_cuda_qgemv_run_costs. All 0 when
    // unknown: the plan then counts rows.
    int    run_cost[4][GGX_QGEMV_MAX_RUN + 1] = {};
    int4 * groups = nullptr;        // per group {k0, qrow0, bits, rows} (EXL2 prefill)
    int    n_groups = 0;
    struct ggx_strip_matrix * strip = nullptr;   // strip-layout copy (strip-plan.cuh), GGX_CUDA_STEP=1 only
    struct ggx_tile_step_matrix * tile = nullptr;   // tile-layout copy (strip-plan.cuh), GGX_CUDA_STEP=tile only
    float * norm_wp = nullptr;            // norm weights in q_perm order (norm-table.cu)
    const void * norm_wp_of = nullptr;    // the norm weights they were read from
};

// The tables of quantized matrix w, or null when it has none (not prepared for this backend).
inline ggx_cuda_qextra * ggx_cuda_qextra_of(const struct ggx_tensor * w) {
    const ggx_qmatrix * q = (const ggx_qmatrix *)w->extra;
    return q ? (ggx_cuda_qextra *)q->backend_extra : nullptr;
}

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
    // Offset in floats into the backend's q/k/v rows (ggx_cuda_plan::rows_floats), or -1: every
    // K-slice adds its sums there, rotated (RoPE is linear), instead of storing into out or the
    // cache; the ATTN node reads them (ggx_cuda_plan::attn_rows).
    int64_t rows = -1;
};

// The attention of a one-row q/k/v job, computed in the job's tail (qgemv.cu, attn_tail; planned by
// fusion.cu when GGX_ATTN_TAIL is set): the ATTN node reading q's output and the f16 k and v caches
// the job stores into. While pos + 1 <= bound, the last block of each q tile walks the keys before
// pos for its heads (part A: an online-softmax state per head), and whichever of a group's
// producers (its q tiles, the k and v tiles holding its KV head) arrives last adds the key at pos
// and writes the result (part B); the attention kernel then only orders o after the job. Past the
// bound the attention kernel does it all, as without the tail. Correct on the GPU, but the tail
// took ~13 us per layer against attention's ~6.8 (run 161: tg128@16 -15.6% on llama3-8b), so
// GGX_ATTN_TAIL is off by default.
struct ggx_qgemv_attn {
    struct ggx_tensor * out = nullptr;   // the ATTN node: f32 [H][head_dim]
    int   q = -1, k = -1, v = -1;        // the job's matrices of q (RoPE, y), k and v (cache rows)
    int   H = 0, Hkv = 0;                // query and KV heads of job.head_dim columns
    float scale = 0.0f;
    int   bound = 0;                     // keys (pos + 1) the tail takes at most; 0: no tail
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
    ggx_qgemv_attn attn;                         // one-row q/k/v jobs only
    // Packed weight bytes of the plan's next GEMV job (ggx_cuda_plan_graph; 0: none, the head, or
    // not known): a job whose blocks all run to its end (ggx_cuda_qgemv_reduces) keeps SMs from that
    // job's first blocks, which the launch plan weighs (ggx_cuda_qgemv_group_slices).
    int64_t next_weight_bytes = 0;
};

// Where the ATTN node after a one-row q/k/v job finds q, and k and v at pos, in f32 (offsets in
// floats into the backend's q/k/v rows; -1: it reads q's result and the caches as the graph says).
// The attention kernel stores k and v into the caches at pos itself.
struct ggx_attn_rows {
    int64_t q = -1, k = -1, v = -1;
};

struct ggx_cuda_plan {
    enum { RUN = -1, SKIP = -2 };
    std::vector<int>           action;   // per node: RUN, SKIP (folded into a job) or a job index
    std::vector<ggx_qgemv_job> jobs;
    // Per node: set when an RMS_NORM, GLU or prefill ATTN feeds only the prefill matmuls right after
    // it, so it writes their fp16 x (ggx_cuda_ctx::x16_of) instead of its fp32 result, which
    // nothing reads.
    std::vector<const struct ggx_tensor *> x16_out;   // the tensor those matmuls read, or null
    // Per ADD node: the RMS_NORM node right after it that it computes too (that node is SKIP), or -1.
    std::vector<int>           add_norm;
    // Per ATTN node: the bound of the q/k/v job that computes it in its tail (ggx_qgemv_attn), or 0.
    // The node still runs: its kernel returns after its PDL wait while pos + 1 <= bound.
    std::vector<int>           attn_tail;
    // Per ATTN node: the q/k/v rows it reads (ggx_qgemv_job_mat::rows), and the floats the plan's
    // rows take in all (each job its own, so one clear at the start of each run serves all jobs).
    std::vector<ggx_attn_rows> attn_rows;
    int64_t                    rows_floats = 0;
};

// The pieces of an EXL2 matrix (groups: per group {k0, qrow0, bits, rows}, in order) over its
// 32-row slices, first[s] .. first[s + 1] for slice s, each {k0, qrow0, group << 5 | across << 4
// | bits, rows}; paired: over pairs of slices (pair j = slices 2j, 2j + 1), with a group's 32-row
// pieces on either side of a pair's middle joined into one of 64 rows when its width w (2, 3 or
// 4) has bit w set in join_bits, and when it has bit w set in across_bits too, also two adjacent
// groups' pieces of that width (across = 1: the second 32 rows belong to the next group;
// qmatrix.cu; host code, tested without a GPU).
void          ggx_cuda_list_pieces(const std::vector<int4> & groups, int K, bool paired, int join_bits, int across_bits,
                                   std::vector<int4> * pieces, std::vector<int> * first);
// ggx_cuda_qextra::run_cost of an EXL2 matrix from its pieces (ggx_cuda_list_pieces: single and
// paired tables; qmatrix.cu, host code, tested without a GPU).
void          ggx_cuda_qgemv_run_costs(const std::vector<int4> & pieces, const std::vector<int> & first,
                                       const std::vector<int4> & pieces2, const std::vector<int> & first2,
                                       int (*run_cost)[GGX_QGEMV_MAX_RUN + 1]);   // [4][...]
// The group table {k0, qrow0, bits, rows} of an EXL2 matrix whose groups are these (bits, rows) in
// order, as qmatrix.cu builds it from a loaded matrix (tests and bench/plan-report.cpp).
std::vector<int4> ggx_cuda_group_table(const std::vector<std::pair<int, int>> & groups);
// Both piece tables of an EXL2 matrix (groups as for ggx_cuda_list_pieces; the paired one with
// join_bits and across_bits) and the run costs over them (ggx_cuda_qgemv_run_costs): what
// preparing a matrix computes on the host (qmatrix.cu, tested without a GPU).
struct ggx_cuda_piece_tables {
    std::vector<int4> pieces, pieces2;
    std::vector<int>  first, first2;
    std::vector<int4> heads, heads2;   // ggx_cuda_piece_heads of each
};
// The head records of a piece table (ggx_cuda_qextra::heads): for each u of first (its end
// marker included) the descriptors of pieces first[u] .. first[u] + 2, each index clamped to the
// last piece (the kernel uses one only when it lies before the next record's first), then
// {first[u], the word row where piece first[u] - 1 ends (0 for none), 0, 0}. (qmatrix.cu; host
// code, tested without a GPU.)
void          ggx_cuda_piece_heads(const std::vector<int4> & pieces, const std::vector<int> & first,
                                   std::vector<int4> * heads);
void          ggx_cuda_build_piece_tables(const std::vector<int4> & groups, int K, int join_bits, int across_bits,
                                          ggx_cuda_piece_tables * tables, int (*run_cost)[GGX_QGEMV_MAX_RUN + 1]);
// A prepared EXL2 matrix without weights or device memory: the descriptor and tables
// ggx_cuda_qmatrix_prepare leaves for a K x N matrix, with the run costs of its groups ({bits,
// rows} in order, joined in the paired table as preparing joins them) or, without groups, none
// (the plan then counts rows). Host code (qmatrix.cu) for the plan tests and bench/plan-report;
// pm must stay where it is (its q points at its e).
struct ggx_cuda_plan_matrix {
    ggx_qmatrix     q = {};
    ggx_cuda_qextra e;
};
void          ggx_cuda_plan_matrix_init(ggx_cuda_plan_matrix & pm, int K, int N, const std::vector<std::pair<int, int>> * groups);
// The run costs (ggx_cuda_qextra::run_cost) of a K-row EXL2 matrix whose groups are these, as
// preparing it computes them.
void          ggx_cuda_layout_run_costs(const std::vector<std::pair<int, int>> & groups, int K, int (*run_cost)[GGX_QGEMV_MAX_RUN + 1]);
// Plans a bound graph (data pointers set). With fuse false every decode matmul is its own job. With
// attn_tail > 0, one-row q/k/v jobs whose attention the tail can take (ggx_qgemv_attn) take it
// while pos + 1 <= attn_tail (clipped to the cache rows and to GGX_ATTN_TAIL_MAX_KEYS). With
// qkv_rows, the other one-row q/k/v jobs whose ATTN node's kernel reads rows
// (ggx_cuda_attn_reads_rows) hand it their sums through the q/k/v rows (ggx_attn_rows).
void          ggx_cuda_plan_graph(bool fuse, struct ggx_graph * g, ggx_cuda_plan & plan, int attn_tail = 0, bool qkv_rows = false);
// The most keys the tail of a q/k/v job takes: its shared memory holds a score per key and head.
#define GGX_ATTN_TAIL_MAX_KEYS 1024
// Whether a q/k/v job's tail of this bound (ggx_qgemv_attn; 0: none) computes the attention of the
// one row at pos; otherwise the attention kernel does. The GEMV's tail and the attention kernels
// decide with this one test, on the device (constexpr: callable there).
constexpr bool ggx_attn_tail_takes(int pos, int bound) { return bound > 0 && pos >= 0 && pos + 1 <= bound; }
// Whether a MUL_MAT node can run as a decode GEMV job (EXL2 weights prepared for CUDA, f32 input
// of at most GGX_CUDA_QGEMV_MAX_T rows).
bool          ggx_cuda_qgemv_supports(const struct ggx_tensor * mul_mat);
// Whether this build's one-row decode GEMV takes 4-bit pieces on the tensor cores (GGX_QGEMV_MMA4
// on CUDA): its sums then differ in rounding from the fp16 pairs of multi-row GEMVs. For tests,
// which are host code built without the kernels' switches.
bool          ggx_cuda_qgemv_mma4(void);
// Decode GEMV jobs recorded with uneven K-slices in this process (the uneven build: decode-plan.h,
// GGX_QGEMV_UNEVEN); -1 in other builds.
long          ggx_cuda_qgemv_uneven_jobs(void);
// The job of one MUL_MAT node on its own: y = W x into the node's result.
ggx_qgemv_job ggx_cuda_qgemv_single(struct ggx_tensor * mul_mat);
// Fine slices per warp group (m) for a decode GEMV job on n_sm SMs: the launch shape qgemv.cu
// picks (its cost model; GGX_QGEMV_GROUP_ROWS overrides it).
// red: one-row jobs that add into their residual in place reduce their K-slices into it
// (ggx_cuda_ctx::red, GGX_QGEMV_RED).
int           ggx_cuda_qgemv_group_slices(const ggx_qgemv_job & job, int n_sm, bool red = true);
// Packed weight bytes of a job's matrices (q_weight: qrows x Np words each).
inline int64_t ggx_cuda_qgemv_weight_bytes(const ggx_qgemv_job & job) {
    int64_t b = 0;
    for (int i = 0; i < job.n_mat; i++) {
        const ggx_qmatrix * q = (const ggx_qmatrix *)job.m[i].w->extra;
        b += (int64_t)q->qrows * q->Np * 4;
    }
    return b;
}
// Whether a matrix of a job adds its residual in place: y is the residual's memory.
inline bool   ggx_qgemv_adds_in_place(const ggx_qgemv_job_mat & jm) {
    return jm.epi == GGX_QGEMV_ADD && jm.resid && jm.out && jm.resid->data == jm.out->data;
}
// Whether a job's K-slices add their sums into y when the backend reduces (qgemv.cu): one row, and
// every matrix adds its residual in place.
inline bool   ggx_cuda_qgemv_reduces(const ggx_qgemv_job & job) {
    bool all = job.T == 1 && job.n_mat > 0;
    for (int i = 0; i < job.n_mat; i++) all = all && ggx_qgemv_adds_in_place(job.m[i]);
    return all;
}
// The blocks a decode GEMV job launches with m fine slices per warp group.
int           ggx_cuda_qgemv_blocks(const ggx_qgemv_job & job, int m);
// Host predicates of other ops, used by the plan (defined with their kernels).
bool          ggx_cuda_supports_rows(const struct ggx_tensor * dst);
bool          ggx_cuda_supports_rope(const struct ggx_tensor * dst);
// Nodes that leave the prefill matmuls' fp16 x (ggx_cuda_ctx::x16_of) in place: views, RoPE and
// cache stores (they never touch the scratch buffer) and the quantized prefill matmuls (which
// keep it for a reader of the same x). The plan lets a producer's readers be separated by such
// nodes only; run_nodes clears x16_of before any other. q, k and v need this: the graph runs
// q's RoPE before k's matmul.
bool          ggx_cuda_keeps_x16(const struct ggx_tensor * n);
// A quantized MUL_MAT on the prefill path (qmatrix.cu): dequantize + cuBLAS over an fp16 x.
bool          ggx_cuda_qmatmul_is_prefill(const struct ggx_tensor * dst);
// An ADD of two same-size contiguous f32 tensors and an RMS_NORM reading exactly its result
// (norm.cu runs both in one kernel).
bool          ggx_cuda_add_rms_norm_ok(const struct ggx_tensor * add, const struct ggx_tensor * norm);
// An ATTN node on the tensor-core prefill path (attn.cu), which can write its result in fp16.
bool          ggx_cuda_attn_is_prefill(const struct ggx_tensor * dst);
// An ATTN node of one query row whose decode kernel can take q, and k and v at pos, from the q/k/v
// rows (f32) and store k and v into its f16 caches (attn.cu; ggx_attn_rows).
bool          ggx_cuda_attn_reads_rows(const struct ggx_tensor * dst);
// The tile step's split stage (q, k, v; tile-step.h): each of n matrices' share of n_sm blocks,
// proportional to bytes[i] (rounded), at least one block each, the shares contiguous (block0) and
// together the whole grid. False when n is not 1..n_sm.
bool          ggx_tile_split_shares(const double * bytes, int n, int n_sm, int * grid, int * block0);
