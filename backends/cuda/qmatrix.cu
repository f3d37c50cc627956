// EXL2 / GPTQ matrix multiply (see qmatrix.cuh for the paths), and the per-matrix tables.
//
// Packed layout used as is (docs/exl2-format.md section 3): q_weight[QR][Np] u32, each column an
// independent little-endian bit string per group; exl2-unpack.cuh has the chunk shapes.
//
// Tables (ggx_cuda_qmatrix_prepare): the quantized rows are cut into fine slices of
// GGX_QGEMV_FINE_ROWS rows (the decode GEMV gives each warp group a run of them, chosen per
// launch so that the grid fills the GPU); the host lists each slice's "pieces" (slice ∩ group,
// at most 32 rows) as int4 {k0, qrow0, group<<4 | bits, rows}. Any multiple of 32 rows is a
// chunk boundary for every width, because only 2-bit groups may have 16-row sizes and they come
// last. The EXL2 decode GEMV (qgemv.cu) walks the pieces; the GPTQ GEMV here cuts its slices on
// the fly (one group size, 4 bits).
#include "qmatrix.cuh"

#include "exl2-unpack.cuh"
#include "gemm.cuh"
#include "qgemv.cuh"
#include "strip-plan.cuh"

#include <algorithm>
#include <cstring>
#include <vector>

namespace {

using namespace ggx_exl2_unpack;

constexpr int k_gemv_threads = 128;              // 4 warps; 512 columns per block
constexpr int k_cols_per_block = 4 * k_gemv_threads;
constexpr int k_max_slice = 256;
constexpr size_t k_prefill_w_cap = 256u << 20;   // fp16 weights per prefill GEMM (plus x16 beside)

using qextra = ggx_cuda_qextra;

// GPTQ: 4-bit rows, per (group, column) zero and scale. Pieces here are plain: {k0, k0/8, g, rows}.
template <int T>
__global__ void __launch_bounds__(k_gemv_threads)
k_gptq_gemv(const uint32_t * __restrict__ q_weight,   // [K/8][N]
            const uint32_t * __restrict__ qzeros,     // [G][N/8]
            const half * __restrict__ scales,         // [G][N]
            const int32_t * __restrict__ q_perm,      // [K] or null
            const float * __restrict__ x, float * __restrict__ y, int K, int N, int R, int gs,
            float * __restrict__ partial) {           // [slices][T][N]: the sums stored, or null: added into y
    __shared__ float xs[T * k_max_slice];
    const int k_begin = blockIdx.y * R;
    const int k_n = min(R, K - k_begin);
    for (int i = threadIdx.x; i < k_n; i += blockDim.x) {
        const int k = k_begin + i;
        const int src = q_perm ? q_perm[k] : k;
#pragma unroll
        for (int t = 0; t < T; t++) xs[t * R + i] = x[(size_t)t * K + src];
    }
    __syncthreads();
    const int n = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (n >= N) return;
    float total[T][4];
#pragma unroll
    for (int t = 0; t < T; t++)
#pragma unroll
        for (int c = 0; c < 4; c++) total[t][c] = 0.0f;
    const int piece = min(gs, R);
    for (int k0 = 0; k0 < k_n; k0 += piece) {
        const int g = (k_begin + k0) / gs;
        float acc[T][4];
#pragma unroll
        for (int t = 0; t < T; t++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[t][c] = 0.0f;
        const int rows = min(piece, k_n - k0);
        exl2_piece<4, T>(q_weight, N, n, (k_begin + k0) / 8, rows, xs + k0, R, acc);
        // the piece used zero 8; GPTQ's zero is z+1: subtract (z + 1 - 8) * sum(x)
        const uint32_t zw = qzeros[(size_t)g * (N / 8) + n / 8] >> (4 * (n % 8));
        float sx[T];
#pragma unroll
        for (int t = 0; t < T; t++) {
            sx[t] = 0.0f;
            for (int j = 0; j < rows; j++) sx[t] += xs[t * R + k0 + j];
        }
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const float dz = (float)((int)((zw >> (4 * c)) & 15) + 1 - 8);
            const float sc = __half2float(scales[(size_t)g * N + n + c]);
#pragma unroll
            for (int t = 0; t < T; t++) total[t][c] = fmaf(acc[t][c] - dz * sx[t], sc, total[t][c]);
        }
    }
    if (partial) {   // repeatable results: k_sum_slices adds the slices in order
        float * p = partial + (size_t)blockIdx.y * T * N;
#pragma unroll
        for (int c = 0; c < 4; c++)
#pragma unroll
            for (int t = 0; t < T; t++) p[(size_t)t * N + n + c] = total[t][c];
        return;
    }
#pragma unroll
    for (int c = 0; c < 4; c++)
#pragma unroll
        for (int t = 0; t < T; t++) atomicAdd(&y[(size_t)t * N + n + c], total[t][c]);
}

// y[i] = the sum of partial[s][i] over s = 0 .. slices - 1, in that order.
__global__ void k_sum_slices(const float * __restrict__ partial, int slices, int64_t n, float * __restrict__ y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int j = 0; j < slices; j++) s += partial[j * n + i];
        y[i] = s;
    }
}

