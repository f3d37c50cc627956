// The CUDA backend: device memory, the op dispatch switch, and graph execution through captured
// CUDA graphs.
//
// graph_compute(g): the first call for a graph sizes the shared scratch buffer (outside any
// capture), then captures every node's launches on the backend stream into a cudaGraph and
// instantiates it; the executable graph is cached in ggx_graph_backend_cache(g) together with the
// data pointers it was captured with. Later calls just launch it (one API call per step). When the
// pointers change (the graph was re-bound) it is captured again. GGX_CUDA_NO_GRAPH=1 runs the
// nodes directly (debugging, profiling).
#include "common.cuh"

#include "attn.cuh"
#include "elementwise.cuh"
#include "env-knobs.h"
#include "getrows.cuh"
#include "mmf.cuh"
#include "norm.cuh"
#include "qgemv.cuh"
#include "qmatrix.cuh"
#include "rope.cuh"
#include "softmax.cuh"
#include "strip-plan.cuh"
#include "strip-step.h"
#include "tile-step.h"
#include "topn.cuh"
#include "trace.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

ggx_status ggx_cuda_fail(cudaError_t err, const char * what, const char * file, int line) {
    const char * base = strrchr(file, '/');
    ggx_set_error("cuda: %s: %s (%s at %s:%d)", cudaGetErrorName(err), cudaGetErrorString(err), what,
                  base ? base + 1 : file, line);
    (void)cudaGetLastError();   // clear a sticky launch error so the next call reports its own
    return err == cudaErrorMemoryAllocation ? GGX_STATUS_ALLOC_FAILED : GGX_STATUS_FAILED;
}

ggx_status ggx_cublas_fail(cublasStatus_t st, const char * what, const char * file, int line) {
    const char * base = strrchr(file, '/');
    ggx_set_error("cuda: cuBLAS status %d (%s at %s:%d)", (int)st, what, base ? base + 1 : file, line);
    return st == CUBLAS_STATUS_ALLOC_FAILED ? GGX_STATUS_ALLOC_FAILED : GGX_STATUS_FAILED;
}

ggx_status ggx_cuda_carveout(const void * kernel, bool decode) {
#if !defined(GGX_USE_HIP)
    static const int p = ggx_env_int_in("GGX_CUDA_CARVEOUT", -1, 100, 100);
    static const bool all = ggx_env_flag("GGX_CUDA_CARVEOUT_ALL");
    if (p < 0 || !(decode || all)) return GGX_STATUS_OK;
    static std::mutex m;
    static std::set<const void *> done;   // one attribute call per kernel
    std::lock_guard<std::mutex> lock(m);
    if (!done.insert(kernel).second) return GGX_STATUS_OK;
    GGX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, p));
#else
    (void)kernel;
    (void)decode;
#endif  // !GGX_USE_HIP
    return GGX_STATUS_OK;
}

