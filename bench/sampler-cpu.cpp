// Host time of one non-greedy sampling step (exl2::Sampler over a vocabulary of logits): what a
// GPU decode step waits for when the sampler is not greedy. Logits are normal with sd 3 (a
// peaked, model-like distribution), one entry nudged per call so that nothing is cached.
//
//   build/bench-sampler-cpu [--vocab 128256] [--top-k 40] [--top-p 0.95] [--min-p 0.05]
//                           [--temp 0.8] [--min-time 1.0]
#include "exl2/sampler.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

[[noreturn]] void die(const std::string & msg) {
    fprintf(stderr, "bench-sampler-cpu: %s\n", msg.c_str());
    exit(1);
}

double number(const char * flag, const char * v, double lo, double hi) {
    char * end = nullptr;
    const double x = v ? strtod(v, &end) : 0.0;
    if (!v || end == v || *end || x < lo || x > hi) die(std::string("bad ") + flag + " (" + std::to_string(lo) + ".." + std::to_string(hi) + ")");
    return x;
}

}  // namespace

int main(int argc, char ** argv) {
    int vocab = 128256;
    double min_time = 1.0;
    exl2::SamplerParams p;   // main's defaults
    p.seed = 1;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const char * v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (a == "-h" || a == "--help") {
            printf("usage: bench-sampler-cpu [--vocab N] [--top-k K] [--top-p P] [--min-p P] [--temp T] [--min-time S]\n");
            return 0;
        }
        if (a == "--vocab") vocab = (int)number("--vocab", v, 2, 1 << 24);
        else if (a == "--top-k") p.top_k = (int)number("--top-k", v, 0, 1 << 24);
        else if (a == "--top-p") p.top_p = (float)number("--top-p", v, 0, 1);
        else if (a == "--min-p") p.min_p = (float)number("--min-p", v, 0, 1);
        else if (a == "--temp") p.temperature = (float)number("--temp", v, 0, 100);
        else if (a == "--min-time") min_time = number("--min-time", v, 0.01, 600);
        else die("unknown flag '" + a + "' (see --help)");
        i++;
    }
    std::vector<float> l((size_t)vocab);
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.0f, 3.0f);
    for (float & x : l) x = d(rng);
    exl2::Sampler s(p);
    long calls = 0, sink = 0;
    const double t0 = now();
    double t = t0;
    while (t - t0 < min_time) {
        for (int k = 0; k < 16; k++, calls++) {
            l[(size_t)(calls * 7919 % vocab)] += 1e-3f;
            sink += s.sample(l.data(), vocab);
        }
        t = now();
    }
    printf("vocab %d, temp %.2f, top-k %d, top-p %.2f, min-p %.2f: %.1f us per sample (%ld calls, checksum %ld)\n", vocab,
           p.temperature, p.top_k, p.top_p, p.min_p, (t - t0) / calls * 1e6, calls, sink);
    return 0;
}
