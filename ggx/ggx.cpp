// ggx core: type table, tensor metadata, op constructors with shape rules, graphs.
#include "ggx.h"
#include "ggx-backend.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

static const ggx_type_traits k_type_traits[GGX_TYPE_COUNT] = {
    /* F32  */ {"f32", 4, 0},
    /* F16  */ {"f16", 2, 0},
    /* BF16 */ {"bf16", 2, 0},
    /* I32  */ {"i32", 4, 0},
    /* I16  */ {"i16", 2, 0},
    /* U8   */ {"u8", 1, 0},
    {nullptr, 0, 0}, {nullptr, 0, 0}, {nullptr, 0, 0}, {nullptr, 0, 0}, {nullptr, 0, 0},
    {nullptr, 0, 0}, {nullptr, 0, 0}, {nullptr, 0, 0}, {nullptr, 0, 0}, {nullptr, 0, 0},
    /* EXL2 */ {"exl2", 0, 1},
    /* GPTQ */ {"gptq", 0, 1},
};

const ggx_type_traits * ggx_type_get_traits(ggx_type type) {
    if ((int)type < 0 || type >= GGX_TYPE_COUNT || !k_type_traits[type].name) return nullptr;
    return &k_type_traits[type];
}
const char * ggx_type_name(ggx_type type) {
    const ggx_type_traits * t = ggx_type_get_traits(type);
    return t ? t->name : "invalid";
}
size_t ggx_type_size(ggx_type type) {
    const ggx_type_traits * t = ggx_type_get_traits(type);
    return t ? t->size : 0;
}

static const char * k_op_names[GGX_OP_COUNT] = {
    "none", "get_rows", "mul_mat", "add", "mul", "scale", "rms_norm", "layer_norm", "rope",
    "silu", "gelu", "glu", "softmax", "kv_store", "attn", "cpy", "argmax", "softcap",
};
const char * ggx_op_name(ggx_op op) {
    return (op >= 0 && op < GGX_OP_COUNT) ? k_op_names[op] : "invalid";
}

// ---------------------------------------------------------------------------------------------
static thread_local std::string t_last_error;
const char * ggx_last_error(void) { return t_last_error.c_str(); }
void ggx_set_error(const char * fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    t_last_error = buf;
}