namespace {

ggx_cuda_ctx * ctx_of(ggx_backend * be) { return (ggx_cuda_ctx *)be->context; }

// ---- op routing ----------------------------------------------------------------------------
bool is_quantized(const ggx_tensor * t) { return t->type == GGX_TYPE_EXL2 || t->type == GGX_TYPE_GPTQ; }

int supports_op(ggx_backend *, const ggx_tensor * node) {
    for (int i = 0; i < GGX_MAX_SRC; i++) {
        const ggx_tensor * s = node->src[i];
        if (s && !is_quantized(s) && !ggx_is_contiguous(s)) return 0;
    }
    switch (node->op) {
        case GGX_OP_NONE:       return 1;
        case GGX_OP_GET_ROWS:
        case GGX_OP_KV_STORE:   return ggx_cuda_supports_rows(node);
        case GGX_OP_MUL_MAT:    return is_quantized(node->src[0]) ? ggx_cuda_supports_qmatmul(node) : ggx_cuda_supports_mmf(node);
        case GGX_OP_ADD:
        case GGX_OP_MUL:
        case GGX_OP_SCALE:
        case GGX_OP_SILU:
        case GGX_OP_GELU:
        case GGX_OP_GLU:
        case GGX_OP_SOFTCAP:
        case GGX_OP_CPY:        return ggx_cuda_supports_elementwise(node);
        case GGX_OP_RMS_NORM:
        case GGX_OP_LAYER_NORM: return ggx_cuda_supports_norm(node);
        case GGX_OP_ROPE:       return ggx_cuda_supports_rope(node);
        case GGX_OP_SOFTMAX:
        case GGX_OP_ARGMAX:     return node->src[0]->type == GGX_TYPE_F32;
        case GGX_OP_ATTN:       return ggx_cuda_supports_attn(node);
        default:                return 0;
    }
}

size_t node_scratch(const ggx_cuda_ctx & ctx, const ggx_tensor * node) {
    switch (node->op) {
        case GGX_OP_MUL_MAT:
            if (ggx_cuda_qgemv_supports(node)) return ggx_cuda_qgemv_scratch(ctx, ggx_cuda_qgemv_single((ggx_tensor *)node));
            return is_quantized(node->src[0]) ? ggx_cuda_qmatmul_scratch(ctx, node) : ggx_cuda_mmf_scratch(node);
        case GGX_OP_ATTN:    return ggx_cuda_attn_scratch(node);
        default:             return 0;
    }
}

ggx_status compute_node(ggx_cuda_ctx & ctx, ggx_tensor * node) {
    switch (node->op) {
        case GGX_OP_NONE:       return GGX_STATUS_OK;   // views: nothing to run
        case GGX_OP_GET_ROWS:   return ggx_cuda_op_get_rows(ctx, node);
        case GGX_OP_KV_STORE:   return ggx_cuda_op_kv_store(ctx, node);
        case GGX_OP_MUL_MAT:    return is_quantized(node->src[0]) ? ggx_cuda_op_qmatmul(ctx, node) : ggx_cuda_op_mmf(ctx, node);
        case GGX_OP_ADD:
        case GGX_OP_MUL:        return ggx_cuda_op_binary(ctx, node);
        case GGX_OP_SCALE:
        case GGX_OP_SILU:
        case GGX_OP_GELU:
        case GGX_OP_SOFTCAP:    return ggx_cuda_op_unary(ctx, node);
        case GGX_OP_GLU:        return ggx_cuda_op_glu(ctx, node);
        case GGX_OP_CPY:        return ggx_cuda_op_cpy(ctx, node);
        case GGX_OP_RMS_NORM:   return ggx_cuda_op_rms_norm(ctx, node);
        case GGX_OP_LAYER_NORM: return ggx_cuda_op_layer_norm(ctx, node);
        case GGX_OP_ROPE:       return ggx_cuda_op_rope(ctx, node);
        case GGX_OP_SOFTMAX:    return ggx_cuda_op_softmax(ctx, node);
        case GGX_OP_ARGMAX:     return ggx_cuda_op_argmax(ctx, node);
        case GGX_OP_ATTN:       return ggx_cuda_op_attn(ctx, node);
        default:
            ggx_set_error("cuda: op %s not implemented", ggx_op_name(node->op));
            return GGX_STATUS_UNSUPPORTED;
    }
}

ggx_status ensure_scratch(ggx_cuda_ctx & ctx, size_t need) {
    if (need <= ctx.scratch_size) return GGX_STATUS_OK;
    need = (need + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
    void * p = nullptr;
    cudaError_t err = cudaMalloc(&p, need);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        ggx_set_error("cuda:%d: out of memory for %zu MiB of scratch (%s)", ctx.device, need >> 20, cudaGetErrorString(err));
        return GGX_STATUS_ALLOC_FAILED;
    }
    if (ctx.scratch) ctx.retired.push_back(ctx.scratch);
    ctx.scratch = p;
    ctx.scratch_size = need;
    return GGX_STATUS_OK;
}

// The q/k/v rows of a plan (decode-plan.h, ggx_attn_rows): grown like the scratch.
ggx_status ensure_qkv_rows(ggx_cuda_ctx & ctx, int64_t floats) {
    if (floats <= ctx.qkv_rows_floats) return GGX_STATUS_OK;
    void * p = nullptr;
    cudaError_t err = cudaMalloc(&p, sizeof(float) * floats);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        ggx_set_error("cuda:%d: out of memory for %lld KiB of q/k/v rows (%s)", ctx.device, (long long)(sizeof(float) * floats >> 10),
                      cudaGetErrorString(err));
        return GGX_STATUS_ALLOC_FAILED;
    }
    if (ctx.qkv_rows) ctx.retired.push_back(ctx.qkv_rows);
    ctx.qkv_rows = (float *)p;
    ctx.qkv_rows_floats = floats;
    return GGX_STATUS_OK;
}

// ---- graph cache ---------------------------------------------------------------------------
struct graph_cache {
    ggx_backend *       be = nullptr;
    cudaGraphExec_t     exec = nullptr;
    std::vector<void *> sig;          // data pointers the graph was captured with
};

void graph_cache_free(void * p) {
    graph_cache * gc = (graph_cache *)p;
    if (gc->exec) (void)cudaGraphExecDestroy(gc->exec);
    delete gc;
}

std::vector<void *> graph_signature(const ggx_cuda_ctx & ctx, ggx_graph * g) {
    std::vector<void *> sig;
    sig.push_back(ctx.scratch);
    sig.push_back(ctx.qkv_rows);
    sig.push_back((void *)(uintptr_t)ctx.deterministic);   // the plan and the GEMVs' sums depend on it
    for (int i = 0; i < ggx_graph_n_nodes(g); i++) {
        const ggx_tensor * n = ggx_graph_node(g, i);
        sig.push_back(n->data);
        for (const ggx_tensor * s : n->src) sig.push_back(s ? s->data : nullptr);
    }
    return sig;
}

// Profiling (GGX_CUDA_PROFILE=1): nodes run eagerly between two events; the time is added to a
// bucket named after the op (and, for matmuls, the weight type and batch class).
struct prof_entry { double ms = 0; long n = 0; };
using prof_table = std::map<std::string, prof_entry>;

