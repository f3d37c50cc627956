// Host emulator of k_attn_decode (backends/cuda/attn-decode.cu); see README.md and emu-core.h.
// The grid's blocks run one after another, in forward, reverse and random order when several
// splits are active, so that a different block is the last to arrive and merges; each with 2 and
// 3 K/V stages per warp (GGX_ATTN_STAGES).
//
// Beyond emu-core.h's checks: out and part written only where the block owns them (per-block
// diff), guard zones around q, out and part intact, the merge counters back to 0 after the grid,
// and no cp.async in flight from the second __syncthreads on (the stages become the merge scratch).
//
//   emu-decode [CP_MODE 0|1|2(both)] [RAND_SCHED 0|1] [ONLY_CASE] ["hd,H,Hkv,C,T,cap,win,nc,min_chunk"]
#include "emu-core.h"

#include "backends/cuda/decode-plan.h"   // ggx_attn_tail_takes (attn-common.cuh's text calls it)

#include <string>

static float g_wsum[16], g_wmax[16];   // the kernel's __shared__ scalars
static int g_last = 0;

namespace emu {
#include KERN_INC
}
using emu::attn_args;

static attn_args g_args;
template <int HD> static void thread_body() { emu::k_attn_decode<HD>(g_args); }

template <int HD> static void run_grid(const attn_args & a, int order) {
    using C = emu::dm_cfg<HD>;
    g_thread_body = thread_body<HD>;
    g_args = a;
    const BlockSmem smem(C::bytes(a.stages));
    gridDim.x = a.Hkv;
    gridDim.y = a.n_splits;
    std::vector<std::pair<int, int>> blocks;
    for (int by = 0; by < gridDim.y; by++)
        for (int bx = 0; bx < gridDim.x; bx++) blocks.push_back({bx, by});
    if (order == 1) std::reverse(blocks.begin(), blocks.end());
    if (order >= 2) { std::mt19937 r(order * 977); std::shuffle(blocks.begin(), blocks.end(), r); }
    const int G = a.H / a.Hkv, stride = emu::part_stride(a.hd);
    const size_t nout = (size_t)a.T * a.H * HD, npart = (size_t)a.T * a.H * a.n_splits * stride;
    std::vector<float> out0, part0;
    for (auto [bx, by] : blocks) {
        out0.assign(a.out, a.out + nout);
        part0.assign(a.part, a.part + npart);
        for (int i = 0; i < 16; i++) g_wsum[i] = g_wmax[i] = NAN;
        g_last = 0x5a5a5a5a;
        run_block(bx, by);
        const int kvh = bx, split = by;
        check_writes(out0, a.out, [&](size_t e) { return (int)(e / HD % a.H) / G == kvh ? nullptr : "a head of another KV head"; }, "out");
        check_writes(part0, a.part, [&](size_t e) {
            const size_t row = e / stride;
            const int sp = (int)(row % a.n_splits), h = (int)(row / a.n_splits % a.H), col = (int)(e % stride);
            return sp != split || h / G != kvh ? "another block's partial" : col == 2 || col == 3 ? "an unused column" : nullptr;
        }, "part");
    }
}

// rows: one query row whose k and v at pos come from the q/k/v rows (attn_args::rows_k, rows_v)
struct Run { Case c; int min_chunk; const char * suite; bool rows = false; };

