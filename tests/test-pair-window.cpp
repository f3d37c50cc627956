// The byte-permuted windows through which the decode GEMV takes the fp16 pairs of 3-, 5- and
// 6-bit chunks (backends/cuda/pair-window.h): on random chunks, every pair's two codes land at
// bits 0 and 16 exactly as a plain reading of the chunk's bit string gives them. The device's
// own ggx_pair_window_bits runs here with its host form of the byte permute; it runs in every
// build.
#include "backends/cuda/pair-window.h"

#include <doctest/doctest.h>

#include <random>
#include <set>

namespace {

bool nibbles_plain(uint32_t s) { return (s & 0xffff8888u) == 0; }   // see ggx_pair_window

// Code j of width B in a chunk's little-endian bit string, one bit at a time.
uint32_t code(const uint32_t * w, int B, int j) {
    uint32_t v = 0;
    for (int i = 0; i < B; i++) {
        const int bit = j * B + i;
        v |= ((w[bit / 32] >> (bit % 32)) & 1u) << i;
    }
    return v;
}

// ggx_pair_window_bits for pair j (a run-time index) of one of the three shapes below.
template <int B, int H, int J = 0>
uint32_t window_bits(int j, const uint32_t * w) {
    if constexpr (J + 1 < H) {
        if (j != J) return window_bits<B, H, J + 1>(j, w);
    }
    return ggx_pair_window_bits<B, H, J>(w);
}

uint32_t window_bits(int B, int j, const uint32_t * w) {
    return B == 3 ? window_bits<3, 16>(j, w) : B == 5 ? window_bits<5, 16>(j, w) : window_bits<6, 8>(j, w);
}

struct Shape {
    int bits, rows, words;   // a chunk: the smallest run of rows that fills whole words
    int instructions;        // extraction per chunk as pair-window.h counts it: permutes + shifts + LOP3s
};
const Shape k_shapes[] = {{3, 32, 3, 36}, {5, 32, 5, 42}, {6, 16, 3, 20}};

}  // namespace

TEST_CASE("pair windows: every pair's two codes at bits 0 and 16, as the chunk's bit string has them") {
    std::mt19937_64 rng(7);
    for (const Shape & sh : k_shapes) {
        CAPTURE(sh.bits);
        const int H = sh.rows / 2;
        const uint32_t m = (1u << sh.bits) - 1, mask = m | m << 16;
        for (int J = 0; J < H; J++) {
            CAPTURE(J);
            const ggx_pair_window pw = ggx_pair_window_of(sh.bits, H, J);
            REQUIRE(pw.n_perm >= 1);
            REQUIRE(pw.n_perm <= 3);
            REQUIRE(pw.wa < sh.words);
            REQUIRE(pw.wb < sh.words);
            REQUIRE(pw.wc < sh.words);
            REQUIRE(pw.wd < sh.words);
            REQUIRE(pw.shift + sh.bits <= 16);
            REQUIRE(nibbles_plain(pw.sel1));
            REQUIRE(nibbles_plain(pw.sel2));
            REQUIRE(nibbles_plain(pw.sel3));
            int wrong = 0;
            for (int trial = 0; trial < 2000; trial++) {
                uint32_t w[5] = {};
                for (int i = 0; i < sh.words; i++) w[i] = trial == 0 ? ~0u : (uint32_t)rng();   // all ones: no stray bit
                wrong += (window_bits(sh.bits, J, w) & mask) != (code(w, sh.bits, J) | code(w, sh.bits, J + H) << 16);
            }
            CHECK(wrong == 0);
        }
    }
}

TEST_CASE("pair windows: the instruction counts pair-window.h states (pairs of a window share its permutes)") {
    for (const Shape & sh : k_shapes) {
        CAPTURE(sh.bits);
        const int H = sh.rows / 2;
        std::set<int> windows;
        int count = 0;
        for (int J = 0; J < H; J++) {
            const ggx_pair_window pw = ggx_pair_window_of(sh.bits, H, J);
            if (windows.insert(pw.first).second) count += pw.n_perm;
            count += (pw.shift != 0) + 1;   // the shift, the LOP3 that masks and adds 1024
        }
        CHECK(count == sh.instructions);
        // each code placed on its own costs a shift or funnel shift per code (but pair 0's low
        // one) and two LOP3s per pair: 4 H - 2
        CHECK(count < 4 * H - 2);
    }
}
