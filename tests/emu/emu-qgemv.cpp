// Host emulator of k_qgemv (backends/cuda/qgemv.cu), the fused EXL2 decode GEMV; see README.md
// and emu-core.h. A job (one to four matrices sharing x, with the epilogues the engine fuses:
// bias, residual add, GLU, RoPE, KV-cache store, RMS norm in the prologue) runs block by block in
// forward, reverse and a random order, against a double-precision product of the reference
// dequantizer's weights (exl2/quant/dequant.h, bit-exact with ExLlamaV2).
//
// The launch's arguments come from qgemv.cu's own fill_args over a job of ggx tensors, as
// fusion.cu hands it over, and the piece tables from qmatrix.cu's host code (gen-qgemv.sh cuts
// both out with the kernel); only the launch plan (m, the paired tables) is the case's choice.
//
// Bound, S = sum_k |w_k x_k| (test-cuda-qmatmul.cpp's error model): the kernel rounds x to fp16
// and sums 16 products per half in fp16 over a piece, so its error is ~2^-11 * 2 S / sqrt(K),
// far inside S / 1024 + 1e-6, while one wrong code, scale or row moves an output by ~S / sqrt(K).
// The epilogues carry it through to first order (RoPE: both inputs' bounds; GLU: 1.2 |u| b_g +
// |act(g)| b_u; an f16 cache adds half an fp16 ulp).
//
// Beyond the result: the outputs of the three orders are the same bits (each tile's last block
// sums its partials in slice order, whoever arrives last); every output element is written by
// exactly one block, and only by a block of its own column tile; partials only in the block's
// own (slice, tile); every 16-byte chunk of packed weights read exactly once (the bytes a token
// costs); guard zones around y, the cache and the partials intact; the tile counters back to 0
// after the grid; the shared memory past the launch's size untouched.
//
//   emu-qgemv [ONLY_CASE]
#include "emu-core.h"

#include "backends/cuda/decode-plan.h"
#include "backends/cuda/pair-window.h"
#include "exl2/quant/dequant.h"
#include "ggx/fp16.h"
#include "ggx/ggx.h"

#include <cstdarg>
#include <memory>
#include <string>
#include <utility>

namespace exl2 {   // dequant.cpp's error path (the library's own lives in json.cpp)
void fail(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}
}  // namespace exl2

// ---- stand-ins for the device intrinsics and common.cuh helpers the kernel calls ----
#define GGX_CUDA_WARP 32
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }   // (the device's is within 2 ulp of it)
inline uint32_t __byte_perm(uint32_t a, uint32_t b, uint32_t s) { return ggx_byte_perm(a, b, s); }
inline uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, uint32_t s) { return (uint32_t)((((uint64_t)hi << 32) | lo) >> (s & 31)); }
// HFMA2: each half a * b + c rounded once (the product of two halves is exact in double)
inline half2 __hfma2(half2 a, half2 b, half2 c) {
    const float2 fa = __half22float2(a), fb = __half22float2(b), fc = __half22float2(c);
    return __halves2half2(__double2half((double)fa.x * fb.x + fc.x), __double2half((double)fa.y * fb.y + fc.y));
}
template <class V> inline V ggx_load_ro(const V * p) { return *p; }
// The weights' 16-byte loads (load_weights' host branch) are counted per chunk of each matrix's
// q_weight: a token must read every packed word once, and only those.
struct WordReads {
    const uint4 * lo;
    size_t n;
    std::vector<int> count;
};
inline std::vector<WordReads> g_word_reads;
inline uint4 ggx_load_ro(const uint4 * p) {
    for (WordReads & r : g_word_reads)
        if (p >= r.lo && p < r.lo + r.n) { r.count[p - r.lo]++; return *p; }
    CHECKX(false, "a 16-byte load outside every matrix's q_weight");
    return *p;
}
template <class V> inline V __ldg(const V * p) { return *p; }   // exl2-unpack.cuh's GPTQ loads
// An L2 prefetch is a hint, but its span must lie in one matrix's q_weight, 16-byte aligned
inline void ggx_prefetch_l2(const void * src, uint32_t bytes) {
    const uint4 * p = (const uint4 *)src;
    WordReads * in = nullptr;
    for (WordReads & r : g_word_reads)
        if (p >= r.lo && p + bytes / 16 <= r.lo + r.n) in = &r;
    CHECKX(in && bytes % 16 == 0 && (uintptr_t)src % 16 == 0 && bytes > 0, "an L2 prefetch of %u bytes outside every q_weight or unaligned",
           bytes);
}
inline float ggx_load_any(const void * p, int type, int64_t i) {
    if (type == GGX_TYPE_F16) return __half2float(((const half *)p)[i]);
    CHECKX(type == GGX_TYPE_F32, "ggx_load_any of type %d (the emulator has f32 and f16)", type);
    return ((const float *)p)[i];
}
inline void ggx_store_any(void * p, int type, int64_t i, float v) {
    if (type == GGX_TYPE_F16) ((half *)p)[i] = __float2half_rn(v);
    else ((float *)p)[i] = v;
}
inline float ggx_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
inline float ggx_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

#include TABLES_INC

namespace emu {
#include KERN_INC
}  // namespace emu
using emu::gemv_args;
using emu::gemv_mat;

// ---- an EXL2 matrix: packed arrays, reference weights, piece tables ----
using Layout = std::vector<std::pair<int, int>>;   // (bits, rows) per group, in order
struct Mat {
    int K = 0, N = 0, Np = 0, G = 0, QR = 0;
    std::vector<uint32_t> qw, qs;
    std::vector<half> qsmax;     // M'_g
    std::vector<int32_t> perm;   // quantized row -> input row (q_perm); empty: identity
    std::vector<double> w;       // reference weights [K][N], input-row order
    ggx_cuda_piece_tables tab;
    ggx_qmatrix q = {};      // what ggx_cuda_qmatrix_prepare leaves: the descriptor and its tables (bind)
    ggx_cuda_qextra e;
};

// Points m's descriptor at its arrays and tables (once m sits where it stays).
static void bind(Mat & m) {
    m.q.K = m.K; m.q.N = m.N; m.q.Np = m.Np; m.q.n_groups = m.G; m.q.qrows = m.QR;
    m.q.q_weight = m.qw.data();
    m.q.q_scale = m.qs.data();
    m.q.q_scale_max = (uint16_t *)m.qsmax.data();
    m.q.q_perm = m.perm.empty() ? nullptr : m.perm.data();
    m.e.slice_rows = GGX_QGEMV_FINE_ROWS;
    m.e.n_slices = (m.K + GGX_QGEMV_FINE_ROWS - 1) / GGX_QGEMV_FINE_ROWS;
    m.e.pieces = m.tab.pieces.data();
    m.e.pieces2 = m.tab.pieces2.data();
    m.e.heads = m.tab.heads.data();
    m.e.heads2 = m.tab.heads2.data();
    m.q.backend_extra = &m.e;
}

static long g_joined_across = 0;   // paired pieces joining two groups (the pairgroups variant only)
static long g_uneven_jobs = 0;     // jobs run with uneven K-slices (the uneven variant only)

