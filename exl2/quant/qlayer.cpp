#include "qlayer.h"

#include "dequant.h"
#include "exl2-pack.h"
#include "exl2/error.h"
#include "ggx/fp16.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>

namespace exl2 {

QFormat qlayer_detect(const SafeTensors & st, const std::string & prefix) {
    if (st.has(prefix + ".q_weight")) return QFormat::EXL2;
    if (st.has(prefix + ".qweight")) return QFormat::GPTQ;
    return QFormat::NONE;
}

// ---- tensor checks -----------------------------------------------------------------------------

[[noreturn]] static void bad(const StTensor & t, const std::string & what) {
    fail("%s: %s: %s", t.file.c_str(), t.name.c_str(), what.c_str());
}

static void want_dtype(const StTensor & t, StDtype a, StDtype b = StDtype::UNKNOWN, StDtype c = StDtype::UNKNOWN) {
    if (t.dtype == a || t.dtype == b || t.dtype == c) return;
    std::string w = st_dtype_name(a);
    if (b != StDtype::UNKNOWN) w += std::string(" or ") + st_dtype_name(b);
    if (c != StDtype::UNKNOWN) w += std::string(" or ") + st_dtype_name(c);
    bad(t, strfmt("dtype %s, expected %s", st_dtype_name(t.dtype), w.c_str()));
}

static std::string shape_str(const std::vector<int64_t> & s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

static void want_shape(const StTensor & t, const std::vector<int64_t> & shape, const char * why) {
    if (t.shape != shape) bad(t, strfmt("shape %s, expected %s (%s)", t.shape_str().c_str(), shape_str(shape).c_str(), why));
}

static void want_rank(const StTensor & t, size_t rank) {
    if (t.shape.size() != rank) bad(t, strfmt("shape %s, expected %zu dimensions", t.shape_str().c_str(), rank));
}

// Tensor data may sit at any byte offset in a mapped file; copy it into aligned typed storage.
template <class T> static std::vector<T> copy_as(const StTensor & t) {
    std::vector<T> v(t.nbytes / sizeof(T));
    if (!v.empty()) memcpy(v.data(), t.data, v.size() * sizeof(T));
    return v;
}

static std::vector<float> load_bias(const StTensor & t) {
    want_dtype(t, StDtype::F16, StDtype::BF16, StDtype::F32);
    want_rank(t, 1);
    std::vector<float> b((size_t)t.shape[0]);
    for (size_t i = 0; i < b.size(); i++) {
        if (t.dtype == StDtype::F16) {
            uint16_t h; memcpy(&h, t.data + 2 * i, 2); b[i] = ggx_f16_to_f32(h);
        } else if (t.dtype == StDtype::BF16) {
            uint16_t h; memcpy(&h, t.data + 2 * i, 2); b[i] = ggx_round_f16(ggx_bf16_to_f32(h));
        } else {
            float f; memcpy(&f, t.data + 4 * i, 4); b[i] = ggx_round_f16(f);
        }
    }
    return b;
}

// ---- EXL2 --------------------------------------------------------------------------------------

static void load_exl2(const SafeTensors & st, const std::string & P, const QLoadOptions & opt, QLayerHost & L) {
    const StTensor & qw = st.get(P + ".q_weight");
    const StTensor & qs = st.get(P + ".q_scale");
    const StTensor & qm = st.get(P + ".q_scale_max");
    const StTensor & qg = st.get(P + ".q_groups");
    const StTensor & qi = st.get(P + ".q_invperm");

    want_dtype(qw, StDtype::I32);
    want_rank(qw, 2);
    if (qw.shape[0] < 1 || qw.shape[0] >= 65536) bad(qw, strfmt("%lld packed rows, expected 1..65535", (long long)qw.shape[0]));
    if (qw.shape[1] < 32 || qw.shape[1] % 32) bad(qw, strfmt("%lld columns, expected a positive multiple of 32", (long long)qw.shape[1]));
    L.QR = (int)qw.shape[0];
    L.Np = (int)qw.shape[1];

    want_dtype(qg, StDtype::I16);
    want_rank(qg, 1);
    if (qg.shape[0] < 2 || qg.shape[0] % 2) bad(qg, strfmt("length %lld, expected 2 * groups", (long long)qg.shape[0]));
    L.G = (int)(qg.shape[0] / 2);

    want_dtype(qs, StDtype::I32);
    want_shape(qs, {L.G, L.Np / 8}, "groups x packed columns / 8");
    want_dtype(qm, StDtype::F16);
    want_shape(qm, {L.G}, "one per group");

    want_dtype(qi, StDtype::I32);
    want_rank(qi, 1);
    if (qi.shape[0] < 1 || qi.shape[0] > 65536) bad(qi, strfmt("length %lld, expected 1..65536 input features", (long long)qi.shape[0]));
    L.K = (int)qi.shape[0];

    // Output features: config, else bias, else the packed width.
    const StTensor * bt = st.find(P + ".bias");
    if (bt) L.bias = load_bias(*bt);
    L.N = opt.N ? opt.N : bt ? (int)L.bias.size() : L.Np;
    if (L.N < 1 || (L.N + 31) / 32 * 32 != L.Np)
        bad(qw, strfmt("%d columns do not hold %d output features padded to a multiple of 32", L.Np, L.N));
    if (bt && (int)L.bias.size() != L.N) bad(*bt, strfmt("length %zu, expected %d output features", L.bias.size(), L.N));

    // Groups: widths from the set, non-increasing, rows per group a multiple of 32 (16 at 2 bits),
    // packed rows starting at 0, increasing, and ending at QR; rows adding up to K.
    L.q_groups = copy_as<uint16_t>(qg);
    int rows_total = 0;
    for (int g = 0; g < L.G; g++) {
        const int b = L.q_groups[2 * g], r0 = L.q_groups[2 * g + 1];
        const int r1 = g + 1 < L.G ? L.q_groups[2 * g + 3] : L.QR;
        if (!exl2_bits_valid(b)) bad(qg, strfmt("group %d has bit width %d, expected one of 8, 6, 5, 4, 3, 2", g, b));
        if (g > 0 && b > L.q_groups[2 * g - 2])
            bad(qg, strfmt("group %d has %d bits after a group of %d bits (widths must not increase)", g, b, L.q_groups[2 * g - 2]));
        if (g == 0 && r0 != 0) bad(qg, strfmt("group 0 starts at packed row %d, expected 0", r0));
        if (r1 <= r0 || r1 > L.QR)
            bad(qg, strfmt("group %d spans packed rows %d..%d, outside 0..%d of q_weight [%d, %d]", g, r0, r1, L.QR, L.QR, L.Np));
        if ((r1 - r0) * 32 % b) bad(qg, strfmt("group %d: %d packed rows do not hold whole %d-bit values", g, r1 - r0, b));
        const int rows = (r1 - r0) * 32 / b, gran = b == 2 ? 16 : 32;
        if (rows % gran) bad(qg, strfmt("group %d has %d rows of %d bits, expected a multiple of %d", g, rows, b, gran));
        rows_total += rows;
        for (int w = 0; w < GGX_EXL2_N_WIDTHS; w++)
            if (ggx_exl2_widths[w] == b) L.rows_per_width[w] += rows;
    }
    if (rows_total != L.K)
        bad(qg, strfmt("groups hold %d rows, but q_invperm has %d input features", rows_total, L.K));

    // q_invperm must be a permutation; q_perm is its inverse.
    const std::vector<int32_t> inv = copy_as<int32_t>(qi);
    L.q_perm.assign(L.K, -1);
    for (int i = 0; i < L.K; i++) {
        const int32_t q = inv[i];
        if (q < 0 || q >= L.K) bad(qi, strfmt("entry %d is %d, outside 0..%d", i, q, L.K - 1));
        if (L.q_perm[q] >= 0) bad(qi, strfmt("not a permutation: entries %d and %d are both %d", L.q_perm[q], i, q));
        L.q_perm[q] = i;
    }

    L.q_weight = copy_as<uint32_t>(qw);
    L.q_scale = copy_as<uint32_t>(qs);
    const std::vector<uint16_t> m = copy_as<uint16_t>(qm);
    L.q_scale_max.resize(L.G);
    for (int g = 0; g < L.G; g++) {
        if (!std::isfinite(ggx_f16_to_f32(m[g]))) bad(qm, strfmt("group %d: scale is not finite (0x%04x)", g, m[g]));
        L.q_scale_max[g] = exl2_prescale_max(m[g], opt.prescale);
    }
}

// ---- GPTQ --------------------------------------------------------------------------------------

static void load_gptq(const SafeTensors & st, const std::string & P, const QLoadOptions & opt, QLayerHost & L) {
    const StTensor & qw = st.get(P + ".qweight");
    const StTensor & qz = st.get(P + ".qzeros");
    const StTensor & sc = st.get(P + ".scales");
    const StTensor * gi = st.find(P + ".g_idx");

    want_dtype(qw, StDtype::I32);
    want_rank(qw, 2);
    if (qw.shape[0] < 1 || qw.shape[0] > 65536 / 8) bad(qw, strfmt("%lld packed rows, expected 1..8192", (long long)qw.shape[0]));
    if (qw.shape[1] < 8 || qw.shape[1] % 8 || qw.shape[1] > (1 << 30))
        bad(qw, strfmt("%lld columns, expected a positive multiple of 8 (zeros are packed 8 per word)", (long long)qw.shape[1]));
    L.K = (int)qw.shape[0] * 8;
    L.N = L.Np = (int)qw.shape[1];
    if (opt.N && opt.N != L.N) bad(qw, strfmt("%d columns, but the model has %d output features", L.N, opt.N));

    want_dtype(qz, StDtype::I32);
    want_rank(qz, 2);
    if (qz.shape[0] < 1 || qz.shape[0] > L.K) bad(qz, strfmt("%lld groups for %d input features", (long long)qz.shape[0], L.K));
    L.G = (int)qz.shape[0];
    want_shape(qz, {L.G, L.N / 8}, "groups x output features / 8");
    const int gs = gptq_group_size(L.K, L.G);
    if (gs % 8 || (int64_t)(L.G - 1) * gs >= L.K)
        bad(qz, strfmt("%d groups for %d input features give group size %d, which is not usable (multiple of 8, every group non-empty)",
                       L.G, L.K, gs));
    L.group_size = gs;
    want_dtype(sc, StDtype::F16, StDtype::F32);
    want_shape(sc, {L.G, L.N}, "groups x output features");

    // g_idx: trivial (absent, all zero, or row k in group k/gs) or act-order, which is only
    // representable when sorting rows by group puts sorted row s in group s/gs.
    std::vector<int32_t> perm;
    if (gi) {
        want_dtype(*gi, StDtype::I32);
        want_shape(*gi, {L.K}, "one group index per input feature");
        const std::vector<int32_t> g_idx = copy_as<int32_t>(*gi);
        bool zero = true, plain = true;
        std::vector<int> count(L.G, 0);
        for (int k = 0; k < L.K; k++) {
            const int32_t g = g_idx[k];
            if (g < 0 || g >= L.G) bad(*gi, strfmt("row %d is in group %d, outside 0..%d", k, g, L.G - 1));
            zero = zero && g == 0;
            plain = plain && g == k / gs;
            count[g]++;
        }
        if (!zero && !plain) {
            for (int g = 0; g < L.G; g++) {
                const int want = std::min(gs, L.K - g * gs);
                if (count[g] != want)
                    bad(*gi, strfmt("group %d has %d rows, expected %d (group size %d)", g, count[g], want, gs));
            }
            perm.resize(L.K);
            std::iota(perm.begin(), perm.end(), 0);
            std::stable_sort(perm.begin(), perm.end(), [&](int a, int b) { return g_idx[a] < g_idx[b]; });
        }
    }

    if (perm.empty()) {
        L.q_weight = copy_as<uint32_t>(qw);
    } else {
        // Physically reorder the 4-bit rows: sorted row s is original row perm[s]. The source is
        // read in place (memcpy: file data need not be 4-byte aligned).
        L.q_weight.assign((size_t)L.K / 8 * L.N, 0);
        for (int s = 0; s < L.K; s++) {
            const int src = perm[s];
            const uint8_t * in = qw.data + (size_t)(src / 8) * L.N * 4;
            uint32_t * out = L.q_weight.data() + (size_t)(s / 8) * L.N;
            const int si = 4 * (src % 8), so = 4 * (s % 8);
            for (int n = 0; n < L.N; n++) {
                uint32_t w;
                memcpy(&w, in + 4 * (size_t)n, 4);
                out[n] |= ((w >> si) & 15) << so;
            }
        }
        L.q_perm = perm;
    }

    L.qzeros = copy_as<uint32_t>(qz);
    if (opt.gptq_v2)
        for (uint32_t & w : L.qzeros) w -= 0x11111111u;   // to "zero - 1", borrows as ExLlamaV2 does

    L.scales.resize((size_t)L.G * L.N);
    for (size_t i = 0; i < L.scales.size(); i++) {
        float f;
        if (sc.dtype == StDtype::F16) {
            uint16_t h; memcpy(&h, sc.data + 2 * i, 2); f = ggx_f16_to_f32(h);
        } else {
            memcpy(&f, sc.data + 4 * i, 4); f = ggx_round_f16(f);
        }
        if (!std::isfinite(f)) bad(sc, strfmt("scale of group %zu, column %zu is not finite", i / L.N, i % L.N));
        L.scales[i] = ggx_f32_to_f16(f * opt.prescale);
    }

    if (const StTensor * bt = st.find(P + ".bias")) {
        L.bias = load_bias(*bt);
        if ((int)L.bias.size() != L.N) bad(*bt, strfmt("length %zu, expected %d output features", L.bias.size(), L.N));
        if (std::all_of(L.bias.begin(), L.bias.end(), [](float v) { return v == 0.0f; })) L.bias.clear();
    }
}

QLayerHost qlayer_load(const SafeTensors & st, const std::string & prefix, const QLoadOptions & opt) {
    QLayerHost L;
    L.name = prefix;
    L.prescale = opt.prescale;
    L.format = qlayer_detect(st, prefix);
    if (!std::isfinite(opt.prescale)) fail("%s: layer %s: prescale %g is not finite", st.where().c_str(), prefix.c_str(), opt.prescale);
    switch (L.format) {
        case QFormat::EXL2: load_exl2(st, prefix, opt, L); break;
        case QFormat::GPTQ: load_gptq(st, prefix, opt, L); break;
        case QFormat::NONE:
            fail("%s: layer %s: no %s.q_weight (EXL2) or %s.qweight (GPTQ)", st.where().c_str(), prefix.c_str(),
                 prefix.c_str(), prefix.c_str());
    }
    return L;
}

// ---- descriptors and upload --------------------------------------------------------------------

ggx_qmatrix qlayer_host_view(const QLayerHost & L) {
    ggx_qmatrix q;
    memset(&q, 0, sizeof q);
    q.K = L.K; q.N = L.N; q.Np = L.Np; q.n_groups = L.G;
    q.qrows = L.format == QFormat::EXL2 ? L.QR : L.K / 8;
    for (int w = 0; w < GGX_EXL2_N_WIDTHS; w++) q.rows_per_width[w] = L.rows_per_width[w];
    q.group_size = L.group_size;
    auto p = [](const auto & v) { return v.empty() ? nullptr : const_cast<typename std::decay_t<decltype(v)>::value_type *>(v.data()); };
    q.q_weight = p(L.q_weight);
    q.q_scale = p(L.q_scale);
    q.q_scale_max = p(L.q_scale_max);
    q.q_groups = p(L.q_groups);
    q.q_perm = p(L.q_perm);
    q.qzeros = p(L.qzeros);
    q.scales = p(L.scales);
    q.groups_host = q.q_groups;
    return q;
}

ggx_tensor * qlayer_upload(ggx_context * ctx, ggx_backend * be, const QLayerHost & L, void ** out_buffer) {
    if (L.format == QFormat::NONE) fail("qlayer_upload: layer %s was not loaded", L.name.c_str());
    const ggx_qmatrix host = qlayer_host_view(L);
    struct Piece { const void * src; size_t n; size_t offs; };
    Piece pieces[] = {
        {host.q_weight, L.q_weight.size() * 4, 0},   {host.q_scale, L.q_scale.size() * 4, 0},
        {host.q_scale_max, L.q_scale_max.size() * 2, 0}, {host.q_groups, L.q_groups.size() * 2, 0},
        {host.q_perm, L.q_perm.size() * 4, 0},       {host.qzeros, L.qzeros.size() * 4, 0},
        {host.scales, L.scales.size() * 2, 0},
    };
    const size_t align = std::max<size_t>(be->alignment, 64);
    size_t total = 0;
    for (Piece & p : pieces) {
        p.offs = total;
        total += (p.n + align - 1) / align * align;
    }
    void * buf = nullptr;
    if (be->iface.alloc(be, total, &buf) != GGX_STATUS_OK)
        fail("layer %s: cannot allocate %zu bytes on %s: %s", L.name.c_str(), total, be->name, ggx_last_error());
    for (const Piece & p : pieces)
        if (p.n && be->iface.set(be, (char *)buf + p.offs, p.src, p.n) != GGX_STATUS_OK) {
            const std::string err = ggx_last_error();
            be->iface.dealloc(be, buf);
            fail("layer %s: upload to %s failed: %s", L.name.c_str(), be->name, err.c_str());
        }

    // The descriptor and its host copy of q_groups live in one heap block (freed by qlayer_release).
    const size_t gbytes = L.q_groups.size() * 2;
    void * block = malloc(sizeof(ggx_qmatrix) + gbytes);
    if (!block) { be->iface.dealloc(be, buf); fail("layer %s: out of host memory", L.name.c_str()); }
    ggx_qmatrix * qm = (ggx_qmatrix *)block;
    *qm = host;
    auto at = [&](int i, auto * like) { return pieces[i].n ? (decltype(like))((char *)buf + pieces[i].offs) : nullptr; };
    qm->q_weight = at(0, qm->q_weight);
    qm->q_scale = at(1, qm->q_scale);
    qm->q_scale_max = at(2, qm->q_scale_max);
    qm->q_groups = at(3, qm->q_groups);
    qm->q_perm = at(4, qm->q_perm);
    qm->qzeros = at(5, qm->qzeros);
    qm->scales = at(6, qm->scales);
    qm->backend_extra = nullptr;
    if (gbytes) {
        uint16_t * g = (uint16_t *)((char *)block + sizeof(ggx_qmatrix));
        memcpy(g, L.q_groups.data(), gbytes);
        qm->groups_host = g;
    } else {
        qm->groups_host = nullptr;
    }

    ggx_tensor * t = ggx_new_tensor_2d(ctx, L.format == QFormat::EXL2 ? GGX_TYPE_EXL2 : GGX_TYPE_GPTQ, L.K, L.N);
    t->data = buf;
    t->extra = qm;
    t->flags |= GGX_FLAG_WEIGHT;
    ggx_set_name(t, "%s", L.name.c_str());
    if (be->iface.qmatrix_prepare && be->iface.qmatrix_prepare(be, t) != GGX_STATUS_OK) {
        const std::string err = ggx_last_error();
        qlayer_release(be, t, buf);
        fail("layer %s: %s could not prepare the quantized matrix: %s", L.name.c_str(), be->name, err.c_str());
    }
    *out_buffer = buf;
    return t;
}

void qlayer_release(ggx_backend * be, ggx_tensor * t, void * buffer) {
    if (t && t->extra) {
        if (be->iface.qmatrix_release) be->iface.qmatrix_release(be, t);
        free(t->extra);
        t->extra = nullptr;
        t->data = nullptr;
    }
    if (buffer) be->iface.dealloc(be, buffer);
}

// ---- sizes -------------------------------------------------------------------------------------

size_t qmatrix_bytes_read(const ggx_qmatrix & q, enum ggx_type type) {
    const size_t perm = q.q_perm ? (size_t)q.K * 4 : 0;
    if (type == GGX_TYPE_EXL2)
        return (size_t)q.qrows * q.Np * 4 + (size_t)q.n_groups * (q.Np / 8) * 4 + (size_t)q.n_groups * (2 + 4) + perm;
    return (size_t)q.K / 8 * q.N * 4 + (size_t)q.n_groups * (q.N / 8) * 4 + (size_t)q.n_groups * q.N * 2 + perm;
}

size_t qlayer_bytes_read(const QLayerHost & L) {
    return qmatrix_bytes_read(qlayer_host_view(L), L.format == QFormat::EXL2 ? GGX_TYPE_EXL2 : GGX_TYPE_GPTQ);
}

double qlayer_bpw(const QLayerHost & L) {
    const double bias_bits = L.bias.empty() ? 0 : 16.0 * L.N, bias_w = L.bias.empty() ? 0 : L.N;
    if (L.format == QFormat::EXL2) {
        const double bits = 32.0 * L.QR * L.Np + L.G * (16.0 + 32.0 + 4.0 * L.Np) + 32.0 * L.K + bias_bits;
        return bits / ((double)L.K * L.Np + bias_w);
    }
    const double bits = 4.0 * L.K * L.N + L.G * (4.0 * L.N + 16.0 * L.N) + (L.q_perm.empty() ? 0 : 32.0 * L.K) + bias_bits;
    return bits / ((double)L.K * L.N + bias_w);
}

}  // namespace exl2
