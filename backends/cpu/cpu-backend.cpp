// The CPU backend: host memory, a persistent thread pool, and graph execution that runs the whole
// graph inside one pool job with a barrier between nodes (one dispatch switch, kernels elsewhere).
#include "cpu-ops.h"
#include "cpu-threadpool.h"
#include "ggx/ggx-backend.h"
#include "ggx/ggx-draw.h"

#include <algorithm>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace ggx_cpu {

void report_error(const params & p, const char * fmt, ...) {
    if (!p.err->has_msg.exchange(1)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p.err->msg, sizeof p.err->msg, fmt, ap);
        va_end(ap);
    }
    int cur = p.err->first_node.load();
    while (p.node < cur && !p.err->first_node.compare_exchange_weak(cur, p.node)) {}
}

namespace {

struct context {
    std::unique_ptr<threadpool> pool;
    std::vector<float> scratch;   // n_threads slices of scratch_per_thread floats; only grows
    size_t scratch_per_thread = 0;
    errors err;
    unsigned char mailbox[GGX_BACKEND_MAILBOX_BYTES];   // get_begin's bytes (graphs run synchronously here)
    // top_n_begin's ranking and draw, handed over by top_n_end
    std::vector<int32_t> top_ids;
    std::vector<float> top_vals;
    int32_t top_drawn = -1;
};

struct job {
    context *   ctx;
    ggx_graph * g;
};

bool is_view(const ggx_tensor * t) { return t->op == GGX_OP_NONE && t->view_src; }

void dispatch(const params & p, ggx_tensor * t) {
    switch (t->op) {
        case GGX_OP_GET_ROWS:   op_get_rows(p, t); break;
        case GGX_OP_MUL_MAT:    op_mul_mat(p, t); break;
        case GGX_OP_ADD:        op_add(p, t); break;
        case GGX_OP_MUL:        op_mul(p, t); break;
        case GGX_OP_SCALE:      op_scale(p, t); break;
        case GGX_OP_RMS_NORM:   op_rms_norm(p, t); break;
        case GGX_OP_LAYER_NORM: op_layer_norm(p, t); break;
        case GGX_OP_ROPE:       op_rope(p, t); break;
        case GGX_OP_SILU:       op_silu(p, t); break;
        case GGX_OP_GELU:       op_gelu(p, t); break;
        case GGX_OP_GLU:        op_glu(p, t); break;
        case GGX_OP_SOFTMAX:    op_softmax(p, t); break;
        case GGX_OP_KV_STORE:   op_kv_store(p, t); break;
        case GGX_OP_ATTN:       op_attn(p, t); break;
        case GGX_OP_CPY:        op_cpy(p, t); break;
        case GGX_OP_ARGMAX:     op_argmax(p, t); break;
        case GGX_OP_SOFTCAP:    op_softcap(p, t); break;
        case GGX_OP_NONE:
        case GGX_OP_COUNT:      break;
    }
}

void compute_thread(void * arg, int ith, int nth) {
    job & j = *(job *)arg;
    context & c = *j.ctx;
    const int n = ggx_graph_n_nodes(j.g);
    for (int i = 0; i < n; i++) {
        ggx_tensor * t = ggx_graph_node(j.g, i);
        if (is_view(t)) continue;
        const params p = {ith, nth, i, c.scratch.data() + (size_t)ith * c.scratch_per_thread, &c.err};
        dispatch(p, t);
        c.pool->barrier();
        if (c.err.first_node.load() <= i) break;
    }
}

context * ctx_of(ggx_backend * be) { return (context *)be->context; }

void cpu_free(ggx_backend * be) {
    delete ctx_of(be);
    delete be;
}

ggx_status cpu_alloc(ggx_backend *, size_t size, void ** out) {
    const size_t a = 64;
    const size_t n = size == 0 ? a : (size + a - 1) / a * a;   // aligned_alloc wants a multiple
    *out = std::aligned_alloc(a, n);
    if (!*out) {
        ggx_set_error("cpu backend: out of host memory allocating %zu bytes", size);
        return GGX_STATUS_ALLOC_FAILED;
    }
    return GGX_STATUS_OK;
}

void cpu_dealloc(ggx_backend *, void * ptr) { std::free(ptr); }

ggx_status cpu_set(ggx_backend *, void * dst, const void * src, size_t n) {
    if (n) memcpy(dst, src, n);
    return GGX_STATUS_OK;
}
ggx_status cpu_get(ggx_backend *, void * dst, const void * src, size_t n) {
    if (n) memcpy(dst, src, n);
    return GGX_STATUS_OK;
}

// Graphs finish before graph_compute returns, so a mailbox read is a plain copy; the pair exists
// so that code written for asynchronous devices (a context's greedy run-ahead) runs here too.
ggx_status cpu_get_begin(ggx_backend * be, const void * src, size_t n) {
    memcpy(ctx_of(be)->mailbox, src, n);
    return GGX_STATUS_OK;
}

ggx_status cpu_get_end(ggx_backend * be, void * dst, size_t n) {
    memcpy(dst, ctx_of(be)->mailbox, n);
    return GGX_STATUS_OK;
}

// The ranking and draw that a device makes where the logits are (ggx_backend_i::top_n_begin), done
// at once here (the logits are host memory): so a context's sampled run-ahead runs on the CPU too,
// and its tests with it.
ggx_status cpu_top_n_begin(ggx_backend * be, const void * src, int64_t count, int n, const ggx_draw * draw, void * id_dst) {
    context & c = *ctx_of(be);
    if (n < 1 || n > GGX_BACKEND_TOP_MAX || count < n || (draw && (draw->top_k < 1 || draw->top_k > n))) {
        ggx_set_error("cpu: top_n of %d over %lld values", n, (long long)count);
        return GGX_STATUS_FAILED;
    }
    const float * v = (const float *)src;
    std::vector<int32_t> order((size_t)count);
    for (int64_t i = 0; i < count; i++) order[(size_t)i] = (int32_t)i;
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [v](int32_t a, int32_t b) {
        const bool na = v[a] != v[a], nb = v[b] != v[b];
        if (na != nb) return nb;   // numbers before NaN
        return (!na && v[a] > v[b]) || ((na || v[a] == v[b]) && a < b);
    });
    c.top_ids.assign(order.begin(), order.begin() + n);
    c.top_vals.resize((size_t)n);
    for (int i = 0; i < n; i++) c.top_vals[(size_t)i] = v[c.top_ids[(size_t)i]];
    c.top_drawn = -1;
    if (draw) {
        // the draw in the host's order (ggx_draw_order); the candidates handed over keep theirs
        std::vector<float> dv(c.top_vals), p((size_t)draw->top_k);
        std::vector<int32_t> di(c.top_ids);
        const float t = draw->temperature;
        ggx_draw_order(n, t, [&dv](int j) -> float & { return dv[(size_t)j]; }, [&di](int j) -> int32_t & { return di[(size_t)j]; });
        const float * v = dv.data();
        ggx_draw_probabilities(draw->top_k, v[0] / t, [v, t](int j) { return v[j] / t; }, [&p](int j) -> float & { return p[(size_t)j]; });
        const int i = ggx_draw_select([&p](int j) { return p[(size_t)j]; }, draw->top_k, draw->min_p, draw->top_p, draw->u);
        c.top_drawn = di[(size_t)i];
        memcpy(id_dst, &c.top_drawn, sizeof c.top_drawn);
    }
    return GGX_STATUS_OK;
}

