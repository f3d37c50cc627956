// Host emulation of one CUDA thread block (128 threads, or up to 512: NTH), for the emulators of
// the attention kernels (emu-prefill.cpp, emu-decode.cpp) and of the decode GEMV (emu-qgemv.cpp). The kernel text comes from the repository (gen-*.sh) and is
// compiled as host code against the stand-ins below.
//
// The threads of a block run as fibers (own x86-64 stack switch), one at a time, each until it
// waits at a barrier or ends. Warp collectives (shuffles, votes, ldmatrix, mma.sync m16n8k16) go
// through a per-warp exchange and a warp barrier. Blocks run one after another.
//
// Checks (CHECKX, counted in g_errors):
//   - __syncthreads reached while a thread of the block has exited, a thread exiting while others
//     wait at a barrier, warp collectives with exited lanes, deadlock
//   - shared memory: ldmatrix and cp.async in bounds and 16-byte aligned; the block's shared memory
//     starts as NaN; in deferred mode an ldmatrix of a 16-byte chunk with a cp.async to it still in
//     flight, two copies in flight to one chunk, copies in flight at the block's end (and, where the
//     driver asks, at a later __syncthreads)
//   - cp.async sources inside K or V and 16-byte aligned; a row at or past g_fresh_min copied
//     before ggx_pdl_wait
#pragma once

#include <cuda_fp16.h>
#include <vector_functions.h>
#include <vector_types.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using std::max;
using std::min;

struct Dim3 { int x = 0, y = 0, z = 0; };
inline Dim3 threadIdx, blockIdx, gridDim, blockDim{128, 1, 1};