std::string prof_key(const ggx_tensor * n) {
    std::string k = ggx_op_name(n->op);
    if (n->op == GGX_OP_MUL_MAT || n->op == GGX_OP_ATTN) {
        const int64_t T = n->op == GGX_OP_MUL_MAT ? ggx_nrows(n->src[1]) : n->src[0]->ne[2];
        k += std::string(" ") + ggx_type_name(n->src[n->op == GGX_OP_MUL_MAT ? 0 : 1]->type) + (T <= 8 ? " T<=8" : " T>8");
    }
    return k;
}

void prof_print(ggx_cuda_ctx & ctx) {
    prof_table * t = (prof_table *)ctx.prof;
    if (!t || t->empty()) return;
    double total = 0;
    for (auto & e : *t) total += e.second.ms;
    fprintf(stderr, "ggx-cuda profile (%s): %.3f ms in nodes\n", ctx.name, total);
    for (auto & e : *t)
        fprintf(stderr, "  %-28s %10.3f ms %6.1f%% %8ld calls %9.2f us/call\n", e.first.c_str(), e.second.ms,
                100.0 * e.second.ms / total, e.second.n, 1000.0 * e.second.ms / e.second.n);
}

std::string job_key(const ggx_qgemv_job & job) {
    std::string k = "qgemv x" + std::to_string(job.n_mat);
    if (job.norm) k += " +norm";
    for (int i = 0; i < job.n_mat; i++) {
        const ggx_qgemv_job_mat & m = job.m[i];
        if (m.rope) { k += " +rope"; break; }
    }
    for (int i = 0; i < job.n_mat; i++) {
        const ggx_qgemv_job_mat & m = job.m[i];
        if (m.epi == GGX_QGEMV_ADD) { k += " +add"; break; }
        if (m.epi == GGX_QGEMV_GLU) { k += " +glu"; break; }
    }
    return k + (job.T <= 1 ? " T=1" : " T<=8");
}

// A producer planned to write the next prefill matmuls' fp16 x (ggx_cuda_plan::x16_out).
ggx_status compute_x16(ggx_cuda_ctx & ctx, ggx_tensor * node) {
    half * x16 = (half *)ctx.scratch;
    switch (node->op) {
        case GGX_OP_RMS_NORM: return ggx_cuda_op_rms_norm(ctx, node, x16);
        case GGX_OP_GLU:      return ggx_cuda_op_glu(ctx, node, x16);
        case GGX_OP_ATTN:     return ggx_cuda_op_attn(ctx, node, x16);
        default: ggx_set_error("cuda: %s cannot write an fp16 matmul input", ggx_op_name(node->op)); return GGX_STATUS_FAILED;
    }
}

// With GGX_CUDA_STEP=1 or tile: the jobs from node i on that can run as one step (consecutive jobs,
// only folded nodes between them, each ggx_cuda_strip_job_ok); *last gets the last one's node.
std::vector<const ggx_qgemv_job *> strip_run_at(const ggx_cuda_ctx & ctx, ggx_graph * g, const ggx_cuda_plan & plan, int i,
                                                int * last) {
    std::vector<const ggx_qgemv_job *> run;
    if (!ctx.steps_on()) return run;
    for (int j = i; j < ggx_graph_n_nodes(g) && (int)run.size() < GGX_STRIP_MAX_STAGES; j++) {
        const int act = plan.action[j];
        if (act == ggx_cuda_plan::SKIP) continue;
        if (act < 0 || !ggx_cuda_strip_job_ok(ctx, plan.jobs[act])) break;
        run.push_back(&plan.jobs[act]);
        *last = j;
    }
    return run;
}

