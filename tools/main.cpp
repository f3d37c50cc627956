// main: generate text from a model folder, streaming tokens as they come.
#include "exl2.h"
#include "common/cli.h"

#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

static void usage() {
    printf(
        "usage: main -m DIR (-p PROMPT | -f FILE | --prompt-ids IDS) [options]\n"
        "\n"
        "Generates text from a Hugging Face model folder (fp16/bf16/fp32, EXL2 or GPTQ).\n"
        "The generated text goes to stdout as it is produced; timings go to stderr.\n"
        "\n"
        "  -m, --model DIR        model folder (config.json, *.safetensors, tokenizer)\n"
        "  -p, --prompt TEXT      prompt text (UTF-8)\n"
        "  -f, --file FILE        read the prompt from a file\n"
        "      --prompt-ids IDS   prompt as token ids, e.g. \"1 306 337\" (no BOS is added)\n"
        "  -n, --n-predict N      tokens to generate (default 128)\n"
        "      --temp T           temperature; 0 = greedy (default 0.8)\n"
        "      --top-k K          keep the K most likely tokens; 0 = off (default 40)\n"
        "      --top-p P          nucleus sampling; 1 = off (default 0.95)\n"
        "      --min-p P          drop tokens below P x the best probability; 0 = off (default 0.05)\n"
        "      --repeat-penalty R penalise recent tokens; 1 = off (default 1.0)\n"
        "      --repeat-last-n N  window for the penalty (default 64)\n"
        "      --seed S           random seed (default: from the clock)\n"
        "  -c, --ctx-size N       context length (default: the model's, at most 4096)\n"
        "  -b, --batch-size N     tokens per prompt chunk (default 512)\n"
        "  -t, --threads N        CPU threads (default: all cores)\n"
        "      --deterministic    logits that repeat bit for bit from run to run on a GPU (sums in a\n"
        "                         fixed order; decode 8-15%% slower)\n"
        "      --device DEV       %s\n"
        "      --cache TYPE       KV cache type: f16 (default) or f32\n"
        "      --no-bos           do not add the BOS token to the prompt\n"
        "      --ignore-eos       keep generating after the end-of-sequence token\n"
        "      --echo             print the prompt before the generated text\n"
        "      --print-ids        after the text, print the generated ids on one line\n"
        "  -v, --verbose          print loading details\n"
        "  -h, --help             this help\n",
        cli::device_help);
}

