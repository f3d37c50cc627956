// EXL2 / GPTQ formats: packing, bit-exact dequantization against ExLlamaV2's own output, loader
// validation. References: docs/exl2-format.md worked examples, an independent bit-string
// packer written here, ExLlamaV2's `reconstruct` output in fixtures/exl2/ref/*.dequant.safetensors,
// and a naive GPTQ dequantizer written here (long subtraction for the v2 zero fix).
#include "fixtures.h"

#include "exl2/error.h"
#include "exl2/json.h"
#include "exl2/quant/dequant.h"
#include "exl2/quant/exl2-pack.h"
#include "exl2/quant/qlayer.h"
#include "exl2/quant/synthetic.h"
#include "ggx/fp16.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <ios>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace exl2;

namespace {

template <class T> std::vector<T> tensor_vec(const StTensor & t) {
    std::vector<T> v(t.nbytes / sizeof(T));
    if (!v.empty()) memcpy(v.data(), t.data, t.nbytes);
    return v;
}

// Message of the exl2::Error thrown by f, or "" when nothing was thrown.
std::string error_of(const std::function<void()> & f) {
    try {
        f();
    } catch (const Error & e) {
        return e.what();
    }
    return "";
}

// Independent §3.1 packer: builds each column's bit string bit by bit.
std::vector<uint32_t> pack_bitstring(const std::vector<uint8_t> & codes, int R, int N, int bits) {
    std::vector<uint32_t> out((size_t)R * bits / 32 * N, 0);
    for (int n = 0; n < N; n++) {
        std::vector<int> s;
        for (int j = 0; j < R; j++)
            for (int i = 0; i < bits; i++) s.push_back((codes[(size_t)j * N + n] >> i) & 1);
        for (size_t b = 0; b < s.size(); b++) out[(b / 32) * N + n] |= (uint32_t)s[b] << (b % 32);
    }
    return out;
}

}  // namespace

// ---- (a) packing ------------------------------------------------------------------------------

TEST_CASE("exl2 pack: round trip and independent bit-string layout for every width and row count") {
    std::mt19937 rng(1234);
    for (int bits : {8, 6, 5, 4, 3, 2}) {
        CHECK(exl2_rows_per_chunk(bits) == 32 / std::gcd(bits, 32));
        for (int N : {1, 3, 8, 37}) {
            for (int R = 1; R <= 160; R++) {
                std::vector<uint8_t> codes((size_t)R * N);
                for (auto & c : codes) c = (uint8_t)(rng() & ((1u << bits) - 1));
                if (R * bits % 32) {
                    // Groups start on fresh words: a count that leaves a word partly filled is refused.
                    std::vector<uint32_t> out((size_t)(R * bits / 32 + 1) * N);
                    CHECK_THROWS_AS(exl2_pack_group(codes.data(), R, N, bits, out.data()), Error);
                    CHECK_THROWS_AS(exl2_unpack_group(out.data(), R, N, bits, codes.data()), Error);
                    continue;
                }
                std::vector<uint32_t> packed((size_t)R * bits / 32 * N);
                exl2_pack_group(codes.data(), R, N, bits, packed.data());
                REQUIRE(packed == pack_bitstring(codes, R, N, bits));
                std::vector<uint8_t> back(codes.size());
                exl2_unpack_group(packed.data(), R, N, bits, back.data());
                REQUIRE(back == codes);
                for (int j = 0; j < R; j += 7) CHECK(exl2_extract(packed.data(), N, N - 1, j, bits) == codes[(size_t)j * N + N - 1]);
            }
        }
    }
    // Bad widths and codes that do not fit.
    uint8_t c[32] = {0};
    uint32_t w[8];
    CHECK_THROWS_AS(exl2_pack_group(c, 32, 1, 7, w), Error);
    CHECK_THROWS_AS(exl2_pack_group(c, 32, 1, 1, w), Error);
    c[5] = 8;
    CHECK_THROWS_AS(exl2_pack_group(c, 32, 1, 3, w), Error);
    CHECK_NOTHROW(exl2_pack_group(c, 32, 1, 4, w));
}