inline long g_errors = 0;
#define CHECKX(c, ...)                                                                                                  \
    do {                                                                                                                \
        if (!(c) && g_errors++ < 30) {                                                                                  \
            fprintf(stderr, "CHECK FAILED %s: ", #c);                                                                   \
            fprintf(stderr, __VA_ARGS__);                                                                               \
            fprintf(stderr, " [block %d,%d thread %d]\n", blockIdx.x, blockIdx.y, threadIdx.x);                         \
        }                                                                                                               \
    } while (0)

// ---- fibers: switch of the callee-saved registers and the stack pointer (swapcontext's signal
// mask system call made the emulation twice as slow) ----
extern "C" void emu_ctx_switch(void ** save_sp, void * new_sp);
asm(R"(
.text
.globl emu_ctx_switch
.type emu_ctx_switch, @function
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size emu_ctx_switch, .-emu_ctx_switch
)");

constexpr int NTH_MAX = 512, WARPS_MAX = NTH_MAX / 32;
inline int NTH = 128;   // threads of the blocks being run (the driver sets it before run_block)
inline void * g_sched_sp;
struct Fiber { void * sp; int tid; bool done; bool pdl_waited; std::vector<char> stack; };
inline Fiber g_f[NTH_MAX];
inline int g_cur = 0;
inline long g_progress = 0;   // barrier releases and exits: a scheduler round without any is a deadlock
inline void (*g_thread_body)();   // what each thread runs (the driver: the kernel with its arguments)
inline bool g_rand_sched = false;   // fibers in a random order each scheduler round
inline std::mt19937 g_sched_rng(7);

inline void yield_() { emu_ctx_switch(&g_f[g_cur].sp, g_sched_sp); }
inline int warp_exited(int w) { int n = 0; for (int l = 0; l < 32; l++) n += g_f[32 * w + l].done; return n; }
inline int block_exited() { int n = 0; for (int t = 0; t < NTH; t++) n += g_f[t].done; return n; }
inline int lane_() { return g_f[g_cur].tid % 32; }
inline int warp_() { return g_f[g_cur].tid / 32; }

// ---- barriers ----
struct Bar { int arrived = 0; unsigned gen = 0; };
inline Bar g_wbar[WARPS_MAX], g_bbar;
inline int g_bbar_releases = 0;
inline int g_no_copies_from = 0;   // > 0: no cp.async in flight once this many __syncthreads have released
inline void check_no_copies_in_flight(const char * where);

inline void wsync() {
    const int w = warp_();
    CHECKX(warp_exited(w) == 0, "warp-synchronous op (__syncwarp / shfl / vote / ldmatrix / mma) with %d exited lanes",
           warp_exited(w));
    Bar & b = g_wbar[w];
    const unsigned g = b.gen;
    b.arrived++;
    while (b.gen == g) {
        if (b.arrived >= 32 - warp_exited(w)) { b.arrived = 0; b.gen++; g_progress++; break; }
        yield_();
    }
}
inline void __syncwarp(unsigned = 0xffffffffu) { wsync(); }
inline void __syncthreads() {
    CHECKX(block_exited() == 0, "__syncthreads with %d threads of the block exited (undefined on hardware)", block_exited());
    Bar & b = g_bbar;
    const unsigned g = b.gen;
    b.arrived++;
    while (b.gen == g) {
        if (b.arrived >= NTH - block_exited()) {
            b.arrived = 0; b.gen++; g_progress++;
            if (g_no_copies_from > 0 && ++g_bbar_releases >= g_no_copies_from) check_no_copies_in_flight("a late __syncthreads");
            break;
        }
        yield_();
    }
}
inline void __threadfence() {}

// ---- warp shuffles and votes (per-warp exchange) ----
inline uint32_t g_x[WARPS_MAX][32][8];
// v of lane `from` (0-31) of the calling lane's warp
template <class T> inline T shfl_from(T v, int from) {
    static_assert(sizeof(T) == 4, "32-bit shuffles only");
    const int l = lane_(), w = warp_();
    memcpy(&g_x[w][l][0], &v, 4);
    wsync();
    T r;
    memcpy(&r, &g_x[w][from & 31][0], 4);
    wsync();
    return r;
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int o) { return shfl_from(v, lane_() ^ o); }
template <class T> inline T __shfl_sync(unsigned, T v, int from) { return shfl_from(v, from); }
inline int vote(bool p, bool all) {
    const int l = lane_(), w = warp_();
    g_x[w][l][0] = p;
    wsync();
    int n = 0;
    for (int i = 0; i < 32; i++) n += g_x[w][i][0] != 0;
    wsync();
    return all ? n == 32 : n > 0;
}
inline bool __any_sync(unsigned, bool p) { return vote(p, false); }
inline bool __all_sync(unsigned, bool p) { return vote(p, true); }

// one thread runs at a time: the atomics are plain read-modify-writes
inline int atomicAdd(int * p, int v) { const int o = *p; *p = o + v; return o; }
inline int atomicMin(int * p, int v) { const int o = *p; *p = min(o, v); return o; }
inline int atomicMax(int * p, int v) { const int o = *p; *p = max(o, v); return o; }
inline unsigned long long atomicMax(unsigned long long * p, unsigned long long v) { const auto o = *p; *p = o > v ? o : v; return o; }

// ---- the project's device helpers that have no effect here ----
template <class V> inline V ggx_load_cg(const V * p) { return *p; }
inline void ggx_pdl_wait() { g_f[g_cur].pdl_waited = true; }
inline void ggx_pdl_launch_next() {}
inline void ggx_fence_acq_rel() {}
inline void ggx_red_add4(float * p, float4 v, int valid) {
    const float f[4] = {v.x, v.y, v.z, v.w};
    for (int c = 0; c < 4 && c < valid; c++) p[c] += f[c];
}
struct ggx_trace_dev {};
#define ggx_trace_begin(tr, slot) ((void)(slot))
#define ggx_trace_stamp(tr, slot, what) ((void)(slot))
#define ggx_trace_stamp_at(tr, slot, what, t) ((void)(slot))
#define ggx_trace_now() 0ull
#define ggx_trace_on(tr) false

// ---- shared memory, ldmatrix, mma.sync ----
inline unsigned char * g_smem = nullptr;
inline size_t g_smem_bytes = 0;
inline std::vector<int> g_pend;   // cp.async copies in flight per 16-byte chunk (deferred mode)

inline uint32_t smem_addr(const void * p) {
    const ptrdiff_t d = (const unsigned char *)p - g_smem;
    CHECKX(d >= 0 && (size_t)d < g_smem_bytes, "smem_addr out of range %ld", (long)d);
    return (uint32_t)d;
}
inline float h_at(uint32_t addr, int elem) {   // the half at byte addr + 2 elem
    const size_t off = addr + 2 * (size_t)elem;
    CHECKX(off + 2 <= g_smem_bytes, "ldmatrix read out of smem: %zu of %zu", off, g_smem_bytes);
    if (off + 2 > g_smem_bytes) return NAN;
    CHECKX(g_pend[off / 16] == 0, "ldmatrix reads smem byte %zu while a cp.async to it is in flight", off);
    half h;
    memcpy((void *)&h, g_smem + off, 2);
    return __half2float(h);
}
inline uint32_t pack_h2(float lo, float hi) {
    const half2 h = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
inline float lo_h(uint32_t u) { half h; const uint16_t b = u & 0xffff; memcpy((void *)&h, &b, 2); return __half2float(h); }
inline float hi_h(uint32_t u) { half h; const uint16_t b = u >> 16; memcpy((void *)&h, &b, 2); return __half2float(h); }

// ldmatrix .x4 (.trans): lane l gives the address of row l % 8 of matrix l / 8
inline void ldsm_impl(uint32_t (&r)[4], uint32_t addr, bool trans) {
    const int l = lane_(), w = warp_();
    CHECKX(addr % 16 == 0, "ldmatrix address not 16-byte aligned: %u", addr);
    g_x[w][l][0] = addr;
    wsync();
    for (int m = 0; m < 4; m++) {
        float e0, e1;
        if (!trans) {
            const uint32_t ra = g_x[w][8 * m + l / 4][0];
            e0 = h_at(ra, 2 * (l % 4));
            e1 = h_at(ra, 2 * (l % 4) + 1);
        } else {
            e0 = h_at(g_x[w][8 * m + 2 * (l % 4)][0], l / 4);
            e1 = h_at(g_x[w][8 * m + 2 * (l % 4) + 1][0], l / 4);
        }
        r[m] = pack_h2(e0, e1);   // exact: they are halves already
    }
    wsync();
}
inline void ldsm_x4(uint32_t (&r)[4], uint32_t addr) { ldsm_impl(r, addr, false); }
inline void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) { ldsm_impl(r, addr, true); }

// mma.sync m16n8k16 f16 x f16 + f32, the products summed in double
inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    const int l = lane_(), w = warp_();
    for (int i = 0; i < 4; i++) g_x[w][l][i] = a[i];
    g_x[w][l][4] = b0;
    g_x[w][l][5] = b1;
    wsync();
    auto A = [&](int row, int k) -> float {   // lane 4 (row % 8) + (k % 8) / 2
        const int ln = 4 * (row % 8) + (k % 8) / 2, reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
        const uint32_t u = g_x[w][ln][reg];
        return (k & 1) ? hi_h(u) : lo_h(u);
    };
    auto B = [&](int k, int n) -> float {
        const int ln = 4 * n + (k % 8) / 2, reg = k >= 8 ? 5 : 4;
        const uint32_t u = g_x[w][ln][reg];
        return (k & 1) ? hi_h(u) : lo_h(u);
    };
    const int g = l / 4, t = l % 4;
    float d[4];
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e / 2), col = 2 * t + (e & 1);
        double acc = c[e];
        for (int k = 0; k < 16; k++) acc += (double)A(row, k) * (double)B(k, col);
        d[e] = (float)acc;
    }
    wsync();
    for (int e = 0; e < 4; e++) c[e] = d[e];
}