int main(int argc, char ** argv) {
    cli::set_tool_name("main");
    std::string model_dir, prompt, prompt_file, prompt_ids_str, device = "auto", cache = "f16";
    bool have_prompt = false, have_ids = false, no_bos = false, ignore_eos = false, echo = false, print_ids = false, verbose = false, deterministic = false;
    int n_predict = 128, n_ctx = 0, n_batch = 512, n_threads = 0;
    exl2_sampler_params sp = exl2_sampler_default_params();
    sp.seed = (uint64_t)time(nullptr);

    cli::Args a(argc, argv);
    while (a.next()) {
        const std::string & f = a.flag();
        if (f == "-h" || f == "--help") { usage(); return 0; }
        else if (f == "-m" || f == "--model") model_dir = a.value();
        else if (f == "-p" || f == "--prompt") { prompt = a.value(); have_prompt = true; }
        else if (f == "-f" || f == "--file") prompt_file = a.value();
        else if (f == "--prompt-ids") { prompt_ids_str = a.value(); have_ids = true; }
        else if (f == "-n" || f == "--n-predict") n_predict = (int)a.value_int(1, 1 << 24);
        else if (f == "--temp") sp.temperature = (float)a.value_float(0, 100);
        else if (f == "--top-k") sp.top_k = (int)a.value_int(0, 1 << 30);
        else if (f == "--top-p") sp.top_p = (float)a.value_float(0, 1);
        else if (f == "--min-p") sp.min_p = (float)a.value_float(0, 1);
        else if (f == "--repeat-penalty") sp.repetition_penalty = (float)a.value_float(0.01, 100);
        else if (f == "--repeat-last-n") sp.repetition_range = (int)a.value_int(0, 1 << 30);
        else if (f == "--seed") sp.seed = a.value_u64();
        else if (f == "-c" || f == "--ctx-size") n_ctx = (int)a.value_int(1, 1 << 24);
        else if (f == "-b" || f == "--batch-size") n_batch = (int)a.value_int(1, 1 << 16);
        else if (f == "-t" || f == "--threads") n_threads = (int)a.value_int(1, 1024);
        else if (f == "--device") device = a.value();
        else if (f == "--cache") cache = a.value();
        else if (f == "--deterministic") deterministic = true;
        else if (f == "--no-bos") no_bos = true;
        else if (f == "--ignore-eos") ignore_eos = true;
        else if (f == "--echo") echo = true;
        else if (f == "--print-ids") print_ids = true;
        else if (f == "-v" || f == "--verbose") verbose = true;
        else cli::die("unknown argument '%s' (see --help)", f.c_str());
    }
    if (model_dir.empty()) cli::die("no model given (-m DIR; see --help)");
    if ((int)have_prompt + (int)!prompt_file.empty() + (int)have_ids > 1) cli::die("give only one of -p, -f and --prompt-ids");
    if (!prompt_file.empty()) { prompt = cli::read_file(prompt_file); have_prompt = true; }
    if (!have_prompt && !have_ids) cli::die("no prompt given (-p TEXT, -f FILE or --prompt-ids IDS)");
    if (have_prompt && prompt.empty()) cli::die("the prompt is empty");
    if (have_prompt) {
        long bad = cli::utf8_invalid_offset(prompt);
        if (bad >= 0) cli::die("the prompt is not valid UTF-8 (byte 0x%02x at offset %ld)", (unsigned char)prompt[bad], bad);
    }
    if (cache != "f16" && cache != "f32") cli::die("--cache: '%s' is not a cache type (f16, f32)", cache.c_str());

    exl2_model_params mp = exl2_model_default_params();
    mp.device = device.c_str();
    mp.n_threads = n_threads;
    mp.verbose = verbose;
    mp.deterministic = deterministic;
    const double t_load0 = cli::now_seconds();
    exl2_model * model = cli::load_model(model_dir, mp);
    if (verbose) fprintf(stderr, "model: %s (%.2f s)\n", exl2_model_desc(model), cli::now_seconds() - t_load0);
    const exl2_tokenizer * tok = exl2_model_tokenizer(model);

    std::vector<int32_t> ids;
    if (have_ids) {
        ids = cli::parse_ids(prompt_ids_str, "--prompt-ids");
        for (int32_t id : ids)
            if (id >= exl2_model_n_vocab(model)) cli::die("--prompt-ids: id %d is outside the vocabulary (0..%d)", id, exl2_model_n_vocab(model) - 1);
    } else {
        if (!tok) cli::die("%s: the model has no tokenizer; use --prompt-ids", model_dir.c_str());
        int32_t n = exl2_tokenize(tok, prompt.data(), (int32_t)prompt.size(), nullptr, 0, no_bos ? 0 : 1, 0);
        if (n < 0) cli::die("%s", exl2_last_error());
        ids.resize((size_t)n);
        exl2_tokenize(tok, prompt.data(), (int32_t)prompt.size(), ids.data(), n, no_bos ? 0 : 1, 0);
        if (ids.empty()) cli::die("the prompt gives no tokens");
    }

    exl2_context_params cp = exl2_context_default_params();
    const int n_train = exl2_model_n_ctx_train(model);
    cp.n_ctx = n_ctx > 0 ? n_ctx : (n_train < 4096 ? n_train : 4096);
    cp.n_batch = n_batch;
    cp.cache_type = cache == "f32" ? EXL2_CACHE_F32 : EXL2_CACHE_F16;
    if ((int)ids.size() >= cp.n_ctx)
        cli::die("the prompt has %zu tokens, the context holds %d (use -c to enlarge it)", ids.size(), cp.n_ctx);
    exl2_context * ctx = exl2_context_new(model, cp);
    if (!ctx) cli::die("%s", exl2_last_error());
    exl2_sampler * smp = exl2_sampler_new(sp);
    if (!smp) cli::die("%s", exl2_last_error());
    for (int32_t id : ids) exl2_sampler_accept(smp, id);

    if (echo && tok) {
        exl2_detok_stream * es = exl2_detok_stream_new(tok, 0);
        for (int32_t id : ids) fputs(exl2_detok_stream_push(es, id), stdout);
        fputs(exl2_detok_stream_flush(es), stdout);
        exl2_detok_stream_free(es);
        fflush(stdout);
    }

    const double t0 = cli::now_seconds();
    if (exl2_decode(ctx, ids.data(), (int32_t)ids.size(), 0) != EXL2_OK) cli::die("%s", exl2_last_error());
    const double t1 = cli::now_seconds();

    const int32_t eos = tok ? exl2_tokenizer_eos(tok) : -1;
    exl2_detok_stream * ds = tok ? exl2_detok_stream_new(tok, 1) : nullptr;
    std::vector<int32_t> out;
    int room = cp.n_ctx - (int)ids.size();
    for (int i = 0; i < n_predict; i++) {
        int32_t next = exl2_sampler_sample(smp, ctx, -1);
        if (next < 0) cli::die("%s", exl2_last_error());
        out.push_back(next);
        if (ds) fputs(exl2_detok_stream_push(ds, next), stdout);
        fflush(stdout);
        if (next == eos && !ignore_eos) break;
        if (i + 1 == n_predict) break;
        if (--room <= 0) {
            fprintf(stderr, "\n[context full after %d tokens]\n", cp.n_ctx);
            break;
        }
        int rc = exl2_decode(ctx, &next, 1, 0);
        if (rc != EXL2_OK) cli::die("%s", exl2_last_error());
    }
    const double t2 = cli::now_seconds();
    if (ds) {
        fputs(exl2_detok_stream_flush(ds), stdout);
        exl2_detok_stream_free(ds);
    }
    if (print_ids) {
        printf("\n");
        for (size_t i = 0; i < out.size(); i++) printf(i ? " %d" : "%d", out[i]);
        printf("\n");
    }
    fflush(stdout);
    // Decode steps: one per generated token after the first (the first comes from the prefill).
    const int n_steps = (int)out.size() - 1;
    fprintf(stderr, "\nprompt: %zu tokens in %.1f ms (%.1f t/s) | generated: %zu tokens in %.1f ms (%.1f t/s)\n", ids.size(),
            (t1 - t0) * 1e3, ids.size() / (t1 - t0), out.size(), (t2 - t1) * 1e3,
            n_steps > 0 ? n_steps / (t2 - t1) : 0.0);
    exl2_sampler_free(smp);
    exl2_context_free(ctx);
    exl2_model_free(model);
    return 0;
}
