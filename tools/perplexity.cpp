// perplexity: exp(mean negative log-likelihood) of a text under a model, with its standard error.
//
// Non-overlapping windows (default): the token stream is cut into windows of CTX - 1 tokens,
// each evaluated after a BOS token (when the model has one), and every token is scored.
// Strided windows (--stride S, S <= CTX/2): windows of CTX tokens start every S tokens, and only
// the last S tokens of each window are scored (the first window scores all), so every token is
// scored once, always with at least CTX - S >= CTX/2 tokens of context before it.
#include "exl2.h"
#include "common/cli.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

static void usage() {
    printf(
        "usage: perplexity -m DIR -f FILE [options]\n"
        "\n"
        "Prints the perplexity of a text file under a model, with its standard error.\n"
        "\n"
        "  -m, --model DIR      model folder\n"
        "  -f, --file FILE      UTF-8 text to score\n"
        "  -c, --ctx-size N     window length in tokens (default 512)\n"
        "      --stride S       strided windows: start a window every S tokens (S <= CTX/2) and\n"
        "                       score only its last S tokens (default: non-overlapping windows)\n"
        "      --chunks N       stop after N windows (default: all)\n"
        "  -b, --batch-size N   tokens per forward pass (default 512)\n"
        "  -t, --threads N      CPU threads (default: all cores)\n"
        "      --deterministic  logits that repeat bit for bit from run to run on a GPU (sums in a\n"
        "                       fixed order; decode 8-15%% slower)\n"
        "      --device DEV     %s\n"
        "      --cache TYPE     KV cache type: f16 (default) or f32\n"
        "      --nll-out FILE   write each scored token's id and negative log-likelihood\n"
        "  -h, --help           this help\n",
        cli::device_help);
}

