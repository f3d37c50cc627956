// C API: models, contexts, samplers. Every entry point catches all exceptions and reports them
// through exl2_last_error(); nothing here aborts the host process.
#include "exl2.h"

#include "api-error.h"
#include "api-internal.h"
#include "context.h"
#include "error.h"
#include "model.h"
#include "sample-last.h"
#include "sampler.h"

#include "ggx/ggx-backend.h"

#include <memory>
#include <new>

struct exl2_model {
    std::unique_ptr<exl2::Model> m;
    exl2_tokenizer * tok = nullptr;   // owned
};

struct exl2_context {
    exl2_model * model;
    std::unique_ptr<exl2::Context> c;
};

struct exl2_sampler {
    std::unique_ptr<exl2::Sampler> s;
};

#define API_BEGIN try {
#define API_END(ret)                       \
    }                                      \
    catch (...) {                          \
        exl2_api_status_from_exception();  \
        return ret;                        \
    }
#define API_END_CODE                              \
    }                                             \
    catch (...) {                                 \
        return exl2_api_status_from_exception();  \
    }

const char * exl2_version(void) { return "0.1.0"; }
const char * exl2_backends(void) { return ggx_backend_list(); }

struct exl2_model_params exl2_model_default_params(void) {
    exl2_model_params p;
    p.device = "cpu";
    p.n_threads = 0;
    p.verbose = 0;
    p.deterministic = 0;
    return p;
}

exl2::ModelParams exl2_model_params_internal(const struct exl2_model_params & params) {
    exl2::ModelParams p;
    p.device = params.device ? params.device : "cpu";
    p.n_threads = params.n_threads;
    p.verbose = params.verbose != 0;
    p.deterministic = params.deterministic != 0;
    return p;
}

exl2_model * exl2_model_load(const char * dir, struct exl2_model_params params) {
    API_BEGIN
    if (!dir) exl2::fail("exl2_model_load: dir is NULL");
    const exl2::ModelParams p = exl2_model_params_internal(params);
    auto h = std::make_unique<exl2_model>();
    h->m = exl2::Model::load(dir, p, false);
    h->tok = exl2_tokenizer_load(dir);
    if (!h->tok) return nullptr;   // error already set
    return h.release();
    API_END(nullptr)
}

exl2_model * exl2_model_from_internal(std::unique_ptr<exl2::Model> m, exl2_tokenizer * tok) {
    auto h = new (std::nothrow) exl2_model();
    if (!h) return nullptr;
    h->m = std::move(m);
    h->tok = tok;
    return h;
}

void exl2_model_free(exl2_model * model) {
    if (!model) return;
    try {
        exl2_tokenizer_free(model->tok);
        delete model;
    } catch (...) {
    }
}

const exl2_tokenizer * exl2_model_tokenizer(const exl2_model * model) { return model ? model->tok : nullptr; }
int32_t exl2_model_n_vocab(const exl2_model * model) { return model ? model->m->cfg.n_vocab : EXL2_ERR_INVALID_ARG; }
int32_t exl2_model_n_ctx_train(const exl2_model * model) { return model ? model->m->cfg.n_ctx_train : EXL2_ERR_INVALID_ARG; }
int32_t exl2_model_n_layer(const exl2_model * model) { return model ? model->m->cfg.n_layer : EXL2_ERR_INVALID_ARG; }
int32_t exl2_model_n_embd(const exl2_model * model) { return model ? model->m->cfg.n_embd : EXL2_ERR_INVALID_ARG; }
uint64_t exl2_model_n_params(const exl2_model * model) { return model ? model->m->n_params : 0; }
uint64_t exl2_model_weight_bytes(const exl2_model * model) { return model ? model->m->weight_bytes : 0; }
uint64_t exl2_model_device_bytes(const exl2_model * model) { return model ? model->m->device_bytes : 0; }
const char * exl2_model_desc(const exl2_model * model) { return model ? model->m->desc.c_str() : ""; }
const char * exl2_model_device_note(const exl2_model * model) { return model ? model->m->device_note.c_str() : ""; }

// ---------------------------------------------------------------------------------------------
struct exl2_context_params exl2_context_default_params(void) {
    exl2_context_params p;
    p.n_ctx = 0;
    p.n_batch = 512;
    p.cache_type = EXL2_CACHE_F16;
    p.run_ahead = 0;
    return p;
}

exl2_context * exl2_context_new(exl2_model * model, struct exl2_context_params params) {
    API_BEGIN
    if (!model) exl2::fail("exl2_context_new: model is NULL");
    if (params.n_ctx < 0) exl2::fail("context length %d is negative", params.n_ctx);
    if (params.cache_type != EXL2_CACHE_F16 && params.cache_type != EXL2_CACHE_F32)
        exl2::fail("cache type %d is not supported (f16 = 0, f32 = 1)", params.cache_type);
    exl2::ContextParams p;
    p.n_ctx = params.n_ctx;
    p.n_batch = params.n_batch;
    p.cache_type = params.cache_type == EXL2_CACHE_F32 ? exl2::CacheType::F32 : exl2::CacheType::F16;
    if (params.run_ahead < -1 || params.run_ahead > 1)
        exl2::fail("run_ahead %d is not one of -1 (off), 0 (GPU devices), 1 (on)", params.run_ahead);
    p.run_ahead = params.run_ahead;
    auto h = std::make_unique<exl2_context>();
    h->model = model;
    h->c = std::make_unique<exl2::Context>(*model->m, p);
    return h.release();
    API_END(nullptr)
}