static std::vector<Run> default_runs() {
    std::vector<Run> runs;
    // "attention decode in one split of up to 1024 keys": MIN_SPLIT_KEYS 1024
    const Case few[] = {
        {128, 32, 8, 20, 1, 0, 0, 0},     {128, 32, 8, 140, 3, 0, 0, 0},
        {64, 4, 4, 90, 8, 0, 0, 0},       {96, 8, 4, 120, 2, 15.0f, 0, 0},
        {80, 8, 1, 100, 2, 0, 20, 0},     {128, 8, 2, 60, 1, 0, 0, 1},
        {64, 16, 2, 33, 2, 0, 0, 0},      {128, 32, 8, 900, 1, 0, 0, 0},
        {128, 32, 8, 1000, 2, 0, 100, 0}, {64, 4, 2, 40, 8, 0, 4, 0},
        {128, 8, 2, 60, 3, 0, 20, 1},
    };
    for (const Case & c : few) runs.push_back({c, 1024, "few"});
    // the tensor-core decode cases of "attention decode (split-K) and prefill paths" (f16, T x G <= 16)
    const Case split[] = {
        {64, 4, 4, 40, 1, 0, 0, 0},        {128, 8, 2, 700, 1, 0, 0, 0},   {128, 32, 8, 4096, 1, 0, 0, 0},
        {64, 4, 2, 600, 2, 0, 100, 0},     {128, 32, 8, 20, 1, 0, 0, 0},   {128, 32, 8, 4096, 3, 0, 0, 0},
        {96, 8, 4, 500, 2, 15.0f, 0, 0},   {80, 8, 1, 300, 2, 0, 50, 0},   {64, 4, 4, 1000, 8, 0, 0, 0},
        {128, 8, 2, 200, 2, 0, 0, 1},      {128, 8, 2, 200, 2, 0, 30, 1},
        // tg128 at --ctx 4096 on llama3-8b: 22 active splits of 192 keys, 3 tiles per warp
        {128, 32, 8, 6200, 1, 0, 0, 0},
    };
    for (const Case & c : split) runs.push_back({c, 128, "split"});
    // "attention decode with 64 and 256 keys at least per split" (its f16 tensor-core cases)
    const Case keys[] = {
        {128, 32, 8, 200, 1, 0, 0, 0}, {128, 32, 8, 4096, 1, 0, 0, 0}, {128, 32, 8, 700, 3, 0, 0, 0},
        {96, 8, 4, 500, 2, 15.0f, 0, 0}, {80, 8, 1, 300, 2, 0, 50, 0}, {64, 4, 4, 1000, 8, 0, 0, 0},
        {128, 8, 2, 700, 1, 0, 0, 0},
    };
    for (int mc : {64, 256})
        for (const Case & c : keys) runs.push_back({c, mc, mc == 64 ? "keys64" : "keys256"});
    // the q/k/v rows: the cache rows at pos start as NaN, the kernel takes k and v at pos from the
    // f32 rows and must leave them in the caches; one split and several, the pos tile among the
    // first two a warp loads and past them (4096 keys in 22 splits)
    const Case rows[] = {
        {128, 32, 8, 20, 1, 0, 0, 0}, {128, 32, 8, 900, 1, 0, 0, 0}, {64, 4, 4, 40, 1, 0, 0, 0},
        {128, 8, 2, 700, 1, 0, 0, 0}, {96, 8, 4, 500, 1, 0, 0, 0},   {128, 32, 8, 6200, 1, 0, 0, 0},
    };
    for (const Case & c : rows) runs.push_back({c, 128, "rows", true});
    runs.push_back({rows[1], 1024, "rows", true});
    return runs;
}