// ---------------------------------------------------------------------------------------------
int64_t ggx_nelements(const ggx_tensor * t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
int64_t ggx_nrows(const ggx_tensor * t) { return t->ne[1] * t->ne[2] * t->ne[3]; }
size_t ggx_nbytes(const ggx_tensor * t) {
    const size_t ts = ggx_type_size(t->type);
    if (ts == 0) return 0;
    size_t n = ts;
    for (int i = 0; i < GGX_MAX_DIMS; i++) {
        if (t->ne[i] <= 0) return 0;
        n += (size_t)(t->ne[i] - 1) * t->nb[i];
    }
    return n;
}
int ggx_is_contiguous(const ggx_tensor * t) {
    const size_t ts = ggx_type_size(t->type);
    if (ts == 0) return 1;
    size_t expect = ts;
    for (int i = 0; i < GGX_MAX_DIMS; i++) {
        if (t->ne[i] != 1 && t->nb[i] != expect) return 0;
        expect *= (size_t)t->ne[i];
    }
    return 1;
}
void ggx_set_name(ggx_tensor * t, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
}

// ---------------------------------------------------------------------------------------------
struct ggx_graph {
    std::vector<ggx_tensor *> nodes;
    std::vector<ggx_tensor *> leafs;
    std::unordered_set<const ggx_tensor *> seen;
    std::vector<size_t> offsets;       // planned offsets, parallel to planned
    std::vector<ggx_tensor *> planned; // tensors that own planned memory
    void * backend_cache = nullptr;
    void (*backend_cache_free)(void *) = nullptr;
};

struct ggx_context {
    std::deque<ggx_tensor> tensors;
    std::vector<std::unique_ptr<ggx_graph>> graphs;
    ~ggx_context() {
        for (auto & g : graphs)
            if (g->backend_cache && g->backend_cache_free) g->backend_cache_free(g->backend_cache);
    }
};

ggx_context * ggx_context_new(void) { return new ggx_context(); }
void ggx_context_free(ggx_context * ctx) { delete ctx; }

static void set_contiguous_strides(ggx_tensor * t) {
    const size_t ts = ggx_type_size(t->type);
    t->nb[0] = ts;
    for (int i = 1; i < GGX_MAX_DIMS; i++) t->nb[i] = t->nb[i - 1] * (size_t)t->ne[i - 1];
}

ggx_tensor * ggx_new_tensor(ggx_context * ctx, ggx_type type, int n_dims, const int64_t * ne) {
    ctx->tensors.emplace_back();
    ggx_tensor * t = &ctx->tensors.back();
    memset(t, 0, sizeof *t);
    t->type = type;
    for (int i = 0; i < GGX_MAX_DIMS; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    set_contiguous_strides(t);
    return t;
}
ggx_tensor * ggx_new_tensor_1d(ggx_context * ctx, ggx_type type, int64_t ne0) {
    return ggx_new_tensor(ctx, type, 1, &ne0);
}
ggx_tensor * ggx_new_tensor_2d(ggx_context * ctx, ggx_type type, int64_t ne0, int64_t ne1) {
    const int64_t ne[2] = {ne0, ne1};
    return ggx_new_tensor(ctx, type, 2, ne);
}
ggx_tensor * ggx_new_tensor_3d(ggx_context * ctx, ggx_type type, int64_t ne0, int64_t ne1, int64_t ne2) {
    const int64_t ne[3] = {ne0, ne1, ne2};
    return ggx_new_tensor(ctx, type, 3, ne);
}

static ggx_tensor * view_of(ggx_context * ctx, ggx_tensor * a, int n_dims, const int64_t * ne, size_t offs) {
    ggx_tensor * t = ggx_new_tensor(ctx, a->type, n_dims, ne);
    ggx_tensor * base = a->view_src ? a->view_src : a;
    t->view_src = base;
    t->view_offs = (a->view_src ? a->view_offs : 0) + offs;
    t->op = GGX_OP_NONE;
    // A view of a computed tensor must still be ordered after it: keep the producer as src[0].
    t->src[0] = a;
    if (a->data) t->data = (char *)a->data + offs;
    return t;
}

ggx_tensor * ggx_reshape_2d(ggx_context * ctx, ggx_tensor * a, int64_t ne0, int64_t ne1) {
    const int64_t ne[2] = {ne0, ne1};
    return view_of(ctx, a, 2, ne, 0);
}
ggx_tensor * ggx_reshape_3d(ggx_context * ctx, ggx_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2) {
    const int64_t ne[3] = {ne0, ne1, ne2};
    return view_of(ctx, a, 3, ne, 0);
}
ggx_tensor * ggx_view_rows(ggx_context * ctx, ggx_tensor * a, int64_t row0, int64_t n) {
    const int64_t ne[2] = {a->ne[0], n};
    return view_of(ctx, a, 2, ne, (size_t)row0 * a->nb[1]);
}

static ggx_tensor * new_op(ggx_context * ctx, ggx_op op, ggx_type type, const int64_t * ne,
                           ggx_tensor * s0, ggx_tensor * s1 = nullptr, ggx_tensor * s2 = nullptr,
                           ggx_tensor * s3 = nullptr) {
    ggx_tensor * t = ggx_new_tensor(ctx, type, 4, ne);
    t->op = op;
    t->src[0] = s0;
    t->src[1] = s1;
    t->src[2] = s2;
    t->src[3] = s3;
    return t;
}

ggx_tensor * ggx_get_rows(ggx_context * ctx, ggx_tensor * table, ggx_tensor * ids) {
    const int64_t ne[4] = {table->ne[0], ids->ne[0], 1, 1};
    return new_op(ctx, GGX_OP_GET_ROWS, GGX_TYPE_F32, ne, table, ids);
}
ggx_tensor * ggx_mul_mat(ggx_context * ctx, ggx_tensor * w, ggx_tensor * x) {
    const int64_t ne[4] = {w->ne[1], x->ne[1], x->ne[2], x->ne[3]};
    return new_op(ctx, GGX_OP_MUL_MAT, GGX_TYPE_F32, ne, w, x);
}
ggx_tensor * ggx_add(ggx_context * ctx, ggx_tensor * a, ggx_tensor * b) {
    return new_op(ctx, GGX_OP_ADD, GGX_TYPE_F32, a->ne, a, b);
}
ggx_tensor * ggx_mul(ggx_context * ctx, ggx_tensor * a, ggx_tensor * b) {
    return new_op(ctx, GGX_OP_MUL, GGX_TYPE_F32, a->ne, a, b);
}
ggx_tensor * ggx_scale(ggx_context * ctx, ggx_tensor * a, float s) {
    ggx_tensor * t = new_op(ctx, GGX_OP_SCALE, GGX_TYPE_F32, a->ne, a);
    t->params.scale.s = s;
    return t;
}
ggx_tensor * ggx_rms_norm(ggx_context * ctx, ggx_tensor * a, ggx_tensor * w, float eps) {
    ggx_tensor * t = new_op(ctx, GGX_OP_RMS_NORM, GGX_TYPE_F32, a->ne, a, w);
    t->params.norm.eps = eps;
    return t;
}
ggx_tensor * ggx_layer_norm(ggx_context * ctx, ggx_tensor * a, ggx_tensor * w, ggx_tensor * b, float eps) {
    ggx_tensor * t = new_op(ctx, GGX_OP_LAYER_NORM, GGX_TYPE_F32, a->ne, a, w, b);
    t->params.norm.eps = eps;
    return t;
}
ggx_tensor * ggx_rope(ggx_context * ctx, ggx_tensor * a, ggx_tensor * pos, ggx_tensor * freq_div, ggx_params_rope p) {
    ggx_tensor * t = new_op(ctx, GGX_OP_ROPE, GGX_TYPE_F32, a->ne, a, pos, freq_div);
    t->params.rope = p;
    return t;
}
ggx_tensor * ggx_silu(ggx_context * ctx, ggx_tensor * a) {
    return new_op(ctx, GGX_OP_SILU, GGX_TYPE_F32, a->ne, a);
}
ggx_tensor * ggx_gelu(ggx_context * ctx, ggx_tensor * a) {
    return new_op(ctx, GGX_OP_GELU, GGX_TYPE_F32, a->ne, a);
}
ggx_tensor * ggx_glu(ggx_context * ctx, ggx_tensor * gate, ggx_tensor * up, ggx_act act) {
    ggx_tensor * t = new_op(ctx, GGX_OP_GLU, GGX_TYPE_F32, gate->ne, gate, up);
    t->params.glu.act = act;
    return t;
}
ggx_tensor * ggx_softmax(ggx_context * ctx, ggx_tensor * a, float scale) {
    ggx_tensor * t = new_op(ctx, GGX_OP_SOFTMAX, GGX_TYPE_F32, a->ne, a);
    t->params.softmax.scale = scale;
    return t;
}
ggx_tensor * ggx_kv_store(ggx_context * ctx, ggx_tensor * cur, ggx_tensor * cache, ggx_tensor * pos) {
    ggx_tensor * t = new_op(ctx, GGX_OP_KV_STORE, cache->type, cache->ne, cur, cache, pos);
    // in place: the result is the cache
    t->view_src = cache->view_src ? cache->view_src : cache;
    t->view_offs = cache->view_src ? cache->view_offs : 0;
    memcpy(t->nb, cache->nb, sizeof t->nb);
    t->data = cache->data;
    return t;
}
ggx_tensor * ggx_attn(ggx_context * ctx, ggx_tensor * q, ggx_tensor * k, ggx_tensor * v, ggx_tensor * pos, ggx_params_attn p) {
    ggx_tensor * t = new_op(ctx, GGX_OP_ATTN, GGX_TYPE_F32, q->ne, q, k, v, pos);
    t->params.attn = p;
    return t;
}
ggx_tensor * ggx_cpy(ggx_context * ctx, ggx_tensor * a, ggx_type type) {
    return new_op(ctx, GGX_OP_CPY, type, a->ne, a);
}
ggx_tensor * ggx_argmax(ggx_context * ctx, ggx_tensor * a) {
    const int64_t ne[4] = {a->ne[1], 1, 1, 1};
    return new_op(ctx, GGX_OP_ARGMAX, GGX_TYPE_I32, ne, a);
}
ggx_tensor * ggx_softcap(ggx_context * ctx, ggx_tensor * a, float cap) {
    ggx_tensor * t = new_op(ctx, GGX_OP_SOFTCAP, GGX_TYPE_F32, a->ne, a);
    t->params.softcap.cap = cap;
    return t;
}

// ---------------------------------------------------------------------------------------------
ggx_graph * ggx_graph_new(ggx_context * ctx) {
    ctx->graphs.emplace_back(new ggx_graph());
    return ctx->graphs.back().get();
}

static void visit(ggx_graph * g, ggx_tensor * t) {
    if (!t || g->seen.count(t)) return;
    g->seen.insert(t);
    for (ggx_tensor * s : t->src) visit(g, s);
    if (t->op == GGX_OP_NONE && !t->view_src) {
        g->leafs.push_back(t);
    } else {
        g->nodes.push_back(t);   // ops and views (views need their data pointer bound)
    }
}

void ggx_graph_build(ggx_graph * g, ggx_tensor * t) { visit(g, t); }
int ggx_graph_n_nodes(const ggx_graph * g) { return (int)g->nodes.size(); }
ggx_tensor * ggx_graph_node(const ggx_graph * g, int i) { return g->nodes[i]; }
int ggx_graph_n_leafs(const ggx_graph * g) { return (int)g->leafs.size(); }
ggx_tensor * ggx_graph_leaf(const ggx_graph * g, int i) { return g->leafs[i]; }

void ** ggx_graph_backend_cache(ggx_graph * g) { return &g->backend_cache; }
void ggx_graph_set_backend_cache_free(ggx_graph * g, void (*fn)(void *)) { g->backend_cache_free = fn; }

// ---------------------------------------------------------------------------------------------
// Planner: greedy first-fit over a free list, in node order. A tensor's memory is released after
// the last node that reads it (through views too). Inputs are allocated first and never freed
// during the graph (the host writes them before compute).
namespace {
struct free_block { size_t offs, size; };

struct arena {
    std::vector<free_block> free_list;
    size_t top = 0;
    size_t alloc(size_t size) {
        size_t best = SIZE_MAX, best_i = 0;
        for (size_t i = 0; i < free_list.size(); i++)
            if (free_list[i].size >= size && free_list[i].size < best) { best = free_list[i].size; best_i = i; }
        if (best != SIZE_MAX) {
            free_block & b = free_list[best_i];
            size_t offs = b.offs;
            b.offs += size;
            b.size -= size;
            if (b.size == 0) free_list.erase(free_list.begin() + (long)best_i);
            return offs;
        }
        size_t offs = top;
        top += size;
        return offs;
    }
    void release(size_t offs, size_t size) {
        free_list.push_back({offs, size});
        // merge neighbours
        std::sort(free_list.begin(), free_list.end(), [](const free_block & a, const free_block & b) { return a.offs < b.offs; });
        std::vector<free_block> merged;
        for (const free_block & b : free_list) {
            if (!merged.empty() && merged.back().offs + merged.back().size == b.offs) merged.back().size += b.size;
            else merged.push_back(b);
        }
        // a block that ends at the top shrinks the arena
        if (!merged.empty() && merged.back().offs + merged.back().size == top) {
            top = merged.back().offs;
            merged.pop_back();
        }
        free_list.swap(merged);
    }
};
}  // namespace

static ggx_tensor * owner_of(ggx_tensor * t) { return t->view_src ? t->view_src : t; }

size_t ggx_graph_plan(ggx_graph * g, size_t alignment) {
    if (alignment == 0) alignment = 64;
    auto aligned = [&](size_t n) { return (n + alignment - 1) / alignment * alignment; };
    g->planned.clear();
    g->offsets.clear();

    // last use (node index) of each owner tensor; owners of OUTPUT views live to the end too
    std::unordered_map<const ggx_tensor *, int> last_use;
    std::unordered_set<const ggx_tensor *> keep;
    for (int i = 0; i < (int)g->nodes.size(); i++) {
        ggx_tensor * n = g->nodes[i];
        last_use[owner_of(n)] = std::max(last_use[owner_of(n)], i);
        for (ggx_tensor * s : n->src)
            if (s) last_use[owner_of(s)] = i;
        if (n->flags & GGX_FLAG_OUTPUT) keep.insert(owner_of(n));
    }
    arena A;
    std::unordered_map<const ggx_tensor *, size_t> offs;
    auto plan_one = [&](ggx_tensor * t) {
        size_t o = A.alloc(aligned(ggx_nbytes(t)));
        offs[t] = o;
        g->planned.push_back(t);
        g->offsets.push_back(o);
    };
    for (ggx_tensor * l : g->leafs)
        if ((l->flags & GGX_FLAG_INPUT) && !l->data) plan_one(l);
    size_t peak = A.top;
    // Sources are released one node late: a node's result never shares memory with the inputs of
    // the node before it. Backends that fuse a matmul with the op after it (a residual add, a
    // GLU) write that op's result while the matmul's input is still being read.
    std::vector<ggx_tensor *> pending;
    // A GLU's result takes its gate's memory when the gate dies at the GLU (the FFN's largest
    // tensors: at 2048 tokens of llama3-8b, 112 MiB less at the peak), and a residual add's result
    // takes the memory of an operand that dies there (the residual stream: x = x + h updates x in
    // place; at 2048 tokens of llama3-8b, 64 MiB less compute buffer). Every backend
    // computes these ops element by element (each element read before the same element is
    // written), and a backend that fuses the matmul before them never materialises its result.
    auto in_place_src = [&](int i, const ggx_tensor * n) -> ggx_tensor * {
        if ((n->op != GGX_OP_GLU && n->op != GGX_OP_ADD) || (n->flags & GGX_FLAG_OUTPUT)) return nullptr;
        const int n_cand = n->op == GGX_OP_ADD ? 2 : 1;   // GLU: the gate only
        for (int c = 0; c < n_cand; c++) {
            ggx_tensor * s = n->src[c];
            if (!s || s->view_src) continue;
            if (last_use[s] != i || !offs.count(s) || (s->flags & (GGX_FLAG_OUTPUT | GGX_FLAG_INPUT)) || keep.count(s)) continue;
            if (s->type != n->type || ggx_nbytes(s) != ggx_nbytes(n) || !ggx_is_contiguous(s) || !ggx_is_contiguous(n)) continue;
            const ggx_tensor * other = n->src[1 - c];   // may broadcast (s is full size), but be neither s nor a view of it
            if (!other || owner_of((ggx_tensor *)other) == s) continue;
            bool fused_input = false;   // the rule of one node late: the node before may be fused with this one
            if (i > 0)
                for (const ggx_tensor * t : g->nodes[i - 1]->src)
                    if (t && owner_of((ggx_tensor *)t) == s) fused_input = true;
            if (!fused_input) return s;
        }
        return nullptr;
    };
    std::vector<const ggx_tensor *> handed_over;   // sources whose memory a result took
    for (int i = 0; i < (int)g->nodes.size(); i++) {
        ggx_tensor * n = g->nodes[i];
        if (!n->view_src && !n->data) {
            if (ggx_tensor * s = in_place_src(i, n)) {
                offs[n] = offs[s];
                g->planned.push_back(n);
                g->offsets.push_back(offs[s]);
                handed_over.push_back(s);
            } else {
                plan_one(n);
            }
        }
        peak = std::max(peak, A.top);
        for (ggx_tensor * o : pending) A.release(offs[o], aligned(ggx_nbytes(o)));
        pending.clear();
        // sources whose last use is this node
        std::vector<ggx_tensor *> done;
        for (ggx_tensor * s : n->src) {
            if (!s) continue;
            ggx_tensor * o = owner_of(s);
            if (last_use[o] == i && offs.count(o) && !(o->flags & (GGX_FLAG_OUTPUT | GGX_FLAG_INPUT)) && !keep.count(o) &&
                std::find(done.begin(), done.end(), o) == done.end() &&
                std::find(handed_over.begin(), handed_over.end(), o) == handed_over.end())
                done.push_back(o);
        }
        pending = done;
    }
    return std::max(peak, (size_t)alignment);
}

void ggx_graph_bind(ggx_graph * g, void * base) {
    for (size_t i = 0; i < g->planned.size(); i++) g->planned[i]->data = (char *)base + g->offsets[i];
    for (ggx_tensor * n : g->nodes)
        if (n->view_src && n->view_src->data) n->data = (char *)n->view_src->data + n->view_offs;
}
