// Model loading: backend, configuration, architecture, weights (zero-copy from the memory map on
// host backends, one device buffer otherwise), tokenizer.
#include "model.h"
#include "architecture.h"
#include "error.h"
#include "quant/glu-order.h"
#include "quant/qlayer.h"
#include "tokenizer/tokenizer.h"

#include "ggx/fp16.h"

#include <chrono>
#include <cstdio>
#include <cstring>

namespace exl2 {

void * backend_alloc(ggx_backend * be, size_t size, const char * what) {
    void * p = nullptr;
    if (be->iface.alloc(be, size, &p) != GGX_STATUS_OK || !p)
        fail("%s: cannot allocate %.1f MiB on %s: %s", what, size / 1048576.0, be->name, ggx_last_error());
    return p;
}

ggx_backend * backend_open(const std::string & device, int n_threads, std::string * note) {
    if (note) note->clear();
    if (device != "auto") return ggx_backend_init(device.c_str(), n_threads);
    ggx_backend * be = nullptr;
    if (ggx_backend_gpu_built()) {
        be = ggx_backend_init("cuda:0", n_threads);
        if (!be && note) *note = ggx_last_error();
    }
    return be ? be : ggx_backend_init("cpu", n_threads);
}

Model::Model() { wctx_ = ggx_context_new(); }

Model::~Model() {
    if (backend) {
        for (auto & q : qlayers_) qlayer_release(backend, q.first, q.second);
        for (void * b : buffers_) backend->iface.dealloc(backend, b);
    }
    arch.reset();
    ggx_context_free(wctx_);
    if (backend) ggx_backend_free(backend);
}

static ggx_type ggx_type_of(StDtype d) {
    switch (d) {
        case StDtype::F32: return GGX_TYPE_F32;
        case StDtype::F16: return GGX_TYPE_F16;
        case StDtype::BF16: return GGX_TYPE_BF16;
        default: return GGX_TYPE_COUNT;
    }
}

static std::string ne_as_hf_shape(std::initializer_list<int64_t> ne) {
    std::string s = "[";
    std::vector<int64_t> v(ne);
    for (size_t i = v.size(); i-- > 0;) s += std::to_string(v[i]) + (i ? ", " : "");
    return s + "]";
}

bool Model::has_tensor(const std::string & name) const { return st_->has(name); }

const StTensor * Model::checked(const std::string & name, std::initializer_list<int64_t> ne, bool required) {
    const StTensor * s = st_->find(name);
    if (!s) {
        if (!required) return nullptr;
        fail("%s: tensor %s not found", st_->where().c_str(), name.c_str());
    }
    if (ggx_type_of(s->dtype) == GGX_TYPE_COUNT)
        fail("%s: tensor %s has dtype %s, expected F16, BF16 or F32", s->file.c_str(), name.c_str(), st_dtype_name(s->dtype));
    // HF shapes are outermost first; ggx ne is innermost first.
    std::vector<int64_t> want(ne);
    bool ok = s->shape.size() == want.size();
    for (size_t i = 0; ok && i < want.size(); i++) ok = s->shape[want.size() - 1 - i] == want[i];
    if (!ok)
        fail("%s: tensor %s has shape %s, expected %s", s->file.c_str(), name.c_str(), s->shape_str().c_str(), ne_as_hf_shape(ne).c_str());
    return s;
}

ggx_tensor * Model::tensor(const std::string & name, std::initializer_list<int64_t> ne, bool required) {
    const StTensor * s = checked(name, ne, required);
    if (!s) return nullptr;
    std::vector<int64_t> dims(ne);
    ggx_tensor * t = ggx_new_tensor(wctx_, ggx_type_of(s->dtype), (int)dims.size(), dims.data());
    t->flags = GGX_FLAG_WEIGHT;
    ggx_set_name(t, "%s", name.c_str());
    pending_.push_back({t, s, {}});
    n_params += (uint64_t)s->numel();
    if (name != "model.embed_tokens.weight") weight_bytes += s->nbytes;
    return t;
}

ggx_tensor * Model::bias_f32(const std::string & name, std::vector<float> values) {
    ggx_tensor * t = ggx_new_tensor_1d(wctx_, GGX_TYPE_F32, (int64_t)values.size());
    t->flags = GGX_FLAG_WEIGHT;
    ggx_set_name(t, "%s", name.c_str());
    pending_.push_back({t, nullptr, std::move(values)});
    return t;
}

static std::vector<float> values_f32(const StTensor & s) {
    std::vector<float> out((size_t)s.numel());
    for (size_t i = 0; i < out.size(); i++) {
        if (s.dtype == StDtype::F32) {
            memcpy(&out[i], s.data + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, s.data + 2 * i, 2);
            out[i] = s.dtype == StDtype::F16 ? ggx_f16_to_f32(h) : ggx_bf16_to_f32(h);
        }
    }
    return out;
}

QLayerHost Model::load_qlayer(const std::string & prefix, int64_t K, int64_t N) {
    QLoadOptions opt;
    opt.gptq_v2 = cfg.gptq_v2;
    opt.N = (int)N;
    QLayerHost host = qlayer_load(*st_, prefix, opt);
    if (host.K != K || host.N != N)
        fail("%s: quantized layer %s is %d x %d (in x out), expected %lld x %lld", st_->where().c_str(), prefix.c_str(), host.K,
             host.N, (long long)K, (long long)N);
    return host;
}

Linear Model::upload_qlayer(QLayerHost & host, const std::string & prefix, bool bias) {
    Linear l;
    void * buf = nullptr;
    l.w = qlayer_upload(wctx_, backend, host, &buf);
    ggx_set_name(l.w, "%s", prefix.c_str());
    qlayers_.push_back({l.w, buf});
    n_params += (uint64_t)host.K * (uint64_t)host.N;
    weight_bytes += qlayer_bytes_read(host);
    device_bytes += qlayer_bytes_read(host);
    n_quantized_++;
    const std::string bname = prefix + ".bias";
    if (!host.bias.empty()) l.b = bias_f32(bname, std::move(host.bias));
    else if (bias) fail("%s: tensor %s not found", st_->where().c_str(), bname.c_str());
    return l;
}

Linear Model::linear(const std::string & prefix, int64_t K, int64_t N, bool bias, bool required) {
    if (qlayer_detect(*st_, prefix) != QFormat::NONE) {
        QLayerHost host = load_qlayer(prefix, K, N);
        return upload_qlayer(host, prefix, bias);
    }
    Linear l;
    const std::string bname = prefix + ".bias";
    l.w = tensor(prefix + ".weight", {K, N}, required);
    if (!l.w) return l;
    if (bias || st_->has(bname)) {
        const StTensor * s = checked(bname, {N}, true);
        l.b = bias_f32(bname, values_f32(*s));
        n_params += (uint64_t)N;
        weight_bytes += s->nbytes;
    }
    return l;
}

void Model::gated_mlp(const std::string & prefix, int64_t D, int64_t F, bool bias, Linear & gate, Linear & up, Linear & down) {
    const std::string pg = prefix + "gate_proj", pu = prefix + "up_proj", pd = prefix + "down_proj";
    if (qlayer_detect(*st_, pg) == QFormat::NONE || qlayer_detect(*st_, pu) == QFormat::NONE ||
        qlayer_detect(*st_, pd) == QFormat::NONE) {
        gate = linear(pg, D, F, bias);
        up = linear(pu, D, F, bias);
        down = linear(pd, F, D, bias);
        return;
    }
    // All three quantized: gate's and up's columns in down's input order, down's gather dropped
    // (glu-order.h); the results are the same bits, and down runs without its gather.
    QLayerHost hg = load_qlayer(pg, D, F), hu = load_qlayer(pu, D, F), hd = load_qlayer(pd, F, D);
    glu_order(hg, hu, hd);
    const bool same_perm = hg.q_perm == hu.q_perm;
    gate = upload_qlayer(hg, pg, bias);
    up = upload_qlayer(hu, pu, bias);
    down = upload_qlayer(hd, pd, bias);
    // One input order for both: up reads gate's copy, so the GLU job's blocks gather x through one
    // array. Up's own identical copy stays allocated: what preparing it for the backend derived
    // from it holds either way.
    if (same_perm) ((ggx_qmatrix *)up.w->extra)->q_perm = ((ggx_qmatrix *)gate.w->extra)->q_perm;
}

void Model::finish_load() {
    // Bytes from the map or from host-made values; placed in place on host backends, else
    // uploaded into one buffer.
    auto bytes = [](const Pending & p) -> std::pair<const void *, size_t> {
        if (p.src) return {p.src->data, p.src->nbytes};
        return {p.host.data(), p.host.size() * sizeof(float)};
    };
    if (backend->is_host) {
        for (const Pending & p : pending_) p.t->data = const_cast<void *>(bytes(p).first);
        return;
    }
    const size_t align = backend->alignment ? backend->alignment : 256;
    auto padded = [&](size_t n) { return (n + align - 1) / align * align; };
    size_t total = 0;
    for (const Pending & p : pending_) total += padded(bytes(p).second);
    if (total == 0) return;
    char * buf = (char *)backend_alloc(backend, total, (dir + " weights").c_str());
    buffers_.push_back(buf);
    device_bytes += total;
    size_t off = 0;
    for (const Pending & p : pending_) {
        const auto b = bytes(p);
        p.t->data = buf + off;
        if (backend->iface.set(backend, buf + off, b.first, b.second) != GGX_STATUS_OK)
            fail("%s: upload of %s failed: %s", dir.c_str(), p.t->name, ggx_last_error());
        off += padded(b.second);
    }
    if (backend->iface.synchronize(backend) != GGX_STATUS_OK) fail("%s: upload failed: %s", dir.c_str(), ggx_last_error());
    pending_.clear();   // the host-made values are on the device now
    pending_.shrink_to_fit();
}

std::unique_ptr<Model> Model::load_tensors(std::unique_ptr<SafeTensors> st, const Json & config, const ModelParams & p,
                                           const std::string & tokenizer_dir, bool with_tokenizer) {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Model> m(new Model());
    m->dir = tokenizer_dir.empty() ? st->where() : tokenizer_dir;
    m->cfg = config_parse(config, m->dir + "/config.json");
    m->arch = architecture_create(m->cfg);
    if (!m->arch)
        fail("%s/config.json: unknown architecture \"%s\" (supported: %s)", m->dir.c_str(), m->cfg.arch.c_str(),
             architecture_list().c_str());
    m->backend = backend_open(p.device, p.n_threads, &m->device_note);
    if (!m->backend) fail("%s", ggx_last_error());
    if (ggx_backend_set_deterministic(m->backend, p.deterministic) != GGX_STATUS_OK) fail("%s", ggx_last_error());
    m->st_ = std::move(st);
    m->arch->load(*m);
    m->finish_load();
    if (!tokenizer_dir.empty() && with_tokenizer) m->tokenizer = Tokenizer::load(tokenizer_dir);
    // Logical precision for the description.
    std::string prec = m->n_quantized_ ? (m->cfg.quant_method.empty() ? "quantized" : m->cfg.quant_method) : "";
    if (prec.empty()) {
        const StTensor * e = m->st_->find("model.embed_tokens.weight");
        prec = e ? st_dtype_name(e->dtype) : "?";
        for (char & c : prec) c = (char)tolower(c);
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s %s, %.2fM params, %s, %.1f MiB of weights per token, on %s", m->cfg.arch.c_str(),
             m->arch->family(), m->n_params / 1e6, prec.c_str(), m->weight_bytes / 1048576.0, m->backend->description);
    m->desc = buf;
    if (p.verbose) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fprintf(stderr, "loaded %s in %.2f s\n", m->desc.c_str(), s);
    }
    return m;
}

std::unique_ptr<Model> Model::load(const std::string & dir, const ModelParams & p, bool with_tokenizer) {
    ModelConfig cfg = config_load(dir);   // checks the folder and config.json first
    auto st = std::make_unique<SafeTensors>();
    st->open_dir(dir);
    return load_tensors(std::move(st), cfg.raw, p, dir, with_tokenizer);
}

}  // namespace exl2
