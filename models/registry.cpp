// The architecture table: config.json's architectures[0] -> the class that loads and builds it.
#include "exl2/architecture.h"

#include <cstring>

namespace exl2 {

std::unique_ptr<Architecture> create_llama(const ModelConfig &);
std::unique_ptr<Architecture> create_qwen2(const ModelConfig &);

namespace {
struct Entry {
    const char * name;
    std::unique_ptr<Architecture> (*create)(const ModelConfig &);
};
const Entry k_architectures[] = {
    {"LlamaForCausalLM", create_llama},
    {"MistralForCausalLM", create_llama},
    {"Qwen2ForCausalLM", create_qwen2},
};
}  // namespace

std::unique_ptr<Architecture> architecture_create(const ModelConfig & cfg) {
    for (const Entry & e : k_architectures)
        if (cfg.arch == e.name) return e.create(cfg);
    return nullptr;
}

std::string architecture_list() {
    std::string s;
    for (const Entry & e : k_architectures) s += (s.empty() ? "" : ", ") + std::string(e.name);
    return s;
}

}  // namespace exl2
