// ggx backend interface.
//
// A backend owns memory (host or device) and executes planned graphs. The interface is a table
// of function pointers; slots marked "optional" may be NULL. Execution is asynchronous with
// respect to the host: graph_compute, set and memset are queued on the backend's stream;
// get and synchronize wait. Data pointers handed to the host are never dereferenced by ggx.
//
// Usage:
//   struct ggx_backend * be = ggx_backend_init("cuda:0", n_threads);   // or "cpu"
//   size_t need = ggx_graph_plan(g, ggx_backend_alignment(be));
//   void * buf; be->iface.alloc(be, need, &buf); ggx_graph_bind(g, buf);
//   ... set inputs with ggx_backend_tensor_set, ggx_backend_graph_compute(be, g) per step ...
#pragma once

#include "ggx.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GGX_BACKEND_API_VERSION 1

struct ggx_backend;

// A draw among the best of a row, made where the row is (ggx_backend_i::top_n_begin), in the
// host sampler's order and arithmetic (ggx/ggx-draw.h): the k best values v_i (best first) as
// logits v_i / temperature; p_i = exp(l_i - l_0) normalised in double; min-p keeps p_i >= p_0 *
// min_p; top-p the shortest prefix whose mass reaches it; then the first candidate whose
// cumulative p exceeds u * total of those kept.
struct ggx_draw {
    float   temperature;   // > 0
    int32_t top_k;         // 1 <= k <= n of the ranking
    float   top_p;         // >= 1 or <= 0: off
    float   min_p;         // 0: off
    double  u;             // uniform in [0, 1)
};

struct ggx_backend_i {
    void            (*free)(struct ggx_backend * be);
    // Device memory. alloc returns GGX_STATUS_ALLOC_FAILED (with ggx_last_error set) when out of memory.
    enum ggx_status (*alloc)(struct ggx_backend * be, size_t size, void ** out);
    void            (*dealloc)(struct ggx_backend * be, void * ptr);
    // Copies between host and backend memory, ordered with graph execution on the backend's stream.
    // set may return before the copy is done only if `src` stays valid until the next synchronize.
    enum ggx_status (*set)(struct ggx_backend * be, void * dst, const void * src, size_t n);
    enum ggx_status (*get)(struct ggx_backend * be, void * dst, const void * src, size_t n);  // waits
    enum ggx_status (*memset)(struct ggx_backend * be, void * dst, int value, size_t n);
    // Whether this backend can execute `node` (op and source types). Must not fail.
    int             (*supports_op)(struct ggx_backend * be, const struct ggx_tensor * node);
    // Queue the whole planned graph. The same graph object may be computed many times; a backend
    // may cache per-graph state (e.g. a captured CUDA graph) in ggx_graph_backend_cache.
    enum ggx_status (*graph_compute)(struct ggx_backend * be, struct ggx_graph * g);
    enum ggx_status (*synchronize)(struct ggx_backend * be);
    // optional: called once after a quantized matrix's sub-buffers were uploaded (repacking,
    // derived tables). May set qmatrix->backend_extra.
    enum ggx_status (*qmatrix_prepare)(struct ggx_backend * be, struct ggx_tensor * t);
    // optional: release what qmatrix_prepare made.
    void            (*qmatrix_release)(struct ggx_backend * be, struct ggx_tensor * t);
    // optional: free/total device memory in bytes.
    void            (*memory_info)(struct ggx_backend * be, size_t * free, size_t * total);
    // optional: copy n bytes between two buffers of this backend, queued on its stream (bench
    // uses it to measure the copy bandwidth that decode speed is compared with).
    enum ggx_status (*copy)(struct ggx_backend * be, void * dst, const void * src, size_t n);
    // optional, both or neither: get_begin queues a copy of at most GGX_BACKEND_MAILBOX_BYTES
    // from backend memory into the backend's host mailbox and returns at once; get_end waits for
    // that copy only (not for work queued after it) and hands the bytes over. So the host can read
    // one step's result (a sampled token) while the device already runs the next step.
    enum ggx_status (*get_begin)(struct ggx_backend * be, const void * src, size_t n);
    enum ggx_status (*get_end)(struct ggx_backend * be, void * dst, size_t n);
    // optional: the n best of `count` floats at src in backend memory, best first (the larger
    // value, then the lower index; NaN after every number), into the host arrays ids and values;
    // 1 <= n <= GGX_BACKEND_TOP_MAX, n <= count. Waits. A sampler limited to the top k reads these
    // few candidates instead of the whole vocabulary. GGX_STATUS_UNSUPPORTED for a row too long.
    enum ggx_status (*top_n)(struct ggx_backend * be, const void * src, int64_t count, int n, int32_t * ids, float * values);
    // optional, both or neither: top_n_begin queues top_n's ranking and, with draw, that draw,
    // whose id it stores as an int32 at the backend address id_dst, and returns at once;
    // top_n_end waits for those alone (not for work queued after them) and hands over the n
    // candidates and the drawn id. So a sampled step can be queued before the host has drawn.
    enum ggx_status (*top_n_begin)(struct ggx_backend * be, const void * src, int64_t count, int n, const struct ggx_draw * draw,
                                   void * id_dst);
    enum ggx_status (*top_n_end)(struct ggx_backend * be, int32_t * ids, float * values, int32_t * drawn);
    // optional: on != 0 makes every result repeat bit for bit from one run of a graph to the next
    // (sums split over blocks added in a fixed order, at some cost in speed); 0 returns to the
    // fastest order. A backend whose results always repeat leaves it NULL.
    enum ggx_status (*set_deterministic)(struct ggx_backend * be, int on);
};

