// Synthetic EXL2 models (see synthetic-model.h).
#include "synthetic-model.h"

#include "error.h"
#include "quant/synthetic.h"

#include "ggx/fp16.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <sys/stat.h>
#include <thread>

namespace exl2 {

const std::vector<SyntheticSpec> & synthetic_specs() {
    static const std::vector<SyntheticSpec> specs = {
        // name          arch                  type      D     F      L   H   Hkv hd   V       ctx     theta    eps    bias  l3
        {"llama3-8b",   "LlamaForCausalLM",   "llama",   4096, 14336, 32, 32, 8, 128, 128256, 131072, 500000,  1e-5, false, 8},
        {"llama2-7b",   "LlamaForCausalLM",   "llama",   4096, 11008, 32, 32, 32, 128, 32000, 4096,   10000,   1e-5, false, 0},
        {"llama3.2-1b", "LlamaForCausalLM",   "llama",   2048, 8192,  16, 32, 8, 64,  128256, 131072, 500000,  1e-5, false, 32},
        {"qwen2.5-7b",  "Qwen2ForCausalLM",   "qwen2",   3584, 18944, 28, 28, 4, 128, 152064, 32768,  1000000, 1e-6, true,  0},
        {"mistral-7b",  "MistralForCausalLM", "mistral", 4096, 14336, 32, 32, 8, 128, 32768,  32768,  1000000, 1e-5, false, 0},
        {"llama3-70b",  "LlamaForCausalLM",   "llama",   8192, 28672, 80, 64, 8, 128, 128256, 131072, 500000,  1e-5, false, 8},
    };
    return specs;
}

std::string synthetic_names() {
    std::string s;
    for (const SyntheticSpec & sp : synthetic_specs()) s += (s.empty() ? "" : ", ") + std::string(sp.name);
    return s;
}

const SyntheticSpec & synthetic_spec(const std::string & name) {
    for (const SyntheticSpec & sp : synthetic_specs())
        if (name == sp.name) return sp;
    fail("unknown synthetic model \"%s\" (known: %s)", name.c_str(), synthetic_names().c_str());
}

namespace {

uint64_t splitmix(uint64_t & s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// fp16 values uniform in [center - amp, center + amp].
std::vector<uint8_t> f16_random(size_t n, float center, float amp, uint64_t seed) {
    std::vector<uint8_t> b(n * 2);
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        const float u = (float)(splitmix(s) >> 40) * (1.0f / 16777216.0f);   // [0, 1)
        const uint16_t h = ggx_f32_to_f16(center + amp * (2.0f * u - 1.0f));
        memcpy(&b[2 * i], &h, 2);
    }
    return b;
}

Json make_config(const SyntheticSpec & sp, int n_layers, double bpw, int head_bits) {
    Json c = Json::make_object();
    Json archs = Json::make_array();
    archs.push_back(Json::make_string(sp.arch));
    c.set("architectures", archs);
    c.set("model_type", Json::make_string(sp.model_type));
    c.set("hidden_size", Json::make_int(sp.n_embd));
    c.set("intermediate_size", Json::make_int(sp.n_ff));
    c.set("num_hidden_layers", Json::make_int(n_layers));
    c.set("num_attention_heads", Json::make_int(sp.n_head));
    c.set("num_key_value_heads", Json::make_int(sp.n_head_kv));
    c.set("head_dim", Json::make_int(sp.head_dim));
    c.set("vocab_size", Json::make_int(sp.n_vocab));
    c.set("max_position_embeddings", Json::make_int(sp.n_ctx_train));
    c.set("rms_norm_eps", Json::make_number(sp.norm_eps));
    c.set("rope_theta", Json::make_number(sp.rope_theta));
    if (sp.llama3_factor > 0) {
        Json rs = Json::make_object();
        rs.set("rope_type", Json::make_string("llama3"));
        rs.set("factor", Json::make_number(sp.llama3_factor));
        rs.set("low_freq_factor", Json::make_number(1.0));
        rs.set("high_freq_factor", Json::make_number(4.0));
        rs.set("original_max_position_embeddings", Json::make_int(8192));
        c.set("rope_scaling", rs);
    }
    c.set("hidden_act", Json::make_string("silu"));
    c.set("tie_word_embeddings", Json::make_bool(false));
    c.set("bos_token_id", Json::make_int(1));
    c.set("eos_token_id", Json::make_int(2));
    c.set("torch_dtype", Json::make_string("float16"));
    Json q = Json::make_object();
    q.set("quant_method", Json::make_string("exl2"));
    q.set("version", Json::make_string("0.3.2"));
    q.set("bits", Json::make_number(bpw));
    q.set("head_bits", Json::make_int(head_bits));
    Json cal = Json::make_object();
    cal.set("rows", Json::make_int(0));
    cal.set("length", Json::make_int(0));
    cal.set("dataset", Json::make_string("(synthetic: random weights)"));
    q.set("calibration", cal);
    c.set("quantization_config", q);
    return c;
}

struct LinearJob {
    std::string prefix;
    int K, N;
    BitLayout layout;
    bool bias;
    uint64_t seed;
    uint64_t perm_seed = 0;   // SynthExl2Options::perm_seed
    std::vector<SynthTensor> out;
};

}  // namespace

SyntheticModel synthetic_build(const std::string & name, double bpw, int n_layers, uint64_t seed) {
    const SyntheticSpec & sp = synthetic_spec(name);
    if (!(bpw >= 2.0 && bpw <= 8.0)) fail("synthetic model: bpw %.3g outside [2, 8]", bpw);
    if (n_layers < 0 || n_layers > sp.n_layer)
        fail("synthetic model %s: %d layers requested, the architecture has %d", sp.name, n_layers, sp.n_layer);
    const int L = n_layers ? n_layers : sp.n_layer;
    const int head_bits = bpw > 6.0 ? 8 : 6;
    const int D = sp.n_embd, F = sp.n_ff, V = sp.n_vocab;
    const int Dq = sp.n_head * sp.head_dim, Dkv = sp.n_head_kv * sp.head_dim;

    std::vector<LinearJob> jobs;
    auto add = [&](const std::string & p, int K, int N, double b, bool bias) {
        LinearJob j;
        j.prefix = p;
        j.K = K;
        j.N = N;
        j.layout = exl2_layout_for_bpw(b, K, N);
        j.bias = bias;
        j.seed = seed * 0x100000001b3ull + jobs.size() + 1;
        jobs.push_back(std::move(j));
    };
    for (int il = 0; il < L; il++) {
        const std::string p = "model.layers." + std::to_string(il) + ".";
        add(p + "self_attn.q_proj", D, Dq, bpw, sp.qkv_bias);
        add(p + "self_attn.k_proj", D, Dkv, bpw, sp.qkv_bias);
        add(p + "self_attn.v_proj", D, Dkv, bpw, sp.qkv_bias);
        add(p + "self_attn.o_proj", Dq, D, bpw, false);
        add(p + "mlp.gate_proj", D, F, bpw, false);
        add(p + "mlp.up_proj", D, F, bpw, false);
        // gate and up read the same activations: one input order for both, as a converter gives
        // them
        jobs[jobs.size() - 2].perm_seed = jobs[jobs.size() - 1].perm_seed = jobs[jobs.size() - 2].seed;
        add(p + "mlp.down_proj", F, D, bpw, false);
    }
    add("lm_head", D, V, head_bits, false);

    // Layers are independent: generate them on a few threads, add them in order afterwards.
    const unsigned n_threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    std::vector<std::string> errors(n_threads);
    for (unsigned ti = 0; ti < n_threads; ti++)
        pool.emplace_back([&, ti] {
            try {
                for (size_t i = ti; i < jobs.size(); i += n_threads) {
                    SynthExl2Options o;
                    o.act_order = true;
                    o.bias = jobs[i].bias;
                    o.seed = jobs[i].seed;
                    o.perm_seed = jobs[i].perm_seed;
                    jobs[i].out = synth_exl2_layer(jobs[i].prefix, jobs[i].K, jobs[i].N, jobs[i].layout, o);
                }
            } catch (const std::exception & e) {
                errors[ti] = e.what();
            }
        });
    for (std::thread & t : pool) t.join();
    for (const std::string & e : errors)
        if (!e.empty()) fail("synthetic model %s: %s", sp.name, e.c_str());

    SyntheticModel m;
    m.st.reset(new SafeTensors());
    double bits = 0, weights = 0;
    for (LinearJob & j : jobs) {
        const double b = exl2_layout_bpw(j.layout, j.K, j.N);
        if (j.prefix == "lm_head") m.bpw_head = b;
        else { bits += b * j.K * j.N; weights += (double)j.K * j.N; }
        synth_add(*m.st, std::move(j.out));
    }
    m.bpw_layers = bits / weights;
    m.st->add("model.embed_tokens.weight", StDtype::F16, {V, D}, f16_random((size_t)V * D, 0.0f, 0.05f, seed ^ 0xe1));
    for (int il = 0; il < L; il++) {
        const std::string p = "model.layers." + std::to_string(il) + ".";
        m.st->add(p + "input_layernorm.weight", StDtype::F16, {D}, f16_random(D, 1.0f, 0.1f, seed * 31 + il * 2));
        m.st->add(p + "post_attention_layernorm.weight", StDtype::F16, {D}, f16_random(D, 1.0f, 0.1f, seed * 31 + il * 2 + 1));
    }
    m.st->add("model.norm.weight", StDtype::F16, {D}, f16_random(D, 1.0f, 0.1f, seed ^ 0x4e));
    m.config = make_config(sp, L, bpw, head_bits);
    return m;
}

namespace {

// GPT-2 byte-to-unicode table: printable bytes map to themselves, the rest to U+0100 + n.
std::string byte_token(int b) {
    int cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
        cp = 256 + n;
    }
    std::string s;
    if (cp < 0x80) s += (char)cp;
    else { s += (char)(0xC0 | (cp >> 6)); s += (char)(0x80 | (cp & 0x3F)); }
    return s;
}

std::string tokenizer_json() {
    Json added = Json::make_array();
    const char * specials[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        Json t = Json::make_object();
        t.set("id", Json::make_int(i));
        t.set("content", Json::make_string(specials[i]));
        t.set("single_word", Json::make_bool(false));
        t.set("lstrip", Json::make_bool(false));
        t.set("rstrip", Json::make_bool(false));
        t.set("normalized", Json::make_bool(false));
        t.set("special", Json::make_bool(true));
        added.push_back(t);
    }
    Json vocab = Json::make_object();
    for (int i = 0; i < 3; i++) vocab.set(specials[i], Json::make_int(i));
    for (int b = 0; b < 256; b++) vocab.set(byte_token(b), Json::make_int(3 + b));
    Json model = Json::make_object();
    model.set("type", Json::make_string("BPE"));
    model.set("dropout", Json::make_null());
    model.set("unk_token", Json::make_null());
    model.set("continuing_subword_prefix", Json::make_null());
    model.set("end_of_word_suffix", Json::make_null());
    model.set("fuse_unk", Json::make_bool(false));
    model.set("byte_fallback", Json::make_bool(false));
    model.set("vocab", vocab);
    model.set("merges", Json::make_array());
    Json bl = Json::make_object();
    bl.set("type", Json::make_string("ByteLevel"));
    bl.set("add_prefix_space", Json::make_bool(false));
    bl.set("trim_offsets", Json::make_bool(true));
    bl.set("use_regex", Json::make_bool(true));
    Json t = Json::make_object();
    t.set("version", Json::make_string("1.0"));
    t.set("truncation", Json::make_null());
    t.set("padding", Json::make_null());
    t.set("added_tokens", added);
    t.set("normalizer", Json::make_null());
    t.set("pre_tokenizer", bl);
    t.set("post_processor", Json::make_null());
    t.set("decoder", bl);
    t.set("model", model);
    return t.dump(2);
}

void write_new_file(const std::string & path, const std::string & text) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0) fail("%s already exists (not overwritten)", path.c_str());
    FILE * f = fopen(path.c_str(), "wb");
    if (!f) fail("%s: cannot create: %s", path.c_str(), strerror(errno));
    const bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
    if (fclose(f) != 0 || !ok) fail("%s: write failed", path.c_str());
}

}  // namespace

void synthetic_save(const std::string & name, double bpw, int n_layers, uint64_t seed, const std::string & dir) {
    SyntheticModel m = synthetic_build(name, bpw, n_layers, seed);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) fail("%s: cannot create folder: %s", dir.c_str(), strerror(errno));
    std::vector<StWriteTensor> ts;
    for (const auto & kv : m.st->tensors()) {
        const StTensor & t = kv.second;
        ts.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
    }
    safetensors_write(dir + "/output.safetensors", ts, {{"format", "pt"}});
    write_new_file(dir + "/config.json", m.config.dump(4) + "\n");
    write_new_file(dir + "/tokenizer.json", tokenizer_json() + "\n");
}

}  // namespace exl2