TEST_CASE("exl2 pack: worked examples of section 3.2") {
    const uint8_t v4[8] = {3, 15, 0, 8, 1, 2, 9, 7};
    uint32_t w4;
    exl2_pack_group(v4, 8, 1, 4, &w4);
    CHECK(w4 == 0x792180F3u);

    // 3-bit: 32 values in 3 words; v10 and v21 straddle.
    uint8_t v3[32];
    for (int j = 0; j < 32; j++) v3[j] = (uint8_t)((j * 5 + 3) & 7);
    uint32_t w3[3];
    exl2_pack_group(v3, 32, 1, 3, w3);
    for (int j = 0; j <= 9; j++) CHECK(((w3[0] >> (3 * j)) & 7) == v3[j]);
    CHECK((w3[0] >> 30) == (v3[10] & 3u));
    CHECK((w3[1] & 1) == (v3[10] >> 2));
    for (int j = 11; j <= 20; j++) CHECK(((w3[1] >> (3 * j - 32)) & 7) == v3[j]);
    CHECK((w3[1] >> 31) == (v3[21] & 1u));
    CHECK((w3[2] & 3) == (v3[21] >> 1));
    for (int j = 22; j <= 31; j++) CHECK(((w3[2] >> (3 * j - 64)) & 7) == v3[j]);

    // 6-bit: 16 values in 3 words; v5 and v10 straddle.
    uint8_t v6[16];
    for (int j = 0; j < 16; j++) v6[j] = (uint8_t)((j * 23 + 11) & 63);
    uint32_t w6[3];
    exl2_pack_group(v6, 16, 1, 6, w6);
    for (int j = 0; j <= 4; j++) CHECK(((w6[0] >> (6 * j)) & 63) == v6[j]);
    CHECK(((w6[0] >> 30) | ((w6[1] & 15) << 2)) == v6[5]);
    for (int j = 6; j <= 9; j++) CHECK(((w6[1] >> (6 * j - 32)) & 63) == v6[j]);
    CHECK(((w6[1] >> 28) | ((w6[2] & 3) << 4)) == v6[10]);
    for (int j = 11; j <= 15; j++) CHECK(((w6[2] >> (6 * j - 64)) & 63) == v6[j]);

    // 8-bit: v_{4i+t} is byte t of word i; 2-bit: v_{16i+t} at bits 2t.
    const uint8_t v8[4] = {0x12, 0x34, 0x56, 0x78};
    uint32_t w8;
    exl2_pack_group(v8, 4, 1, 8, &w8);
    CHECK(w8 == 0x78563412u);
    uint8_t v2[16];
    for (int j = 0; j < 16; j++) v2[j] = (uint8_t)(j & 3);
    uint32_t w2;
    exl2_pack_group(v2, 16, 1, 2, &w2);
    CHECK(w2 == 0xE4E4E4E4u);
}

TEST_CASE("gptq rows and nibble packing round trip") {
    std::mt19937 rng(99);
    for (int N : {1, 7, 8, 9, 40}) {
        std::vector<uint8_t> c((size_t)24 * N), back(c.size());
        for (auto & v : c) v = (uint8_t)(rng() & 15);
        std::vector<uint32_t> rows((size_t)3 * N);
        gptq_pack_rows(c.data(), 24, N, rows.data());
        CHECK(rows == pack_bitstring(c, 24, N, 4));
        gptq_unpack_rows(rows.data(), 24, N, back.data());
        CHECK(back == c);
        const int W = (N + 7) / 8;
        std::vector<uint32_t> nib((size_t)24 * W);
        nibbles_pack(c.data(), 24, N, nib.data());
        for (int r = 0; r < 24; r++)
            for (int n = 0; n < N; n++) CHECK(((nib[(size_t)r * W + n / 8] >> (4 * (n % 8))) & 15) == c[(size_t)r * N + n]);
        if (N % 8) CHECK((nib[W - 1] >> (4 * (N % 8))) == 0);   // unused nibbles are 0
        nibbles_unpack(nib.data(), 24, N, back.data());
        CHECK(back == c);
    }
    uint8_t c[16] = {0};
    uint32_t w[2];
    CHECK_THROWS_AS(gptq_pack_rows(c, 12, 1, w), Error);
    c[3] = 16;
    CHECK_THROWS_AS(nibbles_pack(c, 1, 16, w), Error);
}

// ---- dequantization: worked example, fixtures -------------------------------------------------

TEST_CASE("exl2 dequant: worked example of section 4.3, alone and through the loader") {
    CHECK(exl2_prescale_max(0x2251, 1.0f) == 0x0328);   // subnormal after the 1/256 prescale
    CHECK(exl2_dq_scale(11, 0x0328) == 0x1F1A);
    const uint32_t vs[5] = {0, 3, 4, 5, 7};
    const uint16_t want[5] = {0xA71A, 0x9F1A, 0x0000, 0x1F1A, 0x2554};
    for (int i = 0; i < 5; i++) CHECK(exl2_dq_weight(vs[i], 3, 0x1F1A) == want[i]);

    // One 3-bit group of 32 rows x 32 columns holding those values at column 5 (code 11).
    const int K = 32, N = 32;
    std::vector<uint8_t> codes((size_t)K * N, 4);
    for (int i = 0; i < 5; i++) codes[(size_t)i * N + 5] = (uint8_t)vs[i];
    std::vector<uint32_t> qw((size_t)3 * N);
    exl2_pack_group(codes.data(), K, N, 3, qw.data());
    std::vector<uint8_t> sc(N, 0);
    sc[5] = 11;
    std::vector<uint32_t> qs(N / 8);
    nibbles_pack(sc.data(), 1, N, qs.data());
    std::vector<int32_t> inv(K);
    for (int i = 0; i < K; i++) inv[i] = (i * 7) % K;   // a permutation (7 is odd)
    SafeTensors st;
    auto bytes = [](const void * p, size_t n) { return std::vector<uint8_t>((const uint8_t *)p, (const uint8_t *)p + n); };
    const uint16_t m = 0x2251, groups[2] = {3, 0};
    st.add("L.q_weight", StDtype::I32, {3, N}, bytes(qw.data(), qw.size() * 4));
    st.add("L.q_scale", StDtype::I32, {1, N / 8}, bytes(qs.data(), qs.size() * 4));
    st.add("L.q_scale_max", StDtype::F16, {1}, bytes(&m, 2));
    st.add("L.q_groups", StDtype::I16, {2}, bytes(groups, 4));
    st.add("L.q_invperm", StDtype::I32, {K}, bytes(inv.data(), inv.size() * 4));
    const QLayerHost L = qlayer_load(st, "L");
    std::vector<uint16_t> W((size_t)K * N);
    qmatrix_dequant(qlayer_host_view(L), GGX_TYPE_EXL2, W.data());
    // Quantized row i is original row q_perm[i], i.e. original row r holds quantized row inv[r].
    for (int r = 0; r < K; r++) {
        const int i = inv[r];
        CHECK(W[(size_t)r * N + 5] == (i < 5 ? want[i] : 0));
    }
}