// ---- cp.async: done at once (mode 0) or per thread in commit groups at the wait (mode 1) ----
inline int g_cp_mode = 1;
inline const char * g_gk_lo, * g_gk_hi, * g_gv_lo, * g_gv_hi;   // K and V
inline size_t g_row_bytes = 1;       // bytes per cache row (Hkv hd halves)
inline int g_fresh_min = INT_MAX;   // rows at or past it are written by the previous kernel (PDL)
struct Copy { void * dst; const void * src; bool pred; };
inline std::vector<std::vector<std::vector<Copy>>> g_groups(NTH_MAX);   // [tid][group][copy]
inline std::vector<std::vector<Copy>> g_open(NTH_MAX);

inline bool cp_dst_ok(const void * dst) {
    const ptrdiff_t d = (const unsigned char *)dst - g_smem;
    const bool ok = d >= 0 && (size_t)d + 16 <= g_smem_bytes && d % 16 == 0;
    CHECKX(ok, "cp.async dst out of smem or unaligned %ld", (long)d);
    return ok;
}
inline bool in_kv(const char * s) { return (s >= g_gk_lo && s + 16 <= g_gk_hi) || (s >= g_gv_lo && s + 16 <= g_gv_hi); }
inline void do_copy(const Copy & c) {
    if (!cp_dst_ok(c.dst)) return;
    if (g_cp_mode == 1) g_pend[((unsigned char *)c.dst - g_smem) / 16]--;
    if (!c.pred) memset(c.dst, 0, 16);
    else if (in_kv((const char *)c.src)) memcpy(c.dst, c.src, 16);
}
inline void ggx_cp_async16(void * dst, const void * src, bool pred) {
    if (pred) {
        const char * s = (const char *)src;
        const bool ink = s >= g_gk_lo && s + 16 <= g_gk_hi;
        CHECKX(in_kv(s), "cp.async src out of K/V");
        CHECKX(((uintptr_t)s) % 16 == 0, "cp.async src not 16-byte aligned");
        const long row = (long)((s - (ink ? g_gk_lo : g_gv_lo)) / (ptrdiff_t)g_row_bytes);
        CHECKX(g_f[g_cur].pdl_waited || !in_kv(s) || row < g_fresh_min, "cache row %ld (>= min pos %d) copied before ggx_pdl_wait",
               row, g_fresh_min);
    }
    const Copy c{dst, src, pred};
    if (g_cp_mode == 0) { do_copy(c); return; }
    if (!cp_dst_ok(dst)) return;
    const size_t chunk = ((unsigned char *)dst - g_smem) / 16;
    CHECKX(g_pend[chunk] == 0, "cp.async to smem byte %zu while another copy to it is in flight", 16 * chunk);
    g_pend[chunk]++;
    g_open[g_f[g_cur].tid].push_back(c);
}
inline void ggx_cp_async_commit() {
    if (g_cp_mode == 0) return;
    const int tid = g_f[g_cur].tid;
    g_groups[tid].push_back(std::move(g_open[tid]));
    g_open[tid].clear();
}
template <int N> inline void ggx_cp_async_wait() {
    if (g_cp_mode == 0) return;
    auto & gs = g_groups[g_f[g_cur].tid];
    while ((int)gs.size() > N) {
        for (const Copy & c : gs.front()) do_copy(c);
        gs.erase(gs.begin());
    }
}
inline void check_no_copies_in_flight(const char * where) {
    size_t n = 0;
    for (int t = 0; t < NTH; t++) {
        for (auto & g : g_groups[t]) n += g.size();
        n += g_open[t].size();
    }
    CHECKX(n == 0, "%zu cp.async copies still in flight at %s", n, where);
}

