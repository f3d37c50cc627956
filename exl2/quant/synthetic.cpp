#include "synthetic.h"

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

// ---- layouts ----------------------------------------------------------------------------------

static std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    size_t a = 0;
    while (true) {
        const size_t b = s.find(sep, a);
        out.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
        if (b == std::string::npos) break;
        a = b + 1;
    }
    return out;
}

static bool to_number(const std::string & s, double & v) {
    if (s.empty()) return false;
    char * end = nullptr;
    v = strtod(s.c_str(), &end);
    return end && *end == 0;
}

BitLayout exl2_layout_parse(const std::string & s) {
    const std::vector<std::string> f = split(s, ' ');
    if (f.size() < 2 || f.size() > 3 || f[1].size() < 2 || f[1][0] != 'g')
        fail("bit layout \"%s\": expected \"<bits>[/<bits>...] g<size>[,<size>...] [<prop>/<prop>...]\"", s.c_str());
    const std::vector<std::string> b = split(f[0], '/'), g = split(f[1].substr(1), ',');
    const std::vector<std::string> p = f.size() == 3 ? split(f[2], '/') : std::vector<std::string>{"1"};
    if (p.size() != b.size() || (g.size() != 1 && g.size() != b.size()))
        fail("bit layout \"%s\": %zu widths, %zu group sizes, %zu proportions", s.c_str(), b.size(), g.size(), p.size());
    BitLayout L;
    L.name = s;
    double sum = 0;
    for (size_t i = 0; i < b.size(); i++) {
        double bits, gs, prop;
        if (!to_number(b[i], bits) || !exl2_bits_valid((int)bits) || bits != (int)bits)
            fail("bit layout \"%s\": width \"%s\" is not one of 8, 6, 5, 4, 3, 2", s.c_str(), b[i].c_str());
        // Groups must fill whole words and the kernels' 32-row steps (16 allowed at 2 bits).
        const int gran = bits == 2 ? 16 : 32;
        if (!to_number(g[g.size() == 1 ? 0 : i], gs) || gs < gran || gs != (int)gs || (int)gs % gran)
            fail("bit layout \"%s\": group size \"%s\" is not a multiple of %d", s.c_str(), g[g.size() == 1 ? 0 : i].c_str(), gran);
        if (!to_number(p[i], prop) || !(prop > 0 && prop <= 1))
            fail("bit layout \"%s\": proportion \"%s\" is not in (0, 1]", s.c_str(), p[i].c_str());
        if (i > 0 && bits > L.parts.back().bits) fail("bit layout \"%s\": widths must not increase", s.c_str());
        L.parts.push_back({(int)bits, prop, (int)gs});
        sum += prop;
    }
    if (std::fabs(sum - 1.0) > 1e-6) fail("bit layout \"%s\": proportions add up to %g, not 1", s.c_str(), sum);
    return L;
}

const std::vector<std::string> & exl2_layout_options() {
    // Section 6.4: attention column options, MLP column options, head options (duplicates removed).
    static const std::vector<std::string> opts = {
        "3/2 g64 .05/.95", "3/2 g64 .1/.9", "3/2 g64 .25/.75", "3/2 g64 .3/.7", "4/2 g32 .3/.7",
        "4/3 g128 .1/.9", "4/3 g64 .1/.9", "4/3 g128 .25/.75", "4/3 g32 .1/.9", "4/3 g32 .25/.75", "4/3 g32 .15/.85",
        "4 g128", "4 g64", "4 g32",
        "5/3 g32 .05/.95", "5/4 g32 .05/.95", "5/4 g128 .1/.9", "5/4 g64 .1/.9", "5/4 g32 .1/.9",
        "5/4 g128 .25/.75", "5/4 g32 .25/.75", "5 g64", "5 g32",
        "6/3/2 g32,64,64 .05/.2/.75", "6/4 g32 .15/.85", "6/5 g128 .1/.9", "6/5 g32 .1/.9", "6/5 g128 .25/.75",
        "6/5 g32 .25/.75", "6/5 g128 .15/.85", "6 g128", "6 g32",
        "8/4/3 g32,128,128 .05/.1/.85", "8/4/3 g32 .05/.1/.85", "8/4 g32,128 .05/.95", "8/4 g32 .05/.95",
        "8/5/4 g32,128,128 .05/.1/.85", "8/5/4 g32 .05/.1/.85", "8/6/5 g32,128,128 .05/.1/.85",
        "8/6/5 g32 .05/.1/.85", "8/6 g32,128 .05/.95", "8/6 g128 .1/.9", "8/6 g128 .15/.85", "8 g32", "8 g128",
    };
    return opts;
}

