// Llama family: Llama 1/2/3/3.1/3.2, Mistral, and Qwen2 (q/k/v biases), all pre-norm decoder
// blocks with RMSNorm, rotary attention (rotate-half) with GQA and a SiLU-gated MLP.
//
//   x = embed(ids)
//   per layer: x += o(attn(rope(q(n1(x))), rope(k(n1(x))), v(n1(x))));  x += down(silu(gate(n2(x))) * up(n2(x)))
//   logits = head(norm(x))          (head tied to the embeddings when lm_head is absent and allowed)
#include "exl2/architecture.h"
#include "exl2/error.h"

namespace exl2 {
namespace {

struct LlamaLayer {
    ggx_tensor * attn_norm = nullptr;
    ggx_tensor * ffn_norm = nullptr;
    Linear q, k, v, o, gate, up, down;
};

class Llama : public Architecture {
public:
    explicit Llama(bool qkv_bias) : qkv_bias_(qkv_bias) {}
    const char * family() const override { return qkv_bias_ ? "qwen2" : "llama"; }

    void load(Model & m) override {
        const ModelConfig & c = m.cfg;
        const int64_t D = c.n_embd, F = c.n_ff, V = c.n_vocab;
        const int64_t Dq = (int64_t)c.n_head * c.head_dim, Dkv = (int64_t)c.n_head_kv * c.head_dim;
        const bool attn_bias = qkv_bias_ || c.attention_bias;
        tok_embd_ = m.tensor("model.embed_tokens.weight", {D, V});
        layers_.resize(c.n_layer);
        for (int il = 0; il < c.n_layer; il++) {
            const std::string p = "model.layers." + std::to_string(il) + ".";
            LlamaLayer & L = layers_[il];
            L.attn_norm = m.tensor(p + "input_layernorm.weight", {D});
            L.q = m.linear(p + "self_attn.q_proj", D, Dq, attn_bias);
            L.k = m.linear(p + "self_attn.k_proj", D, Dkv, attn_bias);
            L.v = m.linear(p + "self_attn.v_proj", D, Dkv, attn_bias);
            L.o = m.linear(p + "self_attn.o_proj", Dq, D, c.attention_bias && !qkv_bias_);
            L.ffn_norm = m.tensor(p + "post_attention_layernorm.weight", {D});
            m.gated_mlp(p + "mlp.", D, F, c.mlp_bias, L.gate, L.up, L.down);
        }
        out_norm_ = m.tensor("model.norm.weight", {D});
        // EXL2 files always carry lm_head; HF checkpoints with tied embeddings do not.
        const bool has_head = m.has_tensor("lm_head.weight") || m.has_tensor("lm_head.q_weight") || m.has_tensor("lm_head.qweight");
        if (has_head || !c.tie_embeddings) head_ = m.linear("lm_head", D, V);
        else head_.w = tok_embd_;
    }

    ggx_tensor * build(GraphBuilder & gb) override {
        const ModelConfig & c = *gb.cfg;
        ggx_tensor * x = ggx_get_rows(gb.ctx, tok_embd_, gb.ids);
        gb.name(x, "embd", -1);
        for (int il = 0; il < c.n_layer; il++) {
            const LlamaLayer & L = layers_[il];
            ggx_tensor * h = gb.rms_norm(x, L.attn_norm, c.norm_eps, "attn_norm", il);
            h = gb.attention(h, L.q, L.k, L.v, L.o, il, GGX_ROPE_NEOX);
            x = ggx_add(gb.ctx, x, h);
            gb.name(x, "after_attn", il);
            h = gb.rms_norm(x, L.ffn_norm, c.norm_eps, "ffn_norm", il);
            h = gb.ffn_gated(h, L.gate, L.up, L.down, GGX_ACT_SILU, il);
            x = ggx_add(gb.ctx, x, h);
            gb.name(x, "after_mlp", il);
        }
        x = gb.rms_norm(x, out_norm_, c.norm_eps, "out_norm", -1);
        return gb.logits(x, head_);
    }

private:
    bool qkv_bias_;
    ggx_tensor * tok_embd_ = nullptr;
    ggx_tensor * out_norm_ = nullptr;
    Linear head_;
    std::vector<LlamaLayer> layers_;
};

}  // namespace

std::unique_ptr<Architecture> create_llama(const ModelConfig &) { return std::make_unique<Llama>(false); }
std::unique_ptr<Architecture> create_qwen2(const ModelConfig &) { return std::make_unique<Llama>(true); }

}  // namespace exl2