TEST_CASE("exl2 dequant: every fixture layer equals ExLlamaV2's reconstruct bit for bit") {
    REQUIRE_FIXTURE(root, "exl2");
    const Json layers = Json::parse_file(root + "/ref/layers.json");
    std::set<int> widths_seen;
    int n_layers = 0;
    for (const char * m : {"2.7bpw", "4.0bpw", "8.0bpw"}) {
        SafeTensors st, ref;
        st.open_file(root + "/" + m + "/output.safetensors");
        ref.open_file(root + "/ref/" + m + ".dequant.safetensors");
        int in_file = 0;
        for (const auto & kv : st.tensors())
            if (kv.first.size() > 9 && kv.first.compare(kv.first.size() - 9, 9, ".q_weight") == 0) in_file++;
        CHECK(in_file == (int)ref.tensors().size());   // every quantized layer has a reference
        for (const auto & kv : ref.tensors()) {
            const std::string & key = kv.first;
            CAPTURE(m);
            CAPTURE(key);
            REQUIRE(qlayer_detect(st, key) == QFormat::EXL2);
            const QLayerHost L = qlayer_load(st, key);
            const StTensor & rt = kv.second;
            REQUIRE(rt.dtype == StDtype::F16);
            REQUIRE(rt.shape == std::vector<int64_t>{L.K, L.N});
            const std::vector<uint16_t> want = tensor_vec<uint16_t>(rt);

            // The loaded (transformed) matrix.
            std::vector<uint16_t> got((size_t)L.K * L.N);
            qmatrix_dequant(qlayer_host_view(L), GGX_TYPE_EXL2, got.data());
            size_t bad = 0, first_bad = 0;
            for (size_t i = 0; i < got.size(); i++)
                if (got[i] != want[i] && bad++ == 0) first_bad = i;
            CHECK_MESSAGE(bad == 0, bad << " of " << got.size() << " differ; first at row " << first_bad / L.N << " col "
                                        << first_bad % L.N << ": 0x" << std::hex << got[first_bad] << " vs 0x" << want[first_bad]);

            // The oracle on the raw file arrays.
            const auto qw = tensor_vec<uint32_t>(st.get(key + ".q_weight"));
            const auto qs = tensor_vec<uint32_t>(st.get(key + ".q_scale"));
            const auto qm = tensor_vec<uint16_t>(st.get(key + ".q_scale_max"));
            const auto qg = tensor_vec<uint16_t>(st.get(key + ".q_groups"));
            const auto qi = tensor_vec<int32_t>(st.get(key + ".q_invperm"));
            Exl2Raw raw;
            raw.K = L.K; raw.N = L.N; raw.Np = L.Np; raw.G = L.G; raw.QR = L.QR;
            raw.q_weight = qw.data(); raw.q_scale = qs.data(); raw.q_scale_max = qm.data();
            raw.q_groups = qg.data(); raw.q_invperm = qi.data();
            std::vector<uint16_t> oracle((size_t)L.K * L.N);
            exl2_dequant_ref(raw, 1.0f, oracle.data());
            CHECK(oracle == want);

            // Group layout as recorded by ExLlamaV2's loader.
            const Json & lj = layers.get(m).get(key);
            CHECK(lj.get("in_features").as_int() == L.K);
            CHECK(lj.get("out_features").as_int() == L.N);
            const Json & gj = lj.get("groups");
            REQUIRE((int)gj.size() == L.G);
            for (int g = 0; g < L.G; g++) {
                CHECK(gj[g].get("bits").as_int() == L.q_groups[2 * g]);
                CHECK(gj[g].get("first_qrow").as_int() == L.q_groups[2 * g + 1]);
            }
            for (int w = 0; w < GGX_EXL2_N_WIDTHS; w++) {
                const Json * bw = lj.get("bits_groups_rows").find(std::to_string(ggx_exl2_widths[w]));
                CHECK((bw ? bw->get("rows").as_int() : 0) == L.rows_per_width[w]);
                if (L.rows_per_width[w]) widths_seen.insert(ggx_exl2_widths[w]);
            }
            n_layers++;
        }
    }
    CHECK(n_layers == 3 * 22);
    CHECK(widths_seen == std::set<int>{8, 6, 5, 4, 3, 2});
}

