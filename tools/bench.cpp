// bench: prefill and decode speed of a model, llama-bench style.
//
//   bench -m DIR                                   an EXL2/GPTQ/fp16 model folder
//   bench --synthetic llama3-8b --bpw 4.0          a random EXL2 model with real shapes
//   bench --synthetic llama3-70b --bpw 4 --layers 8 --save out/   write it as an EXL2 folder
//
// Reports pp<N> (prompt tokens/s for one N-token batch) and tg<n>@<d> (generated tokens/s for n
// single-token steps after d cached tokens), plus what bounds decode: weight bytes read per
// token, the bandwidth that implies, and its fraction of the device's measured copy bandwidth.
// Uses only the C API.
#include "exl2.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Options {
    std::string model_dir, synthetic, device, save_dir, output = "md";
    float bpw = 4.0f;
    int layers = 0, n_gen = 128, reps = 3, threads = 0;
    int run_ahead = 0;   // exl2_context_params.run_ahead
    bool sample = false; // decode tests draw with main's default sampler instead of greedy
    bool deterministic = false;   // exl2_model_params.deterministic
    uint64_t seed = 1;
    std::vector<int> pp = {512, 2048};
    std::vector<int> depths = {16, 4096};
};

void usage() {
    printf(
        "usage: bench (-m DIR | --synthetic NAME [--bpw B] [--layers N] [--seed S]) [options]\n"
        "  -m, --model DIR      model folder (config.json, *.safetensors)\n"
        "  --synthetic NAME     random EXL2 model with real shapes: %s\n"
        "  --bpw B              bits per weight of a synthetic model's layers (2..8, default 4.0)\n"
        "  --layers N           first N layers only (0 = all, default)\n"
        "  --seed S             synthetic weights seed (default 1)\n"
        "  --save DIR           write the synthetic model as an EXL2 folder and exit\n"
        "  --device D           cpu | cuda | cuda:N (default cuda:0 when compiled in, else cpu)\n"
        "  -p LIST              prompt sizes, comma separated (default 512,2048; 0 = none)\n"
        "  -n N                 tokens generated per decode test (default 128; 0 = none)\n"
        "  --ctx LIST           cache depths for decode tests (default 16,4096; 0 = an empty cache)\n"
        "  -r N                 repetitions, the median is reported (default 3)\n"
        "  --run-ahead N        greedy run-ahead: 0 = on for GPUs (default), 1 = on, -1 = off\n"
        "  --sample             decode tests draw tokens as main does by default (temperature 0.8,\n"
        "                       top-k 40, top-p 0.95, min-p 0.05) instead of greedily\n"
        "  --deterministic      logits that repeat bit for bit from run to run (GPU sums in a\n"
        "                       fixed order; decode 8-15%% slower)\n"
        "  -t N                 CPU threads (default all)\n"
        "  -o md|json           output format (default md)\n"
        "  -h, --help           this text\n",
        exl2_synthetic_names());
}

[[noreturn]] void die(const std::string & msg) {
    fprintf(stderr, "bench: %s\n", msg.c_str());
    exit(1);
}

