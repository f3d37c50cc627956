// Bad inputs give one-line errors naming what is wrong, never a crash: the library (Model::load)
// and the tools (./main, ./perplexity run as processes, as a user would).
#include "fixtures.h"
#include "run-tool.h"

#include "exl2/error.h"
#include "exl2/json.h"
#include "exl2/model.h"
#include "exl2/safetensors.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace exl2;
using testfx::contains;

namespace {

struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/exl2-test-XXXXXX";
        REQUIRE(mkdtemp(tmpl));
        path = tmpl;
    }
    ~TempDir() { (void)!system(("rm -rf '" + path + "'").c_str()); }
};

void write_text(const std::string & path, const std::string & s) {
    std::ofstream f(path, std::ios::binary);
    f << s;
}

const char * k_tiny_config = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
  "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
  "vocab_size": 10, "rms_norm_eps": 1e-5, "max_position_embeddings": 32
})";

// Writes a valid tiny Llama (f16) to dir; `mutate` may change one tensor's dtype/shape.
void write_tiny_model(const std::string & dir, const std::string & bad_tensor = "", StDtype bad_dtype = StDtype::F16,
                      std::vector<int64_t> bad_shape = {}) {
    struct T { std::string name; std::vector<int64_t> shape; };
    std::vector<T> ts = {{"model.embed_tokens.weight", {10, 8}}, {"model.norm.weight", {8}}, {"lm_head.weight", {10, 8}},
                         {"model.layers.0.input_layernorm.weight", {8}}, {"model.layers.0.post_attention_layernorm.weight", {8}},
                         {"model.layers.0.self_attn.q_proj.weight", {8, 8}}, {"model.layers.0.self_attn.k_proj.weight", {4, 8}},
                         {"model.layers.0.self_attn.v_proj.weight", {4, 8}}, {"model.layers.0.self_attn.o_proj.weight", {8, 8}},
                         {"model.layers.0.mlp.gate_proj.weight", {16, 8}}, {"model.layers.0.mlp.up_proj.weight", {16, 8}},
                         {"model.layers.0.mlp.down_proj.weight", {8, 16}}};
    std::vector<std::vector<uint8_t>> data;
    std::vector<StWriteTensor> w;
    for (auto & t : ts) {
        StDtype dt = StDtype::F16;
        if (t.name == bad_tensor) {
            dt = bad_dtype;
            if (!bad_shape.empty()) t.shape = bad_shape;
        }
        size_t n = st_dtype_size(dt);
        for (int64_t d : t.shape) n *= (size_t)d;
        data.emplace_back(n, (uint8_t)0x3c);   // 0x3c3c = f16 1.05
        w.push_back({t.name, dt, t.shape, data.back().data(), n});
    }
    safetensors_write(dir + "/model.safetensors", w);
    write_text(dir + "/config.json", k_tiny_config);
}

std::string load_error(const std::string & dir) {
    try {
        Model::load(dir, ModelParams(), false);
    } catch (const Error & e) {
        return e.what();
    }
    return "";
}


}  // namespace

TEST_CASE("loader: a valid tiny model loads") {
    TempDir d;
    write_tiny_model(d.path);
    CHECK(load_error(d.path) == "");
}

TEST_CASE("loader: missing folder, missing config, bad JSON") {
    TempDir d;
    std::string e = load_error(d.path + "/nope");
    CHECK(contains(e, "nope"));
    CHECK(contains(e, "not found"));
    e = load_error(d.path);
    CHECK(contains(e, "missing config.json"));
    write_text(d.path + "/config.json", "{\"architectures\": [\"LlamaForCausalLM\"], ");
    e = load_error(d.path);
    CHECK(contains(e, "config.json"));
    CHECK(contains(e, "invalid JSON"));
}

TEST_CASE("loader: unknown architecture, missing field, no weights") {
    TempDir d;
    write_tiny_model(d.path);
    std::string cfg = k_tiny_config;
    write_text(d.path + "/config.json", std::string(cfg).replace(cfg.find("LlamaForCausalLM"), 16, "FooBarForCausalLM"));
    std::string e = load_error(d.path);
    CHECK(contains(e, "unknown architecture \"FooBarForCausalLM\""));
    write_text(d.path + "/config.json", std::string(cfg).replace(cfg.find("\"vocab_size\": 10,"), 17, ""));
    e = load_error(d.path);
    CHECK(contains(e, "vocab_size"));
    write_text(d.path + "/config.json", cfg);
    remove((d.path + "/model.safetensors").c_str());
    e = load_error(d.path);
    CHECK(contains(e, "no *.safetensors"));
}

TEST_CASE("loader: truncated safetensors names the file and tensor") {
    TempDir d;
    write_tiny_model(d.path);
    const std::string f = d.path + "/model.safetensors";
    struct stat st;
    REQUIRE(stat(f.c_str(), &st) == 0);
    REQUIRE(truncate(f.c_str(), st.st_size - 20) == 0);
    std::string e = load_error(d.path);
    CHECK(contains(e, "model.safetensors"));
    CHECK(contains(e, "truncated"));
    REQUIRE(truncate(f.c_str(), 5) == 0);
    e = load_error(d.path);
    CHECK(contains(e, "truncated"));
}

