#include "context.h"
#include "architecture.h"
#include "error.h"
#include "sampler.h"

#include <algorithm>
#include <cstring>

namespace exl2 {

KvCache::KvCache(ggx_backend * be, const ModelConfig & cfg, int n_ctx, CacheType type) : be_(be), n_ctx_(n_ctx) {
    ctx_ = ggx_context_new();
    const ggx_type t = type == CacheType::F16 ? GGX_TYPE_F16 : GGX_TYPE_F32;
    const int64_t row = (int64_t)cfg.head_dim * cfg.n_head_kv;
    const size_t align = be->alignment ? be->alignment : 256;
    const size_t per = ((size_t)row * n_ctx * ggx_type_size(t) + align - 1) / align * align;
    bytes_ = per * 2 * (size_t)cfg.n_layer;
    try {
        buf_ = backend_alloc(be, bytes_, "KV cache");
    } catch (...) {
        ggx_context_free(ctx_);
        throw;
    }
    char * p = (char *)buf_;
    for (int il = 0; il < cfg.n_layer; il++) {
        for (int kv = 0; kv < 2; kv++) {
            ggx_tensor * c = ggx_new_tensor_2d(ctx_, t, row, n_ctx);
            ggx_set_name(c, "%s_cache-%d", kv ? "v" : "k", il);
            c->data = p;
            p += per;
            (kv ? v : k).push_back(c);
        }
    }
    // Unwritten cache rows are never read (attention stops at each query's position), but
    // clearing keeps a stale NaN from ever mattering.
    be->iface.memset(be, buf_, 0, bytes_);
}

KvCache::~KvCache() {
    if (buf_) be_->iface.dealloc(be_, buf_);
    ggx_context_free(ctx_);
}

// ---------------------------------------------------------------------------------------------
static int resolve_n_ctx(const Model & m, const ContextParams & p) {
    int n = p.n_ctx > 0 ? p.n_ctx : m.cfg.n_ctx_train;
    if (n <= 0) fail("invalid context length %d", n);
    return n;
}

Context::Context(Model & model, const ContextParams & p)
    : model_(model), cache_(model.backend, model.cfg, resolve_n_ctx(model, p), p.cache_type) {
    n_batch_ = std::max(1, std::min(p.n_batch > 0 ? p.n_batch : 512, cache_.n_ctx()));
    non_causal_ = p.exllamav2_noncausal_prefill;
    ggx_backend * be = model.backend;
    const bool async_device = !be->is_host;   // host backends finish a graph before returning
    run_ahead_ = (p.run_ahead > 0 || (p.run_ahead == 0 && async_device)) && ggx_backend_can_read_ahead(be) &&
                 be->iface.copy;
    // RoPE tables for this context length.
    RopeTables rt = rope_tables(model.cfg, cache_.n_ctx());
    rope_attn_factor_ = rt.attn_factor;
    rope_pos_scale_ = rt.pos_scale;
    rope_theta_ = rt.theta;
    rope_ctx_ = ggx_context_new();
    if (!rt.freq_div.empty()) {
        freq_div_ = ggx_new_tensor_1d(rope_ctx_, GGX_TYPE_F32, (int64_t)rt.freq_div.size());
        ggx_set_name(freq_div_, "rope_freq_div");
        rope_buf_ = backend_alloc(model.backend, rt.freq_div.size() * 4, "RoPE table");
        freq_div_->data = rope_buf_;
        model.backend->iface.set(model.backend, rope_buf_, rt.freq_div.data(), rt.freq_div.size() * 4);
        model.backend->iface.synchronize(model.backend);
    }
    // Reserve the compute buffer for a full batch that keeps the last row's logits (prompts and
    // generation). A batch that keeps every row's logits (perplexity) grows it on first use: for a
    // 2048-token batch of a 128k vocabulary those logits alone are 1 GB, which a chat never needs.
    graph_for(n_batch_, false);
}

Context::~Context() {
    if (ahead_.active) ggx_backend_synchronize(model_.backend);   // a step ahead may still use the buffers
    for (auto & kv : graphs_) ggx_context_free(kv.second.ctx);
    if (saved_logits_) model_.backend->iface.dealloc(model_.backend, saved_logits_);
    if (compute_buf_) model_.backend->iface.dealloc(model_.backend, compute_buf_);
    if (rope_buf_) model_.backend->iface.dealloc(model_.backend, rope_buf_);
    ggx_context_free(rope_ctx_);
}

Context::Graph Context::build(int T, bool all_logits) {
    Graph G;
    G.ctx = ggx_context_new();
    GraphBuilder gb;
    gb.ctx = G.ctx;
    gb.model = &model_;
    gb.cfg = &model_.cfg;
    gb.n_tokens = T;
    gb.all_logits = all_logits;
    gb.non_causal = non_causal_;
    gb.ids = ggx_new_tensor_1d(G.ctx, GGX_TYPE_I32, T);
    gb.ids->flags = GGX_FLAG_INPUT;
    ggx_set_name(gb.ids, "ids");
    gb.pos = ggx_new_tensor_1d(G.ctx, GGX_TYPE_I32, T);
    gb.pos->flags = GGX_FLAG_INPUT;
    ggx_set_name(gb.pos, "pos");
    gb.freq_div = freq_div_;
    gb.rope_attn_factor = rope_attn_factor_;
    gb.rope_pos_scale = rope_pos_scale_;
    gb.rope_theta = rope_theta_;
    gb.k_cache = cache_.k;
    gb.v_cache = cache_.v;
    G.ids = gb.ids;
    G.pos = gb.pos;
    G.out = model_.arch->build(gb);
    G.out->flags |= GGX_FLAG_OUTPUT;
    if (ggx_nrows(G.out) == 1) {   // greedy generation reads this one id, not the logits
        G.arg = ggx_argmax(G.ctx, G.out);
        G.arg->flags |= GGX_FLAG_OUTPUT;
        ggx_set_name(G.arg, "argmax");
    }
    G.g = ggx_graph_new(G.ctx);
    ggx_graph_build(G.g, G.arg ? G.arg : G.out);
    ggx_backend * be = model_.backend;
    for (int i = 0; i < ggx_graph_n_nodes(G.g); i++) {
        ggx_tensor * n = ggx_graph_node(G.g, i);
        if (n->op != GGX_OP_NONE && !be->iface.supports_op(be, n))
            fail("backend %s cannot run op %s (%s, weight type %s)", be->name, ggx_op_name(n->op), n->name,
                 n->src[0] ? ggx_type_name(n->src[0]->type) : "-");
    }
    G.need = ggx_graph_plan(G.g, be->alignment ? be->alignment : 256);
    return G;
}

Context::Graph & Context::graph_for(int T, bool all_logits) {
    if (T == 1) all_logits = false;   // the same graph either way
    auto key = std::make_pair(T, all_logits);
    auto it = graphs_.find(key);
    if (it != graphs_.end()) return it->second;
    Graph G = build(T, all_logits);
    if (G.need > compute_size_) {
        // The first graph and the first all-logits batch get here; grow the buffer and drop the
        // graphs bound to the old one.
        if (compute_buf_) {
            for (auto & kv : graphs_) ggx_context_free(kv.second.ctx);
            graphs_.clear();
            model_.backend->iface.dealloc(model_.backend, compute_buf_);
            compute_buf_ = nullptr;
        }
        compute_buf_ = backend_alloc(model_.backend, G.need, "compute buffer");
        compute_size_ = G.need;
    }
    ggx_graph_bind(G.g, compute_buf_);
    return graphs_[key] = G;
}

Context::Graph & Context::run_chunk(const int32_t * tokens, int n, bool all_logits, float * logits_out) {
    Graph & G = graph_for(n, all_logits);
    ggx_backend * be = model_.backend;
    pos_host_.resize(n);
    for (int i = 0; i < n; i++) pos_host_[i] = n_past_ + i;
    if (ggx_backend_tensor_set(be, G.ids, tokens, 0, (size_t)n * 4) != GGX_STATUS_OK ||
        ggx_backend_tensor_set(be, G.pos, pos_host_.data(), 0, (size_t)n * 4) != GGX_STATUS_OK)
        fail("decode: input upload failed: %s", ggx_last_error());
    if (ggx_backend_graph_compute(be, G.g) != GGX_STATUS_OK) fail("decode: %s", ggx_last_error());
    if (logits_out && ggx_backend_tensor_get(be, G.out, logits_out, 0, ggx_nbytes(G.out)) != GGX_STATUS_OK)
        fail("decode: reading logits failed: %s", ggx_last_error());
    n_past_ += n;
    return G;
}

bool Context::decode(const int32_t * tokens, int n, bool all_logits) {
    if (n <= 0) fail("decode: no tokens");
    if (n_past_ + n > cache_.n_ctx()) return false;
    const int V = model_.cfg.n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V) fail("token id %d at position %d is outside the vocabulary (0..%d)", tokens[i], i, V - 1);
    if (ahead_.active) {
        // The step queued by greedy_last is this very step when the caller decodes the id it chose.
        const bool taken = n == 1 && tokens[0] == ahead_.token && ahead_.pos == n_past_;
        ahead_.active = false;
        if (taken) {
            n_rows_ = 1;
            logits_.resize((size_t)V);
            pending_ = single_step_graph();
            logits_saved_ = false;
            n_past_ += 1;
            steps_taken_ahead_++;
            return true;
        }
    }
    n_rows_ = all_logits ? n : 1;
    logits_.resize((size_t)n_rows_ * V);
    pending_ = nullptr;
    logits_saved_ = false;
    for (int off = 0; off < n; off += n_batch_) {
        const int m = std::min(n_batch_, n - off);
        const bool last = off + m == n;
        float * out = all_logits ? logits_.data() + (size_t)off * V : nullptr;
        Graph & G = run_chunk(tokens + off, m, all_logits, out);
        if (last && !all_logits) pending_ = &G;   // read on demand (logits, greedy_last)
    }
    return true;
}