ggx_status run_nodes(ggx_cuda_ctx & ctx, ggx_graph * g, const ggx_cuda_plan & plan) {
    cudaEvent_t ev[2] = {nullptr, nullptr};
    if (ctx.profile) {
        if (!ctx.prof) ctx.prof = new prof_table();
        GGX_CUDA_CHECK(cudaEventCreate(&ev[0]));
        GGX_CUDA_CHECK(cudaEventCreate(&ev[1]));
    }
    ctx.x16_of = nullptr;   // the scratch may have moved, and x's data changed, since the last graph
    GGX_RETURN_IF_ERR(ggx_cuda_rope_table_begin(ctx, plan));
    // the jobs' q/k/v rows start at zero (their K-slices add into them)
    if (plan.rows_floats > 0) GGX_CUDA_CHECK(cudaMemsetAsync(ctx.qkv_rows, 0, sizeof(float) * plan.rows_floats, ctx.stream));
    for (int i = 0; i < ggx_graph_n_nodes(g); i++) {
        ggx_tensor * n = ggx_graph_node(g, i);
        const int act = plan.action[i];
        if (act == ggx_cuda_plan::SKIP) continue;
        if (act >= 0 || !ggx_cuda_keeps_x16(n)) ctx.x16_of = nullptr;
        if (ctx.profile && n->op != GGX_OP_NONE) (void)cudaEventRecord(ev[0], ctx.stream);
        const int fn = plan.add_norm[i];   // the norm this add computes too
        const ggx_tensor * x16_of = plan.x16_out[fn >= 0 ? fn : i];
        int last = i;
        const std::vector<const ggx_qgemv_job *> run = act >= 0 ? strip_run_at(ctx, g, plan, i, &last) : std::vector<const ggx_qgemv_job *>();
        i = last;   // past a run, its last job; the loop goes on after it
        ggx_status st = !run.empty() ? ggx_cuda_strip_run(ctx, run.data(), (int)run.size())
                      : act >= 0  ? ggx_cuda_qgemv_run(ctx, plan.jobs[act])
                      : fn >= 0   ? ggx_cuda_op_add_rms_norm(ctx, n, ggx_graph_node(g, fn), x16_of ? (half *)ctx.scratch : nullptr)
                      : x16_of    ? compute_x16(ctx, n)
                      : plan.attn_tail[i] ? ggx_cuda_op_attn(ctx, n, nullptr, plan.attn_tail[i])
                      : plan.attn_rows[i].q >= 0 ? ggx_cuda_op_attn(ctx, n, nullptr, 0, &plan.attn_rows[i])
                                  : compute_node(ctx, n);
        if (st == GGX_STATUS_OK && x16_of) ctx.x16_of = x16_of;
        if (act >= 0 || n->op != GGX_OP_NONE) ctx.rope_table_fresh = false;   // a kernel ran after the table's
        if (ctx.profile && n->op != GGX_OP_NONE && st == GGX_STATUS_OK) {
            (void)cudaEventRecord(ev[1], ctx.stream);
            (void)cudaEventSynchronize(ev[1]);
            float ms = 0;
            (void)cudaEventElapsedTime(&ms, ev[0], ev[1]);
            prof_entry & e = (*(prof_table *)ctx.prof)[!run.empty() ? std::string(ctx.step_tile ? "tile" : "strip") + " step x" + std::to_string(run.size())
                                                       : act >= 0    ? job_key(plan.jobs[act])
                                                                     : prof_key(n)];
            e.ms += ms;
            e.n++;
        }
        if (st != GGX_STATUS_OK) {
            std::string msg = ggx_last_error();
            ggx_set_error("%s (node %d '%s', op %s)", msg.c_str(), i, n->name, ggx_op_name(n->op));
            return st;
        }
    }
    if (ev[0]) (void)cudaEventDestroy(ev[0]);
    if (ev[1]) (void)cudaEventDestroy(ev[1]);
    return GGX_STATUS_OK;
}

// Checks every node, plans the fused decode jobs and sizes the scratch buffer for them.
ggx_status prepare(ggx_backend * be, ggx_graph * g, ggx_cuda_plan & plan) {
    ggx_cuda_ctx & ctx = *ctx_of(be);
    size_t need = 0;
    for (int i = 0; i < ggx_graph_n_nodes(g); i++) {
        const ggx_tensor * n = ggx_graph_node(g, i);
        if (n->op != GGX_OP_NONE && !supports_op(be, n)) {
            ggx_set_error("cuda: node %d '%s' (op %s, src0 %s) is not supported", i, n->name, ggx_op_name(n->op),
                          n->src[0] ? ggx_type_name(n->src[0]->type) : "-");
            return GGX_STATUS_UNSUPPORTED;
        }
        need = std::max(need, node_scratch(ctx, n));
    }
    // the steps (GGX_CUDA_STEP) run their own q/k/v stages, without the attention tail
    ggx_cuda_plan_graph(ctx.fuse, g, plan, ctx.steps_on() ? 0 : ctx.attn_tail, !ctx.steps_on() && ctx.adds_slices() && ctx.qkv_rows_on);
    GGX_RETURN_IF_ERR(ggx_cuda_rope_table_prepare(ctx, plan));   // (before the capture: it allocates)
    GGX_RETURN_IF_ERR(ensure_qkv_rows(ctx, plan.rows_floats));   // (likewise)
    GGX_RETURN_IF_ERR(ggx_cuda_norm_tables_prepare(ctx, plan));  // (likewise)
    for (const ggx_qgemv_job & job : plan.jobs) {
        need = std::max(need, ggx_cuda_qgemv_scratch(ctx, job));
        if (ctx.steps_on() && ctx.step_tile) GGX_RETURN_IF_ERR(ggx_cuda_tile_fit(ctx, job));   // (before the capture: it allocates)
    }
    return ensure_scratch(ctx, need);
}

