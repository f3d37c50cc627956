// What the CPU kernels accept (types, shapes, strides) and how much scratch they need. Kept apart
// from the kernels so the whole contract of the backend reads in one place.
#include "cpu-common.h"
#include "cpu-convert.h"
#include "cpu-ops.h"

namespace ggx_cpu {

namespace {

bool is_quant(const ggx_tensor * t) {
    const ggx_type_traits * tr = ggx_type_get_traits(t->type);
    return tr && tr->is_quantized;
}
// Rows are dense (nb[0] is the element size); rows themselves may be strided.
bool dense_rows(const ggx_tensor * t) { return ggx_type_size(t->type) != 0 && t->nb[0] == ggx_type_size(t->type); }
bool is_f32(const ggx_tensor * t) { return t->type == GGX_TYPE_F32 && dense_rows(t); }
bool is_i32_vec(const ggx_tensor * t, int64_t n) {
    return t->type == GGX_TYPE_I32 && ggx_is_contiguous(t) && ggx_nelements(t) == n;
}
bool same_shape(const ggx_tensor * a, const ggx_tensor * b) {
    for (int i = 0; i < GGX_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i]) return false;
    return true;
}
bool float_rows(const ggx_tensor * t) { return is_float_type(t->type) && dense_rows(t); }
// A {D} vector (weight, bias) for rows of length d.
bool is_vec(const ggx_tensor * t, int64_t d) { return float_rows(t) && t->ne[0] == d && ggx_nrows(t) == 1; }

const char * unary(const ggx_tensor * t) {
    const ggx_tensor * a = t->src[0];
    if (!a || !is_f32(a) || !is_f32(t)) return "source and result must be f32 with dense rows";
    if (!same_shape(a, t)) return "result shape differs from the source";
    return nullptr;
}

const char * binary(const ggx_tensor * t) {
    if (const char * why = unary(t)) return why;
    const ggx_tensor * a = t->src[0], * b = t->src[1];
    if (!b || !float_rows(b)) return "second source must be f32/f16/bf16 with dense rows";
    if (b->ne[0] != a->ne[0]) return "second source row length differs";
    if (!same_shape(a, b) && ggx_nrows(b) != 1) return "second source must have the same shape or one row";
    return nullptr;
}

const char * mul_mat(const ggx_tensor * t) {
    const ggx_tensor * w = t->src[0], * x = t->src[1];
    if (!w || !x) return "missing source";
    if (w->ne[2] != 1 || w->ne[3] != 1) return "weight must be 2-D";
    if (is_quant(w)) {
        if (!w->extra) return "quantized weight without its ggx_qmatrix descriptor";
    } else if (!float_rows(w)) {
        return "weight must be f32/f16/bf16 (dense rows) or EXL2/GPTQ";
    }
    if (!is_f32(x) || !rows_uniform(x)) return "activations must be f32 with uniformly strided rows";
    if (x->ne[0] != w->ne[0]) return "activation length differs from the weight's input features";
    if (!is_f32(t) || !rows_uniform(t)) return "result must be f32 with uniformly strided rows";
    if (t->ne[0] != w->ne[1] || ggx_nrows(t) != ggx_nrows(x)) return "result shape mismatch";
    return nullptr;
}

const char * norm(const ggx_tensor * t) {
    if (const char * why = unary(t)) return why;
    const int64_t d = t->src[0]->ne[0];
    if (t->src[1] && !is_vec(t->src[1], d)) return "weight must be a f32/f16/bf16 vector of the row length";
    if (t->op == GGX_OP_LAYER_NORM && t->src[2] && !is_vec(t->src[2], d))
        return "bias must be a f32/f16/bf16 vector of the row length";
    return nullptr;
}

const char * rope(const ggx_tensor * t) {
    if (const char * why = unary(t)) return why;
    const ggx_tensor * x = t->src[0];
    const ggx_params_rope & r = t->params.rope;
    if (x->ne[3] != 1) return "source must be 3-D {hd, H, T}";
    if (!t->src[1] || !is_i32_vec(t->src[1], x->ne[2])) return "positions must be a contiguous i32 vector of T";
    if (r.n_rot <= 0 || r.n_rot % 2 || r.n_rot > x->ne[0]) return "n_rot must be even and in (0, hd]";
    if (r.mode != GGX_ROPE_NEOX && r.mode != GGX_ROPE_INTERLEAVE) return "unknown rope mode";
    if (!(r.theta > 0)) return "theta must be positive";
    if (t->src[2] && !(t->src[2]->type == GGX_TYPE_F32 && ggx_is_contiguous(t->src[2]) &&
                       ggx_nelements(t->src[2]) >= r.n_rot / 2))
        return "frequency divisors must be a contiguous f32 vector of n_rot/2";
    if (r.ext_factor != 0 && r.n_ctx_orig <= 0) return "YaRN needs n_ctx_orig > 0";
    return nullptr;
}

const char * kv_store(const ggx_tensor * t) {
    const ggx_tensor * cur = t->src[0], * cache = t->src[1], * pos = t->src[2];
    if (!cur || !cache || !pos) return "missing source";
    if (cur->type != GGX_TYPE_F32 || !ggx_is_contiguous(cur)) return "source must be contiguous f32";
    if (!is_float_type(cache->type) || !ggx_is_contiguous(cache)) return "cache must be contiguous f32/f16/bf16";
    if (t->type != cache->type || t->data != cache->data) return "result must be the cache itself";
    if (pos->type != GGX_TYPE_I32 || !ggx_is_contiguous(pos)) return "positions must be contiguous i32";
    const int64_t T = ggx_nelements(pos);
    if (T <= 0 || ggx_nelements(cur) % T) return "source size is not a multiple of the number of positions";
    const int64_t row = ggx_nelements(cur) / T;
    if (ggx_nelements(cache) % row) return "cache size is not a multiple of the source row";
    return nullptr;
}

const char * attn(const ggx_tensor * t) {
    const ggx_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2], * pos = t->src[3];
    if (!q || !k || !v || !pos) return "missing source";
    if (!is_f32(q) || q->ne[3] != 1) return "q must be f32 {hd, H, T} with dense rows";
    if (!is_f32(t) || !same_shape(q, t)) return "result must be f32 of q's shape";
    if (!float_rows(k) || !float_rows(v) || k->type != v->type) return "caches must be f32/f16/bf16 of one type";
    if (!same_shape(k, v) || k->ne[3] != 1) return "caches must both be {hd, Hkv, C}";
    if (k->ne[0] != q->ne[0]) return "cache head size differs from q's";
    if (k->ne[1] <= 0 || q->ne[1] % k->ne[1]) return "q heads must be a multiple of kv heads";
    if (!is_i32_vec(pos, q->ne[2])) return "positions must be a contiguous i32 vector of T";
    if (t->params.attn.window < 0) return "window must be >= 0";
    return nullptr;
}

}  // namespace

