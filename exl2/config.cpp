#include "config.h"
#include "error.h"

#include <cmath>
#include <sys/stat.h>

namespace exl2 {

namespace {

struct Reader {
    const Json & top;
    const Json * text;   // text_config, may be null
    const std::string & what;

    const Json * find(const char * key) const {
        const Json * v = top.find(key);
        if ((!v || v->is_null()) && text) v = text->find(key);
        return (v && !v->is_null()) ? v : nullptr;
    }
    const Json * find_any(std::initializer_list<const char *> keys, const char ** found = nullptr) const {
        for (const char * k : keys)
            if (const Json * v = find(k)) { if (found) *found = k; return v; }
        return nullptr;
    }
    int64_t int_of(const Json * v, const char * key) const {
        try { return v->as_int(); } catch (const Error & e) { fail("%s: field \"%s\": %s", what.c_str(), key, e.what()); }
    }
    double num_of(const Json * v, const char * key) const {
        try { return v->as_number(); } catch (const Error & e) { fail("%s: field \"%s\": %s", what.c_str(), key, e.what()); }
    }
    int req_int(std::initializer_list<const char *> keys) const {
        const char * k = nullptr;
        const Json * v = find_any(keys, &k);
        if (!v) fail("%s: missing field \"%s\"", what.c_str(), *keys.begin());
        int64_t x = int_of(v, k);
        if (x <= 0 || x > (1ll << 31) - 1) fail("%s: field \"%s\" = %lld is out of range", what.c_str(), k, (long long)x);
        return (int)x;
    }
    int opt_int(std::initializer_list<const char *> keys, int def) const {
        const char * k = nullptr;
        const Json * v = find_any(keys, &k);
        if (!v) return def;
        int64_t x = int_of(v, k);
        if (x < 0 || x > (1ll << 31) - 1) fail("%s: field \"%s\" = %lld is out of range", what.c_str(), k, (long long)x);
        return (int)x;
    }
    double opt_num(std::initializer_list<const char *> keys, double def) const {
        const char * k = nullptr;
        const Json * v = find_any(keys, &k);
        return v ? num_of(v, k) : def;
    }
    bool opt_bool(const char * key, bool def) const {
        const Json * v = find(key);
        if (!v) return def;
        if (!v->is_bool()) fail("%s: field \"%s\" must be true or false", what.c_str(), key);
        return v->as_bool();
    }
};

RopeType rope_type_from(const std::string & t, const std::string & what) {
    if (t == "default" || t.empty()) return RopeType::Default;
    if (t == "linear") return RopeType::Linear;
    if (t == "dynamic") return RopeType::Dynamic;
    if (t == "llama3") return RopeType::Llama3;
    if (t == "yarn") return RopeType::Yarn;
    if (t == "su" || t == "longrope") return RopeType::LongRope;
    fail("%s: rope_scaling type \"%s\" is not supported (default, linear, dynamic, llama3, yarn, longrope)", what.c_str(), t.c_str());
}

std::vector<float> float_list(const Json & j, const std::string & what, const char * key) {
    std::vector<float> out;
    if (!j.is_array()) fail("%s: rope_scaling.%s must be a list of numbers", what.c_str(), key);
    for (const Json & v : j.as_array()) {
        if (!v.is_number()) fail("%s: rope_scaling.%s must be a list of numbers", what.c_str(), key);
        out.push_back((float)v.as_number());
    }
    return out;
}

}  // namespace

ModelConfig config_parse(const Json & j, const std::string & what) {
    if (!j.is_object()) fail("%s: not a JSON object", what.c_str());
    ModelConfig c;
    c.path = what;
    c.raw = j;
    const Json * text = j.find("text_config");
    Reader r{j, (text && text->is_object()) ? text : nullptr, what};

    const Json * arch = r.find("architectures");
    if (!arch || !arch->is_array() || arch->size() == 0 || !(*arch)[0].is_string())
        fail("%s: missing field \"architectures\" (a list with the model class name)", what.c_str());
    c.arch = (*arch)[0].as_string();

    c.n_layer = r.req_int({"num_hidden_layers", "n_layers", "n_layer"});
    c.n_embd = r.req_int({"hidden_size", "d_model", "n_embd"});
    c.head_dim = r.opt_int({"head_dim"}, 0);
    c.n_head = r.opt_int({"num_attention_heads", "n_heads", "n_head"}, 0);
    if (c.n_head == 0) {
        if (c.head_dim == 0) fail("%s: missing field \"num_attention_heads\"", what.c_str());
        c.n_head = c.n_embd / c.head_dim;
    }
    if (c.head_dim == 0) {
        if (c.n_embd % c.n_head) fail("%s: hidden_size %d is not a multiple of num_attention_heads %d", what.c_str(), c.n_embd, c.n_head);
        c.head_dim = c.n_embd / c.n_head;
    }
    c.n_head_kv = r.opt_int({"num_key_value_heads"}, c.n_head);
    if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv)
        fail("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", what.c_str(), c.n_head, c.n_head_kv);
    c.n_ff = r.req_int({"intermediate_size", "n_inner"});
    c.n_vocab = r.req_int({"vocab_size"});
    c.n_ctx_train = r.opt_int({"max_position_embeddings", "max_sequence_length", "model_max_length", "max_seq_len", "n_positions"}, 2048);
    c.norm_eps = (float)r.opt_num({"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon"}, 1e-5);
    if (!(c.norm_eps > 0) || c.norm_eps > 1) fail("%s: field \"rms_norm_eps\" = %g is out of range", what.c_str(), c.norm_eps);
    c.tie_embeddings = r.opt_bool("tie_word_embeddings", false);
    c.attention_bias = r.opt_bool("attention_bias", false);
    c.mlp_bias = r.opt_bool("mlp_bias", false);
    if (const Json * a = r.find_any({"hidden_act", "hidden_activation"})) {
        if (!a->is_string()) fail("%s: field \"hidden_act\" must be a string", what.c_str());
        c.hidden_act = a->as_string();
    }
    if (const Json * b = r.find("bos_token_id")) {
        if (b->is_array() && b->size()) b = &(*b)[0];
        if (b->is_integer()) c.bos_id = (int)b->as_int();
    }
    if (const Json * e = r.find("eos_token_id")) {
        if (e->is_array()) {
            for (const Json & x : e->as_array()) if (x.is_integer()) c.eos_ids.push_back((int)x.as_int());
        } else if (e->is_integer()) {
            c.eos_ids.push_back((int)e->as_int());
        }
        if (!c.eos_ids.empty()) c.eos_id = c.eos_ids[0];
    }
    if (const Json * sw = r.find("sliding_window")) if (sw->is_integer()) c.sliding_window = (int)sw->as_int();
    c.attn_softcap = (float)r.opt_num({"attn_logit_softcapping"}, 0);
    c.final_softcap = (float)r.opt_num({"final_logit_softcapping"}, 0);

