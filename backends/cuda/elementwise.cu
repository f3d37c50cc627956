// Element-wise ops. One thread per element, grid-stride loops; all tensors contiguous.
// Broadcast rule (ggx.h): src1 has as many elements as src0, or one row of ne0 elements.
#include "elementwise.cuh"

#include "activation.cuh"

#include <math.h>
#include <type_traits>

namespace {

enum binop { BIN_ADD, BIN_MUL };
enum unop { UN_SCALE, UN_SILU, UN_GELU, UN_SOFTCAP };

template <binop OP, typename TB>
__global__ void k_binary(const float * __restrict__ a,   // [n]
                         const TB * __restrict__ b,      // [n] or [nb] repeated
                         float * __restrict__ y, int64_t n, int64_t nb) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float bv = ggx_load_f(b, nb == n ? i : i % nb);
        y[i] = OP == BIN_ADD ? a[i] + bv : a[i] * bv;
    }
}

// The same for n % 4 == 0 and 16-byte aligned operands (nb % 4 == 0): prefill's residual adds
// (2048 x 4096) moved ~2.2 TB/s with 4-byte accesses.
template <binop OP, typename TB>
__global__ void k_binary4(const float4 * __restrict__ a, const TB * __restrict__ b, float4 * __restrict__ y, int64_t n4, int64_t nb4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = 4 * (nb4 == n4 ? i : i % nb4);
        const float4 av = a[i];
        float b0, b1, b2, b3;
        if constexpr (std::is_same<TB, float>::value) {
            const float4 bv = *(const float4 *)(b + j);
            b0 = bv.x; b1 = bv.y; b2 = bv.z; b3 = bv.w;
        } else {
            b0 = ggx_load_f(b, j); b1 = ggx_load_f(b, j + 1); b2 = ggx_load_f(b, j + 2); b3 = ggx_load_f(b, j + 3);
        }
        y[i] = OP == BIN_ADD ? make_float4(av.x + b0, av.y + b1, av.z + b2, av.w + b3)
                             : make_float4(av.x * b0, av.y * b1, av.z * b2, av.w * b3);
    }
}

template <unop OP>
__global__ void k_unary(const float * __restrict__ a, float * __restrict__ y, int64_t n, float p) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = a[i];
        float r;
        switch (OP) {
            case UN_SCALE:   r = x * p; break;
            case UN_SILU:    r = silu_f(x); break;
            case UN_GELU:    r = gelu_f(x); break;
            case UN_SOFTCAP: r = p * tanhf(x / p); break;
        }
        y[i] = r;
    }
}

// TY: float, or half when the result only feeds prefill matmuls (see ggx_cuda_op_glu). y may be
// g itself (the planner puts a GLU's result in its gate's memory), so neither is __restrict__.
template <int ACT, typename TY>
__global__ void k_glu(const float * g, const float * __restrict__ u, TY * y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float a = ACT == GGX_ACT_SILU ? silu_f(g[i]) : gelu_f(g[i]);
        ggx_store_f(y, i, a * u[i]);
    }
}

template <int ACT, typename TY>
__global__ void k_glu4(const float4 * g, const float4 * __restrict__ u, TY * y, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 gv = g[i], uv = u[i];
        auto act = [](float v) { return ACT == GGX_ACT_SILU ? silu_f(v) : gelu_f(v); };
        ggx_store_f4(y, i, make_float4(act(gv.x) * uv.x, act(gv.y) * uv.y, act(gv.z) * uv.z, act(gv.w) * uv.w));
    }
}

template <typename TS, typename TD>
__global__ void k_cpy(const TS * __restrict__ a, TD * __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        ggx_store_f(y, i, ggx_load_f(a, i));
}

unsigned grid_for(int64_t n) {
    const int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

}  // namespace

bool ggx_cuda_supports_elementwise(const ggx_tensor * dst) {
    const ggx_tensor * a = dst->src[0];
    const ggx_tensor * b = dst->src[1];
    switch (dst->op) {
        case GGX_OP_ADD:
        case GGX_OP_MUL:
            return a->type == GGX_TYPE_F32 && ggx_cuda_is_ftype(b->type) &&
                   (ggx_nelements(b) == ggx_nelements(a) || (b->ne[0] == a->ne[0] && ggx_nrows(b) == 1));
        case GGX_OP_SCALE:
        case GGX_OP_SILU:
        case GGX_OP_GELU:
        case GGX_OP_SOFTCAP:
            return a->type == GGX_TYPE_F32;
        case GGX_OP_GLU:
            return a->type == GGX_TYPE_F32 && b->type == GGX_TYPE_F32 && ggx_nelements(a) == ggx_nelements(b) &&
                   (dst->params.glu.act == GGX_ACT_SILU || dst->params.glu.act == GGX_ACT_GELU);
        case GGX_OP_CPY:
            return ggx_cuda_is_ftype(a->type) && ggx_cuda_is_ftype(dst->type);
        default:
            return false;
    }
}

