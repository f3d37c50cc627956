// A loaded model: configuration, weights in backend memory, tokenizer, and the architecture that
// names its tensors and builds its graph (models/*.cpp).
#pragma once

#include "config.h"
#include "safetensors.h"

#include "ggx/ggx-backend.h"
#include "ggx/ggx.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace exl2 {

struct QLayerHost;

class Tokenizer;
class Architecture;

struct ModelParams {
    std::string device = "cpu";   // "cpu", "cuda", "cuda:N", "hip", "auto" (the GPU if one answers, else the CPU)
    int n_threads = 0;            // CPU threads, 0 = all cores
    bool verbose = false;         // progress on stderr
    bool deterministic = false;   // results that repeat bit for bit (ggx_backend_set_deterministic)
};

// A linear layer: weight (f32/f16/bf16 {K, N}, or an EXL2/GPTQ tensor) and optional bias {N}.
struct Linear {
    ggx_tensor * w = nullptr;
    ggx_tensor * b = nullptr;
};

class Model {
public:
    ~Model();

    // Loads a Hugging Face model folder (config.json, *.safetensors, tokenizer files).
    static std::unique_ptr<Model> load(const std::string & dir, const ModelParams & p, bool with_tokenizer = true);
    // Loads from tensors already indexed or built in memory (synthetic models). `tokenizer_dir`
    // may be empty: the model then has no tokenizer.
    static std::unique_ptr<Model> load_tensors(std::unique_ptr<SafeTensors> st, const Json & config,
                                               const ModelParams & p, const std::string & dir = "",
                                               bool with_tokenizer = true);

    ModelConfig cfg;
    std::string dir;
    ggx_backend * backend = nullptr;
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Architecture> arch;
    std::string desc;
    std::string device_note;   // why "auto" took the CPU though the build has a GPU backend; "" otherwise

    uint64_t n_params = 0;        // logical parameters of all weights
    uint64_t weight_bytes = 0;    // bytes of weights read per token (everything but the embedding table)
    uint64_t device_bytes = 0;    // backend memory held for weights

    // Weight creation, used by architectures while loading (throw Error naming the tensor).
    // `ne` is in ggx order (innermost first): a HF tensor of shape [N, K] is ne = {K, N}.
    ggx_tensor * tensor(const std::string & name, std::initializer_list<int64_t> ne, bool required = true);
    // Linear layer `prefix` with K inputs and N outputs: EXL2 (prefix.q_weight), GPTQ
    // (prefix.qweight) or plain (prefix.weight); bias prefix.bias when `bias` is true (required)
    // or when present.
    Linear linear(const std::string & prefix, int64_t K, int64_t N, bool bias = false, bool required = true);
    // A gated MLP's three layers under `prefix` (prefix + "gate_proj", "up_proj", "down_proj"; D
    // inputs, F hidden): when all three are quantized, gate's and up's columns are put in down's
    // input order and down's order dropped (exl2/quant/glu-order.h), else each as linear().
    void gated_mlp(const std::string & prefix, int64_t D, int64_t F, bool bias, Linear & gate, Linear & up, Linear & down);
    bool has_tensor(const std::string & name) const;

private:
    Model();
    void finish_load();
    // A quantized layer's host copy, its shape checked against K x N.
    QLayerHost load_qlayer(const std::string & prefix, int64_t K, int64_t N);
    // Uploads a quantized layer (its bias becomes an f32 tensor; `bias` requires one).
    Linear upload_qlayer(QLayerHost & host, const std::string & prefix, bool bias);
    // The file's tensor `name`, checked for presence, dtype (F16/BF16/F32) and shape; nullptr when
    // absent and not required.
    const StTensor * checked(const std::string & name, std::initializer_list<int64_t> ne, bool required);
    // A bias kept in f32 so ADD reads one type.
    ggx_tensor * bias_f32(const std::string & name, std::vector<float> values);

    std::unique_ptr<SafeTensors> st_;
    ggx_context * wctx_ = nullptr;
    // A plain tensor to place: bytes in the map, or values made on the host (f32 biases).
    struct Pending {
        ggx_tensor * t;
        const StTensor * src;      // nullptr when `host` holds the values
        std::vector<float> host;
    };
    std::vector<Pending> pending_;
    std::vector<void *> buffers_;         // backend buffers we own
    std::vector<std::pair<ggx_tensor *, void *>> qlayers_;  // quantized tensors and their buffers
    size_t n_quantized_ = 0;
};

// Backend memory helper: throws Error with the backend's message on failure.
void * backend_alloc(ggx_backend * be, size_t size, const char * what);

// The backend for a device name as the library takes it ("cpu", "cuda:N", "hip", ...), or "auto":
// the first GPU when the build has a GPU backend and it answers, else the CPU, with the GPU's
// error in *note. nullptr (ggx_last_error says why) when the named device does not open.
ggx_backend * backend_open(const std::string & device, int n_threads, std::string * note);

}  // namespace exl2