// ---- block runner ----
inline void fiber_entry() {
    g_thread_body();
    Fiber & f = g_f[g_cur];
    f.done = true;
    g_progress++;
    // a thread leaving while others wait at a barrier: undefined on hardware
    CHECKX(g_bbar.arrived == 0, "thread exits while %d threads wait at __syncthreads", g_bbar.arrived);
    CHECKX(g_wbar[f.tid / 32].arrived == 0, "lane exits while %d lanes of its warp wait at a warp barrier",
           g_wbar[f.tid / 32].arrived);
    void * dead;
    emu_ctx_switch(&dead, g_sched_sp);   // never resumed
    abort();
}
inline void fiber_init(Fiber & f) {
    if (f.stack.empty()) f.stack.assign(1 << 18, 0);
    void ** sp = (void **)(((uintptr_t)(f.stack.data() + f.stack.size())) & ~(uintptr_t)15);
    *--sp = nullptr;                 // fake return address of fiber_entry (rsp = 8 mod 16 at its entry)
    *--sp = (void *)&fiber_entry;    // emu_ctx_switch's ret
    for (int i = 0; i < 6; i++) *--sp = nullptr;   // rbp rbx r12 r13 r14 r15
    f.sp = sp;
}
// Block-shared variables a kernel declares with __shared__ in its body (gen-qgemv.sh rewrites each
// declaration into a call): one object per (type, id), shared by the block's threads as on the
// GPU (blocks run one at a time), set to NaN bytes (0xff) at each block's start as g_smem is.
struct SharedObj { void * p; size_t n; };
inline std::vector<SharedObj> g_shared_objs;
template <class A, int Id> inline A & emu_shared() {
    static A a;
    static const bool registered = [] {
        g_shared_objs.push_back({(void *)&a, sizeof(A)});
        memset((void *)&a, 0xff, sizeof(A));
        return true;
    }();
    (void)registered;
    return a;
}