TEST_CASE("exl2 dequant: prescale multiplies the group maximum in fp16 (loader == oracle)") {
    for (float prescale : {1.0f, 0.125f, 0.7071f, 3.3f}) {
        SafeTensors st;
        synth_add(st, synth_exl2_layer("L", 256, 72, exl2_layout_parse("6/3/2 g32,64,64 .05/.2/.75"), {}));
        QLoadOptions o;
        o.prescale = prescale;
        o.N = 72;
        const QLayerHost L = qlayer_load(st, "L", o);
        CHECK(L.Np == 96);
        std::vector<uint16_t> got((size_t)L.K * L.N), want(got.size());
        qmatrix_dequant(qlayer_host_view(L), GGX_TYPE_EXL2, got.data());
        const auto qw = tensor_vec<uint32_t>(st.get("L.q_weight"));
        const auto qs = tensor_vec<uint32_t>(st.get("L.q_scale"));
        const auto qm = tensor_vec<uint16_t>(st.get("L.q_scale_max"));
        const auto qg = tensor_vec<uint16_t>(st.get("L.q_groups"));
        const auto qi = tensor_vec<int32_t>(st.get("L.q_invperm"));
        Exl2Raw raw;
        raw.K = L.K; raw.N = L.N; raw.Np = L.Np; raw.G = L.G; raw.QR = L.QR;
        raw.q_weight = qw.data(); raw.q_scale = qs.data(); raw.q_scale_max = qm.data();
        raw.q_groups = qg.data(); raw.q_invperm = qi.data();
        exl2_dequant_ref(raw, prescale, want.data());
        CHECK(got == want);
        // And directly from the formula for one element per group.
        for (int g = 0; g < L.G; g++)
            CHECK(L.q_scale_max[g] == ggx_f32_to_f16(ggx_f16_to_f32(qm[g]) * (prescale / 256.0f)));
    }
}

// ---- layouts and sizes (section 6.8 table) ----------------------------------------------------

TEST_CASE("exl2 layouts: group counts and storage cost of the section 6.8 table") {
    struct Row { const char * opt; int K, N; int64_t bits; };
    const Row rows[] = {
        {"4/3 g128 .1/.9", 4096, 4096, 53085696},     {"4 g128", 4096, 4096, 67765760},
        {"3/2 g64 .05/.95", 4096, 4096, 35785728},    {"8/4 g32,128 .05/.95", 14336, 4096, 249534560},
        {"8/6 g128 .15/.85", 4096, 128256, 3332736512},
    };
    for (const Row & r : rows) {
        CAPTURE(r.opt);
        const BitLayout L = exl2_layout_parse(r.opt);
        CHECK(std::llround(exl2_layout_bpw(L, r.K, r.N) * r.K * ((r.N + 31) / 32 * 32)) == r.bits);
    }
    const auto g = exl2_layout_groups(exl2_layout_parse("8/4 g32,128 .05/.95"), 14336);
    int n8 = 0, n4 = 0;
    for (auto & p : g) (p.first == 8 ? n8 : n4)++;
    CHECK(n8 == 23);
    CHECK(n4 == 107);
    CHECK(g.back().second == 32);
    CHECK(exl2_layout_for_bpw(4.0, 4096, 4096).name == "4 g128");
    for (double target : {2.5, 3.0, 4.5, 6.0}) {
        const BitLayout best = exl2_layout_for_bpw(target, 4096, 14336);
        const double d = std::fabs(exl2_layout_bpw(best, 4096, 14336) - target);
        CAPTURE(target);
        CHECK(d < 0.25);   // the options are at most ~0.4 bpw apart
        for (const std::string & s : exl2_layout_options())
            CHECK(std::fabs(exl2_layout_bpw(exl2_layout_parse(s), 4096, 14336) - target) >= d);
    }
    for (const std::string & s : exl2_layout_options()) CHECK_NOTHROW(exl2_layout_parse(s));
    CHECK_THROWS_AS(exl2_layout_parse("4/5 g128 .5/.5"), Error);
    CHECK_THROWS_AS(exl2_layout_parse("7 g128"), Error);
    CHECK_THROWS_AS(exl2_layout_parse("4/3 g128 .2/.2"), Error);

    // A synthetic layer's stored cost matches the layout's.
    SafeTensors st;
    const BitLayout L = exl2_layout_parse("8/4/3 g32,128,128 .05/.1/.85");
    synth_add(st, synth_exl2_layer("L", 1024, 512, L, {}));
    const QLayerHost h = qlayer_load(st, "L");
    CHECK(qlayer_bpw(h) == doctest::Approx(exl2_layout_bpw(L, 1024, 512)).epsilon(1e-12));
    CHECK(qlayer_bytes_read(h) == (size_t)h.QR * 512 * 4 + (size_t)h.G * (64 * 4 + 6) + 1024 * 4);
}

// ---- (c) validation -----------------------------------------------------------------------------

namespace {
struct Mut {
    std::string tensor;   // suffix after the prefix, e.g. "q_groups"
    std::function<void(StDtype &, std::vector<int64_t> &, std::vector<uint8_t> &)> fn;
};

// Copies every tensor of `src` (prefix "L.") into a new set, applying `m` to one of them
// (a null fn removes the tensor), and returns the load error ("" when it loads).
std::string load_error(const SafeTensors & src, const Mut & m, QLoadOptions o = {}) {
    SafeTensors st;
    for (const auto & kv : src.tensors()) {
        StDtype dt = kv.second.dtype;
        std::vector<int64_t> shape = kv.second.shape;
        std::vector<uint8_t> bytes(kv.second.data, kv.second.data + kv.second.nbytes);
        if (kv.first == "L." + m.tensor) {
            if (!m.fn) continue;
            m.fn(dt, shape, bytes);
        }
        st.add(kv.first, dt, shape, bytes);
    }
    return error_of([&] { qlayer_load(st, "L", o); });
}

template <class T> void poke(std::vector<uint8_t> & b, size_t i, T v) { memcpy(b.data() + i * sizeof(T), &v, sizeof(T)); }
template <class T> T peek(const std::vector<uint8_t> & b, size_t i) { T v; memcpy(&v, b.data() + i * sizeof(T), sizeof(T)); return v; }
}  // namespace