ggx_status graph_compute_step(ggx_backend * be, ggx_graph * g) {
    ggx_cuda_ctx & ctx = *ctx_of(be);
    GGX_CUDA_CHECK(cudaSetDevice(ctx.device));
    ggx_cuda_plan plan;
    if (!ctx.use_graphs || ctx.profile) {
        GGX_RETURN_IF_ERR(prepare(be, g, plan));
        return run_nodes(ctx, g, plan);
    }

    // A captured graph replays as long as every data pointer (and the scratch buffer) is the
    // same: then the nodes were checked and planned when it was captured, and the step costs the
    // host only the signature (the GPU waits for the host between tokens).
    void ** slot = ggx_graph_backend_cache(g);
    graph_cache * gc = (graph_cache *)*slot;
    if (gc && gc->exec && gc->be == be && gc->sig == graph_signature(ctx, g)) {
        GGX_CUDA_CHECK(cudaGraphLaunch(gc->exec, ctx.stream));
        return GGX_STATUS_OK;
    }
    GGX_RETURN_IF_ERR(prepare(be, g, plan));   // may grow (move) the scratch buffer
    if (gc && gc->exec) {
        (void)cudaGraphExecDestroy(gc->exec);
        gc->exec = nullptr;
    }
    if (!gc) {
        gc = new graph_cache();
        *slot = gc;
        ggx_graph_set_backend_cache_free(g, graph_cache_free);
    }
    gc->be = be;
    gc->sig = graph_signature(ctx, g);
    cudaGraph_t graph = nullptr;
    GGX_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
    ggx_status st = run_nodes(ctx, g, plan);
    cudaError_t err = cudaStreamEndCapture(ctx.stream, &graph);
    if (st != GGX_STATUS_OK) {
        if (graph) (void)cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        return st;
    }
    if (err != cudaSuccess) return ggx_cuda_fail(err, "cudaStreamEndCapture", __FILE__, __LINE__);
    err = cudaGraphInstantiate(&gc->exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (err != cudaSuccess) {
        gc->exec = nullptr;
        return ggx_cuda_fail(err, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    GGX_CUDA_CHECK(cudaGraphLaunch(gc->exec, ctx.stream));
    return GGX_STATUS_OK;
}

ggx_status graph_compute(ggx_backend * be, ggx_graph * g) {
    ggx_cuda_ctx & ctx = *ctx_of(be);
    const bool traced = ggx_cuda_trace_step_begin(ctx);
    const ggx_status st = graph_compute_step(be, g);
    return traced && st == GGX_STATUS_OK ? ggx_cuda_trace_step_end(ctx) : st;
}

// ---- memory ----------------------------------------------------------------------------------
ggx_status be_alloc(ggx_backend * be, size_t size, void ** out) {
    ggx_cuda_ctx & ctx = *ctx_of(be);
    *out = nullptr;
    GGX_CUDA_CHECK(cudaSetDevice(ctx.device));
#if defined(GGX_USE_HIP)
    cudaError_t err = cudaMalloc(out, std::max<size_t>(size, 1));
#else
    // From the device's stream-ordered pool, which packs allocations into large chunks
    // (cudaMalloc gave each quantized layer its own whole pages: see RESULTS.md, session 5).
    cudaError_t err = cudaMallocAsync(out, std::max<size_t>(size, 1), ctx.stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(ctx.stream);   // usable from any stream or copy
#endif  // GGX_USE_HIP
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        size_t fr = 0, tot = 0;
        (void)cudaMemGetInfo(&fr, &tot);
        ggx_set_error("cuda:%d: out of memory allocating %.1f MiB (%.1f MiB free of %.1f MiB)", ctx.device,
                      size / 1048576.0, fr / 1048576.0, tot / 1048576.0);
        *out = nullptr;
        return GGX_STATUS_ALLOC_FAILED;
    }
    return GGX_STATUS_OK;
}

void be_dealloc(ggx_backend * be, void * p) {
    if (!p) return;
    (void)cudaStreamSynchronize(ctx_of(be)->stream);
#if defined(GGX_USE_HIP)
    (void)cudaFree(p);
#else
    (void)cudaFreeAsync(p, ctx_of(be)->stream);
    (void)cudaStreamSynchronize(ctx_of(be)->stream);   // the pool returns the memory here
#endif  // GGX_USE_HIP
}

// A copy from pageable memory may make the driver wait for the stream before staging it (CUDA's
// "API synchronization behavior"), which would hold the host until the step queued before it is
// done: greedy run-ahead uploads the next step's position while the current step runs. Small
// uploads therefore go through pinned slots, which copy asynchronously.
ggx_status be_set(ggx_backend * be, void * dst, const void * src, size_t n) {
    if (n == 0) return GGX_STATUS_OK;
    ggx_cuda_ctx & ctx = *ctx_of(be);
    if (ctx.small && n <= (size_t)ggx_cuda_ctx::k_small_bytes) {
        const int i = ctx.small_next;
        ctx.small_next = (i + 1) % ggx_cuda_ctx::k_small_slots;
        if (ctx.small_used[i]) GGX_CUDA_CHECK(cudaEventSynchronize(ctx.small_done[i]));   // its last copy has run
        unsigned char * slot = ctx.small + (size_t)i * ggx_cuda_ctx::k_small_bytes;
        memcpy(slot, src, n);
        GGX_CUDA_CHECK(cudaMemcpyAsync(dst, slot, n, cudaMemcpyHostToDevice, ctx.stream));
        GGX_CUDA_CHECK(cudaEventRecord(ctx.small_done[i], ctx.stream));
        ctx.small_used[i] = true;
        return GGX_STATUS_OK;
    }
    GGX_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, ctx.stream));
    return GGX_STATUS_OK;
}

ggx_status be_get(ggx_backend * be, void * dst, const void * src, size_t n) {
    if (n == 0) return GGX_STATUS_OK;
    GGX_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, ctx_of(be)->stream));
    GGX_CUDA_CHECK(cudaStreamSynchronize(ctx_of(be)->stream));
    return GGX_STATUS_OK;
}