// ---- prefill: dequantize to fp16 -------------------------------------------------------------
// W16 is [K][ldw] fp16 (row-major, ldw = nc rounded up to 8), with the activation permutation
// folded in: quantized row k is written to row perm[k], so that x only needs a conversion to
// fp16 (no gather) and the GEMM is a plain y = x16 W16. perm is a bijection (checked at load).
//
// A thread owns 8 adjacent columns (two 16-byte loads per packed word row, one 16-byte store per
// output row: a warp writes 512 contiguous bytes per row) and a 32-row part of K. 32 rows are a
// whole number of chunks of every width, and a part crosses a group boundary only where groups
// are that small (2-bit groups of 16 rows), so each piece is whole chunks.
//
// Exactness (docs/exl2-format.md 4.3, each product rounded once to fp16): 1024 + v is exact in
// fp16 for v < 1024, so (1024 + v) - (1024 + z) = v - z exactly, and __hmul2 rounds the exact
// product of two fp16 values once, which is h(h(v - z) * scale).
constexpr int k_dq_threads = 64;                   // 512 columns per block
constexpr int k_dq_rows = 32;                      // rows per block

// Value j of width B from one column's chunk words (j compile-time after unrolling).
template <int B>
__device__ __forceinline__ uint32_t extract_rt(const uint32_t * w, int j) {
    const int bit = j * B, wi = bit / 32, s = bit % 32;
    if (s + B <= 32) return (w[wi] >> s) & ((1u << B) - 1);
    return __funnelshift_r(w[wi], w[wi + 1], s) & ((1u << B) - 1);
}

// rows (whole chunks) of one group for the 8 columns at n; quantized rows k.. go to perm[k]..
// FULL: rows == k_dq_rows, the usual case, unrolled so that all the piece's loads issue first.
template <int B, bool FULL>
__device__ __forceinline__ void dq_exl2_rows(const uint32_t * __restrict__ qw, int Np, int n, int qrow, int k,
                                             int rows, const half2 (&sc)[4], const int32_t * __restrict__ perm,
                                             half * __restrict__ out, int ldw, int j) {
    constexpr int CR = chunk_shape<B>::rows, CW = chunk_shape<B>::words;
    const half2 bias = u32_as_half2(0x64006400u + 0x00010001u * (1u << (B - 1)));   // 1024 + z, twice
    if (FULL) rows = k_dq_rows;
#pragma unroll
    for (int r = 0; r < k_dq_rows; r += CR) {
        if (!FULL && r >= rows) continue;   // constant trip count, one exit: unrolls on every compiler
        uint32_t w[8][CW];
#pragma unroll
        for (int i = 0; i < CW; i++) {
            const uint32_t * src = qw + (size_t)(qrow + r / CR * CW + i) * Np + n;
            const uint4 a = __ldg((const uint4 *)src), b = __ldg((const uint4 *)(src + 4));
            w[0][i] = a.x; w[1][i] = a.y; w[2][i] = a.z; w[3][i] = a.w;
            w[4][i] = b.x; w[5][i] = b.y; w[6][i] = b.z; w[7][i] = b.w;
        }
#pragma unroll
        for (int jj = 0; jj < CR; jj++) {
            uint4 o;
            uint32_t * ov = &o.x;
#pragma unroll
            for (int p = 0; p < 4; p++) {
                const uint32_t lo = extract_rt<B>(w[2 * p], jj), hi = extract_rt<B>(w[2 * p + 1], jj);
                const half2 v = __hsub2(u32_as_half2(0x64006400u | lo | (hi << 16)), bias);
                ov[p] = half2_as_u32(__hmul2(v, sc[p]));
            }
            const int row = k + r + jj;
            *(uint4 *)(out + (size_t)(perm ? perm[row] : row) * ldw + j) = o;
        }
    }
}

template <int B>
__device__ __forceinline__ void dq_exl2_piece(const uint32_t * __restrict__ qw, int Np, int n, int qrow, int k,
                                              int rows, const half2 (&sc)[4], const int32_t * __restrict__ perm,
                                              half * __restrict__ out, int ldw, int j) {
    if (rows == k_dq_rows) dq_exl2_rows<B, true>(qw, Np, n, qrow, k, rows, sc, perm, out, ldw, j);
    else dq_exl2_rows<B, false>(qw, Np, n, qrow, k, rows, sc, perm, out, ldw, j);
}