const float * Context::logits(int i) {
    if (i < 0) i += n_rows_;
    if (i < 0 || i >= n_rows_) return nullptr;
    if (pending_) {
        ggx_backend * be = model_.backend;
        const size_t bytes = ggx_nbytes(pending_->out);
        const ggx_status st = logits_saved_ ? be->iface.get(be, logits_.data(), saved_logits_, bytes)
                                            : ggx_backend_tensor_get(be, pending_->out, logits_.data(), 0, bytes);
        if (st != GGX_STATUS_OK) fail("reading logits failed: %s", ggx_last_error());
        pending_ = nullptr;
        logits_saved_ = false;
    }
    return logits_.data() + (size_t)i * model_.cfg.n_vocab;
}

bool Context::top_candidates(int n, int32_t * ids, float * vals) {
    ggx_backend * be = model_.backend;
    const int V = model_.cfg.n_vocab;
    if (!pending_ || !be->iface.top_n || n < 1 || n > GGX_BACKEND_TOP_MAX || n > V) return false;
    const void * row = logits_saved_ ? saved_logits_ : pending_->out->data;
    const ggx_status st = be->iface.top_n(be, row, V, n, ids, vals);
    if (st == GGX_STATUS_UNSUPPORTED) return false;
    if (st != GGX_STATUS_OK) fail("ranking the logits failed: %s", ggx_last_error());
    return true;
}