ggx_status be_memset(ggx_backend * be, void * dst, int value, size_t n) {
    if (n == 0) return GGX_STATUS_OK;
    GGX_CUDA_CHECK(cudaMemsetAsync(dst, value, n, ctx_of(be)->stream));
    return GGX_STATUS_OK;
}

ggx_status be_copy(ggx_backend * be, void * dst, const void * src, size_t n) {
    if (n == 0) return GGX_STATUS_OK;
    GGX_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, ctx_of(be)->stream));
    return GGX_STATUS_OK;
}

// The token read of a greedy step: queued behind the step, awaited while the next step (queued
// after it) already runs. The mailbox is pinned, so the copy is truly asynchronous.
ggx_status be_get_begin(ggx_backend * be, const void * src, size_t n) {
    ggx_cuda_ctx & ctx = *ctx_of(be);
    GGX_CUDA_CHECK(cudaMemcpyAsync(ctx.mailbox, src, n, cudaMemcpyDeviceToHost, ctx.stream));
    GGX_CUDA_CHECK(cudaEventRecord(ctx.mailbox_ready, ctx.stream));
    return GGX_STATUS_OK;
}

ggx_status be_get_end(ggx_backend * be, void * dst, size_t n) {
    ggx_cuda_ctx & ctx = *ctx_of(be);
    GGX_CUDA_CHECK(cudaEventSynchronize(ctx.mailbox_ready));
    memcpy(dst, ctx.mailbox, n);
    return GGX_STATUS_OK;
}

ggx_status be_top_n(ggx_backend * be, const void * src, int64_t count, int n, int32_t * ids, float * values) {
    return ggx_cuda_top_n(*ctx_of(be), (const float *)src, count, n, ids, values);
}

ggx_status be_top_n_begin(ggx_backend * be, const void * src, int64_t count, int n, const ggx_draw * draw, void * id_dst) {
    return ggx_cuda_top_n_begin(*ctx_of(be), (const float *)src, count, n, draw, id_dst);
}

ggx_status be_top_n_end(ggx_backend * be, int32_t * ids, float * values, int32_t * drawn) {
    return ggx_cuda_top_n_end(*ctx_of(be), ids, values, drawn);
}

// Repeatable results: no K-slice adds its sums with atomics (the EXL2 decode GEMV's o, down and
// q/k/v rows take the split-K hand-off, whose last block adds the partials in order; the GPTQ
// GEMV sums its slices' partials in order), and the GGX_CUDA_STEP steps are not used (steps_on).
// Graphs planned the other way are captured again (the signature holds the mode).
ggx_status be_set_deterministic(ggx_backend * be, int on) {
    ggx_cuda_ctx * ctx = ctx_of(be);
    if (on && ctx->strip_step && !ctx->deterministic)
        fprintf(stderr, "ggx-cuda: GGX_CUDA_STEP is ignored while results must repeat (its steps add sums in no fixed order)\n");
    ctx->deterministic = on != 0;
    return GGX_STATUS_OK;
}

ggx_status be_synchronize(ggx_backend * be) {
    GGX_CUDA_CHECK(cudaStreamSynchronize(ctx_of(be)->stream));
    return GGX_STATUS_OK;
}

ggx_status be_qmatrix_prepare(ggx_backend * be, ggx_tensor * t) { return ggx_cuda_qmatrix_prepare(*ctx_of(be), t); }
void be_qmatrix_release(ggx_backend * be, ggx_tensor * t) { ggx_cuda_qmatrix_release(*ctx_of(be), t); }

void be_memory_info(ggx_backend * be, size_t * fr, size_t * tot) {
    (void)cudaSetDevice(ctx_of(be)->device);
    if (cudaMemGetInfo(fr, tot) != cudaSuccess) {
        (void)cudaGetLastError();
        *fr = *tot = 0;
    }
}

void be_free(ggx_backend * be) {
    if (!be) return;
    ggx_cuda_ctx * ctx = ctx_of(be);
    if (ctx) {
        (void)cudaSetDevice(ctx->device);
        prof_print(*ctx);
        delete (prof_table *)ctx->prof;
        if (ctx->stream) (void)cudaStreamSynchronize(ctx->stream);
        ggx_cuda_trace_free(*ctx);
#if !defined(GGX_NO_BLAS)
        if (ctx->cublas) cublasDestroy(ctx->cublas);
#endif  // !GGX_NO_BLAS
        (void)cudaFree(ctx->cublas_ws);
        (void)cudaFree(ctx->scratch);
        (void)cudaFree(ctx->counters);
        (void)cudaFree(ctx->rope_table);
        (void)cudaFree(ctx->qkv_rows);
        ggx_cuda_top_n_release(*ctx);
        if (ctx->mailbox_ready) (void)cudaEventDestroy(ctx->mailbox_ready);
        if (ctx->mailbox) (void)cudaFreeHost(ctx->mailbox);
        for (cudaEvent_t ev : ctx->small_done)
            if (ev) (void)cudaEventDestroy(ev);
        if (ctx->small) (void)cudaFreeHost(ctx->small);
        for (void * p : ctx->retired) (void)cudaFree(p);
        if (ctx->stream) (void)cudaStreamDestroy(ctx->stream);
        delete ctx;
    }
    delete be;
}