__global__ void __launch_bounds__(k_dq_threads)
k_exl2_dequant(const uint32_t * __restrict__ q_weight, const uint32_t * __restrict__ q_scale,
               const half * __restrict__ q_scale_max, const int4 * __restrict__ groups, int n_groups,
               const int32_t * __restrict__ perm, half * __restrict__ out, int K, int Np, int n0, int ldw) {
    const int j = (blockIdx.x * k_dq_threads + threadIdx.x) * 8;
    if (j >= ldw) return;
    const int n = n0 + j;
    const int k_lo = blockIdx.y * k_dq_rows, k_hi = min(K, k_lo + k_dq_rows);
    // last group starting at or before k_lo (same answer in every thread: broadcast loads)
    int lo = 0, hi = n_groups - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (groups[mid].x <= k_lo) lo = mid; else hi = mid - 1;
    }
    for (int g = lo, k = k_lo; k < k_hi; g++) {
        const int4 gr = groups[g];
        const int rows = min(k_hi, gr.x + gr.w) - k;
        const int qrow = gr.y + (k - gr.x) * gr.z / 32;
        const uint32_t code = q_scale[(size_t)g * (Np / 8) + n / 8];
        const half2 mx2 = __half2half2(q_scale_max[g]);
        half2 sc[4];
#pragma unroll
        for (int p = 0; p < 4; p++) sc[p] = scale_pair(code >> (8 * p), mx2);
        switch (gr.z) {
            case 8: dq_exl2_piece<8>(q_weight, Np, n, qrow, k, rows, sc, perm, out, ldw, j); break;
            case 6: dq_exl2_piece<6>(q_weight, Np, n, qrow, k, rows, sc, perm, out, ldw, j); break;
            case 5: dq_exl2_piece<5>(q_weight, Np, n, qrow, k, rows, sc, perm, out, ldw, j); break;
            case 4: dq_exl2_piece<4>(q_weight, Np, n, qrow, k, rows, sc, perm, out, ldw, j); break;
            case 3: dq_exl2_piece<3>(q_weight, Np, n, qrow, k, rows, sc, perm, out, ldw, j); break;
            default: dq_exl2_piece<2>(q_weight, Np, n, qrow, k, rows, sc, perm, out, ldw, j); break;
        }
        k += rows;
    }
}

// GPTQ: w[s][n] = h(q - (z + 1)) * scale; 8 columns x 4 packed word rows (32 rows) per thread.
__global__ void __launch_bounds__(k_dq_threads)
k_gptq_dequant(const uint32_t * __restrict__ q_weight, const uint32_t * __restrict__ qzeros,
               const half * __restrict__ scales, const int32_t * __restrict__ perm, half * __restrict__ out,
               int K, int N, int gs, int n0, int ldw) {
    const int j = (blockIdx.x * k_dq_threads + threadIdx.x) * 8;
    if (j >= ldw) return;
    const int n = n0 + j;
    const int r8_hi = min(K, (int)(blockIdx.y + 1) * k_dq_rows) / 8;
    for (int r8 = blockIdx.y * (k_dq_rows / 8); r8 < r8_hi; r8++) {
        const int g = r8 * 8 / gs;   // gs >= 8: one group per word row
        const uint32_t zw = qzeros[(size_t)g * (N / 8) + n / 8];
        const half2 * sp = (const half2 *)(scales + (size_t)g * N + n);
        const uint32_t * src = q_weight + (size_t)r8 * N + n;
        const uint4 a = __ldg((const uint4 *)src), b = __ldg((const uint4 *)(src + 4));
        const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        half2 sc[4], bias[4];
#pragma unroll
        for (int p = 0; p < 4; p++) {
            sc[p] = sp[p];
            const uint32_t z0 = ((zw >> (8 * p)) & 15) + 1, z1 = ((zw >> (8 * p + 4)) & 15) + 1;
            bias[p] = u32_as_half2(0x64006400u + z0 + (z1 << 16));
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint4 o;
            uint32_t * ov = &o.x;
#pragma unroll
            for (int p = 0; p < 4; p++) {
                const uint32_t lo = (w[2 * p] >> (4 * i)) & 15, hi = (w[2 * p + 1] >> (4 * i)) & 15;
                const half2 v = __hsub2(u32_as_half2(0x64006400u | lo | (hi << 16)), bias[p]);
                ov[p] = half2_as_u32(__hmul2(v, sc[p]));
            }
            const int row = r8 * 8 + i;
            *(uint4 *)(out + (size_t)(perm ? perm[row] : row) * ldw + j) = o;
        }
    }
}

// x16 = f16(x), 4 values per step (n % 4 == 0; the pointers are 16-byte aligned: checked at launch)
__global__ void k_to_f16(const float4 * __restrict__ x, half * __restrict__ out, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x)
        ggx_store_f4(out, i, x[i]);
}
__global__ void k_to_f16_scalar(const float * __restrict__ x, half * __restrict__ out, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2half_rn(x[i]);
}

qextra * get_extra(const ggx_tensor * t) { return (qextra *)((ggx_qmatrix *)t->extra)->backend_extra; }

// Slice size: the largest R in {256, 128, 64, 32} that still gives >= 2 blocks per SM (more rows
// per block: fewer atomics and a cheaper activation gather per weight byte).
int pick_slice_rows(int K, int Np, int n_sm) {
    const int col_blocks = (Np + k_cols_per_block - 1) / k_cols_per_block;
    for (int R = k_max_slice; R > 32; R /= 2)
        if ((int64_t)((K + R - 1) / R) * col_blocks >= 2 * n_sm) return R;
    return 32;
}

// Columns of W16 dequantized per GEMM: the whole matrix when it fits in the weight budget (one
// dequant + one GEMM; a llama3-8b MLP matrix is 117 MB), else slices of a multiple of 256.
size_t prefill_cols(const ggx_qmatrix * q) {
    size_t nc = k_prefill_w_cap / ((size_t)q->K * 2) / 256 * 256;
    if (nc < 256) nc = 256;
    return std::min(nc, (size_t)q->N);
}
size_t round8(size_t v) { return (v + 7) & ~(size_t)7; }

}  // namespace

