// GPU test harness (see cuda-harness.h).
#include "cuda-harness.h"

#include "exl2/quant/qlayer.h"

#include <algorithm>
#include <cstdio>

namespace cudatest {

ggx_backend * cuda_backend() {
    static bool tried = false;
    static ggx_backend * be = nullptr;
    static std::string why;
    if (!tried) {
        tried = true;
        be = ggx_backend_init("cuda:0", 0);
        if (!be) why = ggx_last_error();
    }
    if (!be) ggx_set_error("%s", why.c_str());
    return be;
}

ggx_backend * cpu_backend() {
    static ggx_backend * be = ggx_backend_init("cpu", 0);
    return be;
}

ggx_tensor * GraphRun::input(ggx_type type, std::vector<int64_t> ne, std::vector<uint8_t> bytes) {
    ggx_tensor * t = ggx_new_tensor(ctx, type, (int)ne.size(), ne.data());
    t->flags |= GGX_FLAG_INPUT;
    REQUIRE(bytes.size() == ggx_nbytes(t));
    inputs.emplace_back(t, std::move(bytes));
    return t;
}

ggx_tensor * GraphRun::input_rand(ggx_type type, std::vector<int64_t> ne, float amp) {
    int64_t n = 1;
    for (int64_t v : ne) n *= v;
    std::vector<uint8_t> b(n * ggx_type_size(type));
    std::uniform_real_distribution<float> d(-amp, amp);
    for (int64_t i = 0; i < n; i++) {
        const float v = d(rng);
        if (type == GGX_TYPE_F32) memcpy(&b[i * 4], &v, 4);
        else {
            const uint16_t h = type == GGX_TYPE_F16 ? ggx_f32_to_f16(v) : ggx_f32_to_bf16(v);
            memcpy(&b[i * 2], &h, 2);
        }
    }
    return input(type, ne, std::move(b));
}

ggx_tensor * GraphRun::input_i32(std::vector<int64_t> ne, const std::vector<int32_t> & v) {
    std::vector<uint8_t> b(v.size() * 4);
    memcpy(b.data(), v.data(), b.size());
    return input(GGX_TYPE_I32, ne, std::move(b));
}

ggx_tensor * GraphRun::qweight(const exl2::QLayerHost & L) {
    void * buf = nullptr;
    ggx_tensor * t = exl2::qlayer_upload(ctx, be, L, &buf);
    qweights.emplace_back(t, buf);
    return t;
}

Output run_graph(ggx_backend * be, const Builder & build, int reps) {
    GraphRun r;
    r.be = be;
    r.ctx = ggx_context_new();
    ggx_tensor * out = build(r);
    out->flags |= GGX_FLAG_OUTPUT;
    ggx_graph * g = ggx_graph_new(r.ctx);
    ggx_graph_build(g, out);
    const size_t size = ggx_graph_plan(g, be->alignment);
    void * buf = nullptr;
    REQUIRE_MESSAGE(be->iface.alloc(be, size, &buf) == GGX_STATUS_OK, ggx_last_error());
    ggx_graph_bind(g, buf);
    for (int rep = 0; rep < reps; rep++) {
        for (auto & in : r.inputs)
            REQUIRE_MESSAGE(ggx_backend_tensor_set(be, in.first, in.second.data(), 0, in.second.size()) == GGX_STATUS_OK,
                            ggx_last_error());
        const ggx_status st = ggx_backend_graph_compute(be, g);
        REQUIRE_MESSAGE(st == GGX_STATUS_OK, be->name << ": " << ggx_last_error());
    }
    Output o;
    o.type = out->type;
    o.bytes.resize(ggx_nbytes(out));
    REQUIRE_MESSAGE(ggx_backend_tensor_get(be, out, o.bytes.data(), 0, o.bytes.size()) == GGX_STATUS_OK, ggx_last_error());
    const int64_t n = ggx_nelements(out);
    o.f.resize(n);
    for (int64_t i = 0; i < n; i++) {
        switch (o.type) {
            case GGX_TYPE_F32: memcpy(&o.f[i], &o.bytes[i * 4], 4); break;
            case GGX_TYPE_I32: { int32_t v; memcpy(&v, &o.bytes[i * 4], 4); o.f[i] = (float)v; break; }
            case GGX_TYPE_F16: { uint16_t h; memcpy(&h, &o.bytes[i * 2], 2); o.f[i] = ggx_f16_to_f32(h); break; }
            case GGX_TYPE_BF16: { uint16_t h; memcpy(&h, &o.bytes[i * 2], 2); o.f[i] = ggx_bf16_to_f32(h); break; }
            default: FAIL("unexpected output type");
        }
    }
    be->iface.dealloc(be, buf);
    for (auto & q : r.qweights) exl2::qlayer_release(be, q.first, q.second);
    ggx_context_free(r.ctx);
    return o;
}

Both run_both(const Builder & build) {
    Both b;
    b.cuda = run_graph(cuda_backend(), build);
    b.cpu = run_graph(cpu_backend(), build);
    return b;
}

bool check_close(const std::vector<float> & a, const std::vector<float> & ref, float atol, float rtol, const std::string & what) {
    REQUIRE(a.size() == ref.size());
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < a.size(); i++) {
        const double tol = atol + rtol * std::fabs((double)ref[i]);
        const double err = std::fabs((double)a[i] - (double)ref[i]);
        const bool ok = err <= tol;   // NaN fails
        if (!ok) bad++;
        const double ratio = std::isnan(err) ? 1e30 : err / tol;
        if (ratio > worst_ratio) { worst_ratio = ratio; worst = i; }
    }
    if (bad) {
        FAIL_CHECK(what << ": " << bad << " of " << a.size() << " outside atol " << atol << " rtol " << rtol << "; worst ["
                        << worst << "] got " << a[worst] << " want " << ref[worst]);
    }
    return bad == 0;
}

bool check_bound(const std::vector<float> & a, const std::vector<double> & ref, const std::vector<double> & bound,
                 const std::string & what) {
    REQUIRE(a.size() == ref.size());
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < a.size(); i++) {
        const double err = std::fabs((double)a[i] - ref[i]);
        if (!(err <= bound[i])) bad++;
        const double ratio = std::isnan(err) ? 1e30 : err / bound[i];
        if (ratio > worst_ratio) { worst_ratio = ratio; worst = i; }
    }
    if (bad) {
        FAIL_CHECK(what << ": " << bad << " of " << a.size() << " outside their bound; worst [" << worst << "] got " << a[worst]
                        << " want " << ref[worst] << " bound " << bound[worst]);
    }
    return bad == 0;
}

}  // namespace cudatest