int main(int argc, char ** argv) {
    const int cpm = argc > 1 ? atoi(argv[1]) : 2;
    g_rand_sched = argc > 2 && atoi(argv[2]);
    const int only = argc > 3 ? atoi(argv[3]) : -1;
    std::vector<Run> runs = default_runs();
    if (argc > 4) {
        Run r{};
        r.suite = "extra";
        if (sscanf(argv[4], "%d,%d,%d,%d,%d,%f,%d,%d,%d", &r.c.hd, &r.c.H, &r.c.Hkv, &r.c.C, &r.c.T, &r.c.softcap, &r.c.window,
                   &r.c.non_causal, &r.min_chunk) != 9) {
            fprintf(stderr, "emu-decode: the extra case needs 9 numbers\n");
            return 2;
        }
        runs.push_back(r);
    }
    g_no_copies_from = 2;   // the stages hold the warps' states after the second __syncthreads
    int n_fail = 0, idx = -1;
    double max_err = 0;
    long n_runs = 0;
    for (const Run & run : runs) {
        idx++;
        if (only >= 0 && idx != only) continue;
        const Case & c = run.c;
        const size_t nq = (size_t)c.T * c.H * c.hd, nk = (size_t)c.C * c.Hkv * c.hd;
        Inputs in(nq, nk, 1234 + idx, 64, 0);
        std::vector<int32_t> pos(c.T);
        for (int t = 0; t < c.T; t++) pos[t] = c.C - c.T + t - (c.T == 1 ? c.C / 3 : 0);
        // make_plan (T <= 8): chunk 0, n_splits = clamp((C + 63) / 64, 1, 32), min_chunk = MIN_SPLIT_KEYS
        const int n_splits = std::max(1, std::min(32, (c.C + 63) / 64));
        const int stride = c.hd + 4;
        // the kernel's own view of the split (for the report): n_active, tiles of split 0
        int end = 0, lo0 = 1 << 30;
        for (int t = 0; t < c.T; t++) {
            end = max(end, (c.non_causal ? pos[c.T - 1] : pos[t]) + 1);
            lo0 = min(lo0, c.window > 0 ? max(0, pos[t] - c.window + 1) : 0);
        }
        end = min(end, c.C);
        const int chunk = max(run.min_chunk, ((max(end - lo0, 1) + n_splits - 1) / n_splits + 63) / 64 * 64);
        const int n_active = max(1, (end - lo0 + chunk - 1) / chunk);
        const int tiles0 = (min(end, lo0 + chunk) - lo0 + 15) / 16;
        std::vector<double> ref;
        // rows: k and v at pos as f32 rows (their values are halves: the reference is unchanged)
        const size_t row0 = (size_t)pos[0] * c.Hkv * c.hd, row_n = (size_t)c.Hkv * c.hd;
        std::vector<float> rows_k, rows_v;
        std::vector<half> K0, V0;   // rows: the caches the grid must leave
        if (run.rows) {
            if (c.T != 1) { fprintf(stderr, "emu-decode: rows need one query row\n"); return 2; }
            K0 = in.K;
            V0 = in.V;
            rows_k.assign(in.Kf.begin() + row0, in.Kf.begin() + row0 + row_n);
            rows_v.assign(in.Vf.begin() + row0, in.Vf.begin() + row0 + row_n);
        }
        for (int cpmode = 0; cpmode < 2; cpmode++) {
            if (cpm != 2 && cpmode != cpm) continue;
            g_cp_mode = cpmode;
            for (int run_i = 0; run_i < 2 * (n_active > 1 ? 3 : 1); run_i++) {
                const int stages = 2 + run_i % 2, order = run_i / 2;   // GGX_ATTN_STAGES: 2 (default) and 3
                // guard zones wide enough for any row of a 16-row tile: a stray write lands there
                Guarded<float> out(nq, (size_t)16 * c.H * c.hd + 64, NAN);
                Guarded<float> part((size_t)c.T * c.H * n_splits * stride, (size_t)16 * c.H * n_splits * stride + 64, NAN);
                std::vector<int> counters(c.Hkv + 2, 0);
                attn_args a = case_args<attn_args>(c, in, pos.data());
                a.out = out.p(); a.out16 = nullptr; a.part = part.p(); a.counters = counters.data() + 1;
                a.chunk = 0; a.n_splits = n_splits; a.min_chunk = run.min_chunk; a.tile_keys = 0;
                a.qsplit = 1;
                a.smem_stages = 0;
                a.stages = stages;
                g_fresh_min = *std::min_element(pos.begin(), pos.end());
                if (run.rows) {
                    a.rows_k = rows_k.data();
                    a.rows_v = rows_v.data();
                    for (size_t e = 0; e < row_n; e++) in.K[row0 + e] = in.V[row0 + e] = __ushort_as_half(0x7e00);   // NaN
                }
                switch (c.hd) {
                    case 64: run_grid<64>(a, order); break;
                    case 80: run_grid<80>(a, order); break;
                    case 96: run_grid<96>(a, order); break;
                    case 128: run_grid<128>(a, order); break;
                    default: fprintf(stderr, "emu-decode: hd %d\n", c.hd); return 2;
                }
                if (run.rows) {   // the caches: the row at pos written from the rows, nothing else changed
                    CHECKX(memcmp(in.K.data(), K0.data(), K0.size() * sizeof(half)) == 0, "the K cache differs from the expected one");
                    CHECKX(memcmp(in.V.data(), V0.data(), V0.size() * sizeof(half)) == 0, "the V cache differs from the expected one");
                }
                out.check_guards("out", NAN);
                part.check_guards("part", NAN);
                for (int i = 0; i < c.Hkv + 2; i++) CHECKX(counters[i] == 0, "counter %d is %d after the grid", i - 1, counters[i]);
                if (ref.empty()) ref = reference(a, in);
                const float * o = a.out;
                const Compared r = compare(ref, [&](size_t i) { return (double)o[i]; });
                max_err = std::max(max_err, r.max_err);
                n_runs++;
                printf("%3d %-7s hd %3d H %2d/%d C %4d T %d cap %2g win %3d nc %d | min_chunk %4d -> splits %2d active %2d "
                       "tiles0 %3d | stages %d cp %s order %d: bad %zu/%zu max err %.2e ratio %.3f\n",
                       idx, run.suite, c.hd, c.H, c.Hkv, c.C, c.T, c.softcap, c.window, c.non_causal, run.min_chunk, n_splits,
                       n_active, tiles0, stages, cpmode ? "deferred" : "immediate", order, r.bad, nq, r.max_err, r.worst_ratio);
                if (r.bad) n_fail++;
                after_run(r.bad > 0);
            }
        }
    }
    printf("decode: runs %ld (max err %.2e); failed runs %d, check errors %ld\n", n_runs, max_err, n_fail, g_errors);
    return n_fail || g_errors;
}