__global__ void k_probe(int * p) { if (p) *p = 1; }

}  // namespace

extern "C" long ggx_backend_cuda_strip_stages(ggx_backend * be) { return be ? ctx_of(be)->strip_stages : 0; }
extern "C" long ggx_backend_cuda_rope_table_jobs(ggx_backend * be) { return be ? ctx_of(be)->rope_table_jobs : 0; }
extern "C" long ggx_backend_cuda_norm_table_mats(ggx_backend * be) { return be ? ctx_of(be)->norm_table_mats : 0; }
extern "C" long ggx_backend_cuda_attn_tail_jobs(ggx_backend * be) { return be ? ctx_of(be)->attn_tail_jobs : 0; }
extern "C" long ggx_backend_cuda_qkv_rows_jobs(ggx_backend * be) { return be ? ctx_of(be)->qkv_rows_jobs : 0; }
extern "C" long ggx_backend_cuda_pair_group_pieces(ggx_backend * be) {
    return !GGX_QGEMV_PAIR_GROUPS ? -1 : be ? ctx_of(be)->pair_group_pieces : 0;
}

extern "C" ggx_backend * ggx_backend_cuda_init(int device) {
    int n_dev = 0;
    cudaError_t err = cudaGetDeviceCount(&n_dev);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
#if defined(GGX_USE_HIP)
        ggx_set_error("hip: no usable AMD GPU (%s: %s)", cudaGetErrorName(err), cudaGetErrorString(err));
#else
        ggx_set_error("cuda: no usable CUDA device (%s: %s)", cudaGetErrorName(err), cudaGetErrorString(err));
#endif
        return nullptr;
    }
    if (device < 0 || device >= n_dev) {
        ggx_set_error("cuda: device %d does not exist (%d device%s found)", device, n_dev, n_dev == 1 ? "" : "s");
        return nullptr;
    }
    cudaDeviceProp prop;
    if ((err = cudaGetDeviceProperties(&prop, device)) != cudaSuccess || (err = cudaSetDevice(device)) != cudaSuccess) {
        (void)cudaGetLastError();
        ggx_set_error("cuda:%d: cannot use device (%s)", device, cudaGetErrorString(err));
        return nullptr;
    }
    // A launch fails with "no kernel image" when this build has no code for the device's arch.
    k_probe<<<1, 1>>>(nullptr);
    err = cudaDeviceSynchronize();
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        ggx_set_error("cuda:%d: %s (compute capability %d.%d) cannot run this build's kernels: %s", device, prop.name,
                      prop.major, prop.minor, cudaGetErrorString(err));
        return nullptr;
    }
    ggx_cuda_ctx * ctx = new ggx_cuda_ctx();
    ggx_backend * be = new ggx_backend();
    memset(be, 0, sizeof *be);
    be->context = ctx;
    ctx->device = device;
    ctx->n_sm = prop.multiProcessorCount;
    ctx->cc_major = prop.major;
    ctx->cc_minor = prop.minor;
#if defined(GGX_USE_HIP)
    ctx->smem_optin = prop.sharedMemPerBlock;
#else
    ctx->smem_optin = prop.sharedMemPerBlockOptin;
    ctx->smem_per_sm = prop.sharedMemPerMultiprocessor;
#endif  // GGX_USE_HIP
    ctx->use_graphs = !ggx_env_flag("GGX_CUDA_NO_GRAPH");
    ctx->profile = ggx_env_flag("GGX_CUDA_PROFILE");
    ctx->pdl = prop.major >= 9 && !ggx_env_flag("GGX_CUDA_NO_PDL");
    ctx->fuse = !ggx_env_flag("GGX_CUDA_NO_FUSE");
    ctx->strip_step = ggx_env_flag("GGX_CUDA_STEP");
    ctx->step_tile = ctx->strip_step && strcmp(getenv("GGX_CUDA_STEP"), "tile") == 0;
    ctx->tile_warps = ggx_tile_step_warps(ggx_env_int_in("GGX_CUDA_STEP_TILE_WARPS", 12, 16, 16));
    ctx->tile_split = ggx_env_int_in("GGX_CUDA_STEP_TILE_QKV", 0, 1, 1) != 0;
    ctx->attn_tail = ggx_env_int_in("GGX_ATTN_TAIL", 0, GGX_ATTN_TAIL_MAX_KEYS, 0);
    ctx->red = ggx_env_int_in("GGX_QGEMV_RED", 0, 1, 1) != 0;
    ctx->qkv_rows_on = ggx_env_int_in("GGX_QKV_ROWS", 0, 1, 1) != 0;
#if defined(GGX_USE_HIP)
    // its units are 32 lanes wide, one per slice: not written for 64-wide wavefronts, never run on AMD
    if (ctx->strip_step) fprintf(stderr, "ggx-cuda: GGX_CUDA_STEP is not available in the HIP build; ignored\n");
    ctx->strip_step = false;
    ctx->step_tile = false;