bool parse_int(const char * s, long lo, long hi, long * out) {
    char * end = nullptr;
    const long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

// A comma-separated list of integers in lo..hi; zeros are dropped unless keep_zero ("-p 0": no
// prompt test; "--ctx 0": a decode test from an empty cache).
std::vector<int> parse_list(const std::string & flag, const char * s, int lo, int hi, bool keep_zero = false) {
    std::vector<int> v;
    std::string cur;
    for (const char * p = s;; p++) {
        if (*p == ',' || *p == 0) {
            long x;
            if (!parse_int(cur.c_str(), lo, hi, &x)) die("bad value '" + cur + "' in " + flag + " (integers " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
            if (x > 0 || keep_zero) v.push_back((int)x);
            cur.clear();
            if (!*p) break;
        } else cur += *p;
    }
    return v;
}

Options parse(int argc, char ** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        auto val = [&]() -> const char * {
            if (i + 1 >= argc) die("flag " + a + " needs a value (see --help)");
            return argv[++i];
        };
        long x;
        if (a == "-h" || a == "--help") { usage(); exit(0); }
        else if (a == "-m" || a == "--model") o.model_dir = val();
        else if (a == "--synthetic") o.synthetic = val();
        else if (a == "--bpw") {
            const char * s = val();
            char * end = nullptr;
            o.bpw = strtof(s, &end);
            if (end == s || *end || !(o.bpw >= 2.0f && o.bpw <= 8.0f)) die(std::string("bad --bpw '") + s + "' (2..8)");
        }
        else if (a == "--layers") { if (!parse_int(val(), 0, 1000, &x)) die("bad --layers (0..1000)"); o.layers = (int)x; }
        else if (a == "--seed") { if (!parse_int(val(), 0, 1L << 62, &x)) die("bad --seed"); o.seed = (uint64_t)x; }
        else if (a == "--save") o.save_dir = val();
        else if (a == "--device") o.device = val();
        else if (a == "-p") o.pp = parse_list(a, val(), 0, 1 << 20);
        else if (a == "-n") { if (!parse_int(val(), 0, 1 << 20, &x)) die("bad -n (0..1048576)"); o.n_gen = (int)x; }
        else if (a == "--ctx") o.depths = parse_list(a, val(), 0, 1 << 22, true);
        else if (a == "--run-ahead") { if (!parse_int(val(), -1, 1, &x)) die("bad --run-ahead (-1, 0 or 1)"); o.run_ahead = (int)x; }
        else if (a == "--sample") o.sample = true;
        else if (a == "--deterministic") o.deterministic = true;
        else if (a == "-r") { if (!parse_int(val(), 1, 1000, &x)) die("bad -r (1..1000)"); o.reps = (int)x; }
        else if (a == "-t") { if (!parse_int(val(), 0, 1024, &x)) die("bad -t (0..1024)"); o.threads = (int)x; }
        else if (a == "-o") { o.output = val(); if (o.output != "md" && o.output != "json") die("bad -o '" + o.output + "' (md or json)"); }
        else die("unknown flag '" + a + "' (see --help)");
    }
    if (o.model_dir.empty() == o.synthetic.empty()) die("give exactly one of -m DIR or --synthetic NAME (see --help)");
    if (!o.save_dir.empty() && o.synthetic.empty()) die("--save needs --synthetic");
    if (o.save_dir.empty() && o.pp.empty() && (o.n_gen == 0 || o.depths.empty()))
        die("nothing to measure: -p selects no prompt test and -n / --ctx no decode test (see --help)");
    // a GPU backend compiled in (CUDA or HIP, both answer to "cuda") lists more than "cpu"
    if (o.device.empty()) o.device = strcmp(exl2_backends(), "cpu") != 0 ? "cuda:0" : "cpu";
    return o;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Result {
    std::string test;
    int n_tokens;
    double seconds;     // median per repetition
    double tps;
    double bytes_per_token;   // decode only (weights), 0 for prefill
};

std::string json_escape(const std::string & s) {
    std::string r;
    for (char c : s) {
        if (c == '"' || c == '\\') { r += '\\'; r += c; }
        else if ((unsigned char)c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); r += b; }
        else r += c;
    }
    return r;
}

}  // namespace