ggx_status cpu_top_n_end(ggx_backend * be, int32_t * ids, float * values, int32_t * drawn) {
    context & c = *ctx_of(be);
    std::copy(c.top_ids.begin(), c.top_ids.end(), ids);
    std::copy(c.top_vals.begin(), c.top_vals.end(), values);
    *drawn = c.top_drawn;
    return GGX_STATUS_OK;
}

ggx_status cpu_copy(ggx_backend *, void * dst, const void * src, size_t n) {
    if (n) memmove(dst, src, n);
    return GGX_STATUS_OK;
}
ggx_status cpu_memset(ggx_backend *, void * dst, int value, size_t n) {
    if (n) memset(dst, value, n);
    return GGX_STATUS_OK;
}

int cpu_supports_op(ggx_backend *, const ggx_tensor * node) { return is_view(node) || !unsupported_reason(node); }

bool has_data(const ggx_tensor * t) {
    if (!t->data) return false;
    if (ggx_type_get_traits(t->type) && ggx_type_get_traits(t->type)->is_quantized) return t->extra != nullptr;
    return true;
}

ggx_status cpu_graph_compute(ggx_backend * be, ggx_graph * g) {
    context & c = *ctx_of(be);
    const int nth = c.pool->size();
    size_t need = 0;
    for (int i = 0; i < ggx_graph_n_nodes(g); i++) {
        const ggx_tensor * t = ggx_graph_node(g, i);
        if (is_view(t)) continue;
        if (const char * why = unsupported_reason(t)) {
            ggx_set_error("cpu backend: node '%s' (%s) not supported: %s", t->name, ggx_op_name(t->op), why);
            return GGX_STATUS_UNSUPPORTED;
        }
        bool ok = has_data(t);
        for (const ggx_tensor * s : t->src) ok = ok && (!s || has_data(s));
        if (!ok) {
            ggx_set_error("cpu backend: node '%s' (%s) or one of its sources has no data (graph not planned and bound?)",
                          t->name, ggx_op_name(t->op));
            return GGX_STATUS_FAILED;
        }
        need = std::max(need, scratch_floats(t, nth));
    }
    need = (need + 15) / 16 * 16;   // keep each thread's slice on its own cache lines
    if (need > c.scratch_per_thread) {
        c.scratch.assign(need * (size_t)nth, 0.0f);
        c.scratch_per_thread = need;
    }
    c.err.first_node.store(0x7fffffff);
    c.err.has_msg.store(0);
    job j = {&c, g};
    c.pool->run(compute_thread, &j);
    if (c.err.has_msg.load()) {
        ggx_set_error("%s", c.err.msg);
        return GGX_STATUS_FAILED;
    }
    return GGX_STATUS_OK;
}