const char * unsupported_reason(const ggx_tensor * t) {
    switch (t->op) {
        case GGX_OP_GET_ROWS: {
            const ggx_tensor * tab = t->src[0], * ids = t->src[1];
            if (!tab || !ids) return "missing source";
            if (!float_rows(tab) || tab->ne[2] != 1 || tab->ne[3] != 1) return "table must be 2-D f32/f16/bf16";
            if (!is_i32_vec(ids, ggx_nrows(t))) return "ids must be a contiguous i32 vector, one per result row";
            if (!is_f32(t) || t->ne[0] != tab->ne[0]) return "result must be f32 rows of the table's width";
            return nullptr;
        }
        case GGX_OP_MUL_MAT: return mul_mat(t);
        case GGX_OP_ADD:
        case GGX_OP_MUL: return binary(t);
        case GGX_OP_SCALE:
        case GGX_OP_SILU:
        case GGX_OP_GELU:
        case GGX_OP_SOFTMAX:
        case GGX_OP_SOFTCAP: return unary(t);
        case GGX_OP_GLU: {
            if (const char * why = unary(t)) return why;
            if (!t->src[1] || !is_f32(t->src[1]) || !same_shape(t->src[0], t->src[1])) return "up must be f32 of gate's shape";
            if (t->params.glu.act != GGX_ACT_SILU && t->params.glu.act != GGX_ACT_GELU) return "unknown activation";
            return nullptr;
        }
        case GGX_OP_RMS_NORM:
        case GGX_OP_LAYER_NORM: return norm(t);
        case GGX_OP_ROPE: return rope(t);
        case GGX_OP_KV_STORE: return kv_store(t);
        case GGX_OP_ATTN: return attn(t);
        case GGX_OP_CPY: {
            const ggx_tensor * a = t->src[0];
            if (!a || !float_rows(a) || !float_rows(t)) return "source and result must be f32/f16/bf16 with dense rows";
            if (!same_shape(a, t)) return "shapes differ";
            return nullptr;
        }
        case GGX_OP_ARGMAX: {
            const ggx_tensor * a = t->src[0];
            if (!a || !is_f32(a)) return "source must be f32 with dense rows";
            if (!is_i32_vec(t, ggx_nrows(a))) return "result must be a contiguous i32 vector, one per source row";
            return nullptr;
        }
        case GGX_OP_NONE:
        case GGX_OP_COUNT: break;
    }
    return "unknown op";
}

size_t scratch_floats(const ggx_tensor * t, int nth) {
    (void)nth;
    switch (t->op) {
        case GGX_OP_ROPE: return rope_scratch_floats(t);
        case GGX_OP_ATTN: return attn_scratch_floats(t);
        case GGX_OP_RMS_NORM:
        case GGX_OP_LAYER_NORM: return norm_scratch_floats(t);
        case GGX_OP_ADD:
        case GGX_OP_MUL: return binary_scratch_floats(t);
        default: return 0;
    }
}

}  // namespace ggx_cpu
