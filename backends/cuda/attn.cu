// Attention kernels; see attn.cuh.
//
// k_attn_split: grid (Hkv, n_splits, T), 128 threads. The block owns keys [s*chunk, (s+1)*chunk)
// and walks them in tiles of 64:
//   scores: 8 lanes per key (lane l reads dims l, l+8, ...), 16 keys per pass; the G query heads
//           are dotted against the same K row; s = scale * q.k, softcap, causal/window mask.
//   softmax: online (running max m, running sum l per head), p stored in shared memory.
//   values: thread owns outputs o = tid + 128 i of the G x hd block, acc += p_j * V[j][d].
// With one split the block normalises and writes the output; otherwise it writes (m, l, acc) and
// k_attn_combine merges the splits.
#include "attn.cuh"

#include <algorithm>

namespace {

constexpr int k_threads = 128;
constexpr int k_tile = 64;
constexpr int k_max_g = 16;
constexpr int k_max_out = 16;                 // G * hd <= 128 * 16
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
};

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
    const TC * K = (const TC *)a.k;
    const TC * V = (const TC *)a.v;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

    const int p_t = a.pos[t];
    int k_lo = split * a.chunk, k_hi = min(min(a.C, k_lo + a.chunk), p_t + 1);
    if (a.window > 0) k_lo = max(k_lo, p_t - a.window + 1);

    for (int i = tid; i < G * a.hd; i += k_threads) {
        const int g = i / a.hd, d = i % a.hd;
        qs[i] = a.q[((size_t)t * a.H + kvh * G + g) * a.hd + d];
    }
    if (tid < G) { ms[tid] = -INFINITY; ls[tid] = 0.0f; }
    float acc[k_max_out];
#pragma unroll
    for (int i = 0; i < k_max_out; i++) acc[i] = 0.0f;
    __syncthreads();

    const int sub = lane % 8, key_in_warp = lane / 8;   // 4 keys per warp, 16 per pass
    for (int j0 = k_lo; j0 < k_hi; j0 += k_tile) {
        const int nj = min(k_tile, k_hi - j0);
        for (int jj = warp * 4 + key_in_warp; jj < k_tile; jj += 16) {
            const int j = j0 + jj;
            float dot[k_max_g];
#pragma unroll
            for (int g = 0; g < k_max_g; g++) dot[g] = 0.0f;
            if (jj < nj) {
                const TC * kr = K + ((size_t)j * a.Hkv + kvh) * a.hd;
                for (int d = sub; d < a.hd; d += 8) {
                    const float kv = ggx_load_f(kr, d);
#pragma unroll
                    for (int g = 0; g < k_max_g; g++)
                        if (g < G) dot[g] = fmaf(qs[g * a.hd + d], kv, dot[g]);
                }
            }
#pragma unroll
            for (int g = 0; g < k_max_g; g++) {
                if (g >= G) break;
                float s = dot[g];
                s += __shfl_xor_sync(0xffffffffu, s, 1);
                s += __shfl_xor_sync(0xffffffffu, s, 2);
                s += __shfl_xor_sync(0xffffffffu, s, 4);
                if (sub == 0) {
                    s *= a.scale;
                    if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
                    ps[g * k_tile + jj] = jj < nj ? s : -INFINITY;
                }
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
                const float p = ps[g * k_tile + jj] == -INFINITY ? 0.0f : expf(ps[g * k_tile + jj] - m_new);
                ps[g * k_tile + jj] = p;
                l += p;
            }
            l = ggx_warp_sum(l);
            if (lane == 0) {
                const float r = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
                al[g] = r;
                ls[g] = ls[g] * r + l;
                ms[g] = m_new;
            }
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < k_max_out; i++) {
            const int o = tid + i * k_threads;
            if (o >= G * a.hd) break;
            const int g = o / a.hd, d = o % a.hd;
            float r = acc[i] * al[g];
            for (int jj = 0; jj < nj; jj++) r = fmaf(ps[g * k_tile + jj], ggx_load_f(V, ((size_t)(j0 + jj) * a.Hkv + kvh) * a.hd + d), r);
            acc[i] = r;
        }
        __syncthreads();
    }

    if (a.n_splits == 1) {
#pragma unroll
        for (int i = 0; i < k_max_out; i++) {
            const int o = tid + i * k_threads;
            if (o >= G * a.hd) break;
            const int g = o / a.hd, d = o % a.hd;
            const float l = ls[g];
            a.out[((size_t)t * a.H + kvh * G + g) * a.hd + d] = l > 0.0f ? acc[i] / l : 0.0f;
        }
        return;
    }
    const int stride = a.hd + 2;
#pragma unroll
    for (int i = 0; i < k_max_out; i++) {
        const int o = tid + i * k_threads;
        if (o >= G * a.hd) break;
        const int g = o / a.hd, d = o % a.hd;
        float * pp = a.part + (((size_t)t * a.H + kvh * G + g) * a.n_splits + split) * stride;
        pp[2 + d] = acc[i];
        if (d == 0) { pp[0] = ms[g]; pp[1] = ls[g]; }
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

size_t smem_bytes(int G, int hd) { return sizeof(float) * ((size_t)G * hd + (size_t)G * k_tile + 3 * (size_t)G); }

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
    if (hd > k_max_hd || G > k_max_g || G * hd > (int64_t)k_threads * k_max_out) return false;
    return ggx_nelements(pos) >= q->ne[2] * q->ne[3];
}

size_t ggx_cuda_attn_scratch(const ggx_tensor * dst) {
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
    if (a.T == 0) return GGX_STATUS_OK;
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