TEST_CASE("exl2 loader: corrupted tensors give an error naming the tensor") {
    SafeTensors src;
    // 4-bit groups then 3-bit groups: q_groups = (4,0) (4,16) (3,32) (3,44) ...
    synth_add(src, synth_exl2_layer("L", 512, 64, exl2_layout_parse("4/3 g128 .25/.75"), {}));
    REQUIRE(load_error(src, {"none", nullptr}) == "");

    struct Case { const char * what; const char * names; Mut m; };
    const Case cases[] = {
        {"q_groups: second group starts inside the first", "L.q_groups",
         {"q_groups", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) { poke<uint16_t>(b, 3, 8); }}},
        {"q_groups: first group not at packed row 0", "L.q_groups",
         {"q_groups", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) { poke<uint16_t>(b, 1, 1); }}},
        {"q_groups: last group beyond q_weight", "L.q_groups",
         {"q_groups", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { poke<uint16_t>(b, (size_t)s[0] - 1, 5000); }}},
        {"q_groups: width 7", "L.q_groups",
         {"q_groups", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) { poke<uint16_t>(b, 0, 7); }}},
        {"q_groups: increasing widths", "L.q_groups",
         {"q_groups", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) { poke<uint16_t>(b, 4, 8); }}},
        {"q_groups: rows not a multiple of 32", "L.q_groups",   // group 1 (4-bit) gets 15 words = 120 rows
         {"q_groups", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) { poke<uint16_t>(b, 3, 17); }}},
        {"q_groups: odd length", "L.q_groups",
         {"q_groups", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[0]--; b.resize(b.size() - 2); }}},
        {"q_groups: wrong dtype", "L.q_groups",
         {"q_groups", [](StDtype & d, std::vector<int64_t> & s, std::vector<uint8_t> &) { d = StDtype::F16; (void)s; }}},
        {"q_weight: extra packed rows (groups end before QR)", "L.q_groups",
         {"q_weight", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[0] += 3; b.resize(b.size() + 3 * 64 * 4); }}},
        {"q_weight: wrong dtype", "L.q_weight",
         {"q_weight", [](StDtype & d, std::vector<int64_t> &, std::vector<uint8_t> &) { d = StDtype::F32; }}},
        {"q_weight: columns not a multiple of 32", "L.q_weight",
         {"q_weight", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[1] = 48; b.resize((size_t)s[0] * 48 * 4); }}},
        {"q_weight: missing", "L.q_scale",   // detection then finds no EXL2 layer... see below
         {"q_scale", nullptr}},
        {"q_scale: wrong shape", "L.q_scale",
         {"q_scale", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[1] *= 2; b.resize(b.size() * 2); }}},
        {"q_scale_max: wrong length", "L.q_scale_max",
         {"q_scale_max", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[0]++; b.resize(b.size() + 2); }}},
        {"q_scale_max: wrong dtype", "L.q_scale_max",
         {"q_scale_max", [](StDtype & d, std::vector<int64_t> & s, std::vector<uint8_t> & b) { d = StDtype::F32; b.resize((size_t)s[0] * 4); }}},
        {"q_scale_max: NaN", "L.q_scale_max",
         {"q_scale_max", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) { poke<uint16_t>(b, 1, 0x7E00); }}},
        {"q_invperm: duplicate entry", "L.q_invperm",
         {"q_invperm", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) { poke<int32_t>(b, 9, peek<int32_t>(b, 4)); }}},
        {"q_invperm: out of range", "L.q_invperm",
         {"q_invperm", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) { poke<int32_t>(b, 2, 512); }}},
        {"q_invperm: negative", "L.q_invperm",
         {"q_invperm", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) { poke<int32_t>(b, 0, -1); }}},
        {"q_invperm: length disagrees with the groups", "L.q_groups",
         {"q_invperm", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[0] = 480; b.resize(480 * 4); }}},
        {"q_invperm: wrong dtype", "L.q_invperm",
         {"q_invperm", [](StDtype & d, std::vector<int64_t> & s, std::vector<uint8_t> & b) { d = StDtype::I16; b.resize((size_t)s[0] * 2); }}},
    };
    for (const Case & c : cases) {
        CAPTURE(c.what);
        const std::string e = load_error(src, c.m);
        CAPTURE(e);
        CHECK(!e.empty());
        CHECK(e.find(c.names) != std::string::npos);
        CHECK(e.find('\n') == std::string::npos);
    }
    // Output features that the packed width cannot hold; a bias of the wrong length.
    QLoadOptions o;
    o.N = 100;
    CHECK(load_error(src, {"none", nullptr}, o).find("L.q_weight") != std::string::npos);
    o.N = 40;
    CHECK(load_error(src, {"none", nullptr}, o) == "");
    SafeTensors sb;
    SynthExl2Options so;
    so.bias = true;
    synth_add(sb, synth_exl2_layer("L", 256, 64, exl2_layout_parse("4 g128"), so));
    CHECK(load_error(sb, {"none", nullptr}) == "");
    CHECK(load_error(sb, {"bias", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[0] = 16; b.resize(32); }})
              .find("L.q_weight") != std::string::npos);   // 16 features do not pad to 64 columns
    o.N = 64;
    CHECK(load_error(sb, {"bias", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[0] = 63; b.resize(126); }}, o)
              .find("L.bias") != std::string::npos);
    // Nothing quantized at the prefix.
    SafeTensors empty;
    empty.add("L.weight", StDtype::F16, {1}, {0, 0});
    CHECK(error_of([&] { qlayer_load(empty, "L"); }).find("L.q_weight") != std::string::npos);
}