ggx_status cpu_synchronize(ggx_backend *) { return GGX_STATUS_OK; }

void cpu_memory_info(ggx_backend *, size_t * free, size_t * total) {
    const long page = sysconf(_SC_PAGESIZE);
    const long avail = sysconf(_SC_AVPHYS_PAGES), phys = sysconf(_SC_PHYS_PAGES);
    if (free) *free = avail > 0 && page > 0 ? (size_t)avail * (size_t)page : 0;
    if (total) *total = phys > 0 && page > 0 ? (size_t)phys * (size_t)page : 0;
}

int resolve_threads(int n_threads) {
    if (n_threads > 0) return n_threads;
    const unsigned hc = std::thread::hardware_concurrency();
    return hc ? (int)hc : 1;
}

std::string cpu_model_name() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.compare(0, 10, "model name") == 0) {
            const size_t colon = line.find(':');
            if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
        }
    }
    return "unknown CPU";
}

void set_description(ggx_backend * be) {
    snprintf(be->description, sizeof be->description, "CPU: %s, %d threads", cpu_model_name().c_str(),
             ctx_of(be)->pool->size());
}

}  // namespace
}  // namespace ggx_cpu

using namespace ggx_cpu;

ggx_backend * ggx_backend_cpu_init(int n_threads) {
    std::unique_ptr<context> c(new context());
    try {
        c->pool.reset(new threadpool(resolve_threads(n_threads)));
    } catch (const std::exception & e) {
        ggx_set_error("cpu backend: cannot start %d threads: %s", resolve_threads(n_threads), e.what());
        return nullptr;
    }
    ggx_backend * be = new ggx_backend();
    be->api_version = GGX_BACKEND_API_VERSION;
    be->iface.free = cpu_free;
    be->iface.alloc = cpu_alloc;
    be->iface.dealloc = cpu_dealloc;
    be->iface.set = cpu_set;
    be->iface.get = cpu_get;
    be->iface.memset = cpu_memset;
    be->iface.supports_op = cpu_supports_op;
    be->iface.graph_compute = cpu_graph_compute;
    be->iface.synchronize = cpu_synchronize;
    be->iface.qmatrix_prepare = nullptr;   // kernels read the on-disk layout directly
    be->iface.qmatrix_release = nullptr;
    be->iface.memory_info = cpu_memory_info;
    be->iface.copy = cpu_copy;
    be->iface.get_begin = cpu_get_begin;
    be->iface.get_end = cpu_get_end;
    be->iface.top_n_begin = cpu_top_n_begin;
    be->iface.top_n_end = cpu_top_n_end;
    be->name = "cpu";
    be->is_host = 1;
    be->alignment = 64;
    be->context = c.release();
    set_description(be);
    return be;
}

void ggx_backend_cpu_set_n_threads(ggx_backend * be, int n_threads) {
    if (!be || be->iface.free != cpu_free) {
        ggx_set_error("ggx_backend_cpu_set_n_threads: not a CPU backend");
        return;
    }
    context & c = *ctx_of(be);
    const int n = resolve_threads(n_threads);
    if (n == c.pool->size()) return;
    c.pool.reset();   // joins the old workers first
    try {
        c.pool.reset(new threadpool(n));
    } catch (const std::exception & e) {
        ggx_set_error("cpu backend: cannot start %d threads (%s); running with 1", n, e.what());
        c.pool.reset(new threadpool(1));
    }
    c.scratch_per_thread = 0;   // the slice count changed; regrow on the next compute
    set_description(be);
}
