// The interface every model architecture implements (one file per family in models/), and the
// shared graph builders they compose (norm, linear, rotary attention over the KV cache, MLPs).
//
// Adding an architecture: write models/<family>.cpp with a class derived from Architecture
// (load: create weights through Model::tensor/linear; build: the forward graph through
// GraphBuilder), and add one line to the table in models/registry.cpp.
#pragma once

#include "config.h"
#include "model.h"

#include "ggx/ggx.h"

#include <memory>
#include <string>
#include <vector>

namespace exl2 {

// Everything a forward graph for one shape needs: inputs, cache tensors, options.
struct GraphBuilder {
    ggx_context * ctx = nullptr;
    const Model * model = nullptr;
    const ModelConfig * cfg = nullptr;
    int n_tokens = 0;          // T new tokens
    bool all_logits = false;   // logits for every token, else only for the last
    bool non_causal = false;   // ExLlamaV2 SDPA-fallback compatibility (see ggx_params_attn)
    ggx_tensor * ids = nullptr;        // i32 {T}
    ggx_tensor * pos = nullptr;        // i32 {T}
    ggx_tensor * freq_div = nullptr;   // f32 {n_rot/2} or null
    float rope_attn_factor = 1.0f;
    float rope_pos_scale = 1.0f;
    float rope_theta = 10000.0f;
    std::vector<ggx_tensor *> k_cache, v_cache;   // per layer {hd*Hkv, C} (f16 or f32)

    // Shared builders. `il` is the layer index used in tensor names (-1 for none).
    void name(ggx_tensor * t, const char * what, int il) const;
    ggx_tensor * rms_norm(ggx_tensor * x, ggx_tensor * w, float eps, const char * what, int il);
    ggx_tensor * layer_norm(ggx_tensor * x, ggx_tensor * w, ggx_tensor * b, float eps, const char * what, int il);
    ggx_tensor * linear(ggx_tensor * x, const Linear & l, const char * what, int il);
    ggx_tensor * rope(ggx_tensor * x, int n_rot, enum ggx_rope_mode mode);
    // Self-attention of x {D, T} with q/k/v/o projections, RoPE, cache store and GQA attention.
    ggx_tensor * attention(ggx_tensor * x, const Linear & q, const Linear & k, const Linear & v,
                           const Linear & o, int il, enum ggx_rope_mode mode);
    // down(act(gate(x)) * up(x))
    ggx_tensor * ffn_gated(ggx_tensor * x, const Linear & gate, const Linear & up, const Linear & down,
                           enum ggx_act act, int il);
    // Final norm already applied by the caller; selects the last row unless all_logits, applies
    // the head and final soft-capping.
    ggx_tensor * logits(ggx_tensor * x, const Linear & head);
};

class Architecture {
public:
    virtual ~Architecture() = default;
    // Creates every weight through m.tensor()/m.linear() (which check names, shapes, dtypes).
    virtual void load(Model & m) = 0;
    // Builds the forward graph; returns the logits tensor (f32 {n_vocab, T or 1}).
    virtual ggx_tensor * build(GraphBuilder & gb) = 0;
    // Short name for descriptions ("llama").
    virtual const char * family() const = 0;
};

// The registry: the architecture class for config.json's architectures[0], or nullptr.
std::unique_ptr<Architecture> architecture_create(const ModelConfig & cfg);
// Comma-separated list of supported architecture names (for error messages).
std::string architecture_list();

}  // namespace exl2