// ---- (d) GPTQ ---------------------------------------------------------------------------------

namespace {
// Naive GPTQ dequantizer written from section 5, independent of exl2/quant: group from g_idx
// directly (no sorting), the v2 zero fix as nibble-by-nibble long subtraction with borrow.
std::vector<uint16_t> gptq_naive(const SafeTensors & st, bool v2, float prescale) {
    const StTensor & qwt = st.get("L.qweight");
    const int K = (int)qwt.shape[0] * 8, N = (int)qwt.shape[1];
    const auto qw = tensor_vec<uint32_t>(qwt);
    const auto qz = tensor_vec<uint32_t>(st.get("L.qzeros"));
    const StTensor & sct = st.get("L.scales");
    const int G = (int)sct.shape[0];
    std::vector<float> sc((size_t)G * N);
    for (size_t i = 0; i < sc.size(); i++) {
        if (sct.dtype == StDtype::F16) sc[i] = ggx_f16_to_f32(tensor_vec<uint16_t>(sct)[i]);
        else sc[i] = ggx_round_f16(tensor_vec<float>(sct)[i]);
    }
    std::vector<int32_t> g_idx(K, 0);
    if (const StTensor * gi = st.find("L.g_idx")) g_idx = tensor_vec<int32_t>(*gi);
    bool all_zero = true;
    for (int g : g_idx) all_zero = all_zero && g == 0;
    int gs = 1;
    while (gs * G < K) gs *= 2;
    std::vector<uint16_t> W((size_t)K * N);
    for (int k = 0; k < K; k++) {
        const int g = all_zero ? k / gs : g_idx[k];
        for (int n = 0; n < N; n++) {
            const int q = (int)((qw[(size_t)(k / 8) * N + n] >> (4 * (k % 8))) & 15);
            uint32_t word = qz[(size_t)g * (N / 8) + n / 8];
            int nibs[8];
            for (int i = 0; i < 8; i++) nibs[i] = (int)((word >> (4 * i)) & 15);
            if (v2) {
                int borrow = 0;
                for (int i = 0; i < 8; i++) {
                    int d = nibs[i] - 1 - borrow;
                    borrow = d < 0;
                    nibs[i] = d + 16 * borrow;
                }
            }
            const double scale = ggx_round_f16((float)((double)sc[(size_t)g * N + n] * prescale));
            const double w = (double)(q - (nibs[n % 8] + 1)) * scale;   // exact: small int x fp16
            W[(size_t)k * N + n] = ggx_f32_to_f16((float)w);
        }
    }
    return W;
}
}  // namespace

TEST_CASE("gptq dequant: v1/v2, with and without g_idx, act-order, against a naive reference") {
    int cases = 0;
    for (bool v2 : {false, true})
        for (int mode = 0; mode < 4; mode++)   // 0: no g_idx, 1: trivial g_idx, 2: act-order, 3: act-order + f32 scales
            for (int gs : {32, 128}) {
                SynthGptqOptions o;
                o.group_size = gs;
                o.v2 = v2;
                o.g_idx = mode >= 1;
                o.act_order = mode >= 2;
                o.scales_f32 = mode == 3;
                o.seed = (uint64_t)(10 * mode + gs + v2);
                const int K = 256, N = 24;
                SafeTensors st;
                synth_add(st, synth_gptq_layer("L", K, N, o));
                const float prescale = mode == 1 ? 0.5f : 1.0f;
                QLoadOptions lo;
                lo.gptq_v2 = v2;
                lo.prescale = prescale;
                const QLayerHost L = qlayer_load(st, "L", lo);
                CAPTURE(v2);
                CAPTURE(mode);
                CAPTURE(gs);
                CHECK(L.format == QFormat::GPTQ);
                CHECK(L.group_size == gs);
                CHECK(L.q_perm.empty() == (mode < 2));
                const std::vector<uint16_t> want = gptq_naive(st, v2, prescale);
                std::vector<uint16_t> got(want.size()), oracle(want.size());
                qmatrix_dequant(qlayer_host_view(L), GGX_TYPE_GPTQ, got.data());
                CHECK(got == want);
                // The oracle on raw arrays (scales handed over as fp16).
                const auto qw = tensor_vec<uint32_t>(st.get("L.qweight"));
                const auto qz = tensor_vec<uint32_t>(st.get("L.qzeros"));
                std::vector<uint16_t> sc((size_t)L.G * N);
                const StTensor & sct = st.get("L.scales");
                for (size_t i = 0; i < sc.size(); i++)
                    sc[i] = sct.dtype == StDtype::F16 ? tensor_vec<uint16_t>(sct)[i] : ggx_f32_to_f16(tensor_vec<float>(sct)[i]);
                std::vector<int32_t> gi;
                if (st.has("L.g_idx")) gi = tensor_vec<int32_t>(st.get("L.g_idx"));
                GptqRaw raw;
                raw.K = K; raw.N = N; raw.G = L.G;
                raw.qweight = qw.data(); raw.qzeros = qz.data(); raw.scales = sc.data();
                raw.g_idx = gi.empty() ? nullptr : gi.data();
                gptq_dequant_ref(raw, v2, prescale, oracle.data());
                CHECK(oracle == want);
                cases++;
            }
    CHECK(cases == 16);
}