bool ggx_cuda_supports_qmatmul(const ggx_tensor * dst) {
    const ggx_tensor * w = dst->src[0];
    const ggx_tensor * x = dst->src[1];
    if (x->type != GGX_TYPE_F32 || !w->extra) return false;
    const ggx_qmatrix * q = (const ggx_qmatrix *)w->extra;
    if (x->ne[0] != q->K) return false;
    if (w->type == GGX_TYPE_EXL2) return q->Np % 32 == 0 && q->K % 16 == 0;
    if (w->type == GGX_TYPE_GPTQ)
        return q->N % 32 == 0 && q->K % 8 == 0 && q->group_size >= 8 && (q->group_size & (q->group_size - 1)) == 0;
    return false;
}

// Widths named in the digits of `s` (2, 3, 4) as bits of a mask (bit w for w bits); a null s
// gives all three.
static int width_mask(const char * s) {
    if (!s) return (1 << 2) | (1 << 3) | (1 << 4);
    int m = 0;
    for (const char * c = s; *c; c++)
        if (*c == '2' || *c == '3' || *c == '4') m |= 1 << (*c - '0');
    return m;
}

// Widths whose 32-row pieces the paired tables join into 64-row pieces: GGX_QGEMV_PAIR_BITS lists
// them (measurements), all three by default.
static int paired_widths() {
    static const int mask = width_mask(getenv("GGX_QGEMV_PAIR_BITS"));
    return mask;
}

// The widths whose pairs may join two groups: none unless the kernel was built to scale them
// (decode-plan.h); there GGX_QGEMV_PAIR_GROUPS (read as each matrix is prepared) is 0 for none,
// 1 or unset for all, or the widths' digits (e.g. 2 or 23).
static int pair_group_widths() {
    if (!GGX_QGEMV_PAIR_GROUPS) return 0;
    const char * e = getenv("GGX_QGEMV_PAIR_GROUPS");
    if (e && strcmp(e, "0") == 0) return 0;
    return width_mask(e && strcmp(e, "1") != 0 ? e : nullptr);
}

ggx_status ggx_cuda_qmatrix_prepare(ggx_cuda_ctx & ctx, ggx_tensor * t) {
    ggx_qmatrix * q = (ggx_qmatrix *)t->extra;
    if (!q) { ggx_set_error("cuda: tensor %s has no qmatrix descriptor", t->name); return GGX_STATUS_FAILED; }
    if (((uintptr_t)q->q_weight & 15) != 0) {
        ggx_set_error("cuda: %s: q_weight not 16-byte aligned", t->name);
        return GGX_STATUS_UNSUPPORTED;
    }
    qextra * e = new qextra();
    auto bail = [&](ggx_status s) { ggx_cuda_qmatrix_release(ctx, t); return s; };
    q->backend_extra = e;
    if (t->type == GGX_TYPE_GPTQ) {
        if (q->N % 32 || q->K % 8 || q->group_size < 8 || (q->group_size & (q->group_size - 1))) {
            ggx_set_error("cuda: %s: GPTQ shape K=%d N=%d group %d unsupported (need N%%32==0, K%%8==0, power-of-two group >= 8)",
                          t->name, q->K, q->N, q->group_size);
            return bail(GGX_STATUS_UNSUPPORTED);
        }
        e->slice_rows = pick_slice_rows(q->K, q->N, ctx.n_sm);
        // keep slices group-aligned: both are powers of two, so the smaller divides the larger
        e->n_slices = (q->K + e->slice_rows - 1) / e->slice_rows;
        return GGX_STATUS_OK;
    }
    if (t->type != GGX_TYPE_EXL2) { ggx_set_error("cuda: %s: not a quantized type", t->name); return bail(GGX_STATUS_UNSUPPORTED); }

    // EXL2: walk the groups on the host
    std::vector<uint16_t> groups;
    GGX_RETURN_IF_ERR(ggx_cuda_exl2_host_groups(ctx, *q, &groups));
    std::vector<int4> gtab(q->n_groups);
    int k = 0, prev_bits = 8;
    for (int g = 0; g < q->n_groups; g++) {
        const int bits = groups[2 * g], r0 = groups[2 * g + 1];
        const int r1 = g + 1 < q->n_groups ? groups[2 * g + 3] : q->qrows;
        const bool width_ok = bits == 8 || bits == 6 || bits == 5 || bits == 4 || bits == 3 || bits == 2;
        if (!width_ok || bits > prev_bits || r1 <= r0 || ((r1 - r0) * 32) % bits) {
            ggx_set_error("cuda: %s: bad EXL2 group %d (bits %d, rows %d..%d)", t->name, g, bits, r0, r1);
            return bail(GGX_STATUS_FAILED);
        }
        const int rows = (r1 - r0) * 32 / bits;
        if (rows % (bits == 2 ? 16 : 32)) {
            ggx_set_error("cuda: %s: EXL2 group %d has %d rows (not a multiple of %d)", t->name, g, rows, bits == 2 ? 16 : 32);
            return bail(GGX_STATUS_FAILED);
        }
        gtab[g] = make_int4(k, r0, bits, rows);
        k += rows;
        prev_bits = bits;
    }
    if (k != q->K) {
        ggx_set_error("cuda: %s: EXL2 groups cover %d rows, K is %d", t->name, k, q->K);
        return bail(GGX_STATUS_FAILED);
    }
    const int R = GGX_QGEMV_FINE_ROWS;
    const int n_slices = (q->K + R - 1) / R;
    ggx_cuda_piece_tables tables;
    ggx_cuda_build_piece_tables(gtab, q->K, paired_widths(), pair_group_widths(), &tables, e->run_cost);
    const std::vector<int4> &pieces = tables.pieces, &pieces2 = tables.pieces2;
    const std::vector<int4> &heads = tables.heads, &heads2 = tables.heads2;
    for (const int4 & p : pieces2) ctx.pair_group_pieces += (p.z & 16) != 0;
    e->slice_rows = R;
    e->n_slices = n_slices;
    e->n_groups = q->n_groups;
    GGX_CUDA_CHECK(cudaMalloc(&e->pieces, std::max<size_t>(1, pieces.size()) * sizeof(int4)));
    GGX_CUDA_CHECK(cudaMalloc(&e->groups, gtab.size() * sizeof(int4)));
    GGX_CUDA_CHECK(cudaMalloc(&e->pieces2, std::max<size_t>(1, pieces2.size()) * sizeof(int4)));
    GGX_CUDA_CHECK(cudaMalloc(&e->heads, heads.size() * sizeof(int4)));
    GGX_CUDA_CHECK(cudaMalloc(&e->heads2, heads2.size() * sizeof(int4)));
    GGX_CUDA_CHECK(cudaMemcpyAsync(e->heads, heads.data(), heads.size() * sizeof(int4), cudaMemcpyHostToDevice, ctx.stream));
    GGX_CUDA_CHECK(cudaMemcpyAsync(e->heads2, heads2.data(), heads2.size() * sizeof(int4), cudaMemcpyHostToDevice, ctx.stream));
    GGX_CUDA_CHECK(cudaMemcpyAsync(e->pieces2, pieces2.data(), pieces2.size() * sizeof(int4), cudaMemcpyHostToDevice, ctx.stream));
    GGX_CUDA_CHECK(cudaMemcpyAsync(e->pieces, pieces.data(), pieces.size() * sizeof(int4), cudaMemcpyHostToDevice, ctx.stream));
    GGX_CUDA_CHECK(cudaMemcpyAsync(e->groups, gtab.data(), gtab.size() * sizeof(int4), cudaMemcpyHostToDevice, ctx.stream));
    GGX_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));   // host vectors die here
    if (ctx.strip_step) {
        const ggx_status st = ctx.step_tile ? ggx_cuda_tile_prepare(ctx, t, groups) : ggx_cuda_strip_prepare(ctx, t, groups);
        if (st != GGX_STATUS_OK) return bail(st);
    }
    return GGX_STATUS_OK;
}