ggx_status ggx_cuda_op_binary(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const ggx_tensor * a = dst->src[0];
    const ggx_tensor * b = dst->src[1];
    const int64_t n = ggx_nelements(dst), nb = ggx_nelements(b);
    const bool add = dst->op == GGX_OP_ADD;
    const bool vec = n % 4 == 0 && nb % 4 == 0 && ggx_aligned16(a->data) && ggx_aligned16(dst->data) &&
                     ((uintptr_t)b->data % (4 * ggx_type_size(b->type))) == 0;
    ggx_cuda_dispatch_ftype(b->type, b->data, [&](auto bp) {
        using TB = std::remove_const_t<std::remove_pointer_t<decltype(bp)>>;
        if (vec) {
            const unsigned g = grid_for(n / 4);
            if (add) k_binary4<BIN_ADD, TB><<<g, 256, 0, ctx.stream>>>((const float4 *)a->data, bp, (float4 *)dst->data, n / 4, nb / 4);
            else     k_binary4<BIN_MUL, TB><<<g, 256, 0, ctx.stream>>>((const float4 *)a->data, bp, (float4 *)dst->data, n / 4, nb / 4);
            return;
        }
        if (add) k_binary<BIN_ADD, TB><<<grid_for(n), 256, 0, ctx.stream>>>((const float *)a->data, bp, (float *)dst->data, n, nb);
        else     k_binary<BIN_MUL, TB><<<grid_for(n), 256, 0, ctx.stream>>>((const float *)a->data, bp, (float *)dst->data, n, nb);
    });
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}

ggx_status ggx_cuda_op_unary(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const float * a = (const float *)dst->src[0]->data;
    float * y = (float *)dst->data;
    const int64_t n = ggx_nelements(dst);
    const unsigned g = grid_for(n);
    switch (dst->op) {
        case GGX_OP_SCALE:   k_unary<UN_SCALE><<<g, 256, 0, ctx.stream>>>(a, y, n, dst->params.scale.s); break;
        case GGX_OP_SILU:    k_unary<UN_SILU><<<g, 256, 0, ctx.stream>>>(a, y, n, 0.0f); break;
        case GGX_OP_GELU:    k_unary<UN_GELU><<<g, 256, 0, ctx.stream>>>(a, y, n, 0.0f); break;
        case GGX_OP_SOFTCAP: k_unary<UN_SOFTCAP><<<g, 256, 0, ctx.stream>>>(a, y, n, dst->params.softcap.cap); break;
        default: ggx_set_error("cuda: %s is not a unary op", ggx_op_name(dst->op)); return GGX_STATUS_UNSUPPORTED;
    }
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}

ggx_status ggx_cuda_op_glu(ggx_cuda_ctx & ctx, ggx_tensor * dst, half * x16) {
    const float * g = (const float *)dst->src[0]->data;
    const float * u = (const float *)dst->src[1]->data;
    const int64_t n = ggx_nelements(dst);
    const bool silu = dst->params.glu.act == GGX_ACT_SILU;
    auto launch = [&](auto * y) {
        using TY = std::remove_pointer_t<decltype(y)>;
        if (n % 4 == 0 && ggx_aligned16(g) && ggx_aligned16(u) && ggx_aligned16(y)) {
            const float4 * g4 = (const float4 *)g, * u4 = (const float4 *)u;
            if (silu) k_glu4<GGX_ACT_SILU, TY><<<grid_for(n / 4), 256, 0, ctx.stream>>>(g4, u4, y, n / 4);
            else      k_glu4<GGX_ACT_GELU, TY><<<grid_for(n / 4), 256, 0, ctx.stream>>>(g4, u4, y, n / 4);
        } else {
            if (silu) k_glu<GGX_ACT_SILU, TY><<<grid_for(n), 256, 0, ctx.stream>>>(g, u, y, n);
            else      k_glu<GGX_ACT_GELU, TY><<<grid_for(n), 256, 0, ctx.stream>>>(g, u, y, n);
        }
    };
    if (x16) launch(x16);
    else     launch((float *)dst->data);
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}

ggx_status ggx_cuda_op_cpy(ggx_cuda_ctx & ctx, ggx_tensor * dst) {
    const ggx_tensor * a = dst->src[0];
    const int64_t n = ggx_nelements(dst);
    bool ok = ggx_cuda_dispatch_ftype(a->type, a->data, [&](auto ap) {
        switch (dst->type) {
            case GGX_TYPE_F32:  k_cpy<<<grid_for(n), 256, 0, ctx.stream>>>(ap, (float *)dst->data, n); break;
            case GGX_TYPE_F16:  k_cpy<<<grid_for(n), 256, 0, ctx.stream>>>(ap, (half *)dst->data, n); break;
            case GGX_TYPE_BF16: k_cpy<<<grid_for(n), 256, 0, ctx.stream>>>(ap, (nv_bfloat16 *)dst->data, n); break;
            default: break;
        }
    });
    if (!ok || !ggx_cuda_is_ftype(dst->type)) {
        ggx_set_error("cuda: cpy %s -> %s unsupported", ggx_type_name(a->type), ggx_type_name(dst->type));
        return GGX_STATUS_UNSUPPORTED;
    }
    GGX_CUDA_LAUNCH_CHECK();
    return GGX_STATUS_OK;
}
