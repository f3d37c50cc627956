// Host emulator of k_attn_prefill (backends/cuda/attn-prefill.cu); see README.md and emu-core.h.
// Every case runs with MT = 1 and 2 (16 and 32 query rows per warp), cp.async immediate and
// deferred, output in fp32 and in fp16 (out16), q 16-byte aligned or not (every third case).
//
// Beyond emu-core.h's checks: out (or out16) written only in the block's own rows and head
// (per-block diff), guard zones around q and the output intact.
//
//   emu-prefill [MT 1|2|0(both)] [CP_MODE 0|1|2(both)] [X16 0|1|2(both)] [ONLY_CASE] ["hd,H,Hkv,C,T,cap,win,nc"]
#include "emu-core.h"

#include "backends/cuda/decode-plan.h"   // ggx_attn_tail_takes (attn-common.cuh's text calls it)

static int g_range_store[2];   // the kernel's __shared__ int range[2]
static int * g_range = g_range_store;

namespace emu {
#include KERN_INC
}
using emu::attn_args;

static attn_args g_args;
template <int HD, int MT> static void thread_body() { emu::k_attn_prefill<HD, MT>(g_args); }

template <int HD, int MT> static void run_grid(const attn_args & a) {
    using C = emu::fa_cfg<HD, MT>;
    g_thread_body = thread_body<HD, MT>;
    g_args = a;
    const BlockSmem smem(C::bytes);
    gridDim.x = a.H;
    gridDim.y = (a.T + C::bq - 1) / C::bq;
    const size_t nout = (size_t)a.T * a.H * HD;
    std::vector<float> out0;
    std::vector<half> out16_0;
    for (int by = 0; by < gridDim.y; by++)
        for (int bx = 0; bx < gridDim.x; bx++) {
            if (a.out16) out16_0.assign(a.out16, a.out16 + nout);
            else out0.assign(a.out, a.out + nout);
            g_range_store[0] = 0x7f7f7f7f;   // garbage: the kernel sets it
            g_range_store[1] = -0x7f7f7f7f;
            run_block(bx, by);
            const int q0 = (gridDim.y - 1 - by) * C::bq, h = bx;
            auto owns = [&](size_t e) {
                const int t = (int)(e / HD / a.H);
                return (int)(e / HD % a.H) != h ? "another head" : t < q0 || t >= q0 + C::bq ? "another block's row" : nullptr;
            };
            if (a.out16) check_writes(out16_0, a.out16, owns, "out16");
            else check_writes(out0, a.out, owns, "out");
        }
}
template <int MT> static bool launch(const attn_args & a) {
    switch (a.hd) {
        case 64: run_grid<64, MT>(a); return true;
        case 80: run_grid<80, MT>(a); return true;
        case 96: run_grid<96, MT>(a); return true;
        case 128: run_grid<128, MT>(a); return true;
        default: return false;
    }
}