    // RoPE: top-level rope_theta / rope_scaling, or the newer rope_parameters block.
    c.rope.theta = (float)r.opt_num({"rope_theta"}, 10000.0);
    c.rope.partial_rotary = (float)r.opt_num({"partial_rotary_factor"}, 1.0);
    const Json * rs = r.find("rope_scaling");
    const Json * rp = r.find("rope_parameters");
    if (rp && rp->is_object()) {
        if (const Json * t = rp->find("rope_theta")) if (t->is_number()) c.rope.theta = (float)t->as_number();
        if (!rs) rs = rp;
    }
    if (rs) {
        if (!rs->is_object()) fail("%s: field \"rope_scaling\" must be an object", what.c_str());
        std::string t = rs->get_string("rope_type", rs->get_string("type", "default"));
        c.rope.type = rope_type_from(t, what);
        c.rope.factor = (float)rs->get_number("factor", 1.0);
        c.rope.low_freq_factor = (float)rs->get_number("low_freq_factor", 1.0);
        c.rope.high_freq_factor = (float)rs->get_number("high_freq_factor", 4.0);
        c.rope.orig_ctx = (int)rs->get_int("original_max_position_embeddings", 0);
        c.rope.beta_fast = (float)rs->get_number("beta_fast", 32.0);
        c.rope.beta_slow = (float)rs->get_number("beta_slow", 1.0);
        c.rope.attention_factor = (float)rs->get_number("attention_factor", 0.0);
        if (const Json * lf = rs->find("long_factor")) c.rope.long_factor = float_list(*lf, what, "long_factor");
        if (const Json * sf = rs->find("short_factor")) c.rope.short_factor = float_list(*sf, what, "short_factor");
        if (c.rope.type != RopeType::Default && c.rope.type != RopeType::LongRope && !(c.rope.factor > 0))
            fail("%s: rope_scaling.factor = %g must be positive", what.c_str(), c.rope.factor);
    }
    if (c.rope.orig_ctx == 0) c.rope.orig_ctx = r.opt_int({"original_max_position_embeddings"}, c.n_ctx_train);
    if (!(c.rope.theta > 0)) fail("%s: field \"rope_theta\" = %g must be positive", what.c_str(), c.rope.theta);