TEST_CASE("gptq dequant: v2 zero nibble 0 borrows from its neighbour, as ExLlamaV2 does") {
    SynthGptqOptions o;
    o.group_size = 32;
    o.v2 = true;
    o.g_idx = false;
    SafeTensors src;
    synth_add(src, synth_gptq_layer("L", 64, 16, o));
    SafeTensors st;
    for (const auto & kv : src.tensors()) {
        std::vector<uint8_t> b(kv.second.data, kv.second.data + kv.second.nbytes);
        if (kv.first == "L.qzeros") {
            poke<uint32_t>(b, 0, 0x88888808u);   // nibble 1 is 0: it borrows from nibble 2
            poke<uint32_t>(b, 3, 0x00000000u);   // every nibble borrows
        }
        st.add(kv.first, kv.second.dtype, kv.second.shape, b);
    }
    QLoadOptions lo;
    lo.gptq_v2 = true;
    const QLayerHost L = qlayer_load(st, "L", lo);
    CHECK(L.qzeros[0] == 0x88888808u - 0x11111111u);
    CHECK(((L.qzeros[0] >> 4) & 15) == 15);
    CHECK(((L.qzeros[0] >> 8) & 15) == 6);
    const std::vector<uint16_t> want = gptq_naive(st, true, 1.0f);
    std::vector<uint16_t> got(want.size());
    qmatrix_dequant(qlayer_host_view(L), GGX_TYPE_GPTQ, got.data());
    CHECK(got == want);
}

TEST_CASE("gptq loader: corrupted tensors give an error naming the tensor") {
    SynthGptqOptions o;
    o.group_size = 32;
    o.act_order = true;
    SafeTensors src;
    synth_add(src, synth_gptq_layer("L", 128, 16, o));
    REQUIRE(load_error(src, {"none", nullptr}) == "");
    struct Case { const char * what; const char * names; Mut m; };
    const Case cases[] = {
        {"qweight: columns not a multiple of 8", "L.qweight",
         {"qweight", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[1] = 12; b.resize((size_t)s[0] * 12 * 4); }}},
        {"qweight: wrong dtype", "L.qweight",
         {"qweight", [](StDtype & d, std::vector<int64_t> &, std::vector<uint8_t> &) { d = StDtype::F32; }}},
        {"qzeros: wrong width", "L.qzeros",
         {"qzeros", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[1] = 1; b.resize((size_t)s[0] * 4); }}},
        {"qzeros: too many groups for a usable group size", "L.qzeros",
         {"qzeros", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[0] = 5; b.resize(5 * 2 * 4); }}},
        {"scales: wrong shape", "L.scales",
         {"scales", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[1] = 8; b.resize((size_t)s[0] * 8 * 2); }}},
        {"scales: wrong dtype", "L.scales",
         {"scales", [](StDtype & d, std::vector<int64_t> &, std::vector<uint8_t> &) { d = StDtype::I16; }}},
        {"scales: infinite", "L.scales",
         {"scales", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) { poke<uint16_t>(b, 5, 0x7C00); }}},
        {"g_idx: group out of range", "L.g_idx",
         {"g_idx", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) { poke<int32_t>(b, 7, 4); }}},
        {"g_idx: unequal groups", "L.g_idx",
         {"g_idx", [](StDtype &, std::vector<int64_t> &, std::vector<uint8_t> & b) {
              for (int k = 0; k < 128; k++) if (peek<int32_t>(b, k) == 1) { poke<int32_t>(b, k, 0); break; } }}},
        {"g_idx: wrong length", "L.g_idx",
         {"g_idx", [](StDtype &, std::vector<int64_t> & s, std::vector<uint8_t> & b) { s[0] = 64; b.resize(256); }}},
    };
    for (const Case & c : cases) {
        CAPTURE(c.what);
        const std::string e = load_error(src, c.m);
        CAPTURE(e);
        CHECK(e.find(c.names) != std::string::npos);
    }
    QLoadOptions lo;
    lo.N = 32;
    CHECK(load_error(src, {"none", nullptr}, lo).find("L.qweight") != std::string::npos);
    // An all-zero bias is dropped (section 5).
    SafeTensors sb;
    o.bias = true;
    synth_add(sb, synth_gptq_layer("L", 128, 16, o));
    CHECK(!qlayer_load(sb, "L").bias.empty());
    SafeTensors sz;
    for (const auto & kv : sb.tensors()) {
        std::vector<uint8_t> b(kv.second.data, kv.second.data + kv.second.nbytes);
        if (kv.first == "L.bias") std::fill(b.begin(), b.end(), 0);
        sz.add(kv.first, kv.second.dtype, kv.second.shape, b);
    }
    CHECK(qlayer_load(sz, "L").bias.empty());
}