std::vector<int4> ggx_cuda_group_table(const std::vector<std::pair<int, int>> & groups) {
    std::vector<int4> gtab;
    int k = 0, qrow = 0;
    for (const auto & g : groups) {
        gtab.push_back(make_int4(k, qrow, g.first, g.second));
        k += g.second;
        qrow += g.second * g.first / 32;
    }
    return gtab;
}

void ggx_cuda_build_piece_tables(const std::vector<int4> & gtab, int K, int join_bits, int across_bits,
                                 ggx_cuda_piece_tables * t, int (*run_cost)[GGX_QGEMV_MAX_RUN + 1]) {
    ggx_cuda_list_pieces(gtab, K, false, 0, 0, &t->pieces, &t->first);
    ggx_cuda_list_pieces(gtab, K, true, join_bits, across_bits, &t->pieces2, &t->first2);
    ggx_cuda_piece_heads(t->pieces, t->first, &t->heads);
    ggx_cuda_piece_heads(t->pieces2, t->first2, &t->heads2);
    ggx_cuda_qgemv_run_costs(t->pieces, t->first, t->pieces2, t->first2, run_cost);
}

void ggx_cuda_piece_heads(const std::vector<int4> & pieces, const std::vector<int> & first, std::vector<int4> * heads) {
    heads->clear();
    const int n = (int)pieces.size();
    for (const int f : first) {
        for (int i = 0; i < 3; i++) heads->push_back(n > 0 ? pieces[std::min(f + i, n - 1)] : make_int4(0, 0, 0, 0));
        const int4 before = f > 0 ? pieces[f - 1] : make_int4(0, 0, 0, 0);
        heads->push_back(make_int4(f, before.y + before.w * (before.z & 15) / 32, 0, 0));
    }
}