    if (const Json * q = j.find("quantization_config")) {
        if (q->is_object()) {
            c.quant_method = q->get_string("quant_method", "");
            c.gptq_v2 = q->get_string("checkpoint_format", "") == "gptq_v2";
        }
    }
    return c;
}

ModelConfig config_load(const std::string & dir) {
    struct stat st;
    if (stat(dir.c_str(), &st) != 0) fail("%s: model folder not found", dir.c_str());
    if (!S_ISDIR(st.st_mode)) fail("%s: not a folder (expected a Hugging Face model folder)", dir.c_str());
    const std::string path = dir + "/config.json";
    if (stat(path.c_str(), &st) != 0) fail("%s: missing config.json", dir.c_str());
    return config_parse(Json::parse_file(path), path);
}

RopeTables rope_tables(const ModelConfig & c, int n_ctx) {
    RopeTables t;
    t.theta = c.rope.theta;
    const int n_rot = c.n_rot();
    const int half = n_rot / 2;
    auto inv_freq = [&](int i) { return std::pow((double)c.rope.theta, -2.0 * i / n_rot); };
    const RopeConfig & r = c.rope;
    switch (r.type) {
        case RopeType::None:
        case RopeType::Default:
        case RopeType::Dynamic:  // dynamic NTK only changes theta beyond the training length
            if (r.type == RopeType::Dynamic && n_ctx > r.orig_ctx && r.factor > 1) {
                // HF recomputes the base for the current length; we use the cache length.
                const double base = r.theta * std::pow((r.factor * n_ctx / r.orig_ctx) - (r.factor - 1), (double)n_rot / (n_rot - 2));
                t.theta = (float)base;
            }
            break;
        case RopeType::Linear:
            t.pos_scale = 1.0f / r.factor;
            break;
        case RopeType::Llama3: {
            const double low_wavelen = r.orig_ctx / r.low_freq_factor;
            const double high_wavelen = r.orig_ctx / r.high_freq_factor;
            t.freq_div.resize(half);
            for (int i = 0; i < half; i++) {
                const double f = inv_freq(i);
                const double wavelen = 2 * M_PI / f;
                double nf;
                if (wavelen < high_wavelen) nf = f;
                else if (wavelen > low_wavelen) nf = f / r.factor;
                else {
                    const double smooth = (r.orig_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
                    nf = (1 - smooth) * f / r.factor + smooth * f;
                }
                t.freq_div[i] = (float)(f / nf);
            }
            break;
        }
        case RopeType::Yarn: {
            // Blend of interpolated (f/factor) and extrapolated (f) frequencies by a linear ramp
            // over the dims whose rotation count at the original length lies between beta_slow and
            // beta_fast; magnitudes scaled by 0.1 ln(factor) + 1.
            auto corr_dim = [&](double n_rotations) {
                return n_rot * std::log(r.orig_ctx / (n_rotations * 2 * M_PI)) / (2 * std::log((double)r.theta));
            };
            double low = std::floor(corr_dim(r.beta_fast)), high = std::ceil(corr_dim(r.beta_slow));
            low = std::max(low, 0.0);
            high = std::min(high, (double)(n_rot - 1));
            if (low == high) high += 0.001;
            t.freq_div.resize(half);
            for (int i = 0; i < half; i++) {
                double ramp = std::min(1.0, std::max(0.0, (i - low) / (high - low)));
                double extrap_w = 1.0 - ramp;
                const double f = inv_freq(i);
                const double nf = (f / r.factor) * (1 - extrap_w) + f * extrap_w;
                t.freq_div[i] = (float)(f / nf);
            }
            t.attn_factor = r.attention_factor > 0 ? r.attention_factor : (float)(0.1 * std::log(r.factor) + 1.0);
            break;
        }
        case RopeType::LongRope: {
            const bool use_long = n_ctx > r.orig_ctx;
            const std::vector<float> & f = use_long ? r.long_factor : r.short_factor;
            if ((int)f.size() != half)
                fail("%s: rope_scaling.%s has %zu values, expected %d", c.path.c_str(), use_long ? "long_factor" : "short_factor", f.size(), half);
            t.freq_div = f;
            const double scale = (double)c.n_ctx_train / r.orig_ctx;
            t.attn_factor = r.attention_factor > 0 ? r.attention_factor
                          : scale <= 1 ? 1.0f : (float)std::sqrt(1 + std::log(scale) / std::log((double)r.orig_ctx));
            break;
        }
    }
    return t;
}

}  // namespace exl2