int main(int argc, char ** argv) {
    Options o = parse(argc, argv);

    if (!o.save_dir.empty()) {
        if (exl2_synthetic_save(o.synthetic.c_str(), o.bpw, o.layers, o.seed, o.save_dir.c_str()) != EXL2_OK)
            die(exl2_last_error());
        fprintf(stderr, "bench: wrote %s (%s, %.2f bpw, %s layers, seed %llu)\n", o.save_dir.c_str(), o.synthetic.c_str(),
                o.bpw, o.layers ? std::to_string(o.layers).c_str() : "all", (unsigned long long)o.seed);
        return 0;
    }

    uint64_t free0 = 0, total = 0;
    const bool have_mem = exl2_device_memory(o.device.c_str(), &free0, &total) == EXL2_OK;
    if (!have_mem && o.device != "cpu") die(exl2_last_error());

    struct exl2_model_params mp = exl2_model_default_params();
    mp.device = o.device.c_str();
    mp.n_threads = o.threads;
    mp.deterministic = o.deterministic;
    const double t_load0 = now_s();
    exl2_model * model = o.synthetic.empty() ? exl2_model_load(o.model_dir.c_str(), mp)
                                             : exl2_model_load_synthetic(o.synthetic.c_str(), o.bpw, o.layers, o.seed, mp);
    if (!model) die(exl2_last_error());
    const double t_load = now_s() - t_load0;
    uint64_t free_m = 0;   // after the model, before the context: splits the VRAM figure between them
    const bool have_mem_m = have_mem && exl2_device_memory(o.device.c_str(), &free_m, &total) == EXL2_OK;
    const int V = exl2_model_n_vocab(model);
    const uint64_t wbytes = exl2_model_weight_bytes(model);

    int max_pp = 0, max_depth = 0;
    for (int p : o.pp) max_pp = std::max(max_pp, p);
    for (int d : o.depths) max_depth = std::max(max_depth, d);
    struct exl2_context_params cp = exl2_context_default_params();
    cp.n_batch = std::max(512, max_pp);
    cp.n_ctx = std::max(max_pp, max_depth + o.n_gen) + 16;
    cp.run_ahead = o.run_ahead;
    exl2_context * ctx = exl2_context_new(model, cp);
    if (!ctx) die(exl2_last_error());

    uint64_t free1 = 0;
    const bool have_mem1 = have_mem && exl2_device_memory(o.device.c_str(), &free1, &total) == EXL2_OK;
    const uint64_t dev_bytes = exl2_model_device_bytes(model), cache_bytes = exl2_context_cache_bytes(ctx);
    const uint64_t compute_bytes = exl2_context_compute_bytes(ctx);   // as reserved, before any batch
    const double copy_bw = exl2_device_copy_bandwidth(o.device.c_str(), 0);   // negative: not available

    std::mt19937 rng(1234);
    std::vector<int32_t> toks(std::max(max_pp, max_depth) + 1);
    for (int32_t & t : toks) t = 3 + (int32_t)(rng() % (uint32_t)std::max(1, V - 3));

    std::vector<Result> results;
    // Every test samples greedily through the API after its decode, as main does: the figures
    // include choosing the token and reading it back (on a GPU only the id crosses, the logits
    // stay there), and the decode is complete when the clock stops (exl2_decode itself may return
    // while the device still works). With run-ahead (on GPUs) the step after the last token is
    // queued when the clock stops; it is not counted, and the next truncate waits for it.
    struct exl2_sampler_params sp = exl2_sampler_default_params();
    sp.temperature = 0.0f;
    sp.repetition_penalty = 1.0f;
    exl2_sampler * greedy = exl2_sampler_new(sp);
    if (!greedy) die(exl2_last_error());
    // --sample: the decode tests draw as main does by default, so their figures include reading
    // the logits back and the host sampler, which greedy decoding (and run-ahead) avoid.
    struct exl2_sampler_params dp = exl2_sampler_default_params();
    dp.seed = 1;
    exl2_sampler * drawing = o.sample ? exl2_sampler_new(dp) : greedy;
    if (!drawing) die(exl2_last_error());
    for (int n : o.pp) {
        std::vector<double> ts;
        for (int r = -1; r < o.reps; r++) {   // r = -1: warm-up (graph planning and capture)
            exl2_context_truncate(ctx, 0);
            const double t0 = now_s();
            if (exl2_decode(ctx, toks.data(), n, 0) != EXL2_OK || exl2_sampler_sample(greedy, ctx, -1) < 0)
                die(exl2_last_error());
            if (r >= 0) ts.push_back(now_s() - t0);
        }
        const double s = median(ts);
        results.push_back({"pp" + std::to_string(n), n, s, n / s, 0});
    }
    for (int d : (o.n_gen > 0 ? o.depths : std::vector<int>{})) {
        exl2_context_truncate(ctx, 0);
        if (d > 0 && (exl2_decode(ctx, toks.data(), d, 0) != EXL2_OK || exl2_sampler_sample(greedy, ctx, -1) < 0))
            die(exl2_last_error());
        std::vector<double> ts;
        for (int r = -1; r < o.reps; r++) {
            exl2_context_truncate(ctx, d);
            int32_t next = toks[d % toks.size()];
            const double t0 = now_s();
            for (int i = 0; i < o.n_gen; i++) {
                if (exl2_decode(ctx, &next, 1, 0) != EXL2_OK) die(exl2_last_error());
                next = exl2_sampler_sample(drawing, ctx, -1);
                if (next < 0) die(exl2_last_error());
            }
            if (r >= 0) ts.push_back(now_s() - t0);
        }
        const double s = median(ts);
        results.push_back({"tg" + std::to_string(o.n_gen) + "@" + std::to_string(d) + (o.sample ? " sampled" : ""), o.n_gen, s,
                           o.n_gen / s, (double)wbytes});
    }

    const double vram = have_mem1 ? (double)(free0 - free1) : 0;
    const double vram_model = have_mem_m ? (double)(free0 - free_m) : 0;
    // Scratch and compute buffers grow on first use: the figure after the tests includes them.
    uint64_t free2 = 0;
    const bool have_mem2 = have_mem && exl2_device_memory(o.device.c_str(), &free2, &total) == EXL2_OK;
    const double vram_after = have_mem2 ? (double)(free0 - free2) : 0;
    const std::string name = o.synthetic.empty() ? o.model_dir : o.synthetic + " (synthetic)";
    if (o.output == "json") {
        printf("{\n  \"model\": \"%s\",\n  \"desc\": \"%s\",\n  \"device\": \"%s\",\n", json_escape(name).c_str(),
               json_escape(exl2_model_desc(model)).c_str(), json_escape(o.device).c_str());
        if (!o.synthetic.empty()) printf("  \"bpw\": %.3f,\n  \"layers\": %d,\n", o.bpw, exl2_model_n_layer(model));
        printf("  \"run_ahead\": %d,\n  \"deterministic\": %s,\n", o.run_ahead, o.deterministic ? "true" : "false");
        printf("  \"load_s\": %.3f,\n  \"weight_bytes_per_token\": %llu,\n  \"weights_device_bytes\": %llu,\n"
               "  \"kv_cache_bytes\": %llu,\n  \"compute_buffer_bytes\": %llu,\n  \"vram_used_bytes\": %.0f,\n"
               "  \"vram_model_bytes\": %.0f,\n  \"vram_after_tests_bytes\": %.0f,\n  \"copy_bandwidth_bytes_per_s\": %.0f,\n"
               "  \"results\": [\n",
               t_load, (unsigned long long)wbytes, (unsigned long long)dev_bytes, (unsigned long long)cache_bytes,
               (unsigned long long)compute_bytes, vram, vram_model, vram_after, copy_bw > 0 ? copy_bw : 0.0);
        for (size_t i = 0; i < results.size(); i++) {
            const Result & r = results[i];
            printf("    {\"test\": \"%s\", \"tokens\": %d, \"seconds\": %.6f, \"tokens_per_s\": %.2f", r.test.c_str(), r.n_tokens,
                   r.seconds, r.tps);
            if (r.bytes_per_token > 0) {
                const double bw = r.bytes_per_token * r.tps;
                printf(", \"weight_bandwidth_bytes_per_s\": %.0f", bw);
                if (copy_bw > 0) printf(", \"fraction_of_copy_bandwidth\": %.4f", bw / copy_bw);
            }
            printf("}%s\n", i + 1 < results.size() ? "," : "");
        }
        printf("  ]\n}\n");
    } else {
        printf("model:   %s\n", exl2_model_desc(model));
        printf("device:  %s   load %.1f s   run-ahead %s%s\n", o.device.c_str(), t_load,
               o.run_ahead < 0 ? "off" : o.run_ahead > 0 ? "on" : "auto (GPUs only)", o.deterministic ? "   deterministic" : "");
        printf("weights: %.1f MiB read per token", wbytes / 1048576.0);
        if (have_mem1) printf("   VRAM used (model + context): %.1f MiB of %.1f GiB", vram / 1048576.0, total / 1073741824.0);
        if (have_mem2 && o.device != "cpu") printf(", %.1f MiB after the tests (with scratch)", vram_after / 1048576.0);
        printf("\n");
        // What the VRAM figure is made of: the rest is the runtime's own (cuBLAS workspace,
        // decode tables, scratch, allocation granularity).
        printf("memory:  weights %.1f MiB + KV cache %.1f MiB (%d tokens) + compute buffer %.1f MiB", dev_bytes / 1048576.0,
               cache_bytes / 1048576.0, exl2_context_n_ctx(ctx), compute_bytes / 1048576.0);
        if (have_mem1 && o.device != "cpu") {
            const double base = (double)dev_bytes + (double)cache_bytes, over = vram - base;
            printf("; VRAM beyond weights + cache: %.1f MiB (%.1f%%)", over / 1048576.0, base > 0 ? 100.0 * over / base : 0.0);
            if (have_mem_m)   // which of the two holds the rest
                printf(" = model %.1f + context %.1f MiB beyond weights, cache and compute buffer",
                       (vram_model - (double)dev_bytes) / 1048576.0,
                       (vram - vram_model - (double)cache_bytes - (double)compute_bytes) / 1048576.0);
        }
        printf("\n");
        if (copy_bw > 0) printf("copy bandwidth (read + write): %.0f GB/s -> decode limit %.1f tok/s from weights alone\n",
                                copy_bw / 1e9, copy_bw / (double)wbytes);
        printf("\n| test | tokens/s | ms/token | weight GB/s | of copy bw |\n|---|---:|---:|---:|---:|\n");
        for (const Result & r : results) {
            if (r.bytes_per_token > 0) {
                const double bw = r.bytes_per_token * r.tps;
                printf("| %s | %.1f | %.3f | %.0f | %s |\n", r.test.c_str(), r.tps, 1000.0 / r.tps, bw / 1e9,
                       copy_bw > 0 ? (std::to_string((int)(100 * bw / copy_bw + 0.5)) + "%").c_str() : "-");
            } else {
                printf("| %s | %.1f | %.4f | - | - |\n", r.test.c_str(), r.tps, 1000.0 / r.tps);
            }
        }
    }
    if (drawing != greedy) exl2_sampler_free(drawing);
    exl2_sampler_free(greedy);
    exl2_context_free(ctx);
    exl2_model_free(model);
    return 0;
}
