// Shared graph builders used by the architectures in models/.
#include "architecture.h"

#include <cmath>

namespace exl2 {

void GraphBuilder::name(ggx_tensor * t, const char * what, int il) const {
    if (il >= 0) ggx_set_name(t, "%s-%d", what, il);
    else ggx_set_name(t, "%s", what);
}

ggx_tensor * GraphBuilder::rms_norm(ggx_tensor * x, ggx_tensor * w, float eps, const char * what, int il) {
    ggx_tensor * t = ggx_rms_norm(ctx, x, w, eps);
    name(t, what, il);
    return t;
}

ggx_tensor * GraphBuilder::layer_norm(ggx_tensor * x, ggx_tensor * w, ggx_tensor * b, float eps, const char * what, int il) {
    ggx_tensor * t = ggx_layer_norm(ctx, x, w, b, eps);
    name(t, what, il);
    return t;
}

ggx_tensor * GraphBuilder::linear(ggx_tensor * x, const Linear & l, const char * what, int il) {
    ggx_tensor * t = ggx_mul_mat(ctx, l.w, x);
    if (l.b) t = ggx_add(ctx, t, l.b);
    name(t, what, il);
    return t;
}

ggx_tensor * GraphBuilder::rope(ggx_tensor * x, int n_rot, ggx_rope_mode mode) {
    ggx_params_rope p = {};
    p.n_rot = n_rot;
    p.mode = mode;
    p.theta = rope_theta;
    p.pos_scale = rope_pos_scale;
    p.attn_factor = rope_attn_factor;
    p.ext_factor = 0.0f;   // YaRN and friends are folded into freq_div/attn_factor on the host
    p.beta_fast = 32.0f;
    p.beta_slow = 1.0f;
    p.n_ctx_orig = cfg->rope.orig_ctx;
    return ggx_rope(ctx, x, pos, freq_div, p);
}

ggx_tensor * GraphBuilder::attention(ggx_tensor * x, const Linear & wq, const Linear & wk, const Linear & wv,
                                     const Linear & wo, int il, ggx_rope_mode mode) {
    const int64_t hd = cfg->head_dim, H = cfg->n_head, Hkv = cfg->n_head_kv, T = n_tokens;
    ggx_tensor * q = linear(x, wq, "q", il);
    ggx_tensor * k = linear(x, wk, "k", il);
    ggx_tensor * v = linear(x, wv, "v", il);
    q = rope(ggx_reshape_3d(ctx, q, hd, H, T), cfg->n_rot(), mode);
    k = rope(ggx_reshape_3d(ctx, k, hd, Hkv, T), cfg->n_rot(), mode);
    name(q, "q_rope", il);
    name(k, "k_rope", il);
    ggx_tensor * kc = ggx_kv_store(ctx, ggx_reshape_2d(ctx, k, hd * Hkv, T), k_cache[il], pos);
    ggx_tensor * vc = ggx_kv_store(ctx, v, v_cache[il], pos);
    const int64_t C = k_cache[il]->ne[1];
    kc = ggx_reshape_3d(ctx, kc, hd, Hkv, C);
    vc = ggx_reshape_3d(ctx, vc, hd, Hkv, C);
    ggx_params_attn ap = {};
    ap.scale = 1.0f / std::sqrt((float)hd);
    ap.softcap = cfg->attn_softcap;
    ap.window = 0;
    ap.non_causal = non_causal ? 1 : 0;
    ggx_tensor * a = ggx_attn(ctx, q, kc, vc, pos, ap);
    name(a, "attn", il);
    a = ggx_reshape_2d(ctx, a, hd * H, T);
    return linear(a, wo, "attn_out", il);
}

ggx_tensor * GraphBuilder::ffn_gated(ggx_tensor * x, const Linear & gate, const Linear & up, const Linear & down,
                                     ggx_act act, int il) {
    ggx_tensor * g = linear(x, gate, "ffn_gate", il);
    ggx_tensor * u = linear(x, up, "ffn_up", il);
    ggx_tensor * h = ggx_glu(ctx, g, u, act);
    name(h, "ffn_act", il);
    return linear(h, down, "ffn_out", il);
}

ggx_tensor * GraphBuilder::logits(ggx_tensor * x, const Linear & head) {
    if (!all_logits && n_tokens > 1) x = ggx_view_rows(ctx, x, n_tokens - 1, 1);
    ggx_tensor * t = linear(x, head, "logits", -1);
    if (cfg->final_softcap > 0) t = ggx_softcap(ctx, t, cfg->final_softcap);
    return t;
}

}  // namespace exl2