// The single-token graph whose next step can be queued now: this context runs ahead, the last
// decode was that graph's step, its logits are still in its output (not moved aside by a step
// queued before and dropped since), nothing is queued, and the cache has a row for the step.
Context::Graph * Context::ahead_graph() {
    Graph * G1 = single_step_graph();
    if (!run_ahead_ || ahead_.active || logits_saved_ || !pending_ || pending_ != G1 || n_past_ >= cache_.n_ctx() ||
        ggx_nbytes(G1->ids) != sizeof(int32_t) || ggx_nbytes(G1->pos) != sizeof(int32_t))
        return nullptr;
    return G1;
}

// Queues behind what the caller queued (the next id into G.ids): a copy of G's logits aside,
// the next position and the step itself.
bool Context::queue_step_ahead(Graph & G) {
    ggx_backend * be = model_.backend;
    const size_t out_bytes = ggx_nbytes(G.out);
    if (!saved_logits_) saved_logits_ = backend_alloc(be, out_bytes, "saved logits");
    ahead_pos_ = n_past_;
    return be->iface.copy(be, saved_logits_, G.out->data, out_bytes) == GGX_STATUS_OK &&
           ggx_backend_tensor_set(be, G.pos, &ahead_pos_, 0, sizeof ahead_pos_) == GGX_STATUS_OK &&
           ggx_backend_graph_compute(be, G.g) == GGX_STATUS_OK;
}