static Mat make_mat(int K, int N, const Layout & L, bool act_order, uint64_t seed) {
    Mat m;
    m.K = K; m.N = N; m.Np = (N + 31) / 32 * 32; m.G = (int)L.size();
    std::vector<uint16_t> groups;
    int rows = 0;
    for (auto [bits, r] : L) {
        groups.push_back((uint16_t)bits);
        groups.push_back((uint16_t)m.QR);
        m.QR += r * bits / 32;
        rows += r;
    }
    if (rows != K) { fprintf(stderr, "emu-qgemv: layout holds %d rows, K %d\n", rows, K); exit(2); }
    std::mt19937_64 rng(seed);
    m.qw.resize((size_t)m.QR * m.Np);
    for (auto & v : m.qw) v = (uint32_t)rng();   // every bit pattern is a valid code
    m.qs.resize((size_t)m.G * m.Np / 8);
    for (auto & v : m.qs) v = (uint32_t)rng();
    std::uniform_real_distribution<float> smax(2e-3f, 8e-3f);
    std::vector<uint16_t> qsmax16(m.G);
    for (int g = 0; g < m.G; g++) {   // as stored; the kernel reads M'_g (the loader applies the prescale: 1 here)
        const half h = __float2half_rn(smax(rng) * 256.0f);
        memcpy(&qsmax16[g], &h, 2);
        const uint16_t mp = exl2::exl2_prescale_max(qsmax16[g], 1.0f);
        half hp;
        memcpy((void *)&hp, &mp, 2);
        m.qsmax.push_back(hp);
    }
    std::vector<int32_t> invperm(K);
    for (int k = 0; k < K; k++) invperm[k] = k;
    if (act_order) {
        std::shuffle(invperm.begin(), invperm.end(), rng);
        m.perm.resize(K);
        for (int k = 0; k < K; k++) m.perm[invperm[k]] = k;
    }
    exl2::Exl2Raw raw;
    raw.K = K; raw.N = N; raw.Np = m.Np; raw.G = m.G; raw.QR = m.QR;
    raw.q_weight = m.qw.data(); raw.q_scale = m.qs.data(); raw.q_scale_max = qsmax16.data();
    raw.q_groups = groups.data(); raw.q_invperm = invperm.data();
    std::vector<uint16_t> w16((size_t)K * N);
    exl2::exl2_dequant_ref(raw, 1.0f, w16.data());
    m.w.resize(w16.size());
    for (size_t i = 0; i < w16.size(); i++) m.w[i] = ggx_f16_to_f32(w16[i]);
    // the tables qmatrix.cu builds, with its default widths for the paired table (2, 3 and 4) and,
    // built as the pairgroups variant (GGX_QGEMV_PAIR_GROUPS=1), its joins across groups
    int run_cost[4][GGX_QGEMV_MAX_RUN + 1];
    ggx_cuda_build_piece_tables(ggx_cuda_group_table(L), K, width_mask(nullptr), GGX_QGEMV_PAIR_GROUPS ? width_mask(nullptr) : 0,
                                &m.tab, run_cost);
    for (const int4 & p : m.tab.pieces2) g_joined_across += (p.z & 16) != 0;
    return m;
}

// ---- a job ----
struct JobMat {
    const Mat * mat;
    int epi = GGX_QGEMV_STORE;
    bool rope = false, cache = false, bias = false;
    int pair = -1;   // GLU partner
    bool is_gate = false;
    bool in_place = false;   // ADD: y is the residual's buffer (as the planner leaves o and down)
    bool rows = false;       // its K-slices add into the job's q/k/v rows (ggx_qgemv_job_mat::rows; no cache)
};
struct Job {
    const char * what;
    int T, m;
    bool pairs;          // one-row job with even m: the paired tables (as GGX_QGEMV_PAIRS=1 allows)
    int norm;            // 0: none, 1: f32 weights through q_perm, 2: f16 weights, 3: the q_perm-order table
    int head_dim = 0, rope_mode = GGX_ROPE_NEOX, n_rot = 0;
    bool rope_table = false, freq_div = false;
    int act = GGX_ACT_SILU;
    int cache_type = GGX_TYPE_F16;
    float x_scale = 1.0f;
    std::vector<JobMat> mats;
    // attention in the tail (q/k/v jobs: mats q, k, v; f16 caches): its bound in keys, 0 for none
    int attn_bound = 0;
    int pos0 = 5;   // pos of the one row (of row t: pos0 + t)
};

using emu::k_tile;   // the kernel's column tile
constexpr int k_guard = 1024;