void ggx_cuda_list_pieces(const std::vector<int4> & gtab, int K, bool paired, int join_bits, int across_bits,
                          std::vector<int4> * pieces, std::vector<int> * first) {
    const int R = GGX_QGEMV_FINE_ROWS;
    const int n_slices = (K + R - 1) / R;
    pieces->clear();
    first->assign((size_t)n_slices + 1, 0);
    int g = 0;
    for (int s = 0; s < n_slices; s++) {
        (*first)[s] = (int)pieces->size();
        const int s0 = s * R, s1 = std::min(K, s0 + R);
        while (g < (int)gtab.size() && gtab[g].x + gtab[g].w <= s0) g++;
        for (int gg = g; gg < (int)gtab.size() && gtab[gg].x < s1; gg++) {
            const int a = std::max(s0, gtab[gg].x), b = std::min(s1, gtab[gg].x + gtab[gg].w);
            // pieces of at most 32 rows: the decode GEMV double-buffers whole pieces in registers
            for (int r = a; r < b; r += 32) {
                const int qrow = gtab[gg].y + (r - gtab[gg].x) * gtab[gg].z / 32;
                pieces->push_back(make_int4(r, qrow, (gg << 5) | gtab[gg].z, std::min(32, b - r)));
            }
        }
    }
    (*first)[n_slices] = (int)pieces->size();
    if (!paired) return;
    // Pairs of slices: the last piece of slice 2j and the first of slice 2j + 1 become one when
    // both are 32 rows of one group whose width is in join_bits (they are then contiguous in rows
    // and words; 64 rows of 2, 3 or 4 bits are 4, 6 or 8 words, within a piece's 8), or, for a
    // width in across_bits too, of two adjacent groups of that width (contiguous too: a group's
    // words follow the previous one's), marked by bit 4 of z, the second half scaled by the next
    // group.
    std::vector<int4> out;
    std::vector<int> out_first((size_t)(n_slices + 1) / 2 + 1);
    for (int j = 0; 2 * j < n_slices; j++) {
        out_first[j] = (int)out.size();
        const int p0 = (*first)[2 * j], p1 = (*first)[std::min(2 * j + 1, n_slices)], p2 = (*first)[std::min(2 * j + 2, n_slices)];
        for (int p = p0; p < p2; p++) {
            const int4 a = (*pieces)[p];
            if (p == p1 - 1 && p1 < p2) {
                const int4 b = (*pieces)[p1];
                const int bits = a.z & 15;
                const bool same = a.z == b.z;
                const bool next = (across_bits >> bits & 1) && (b.z & 15) == bits && (b.z >> 5) == (a.z >> 5) + 1 && b.y == a.y + bits;
                if ((join_bits >> bits & 1) && bits <= 4 && (same || next) && a.w == 32 && b.w == 32) {
                    out.push_back(make_int4(a.x, a.y, same ? a.z : a.z | 16, 64));
                    p++;
                    continue;
                }
            }
            out.push_back(a);
        }
    }
    out_first.back() = (int)out.size();
    pieces->swap(out);
    first->swap(out_first);
}

ggx_status ggx_cuda_exl2_host_groups(ggx_cuda_ctx & ctx, const ggx_qmatrix & q, std::vector<uint16_t> * groups) {
    groups->resize(2 * (size_t)q.n_groups);
    if (q.groups_host) {
        std::copy(q.groups_host, q.groups_host + groups->size(), groups->begin());
        return GGX_STATUS_OK;
    }
    GGX_CUDA_CHECK(cudaMemcpyAsync(groups->data(), q.q_groups, groups->size() * 2, cudaMemcpyDeviceToHost, ctx.stream));
    GGX_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    return GGX_STATUS_OK;
}

void ggx_cuda_layout_run_costs(const std::vector<std::pair<int, int>> & groups, int K, int (*run_cost)[GGX_QGEMV_MAX_RUN + 1]) {
    ggx_cuda_piece_tables tables;
    ggx_cuda_build_piece_tables(ggx_cuda_group_table(groups), K, paired_widths(), pair_group_widths(), &tables, run_cost);
}

void ggx_cuda_plan_matrix_init(ggx_cuda_plan_matrix & pm, int K, int N, const std::vector<std::pair<int, int>> * groups) {
    pm.q = {};
    pm.e = ggx_cuda_qextra();
    pm.q.K = K;
    pm.q.N = N;
    pm.q.Np = (N + 31) / 32 * 32;
    pm.e.slice_rows = GGX_QGEMV_FINE_ROWS;
    pm.e.n_slices = (K + GGX_QGEMV_FINE_ROWS - 1) / GGX_QGEMV_FINE_ROWS;
    if (groups) {
        ggx_cuda_layout_run_costs(*groups, K, pm.e.run_cost);
        for (const auto & g : *groups) pm.q.qrows += g.second * g.first / 32;   // (bits, rows): packed word rows
    }
    pm.q.backend_extra = &pm.e;
}

void ggx_cuda_qmatrix_release(ggx_cuda_ctx & ctx, ggx_tensor * t) {
    ggx_qmatrix * q = (ggx_qmatrix *)t->extra;
    if (!q || !q->backend_extra) return;
    qextra * e = (qextra *)q->backend_extra;
    (void)cudaStreamSynchronize(ctx.stream);
    (void)cudaFree(e->pieces);
    (void)cudaFree(e->groups);
    (void)cudaFree(e->pieces2);
    (void)cudaFree(e->heads);
    (void)cudaFree(e->heads2);
    (void)cudaFree(e->norm_wp);
    ggx_cuda_strip_release(e);
    ggx_cuda_tile_release(e);
    delete e;
    q->backend_extra = nullptr;
}

