// Host side of the in-graph kernel timeline (see trace.cuh).
#include "trace.cuh"

#include "env-knobs.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

struct ggx_cuda_trace {
    int                      step_wanted = 0;   // graph_compute call to record (1-based)
    int                      steps = 0;
    bool                     recording = false;
    ggx_trace_rec *          rec = nullptr;     // device
    unsigned *               count = nullptr;   // device
    unsigned                 cap = 0;
    std::vector<std::string> names;             // by launch id
    std::vector<std::string> details;           // by launch id (ggx_cuda_trace_launch's detail)
    std::string              blocks_of;         // GGX_CUDA_TRACE_BLOCKS: launches whose name holds one of these (comma-separated) print each block
};

namespace {

// Layer numbers (any run of digits) folded, so that one line sums a kind over all layers.
std::string fold_digits(const std::string & s) {
    std::string o;
    for (size_t i = 0; i < s.size(); i++) {
        if (isdigit((unsigned char)s[i])) {
            o += '*';
            while (i + 1 < s.size() && isdigit((unsigned char)s[i + 1])) i++;
        } else {
            o += s[i];
        }
    }
    return o;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct launch_stats {
    unsigned id = 0;
    int blocks = 0, sms = 0;
    uint64_t first_entry = UINT64_MAX, first_waited = UINT64_MAX, last_exit = 0;
    double wait = 0, prologue = 0, loop = 0, loop_max = 0, handoff = 0, tail_max = 0, exit_med = 0, pa = 0, pb = 0, pc = 0;
};

// Medians over the blocks of one launch (microseconds); a phase a kernel does not stamp is 0.
launch_stats summarise(unsigned id, const std::vector<const ggx_trace_rec *> & rs) {
    launch_stats s;
    s.id = id;
    s.blocks = (int)rs.size();
    std::vector<double> wait, pro, loop, hand, tail, exits, pa, pb, pc;
    std::vector<unsigned> sms;
    auto us = [](uint64_t a, uint64_t b) { return a && b && b >= a ? (double)(b - a) / 1000.0 : 0.0; };
    for (const ggx_trace_rec * r : rs) {
        const uint64_t * t = r->t;
        s.first_entry = std::min(s.first_entry, t[GGX_TRACE_ENTRY]);
        if (t[GGX_TRACE_WAITED]) s.first_waited = std::min(s.first_waited, t[GGX_TRACE_WAITED]);
        s.last_exit = std::max(s.last_exit, t[GGX_TRACE_EXIT]);
        wait.push_back(us(t[GGX_TRACE_ENTRY], t[GGX_TRACE_WAITED]));
        pro.push_back(us(t[GGX_TRACE_WAITED], t[GGX_TRACE_LOOP]));
        loop.push_back(us(t[GGX_TRACE_LOOP], t[GGX_TRACE_LOOP_END]));
        hand.push_back(us(t[GGX_TRACE_LOOP_END], t[GGX_TRACE_HANDOFF]));
        tail.push_back(us(t[GGX_TRACE_HANDOFF], t[GGX_TRACE_EXIT]));
        exits.push_back((double)t[GGX_TRACE_EXIT]);
        // A, B, C only from the blocks that took both ends: in the q/k/v GEMV's attention tail 8 of
        // 96 blocks do (run 162's medians over all blocks printed 0)
        if (t[GGX_TRACE_LOOP] && t[GGX_TRACE_A]) pa.push_back(us(t[GGX_TRACE_LOOP], t[GGX_TRACE_A]));
        if (t[GGX_TRACE_A] && t[GGX_TRACE_B]) pb.push_back(us(t[GGX_TRACE_A], t[GGX_TRACE_B]));
        if (t[GGX_TRACE_B] && t[GGX_TRACE_C]) pc.push_back(us(t[GGX_TRACE_B], t[GGX_TRACE_C]));
        sms.push_back(r->smid);
    }
    if (s.first_waited == UINT64_MAX) s.first_waited = s.first_entry;
    std::sort(sms.begin(), sms.end());
    s.sms = (int)(std::unique(sms.begin(), sms.end()) - sms.begin());
    s.wait = median(wait);
    s.prologue = median(pro);
    s.loop = median(loop);
    s.loop_max = loop.empty() ? 0 : *std::max_element(loop.begin(), loop.end());
    s.handoff = median(hand);
    s.tail_max = tail.empty() ? 0 : *std::max_element(tail.begin(), tail.end());
    s.exit_med = median(exits);
    s.pa = median(pa);
    s.pb = median(pb);
    s.pc = median(pc);
    return s;
}

void print_summary(const ggx_cuda_trace & tr, const std::vector<ggx_trace_rec> & recs, int step) {
    std::map<unsigned, std::vector<const ggx_trace_rec *>> by_launch;
    for (const ggx_trace_rec & r : recs)
        if (r.t[GGX_TRACE_ENTRY] && r.t[GGX_TRACE_EXIT]) by_launch[r.launch].push_back(&r);
    std::vector<launch_stats> ls;
    for (auto & e : by_launch) ls.push_back(summarise(e.first, e.second));
    if (ls.empty()) {
        fprintf(stderr, "ggx-cuda trace: step %d recorded no traced kernel\n", step);
        return;
    }
    std::sort(ls.begin(), ls.end(), [](const launch_stats & a, const launch_stats & b) { return a.first_entry < b.first_entry; });
    const uint64_t t0 = ls.front().first_entry;
    uint64_t t_end = 0;
    for (const launch_stats & s : ls) t_end = std::max(t_end, s.last_exit);

    // per kind: lag = first block past its wait - previous launch's last exit (the dependency
    // hand-over), span = first block past its wait .. last exit
    struct kind { int n = 0; double blocks = 0, sms = 0, lag = 0, span = 0, wait = 0, pro = 0, loop = 0, loop_max = 0, hand = 0, tail = 0, straggle = 0, pa = 0, pb = 0, pc = 0; };
    std::map<std::string, kind> kinds;
    std::vector<std::string> order;
    double sum_span = 0, sum_lag = 0;
    for (size_t i = 0; i < ls.size(); i++) {
        const launch_stats & s = ls[i];
        const std::string name = s.id < tr.names.size() ? fold_digits(tr.names[s.id]) : "?";
        if (!kinds.count(name)) order.push_back(name);
        kind & k = kinds[name];
        const double lag = i ? ((double)s.first_waited - (double)ls[i - 1].last_exit) / 1000.0 : 0.0;
        const double span = (double)(s.last_exit - s.first_waited) / 1000.0;
        k.n++;
        k.blocks += s.blocks;
        k.sms += s.sms;
        k.lag += lag;
        k.span += span;
        k.wait += s.wait;
        k.pro += s.prologue;
        k.loop += s.loop;
        k.loop_max += s.loop_max;
        k.hand += s.handoff;
        k.tail += s.tail_max;
        k.straggle += ((double)s.last_exit - s.exit_med) / 1000.0;
        k.pa += s.pa;
        k.pb += s.pb;
        k.pc += s.pc;
        sum_span += span;
        sum_lag += lag;
    }
    fprintf(stderr, "ggx-cuda trace, step %d: %zu traced launches, %.1f us from the first block's entry to the last exit; "
                    "spans %.1f us, lags %.1f us\n",
            step, ls.size(), (double)(t_end - t0) / 1000.0, sum_span, sum_lag);
    fprintf(stderr, "  means per launch, us (lag: first block past its wait - previous launch's last exit; span: that "
                    "block .. last exit; phases: medians over blocks; loop max, tail max: slowest block; straggle: last exit - median exit;\n"
                    "  A, B, C: a kernel's own points, each from the one before, A from the loop's start, medians over the blocks that took them)\n");
    fprintf(stderr, "  %-40s %4s %6s %5s %7s %7s %7s %7s %7s %8s %7s %7s %8s %6s %6s %6s\n", "kernel", "n", "blocks", "SMs", "lag",
            "span", "wait", "prolog", "loop", "loop max", "handoff", "tail mx", "straggle", "A", "B", "C");
    for (const std::string & name : order) {
        const kind & k = kinds[name];
        const double n = k.n;
        fprintf(stderr, "  %-40.40s %4d %6.0f %5.0f %7.2f %7.2f %7.2f %7.2f %7.2f %8.2f %7.2f %7.2f %8.2f %6.2f %6.2f %6.2f\n",
                name.c_str(), k.n, k.blocks / n, k.sms / n, k.lag / n, k.span / n, k.wait / n, k.pro / n, k.loop / n, k.loop_max / n,
                k.hand / n, k.tail / n, k.straggle / n, k.pa / n, k.pb / n, k.pc / n);
    }
    fprintf(stderr, "  first launches (us from the step's first entry: first entry, first past wait, median exit, last exit):\n");
    for (size_t i = 0; i < ls.size() && i < 14; i++) {
        const launch_stats & s = ls[i];
        auto rel = [&](double t) { return (t - (double)t0) / 1000.0; };
        fprintf(stderr, "    %-40.40s %8.2f %8.2f %8.2f %8.2f\n", s.id < tr.names.size() ? tr.names[s.id].c_str() : "?",
                rel((double)s.first_entry), rel((double)s.first_waited), rel(s.exit_med), rel((double)s.last_exit));
    }
}

// Every block of the launches whose name holds a part of tr.blocks_of, in block order (us from the launch's
// first block past its wait; '-' for a point the block did not pass): where a launch's medians
// hide two populations, e.g. the blocks of one matrix of a job passing their wait later.
void print_blocks(const ggx_cuda_trace & tr, const std::vector<ggx_trace_rec> & recs) {
    std::map<unsigned, std::vector<const ggx_trace_rec *>> by_launch;
    for (const ggx_trace_rec & r : recs)
        if (r.launch < tr.names.size() && !ggx_list_match(tr.blocks_of, tr.names[r.launch], false).empty()) by_launch[r.launch].push_back(&r);
    if (by_launch.empty()) {
        fprintf(stderr, "ggx-cuda trace: no traced launch is named like '%s' (GGX_CUDA_TRACE_BLOCKS)\n", tr.blocks_of.c_str());
        return;
    }
    static const char * const point[GGX_TRACE_N] = {"entry", "waited", "loop", "loop end", "handoff", "exit", "A", "B", "C"};
    for (auto & e : by_launch) {
        std::vector<const ggx_trace_rec *> & rs = e.second;
        std::sort(rs.begin(), rs.end(), [](const ggx_trace_rec * a, const ggx_trace_rec * b) { return a->block < b->block; });
        uint64_t t0 = UINT64_MAX;
        for (const ggx_trace_rec * r : rs)
            if (r->t[GGX_TRACE_WAITED]) t0 = std::min(t0, r->t[GGX_TRACE_WAITED]);
        if (t0 == UINT64_MAX)
            for (const ggx_trace_rec * r : rs) t0 = std::min(t0, r->t[GGX_TRACE_ENTRY]);
        const std::string & detail = tr.details[e.first];
        fprintf(stderr, "  blocks of %s%s%s (us from the first block past its wait)\n  %6s %4s", tr.names[e.first].c_str(),
                detail.empty() ? "" : ", ", detail.c_str(), "block", "SM");
        for (int k = 0; k < GGX_TRACE_N; k++) fprintf(stderr, " %8s", point[k]);
        fprintf(stderr, "\n");
        for (const ggx_trace_rec * r : rs) {
            fprintf(stderr, "  %6u %4u", r->block, r->smid);
            for (int k = 0; k < GGX_TRACE_N; k++) {
                if (r->t[k]) fprintf(stderr, " %8.2f", ((double)r->t[k] - (double)t0) / 1000.0);
                else fprintf(stderr, " %8s", "-");
            }
            fprintf(stderr, "\n");
        }
    }
}

}  // namespace

void ggx_cuda_trace_init(ggx_cuda_ctx & ctx) {
    const int step = ggx_env_int("GGX_CUDA_TRACE", 0);
    if (step <= 0) return;
#if defined(GGX_USE_HIP)
    fprintf(stderr, "ggx-cuda: GGX_CUDA_TRACE is not available in the HIP build; ignored\n");
#else
    ggx_cuda_trace * tr = new ggx_cuda_trace();
    tr->step_wanted = step;
    if (const char * b = getenv("GGX_CUDA_TRACE_BLOCKS")) tr->blocks_of = b;
    tr->cap = 1u << 18;   // blocks per step: an 8B decode step launches ~30k
    if (cudaMalloc(&tr->rec, sizeof(ggx_trace_rec) * tr->cap) != cudaSuccess ||
        cudaMalloc(&tr->count, sizeof(unsigned)) != cudaSuccess || cudaMemset(tr->count, 0, sizeof(unsigned)) != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr, "ggx-cuda: GGX_CUDA_TRACE: cannot allocate the trace table; tracing off\n");
        (void)cudaFree(tr->rec);
        (void)cudaFree(tr->count);
        delete tr;
        return;
    }
    ctx.trace = tr;
#endif  // GGX_USE_HIP
}