// The grid's shared memory (run_block resets it for each block)
struct BlockSmem {
    std::vector<unsigned char> bytes;
    explicit BlockSmem(size_t n) : bytes(n) { g_smem = bytes.data(); g_smem_bytes = n; }
};
// One block: shared memory set to NaN (0xff bytes), the threads run until all have ended.
inline void run_block(int bx, int by) {
    blockIdx.x = bx;
    blockIdx.y = by;
    memset(g_smem, 0xff, g_smem_bytes);
    for (const SharedObj & o : g_shared_objs) memset(o.p, 0xff, o.n);
    g_pend.assign(g_smem_bytes / 16 + 1, 0);
    g_bbar_releases = 0;
    for (int t = 0; t < NTH; t++) {
        Fiber & f = g_f[t];
        f.tid = t;
        f.done = false;
        f.pdl_waited = false;
        fiber_init(f);
        g_groups[t].clear();
        g_open[t].clear();
    }
    for (auto & b : g_wbar) b = Bar();
    g_bbar = Bar();
    std::vector<int> order(NTH);
    for (int t = 0; t < NTH; t++) order[t] = t;
    int alive = NTH;
    while (alive) {
        if (g_rand_sched) std::shuffle(order.begin(), order.end(), g_sched_rng);
        const long p0 = g_progress;
        alive = 0;
        for (int t : order) {
            if (g_f[t].done) continue;
            g_cur = t;
            threadIdx.x = t;
            emu_ctx_switch(&g_sched_sp, g_f[t].sp);
            if (!g_f[t].done) alive++;
        }
        if (alive && g_progress == p0) {
            CHECKX(false, "deadlock: %d threads wait at barriers that cannot complete", alive);
            break;   // the fibers are abandoned (their stacks are reset for the next block)
        }
    }
    check_no_copies_in_flight("the block's end");
}

// ---- test data, guard zones, write ownership ----
template <class T> inline bool same_bits(T x, T y) { return memcmp(&x, &y, sizeof(T)) == 0; }

// n elements with `guard` NaN elements on each side: a stray access reads NaN or writes there
template <class T> struct Guarded {
    std::vector<T> buf;
    size_t n, guard;
    Guarded(size_t n_, size_t guard_, T fill) : buf(n_ + 2 * guard_, fill), n(n_), guard(guard_) {}
    T * p() { return buf.data() + guard; }
    void check_guards(const char * name, T nan) const {
        size_t bad = 0;
        for (size_t i = 0; i < guard; i++) bad += !same_bits(buf[i], nan) + !same_bits(buf[buf.size() - 1 - i], nan);
        CHECKX(bad == 0, "%zu writes outside %s (in its guard zones)", bad, name);
    }
};

// After a block: every element that changed must be one the block owns (owns(i) names the
// reason when it does not, else nullptr).
template <class T, class F> inline void check_writes(const std::vector<T> & before, const T * after, F owns, const char * name) {
    for (size_t i = 0; i < before.size(); i++)
        if (!same_bits(before[i], after[i])) {
            const char * why = owns(i);
            CHECKX(why == nullptr, "block wrote %s element %zu: %s", name, i, why ? why : "");
        }
}

// q in [-1, 1) (float), K and V as halves (and their float values for the reference)
struct Inputs {
    std::vector<float> qbuf, Kf, Vf;
    std::vector<half> K, V;
    float * q;
    Inputs(size_t nq, size_t nk, uint64_t seed, size_t q_guard, size_t q_offset) : qbuf(nq + 2 * q_guard + q_offset, NAN), Kf(nk), Vf(nk), K(nk), V(nk) {
        std::mt19937_64 rng(seed);
        std::uniform_real_distribution<float> d(-1.0f, 1.0f);
        q = qbuf.data() + q_guard + q_offset;
        for (size_t i = 0; i < nq; i++) q[i] = d(rng);
        for (size_t i = 0; i < nk; i++) { K[i] = __float2half_rn(d(rng)); Kf[i] = __half2float(K[i]); }
        for (size_t i = 0; i < nk; i++) { V[i] = __float2half_rn(d(rng)); Vf[i] = __half2float(V[i]); }
        g_gk_lo = (const char *)K.data(); g_gk_hi = (const char *)(K.data() + nk);
        g_gv_lo = (const char *)V.data(); g_gv_hi = (const char *)(V.data() + nk);
    }
};