#endif
    ctx->strip_ring = ggx_env_flag("GGX_CUDA_STEP_RING");
    ctx->strip_xpad = ggx_env_flag("GGX_CUDA_STEP_XPAD");
    ctx->strip_depth = ggx_env_int_in("GGX_CUDA_STEP_DEPTH", 1, 2, 1);
    ctx->strip_prefetch = ggx_env_int_in("GGX_CUDA_STEP_PREFETCH", 0, 16, 0);   // units
    ctx->prefetch = !ggx_env_flag("GGX_CUDA_NO_PREFETCH");
    ctx->rope_table_on = ggx_env_int_in("GGX_QGEMV_ROPE_TABLE", 0, 1, 1) != 0;   // run 143: +1.9% (8B), +2.4% (1B)
    ctx->norm_table_on = ggx_env_int_in("GGX_QGEMV_NORM_TABLE", 0, 1, 1) != 0;   // run 143: +0.3-0.5% (8B), +1.1% (1B)
    ggx_cuda_trace_init(*ctx);
    snprintf(ctx->name, sizeof ctx->name, "cuda:%d", device);
    auto fail_init = [&](const char * what, int code) {
        ggx_set_error("cuda:%d: %s failed (%d)", device, what, code);
        be_free(be);
        return (ggx_backend *)nullptr;
    };
    if ((err = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking)) != cudaSuccess) return fail_init("stream creation", (int)err);
    ctx->n_counters = 1 << 16;
    if ((err = cudaMalloc(&ctx->counters, (ctx->n_counters + 1) * sizeof(int))) != cudaSuccess) return fail_init("counter allocation", (int)err);
    if ((err = cudaMemset(ctx->counters, 0, (ctx->n_counters + 1) * sizeof(int))) != cudaSuccess) return fail_init("counter reset", (int)err);
    ctx->step_counter = ctx->counters + ctx->n_counters;
    if ((err = cudaMallocHost((void **)&ctx->mailbox, GGX_BACKEND_MAILBOX_BYTES)) != cudaSuccess) return fail_init("pinned mailbox allocation", (int)err);
    if ((err = cudaEventCreateWithFlags(&ctx->mailbox_ready, cudaEventDisableTiming)) != cudaSuccess) return fail_init("event creation", (int)err);
    if ((err = cudaMallocHost((void **)&ctx->small, (size_t)ggx_cuda_ctx::k_small_slots * ggx_cuda_ctx::k_small_bytes)) != cudaSuccess)
        return fail_init("pinned upload slots allocation", (int)err);
    for (cudaEvent_t & ev : ctx->small_done)
        if ((err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess) return fail_init("event creation", (int)err);
#if !defined(GGX_NO_BLAS)
    cublasStatus_t bs = cublasCreate(&ctx->cublas);
    if (bs != CUBLAS_STATUS_SUCCESS) return fail_init("cublasCreate", (int)bs);
    cublasSetStream(ctx->cublas, ctx->stream);
    // A fixed workspace lets cuBLAS run inside stream capture without allocating.
    ctx->cublas_ws_size = 32u << 20;
    if ((err = cudaMalloc(&ctx->cublas_ws, ctx->cublas_ws_size)) != cudaSuccess) return fail_init("cuBLAS workspace allocation", (int)err);
    cublasSetWorkspace(ctx->cublas, ctx->cublas_ws, ctx->cublas_ws_size);
    cublasSetMathMode(ctx->cublas, CUBLAS_DEFAULT_MATH);
#endif  // !GGX_NO_BLAS

    be->api_version = GGX_BACKEND_API_VERSION;
    be->name = ctx->name;
    snprintf(be->description, sizeof be->description, "%.80s (cc %d.%d, %.0f GiB)", prop.name, prop.major, prop.minor,
             prop.totalGlobalMem / 1073741824.0);
    be->is_host = 0;
    be->alignment = 256;
    be->iface.free = be_free;
    be->iface.alloc = be_alloc;
    be->iface.dealloc = be_dealloc;
    be->iface.set = be_set;
    be->iface.get = be_get;
    be->iface.memset = be_memset;
    be->iface.supports_op = supports_op;
    be->iface.graph_compute = graph_compute;
    be->iface.synchronize = be_synchronize;
    be->iface.qmatrix_prepare = be_qmatrix_prepare;
    be->iface.qmatrix_release = be_qmatrix_release;
    be->iface.memory_info = be_memory_info;
    be->iface.copy = be_copy;
    be->iface.get_begin = be_get_begin;
    be->iface.get_end = be_get_end;
    be->iface.set_deterministic = be_set_deterministic;
    // GGX_CUDA_NO_TOP_N=1: samplers read the whole row of logits instead (measurements)
    be->iface.top_n = ggx_env_flag("GGX_CUDA_NO_TOP_N") ? nullptr : be_top_n;
    // Sampled run-ahead (Context::sample_ahead): the draw made on the device, the next step queued
    // before the host has the id (run 139: llama3-8b 409.2 -> 415.2 t/s sampled, llama3.2-1b
    // 1244.9 -> 1262.7). GGX_CUDA_SAMPLE_AHEAD=0 turns it off.
    if (be->iface.top_n && ggx_env_int("GGX_CUDA_SAMPLE_AHEAD", 1) != 0) {
        be->iface.top_n_begin = be_top_n_begin;
        be->iface.top_n_end = be_top_n_end;
    }
    return be;
}