// ---- upload -----------------------------------------------------------------------------------

namespace {
// A host-memory backend with only the slots qlayer_upload uses; counts calls.
struct FakeBe {
    int allocs = 0, deallocs = 0, prepares = 0, releases = 0;
    std::vector<std::pair<void *, size_t>> live;
};
FakeBe * fake(ggx_backend * be) { return (FakeBe *)be->context; }
ggx_status fb_alloc(ggx_backend * be, size_t n, void ** out) {
    *out = aligned_alloc(256, (n + 255) / 256 * 256);
    fake(be)->allocs++;
    fake(be)->live.push_back({*out, n});
    return GGX_STATUS_OK;
}
void fb_dealloc(ggx_backend * be, void * p) { fake(be)->deallocs++; free(p); }
ggx_status fb_set(ggx_backend *, void * dst, const void * src, size_t n) { memcpy(dst, src, n); return GGX_STATUS_OK; }
ggx_status fb_prepare(ggx_backend * be, ggx_tensor *) { fake(be)->prepares++; return GGX_STATUS_OK; }
void fb_release(ggx_backend * be, ggx_tensor *) { fake(be)->releases++; }
}  // namespace

TEST_CASE("qlayer_upload: one aligned buffer, descriptor matches the host layer, release frees it") {
    FakeBe state;
    ggx_backend be;
    memset(&be, 0, sizeof be);
    be.api_version = GGX_BACKEND_API_VERSION;
    be.iface.alloc = fb_alloc;
    be.iface.dealloc = fb_dealloc;
    be.iface.set = fb_set;
    be.iface.qmatrix_prepare = fb_prepare;
    be.iface.qmatrix_release = fb_release;
    be.name = "fake";
    be.is_host = 1;
    be.alignment = 128;
    be.context = &state;
    ggx_context * ctx = ggx_context_new();

    for (int fmt = 0; fmt < 2; fmt++) {
        SafeTensors st;
        if (fmt == 0) {
            synth_add(st, synth_exl2_layer("blk.3.mlp.down_proj", 384, 200, exl2_layout_parse("8/4/3 g32 .05/.1/.85"), {}));
        } else {
            SynthGptqOptions o;
            o.act_order = true;
            o.group_size = 64;
            synth_add(st, synth_gptq_layer("blk.3.mlp.down_proj", 384, 200, o));
        }
        QLoadOptions lo;
        lo.N = 200;
        const QLayerHost L = qlayer_load(st, "blk.3.mlp.down_proj", lo);
        void * buf = nullptr;
        ggx_tensor * t = qlayer_upload(ctx, &be, L, &buf);
        REQUIRE(t);
        CHECK(t->type == (fmt == 0 ? GGX_TYPE_EXL2 : GGX_TYPE_GPTQ));
        CHECK(t->ne[0] == 384);
        CHECK(t->ne[1] == 200);
        CHECK(std::string(t->name) == "blk.3.mlp.down_proj");
        CHECK(state.prepares == fmt + 1);
        const ggx_qmatrix & q = *(const ggx_qmatrix *)t->extra;
        CHECK(q.K == 384);
        CHECK(q.N == 200);
        CHECK(q.n_groups == L.G);
        // Every sub-buffer lies in the one allocation, aligned to 128 at least.
        const char * base = (const char *)buf;
        const size_t size = state.live.back().second;
        for (const void * p : {(const void *)q.q_weight, (const void *)q.q_scale, (const void *)q.q_scale_max,
                               (const void *)q.q_groups, (const void *)q.q_perm, (const void *)q.qzeros, (const void *)q.scales}) {
            if (!p) continue;
            CHECK((const char *)p >= base);
            CHECK((const char *)p < base + size);
            CHECK((uintptr_t)p % 128 == 0);
        }
        CHECK(memcmp(q.q_weight, L.q_weight.data(), L.q_weight.size() * 4) == 0);
        if (fmt == 0) {
            CHECK(q.groups_host != q.q_groups);   // a host copy owned by the descriptor
            CHECK(memcmp(q.groups_host, L.q_groups.data(), L.q_groups.size() * 2) == 0);
        } else {
            CHECK(q.group_size == 64);
            CHECK(q.q_scale == nullptr);
        }
        // Dequantizing the uploaded (host) matrix gives the loaded layer's weights.
        std::vector<uint16_t> a((size_t)384 * 200), b(a.size());
        qmatrix_dequant(q, t->type, a.data());
        qmatrix_dequant(qlayer_host_view(L), t->type, b.data());
        CHECK(a == b);
        CHECK(qmatrix_bytes_read(q, t->type) == qlayer_bytes_read(L));
        qlayer_release(&be, t, buf);
        CHECK(t->extra == nullptr);
        CHECK(state.releases == fmt + 1);
        CHECK(state.deallocs == state.allocs);
    }
    ggx_context_free(ctx);
}