static double log_softmax_at(const float * logits, int n, int target) {
    double mx = logits[0];
    for (int i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double s = 0;
    for (int i = 0; i < n; i++) s += std::exp((double)logits[i] - mx);
    return (double)logits[target] - mx - std::log(s);
}

int main(int argc, char ** argv) {
    cli::set_tool_name("perplexity");
    std::string model_dir, file, device = "auto", nll_out, cache = "f16";
    int n_ctx = 512, stride = 0, n_batch = 512, n_threads = 0, max_chunks = 0;
    bool deterministic = false;
    cli::Args a(argc, argv);
    while (a.next()) {
        const std::string & f = a.flag();
        if (f == "-h" || f == "--help") { usage(); return 0; }
        else if (f == "-m" || f == "--model") model_dir = a.value();
        else if (f == "-f" || f == "--file") file = a.value();
        else if (f == "-c" || f == "--ctx-size") n_ctx = (int)a.value_int(2, 1 << 20);
        else if (f == "--stride") stride = (int)a.value_int(1, 1 << 20);
        else if (f == "--chunks") max_chunks = (int)a.value_int(1, 1 << 30);
        else if (f == "-b" || f == "--batch-size") n_batch = (int)a.value_int(1, 1 << 16);
        else if (f == "-t" || f == "--threads") n_threads = (int)a.value_int(1, 1024);
        else if (f == "--device") device = a.value();
        else if (f == "--nll-out") nll_out = a.value();
        else if (f == "--cache") cache = a.value();
        else if (f == "--deterministic") deterministic = true;
        else cli::die("unknown argument '%s' (see --help)", f.c_str());
    }
    if (model_dir.empty()) cli::die("no model given (-m DIR; see --help)");
    if (file.empty()) cli::die("no text given (-f FILE; see --help)");
    if (cache != "f16" && cache != "f32") cli::die("--cache: '%s' is not a cache type (f16, f32)", cache.c_str());
    if (stride > n_ctx / 2) cli::die("--stride %d must be at most half the context (%d)", stride, n_ctx / 2);
    const std::string text = cli::read_file(file);
    if (text.empty()) cli::die("%s: the file is empty", file.c_str());
    long bad = cli::utf8_invalid_offset(text);
    if (bad >= 0) cli::die("%s: not valid UTF-8 (byte 0x%02x at offset %ld)", file.c_str(), (unsigned char)text[bad], bad);

    exl2_model_params mp = exl2_model_default_params();
    mp.device = device.c_str();
    mp.n_threads = n_threads;
    mp.deterministic = deterministic;
    exl2_model * model = cli::load_model(model_dir, mp);
    const exl2_tokenizer * tok = exl2_model_tokenizer(model);
    if (!tok) cli::die("%s: the model has no tokenizer", model_dir.c_str());
    const double t_tok = cli::now_seconds();
    int32_t n = exl2_tokenize(tok, text.data(), (int32_t)text.size(), nullptr, 0, 0, 0);
    if (n < 0) cli::die("%s", exl2_last_error());
    std::vector<int32_t> toks((size_t)n);
    exl2_tokenize(tok, text.data(), (int32_t)text.size(), toks.data(), n, 0, 0);
    const int32_t bos = exl2_tokenizer_bos(tok);
    const int n_vocab = exl2_model_n_vocab(model);
    fprintf(stderr, "%s: %d tokens (tokenized in %.2f s), model %s\n", file.c_str(), n, cli::now_seconds() - t_tok, exl2_model_desc(model));

    exl2_context_params cp = exl2_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.cache_type = cache == "f32" ? EXL2_CACHE_F32 : EXL2_CACHE_F16;
    exl2_context * ctx = exl2_context_new(model, cp);
    if (!ctx) cli::die("%s", exl2_last_error());

    FILE * nf = nullptr;
    if (!nll_out.empty()) {
        nf = fopen(nll_out.c_str(), "wx");   // never overwrite a user's file
        if (!nf) cli::die("--nll-out %s: cannot create (does it exist already?)", nll_out.c_str());
    }

    // Build the window list: (first token index, count, first scored position within window).
    struct Window { size_t start; int len; int score_from; bool with_bos; };
    std::vector<Window> wins;
    if (stride == 0) {
        const bool use_bos = bos >= 0;
        const int per = use_bos ? n_ctx - 1 : n_ctx;
        for (size_t s = 0; s < toks.size(); s += (size_t)per) {
            int len = (int)std::min<size_t>((size_t)per, toks.size() - s);
            if (len < 2 && !use_bos) break;
            wins.push_back({s, len, 0, use_bos});
        }
    } else {
        for (size_t s = 0;; s += (size_t)stride) {
            if (s + 1 >= toks.size()) break;
            int len = (int)std::min<size_t>((size_t)n_ctx, toks.size() - s);
            int from = s == 0 ? 0 : n_ctx - stride;
            if (from >= len) break;
            wins.push_back({s, len, from, false});
            if (s + (size_t)n_ctx >= toks.size()) break;
        }
    }
    if (max_chunks > 0 && (int)wins.size() > max_chunks) wins.resize((size_t)max_chunks);
    if (wins.empty()) cli::die("%s: too few tokens to score", file.c_str());

    double sum = 0, sum2 = 0;
    long count = 0;
    const double t0 = cli::now_seconds();
    std::vector<int32_t> in;
    for (size_t w = 0; w < wins.size(); w++) {
        const Window & W = wins[w];
        in.clear();
        if (W.with_bos) in.push_back(bos);
        in.insert(in.end(), toks.begin() + (long)W.start, toks.begin() + (long)W.start + W.len);
        exl2_context_truncate(ctx, 0);
        if (exl2_decode(ctx, in.data(), (int32_t)in.size(), 1) != EXL2_OK) cli::die("%s", exl2_last_error());
        // Row i predicts in[i + 1]. Scored rows: those predicting window tokens at positions >= score_from.
        const int off = W.with_bos ? 1 : 0;
        for (int i = 0; i + 1 < (int)in.size(); i++) {
            const int target_pos = i + 1 - off;      // position within the window's tokens
            if (target_pos < W.score_from || target_pos < (W.with_bos ? 0 : 1)) continue;
            const double nll = -log_softmax_at(exl2_get_logits(ctx, i), n_vocab, in[(size_t)i + 1]);
            sum += nll;
            sum2 += nll * nll;
            count++;
            if (nf) fprintf(nf, "%d %.6f\n", in[(size_t)i + 1], nll);
        }
        const double mean = sum / count;
        fprintf(stderr, "[%zu]%.4f%s", w + 1, std::exp(mean), (w + 1) % 10 == 0 ? "\n" : ",");
        if (w == 0) {
            const double dt = cli::now_seconds() - t0;
            fprintf(stderr, " (%.2f s per window, about %.0f s in all)\n", dt, dt * wins.size());
        }
    }
    if (nf) fclose(nf);
    const double mean = sum / count;
    const double var = count > 1 ? (sum2 / count - mean * mean) * count / (count - 1) : 0;
    const double ppl = std::exp(mean);
    const double se = ppl * std::sqrt(var / count);   // delta method: d exp(m) = exp(m) dm
    const double dt = cli::now_seconds() - t0;
    fprintf(stderr, "\n%ld tokens scored in %zu windows of %d in %.2f s (%.0f t/s)\n", count, wins.size(), n_ctx, dt,
            (double)count / dt);
    printf("PPL = %.4f +/- %.4f (mean NLL %.5f over %ld tokens)\n", ppl, se, mean, count);
    exl2_context_free(ctx);
    exl2_model_free(model);
    return 0;
}