ggx_trace_dev ggx_cuda_trace_launch(ggx_cuda_ctx & ctx, const std::string & name, const std::string & detail) {
    ggx_trace_dev d = {nullptr, nullptr, 0, 0};
    ggx_cuda_trace * tr = ctx.trace;
    if (!tr) return d;
    d.rec = tr->rec;
    d.count = tr->count;
    d.cap = tr->cap;
    d.launch = (unsigned)tr->names.size();
    tr->names.push_back(name);
    tr->details.push_back(detail);
    return d;
}

bool ggx_cuda_trace_step_begin(ggx_cuda_ctx & ctx) {
    ggx_cuda_trace * tr = ctx.trace;
    if (!tr || ++tr->steps != tr->step_wanted) return false;
    tr->recording = cudaMemsetAsync(tr->count, 0, sizeof(unsigned), ctx.stream) == cudaSuccess;
    return tr->recording;
}

ggx_status ggx_cuda_trace_step_end(ggx_cuda_ctx & ctx) {
    ggx_cuda_trace * tr = ctx.trace;
    if (!tr || !tr->recording) return GGX_STATUS_OK;
    tr->recording = false;
    GGX_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    unsigned n = 0;
    GGX_CUDA_CHECK(cudaMemcpy(&n, tr->count, sizeof n, cudaMemcpyDeviceToHost));
    if (n > tr->cap) {
        fprintf(stderr, "ggx-cuda trace: %u blocks in the step, only the first %u recorded\n", n, tr->cap);
        n = tr->cap;
    }
    std::vector<ggx_trace_rec> recs(n);
    GGX_CUDA_CHECK(cudaMemcpy(recs.data(), tr->rec, sizeof(ggx_trace_rec) * n, cudaMemcpyDeviceToHost));
    print_summary(*tr, recs, tr->steps);
    if (!tr->blocks_of.empty()) print_blocks(*tr, recs);
    return GGX_STATUS_OK;
}

void ggx_cuda_trace_free(ggx_cuda_ctx & ctx) {
    ggx_cuda_trace * tr = ctx.trace;
    if (!tr) return;
    (void)cudaFree(tr->rec);
    (void)cudaFree(tr->count);
    delete tr;
    ctx.trace = nullptr;
}