int main(int argc, char ** argv) {
    const int mt_arg = argc > 1 ? atoi(argv[1]) : 0;
    const int cp_arg = argc > 2 ? atoi(argv[2]) : 2;
    const int x16_arg = argc > 3 ? atoi(argv[3]) : 2;
    const int only = argc > 4 ? atoi(argv[4]) : -1;
    std::vector<Case> cases = {
        {128, 32, 8, 600, 100, 0, 0, 0}, {96, 4, 1, 300, 70, 20.0f, 50, 0},
        {80, 4, 2, 200, 40, 0, 0, 0},    {64, 8, 8, 130, 129, 0, 0, 0},
        {128, 32, 8, 300, 300, 0, 0, 0}, {80, 6, 2, 217, 217, 0, 0, 0},
        {128, 8, 2, 700, 150, 0, 40, 0}, {96, 8, 4, 260, 190, 15.0f, 0, 0},
        {128, 8, 2, 500, 200, 0, 0, 1},  {64, 4, 2, 100, 20, 0, 0, 1},
        {128, 8, 2, 500, 200, 0, 40, 1},  // non-causal with a window: the same 40 keys for every query
        {128, 8, 2, 397, 397, 0, 0, 0},  {64, 4, 4, 300, 260, 0, 20, 0},
        // MT = 2: a key tile fully visible to a warp's first row tile and only partly (window) to
        // its second (pos of a warp's first row a multiple of 32, window 48)
        {64, 4, 2, 320, 128, 0, 48, 0},
    };
    if (argc > 5) {
        Case c{};
        if (sscanf(argv[5], "%d,%d,%d,%d,%d,%f,%d,%d", &c.hd, &c.H, &c.Hkv, &c.C, &c.T, &c.softcap, &c.window, &c.non_causal) != 8) {
            fprintf(stderr, "emu-prefill: the extra case needs 8 numbers\n");
            return 2;
        }
        cases.push_back(c);
    }
    int n_fail = 0, n_runs = 0, idx = -1;
    double max_err = 0;
    for (const Case & c : cases) {
        idx++;
        if (only >= 0 && idx != only) continue;
        const size_t nq = (size_t)c.T * c.H * c.hd, nk = (size_t)c.C * c.Hkv * c.hd;
        const Inputs in(nq, nk, 1234 + idx, 64, idx % 3 == 2 ? 1 : 0);   // q not 16-byte aligned in every third case
        std::vector<int32_t> pos(c.T);
        for (int t = 0; t < c.T; t++) pos[t] = c.C - c.T + t;
        std::vector<double> ref;
        for (int MT = 1; MT <= 2; MT++)
            for (int cpmode = 0; cpmode < 2; cpmode++)
                for (int x16 = 0; x16 < 2; x16++) {
                    if ((mt_arg && MT != mt_arg) || (cp_arg != 2 && cpmode != cp_arg) || (x16_arg != 2 && x16 != x16_arg)) continue;
                    g_cp_mode = cpmode;
                    const size_t guard = (size_t)128 * c.H * c.hd;   // a block's rows past T
                    Guarded<float> out(x16 ? 0 : nq, guard, NAN);
                    Guarded<half> out16(x16 ? nq : 0, guard, __float2half_rn(NAN));
                    attn_args a = case_args<attn_args>(c, in, pos.data());
                    a.out = x16 ? nullptr : out.p(); a.out16 = x16 ? out16.p() : nullptr;
                    if (!(MT == 1 ? launch<1>(a) : launch<2>(a))) { fprintf(stderr, "emu-prefill: hd %d\n", c.hd); return 2; }
                    out.check_guards("out", NAN);
                    out16.check_guards("out16", __float2half_rn(NAN));
                    if (ref.empty()) ref = reference(a, in);
                    const Compared r = x16 ? compare(ref, [&](size_t i) { return (double)__half2float(a.out16[i]); })
                                           : compare(ref, [&](size_t i) { return (double)a.out[i]; });
                    max_err = std::max(max_err, r.max_err);
                    n_runs++;
                    printf("%2d hd %3d H %2d/%d C %3d T %3d cap %2g win %2d nc %d q %s | MT %d cp %-9s out %s: bad %zu/%zu max err %.2e "
                           "ratio %.3f [t %zu]\n",
                           idx, c.hd, c.H, c.Hkv, c.C, c.T, c.softcap, c.window, c.non_causal, idx % 3 == 2 ? "unaligned" : "aligned", MT,
                           cpmode ? "deferred" : "immediate", x16 ? "f16" : "f32", r.bad, nq, r.max_err, r.worst_ratio,
                           r.worst / ((size_t)c.H * c.hd));
                    if (r.bad) n_fail++;
                    after_run(r.bad > 0);
                }
    }
    printf("prefill: runs %d (max err %.2e); failed runs %d, check errors %ld\n", n_runs, max_err, n_fail, g_errors);
    return n_fail || g_errors;
}