std::vector<std::pair<int, int>> exl2_layout_groups(const BitLayout & L, int K) {
    if (K <= 0 || K % 32) fail("bit layout \"%s\": %d rows is not a positive multiple of 32", L.name.c_str(), K);
    std::vector<std::pair<int, int>> groups;
    int64_t remaining = K, row = 0;
    for (const BitPart & p : L.parts) {
        // As the converter: ceil(min(K*p, remaining) / group size) groups, computed in double.
        const double want = std::min((double)K * p.prop, (double)remaining);
        const int64_t n = want > 0 ? (int64_t)std::ceil(want / p.group_size) : 0;
        for (int64_t i = 0; i < n && row < K; i++) {
            const int rows = (int)std::min<int64_t>(p.group_size, K - row);
            groups.push_back({p.bits, rows});
            row += rows;
        }
        remaining -= n * p.group_size;
    }
    if (row != K) fail("bit layout \"%s\": groups cover %lld of %d rows", L.name.c_str(), (long long)row, K);
    return groups;
}

double exl2_layout_bpw(const BitLayout & L, int K, int N) {
    const int64_t Np = (N + 31) / 32 * 32;
    double bits = 32.0 * K;   // q_invperm
    for (const auto & g : exl2_layout_groups(L, K)) bits += (double)g.second * Np * g.first + 16 + 32 + 4.0 * Np;
    return bits / ((double)K * Np);
}

BitLayout exl2_layout_for_bpw(double target, int K, int N) {
    BitLayout best;
    double best_d = 1e30;
    for (const std::string & s : exl2_layout_options()) {
        BitLayout L = exl2_layout_parse(s);
        const double d = std::fabs(exl2_layout_bpw(L, K, N) - target);
        if (d < best_d) { best_d = d; best = std::move(L); }
    }
    return best;
}

// ---- random tensors ---------------------------------------------------------------------------

namespace {
struct Rng {   // splitmix64: fast, good enough for test data, reproducible across platforms
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
    uint32_t below(uint32_t n) { return (uint32_t)(((next() >> 32) * n) >> 32); }
    void fill(uint8_t * p, size_t n) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8) { const uint64_t v = next(); memcpy(p + i, &v, 8); }
        if (i < n) { const uint64_t v = next(); memcpy(p + i, &v, n - i); }
    }
    uint16_t log_uniform_f16(double lo, double hi) {
        return ggx_f32_to_f16((float)std::exp(std::log(lo) + uniform() * (std::log(hi) - std::log(lo))));
    }
};

// Large tensors are generated in place in their byte buffer: on some systems first-touch page
// faults dominate, so one allocation per tensor matters more than anything else here.
SynthTensor random_tensor(Rng & r, const std::string & name, StDtype dt, std::vector<int64_t> shape) {
    size_t n = st_dtype_size(dt);
    for (int64_t d : shape) n *= (size_t)d;
    SynthTensor t{name, dt, std::move(shape), std::vector<uint8_t>(n)};
    r.fill(t.bytes.data(), n);
    return t;
}
inline uint32_t get32(const std::vector<uint8_t> & b, size_t i) { uint32_t v; memcpy(&v, b.data() + 4 * i, 4); return v; }
inline void put32(std::vector<uint8_t> & b, size_t i, uint32_t v) { memcpy(b.data() + 4 * i, &v, 4); }

template <class T> SynthTensor make(const std::string & name, StDtype dt, std::vector<int64_t> shape, const std::vector<T> & v) {
    SynthTensor t{name, dt, std::move(shape), std::vector<uint8_t>(v.size() * sizeof(T))};
    if (!v.empty()) memcpy(t.bytes.data(), v.data(), t.bytes.size());
    return t;
}

std::vector<int32_t> random_perm(Rng & r, int K) {
    std::vector<int32_t> p(K);
    std::iota(p.begin(), p.end(), 0);
    for (int i = K - 1; i > 0; i--) std::swap(p[i], p[r.below((uint32_t)i + 1)]);
    return p;
}

std::vector<uint16_t> random_bias(Rng & r, int N) {
    std::vector<uint16_t> b(N);
    for (auto & v : b) v = ggx_f32_to_f16((float)(r.uniform() * 0.2 - 0.1));
    return b;
}
}  // namespace

