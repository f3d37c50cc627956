// CPU matmul speed over packed EXL2 weights versus f16 weights of the same shape, through the CPU
// backend's MUL_MAT (the path a model takes). Prints one line per case and, with --markdown,
// rows for bench/RESULTS.md. The limit a decode matmul is compared with is this machine's
// measured memcpy bandwidth (bytes read + bytes written per second, same thread count).
//
//   build/bench-qmatmul-cpu [--K 4096] [--N 4096] [--layout "4 g128"] [--T 1,8] [--threads 1,2]
//                           [--min-time 1.0] [--markdown --commit abc1234]
#include "exl2/error.h"
#include "exl2/quant/qlayer.h"
#include "exl2/quant/synthetic.h"
#include "ggx/fp16.h"
#include "ggx/ggx-backend.h"
#include "ggx/ggx.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int> parse_list(const char * s) {
    std::vector<int> v;
    for (const char * p = s; *p;) {
        v.push_back(atoi(p));
        while (*p && *p != ',') p++;
        if (*p) p++;
    }
    return v;
}

// 1-minute load average: this figure is only meaningful on an otherwise idle machine.
std::string load_avg() {
    std::ifstream f("/proc/loadavg");
    std::string a;
    f >> a;
    return a.empty() ? "?" : a;
}

std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("model name", 0) == 0) {
            const size_t c = line.find(':');
            return c == std::string::npos ? line : line.substr(c + 2);
        }
    return "unknown CPU";
}

// memcpy bandwidth in bytes moved (read + written) per second, with nth threads copying halves.
double memcpy_bw(int nth, double min_time) {
    const size_t n = (size_t)256 << 20;
    std::vector<char> a(n, 1), b(n, 2);
    auto once = [&] {
        std::vector<std::thread> th;
        for (int i = 0; i < nth; i++)
            th.emplace_back([&, i] {
                const size_t c0 = n * i / nth, c1 = n * (i + 1) / nth;
                memcpy(b.data() + c0, a.data() + c0, c1 - c0);
            });
        for (auto & t : th) t.join();
    };
    once();
    double best = 1e30, t_end = now() + min_time;
    do {
        const double t0 = now();
        once();
        best = std::min(best, now() - t0);
    } while (now() < t_end);
    return 2.0 * n / best;
}

struct Result {
    double sec;   // per matmul (median)
};

// Median seconds of one MUL_MAT(w, x {K, T}) graph run on `be`.
Result time_matmul(ggx_backend * be, ggx_tensor * w, int K, int T, double min_time) {
    ggx_context * ctx = ggx_context_new();
    ggx_tensor * x = ggx_new_tensor_2d(ctx, GGX_TYPE_F32, K, T);
    x->flags |= GGX_FLAG_INPUT;
    ggx_tensor * y = ggx_mul_mat(ctx, w, x);
    y->flags |= GGX_FLAG_OUTPUT;
    ggx_graph * g = ggx_graph_new(ctx);
    ggx_graph_build(g, y);
    const size_t need = ggx_graph_plan(g, be->alignment);
    void * buf = nullptr;
    if (be->iface.alloc(be, need, &buf) != GGX_STATUS_OK) exl2::fail("bench: cannot allocate %zu bytes", need);
    ggx_graph_bind(g, buf);
    std::vector<float> xs((size_t)K * T);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> U(-1, 1);
    for (auto & v : xs) v = U(rng);
    ggx_backend_tensor_set(be, x, xs.data(), 0, xs.size() * 4);
    for (int i = 0; i < 3; i++) ggx_backend_graph_compute(be, g);
    ggx_backend_synchronize(be);
    std::vector<double> times;
    const double t_end = now() + min_time;
    while (now() < t_end || times.size() < 10) {
        const double t0 = now();
        if (ggx_backend_graph_compute(be, g) != GGX_STATUS_OK) exl2::fail("bench: compute failed: %s", ggx_last_error());
        ggx_backend_synchronize(be);
        times.push_back(now() - t0);
    }
    std::sort(times.begin(), times.end());
    be->iface.dealloc(be, buf);
    ggx_context_free(ctx);
    return {times[times.size() / 2]};
}

}  // namespace