size_t ggx_cuda_qmatmul_scratch(const ggx_cuda_ctx & ctx, const ggx_tensor * dst) {
    const ggx_qmatrix * q = (const ggx_qmatrix *)dst->src[0]->extra;
    const int64_t T = ggx_nrows(dst->src[1]);
    if (T <= GGX_CUDA_QGEMV_MAX_T) {   // the GPTQ GEMV's partials when the sums must repeat
        const qextra * e = dst->src[0]->type == GGX_TYPE_GPTQ ? (const qextra *)q->backend_extra : nullptr;
        return ctx.deterministic && e ? (size_t)e->n_slices * T * q->N * sizeof(float) : 0;
    }
    return (((size_t)T * q->K * 2 + 255) & ~(size_t)255) + round8(prefill_cols(q)) * q->K * 2;
}

template <template <int> class K, typename... Args>
static void launch_t(int T, dim3 grid, cudaStream_t s, Args... args) {
    switch (T) {
        case 1: K<1>::launch(grid, s, args...); break;
        case 2: K<2>::launch(grid, s, args...); break;
        case 3: K<3>::launch(grid, s, args...); break;
        case 4: K<4>::launch(grid, s, args...); break;
        case 5: K<5>::launch(grid, s, args...); break;
        case 6: K<6>::launch(grid, s, args...); break;
        case 7: K<7>::launch(grid, s, args...); break;
        default: K<8>::launch(grid, s, args...); break;
    }
}
template <int T> struct gptq_gemv_l {
    template <typename... A> static void launch(dim3 g, cudaStream_t s, A... a) { k_gptq_gemv<T><<<g, k_gemv_threads, 0, s>>>(a...); }
};

// The node's scratch (ggx_cuda_qmatmul_scratch bytes at its start), or null with the error set when
// the buffer prepared for the graph is smaller.
static void * qmatmul_scratch_at(const ggx_cuda_ctx & ctx, const ggx_tensor * dst) {
    const size_t need = ggx_cuda_qmatmul_scratch(ctx, dst);
    if (ctx.scratch_size >= need) return ctx.scratch;
    ggx_set_error("cuda: scratch too small for %s (%zu < %zu)", dst->src[0]->name, ctx.scratch_size, need);
    return nullptr;
}

bool ggx_cuda_qmatmul_is_prefill(const ggx_tensor * dst) {
    return dst->op == GGX_OP_MUL_MAT && dst->src[0]->extra && ggx_nrows(dst->src[1]) > GGX_CUDA_QGEMV_MAX_T &&
           (dst->src[0]->type == GGX_TYPE_EXL2 || dst->src[0]->type == GGX_TYPE_GPTQ);
}

ggx_status ggx_cuda_op_qmatmul(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const ggx_tensor * w = dst->src[0];
    const ggx_tensor * xt = dst->src[1];
    const ggx_qmatrix * q = (const ggx_qmatrix *)w->extra;
    qextra * e = get_extra(w);
    if (!e) { ggx_set_error("cuda: %s: quantized matrix not prepared for this backend", w->name); return GGX_STATUS_FAILED; }
    const int64_t T = ggx_nrows(xt);
    const int K = q->K, N = q->N;
    const float * x = (const float *)xt->data;
    float * y = (float *)dst->data;
    if (T == 0) return GGX_STATUS_OK;
    const bool exl2 = w->type == GGX_TYPE_EXL2;

    if (T <= GGX_CUDA_QGEMV_MAX_T && exl2) {   // decode, unfused (fusion.cu fuses where it can)
        return ggx_cuda_qgemv_run(ctx, ggx_cuda_qgemv_single(dst));
    }
    if (T <= GGX_CUDA_QGEMV_MAX_T) {
        // the K-slices add into a zeroed y in whatever order they finish, or, for results that
        // repeat bit for bit, store their partials for one in-order sum
        float * partial = nullptr;
        if (ctx.deterministic) {
            partial = (float *)qmatmul_scratch_at(ctx, dst);
            if (!partial) return GGX_STATUS_FAILED;
        } else {
            GGX_CUDA_CHECK(cudaMemsetAsync(y, 0, (size_t)T * N * sizeof(float), ctx.stream));
        }
        dim3 grid((N + k_cols_per_block - 1) / k_cols_per_block, e->n_slices);
        launch_t<gptq_gemv_l>((int)T, grid, ctx.stream, (const uint32_t *)q->q_weight, (const uint32_t *)q->qzeros,
                              (const half *)q->scales, (const int32_t *)q->q_perm, x, y, K, N, e->slice_rows, q->group_size,
                              partial);
        GGX_CUDA_LAUNCH_CHECK();
        if (partial) {
            const int64_t n = T * N;
            const unsigned blocks = (unsigned)std::min<int64_t>((n + 255) / 256, 4 * ctx.n_sm);
            k_sum_slices<<<blocks, 256, 0, ctx.stream>>>(partial, e->n_slices, n, y);
            GGX_CUDA_LAUNCH_CHECK();
        }
        return GGX_STATUS_OK;
    }

    // prefill: x16 = f16(x) once, then per column slice: dequantize (rows permuted), GEMM into y[:, n0:n0+nc]
    half * x16 = (half *)qmatmul_scratch_at(ctx, dst);
    if (!x16) return GGX_STATUS_FAILED;
    half * w16 = (half *)((char *)x16 + (((size_t)T * K * 2 + 255) & ~(size_t)255));
    if (ctx.x16_of != xt) {   // else the previous matmul read the same x (run_nodes keeps this honest)
        const int64_t nx = T * K;
        const unsigned cblocks = (unsigned)std::min<int64_t>((nx / 4 + 255) / 256, 8 * ctx.n_sm);
        if (ggx_aligned16(x) && nx % 4 == 0) {
            k_to_f16<<<cblocks, 256, 0, ctx.stream>>>((const float4 *)x, x16, nx / 4);
        } else {
            k_to_f16_scalar<<<cblocks, 256, 0, ctx.stream>>>(x, x16, nx);
        }
        GGX_CUDA_LAUNCH_CHECK();
        ctx.x16_of = xt;
    }
    const int nc_max = (int)prefill_cols(q);
    for (int n0 = 0; n0 < N; n0 += nc_max) {
        const int nc = std::min(nc_max, N - n0);
        const int ldw = (int)round8(nc);   // n0 + ldw <= Np (EXL2) / N (GPTQ): the 8-column tails stay in bounds
        const dim3 grid((ldw / 8 + k_dq_threads - 1) / k_dq_threads, (K + k_dq_rows - 1) / k_dq_rows);
        if (exl2) {
            k_exl2_dequant<<<grid, k_dq_threads, 0, ctx.stream>>>(q->q_weight, q->q_scale, (const half *)q->q_scale_max,
                                                                 e->groups, q->n_groups, q->q_perm, w16, K, q->Np, n0, ldw);
        } else {
            k_gptq_dequant<<<grid, k_dq_threads, 0, ctx.stream>>>(q->q_weight, q->qzeros, (const half *)q->scales,
                                                                 q->q_perm, w16, K, N, q->group_size, n0, ldw);
        }
        GGX_CUDA_LAUNCH_CHECK();
        // column-major view: y[n0.., t] (nc x T, ld N) = W16 (nc x K, ld ldw) * x16 (K x T, ld K)
        GGX_RETURN_IF_ERR(ggx_cuda_gemm(ctx, false, nc, (int)T, K, w16, GGX_TYPE_F16, ldw, x16, K, y + n0, N));
    }
    return GGX_STATUS_OK;
}

