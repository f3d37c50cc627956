// Random but valid EXL2 models with the real shapes of known architectures, built in memory, for
// benchmarks and tests: the same loader path as files (Model::load_tensors), and the same bytes
// for the same (name, bpw, layers, seed), so other engines can be fed identical files (save).
//
//   auto sm = exl2::synthetic_build("llama3-8b", 4.0, 0, 1);     // all 32 layers
//   auto model = exl2::Model::load_tensors(std::move(sm.st), sm.config, params);
//   exl2::synthetic_save("llama3-8b", 4.0, 2, 1, "out/llama3-8b-2l");   // an EXL2 folder
//
// Decoder linears use the converter option (docs/exl2-format.md 6.4) whose bpw is closest to the
// target, with act-order permutations; the head uses 6 bits (8 when the target exceeds 6), as
// the converter's default -hb 6. Embeddings and norms are fp16. Non-goals: meaningful outputs.
#pragma once

#include "json.h"
#include "safetensors.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace exl2 {

struct SyntheticSpec {
    const char * name;        // "llama3-8b"
    const char * arch;        // config "architectures"[0]
    const char * model_type;  // config "model_type"
    int n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train;
    double rope_theta, norm_eps;
    bool qkv_bias;            // Qwen2
    double llama3_factor;     // > 0: Llama-3.1 rope_scaling (low 1, high 4, original 8192)
};

const std::vector<SyntheticSpec> & synthetic_specs();
// Throws Error listing the known names when `name` is not one of them.
const SyntheticSpec & synthetic_spec(const std::string & name);
std::string synthetic_names();   // "llama3-8b, llama2-7b, ..."

struct SyntheticModel {
    Json config;                          // config.json document
    std::unique_ptr<SafeTensors> st;      // every tensor, owned
    double bpw_layers = 0;                // achieved bits per weight of the decoder linears
    double bpw_head = 0;
};

// n_layers: 0 = the architecture's count, else the first n_layers layers (a slice of a big
// model; config.json then says n_layers). bpw in [2, 8]. Throws Error on bad arguments.
SyntheticModel synthetic_build(const std::string & name, double bpw, int n_layers, uint64_t seed);
// Writes DIR/config.json, DIR/output.safetensors and a minimal byte-level DIR/tokenizer.json
// (DIR is created; existing files are not overwritten).
void synthetic_save(const std::string & name, double bpw, int n_layers, uint64_t seed, const std::string & dir);

}  // namespace exl2