void exl2_context_free(exl2_context * ctx) {
    try { delete ctx; } catch (...) {}
}
int32_t exl2_context_n_ctx(const exl2_context * ctx) { return ctx ? ctx->c->n_ctx() : EXL2_ERR_INVALID_ARG; }
int32_t exl2_context_n_past(const exl2_context * ctx) { return ctx ? ctx->c->n_past() : EXL2_ERR_INVALID_ARG; }
uint64_t exl2_context_cache_bytes(const exl2_context * ctx) { return ctx ? ctx->c->cache_bytes() : 0; }
uint64_t exl2_context_compute_bytes(const exl2_context * ctx) { return ctx ? ctx->c->compute_bytes() : 0; }
int exl2_context_truncate(exl2_context * ctx, int32_t n) {
    if (!ctx || n < 0) {
        exl2_api_set_error("exl2_context_truncate: invalid argument");
        return EXL2_ERR_INVALID_ARG;
    }
    ctx->c->truncate(n);
    return EXL2_OK;
}

int exl2_decode(exl2_context * ctx, const int32_t * tokens, int32_t n, int all_logits) {
    API_BEGIN
    if (!ctx || !tokens || n <= 0) {
        exl2_api_set_error("exl2_decode: need a context and at least one token");
        return EXL2_ERR_INVALID_ARG;
    }
    if (!ctx->c->decode(tokens, n, all_logits != 0)) {
        exl2_api_set_error(exl2::strfmt("context full: %d tokens cached, %d more do not fit in %d", ctx->c->n_past(), n,
                                        ctx->c->n_ctx()).c_str());
        return EXL2_ERR_CONTEXT_FULL;
    }
    return EXL2_OK;
    API_END_CODE
}

const float * exl2_get_logits(exl2_context * ctx, int32_t i) {
    if (!ctx) return nullptr;
    API_BEGIN
    return ctx->c->logits(i);   // may read them from the device now
    API_END(nullptr)
}

// ---------------------------------------------------------------------------------------------
struct exl2_sampler_params exl2_sampler_default_params(void) {
    exl2::SamplerParams d;
    exl2_sampler_params p;
    p.temperature = d.temperature;
    p.top_k = d.top_k;
    p.top_p = d.top_p;
    p.min_p = d.min_p;
    p.repetition_penalty = d.repetition_penalty;
    p.repetition_range = d.repetition_range;
    p.seed = d.seed;
    return p;
}

exl2_sampler * exl2_sampler_new(struct exl2_sampler_params params) {
    API_BEGIN
    exl2::SamplerParams p;
    p.temperature = params.temperature;
    p.top_k = params.top_k;
    p.top_p = params.top_p;
    p.min_p = params.min_p;
    p.repetition_penalty = params.repetition_penalty;
    p.repetition_range = params.repetition_range;
    p.seed = params.seed;
    if (p.top_k < 0 || p.repetition_range < 0 || !(p.repetition_penalty > 0))
        exl2::fail("sampler: top_k and repetition_range must be >= 0, repetition_penalty > 0");
    auto h = std::make_unique<exl2_sampler>();
    h->s = std::make_unique<exl2::Sampler>(p);
    return h.release();
    API_END(nullptr)
}

void exl2_sampler_free(exl2_sampler * smp) { delete smp; }

int32_t exl2_sampler_sample_logits(exl2_sampler * smp, const float * logits, int32_t n_vocab) {
    API_BEGIN
    if (!smp || !logits || n_vocab <= 0) {
        exl2_api_set_error("exl2_sampler_sample_logits: invalid argument");
        return EXL2_ERR_INVALID_ARG;
    }
    return smp->s->sample(logits, n_vocab);
    API_END_CODE
}

int32_t exl2_sampler_sample(exl2_sampler * smp, exl2_context * ctx, int32_t i) {
    if (!ctx) {
        exl2_api_set_error("exl2_sampler_sample: context is NULL");
        return EXL2_ERR_INVALID_ARG;
    }
    API_BEGIN
    exl2::Context & c = *ctx->c;
    const int rows = c.n_logit_rows();
    // the last row: ranked (greedy: the argmax) where the logits are, the next step run ahead
    if (smp && rows > 0 && (i == -1 || i == rows - 1)) return exl2::sample_last(c, *smp->s);
    const float * l = c.logits(i);
    if (!l) {
        exl2_api_set_error(exl2::strfmt("exl2_sampler_sample: no logits for row %d of the last decode", i).c_str());
        return EXL2_ERR_INVALID_ARG;
    }
    return exl2_sampler_sample_logits(smp, l, ctx->model->m->cfg.n_vocab);
    API_END_CODE
}

void exl2_sampler_accept(exl2_sampler * smp, int32_t id) {
    if (smp) smp->s->accept(id);
}