// The partials start as a NaN of another payload than the outputs' (x86 arithmetic keeps a NaN
// operand's payload), so an epilogue that reads partials before they are written and stores the
// result changes an output's bits even though both are NaN, and shows as a second writer.
static float partial_nan() {
    const uint32_t u = 0x7fc0a5a5u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static gemv_args g_args;
template <int T> static void thread_body() { emu::k_qgemv<T>(g_args); }

// the product with the epilogues in double, and its bound (see the top)
struct Ref { std::vector<double> y, bound; };

struct Buffers {   // one matrix's outputs; the GLU pair shares the first's y
    Guarded<float> * y = nullptr;
    float * rows = nullptr;   // its q/k/v rows (JobMat::rows) in the job's rows buffer
    std::unique_ptr<Guarded<float>> own_y;
    std::unique_ptr<Guarded<uint16_t>> cache16;
    std::unique_ptr<Guarded<float>> cache32;
    void * cache() { return cache16 ? (void *)cache16->p() : cache32 ? (void *)cache32->p() : nullptr; }
};

static double act_d(int act, double g) {
    if (act == GGX_ACT_SILU) return g / (1.0 + std::exp(-g));
    return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
}

// The attention in the tail (Job::attn_bound) against a double-precision attention over the
// kernel's own q (y after RoPE) and cache rows (the random rows before pos and the kernel's at pos),
// so that only the tail's arithmetic is measured: it sums in fp32, so a score is off by a few 2^-24
// of A = scale sum_d |q_d k_d|, a weight e^(s - m) relatively by about as much (the device's __expf
// adds ~2 + 1.2 |s - m| ulp), and the result by ~1e-7 (1 + A) |v|max; the bound, 2e-6 (1 + A)
// |v|max + 1e-6, leaves room for that (the host emulation lands at ~2% of it), while a key left
// out or read from another head moves a result by ~|v| / keys (the scale spreads the weights over
// 3-17 keys: the report's "keys with weight"). While
// pos + 1 <= the bound every element is written exactly once (by a group's last producer); past it
// none is (the attention kernel's turn). The same bits in every block order.
static int check_attention(const Job & job, int idx, int order, int p, int H, int Hkv, float scale, const float * qy,
                           const uint16_t * kc, const uint16_t * vc, Guarded<float> & out, const std::vector<int> & writes,
                           std::vector<float> & first) {
    const int hd = job.head_dim, G = H / Hkv, np = p + 1;
    const bool on = np <= job.attn_bound;
    size_t bad = 0, not_once = 0, wi = 0;
    double ratio = 0, eff_keys = 0;
    std::vector<double> ref((size_t)H * hd, 0.0);
    for (int h = 0; h < H; h++) {
        const int g = h / G;
        std::vector<double> w(np);
        double A = 0, mx = -INFINITY, l = 0;
        for (int j = 0; j < np; j++) {
            double sj = 0, sa = 0;
            for (int e = 0; e < hd; e++) {
                const double t = (double)qy[h * hd + e] * ggx_f16_to_f32(kc[((size_t)j * Hkv + g) * hd + e]);
                sj += t;
                sa += std::fabs(t);
            }
            w[j] = sj * scale;
            A = std::max(A, sa * scale);
            mx = std::max(mx, w[j]);
        }
        for (double & x : w) { x = std::exp(x - mx); l += x; }
        if (h == 0) {
            double s2 = 0;
            for (double x : w) s2 += (x / l) * (x / l);
            eff_keys = 1.0 / s2;
        }
        for (int e = 0; e < hd; e++) {
            double sum = 0, vmax = 0;
            for (int j = 0; j < np; j++) {
                const double v = ggx_f16_to_f32(vc[((size_t)j * Hkv + g) * hd + e]);
                sum += w[j] * v;
                vmax = std::max(vmax, std::fabs(v));
            }
            const size_t o = (size_t)h * hd + e;
            ref[o] = sum / l;
            not_once += writes[o] != (on ? 1 : 0);
            if (!on) continue;
            const double err = std::fabs((double)out.p()[o] - ref[o]), bound = 2e-6 * (1 + A) * vmax + 1e-6;
            const double r = std::isnan(err) ? 1e30 : err / bound;
            bad += !(r <= 1.0);
            if (r > ratio) { ratio = r; wi = o; }
        }
    }
    CHECKX(not_once == 0, "attention: %zu result elements not written %s", not_once, on ? "exactly once" : "(past the bound: none)");
    out.check_guards("attention result", NAN);
    const std::vector<float> got(out.p(), out.p() + out.n);
    if (order == 0) first = got;
    else CHECKX(memcmp(first.data(), got.data(), got.size() * sizeof(float)) == 0, "attention: order %d gives other bits than the forward order", order);
    printf("%3d %-34s attention H %d Hkv %d hd %d pos %d bound %d order %d: %s bad %zu/%zu worst err/bound %.3f (element %zu: %.6g vs %.6g), "
           "keys with weight (1 / sum w^2, head 0) %.1f\n",
           idx, job.what, H, Hkv, hd, p, job.attn_bound, order, on ? "tail" : "past the bound,", bad, ref.size(), ratio, wi,
           got[wi], ref[wi], eff_keys);
    return bad > 0;
}

static int run_job(const Job & job, int idx) {
    const int T = job.T, n_mat = (int)job.mats.size();
    const int K = job.mats[0].mat->K;
    const int W = emu::groups_for(T);
    std::mt19937_64 rng(1000 + idx);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> x((size_t)T * K);
    for (auto & v : x) v = d(rng) * job.x_scale;
    std::vector<float> norm_w(K), norm_wp;
    std::vector<half> norm_w16(K);
    for (int k = 0; k < K; k++) {
        norm_w16[k] = __float2half_rn(0.5f + (d(rng) + 1.0f) / 2);
        norm_w[k] = job.norm == 2 ? __half2float(norm_w16[k]) : 0.5f + (d(rng) + 1.0f) / 2;
    }
    const float eps = 1e-5f;
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; t++) pos[t] = job.pos0 + t;
    const int cache_rows = std::max(16, job.pos0 + T + 3);   // rows past pos stay NaN: nothing may read them
    const bool attn = job.attn_bound > 0;
    const int hd = job.head_dim, H = attn ? job.mats[0].mat->N / hd : 0, Hkv = attn ? job.mats[1].mat->N / hd : 0;
    float attn_scale = 0.0f;
    const int half_rot = job.n_rot / 2;
    std::vector<float> freq_div(std::max(1, half_rot));
    for (auto & f : freq_div) f = 1.0f + (d(rng) + 1.0f) * 2;
    ggx_params_rope rp = {};
    rp.n_rot = job.n_rot; rp.mode = job.rope_mode; rp.theta = 10000.0f; rp.pos_scale = 1.0f; rp.attn_factor = 1.0f;
    // the angles in double, as ggx_rope_cos_sin forms them (ext_factor 0)
    auto cos_sin = [&](int t, int i, double & c, double & s) {
        double inv = std::pow((double)rp.theta, -2.0 * i / rp.n_rot);
        if (job.freq_div) inv /= (double)freq_div[i];
        const double ang = (double)pos[t] * inv * rp.pos_scale;
        c = std::cos(ang) * rp.attn_factor;
        s = std::sin(ang) * rp.attn_factor;
    };
    std::vector<float2> rope_table((size_t)T * std::max(1, half_rot));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half_rot; i++) {
            double c, s;
            cos_sin(t, i, c, s);
            rope_table[(size_t)t * half_rot + i] = make_float2((float)c, (float)s);
        }

    // x as the kernel sees it (normalised in double)
    std::vector<double> xin(x.begin(), x.end());
    if (job.norm)
        for (int t = 0; t < T; t++) {
            double ss = 0;
            for (int k = 0; k < K; k++) ss += (double)x[(size_t)t * K + k] * x[(size_t)t * K + k];
            const double rinv = 1.0 / std::sqrt(ss / K + eps);
            for (int k = 0; k < K; k++) xin[(size_t)t * K + k] *= rinv * norm_w[k];
        }

    // per matrix: bias, residual, plain products and their S
    std::vector<std::vector<float>> bias(n_mat), resid(n_mat);
    std::vector<std::vector<double>> prod(n_mat), mag(n_mat);
    for (int i = 0; i < n_mat; i++) {
        const Mat & M = *job.mats[i].mat;
        if (M.K != K) { fprintf(stderr, "emu-qgemv: job %s: matrices of different K\n", job.what); exit(2); }
        if (job.mats[i].bias) { bias[i].resize(M.N); for (auto & b : bias[i]) b = d(rng); }
        if (job.mats[i].epi == GGX_QGEMV_ADD) { resid[i].resize((size_t)T * M.N); for (auto & r : resid[i]) r = d(rng); }
        prod[i].assign((size_t)T * M.N, 0.0);
        mag[i].assign((size_t)T * M.N, 0.0);
        for (int t = 0; t < T; t++)
            for (int n = 0; n < M.N; n++) {
                double s = 0, a = 0;
                for (int k = 0; k < K; k++) {
                    const double p = M.w[(size_t)k * M.N + n] * xin[(size_t)t * K + k];
                    s += p;
                    a += std::fabs(p);
                }
                prod[i][(size_t)t * M.N + n] = s + (bias[i].empty() ? 0.0 : bias[i][n]);
                mag[i][(size_t)t * M.N + n] = a / 1024.0 + 1e-6;
            }
    }
    // the epilogues in double: what each matrix's output (y or cache rows [T][N]) must hold
    std::vector<Ref> ref(n_mat);
    for (int i = 0; i < n_mat; i++) {
        const JobMat & jm = job.mats[i];
        const int N = jm.mat->N;
        Ref & r = ref[i];
        r.y = prod[i];
        r.bound = mag[i];
        if (jm.epi == GGX_QGEMV_ADD)
            for (size_t e = 0; e < r.y.size(); e++) { r.y[e] += resid[i][e]; r.bound[e] += std::fabs(r.y[e]) * 1e-7; }
        if (jm.epi == GGX_QGEMV_GLU) {
            const int gi = jm.is_gate ? i : jm.pair, ui = jm.is_gate ? jm.pair : i;
            for (size_t e = 0; e < r.y.size(); e++) {
                const double g = prod[gi][e], u = prod[ui][e], ag = act_d(job.act, g);
                r.y[e] = ag * u;
                r.bound[e] = 1.2 * std::fabs(u) * mag[gi][e] + std::fabs(ag) * mag[ui][e] + 1.2 * mag[gi][e] * mag[ui][e] + 1e-6;
            }
        }
        if (jm.rope) {
            const std::vector<double> y0 = r.y, b0 = r.bound;
            const int hd = job.head_dim;
            for (int t = 0; t < T; t++)
                for (int n = 0; n < N; n++) {
                    const int dd = n % hd, base = n - dd;
                    if (dd >= job.n_rot) continue;
                    int ii, j0, j1;
                    if (job.rope_mode == GGX_ROPE_NEOX) { ii = dd < half_rot ? dd : dd - half_rot; j0 = ii; j1 = ii + half_rot; }
                    else { ii = dd / 2; j0 = 2 * ii; j1 = 2 * ii + 1; }
                    double c, s;
                    cos_sin(t, ii, c, s);
                    const size_t o = (size_t)t * N;
                    const double x0 = y0[o + base + j0], x1 = y0[o + base + j1];
                    r.y[o + n] = dd == j0 ? x0 * c - x1 * s : x0 * s + x1 * c;
                    r.bound[o + n] = b0[o + base + j0] + b0[o + base + j1] + 1e-6;
                }
        }
        if (jm.cache && job.cache_type == GGX_TYPE_F16)
            for (size_t e = 0; e < r.y.size(); e++) r.bound[e] += std::fabs(r.y[e]) / 2048.0;
    }

    // the job as fusion.cu would hand it over (tensors over the driver's buffers), and the launch's
    // arguments from qgemv.cu's own fill_args; the rest as ggx_cuda_qgemv_run adds it
    ggx_context * gctx = ggx_context_new();
    auto tensor = [&](ggx_type type, int64_t ne0, int64_t ne1, void * data) {
        ggx_tensor * t = ggx_new_tensor_2d(gctx, type, ne0, ne1);
        t->data = data;
        return t;
    };
    const bool pairs = job.pairs && T == 1 && job.m % 2 == 0;
    ggx_qgemv_job gj;
    gj.n_mat = n_mat;
    gj.T = T;
    gj.x = tensor(GGX_TYPE_F32, K, T, x.data());
    gj.norm = job.norm != 0;
    gj.norm_w = !job.norm ? nullptr : job.norm == 2 ? tensor(GGX_TYPE_F16, K, 1, norm_w16.data()) : tensor(GGX_TYPE_F32, K, 1, norm_w.data());
    gj.norm_eps = eps;
    gj.pos = tensor(GGX_TYPE_I32, T, 1, pos.data());
    gj.freq_div = job.freq_div ? tensor(GGX_TYPE_F32, half_rot, 1, freq_div.data()) : nullptr;
    gj.rope = rp;
    gj.head_dim = job.head_dim;
    gj.act = job.act;
    std::vector<Buffers> buf(n_mat);
    size_t part_bound = 0;   // the partials of any m fit: at most one K-slice per fine slice; the attention state
    for (int i = 0; i < n_mat; i++) part_bound += (size_t)(K + 31) / 32 * T * job.mats[i].mat->Np + 64;
    part_bound += (size_t)H * (hd + 2) + 64;
    Guarded<float> partial(part_bound, k_guard, partial_nan());
    // the q/k/v rows (JobMat::rows): one buffer, (N + 3) / 4 * 4 floats per matrix, as fusion.cu
    // lays them out; zero before the grid, NaN in the padding and guards (which nothing may change)
    std::vector<int64_t> rows_off(n_mat, -1);
    size_t rows_n = 0;
    for (int i = 0; i < n_mat; i++)
        if (job.mats[i].rows) {
            rows_off[i] = (int64_t)rows_n;
            rows_n += (size_t)(job.mats[i].mat->N + 3) / 4 * 4;
        }
    Guarded<float> rowsbuf(std::max<size_t>(rows_n, 1), k_guard, NAN);
    auto rows_fresh = [&]() {
        std::fill(rowsbuf.buf.begin(), rowsbuf.buf.end(), NAN);
        for (int i = 0; i < n_mat; i++)
            if (rows_off[i] >= 0) std::fill(rowsbuf.p() + rows_off[i], rowsbuf.p() + rows_off[i] + job.mats[i].mat->N, 0.0f);
    };
    for (int i = 0; i < n_mat; i++) {
        const JobMat & jm = job.mats[i];
        const Mat & q = *jm.mat;
        ggx_qgemv_job_mat & g = gj.m[i];
        ggx_tensor * w = tensor(GGX_TYPE_EXL2, K, q.N, nullptr);
        w->extra = (void *)&q.q;
        g.w = w;
        g.bias = jm.bias ? tensor(GGX_TYPE_F32, q.N, 1, bias[i].data()) : nullptr;
        g.resid = jm.epi == GGX_QGEMV_ADD ? tensor(GGX_TYPE_F32, q.N, T, resid[i].data()) : nullptr;
        if (jm.rows) {
            if (T != 1 || jm.cache || jm.epi != GGX_QGEMV_STORE) { fprintf(stderr, "emu-qgemv: job %s: rows are for one-row stores\n", job.what); exit(2); }
            g.rows = rows_off[i];
            buf[i].rows = rowsbuf.p() + rows_off[i];
        } else if (jm.cache) {
            if (job.cache_type == GGX_TYPE_F16) buf[i].cache16.reset(new Guarded<uint16_t>((size_t)cache_rows * q.N, k_guard, 0xffff));
            else buf[i].cache32.reset(new Guarded<float>((size_t)cache_rows * q.N, k_guard, NAN));
            g.cache = tensor((ggx_type)job.cache_type, q.N, cache_rows, buf[i].cache());
        } else if (jm.epi == GGX_QGEMV_GLU && jm.pair < i) {   // the GLU's one output
            buf[i].y = buf[jm.pair].y;
            g.out = gj.m[jm.pair].out;
        } else {
            buf[i].own_y.reset(new Guarded<float>((size_t)T * q.N, k_guard, NAN));
            buf[i].y = buf[i].own_y.get();
            g.out = tensor(GGX_TYPE_F32, q.N, T, buf[i].y->p());
            if (jm.in_place) g.resid = tensor(GGX_TYPE_F32, q.N, T, buf[i].y->p());
        }
        g.epi = jm.epi;
        g.rope = jm.rope;
        g.pair = jm.pair;
        g.is_gate = jm.is_gate;
    }
    // the attention's result, and the keys before pos: random rows earlier steps would have written
    Guarded<float> attn_out(attn ? (size_t)H * hd : 1, k_guard, NAN);
    std::vector<std::vector<uint16_t>> old_rows(n_mat);
    if (attn) {
        if (job.cache_type != GGX_TYPE_F16 || n_mat != 3 || !job.mats[0].rope || !job.mats[1].cache || !job.mats[2].cache || H % Hkv) {
            fprintf(stderr, "emu-qgemv: job %s: attention needs q (RoPE), k and v into f16 caches, H %% Hkv == 0\n", job.what);
            exit(2);
        }
        // the rows before pos as large as the ones the GEMV writes at pos (uniform, the same rms),
        // and a scale that spreads the scores over a few units: every key then has its weight, and a
        // key left out shows (the GEMV's q and k are far larger than 1: with 1 / sqrt(hd) the key at
        // pos would take all the weight)
        auto rms = [](const std::vector<double> & y) { double s = 0; for (double t : y) s += t * t; return std::sqrt(s / y.size()); };
        for (int i = 1; i < 3; i++) {
            const double r = rms(ref[i].y) * std::sqrt(3.0);
            old_rows[i].resize((size_t)pos[0] * job.mats[i].mat->N);
            for (auto & h : old_rows[i]) h = ggx_f32_to_f16((float)(d(rng) * r));
        }
        attn_scale = (float)(2.0 / (rms(ref[0].y) * rms(ref[1].y) * std::sqrt((double)hd)));
        gj.attn.out = tensor(GGX_TYPE_F32, hd, H, attn_out.p());
        gj.attn.q = 0;
        gj.attn.k = 1;
        gj.attn.v = 2;
        gj.attn.H = H;
        gj.attn.Hkv = Hkv;
        gj.attn.scale = attn_scale;
        gj.attn.bound = job.attn_bound;
    }
    gemv_args a = {};
    // the uneven variant: one-row jobs whose K-slices pair up run their first half longer (2 fine
    // slices per group more on the paired tables, else 1) and their second half shorter
    const int dm = GGX_QGEMV_UNEVEN ? emu::uneven_dm(gj, job.m, pairs, pairs ? 2 : 1) : 0;
    if (dm) g_uneven_jobs++;
    const emu::args_layout lay = emu::fill_args(gj, job.m, pairs, (char *)partial.p(), rowsbuf.p(), a, dm);
    ggx_context_free(gctx);
    if (lay.partial_bytes > part_bound * sizeof(float)) { fprintf(stderr, "emu-qgemv: job %s: partials past the scratch\n", job.what); exit(2); }
    const int blocks = lay.blocks;
    std::vector<int> counters(lay.counters + 2, 0);
    a.rope_table = job.rope_table ? rope_table.data() : nullptr;
    a.counters = counters.data() + 1;
    a.prefetch = 2;
    a.evict_first = 1.0f;
    std::vector<std::vector<float>> norm_tables(n_mat);
    if (job.norm == 3)   // norm-table.cu: the weights in q_perm order
        for (int i = 0; i < n_mat; i++) {
            norm_tables[i].resize(K);
            for (int k = 0; k < K; k++) norm_tables[i][k] = norm_w[a.m[i].perm ? a.m[i].perm[k] : k];
            a.m[i].norm_wp = norm_tables[i].data();
        }
    a.flags = emu::k_flag_red;                     // (one-row ADD jobs in place add their K-slices' sums into y)
    if (idx % 2) a.flags |= emu::k_flag_one_deep;  // odd jobs: one piece per thread in flight (one-row only)
    // whether matrix i's sums are added into y by every K-slice (no fixed order: no bit-identity
    // across block orders, and each element changed by up to one block per K-slice)
    auto reduced = [&](int i) { return T == 1 && (((a.flags & emu::k_flag_red) && a.m[i].in_place) || a.m[i].rows); };
    const size_t smem = emu::smem_bytes(T, job.m + dm, lay.rope, gj.attn.bound, hd);
    if (smem > (size_t)emu::k_max_smem) { fprintf(stderr, "emu-qgemv: job %s needs %zu bytes of shared memory\n", job.what, smem); exit(2); }
    constexpr size_t smem_guard = 4096;

    // which block owns what: block -> (matrix, tile, slice); the uneven variant's grid is (tiles,
    // K-slices), its block b at (b % a.tiles, b / a.tiles): the order the GPU starts them in
    auto owner = [&](int b, int & mi, int & tile, int & slice) {
        mi = 0;
#if GGX_QGEMV_UNEVEN
        slice = b / a.tiles;
        const int g = b - slice * a.tiles;
        for (int i = 1; i < n_mat; i++) if (g >= a.m[i].block0) mi = i;
        tile = g - a.m[mi].block0;
#else
        for (int i = 1; i < n_mat; i++) if (b >= a.m[i].block0) mi = i;
        const int local = b - a.m[mi].block0;
        tile = local / a.m[mi].n_slices;
        slice = local - tile * a.m[mi].n_slices;
#endif
    };
    std::vector<std::vector<float>> first_out(n_mat);
    std::vector<float> first_attn;
    int n_bad = 0;
    double worst = 0;
    for (int order = 0; order < 3; order++) {
        for (int i = 0; i < n_mat; i++) {   // fresh outputs, partials and counters
            if (buf[i].own_y) std::fill(buf[i].own_y->buf.begin(), buf[i].own_y->buf.end(), NAN);
            if (job.mats[i].in_place) std::copy(resid[i].begin(), resid[i].end(), buf[i].own_y->p());
            if (buf[i].cache16) {
                std::fill(buf[i].cache16->buf.begin(), buf[i].cache16->buf.end(), 0xffff);
                std::copy(old_rows[i].begin(), old_rows[i].end(), buf[i].cache16->p());
            }
            if (buf[i].cache32) std::fill(buf[i].cache32->buf.begin(), buf[i].cache32->buf.end(), NAN);
        }
        std::fill(partial.buf.begin(), partial.buf.end(), partial_nan());
        rows_fresh();
        std::fill(attn_out.buf.begin(), attn_out.buf.end(), NAN);
        std::vector<int> attn_writes(attn_out.n, 0);
        g_word_reads.clear();
        for (int i = 0; i < n_mat; i++) {
            const Mat & q = *job.mats[i].mat;
            const size_t n = q.qw.size() / 4;
            g_word_reads.push_back({(const uint4 *)q.qw.data(), n, std::vector<int>(n, 0)});
        }
        std::fill(counters.begin(), counters.end(), 0);
        std::vector<int> bl(blocks);
        for (int b = 0; b < blocks; b++) bl[b] = b;
        if (order == 1) std::reverse(bl.begin(), bl.end());
        if (order == 2) { std::mt19937 r(977 + idx); std::shuffle(bl.begin(), bl.end(), r); }
        // output element -> blocks that changed it
        std::vector<std::vector<int>> writes(n_mat);
        for (int i = 0; i < n_mat; i++) writes[i].assign(job.mats[i].cache ? (size_t)cache_rows * a.m[i].N : (size_t)T * a.m[i].N, 0);
        g_args = a;
        NTH = 128 * W;
        switch (T) {
            case 1: g_thread_body = thread_body<1>; break;
            case 2: g_thread_body = thread_body<2>; break;
            case 3: g_thread_body = thread_body<3>; break;
            case 4: g_thread_body = thread_body<4>; break;
            case 5: g_thread_body = thread_body<5>; break;
            case 6: g_thread_body = thread_body<6>; break;
            case 7: g_thread_body = thread_body<7>; break;
            default: g_thread_body = thread_body<8>; break;
        }
        BlockSmem sm(smem + smem_guard);
        for (int b : bl) {
            int mi, tile, slice;
            owner(b, mi, tile, slice);
            std::vector<std::vector<float>> out0(n_mat);
            std::vector<std::vector<uint16_t>> c16(n_mat);
            for (int i = 0; i < n_mat; i++) {
                if (buf[i].own_y) out0[i].assign(buf[i].own_y->p(), buf[i].own_y->p() + buf[i].own_y->n);
                if (buf[i].cache16) c16[i].assign(buf[i].cache16->p(), buf[i].cache16->p() + buf[i].cache16->n);
                if (buf[i].cache32) out0[i].assign(buf[i].cache32->p(), buf[i].cache32->p() + buf[i].cache32->n);
            }
            const std::vector<float> part0(partial.p(), partial.p() + partial.n);
            const std::vector<float> rows0(rowsbuf.p(), rowsbuf.p() + rowsbuf.n);
            const std::vector<float> attn0(attn_out.p(), attn_out.p() + attn_out.n);
#if GGX_QGEMV_UNEVEN
            run_block(b % a.tiles, b / a.tiles);
#else
            run_block(b, 0);
#endif
            for (size_t e = 0; e < attn0.size(); e++) attn_writes[e] += !same_bits(attn0[e], attn_out.p()[e]);
            for (size_t e = smem; e < smem + smem_guard; e++)
                if (g_smem[e] != 0xff) { CHECKX(false, "shared memory byte %zu written past the launch's %zu", e, smem); break; }
            // a tile's columns: [tile * 512, + 512); GLU partners write the y they share
            const int c0 = tile * k_tile, c1 = c0 + k_tile;
            for (int i = 0; i < n_mat; i++) {
                const int N = a.m[i].N;
                const bool mine_y = i == mi || (job.mats[mi].epi == GGX_QGEMV_GLU && buf[i].y == buf[mi].y && !job.mats[i].cache);
                auto col_ok = [&](size_t e) -> const char * {
                    const int col = (int)(e % N);
                    if (!mine_y) return "another matrix's output";
                    return col >= c0 && col < c1 ? nullptr : "a column of another tile";
                };
                auto count = [&](const std::vector<float> & before, const float * after, const char * name) {
                    for (size_t e = 0; e < before.size(); e++)
                        if (!same_bits(before[e], after[e])) writes[i][e]++;
                    check_writes(before, after, col_ok, name);
                };
                if (buf[i].own_y) count(out0[i], buf[i].own_y->p(), "y");
                if (buf[i].rows) {
                    const std::vector<float> r0(rows0.begin() + rows_off[i], rows0.begin() + rows_off[i] + N);
                    count(r0, buf[i].rows, "rows");
                }
                if (buf[i].cache32) count(out0[i], buf[i].cache32->p(), "cache");
                if (buf[i].cache16) {
                    for (size_t e = 0; e < c16[i].size(); e++)
                        if (c16[i][e] != buf[i].cache16->p()[e]) {
                            writes[i][e]++;
                            const char * why = col_ok(e);
                            CHECKX(why == nullptr, "block wrote cache element %zu: %s", e, why ? why : "");
                        }
                }
            }
            // partials: [n_slices][T][Np] of each matrix, where fill_args put them
            check_writes(part0, partial.p(), [&](size_t e) -> const char * {
                if (attn && e >= (size_t)(a.attn.state - partial.p()) && e < (size_t)(a.attn.state - partial.p()) + (size_t)H * (hd + 2)) {
                    // part A's state: by a q tile's block, for the tile's heads
                    const int h = (int)((e - (size_t)(a.attn.state - partial.p())) / (hd + 2));
                    if (mi != gj.attn.q) return "the attention state, by a k or v block";
                    return h * hd >= c0 && h * hd < c1 ? nullptr : "the attention state of another tile's head";
                }
                for (int i = 0; i < n_mat; i++) {
                    const gemv_mat & M = a.m[i];
                    const size_t o = (size_t)(M.partial - partial.p()), n = (size_t)M.n_slices * T * M.Np;
                    if (e < o || e >= o + n) continue;
                    if (i != mi) return "another matrix's partials";
                    const int s = (int)((e - o) / ((size_t)T * M.Np)), col = (int)((e - o) % M.Np);
                    return s != slice ? "another slice's partial" : col < c0 || col >= c1 ? "another tile's partial" : nullptr;
                }
                return "no matrix's partials (alignment padding)";
            }, "partial");
            // the rows: only inside a matrix's N floats (its padding stays NaN)
            check_writes(rows0, rowsbuf.p(), [&](size_t e) -> const char * {
                for (int i = 0; i < n_mat; i++)
                    if (rows_off[i] >= 0 && e >= (size_t)rows_off[i] && e < (size_t)rows_off[i] + a.m[i].N) return nullptr;
                return "the rows' padding";
            }, "rows");
        }
        rowsbuf.check_guards("rows", NAN);
        for (int c = 0; c < (int)counters.size(); c++) CHECKX(counters[c] == 0, "tile counter %d is %d after the grid", c - 1, counters[c]);
        partial.check_guards("partial", partial_nan());
        for (int i = 0; i < n_mat; i++) {
            size_t not_once = 0;
            for (int c : g_word_reads[i].count) not_once += c != 1;
            CHECKX(not_once == 0, "matrix %d: %zu of its %zu 16-byte weight chunks not read exactly once", i, not_once, g_word_reads[i].n);
        }
        // results: each element written once (the GLU output once in all), within the bound, the same bits in every order
        for (int i = 0; i < n_mat; i++) {
            const JobMat & jm = job.mats[i];
            const int N = a.m[i].N;
            if (buf[i].own_y) buf[i].own_y->check_guards("y", NAN);
            if (buf[i].cache32) buf[i].cache32->check_guards("cache", NAN);
            if (buf[i].cache16) buf[i].cache16->check_guards("cache", 0xffff);
            std::vector<float> got((size_t)T * N);
            std::vector<int> nw((size_t)T * N);
            for (int t = 0; t < T; t++)
                for (int n = 0; n < N; n++) {
                    const size_t o = (size_t)t * N + n, e = jm.cache ? (size_t)pos[t] * N + n : o;
                    nw[o] = writes[i][e];
                    if (jm.epi == GGX_QGEMV_GLU && jm.pair >= 0) nw[o] += writes[jm.pair][e];
                    got[o] = buf[i].cache16 ? ggx_f16_to_f32(buf[i].cache16->p()[e]) : buf[i].cache32 ? buf[i].cache32->p()[e]
                           : buf[i].rows    ? buf[i].rows[e] : buf[i].y->p()[e];
                }
            size_t not_once = 0, stray = 0;
            for (int x2 : nw) not_once += reduced(i) ? x2 < 1 || x2 > a.m[i].n_slices : x2 != 1;
            for (size_t e = 0; e < writes[i].size(); e++)
                if (jm.cache && writes[i][e] && (std::find(pos.begin(), pos.end(), (int)(e / N)) == pos.end())) stray++;
            CHECKX(not_once == 0, "matrix %d: %zu output elements not written by exactly one block (reduced: by 1 to %d)", i, not_once,
                   a.m[i].n_slices);
            CHECKX(stray == 0, "matrix %d: %zu cache elements written outside the rows at pos", i, stray);
            size_t bad = 0, wi = 0;
            double ratio = -1;
            for (size_t e = 0; e < got.size(); e++) {
                const double err = std::fabs((double)got[e] - ref[i].y[e]);
                const double r = std::isnan(err) ? 1e30 : err / ref[i].bound[e];
                if (!(r <= 1.0)) bad++;
                if (r > ratio) { ratio = r; wi = e; }
            }
            if (order == 0) first_out[i] = got;
            else if (!reduced(i)) CHECKX(memcmp(first_out[i].data(), got.data(), got.size() * sizeof(float)) == 0,
                        "matrix %d: order %d gives other bits than the forward order", i, order);
            worst = std::max(worst, ratio);
            printf("%3d %-34s T %d m %2d%s %-6s mat %d K %5d N %5d tiles %d slices %2d blocks %3d order %d: bad %zu/%zu worst "
                   "err/bound %.3f (element %zu: %.6g vs %.6g)\n",
                   idx, job.what, T, job.m, dm ? (dm == 1 ? " +-1" : " +-2") : "", pairs ? "paired" : "single", i, K, N, a.m[i].n_tiles,
                   a.m[i].n_slices, blocks, order,
                   bad, got.size(), ratio, wi, got[wi], ref[i].y[wi]);
            if (bad) n_bad++;
        }
        if (attn) n_bad += check_attention(job, idx, order, pos[0], H, Hkv, attn_scale, buf[0].own_y->p(), buf[1].cache16->p(),
                                           buf[2].cache16->p(), attn_out, attn_writes, first_attn);
        after_run(n_bad > 0);
    }
    return n_bad;
}

