// GEMM routing (see gemm.cuh).
#include "gemm.cuh"

namespace {

#if defined(GGX_NO_BLAS)
// C[i + j*ldc] = sum_l A'(i, l) * B[l + j*ldb], A'(i, l) = trans ? A[l + i*lda] : A[i + l*lda].
// 16x16 output tile per block, k in steps of 16 through shared memory.
template <typename TA>
__global__ void k_gemm_fallback(bool trans, int m, int n, int k, const TA * __restrict__ A, int lda,
                                const TA * __restrict__ B, int ldb, float * __restrict__ C, int ldc) {
    __shared__ float as[16][17], bs[16][17];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int i = blockIdx.x * 16 + tx, j = blockIdx.y * 16 + ty;
    float acc = 0.0f;
    for (int l0 = 0; l0 < k; l0 += 16) {
        const int ia = blockIdx.x * 16 + tx, la = l0 + ty;   // A'(ia, la)
        as[ty][tx] = (ia < m && la < k) ? ggx_load_f(A, trans ? (int64_t)la + (int64_t)ia * lda : (int64_t)ia + (int64_t)la * lda) : 0.0f;
        const int lb = l0 + tx, jb = blockIdx.y * 16 + ty;
        bs[ty][tx] = (lb < k && jb < n) ? ggx_load_f(B, (int64_t)lb + (int64_t)jb * ldb) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int l = 0; l < 16; l++) acc += as[l][tx] * bs[ty][l];
        __syncthreads();
    }
    if (i < m && j < n) C[(int64_t)i + (int64_t)j * ldc] = acc;
}
#endif  // GGX_NO_BLAS

}  // namespace

ggx_status ggx_cuda_gemm(ggx_cuda_ctx & ctx, bool trans_a, int m, int n, int k, const void * A, ggx_type type, int lda,
                         const void * B, int ldb, float * C, int ldc) {
#if defined(GGX_NO_BLAS)
    const dim3 grid((m + 15) / 16, (n + 15) / 16), block(16, 16);
    switch (type) {
        case GGX_TYPE_F32:  k_gemm_fallback<<<grid, block, 0, ctx.stream>>>(trans_a, m, n, k, (const float *)A, lda, (const float *)B, ldb, C, ldc); break;
        case GGX_TYPE_F16:  k_gemm_fallback<<<grid, block, 0, ctx.stream>>>(trans_a, m, n, k, (const half *)A, lda, (const half *)B, ldb, C, ldc); break;
        case GGX_TYPE_BF16: k_gemm_fallback<<<grid, block, 0, ctx.stream>>>(trans_a, m, n, k, (const nv_bfloat16 *)A, lda, (const nv_bfloat16 *)B, ldb, C, ldc); break;
        default: ggx_set_error("cuda: gemm on %s", ggx_type_name(type)); return GGX_STATUS_UNSUPPORTED;
    }
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
#else
    const float alpha = 1.0f, beta = 0.0f;
    const cudaDataType_t dt = type == GGX_TYPE_F32 ? CUDA_R_32F : type == GGX_TYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
    GGX_CUBLAS_CHECK(cublasGemmEx(ctx.cublas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, A, dt, lda,
                                  B, dt, ldb, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return GGX_STATUS_OK;
#endif  // GGX_NO_BLAS
}