int main(int argc, char ** argv) {
    int K = 4096, N = 4096;
    std::string layout = "4 g128", commit = "?";
    std::vector<int> Ts = {1, 8}, threads = {1, 2};
    double min_time = 1.0;
    bool markdown = false;
    std::string cmd = "build/bench-qmatmul-cpu";   // echoed into RESULTS.md rows
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--markdown") continue;
        if (a == "--commit") { i++; continue; }
        cmd += a.find(' ') != std::string::npos ? " '" + a + "'" : " " + a;
    }
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        auto next = [&]() -> const char * {
            if (i + 1 >= argc) { fprintf(stderr, "%s needs a value\n", a.c_str()); exit(2); }
            return argv[++i];
        };
        if (a == "--K") K = atoi(next());
        else if (a == "--N") N = atoi(next());
        else if (a == "--layout") layout = next();
        else if (a == "--T") Ts = parse_list(next());
        else if (a == "--threads") threads = parse_list(next());
        else if (a == "--min-time") min_time = atof(next());
        else if (a == "--markdown") markdown = true;
        else if (a == "--commit") commit = next();
        else { fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
    }
    try {
        exl2::SafeTensors st;
        exl2::synth_add(st, exl2::synth_exl2_layer("w", K, N, exl2::exl2_layout_parse(layout), {}));
        exl2::QLoadOptions lo;
        lo.N = N;
        const exl2::QLayerHost L = exl2::qlayer_load(st, "w", lo);
        const double q_bytes = (double)exl2::qlayer_bytes_read(L), f_bytes = 2.0 * K * N;
        std::vector<uint16_t> wf((size_t)K * N);
        std::mt19937 rng(2);
        std::normal_distribution<float> nd(0, 0.02f);
        for (auto & v : wf) v = ggx_f32_to_f16(nd(rng));

        char date[32];
        const time_t tt = time(nullptr);
        strftime(date, sizeof date, "%Y-%m-%d", gmtime(&tt));
        const std::string model = cpu_model();
        printf("%d x %d, EXL2 \"%s\" (%.3f bpw, %.2f MB read per matmul) vs f16 (%.2f MB)\n", K, N, layout.c_str(),
               exl2::qlayer_bpw(L), q_bytes / 1e6, f_bytes / 1e6);
        std::vector<std::string> rows;
        for (int nt : threads) {
            const double bw = memcpy_bw(nt, std::min(min_time, 0.5));
            ggx_backend * be = ggx_backend_cpu_init(nt);
            if (!be) exl2::fail("bench: no CPU backend: %s", ggx_last_error());
            ggx_context * wctx = ggx_context_new();
            void * qbuf = nullptr;
            ggx_tensor * wq = exl2::qlayer_upload(wctx, be, L, &qbuf);
            ggx_tensor * wh = ggx_new_tensor_2d(wctx, GGX_TYPE_F16, K, N);
            void * fbuf = nullptr;
            if (be->iface.alloc(be, wf.size() * 2, &fbuf) != GGX_STATUS_OK) exl2::fail("bench: cannot allocate f16 weights");
            wh->data = fbuf;
            wh->flags |= GGX_FLAG_WEIGHT;
            be->iface.set(be, fbuf, wf.data(), wf.size() * 2);
            printf("threads %d: memcpy %.1f GB/s (read + write)\n", nt, bw / 1e9);
            for (int T : Ts)
                for (int which = 0; which < 2; which++) {
                    const bool q = which == 0;
                    const Result r = time_matmul(be, q ? wq : wh, K, T, min_time);
                    const double bytes = q ? q_bytes : f_bytes;
                    const double gbs = bytes / r.sec / 1e9, gflops = 2.0 * K * N * T / r.sec / 1e9;
                    char line[512];
                    snprintf(line, sizeof line, "%-22s T=%-3d %8.3f ms  %9.1f tok/s  %6.2f GB/s weights  %7.2f GFLOP/s  %.0f%% of memcpy",
                             q ? ("EXL2 " + layout).c_str() : "f16", T, r.sec * 1e3, T / r.sec, gbs, gflops, 100 * bytes / r.sec / bw);
                    printf("%s\n", line);
                    char md[1024];
                    snprintf(md, sizeof md,
                             "| %s | CPU: %s, %d thread%s (load avg %s) | %s | `%s` | %dx%d %s T=%d: %.3f ms, %.1f tok/s, %.2f GB/s weights, %.2f GFLOP/s "
                             "| %.0f%% of memcpy %.1f GB/s (measured, read+write, %d thr) |",
                             date, model.c_str(), nt, nt > 1 ? "s" : "", load_avg().c_str(), commit.c_str(), cmd.c_str(), K, N,
                             q ? ("EXL2 " + layout).c_str() : "f16", T, r.sec * 1e3, T / r.sec, gbs, gflops,
                             100 * bytes / r.sec / bw, bw / 1e9, nt);
                    rows.push_back(md);
                }
            exl2::qlayer_release(be, wq, qbuf);
            be->iface.dealloc(be, fbuf);
            ggx_context_free(wctx);
            ggx_backend_free(be);
        }
        if (markdown) {
            printf("\n");
            for (const auto & r : rows) printf("%s\n", r.c_str());
        }
    } catch (const exl2::Error & e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