std::vector<SynthTensor> synth_exl2_layer(const std::string & P, int K, int N, const BitLayout & layout,
                                          const SynthExl2Options & opt) {
    if (K > 65536) fail("synth_exl2_layer %s: K = %d exceeds 65536", P.c_str(), K);
    if (N <= 0) fail("synth_exl2_layer %s: N = %d", P.c_str(), N);
    const auto groups = exl2_layout_groups(layout, K);
    const int Np = (N + 31) / 32 * 32, G = (int)groups.size();
    Rng r{opt.seed * 0x2545F4914F6CDD1Dull + 1};

    std::vector<uint16_t> q_groups(2 * G);
    int QR = 0;
    for (int g = 0; g < G; g++) {
        q_groups[2 * g] = (uint16_t)groups[g].first;
        q_groups[2 * g + 1] = (uint16_t)QR;
        QR += groups[g].second * groups[g].first / 32;
    }
    if (QR >= 65536) fail("synth_exl2_layer %s: %d packed rows exceed 65535", P.c_str(), QR);

    SynthTensor q_weight = random_tensor(r, P + ".q_weight", StDtype::I32, {QR, Np});
    SynthTensor q_scale = random_tensor(r, P + ".q_scale", StDtype::I32, {G, Np / 8});
    if (Np != N) {
        // Padding columns: every value 2^(b-1) (dequantizes to 0), scale code 15 (section 4.6).
        for (int g = 0; g < G; g++) {
            const int b = groups[g].first, r0 = q_groups[2 * g + 1], words = groups[g].second * b / 32;
            const uint32_t zero = 1u << (b - 1);
            for (int w = 0; w < words; w++) {
                uint32_t word = 0;   // bit j of the group's bit string is bit (j mod b) of the zero code
                for (int j = 0; j < 32; j++) word |= ((zero >> ((32 * w + j) % b)) & 1u) << j;
                for (int n = N; n < Np; n++) put32(q_weight.bytes, (size_t)(r0 + w) * Np + n, word);
            }
            for (int n = N; n < Np; n++) {
                const size_t i = (size_t)g * Np / 8 + n / 8;
                put32(q_scale.bytes, i, get32(q_scale.bytes, i) | 15u << (4 * (n % 8)));
            }
        }
    }
    std::vector<uint16_t> q_scale_max(G);
    for (auto & m : q_scale_max) m = r.log_uniform_f16(1e-3, 1e-1);
    std::vector<int32_t> q_invperm(K);
    if (opt.act_order && opt.perm_seed) {
        Rng pr{opt.perm_seed * 0x9E3779B97F4A7C15ull + 3};
        q_invperm = random_perm(pr, K);
    } else if (opt.act_order) {
        q_invperm = random_perm(r, K);
    } else {
        std::iota(q_invperm.begin(), q_invperm.end(), 0);
    }

    std::vector<SynthTensor> out;
    out.push_back(std::move(q_weight));
    out.push_back(std::move(q_scale));
    out.push_back(make(P + ".q_scale_max", StDtype::F16, {G}, q_scale_max));
    out.push_back(make(P + ".q_groups", StDtype::I16, {2 * G}, q_groups));
    out.push_back(make(P + ".q_invperm", StDtype::I32, {K}, q_invperm));
    if (opt.bias) out.push_back(make(P + ".bias", StDtype::F16, {N}, random_bias(r, N)));
    return out;
}

std::vector<SynthTensor> synth_gptq_layer(const std::string & P, int K, int N, const SynthGptqOptions & opt) {
    const int gs = opt.group_size;
    if (K <= 0 || K % 8 || N <= 0 || N % 8) fail("synth_gptq_layer %s: K = %d and N = %d must be positive multiples of 8", P.c_str(), K, N);
    if (gs < 8 || (gs & (gs - 1))) fail("synth_gptq_layer %s: group size %d is not a power of two >= 8", P.c_str(), gs);
    const int G = (K + gs - 1) / gs;
    if (gptq_group_size(K, G) != gs) fail("synth_gptq_layer %s: %d groups of %d rows cannot be recognised for K = %d", P.c_str(), G, gs, K);
    Rng r{opt.seed * 0x9E3779B97F4A7C15ull + 7};

    SynthTensor qweight = random_tensor(r, P + ".qweight", StDtype::I32, {K / 8, N});
    SynthTensor qzeros = random_tensor(r, P + ".qzeros", StDtype::I32, {G, N / 8});
    if (opt.v2)   // true zero points 1..15, so that the loader's "minus one per nibble" never borrows
        for (size_t i = 0; i < qzeros.bytes.size() / 4; i++) {
            uint32_t w = get32(qzeros.bytes, i);
            for (int j = 0; j < 8; j++)
                if (((w >> (4 * j)) & 15) == 0) w |= 1u << (4 * j);
            put32(qzeros.bytes, i, w);
        }
    std::vector<int32_t> g_idx(K);
    if (opt.act_order) {
        const std::vector<int32_t> p = random_perm(r, K);
        for (int i = 0; i < K; i++) g_idx[p[i]] = i / gs;
    } else {
        for (int k = 0; k < K; k++) g_idx[k] = k / gs;
    }
    std::vector<SynthTensor> out;
    out.push_back(std::move(qweight));
    out.push_back(std::move(qzeros));
    std::vector<uint16_t> sc((size_t)G * N);
    for (auto & s : sc) s = r.log_uniform_f16(1e-5, 1e-2);
    if (opt.scales_f32) {
        std::vector<float> f(sc.size());
        for (size_t i = 0; i < f.size(); i++) f[i] = ggx_f16_to_f32(sc[i]) * (float)(1 + r.uniform() * 1e-3);
        out.push_back(make(P + ".scales", StDtype::F32, {G, N}, f));
    } else {
        out.push_back(make(P + ".scales", StDtype::F16, {G, N}, sc));
    }
    if (opt.g_idx || opt.act_order) out.push_back(make(P + ".g_idx", StDtype::I32, {K}, g_idx));
    if (opt.bias) out.push_back(make(P + ".bias", StDtype::F16, {N}, random_bias(r, N)));
    return out;
}

void synth_add(SafeTensors & st, std::vector<SynthTensor> && tensors) {
    for (SynthTensor & t : tensors) st.add(t.name, t.dtype, std::move(t.shape), std::move(t.bytes));
}

}  // namespace exl2
