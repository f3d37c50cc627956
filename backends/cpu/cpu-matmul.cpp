// MUL_MAT: y {N, T} from W {K, N} (f32/f16/bf16, or EXL2/GPTQ via ggx_cpu_qmatmul) and x {K, T}:
// y[t][n] = dot(row n of W, row t of x), accumulated in f32.
//
// Threads split the N output columns (= weight rows) in blocks of 16. Within a thread, a tile of
// RB weight rows x TB tokens keeps RB*TB 8-lane accumulators in registers, so each weight vector
// loaded (and converted from f16/bf16) feeds TB tokens. The tokens of a chunk are all run against
// one row block before moving on, so the weights stream from memory once per chunk while the
// chunk's activations (sized to stay in L2) are reread from cache.
#include "cpu-common.h"
#include "cpu-ops.h"
#include "cpu-qmatmul.h"

namespace ggx_cpu {

namespace {

// The loops over RB and TB have constant trip counts; GGX_UNROLL makes them registers even at -O2
// (without it the tile runs 5x slower).
template <typename WT, int RB, int TB>
void tile(const char * w, size_t ldw, const float * x, int64_t ldx, float * y, int64_t ldy, int64_t K) {
    const WT * wr[RB];
    GGX_UNROLL for (int r = 0; r < RB; r++) wr[r] = (const WT *)(w + (size_t)r * ldw);
    int64_t k = 0;
#ifdef GGX_CPU_AVX2
    __m256 acc[RB][TB];
    GGX_UNROLL for (int r = 0; r < RB; r++)
        GGX_UNROLL for (int t = 0; t < TB; t++) acc[r][t] = _mm256_setzero_ps();
    for (; k + 8 <= K; k += 8) {
        __m256 xv[TB];
        GGX_UNROLL for (int t = 0; t < TB; t++) xv[t] = _mm256_loadu_ps(x + t * ldx + k);
        GGX_UNROLL for (int r = 0; r < RB; r++) {
            const __m256 wv = load8(wr[r] + k);
            GGX_UNROLL for (int t = 0; t < TB; t++) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    float sum[RB][TB];
    GGX_UNROLL for (int r = 0; r < RB; r++)
        GGX_UNROLL for (int t = 0; t < TB; t++) sum[r][t] = hsum(acc[r][t]);
#else
    float sum[RB][TB] = {};
#endif
    for (; k < K; k++) {
        GGX_UNROLL for (int r = 0; r < RB; r++) {
            const float wv = elem<WT>::load(wr[r] + k);
            GGX_UNROLL for (int t = 0; t < TB; t++) sum[r][t] += wv * x[t * ldx + k];
        }
    }
    GGX_UNROLL for (int r = 0; r < RB; r++)
        GGX_UNROLL for (int t = 0; t < TB; t++) y[t * ldy + r] = sum[r][t];
}

// Rows [n0, n1) of W against tokens [t0, t1), tokens in tiles of up to 4 per row block of RB.
template <typename WT, int RB>
void row_block_tokens(const char * w, size_t ldw, const float * x, int64_t ldx, float * y, int64_t ldy, int64_t K,
                      int64_t n, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t += 4) {
        const float * xt = x + t * ldx;
        float * yt = y + t * ldy + n;
        const char * wn = w + (size_t)n * ldw;
        switch (std::min<int64_t>(4, t1 - t)) {
            case 1: tile<WT, RB, 1>(wn, ldw, xt, ldx, yt, ldy, K); break;
            case 2: tile<WT, RB, 2>(wn, ldw, xt, ldx, yt, ldy, K); break;
            case 3: tile<WT, RB, 3>(wn, ldw, xt, ldx, yt, ldy, K); break;
            default: tile<WT, RB, 4>(wn, ldw, xt, ldx, yt, ldy, K); break;
        }
    }
}

template <typename WT>
void mul_mat_dense(const ggx_tensor * W, const float * x, int64_t ldx, float * y, int64_t ldy, int64_t T,
                   int64_t n0, int64_t n1) {
    const char * w = (const char *)W->data;
    const size_t ldw = W->nb[1];
    const int64_t K = W->ne[0];
    // Activations of one chunk stay within ~256 KiB (L2) while the chunk sweeps all rows.
    const int64_t chunk = std::max<int64_t>(4, (256 * 1024) / (K * (int64_t)sizeof(float)) / 4 * 4);
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t t1 = std::min(T, t0 + chunk);
        int64_t n = n0;
        if (t1 - t0 == 1) {
            // One token (decode): four rows per tile give four independent FMA chains.
            for (; n + 4 <= n1; n += 4) row_block_tokens<WT, 4>(w, ldw, x, ldx, y, ldy, K, n, t0, t1);
        } else {
            for (; n + 2 <= n1; n += 2) row_block_tokens<WT, 2>(w, ldw, x, ldx, y, ldy, K, n, t0, t1);
        }
        for (; n < n1; n++) row_block_tokens<WT, 1>(w, ldw, x, ldx, y, ldy, K, n, t0, t1);
    }
}

}  // namespace

void op_mul_mat(const params & p, ggx_tensor * dst) {
    const ggx_tensor * W = dst->src[0], * X = dst->src[1];
    const float * x = (const float *)X->data;
    float * y = (float *)dst->data;
    const int64_t ldx = (int64_t)(X->nb[1] / sizeof(float)), ldy = (int64_t)(dst->nb[1] / sizeof(float));
    const int64_t T = ggx_nrows(X);
    if (W->type == GGX_TYPE_EXL2 || W->type == GGX_TYPE_GPTQ) {
        ggx_cpu_qmatmul(W, x, ldx, y, ldy, T, p.ith, p.nth);
        return;
    }
    // Column blocks of 16 so that neighbouring threads do not share the cache lines of y.
    const int64_t N = W->ne[1];
    const int64_t blocks = (N + 15) / 16;
    int64_t b0, b1;
    split_range(blocks, p.ith, p.nth, &b0, &b1);
    const int64_t n0 = std::min(N, b0 * 16), n1 = std::min(N, b1 * 16);
    if (n0 >= n1) return;
    switch (W->type) {
        case GGX_TYPE_F32: mul_mat_dense<float>(W, x, ldx, y, ldy, T, n0, n1); break;
        case GGX_TYPE_F16: mul_mat_dense<f16_t>(W, x, ldx, y, ldy, T, n0, n1); break;
        case GGX_TYPE_BF16: mul_mat_dense<bf16_t>(W, x, ldx, y, ldy, T, n0, n1); break;
        default: break;
    }
}

}  // namespace ggx_cpu