// A case's shape; case_args fills the arguments both kernels read from it
struct Case { int hd, H, Hkv, C, T; float softcap; int window; int non_causal; };
template <class A> inline A case_args(const Case & c, const Inputs & in, const int32_t * pos) {
    A a{};
    a.q = in.q; a.k = in.K.data(); a.v = in.V.data(); a.pos = pos;
    a.hd = c.hd; a.H = c.H; a.Hkv = c.Hkv; a.C = c.C; a.T = c.T;
    a.scale = 1.0f / std::sqrt((float)c.hd); a.softcap = c.softcap; a.window = c.window; a.non_causal = c.non_causal;
    g_row_bytes = (size_t)c.Hkv * c.hd * sizeof(half);
    return a;
}

// Attention in double: query t sees keys [j0, j1) with j1 = min(P + 1, C), P = pos[t] (pos[T - 1]
// when non-causal) and j0 = P - window + 1 (ggx.h's ggx_params_attn, as the CPU backend does).
template <class A> inline std::vector<double> reference(const A & a, const Inputs & in) {
    const int HD = a.hd, G = a.H / a.Hkv;
    std::vector<double> out((size_t)a.T * a.H * HD, 0.0);
    for (int t = 0; t < a.T; t++)
        for (int h = 0; h < a.H; h++) {
            const int P = a.non_causal ? a.pos[a.T - 1] : a.pos[t];
            const int j0 = a.window > 0 ? max(0, P - a.window + 1) : 0, j1 = min(P + 1, a.C);
            const int kvh = h / G;
            std::vector<double> s(j1 > j0 ? j1 - j0 : 0);
            double mx = -INFINITY;
            for (int j = j0; j < j1; j++) {
                double d = 0;
                for (int c = 0; c < HD; c++) d += (double)a.q[((size_t)t * a.H + h) * HD + c] * in.Kf[((size_t)j * a.Hkv + kvh) * HD + c];
                d *= a.scale;
                if (a.softcap > 0) d = a.softcap * std::tanh(d / a.softcap);
                s[j - j0] = d;
                mx = std::max(mx, d);
            }
            double L = 0;
            for (auto & x : s) { x = std::exp(x - mx); L += x; }
            for (int c = 0; c < HD; c++) {
                double acc = 0;
                for (int j = j0; j < j1; j++) acc += s[j - j0] * in.Vf[((size_t)j * a.Hkv + kvh) * HD + c];
                out[((size_t)t * a.H + h) * HD + c] = L > 0 ? acc / L : 0.0;
            }
        }
    return out;
}

// got(i) against ref[i] within 5e-3 + 5e-3 |ref| (the tensor-core bounds of the CUDA tests)
struct Compared { size_t bad = 0, worst = 0; double max_err = 0, worst_ratio = -1; };
template <class F> inline Compared compare(const std::vector<double> & ref, F got) {
    Compared r;
    for (size_t i = 0; i < ref.size(); i++) {
        const double err = std::fabs(got(i) - ref[i]), tol = 5e-3 + 5e-3 * std::fabs(ref[i]);
        if (!(err <= tol)) r.bad++;
        const double ratio = std::isnan(err) ? 1e30 : err / tol;
        if (ratio > r.worst_ratio) { r.worst_ratio = ratio; r.worst = i; }
        r.max_err = std::isnan(err) ? INFINITY : std::max(r.max_err, err);
    }
    return r;
}

// EMU_FAIL_FAST=1 (mutants.sh): stop at the first failed run or check error
inline void after_run(bool failed) {
    static const bool fail_fast = getenv("EMU_FAIL_FAST") && atoi(getenv("EMU_FAIL_FAST"));
    fflush(stdout);
    if (fail_fast && (failed || g_errors)) {
        printf("stopped at the first failure (EMU_FAIL_FAST), check errors %ld\n", g_errors);
        exit(1);
    }
}