#define GGX_BACKEND_MAILBOX_BYTES 64
#define GGX_BACKEND_TOP_MAX 256

struct ggx_backend {
    int                  api_version;  // GGX_BACKEND_API_VERSION
    struct ggx_backend_i iface;
    const char *         name;         // "cpu", "cuda:0", ...
    char                 description[128];  // e.g. "NVIDIA H200 (cc 9.0, 139 GiB)"
    int                  is_host;      // memory is ordinary host memory (zero-copy weights allowed)
    size_t               alignment;    // required alignment of buffers and planned offsets
    void *               context;      // backend private state
};

// Creates a backend by name: "cpu", "cuda", "cuda:N" (also "hip:N"). NULL with ggx_last_error()
// set when the name is unknown, the backend was not compiled in, or the device cannot be used.
struct ggx_backend * ggx_backend_init(const char * name, int n_threads);
void                 ggx_backend_free(struct ggx_backend * be);
// Names of compiled-in backends, comma separated (e.g. "cpu,cuda"; "cpu,hip" in a HIP build).
const char *         ggx_backend_list(void);
// 1 when a GPU backend (CUDA or HIP, both answering to "cuda") is compiled in.
int                  ggx_backend_gpu_built(void);

struct ggx_backend * ggx_backend_cpu_init(int n_threads);
void                 ggx_backend_cpu_set_n_threads(struct ggx_backend * be, int n_threads);
#ifdef GGX_USE_CUDA
struct ggx_backend * ggx_backend_cuda_init(int device);
// Decode jobs this CUDA backend has issued as stages of the strip step (GGX_CUDA_STEP=1) since
// it started, counted when a graph is recorded (not per replay): tests check that the path ran.
long                 ggx_backend_cuda_strip_stages(struct ggx_backend * be);
// Decode GEMV jobs that read the step's RoPE table (the default; GGX_QGEMV_ROPE_TABLE=0 turns it
// off), counted the same way.
long                 ggx_backend_cuda_rope_table_jobs(struct ggx_backend * be);
// Matrices of decode GEMV jobs that read their norm weights from a q_perm-ordered table
// (the default; GGX_QGEMV_NORM_TABLE=0 turns it off), counted the same way.
long                 ggx_backend_cuda_norm_table_mats(struct ggx_backend * be);
// Pieces of the paired decode tables that join two EXL2 groups, counted at load; -1 in builds
// without -DGGX_QGEMV_PAIR_GROUPS=1 (backends/cuda/decode-plan.h), which never join them.
long                 ggx_backend_cuda_pair_group_pieces(struct ggx_backend * be);
// One-row q/k/v GEMV jobs that compute their attention in their tail (GGX_ATTN_TAIL=N at backend
// start; backends/cuda/decode-plan.h), counted when a graph is recorded.
long                 ggx_backend_cuda_attn_tail_jobs(struct ggx_backend * be);
// One-row q/k/v GEMV jobs that add their sums into the q/k/v rows the decode attention reads
// (GGX_QKV_ROWS, on by default with GGX_QGEMV_RED; backends/cuda/decode-plan.h), counted when a graph
// is recorded.
long                 ggx_backend_cuda_qkv_rows_jobs(struct ggx_backend * be);
#endif

// Convenience wrappers.
enum ggx_status ggx_backend_tensor_set(struct ggx_backend * be, struct ggx_tensor * t, const void * src, size_t offset, size_t n);
enum ggx_status ggx_backend_tensor_get(struct ggx_backend * be, const struct ggx_tensor * t, void * dst, size_t offset, size_t n);
enum ggx_status ggx_backend_graph_compute(struct ggx_backend * be, struct ggx_graph * g);
enum ggx_status ggx_backend_synchronize(struct ggx_backend * be);
// Results that repeat bit for bit from run to run (on != 0) or the fastest order of sums (0, the
// default): see ggx_backend_i::set_deterministic. OK where the backend always repeats.
enum ggx_status ggx_backend_set_deterministic(struct ggx_backend * be, int on);
// Whether the backend has get_begin / get_end (reads that overlap queued work).
int             ggx_backend_can_read_ahead(const struct ggx_backend * be);
// The mailbox read of n bytes of t at offset (n <= GGX_BACKEND_MAILBOX_BYTES); one at a time.
enum ggx_status ggx_backend_tensor_get_begin(struct ggx_backend * be, const struct ggx_tensor * t, size_t offset, size_t n);
enum ggx_status ggx_backend_tensor_get_end(struct ggx_backend * be, void * dst, size_t n);

// ---------------------------------------------------------------------------------------------
// Planning (ggx-alloc.cpp). Assigns every node (except in-place/views) and every INPUT leaf an
// offset inside one buffer, reusing memory of tensors whose last use has passed. OUTPUT nodes
// are kept alive to the end. Returns the buffer size needed.
size_t ggx_graph_plan(struct ggx_graph * g, size_t alignment);
// Sets data pointers of planned tensors (and views) to base + offset.
void   ggx_graph_bind(struct ggx_graph * g, void * base);

// Per-graph cache slot for a backend (e.g. a captured CUDA graph). The destructor is called when
// graph's context is freed.
void ** ggx_graph_backend_cache(struct ggx_graph * g);
void    ggx_graph_set_backend_cache_free(struct ggx_graph * g, void (*fn)(void *));

#ifdef __cplusplus
}
#endif