// What a warp group's walk over one piece costs, in hundredths of a row of a 64-row 4-bit piece.
// Run 151's traces (H100, tg128@16, loop medians per row of a group's run) give a 4-bit piece a
// fixed part as large as ~55 rows: q/k/v at 4.0 bpw took 0.036 us per row in 32-row pieces against
// 0.025 in 64-row ones, i.e. 29 + 17 / 32 per row in those units (46 for 32 rows, 63 for 64). Every
// other width costs its rows alone, at 32-row 4-bit's rate: 2.5 bpw (no pair joined: its 3- and
// 2-bit groups start at odd fine slices) measured 0.037 us per row in 32-row pieces, and joined
// 3-bit pairs gained nothing (3.0 bpw, runs 150 and 153). Wider pieces are not charged for their
// bytes: a plan that did so (8-bit runs as stragglers) lost 5% on qwen2.5-7b at 3.5 and 4.25 bpw
// (run 153).
static int piece_cost(int bits, int rows) { return bits == 4 ? 2900 + rows * 53 : rows * 4600 / 32; }

void ggx_cuda_qgemv_run_costs(const std::vector<int4> & pieces, const std::vector<int> & first,
                              const std::vector<int4> & pieces2, const std::vector<int> & first2,
                              int (*run_cost)[GGX_QGEMV_MAX_RUN + 1]) {
    // costs of each table's units (fine slices, pairs of them), summed over runs of m slices
    auto unit_costs = [](const std::vector<int4> & pc, const std::vector<int> & f) {
        std::vector<int64_t> c(f.size() - 1, 0);
        for (size_t u = 0; u + 1 < f.size(); u++)
            for (int p = f[u]; p < f[u + 1]; p++) c[u] += piece_cost(pc[p].z & 15, pc[p].w);
        return c;
    };
    const std::vector<int64_t> single = unit_costs(pieces, first), paired = unit_costs(pieces2, first2);
    for (int m = 1; m <= GGX_QGEMV_MAX_RUN; m++)
        for (int table = 0; table < 2; table++) {
            // the paired table serves even runs only (a warp group owns whole pairs)
            const bool pairs = table == 1 && m % 2 == 0;
            const std::vector<int64_t> & c = pairs ? paired : single;
            const int per_run = pairs ? m / 2 : m;
            int64_t worst = 0, total = 0, runs = 0;
            for (size_t u0 = 0; u0 < c.size(); u0 += per_run, runs++) {
                int64_t run = 0;
                for (size_t u = u0; u < std::min(c.size(), u0 + per_run); u++) run += c[u];
                worst = std::max(worst, run);
                total += run;
            }
            run_cost[table][m] = (int)((worst + 99) / 100);
            run_cost[2 + table][m] = (int)((total / std::max<int64_t>(1, runs) + 99) / 100);
        }
}
