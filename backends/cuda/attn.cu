// Attention kernels; see attn.cuh.
//
// k_attn_split (decode, and the fallback for any T): grid (Hkv, n_splits, T), 128 threads. The
// block owns keys [s*chunk, (s+1)*chunk) and walks them in tiles of 128:
//   scores: one key per thread, the whole K row read with 16-byte loads and dotted with the G
//           query heads of this KV head (shared memory, pre-scaled); softcap; causal/window mask.
//   softmax: online (running max m, running sum l per head), p kept in shared memory.
//   values: thread = (key lane, 8-dim group); G x 8 accumulators per thread, key lanes summed
//           once at the end.
// With one split the block normalises and writes the output; otherwise it writes (m, l, acc) and
// k_attn_combine merges the splits.
// k_attn_prefill (T > 8, f16 cache): tensor-core tiles, described at the kernel.
#include "attn.cuh"

#include <algorithm>

#if !defined(GGX_USE_HIP)
#include <mma.h>
#define GGX_ATTN_WMMA 1
#endif  // !GGX_USE_HIP

namespace {

constexpr int k_threads = 128;
constexpr int k_tile = k_threads;             // keys per tile: one per thread in the score phase
constexpr int k_max_g = 8;                    // query heads per KV head
constexpr int k_max_hd = 256;

struct attn_args {
    const float * q;       // [T][H][hd]
    const void * k;        // [C][Hkv][hd]
    const void * v;
    const int32_t * pos;   // [T]
    float * out;           // [T][H][hd]
    float * part;          // [T][H][n_splits][hd + 2]   (m, l, acc...)
    int hd, H, Hkv, C, T, chunk, n_splits;
    float scale, softcap;
    int window;
    int non_causal;       // every query sees keys 0..pos[T-1]
};

// 8 consecutive cache values as floats (one 16-byte load for f16/bf16, two for f32).
__device__ __forceinline__ void load8(const half * p, float (&v)[8]) {
    const uint4 u = *(const uint4 *)p;
    const half2 * h = (const half2 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) { const float2 f = __half22float2(h[i]); v[2 * i] = f.x; v[2 * i + 1] = f.y; }
}
__device__ __forceinline__ void load8(const nv_bfloat16 * p, float (&v)[8]) {
    const uint4 u = *(const uint4 *)p;
    const nv_bfloat16 * b = (const nv_bfloat16 *)&u;
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = __bfloat162float(b[i]);
}
__device__ __forceinline__ void load8(const float * p, float (&v)[8]) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

// Scores: one key per thread (a whole K row with 16-byte loads, dotted with the G queries held
// in shared memory). Values: thread = (key lane kl, 8-dim group dg); each key lane sums its keys
// into G x 8 registers, and the key lanes are added up once at the end.
template <typename TC>
__global__ void __launch_bounds__(k_threads) k_attn_split(attn_args a) {
    extern __shared__ float sm[];
    const int G = a.H / a.Hkv;
    const int kvh = blockIdx.x, split = blockIdx.y, t = blockIdx.z;
    float * qs = sm;                        // [G][hd]
    float * ps = qs + G * a.hd;             // [G][k_tile]
    float * ms = ps + G * k_tile;           // [G] running max
    float * ls = ms + G;                    // [G] running sum
    float * al = ls + G;                    // [G] rescale of this tile
    float * red = al + G;                   // [KL][G][hd] key-lane partial outputs
    const TC * K = (const TC *)a.k;
    const TC * V = (const TC *)a.v;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int DG = a.hd / 8, KL = k_threads / DG;
    const int kl = tid / DG, dg = tid % DG;

    const int p_t = a.pos[t];
    const int p_vis = a.non_causal ? a.pos[a.T - 1] : p_t;   // last visible key
    int k_lo = split * a.chunk;
    const int k_hi = min(min(a.C, k_lo + a.chunk), p_vis + 1);
    if (a.window > 0) k_lo = max(k_lo, p_t - a.window + 1);

    for (int i = tid; i < G * a.hd; i += k_threads) {
        const int g = i / a.hd, d = i % a.hd;
        qs[i] = a.q[((size_t)t * a.H + kvh * G + g) * a.hd + d] * a.scale;
    }
    if (tid < G) { ms[tid] = -INFINITY; ls[tid] = 0.0f; }
    float acc[k_max_g][8];
#pragma unroll
    for (int g = 0; g < k_max_g; g++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[g][e] = 0.0f;
    __syncthreads();

    for (int j0 = k_lo; j0 < k_hi; j0 += k_tile) {
        const int nj = min(k_tile, k_hi - j0);
        {   // scores, one key per thread
            const int jj = tid;
            float dot[k_max_g];
#pragma unroll
            for (int g = 0; g < k_max_g; g++) dot[g] = 0.0f;
            if (jj < nj) {
                const TC * kr = K + ((size_t)(j0 + jj) * a.Hkv + kvh) * a.hd;
                for (int d = 0; d < a.hd; d += 8) {
                    float kv[8];
                    load8(kr + d, kv);
#pragma unroll
                    for (int g = 0; g < k_max_g; g++) {
                        if (g >= G) break;
                        const float * qg = qs + g * a.hd + d;
#pragma unroll
                        for (int e = 0; e < 8; e++) dot[g] = fmaf(qg[e], kv[e], dot[g]);
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < k_max_g; g++) {
                if (g >= G) break;
                float sv = dot[g];
                if (a.softcap > 0.0f) sv = a.softcap * tanhf(sv / a.softcap);
                ps[g * k_tile + jj] = jj < nj ? sv : -INFINITY;
            }
        }
        __syncthreads();
        // online softmax, one warp per head
        for (int g = warp; g < G; g += k_threads / 32) {
            float m = -INFINITY;
            for (int jj = lane; jj < k_tile; jj += 32) m = fmaxf(m, ps[g * k_tile + jj]);
            m = ggx_warp_max(m);
            const float m_old = ms[g], m_new = fmaxf(m_old, m);
            float l = 0.0f;
            for (int jj = lane; jj < k_tile; jj += 32) {
                const float sv = ps[g * k_tile + jj];
                const float p = sv == -INFINITY ? 0.0f : __expf(sv - m_new);
                ps[g * k_tile + jj] = p;
                l += p;
            }
            l = ggx_warp_sum(l);
            if (lane == 0) {
                const float r = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
                al[g] = r;
                ls[g] = ls[g] * r + l;
                ms[g] = m_new;
            }
        }
        __syncthreads();
        if (kl < KL) {
#pragma unroll
            for (int g = 0; g < k_max_g; g++) {
                if (g >= G) break;
                const float r = al[g];
#pragma unroll
                for (int e = 0; e < 8; e++) acc[g][e] *= r;
            }
            for (int jj = kl; jj < nj; jj += KL) {
                float vv[8];
                load8(V + ((size_t)(j0 + jj) * a.Hkv + kvh) * a.hd + dg * 8, vv);
#pragma unroll
                for (int g = 0; g < k_max_g; g++) {
                    if (g >= G) break;
                    const float p = ps[g * k_tile + jj];
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[g][e] = fmaf(p, vv[e], acc[g][e]);
                }
            }
        }
        __syncthreads();
    }
    // add up the key lanes
    if (kl < KL)
#pragma unroll
        for (int g = 0; g < k_max_g; g++) {
            if (g >= G) break;
#pragma unroll
            for (int e = 0; e < 8; e++) red[((size_t)kl * G + g) * a.hd + dg * 8 + e] = acc[g][e];
        }
    __syncthreads();
    const int stride = a.hd + 2;
    for (int o = tid; o < G * a.hd; o += k_threads) {
        const int g = o / a.hd, d = o % a.hd;
        float r = 0.0f;
        for (int k = 0; k < KL; k++) r += red[((size_t)k * G + g) * a.hd + d];
        if (a.n_splits == 1) {
            const float l = ls[g];
            a.out[((size_t)t * a.H + kvh * G + g) * a.hd + d] = l > 0.0f ? r / l : 0.0f;
        } else {
            float * pp = a.part + (((size_t)t * a.H + kvh * G + g) * a.n_splits + split) * stride;
            pp[2 + d] = r;
            if (d == 0) { pp[0] = ms[g]; pp[1] = ls[g]; }
        }
    }
}

// One block per (head, token): out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
__global__ void k_attn_combine(attn_args a) {
    const int h = blockIdx.x, t = blockIdx.y;
    const int stride = a.hd + 2;
    const float * pp = a.part + ((size_t)t * a.H + h) * a.n_splits * stride;
    float M = -INFINITY;
    for (int s = 0; s < a.n_splits; s++) M = fmaxf(M, pp[s * stride]);
    float L = 0.0f;
    for (int s = 0; s < a.n_splits; s++) {
        const float m = pp[s * stride];
        if (m != -INFINITY) L += expf(m - M) * pp[s * stride + 1];
    }
    for (int d = threadIdx.x; d < a.hd; d += blockDim.x) {
        float r = 0.0f;
        for (int s = 0; s < a.n_splits; s++) {
            const float m = pp[s * stride];
            if (m != -INFINITY) r += expf(m - M) * pp[s * stride + 2 + d];
        }
        a.out[((size_t)t * a.H + h) * a.hd + d] = L > 0.0f ? r / L : 0.0f;
    }
}

#if defined(GGX_ATTN_WMMA)
// ---- prefill: tensor-core tiles (flash-attention style) ------------------------------------
// Grid (H, ceil(T/64)), 128 threads = 4 warps; f16 caches, hd in {64, 80, 96, 128}. The block
// holds 64 queries of one head (pre-scaled, f16) and walks the key tiles of 64 that any of its
// queries can see (bounds from pos[] in device memory). Warp w owns query rows 16w..16w+15 of
// S = Q K^T (f32 accumulate), its online softmax (2 lanes per row) and the output rows O, which
// live in shared memory as f32 and are updated with P V by tensor cores after each rescale.
// Only the K/V tiles are shared between warps. Keys outside the cache are zero-filled (an
// unwritten cache row could hold NaN, and 0 * NaN would poison the sum).
namespace nw = nvcuda::wmma;
constexpr int fa_bq = 64, fa_bk = 64, fa_threads = 128;

template <int HD> struct fa_layout {
    static constexpr int ldh = HD + 8;        // Q/K/V rows (halves)
    static constexpr int lds = fa_bk + 4;     // S rows (floats)
    static constexpr int ldp = fa_bk + 8;     // P rows (halves)
    static constexpr int ldo = HD + 4;        // O rows (floats)
    static constexpr size_t q_off = 0;
    static constexpr size_t k_off = q_off + sizeof(half) * fa_bq * ldh;
    static constexpr size_t v_off = k_off + sizeof(half) * fa_bk * ldh;
    static constexpr size_t s_off = v_off + sizeof(half) * fa_bk * ldh;
    static constexpr size_t p_off = s_off + sizeof(float) * fa_bq * lds;
    static constexpr size_t o_off = p_off + sizeof(half) * fa_bq * ldp;
    static constexpr size_t r_off = o_off + sizeof(float) * fa_bq * ldo;
    static constexpr size_t bytes = r_off + sizeof(float) * 2 * fa_bq + 2 * sizeof(int);
};

template <int HD>
__global__ void __launch_bounds__(fa_threads) k_attn_prefill(attn_args a) {
    using L = fa_layout<HD>;
    extern __shared__ __align__(128) unsigned char smraw[];
    half * Qs = (half *)(smraw + L::q_off);
    half * Ks = (half *)(smraw + L::k_off);
    half * Vs = (half *)(smraw + L::v_off);
    float * Ss = (float *)(smraw + L::s_off);
    half * Ps = (half *)(smraw + L::p_off);
    float * Os = (float *)(smraw + L::o_off);
    float * row_m = (float *)(smraw + L::r_off);
    float * row_l = row_m + fa_bq;
    int * range = (int *)(row_l + fa_bq);
    const int h = blockIdx.x, q0 = blockIdx.y * fa_bq;
    const int G = a.H / a.Hkv, kvh = h / G;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const half * K = (const half *)a.k;
    const half * V = (const half *)a.v;
    const int p_last = a.pos[a.T - 1];

    for (int i = tid; i < fa_bq * HD; i += fa_threads) {
        const int r = i / HD, d = i % HD, t = q0 + r;
        Qs[r * L::ldh + d] = __float2half_rn(t < a.T ? a.q[((size_t)t * a.H + h) * HD + d] * a.scale : 0.0f);
        Os[r * L::ldo + d] = 0.0f;
    }
    if (tid < fa_bq) { row_m[tid] = -INFINITY; row_l[tid] = 0.0f; }
    if (tid == 0) {
        int hi = 0, lo = 1 << 30;
        for (int r = 0; r < fa_bq && q0 + r < a.T; r++) {
            const int pt = a.pos[q0 + r];
            hi = max(hi, (a.non_causal ? p_last : pt) + 1);
            lo = min(lo, a.window > 0 ? max(0, pt - a.window + 1) : 0);
        }
        range[0] = lo / fa_bk * fa_bk;
        range[1] = min(hi, a.C);
    }
    __syncthreads();
    const int k_begin = range[0], k_end = range[1];

    // this lane's softmax row and column half
    const int my_r = warp * 16 + lane / 2, my_c0 = (lane % 2) * (fa_bk / 2);
    const int my_t = q0 + my_r;
    const int my_hi = my_t < a.T ? (a.non_causal ? p_last : a.pos[my_t]) : -1;   // last visible key
    const int my_lo = (my_t < a.T && a.window > 0) ? a.pos[my_t] - a.window + 1 : 0;

    for (int k0 = k_begin; k0 < k_end; k0 += fa_bk) {
        // K, V tiles: 16-byte loads, rows past the visible range zero-filled
        constexpr int vec_per_row = HD / 8;
        for (int i = tid; i < fa_bk * vec_per_row; i += fa_threads) {
            const int r = i / vec_per_row, c = (i % vec_per_row) * 8, j = k0 + r;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
            if (j < k_end) {
                const size_t off = ((size_t)j * a.Hkv + kvh) * HD + c;
                kv = *(const uint4 *)(K + off);
                vv = *(const uint4 *)(V + off);
            }
            *(uint4 *)(Ks + r * L::ldh + c) = kv;
            *(uint4 *)(Vs + r * L::ldh + c) = vv;
        }
        __syncthreads();
        // S = Q K^T for this warp's 16 rows
        {
            nw::fragment<nw::accumulator, 16, 16, 16, float> acc[fa_bk / 16];
#pragma unroll
            for (int nf = 0; nf < fa_bk / 16; nf++) nw::fill_fragment(acc[nf], 0.0f);
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                nw::fragment<nw::matrix_a, 16, 16, 16, half, nw::row_major> qa;
                nw::load_matrix_sync(qa, Qs + warp * 16 * L::ldh + kk * 16, L::ldh);
#pragma unroll
                for (int nf = 0; nf < fa_bk / 16; nf++) {
                    nw::fragment<nw::matrix_b, 16, 16, 16, half, nw::col_major> kb;
                    nw::load_matrix_sync(kb, Ks + nf * 16 * L::ldh + kk * 16, L::ldh);
                    nw::mma_sync(acc[nf], qa, kb, acc[nf]);
                }
            }
#pragma unroll
            for (int nf = 0; nf < fa_bk / 16; nf++)
                nw::store_matrix_sync(Ss + warp * 16 * L::lds + nf * 16, acc[nf], L::lds, nw::mem_row_major);
        }
        __syncwarp();
        // online softmax: two lanes per row
        {
            float * srow = Ss + my_r * L::lds;
            float m = -INFINITY;
            for (int c = my_c0; c < my_c0 + fa_bk / 2; c++) {
                const int j = k0 + c;
                float sv = srow[c];
                if (a.softcap > 0.0f) sv = a.softcap * tanhf(sv / a.softcap);
                const bool ok = j <= my_hi && j >= my_lo && j < k_end;
                sv = ok ? sv : -INFINITY;
                srow[c] = sv;
                m = fmaxf(m, sv);
            }
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            const float m_old = row_m[my_r], m_new = fmaxf(m_old, m);
            float l = 0.0f;
            half * prow = Ps + my_r * L::ldp;
            for (int c = my_c0; c < my_c0 + fa_bk / 2; c++) {
                const float p = srow[c] == -INFINITY ? 0.0f : __expf(srow[c] - m_new);
                prow[c] = __float2half_rn(p);
                l += p;
            }
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            const float alpha = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
            float * orow = Os + my_r * L::ldo;
            for (int d = (lane % 2) * (HD / 2); d < (lane % 2 + 1) * (HD / 2); d++) orow[d] *= alpha;
            __syncwarp();
            if (lane % 2 == 0) { row_m[my_r] = m_new; row_l[my_r] = row_l[my_r] * alpha + l; }
        }
        __syncwarp();
        // O += P V for this warp's rows
#pragma unroll
        for (int cb = 0; cb < HD / 16; cb++) {
            nw::fragment<nw::accumulator, 16, 16, 16, float> o;
            nw::load_matrix_sync(o, Os + warp * 16 * L::ldo + cb * 16, L::ldo, nw::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < fa_bk / 16; kk++) {
                nw::fragment<nw::matrix_a, 16, 16, 16, half, nw::row_major> pa;
                nw::fragment<nw::matrix_b, 16, 16, 16, half, nw::row_major> vb;
                nw::load_matrix_sync(pa, Ps + warp * 16 * L::ldp + kk * 16, L::ldp);
                nw::load_matrix_sync(vb, Vs + kk * 16 * L::ldh + cb * 16, L::ldh);
                nw::mma_sync(o, pa, vb, o);
            }
            nw::store_matrix_sync(Os + warp * 16 * L::ldo + cb * 16, o, L::ldo, nw::mem_row_major);
        }
        __syncthreads();   // K/V tiles are reloaded next
    }
    for (int i = tid; i < fa_bq * HD; i += fa_threads) {
        const int r = i / HD, d = i % HD, t = q0 + r;
        if (t >= a.T) continue;
        const float l = row_l[r];
        a.out[((size_t)t * a.H + h) * HD + d] = l > 0.0f ? Os[r * L::ldo + d] / l : 0.0f;
    }
}

template <int HD>
ggx_status launch_prefill(const attn_args & a, cudaStream_t s) {
    static bool attr_set = false;   // raising the dynamic shared memory limit is per kernel
    if (!attr_set) {
        GGX_CUDA_CHECK(cudaFuncSetAttribute(k_attn_prefill<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fa_layout<HD>::bytes));
        attr_set = true;
    }
    k_attn_prefill<HD><<<dim3(a.H, (a.T + fa_bq - 1) / fa_bq), fa_threads, fa_layout<HD>::bytes, s>>>(a);
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}

bool prefill_ok(const ggx_tensor * dst) {
    const int64_t hd = dst->src[0]->ne[0];
    const int64_t T = dst->src[0]->ne[2] * dst->src[0]->ne[3];
    return T > 8 && dst->src[1]->type == GGX_TYPE_F16 && (hd == 64 || hd == 80 || hd == 96 || hd == 128);
}
#else
bool prefill_ok(const ggx_tensor *) { return false; }
#endif  // GGX_ATTN_WMMA

struct plan {
    int chunk, n_splits;
};

plan make_plan(const ggx_tensor * dst) {
    const ggx_tensor * kc = dst->src[1];
    const int C = (int)(ggx_nelements(kc) / (kc->ne[0] * kc->ne[1]));
    const int T = (int)(dst->src[0]->ne[2] * dst->src[0]->ne[3]);
    plan p;
    if (T > 8) {            // many queries fill the GPU by themselves
        p.chunk = C;
        p.n_splits = 1;
        return p;
    }
    // ~32 splits, chunks a multiple of the tile, at least one tile
    int chunk = (C + 31) / 32;
    chunk = std::max(k_tile, (chunk + k_tile - 1) / k_tile * k_tile);
    p.chunk = chunk;
    p.n_splits = (C + chunk - 1) / chunk;
    return p;
}

size_t smem_bytes(int G, int hd) {
    const int KL = k_threads / (hd / 8);
    return sizeof(float) * ((size_t)G * hd + (size_t)G * k_tile + 3 * (size_t)G + (size_t)KL * G * hd);
}

}  // namespace

bool ggx_cuda_supports_attn(const ggx_tensor * dst) {
    const ggx_tensor * q = dst->src[0];
    const ggx_tensor * k = dst->src[1];
    const ggx_tensor * v = dst->src[2];
    const ggx_tensor * pos = dst->src[3];
    if (q->type != GGX_TYPE_F32 || !pos || pos->type != GGX_TYPE_I32) return false;
    if (k->type != v->type || !ggx_cuda_is_ftype(k->type)) return false;
    const int64_t hd = q->ne[0], H = q->ne[1];
    if (k->ne[0] != hd || v->ne[0] != hd || k->ne[1] != v->ne[1] || k->ne[1] <= 0 || H % k->ne[1]) return false;
    const int64_t G = H / k->ne[1];
    if (hd > k_max_hd || hd % 8 || G > k_max_g) return false;
    return ggx_nelements(pos) >= q->ne[2] * q->ne[3];
}

size_t ggx_cuda_attn_scratch(const ggx_tensor * dst) {
    if (prefill_ok(dst)) return 0;
    const plan p = make_plan(dst);
    if (p.n_splits == 1) return 0;
    const ggx_tensor * q = dst->src[0];
    return sizeof(float) * (size_t)(q->ne[2] * q->ne[3]) * q->ne[1] * p.n_splits * (q->ne[0] + 2);
}

ggx_status ggx_cuda_op_attn(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const ggx_tensor * q = dst->src[0];
    const ggx_tensor * kc = dst->src[1];
    attn_args a;
    a.q = (const float *)q->data;
    a.k = kc->data;
    a.v = dst->src[2]->data;
    a.pos = (const int32_t *)dst->src[3]->data;
    a.out = (float *)dst->data;
    a.part = (float *)ctx.scratch;
    a.hd = (int)q->ne[0];
    a.H = (int)q->ne[1];
    a.T = (int)(q->ne[2] * q->ne[3]);
    a.Hkv = (int)kc->ne[1];
    a.C = (int)(ggx_nelements(kc) / (kc->ne[0] * kc->ne[1]));
    const plan p = make_plan(dst);
    a.chunk = p.chunk;
    a.n_splits = p.n_splits;
    a.scale = dst->params.attn.scale;
    a.softcap = dst->params.attn.softcap;
    a.window = dst->params.attn.window;
    a.non_causal = dst->params.attn.non_causal;
    if (a.T == 0) return GGX_STATUS_OK;
#if defined(GGX_ATTN_WMMA)
    if (prefill_ok(dst)) {
        switch (a.hd) {
            case 64:  return launch_prefill<64>(a, ctx.stream);
            case 80:  return launch_prefill<80>(a, ctx.stream);
            case 96:  return launch_prefill<96>(a, ctx.stream);
            default:  return launch_prefill<128>(a, ctx.stream);
        }
    }
#endif  // GGX_ATTN_WMMA
    if (ctx.scratch_size < ggx_cuda_attn_scratch(dst)) {
        ggx_set_error("cuda: scratch too small for attention %s", dst->name);
        return GGX_STATUS_FAILED;
    }
    const int G = a.H / a.Hkv;
    const size_t smem = smem_bytes(G, a.hd);
    const dim3 grid(a.Hkv, a.n_splits, a.T);
    switch (kc->type) {
        case GGX_TYPE_F32:  k_attn_split<float><<<grid, k_threads, smem, ctx.stream>>>(a); break;
        case GGX_TYPE_F16:  k_attn_split<half><<<grid, k_threads, smem, ctx.stream>>>(a); break;
        default:            k_attn_split<nv_bfloat16><<<grid, k_threads, smem, ctx.stream>>>(a); break;
    }
    GGX_CUDA_LAUNCH_CHECK();
    if (a.n_splits > 1) {
        k_attn_combine<<<dim3(a.H, a.T), 128, 0, ctx.stream>>>(a);
        GGX_CUDA_LAUNCH_CHECK();
    }
    return GGX_STATUS_OK;
}
