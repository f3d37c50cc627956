// An inference context: the KV cache of one sequence, the compute buffer (reserved at creation
// for a full batch keeping the last row's logits, grown once if a batch asks for every row's),
// and one planned graph per shape (number of new tokens, logits wanted), reused for every step.
// Steady-state decoding allocates nothing.
#pragma once

#include "model.h"

#include <map>
#include <memory>
#include <vector>

namespace exl2 {

enum class CacheType { F16, F32 };

struct ContextParams {
    int n_ctx = 0;        // 0 = model's training context
    int n_batch = 512;    // most tokens per graph
    CacheType cache_type = CacheType::F16;
    // Prefill with the new tokens attending to each other both ways, as ExLlamaV2's SDPA
    // fallback does (it passes no causal mask). Only for reproducing its recorded outputs.
    bool exllamav2_noncausal_prefill = false;
    // Greedy run-ahead (Context::greedy_last): 0 = where the device runs asynchronously (CUDA,
    // HIP), 1 = on any backend (tests), -1 = never.
    int run_ahead = 0;
};

class KvCache {
public:
    KvCache(ggx_backend * be, const ModelConfig & cfg, int n_ctx, CacheType type);
    ~KvCache();
    int n_ctx() const { return n_ctx_; }
    std::vector<ggx_tensor *> k, v;   // per layer {hd*Hkv, n_ctx}
    size_t bytes() const { return bytes_; }

private:
    ggx_backend * be_;
    ggx_context * ctx_;
    void * buf_ = nullptr;
    size_t bytes_ = 0;
    int n_ctx_;
};

class Context {
public:
    Context(Model & model, const ContextParams & p);
    ~Context();

    // Appends n tokens (split into n_batch chunks) and computes logits. Throws Error on failure;
    // returns false without changing anything when the cache cannot hold the tokens.
    bool decode(const int32_t * tokens, int n, bool all_logits);
    // Logits of row i of the last decode (i < 0 from the end), or nullptr. A decode that keeps
    // only the last row's logits leaves them on the device until they are asked for: generation
    // with greedy_last() reads one token id per step instead of the whole vocabulary.
    const float * logits(int i);
    // The lowest id with the largest logit of the last row, computed where the logits are.
    // Run-ahead: after a single-token step, the step for the chosen id is queued on the device
    // before the id is read back, so the device never waits for the host between tokens. A
    // following decode of exactly that id takes the queued step; any other decode or a truncate
    // drops it (its cache row lies past n_past and is written again before it is read). The
    // sampled step's logits stay readable through logits() either way.
    int32_t greedy_last();
    // The n best logits of the last row (ids / vals best first: larger value, then lower id),
    // ranked where they are, so that a top-k sampler reads n candidates instead of the vocabulary.
    // False when the backend cannot (no top_n, a row too long) or the logits are already on the
    // host: the caller then samples from logits(-1).
    bool top_candidates(int n, int32_t * ids, float * vals);
    // Sampled run-ahead: after a single-token step, queues the ranking of its logits with a draw
    // made where they are (d: the sampler's next draw, ggx_backend_i::top_n_begin), that id as
    // the next step's input and the step itself; then waits for the n candidates and the drawn id
    // (`guess`) alone. A following decode of exactly that id takes the queued step (the host's
    // own draw from the candidates decides; a different id drops the step). False, with nothing
    // queued, when this context does not run ahead or cannot here: use top_candidates then.
    bool sample_ahead(int n, const struct ggx_draw & d, int32_t * ids, float * vals, int32_t * guess);
    int n_logit_rows() const { return n_rows_; }

    int n_past() const { return n_past_; }
    int n_ctx() const { return cache_.n_ctx(); }
    int n_batch() const { return n_batch_; }
    void truncate(int n);
    Model & model() { return model_; }
    size_t compute_bytes() const { return compute_size_; }
    // Single-token steps that greedy_last ran ahead and a decode then took (tests, diagnostics).
    long steps_taken_ahead() const { return steps_taken_ahead_; }
    size_t cache_bytes() const { return cache_.bytes(); }

private:
    struct Graph {
        ggx_context * ctx = nullptr;
        ggx_graph * g = nullptr;
        ggx_tensor * ids = nullptr;
        ggx_tensor * pos = nullptr;
        ggx_tensor * out = nullptr;
        ggx_tensor * arg = nullptr;   // argmax of out (graphs of the last row's logits)
        size_t need = 0;
    };
    Graph & graph_for(int T, bool all_logits);
    Graph build(int T, bool all_logits);
    Graph & run_chunk(const int32_t * tokens, int n, bool all_logits, float * logits_out);
    Graph * single_step_graph();
    Graph * ahead_graph();
    bool queue_step_ahead(Graph & G);
    int32_t run_ahead(Graph & G);

    Model & model_;
    KvCache cache_;
    int n_batch_;
    bool non_causal_ = false;
    int n_past_ = 0;
    ggx_context * rope_ctx_ = nullptr;
    ggx_tensor * freq_div_ = nullptr;
    void * rope_buf_ = nullptr;
    float rope_attn_factor_ = 1.0f, rope_pos_scale_ = 1.0f, rope_theta_ = 10000.0f;
    std::map<std::pair<int, bool>, Graph> graphs_;
    void * compute_buf_ = nullptr;
    size_t compute_size_ = 0;
    std::vector<float> logits_;
    const Graph * pending_ = nullptr;   // the last decode's graph while its logits are not in logits_
    std::vector<int32_t> pos_host_;
    int n_rows_ = 0;
    // Run-ahead: whether this context does it, and the step queued for `token` at `pos`; `greedy`
    // when `token` is the row's argmax (greedy run-ahead), not a sampled draw (sample_ahead).
    bool run_ahead_ = false;
    struct Ahead { bool active = false; int32_t token = -1; int pos = 0; bool greedy = false; } ahead_;
    int32_t ahead_pos_ = 0;               // host source of that step's position upload
    void * saved_logits_ = nullptr;       // the sampled step's logits, copied before the step ahead
    bool logits_saved_ = false;           // pending_'s logits are in saved_logits_, not in its out
    long steps_taken_ahead_ = 0;
};

}  // namespace exl2