bool Context::sample_ahead(int n, const ggx_draw & d, int32_t * ids, float * vals, int32_t * guess) {
    ggx_backend * be = model_.backend;
    const int V = model_.cfg.n_vocab;
    Graph * G1 = ahead_graph();
    if (!G1 || !be->iface.top_n_begin || !be->iface.top_n_end || n < 1 || n > GGX_BACKEND_TOP_MAX || n > V || d.top_k > n)
        return false;
    const ggx_status st = be->iface.top_n_begin(be, G1->out->data, V, n, &d, G1->ids->data);
    if (st == GGX_STATUS_UNSUPPORTED) return false;
    if (st != GGX_STATUS_OK || !queue_step_ahead(*G1) || be->iface.top_n_end(be, ids, vals, guess) != GGX_STATUS_OK)
        fail("running the next sampled step ahead failed: %s", ggx_last_error());
    logits_saved_ = true;
    ahead_ = {true, *guess, n_past_, false};
    return true;
}

Context::Graph * Context::single_step_graph() {
    auto it = graphs_.find({1, false});
    return it == graphs_.end() ? nullptr : &it->second;
}

// Queues, behind the single-token step G that just ran: the read of its token into the backend's
// mailbox, a copy of its logits, the token as the next step's input, that step's position and the
// step itself; then waits for the token alone. The device goes from one step to the next without
// waiting for the host's round trip (on an H200, llama3-8b 4.0 bpw 398-402 -> 404.5 t/s,
// llama3.2-1b 1197 -> 1250: bench/RESULTS.md run 127). Reading the logits after this waits for
// the step ahead too: the copy back is queued behind it on the one stream.
int32_t Context::run_ahead(Graph & G) {
    ggx_backend * be = model_.backend;
    int32_t id = -1;
    if (ggx_backend_tensor_get_begin(be, G.arg, 0, sizeof id) != GGX_STATUS_OK ||
        be->iface.copy(be, G.ids->data, G.arg->data, sizeof id) != GGX_STATUS_OK || !queue_step_ahead(G) ||
        ggx_backend_tensor_get_end(be, &id, sizeof id) != GGX_STATUS_OK)
        fail("running the next step ahead failed: %s", ggx_last_error());
    logits_saved_ = true;
    ahead_ = {true, id, n_past_, true};
    return id;
}

void Context::truncate(int n) {
    if (n >= n_past_) return;
    if (ahead_.active) {
        // The dropped step must not delay (or be timed with) whatever the caller does next.
        ahead_.active = false;
        ggx_backend_synchronize(model_.backend);
    }
    n_past_ = n < 0 ? 0 : n;
}

int32_t Context::greedy_last() {
    if (n_rows_ == 0) fail("no logits: nothing was decoded yet");
    // Chosen already when the queued step is greedy run-ahead's (it overwrote pending_->arg); a
    // sampled step's id is a draw, so the argmax is taken from the saved logits below.
    if (ahead_.active && ahead_.greedy) return ahead_.token;
    if (Graph * G1 = ahead_graph()) return run_ahead(*G1);
    // pending_->arg is this row's argmax unless a step queued ahead (and dropped) overwrote it
    if (pending_ && pending_->arg && !logits_saved_) {
        int32_t id = -1;
        if (ggx_backend_tensor_get(model_.backend, pending_->arg, &id, 0, sizeof(id)) != GGX_STATUS_OK)
            fail("reading the sampled token failed: %s", ggx_last_error());
        return id;
    }
    return argmax(logits(-1), model_.cfg.n_vocab);
}

}  // namespace exl2
