// Model hyper-parameters read from a Hugging Face config.json.
// Keys are looked up at the top level, then inside "text_config" (multimodal configs).
#pragma once

#include "json.h"

#include <string>
#include <vector>

namespace exl2 {

enum class RopeType { None, Default, Linear, Dynamic, Llama3, Yarn, LongRope };

struct RopeConfig {
    RopeType type = RopeType::Default;
    float theta = 10000.0f;
    float factor = 1.0f;
    float low_freq_factor = 1.0f;      // llama3
    float high_freq_factor = 4.0f;     // llama3
    int   orig_ctx = 0;                // original_max_position_embeddings
    float beta_fast = 32.0f, beta_slow = 1.0f;  // yarn
    float attention_factor = 0.0f;     // yarn/longrope override (0 = derive)
    std::vector<float> long_factor, short_factor;  // longrope
    float partial_rotary = 1.0f;
};

struct ModelConfig {
    std::string path;            // config.json path, for messages
    std::string arch;            // architectures[0]
    int n_layer = 0;
    int n_embd = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;
    int n_ff = 0;
    int n_vocab = 0;
    int n_ctx_train = 2048;
    float norm_eps = 1e-5f;
    RopeConfig rope;
    bool tie_embeddings = false;
    bool attention_bias = false;
    bool mlp_bias = false;
    std::string hidden_act = "silu";
    int bos_id = -1;
    int eos_id = -1;
    std::vector<int> eos_ids;
    int sliding_window = 0;
    float attn_softcap = 0, final_softcap = 0;
    bool gptq_v2 = false;
    std::string quant_method;    // "exl2", "gptq", "" ...
    Json raw;                    // the whole document, for architecture-specific keys

    // Rotated dims per head.
    int n_rot() const { return (int)(head_dim * rope.partial_rotary) & ~1; }
};

// Reads DIR/config.json. Throws Error naming the file and field on missing or invalid values.
ModelConfig config_load(const std::string & dir);
ModelConfig config_parse(const Json & j, const std::string & what);

// Per-frequency divisors (n_rot/2 values) and the sin/cos magnitude for the configured scaling,
// for a cache of n_ctx tokens. Empty divisors = none needed.
struct RopeTables {
    std::vector<float> freq_div;
    float attn_factor = 1.0f;
    float pos_scale = 1.0f;
    float theta = 10000.0f;
};
RopeTables rope_tables(const ModelConfig & c, int n_ctx);

}  // namespace exl2