int main(int argc, char ** argv) {
    const int only = argc > 1 ? atoi(argv[1]) : -1;
    // layouts (bits, rows): the synthetic models' and mixed ones whose groups start off the pair grid
    auto uniform = [](int bits, int rows, int K) { return Layout(K / rows, {bits, rows}); };
    const Layout l4 = uniform(4, 128, 1024), l4_2k = uniform(4, 128, 2048);
    const Layout mixed = {{8, 32}, {6, 64}, {5, 32}, {4, 128}, {4, 96}, {3, 224}, {2, 48}, {2, 400}};   // K 1024; 2-bit pieces of 16 rows
    const Layout l25 = {{6, 32}, {6, 32}, {6, 32}, {6, 32}, {6, 32}, {6, 32}, {6, 32}, {3, 64}, {3, 64}, {3, 64}, {3, 64},
                        {2, 64}, {2, 64}, {2, 64}, {2, 64}, {2, 64}, {2, 64}, {2, 64}, {2, 64}, {2, 32}};   // 6/3/2 g32,64,64 at K 1024
    const Layout l8_4 = {{8, 32}, {8, 32}, {8, 32}, {8, 32}, {8, 32}, {8, 32}, {8, 32}, {4, 128}, {4, 128}, {4, 128}, {4, 128}, {4, 128}, {4, 128}, {4, 32}};   // 8/4 g32,128 at K 1024 (the 4-bit groups start at an odd fine slice)
    const Layout l5 = uniform(5, 128, 1024), l6 = uniform(6, 128, 1024), l8 = uniform(8, 128, 1024), l3 = uniform(3, 128, 1024);
    static std::vector<Mat> mats;
    mats.reserve(48);
    auto mk = [&](int K, int N, const Layout & L, bool act, uint64_t seed) -> const Mat * {
        mats.push_back(make_mat(K, N, L, act, seed));
        bind(mats.back());
        return &mats.back();
    };
    const Mat * m4 = mk(1024, 1024, l4, true, 1), * m4_800 = mk(1024, 800, l4, false, 2), * m4_200 = mk(1024, 200, l4, true, 3);
    const Mat * mmix = mk(1024, 1024, mixed, true, 4), * m25 = mk(1024, 544, l25, true, 5), * m84 = mk(1024, 1024, l8_4, true, 6);
    const Mat * m5 = mk(1024, 512, l5, false, 7), * m6 = mk(1024, 512, l6, true, 8), * m8 = mk(1024, 512, l8, true, 9), * m3 = mk(1024, 512, l3, true, 10);
    const Mat * q = mk(1024, 1024, l4, true, 11), * k = mk(1024, 256, l4, true, 12), * v = mk(1024, 256, l4, true, 13);
    const Mat * qm = mk(1024, 512, mixed, true, 14), * km = mk(1024, 128, l25, true, 15), * vm = mk(1024, 128, l25, true, 16);
    const Mat * gate = mk(2048, 512, l4_2k, true, 17), * up = mk(2048, 512, l4_2k, true, 18);
    std::vector<Job> jobs;
    auto one = [](const Mat * m) { JobMat j; j.mat = m; return std::vector<JobMat>{j}; };
    // plain one-row products: every width, single and paired tables, odd and even m
    for (int m : {1, 2, 3, 4, 8}) jobs.push_back({"4 g128 store", 1, m, true, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1.0f, one(m4)});
    for (int m : {1, 2, 5}) jobs.push_back({"mixed 8..2 (2-bit 16-row pieces)", 1, m, true, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1.0f, one(mmix)});
    for (int m : {2, 4}) jobs.push_back({"6/3/2 g32,64,64 (2.5 bpw)", 1, m, true, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1.0f, one(m25)});
    for (int m : {2, 3}) jobs.push_back({"8/4 g32,128 (4.25 bpw)", 1, m, true, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1.0f, one(m84)});
    jobs.push_back({"4 g128, paired tables off", 1, 2, false, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1.0f, one(m4)});
    for (const Mat * m : {m3, m5, m6, m8}) jobs.push_back({"one width", 1, 2, true, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1.0f, one(m)});
    jobs.push_back({"N 800 (a part tile), one K-slice", 1, 8, true, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1.0f, one(m4_800)});
    jobs.push_back({"N 200 (Np 224)", 1, 2, true, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1.0f, one(m4_200)});
    jobs.push_back({"x tiny (1e-4)", 1, 2, true, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1e-4f, one(m4)});
    jobs.push_back({"x large (1e4)", 1, 2, true, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1e4f, one(m4)});
    // more rows: W = 4, 2, 1 warp groups per block
    for (int T : {2, 3, 5, 8}) jobs.push_back({"mixed, rows", T, 2, true, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1.0f, one(mmix)});
    // bias and residual
    {
        Job j{"bias + residual add", 1, 2, true, 0, 0, GGX_ROPE_NEOX, 0, false, false, GGX_ACT_SILU, GGX_TYPE_F16, 1.0f, one(m84)};
        j.mats[0].bias = true;
        j.mats[0].epi = GGX_QGEMV_ADD;
        jobs.push_back(j);
        j.T = 4;
        j.what = "bias + residual add, rows";
        jobs.push_back(j);
        // in place, as o and down run: one row reduces its K-slices' sums into y (GGX_QGEMV_RED),
        // more rows take the tile's last block
        j.mats[0].in_place = true;
        j.what = "bias + residual add in place, rows";
        jobs.push_back(j);
        j.T = 1;
        j.what = "bias + residual add in place (reduced)";
        jobs.push_back(j);
        j.m = 1;
        j.mats[0].bias = false;
        j.what = "residual add in place (reduced), m 1";
        jobs.push_back(j);
    }
    // q/k/v: norm in the prologue, RoPE on q and k, k and v into the cache rows at pos
    auto qkv = [&](const char * what, const Mat * qq, const Mat * kk, const Mat * vv, int T, int m, int norm, int mode, int n_rot,
                   bool table, bool fdiv, int cache_type, bool bias) {
        Job j{what, T, m, true, norm, 64, mode, n_rot, table, fdiv, GGX_ACT_SILU, cache_type, 1.0f, {}};
        for (const Mat * mm : {qq, kk, vv}) { JobMat jm; jm.mat = mm; jm.bias = bias; j.mats.push_back(jm); }
        j.mats[0].rope = j.mats[1].rope = true;
        j.mats[1].cache = j.mats[2].cache = true;
        return j;
    };
    jobs.push_back(qkv("q/k/v norm rope(neox) f16 cache", q, k, v, 1, 2, 1, GGX_ROPE_NEOX, 64, false, false, GGX_TYPE_F16, false));
    jobs.push_back(qkv("q/k/v norm table, rope table", q, k, v, 1, 4, 3, GGX_ROPE_NEOX, 64, true, false, GGX_TYPE_F16, false));
    jobs.push_back(qkv("q/k/v f16 norm, rope(interleave) f32", q, k, v, 1, 3, 2, GGX_ROPE_INTERLEAVE, 64, false, true, GGX_TYPE_F32, true));
    jobs.push_back(qkv("q/k/v mixed, partial rotary 32", qm, km, vm, 1, 2, 1, GGX_ROPE_NEOX, 32, false, true, GGX_TYPE_F16, true));
    jobs.push_back(qkv("q/k/v rows", q, k, v, 3, 2, 1, GGX_ROPE_NEOX, 64, true, false, GGX_TYPE_F16, false));
    jobs.push_back(qkv("q/k/v 8 rows", qm, km, vm, 8, 1, 3, GGX_ROPE_INTERLEAVE, 64, false, false, GGX_TYPE_F16, true));
    // q/k/v adding into the q/k/v rows (reduced; each K-slice rotates its own sums)
    auto qkv_rows = [&](Job j) {
        for (JobMat & jm : j.mats) { jm.rows = true; jm.cache = false; }
        return j;
    };
    jobs.push_back(qkv_rows(qkv("q/k/v rows (reduced), rope table", q, k, v, 1, 2, 3, GGX_ROPE_NEOX, 64, true, false, GGX_TYPE_F16, false)));
    // the one-row table values held in registers and stored before the wait, with interleaved
    // pairs and a partial rotary dimension; and the table with two rows (stored as it loads)
    jobs.push_back(qkv("q/k/v norm table, rope table (interleave, rotary 32)", qm, km, vm, 1, 2, 3, GGX_ROPE_INTERLEAVE, 32, true, false, GGX_TYPE_F16, true));
    jobs.push_back(qkv("q/k/v rows, rope table", q, k, v, 2, 2, 1, GGX_ROPE_NEOX, 64, true, false, GGX_TYPE_F16, false));
    jobs.push_back(qkv_rows(qkv("q/k/v rows (reduced), interleave, bias", q, k, v, 1, 1, 1, GGX_ROPE_INTERLEAVE, 64, false, true, GGX_TYPE_F16, true)));
    jobs.push_back(qkv_rows(qkv("q/k/v rows (reduced), mixed, rotary 32", qm, km, vm, 1, 3, 2, GGX_ROPE_NEOX, 32, false, true, GGX_TYPE_F16, true)));
    // q/k/v with the attention in the tail: one group per q tile (hd 128, G 4), two per tile (hd 64),
    // groups across two q tiles (G 6 and 8), one KV head per group of one (MHA); no keys before pos,
    // two rounds of key loads (pos past 8 x 32), and pos past the bound (the attention kernel's turn)
    const Mat * q1536 = mk(1024, 1536, l4, true, 19), * q2048 = mk(1024, 2048, l4, true, 20);
    const Mat * q512 = mk(1024, 512, l4, true, 21), * k512 = mk(1024, 512, l4, true, 22), * v512 = mk(1024, 512, mixed, true, 23);
    auto qkv_attn = [&](const char * what, const Mat * qq, const Mat * kk, const Mat * vv, int hd, int m, int pos0, int bound) {
        Job j = qkv(what, qq, kk, vv, 1, m, 3, GGX_ROPE_NEOX, hd, true, false, GGX_TYPE_F16, false);
        j.head_dim = hd;
        j.attn_bound = bound;
        j.pos0 = pos0;
        return j;
    };
    jobs.push_back(qkv_attn("attn tail hd 128, G 4", q, k, v, 128, 2, 5, 256));
    jobs.push_back(qkv_attn("attn tail, no keys before pos", q, k, v, 128, 2, 0, 256));
    jobs.push_back(qkv_attn("attn tail, 300 keys (two rounds)", q, k, v, 128, 4, 299, 512));
    jobs.push_back(qkv_attn("attn tail hd 64, G 4 (2 groups a tile)", q, k, v, 64, 2, 37, 256));
    jobs.push_back(qkv_attn("attn tail hd 128, G 6 (across tiles)", q1536, k, v, 128, 3, 70, 256));
    jobs.push_back(qkv_attn("attn tail hd 128, G 8 (across tiles)", q2048, k, v, 128, 2, 130, 256));
    jobs.push_back(qkv_attn("attn tail hd 64, MHA (8 KV heads a tile)", q512, k512, v512, 64, 1, 20, 256));
    jobs.push_back(qkv_attn("attn tail, pos past the bound", q, k, v, 128, 2, 20, 16));
    // gate/up with GLU
    auto glu = [&](const char * what, int T, int m, int act, int norm) {
        Job j{what, T, m, true, norm, 0, GGX_ROPE_NEOX, 0, false, false, act, GGX_TYPE_F16, 1.0f, {}};
        JobMat g, u;
        g.mat = gate; g.epi = GGX_QGEMV_GLU; g.pair = 1; g.is_gate = true;
        u.mat = up; u.epi = GGX_QGEMV_GLU; u.pair = 0;
        j.mats = {g, u};
        return j;
    };
    jobs.push_back(glu("gate/up silu, norm", 1, 2, GGX_ACT_SILU, 1));
    jobs.push_back(glu("gate/up gelu", 1, 3, GGX_ACT_GELU, 0));
    jobs.push_back(glu("gate/up silu, rows", 2, 4, GGX_ACT_SILU, 3));
    jobs.push_back(glu("gate/up silu, 6 rows", 6, 2, GGX_ACT_SILU, 1));

    int n_fail = 0, n_runs = 0;
    for (int i = 0; i < (int)jobs.size(); i++) {
        if (only >= 0 && i != only) continue;
        n_fail += run_job(jobs[i], i) > 0;
        n_runs++;
    }
    // the variant's walk across groups must have been reached (in the paired jobs of the mixed layouts)
    CHECKX(!GGX_QGEMV_PAIR_GROUPS || g_joined_across > 0, "the pairgroups build made no piece across groups");
    CHECKX(!GGX_QGEMV_UNEVEN || g_uneven_jobs > 0, "the uneven build ran no job with uneven K-slices");
    printf("qgemv%s: jobs %d (3 block orders each), paired pieces across groups %ld, jobs with uneven K-slices %ld; failed jobs %d, check errors %ld\n",
           GGX_QGEMV_PAIR_GROUPS ? " (pairgroups variant)" : GGX_QGEMV_COMPACT_HALVES ? " (compact variant)" : GGX_QGEMV_MMA4 ? " (mma4 variant)"
           : GGX_QGEMV_UNEVEN ? " (uneven variant)" : "",
           n_runs, g_joined_across, g_uneven_jobs, n_fail, g_errors);
    return n_fail || g_errors;
}