TEST_CASE("loader: wrong dtype and wrong shape name the tensor") {
    TempDir d;
    write_tiny_model(d.path, "model.layers.0.mlp.up_proj.weight", StDtype::I32);
    std::string e = load_error(d.path);
    CHECK(contains(e, "model.layers.0.mlp.up_proj.weight"));
    CHECK(contains(e, "dtype I32"));
    TempDir d2;
    write_tiny_model(d2.path, "model.layers.0.self_attn.k_proj.weight", StDtype::F16, {8, 8});
    e = load_error(d2.path);
    CHECK(contains(e, "model.layers.0.self_attn.k_proj.weight"));
    CHECK(contains(e, "shape [8, 8], expected [4, 8]"));
}

TEST_CASE("loader: missing tensor is named") {
    TempDir d;
    write_tiny_model(d.path, "model.norm.weight", StDtype::F16, {8});
    // rewrite without model.norm.weight: rename it in the header by writing a fresh file
    SafeTensors st;
    st.open_file(d.path + "/model.safetensors");
    std::vector<StWriteTensor> w;
    for (const auto & kv : st.tensors())
        if (kv.first != "model.norm.weight")
            w.push_back({kv.first, kv.second.dtype, kv.second.shape, kv.second.data, kv.second.nbytes});
    safetensors_write(d.path + "/model2.safetensors", w);
    remove((d.path + "/model.safetensors").c_str());
    std::string e = load_error(d.path);
    CHECK(contains(e, "tensor model.norm.weight not found"));
}

// ---------------------------------------------------------------------------------------------
// Tools, run as processes from the repository root.
using testfx::run_cmd;
using testfx::Run;

struct ToolError {
    const char * args;
    const char * expect;
};

// Runs `tool args` through bash for each case: exit status 1, and the expected words and the
// tool's error prefix in what it printed.
template <size_t N>
void check_tool_errors(const char * tool, const char * prefix, const ToolError (&cases)[N]) {
    for (const ToolError & c : cases) {
        CAPTURE(c.args);
        Run r = run_cmd(std::string("bash -c \"") + tool + " " + c.args + "\"");
        CAPTURE(r.out);
        CHECK(r.status == 1);
        CHECK(contains(r.out, c.expect));
        CHECK(contains(r.out, prefix));
    }
}

TEST_CASE("main: bad inputs give one-line errors and exit 1") {
    REQUIRE_TOOL("./main");
    const ToolError cases[] = {
        {"-m /nonexistent/model -p hi", "/nonexistent/model"},
        {"-m models/kjv-6m -p ''", "the prompt is empty"},
        {"-m models/kjv-6m -p hi -n 0", "-n: 0 is out of range"},
        {"-m models/kjv-6m -p $'\\xff\\xfe'", "not valid UTF-8"},
        {"-m models/kjv-6m -p hi --temp abc", "--temp: 'abc' is not a number"},
        {"-m models/kjv-6m -p hi --bogus", "unknown argument '--bogus'"},
        {"-m models/kjv-6m", "no prompt given"},
#if defined(GGX_USE_HIP)
        {"-m models/kjv-6m -p hi --device cuda:7", "hip"},   // the same backend, named for AMD
#else
        {"-m models/kjv-6m -p hi --device cuda:7", "cuda"},
#endif
        {"-m models/kjv-6m --prompt-ids '1 x'", "not a list of token ids"},
        {"-m models/kjv-6m --prompt-ids '5000'", "outside the vocabulary"},
    };
    check_tool_errors("./main", "main: error: ", cases);
    Run h = run_cmd("./main --help");
    CHECK(h.status == 0);
    CHECK(contains(h.out, "usage: main"));
}

TEST_CASE("bench: bad inputs give one-line errors; --ctx 0 measures decode from an empty cache") {
    REQUIRE_TOOL("./bench/bench");
    const ToolError cases[] = {
        {"--synthetic nope", "unknown synthetic model \"nope\""},
        {"--synthetic llama3.2-1b --bpw 1.0", "bad --bpw '1.0' (2..8)"},
        {"-m models/kjv-6m -p abc", "bad value 'abc' in -p"},
        {"-m models/kjv-6m -p 0 -n 0", "nothing to measure"},
        {"-m models/kjv-6m -p 0 --ctx ''", "bad value '' in --ctx"},
        {"-m /nonexistent/model", "/nonexistent/model"},
        {"-m models/kjv-6m -o yaml", "bad -o 'yaml'"},
    };
    check_tool_errors("./bench/bench --device cpu", "bench: ", cases);   // (a GPU build would try cuda:0 first)
    Run r = run_cmd("./bench/bench -m models/kjv-6m -p 16 -n 4 --ctx 0,8 -r 1 --device cpu -o json");
    CAPTURE(r.out);
    CHECK(r.status == 0);
    CHECK(contains(r.out, "\"test\": \"pp16\""));
    CHECK(contains(r.out, "\"test\": \"tg4@0\""));
    CHECK(contains(r.out, "\"test\": \"tg4@8\""));
}

TEST_CASE("perplexity: bad inputs") {
    REQUIRE_TOOL("./perplexity");
    Run r = run_cmd("./perplexity -m models/kjv-6m -f /nonexistent.txt");
    CHECK(r.status == 1);
    CHECK(contains(r.out, "/nonexistent.txt"));
    r = run_cmd("./perplexity -m models/kjv-6m -f README.md -c 64 --stride 40");
    CHECK(r.status == 1);
    CHECK(contains(r.out, "--stride 40 must be at most half"));
}
