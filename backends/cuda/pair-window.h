// Where the decode GEMV finds the two codes of an fp16 pair in a chunk of 3-, 5- or 6-bit codes.
//
// A chunk's pairs are (J, J + H), H = rows / 2, so the high code sits H * B bits above the low
// one: 48 bits at 3 and 6 bits, 80 at 5, a whole number of bytes. Placed one at a time, each code
// costs a shift or a funnel shift and each pair two LOP3s (exl2-unpack.cuh's shift_to). Instead,
// one 16-bit window of the chunk (two bytes) holds several low codes, and the same two bytes
// H * B / 8 further hold their high codes at the same offsets. A byte permute (PRMT) puts the two
// windows into the halves of one word; then each pair of the window is one shift (none for the
// window's first) and one LOP3. Windows are laid greedily from pair 0, each starting at the byte
// of its first code; pairs that share a window share its permute.
//
// Per chunk (extraction only, shifts + permutes + LOP3s): 3 bits 62 -> 36 instructions for 16
// pairs, 5 bits 62 -> 42, 6 bits 30 -> 20. The pairs are the same, so the sums are bit for bit the
// same. Host code too: tests/test-pair-window.cpp runs ggx_pair_window_bits on the CPU, with the
// byte permute emulated, against a plain reading of the chunk.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define GGX_PAIR_WINDOW_FN __host__ __device__ __forceinline__
#else
#define GGX_PAIR_WINDOW_FN inline
#endif

// The word of pair J: X = the permutes below; the pair's codes are then (X >> shift) at bits 0
// and 16 (the caller masks them). perm is CUDA's __byte_perm (ggx_byte_perm below); selector
// nibbles stay within 0-7 (PTX's prmt would read bit 3 as "replicate the sign").
//   n_perm 1: X = perm(w[wa], w[wb], sel1)
//   n_perm 2: X = perm(perm(w[wa], w[wb], sel1), w[wc], sel2)
//   n_perm 3: X = perm(perm(w[wa], w[wb], sel1), perm(w[wc], w[wd], sel3), sel2)
struct ggx_pair_window {
    int first;   // the window's first byte in the chunk (the high side's is first + H * B / 8)
    int shift;   // bits from the window's start to pair J's low code
    int n_perm;
    int wa, wb, wc, wd;
    uint32_t sel1, sel2, sel3;
};

// First byte of the window that holds pair J's low code (greedy from pair 0).
constexpr int ggx_pair_window_first(int B, int H, int J) {
    int j = 0;
    for (;;) {
        const int a = B * j / 8;
        int j2 = j;
        while (j2 < H && B * j2 + B <= 8 * a + 16) j2++;
        if (J < j2 || j2 == j) return a;   // j2 == j: past the last pair (J >= H), no further window
        j = j2;
    }
}

// Selector nibble of chunk byte k when the permute's sources are words p (bytes 0-3) and q (4-7).
constexpr uint32_t ggx_pair_nibble(int k, int p, int q) {
    return (uint32_t)(k / 4 == p ? k % 4 : k / 4 == q ? 4 + k % 4 : 0);
}

constexpr ggx_pair_window ggx_pair_window_of(int B, int H, int J) {
    ggx_pair_window r{};
    const int a = ggx_pair_window_first(B, H, J), h = a + H * B / 8;
    r.first = a;
    r.shift = B * J - 8 * a;
    const int la = a / 4, lb = (a + 1) / 4, ha = h / 4, hb = (h + 1) / 4;
    // the distinct source words, in order of first use
    int src[4] = {la, lb, ha, hb}, n = 0, w[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        bool seen = false;
        for (int k = 0; k < n; k++) seen = seen || w[k] == src[i];
        if (!seen) w[n++] = src[i];
    }
    if (n <= 2) {   // all four bytes from two words
        const int p = w[0], q = n == 2 ? w[1] : w[0];
        r.n_perm = 1;
        r.wa = p;
        r.wb = q;
        r.sel1 = ggx_pair_nibble(a, p, q) | ggx_pair_nibble(a + 1, p, q) << 4 | ggx_pair_nibble(h, p, q) << 8 |
                 ggx_pair_nibble(h + 1, p, q) << 12;
    } else if (ha == hb) {   // the low side spans two words, the high side is in a third
        r.n_perm = 2;
        r.wa = la;
        r.wb = lb;
        r.wc = ha;
        r.sel1 = ggx_pair_nibble(a, la, lb) | ggx_pair_nibble(a + 1, la, lb) << 4;
        r.sel2 = 0u | 1u << 4 | (uint32_t)(4 + h % 4) << 8 | (uint32_t)(4 + (h + 1) % 4) << 12;
    } else if (la == lb) {   // the high side spans two words, the low side is in a third
        r.n_perm = 2;
        r.wa = ha;
        r.wb = hb;
        r.wc = la;
        r.sel1 = ggx_pair_nibble(h, ha, hb) << 8 | ggx_pair_nibble(h + 1, ha, hb) << 12;
        r.sel2 = (uint32_t)(4 + a % 4) | (uint32_t)(4 + (a + 1) % 4) << 4 | 2u << 8 | 3u << 12;
    } else {   // both sides span two words
        r.n_perm = 3;
        r.wa = la;
        r.wb = lb;
        r.wc = ha;
        r.wd = hb;
        r.sel1 = ggx_pair_nibble(a, la, lb) | ggx_pair_nibble(a + 1, la, lb) << 4;
        r.sel3 = ggx_pair_nibble(h, ha, hb) << 8 | ggx_pair_nibble(h + 1, ha, hb) << 12;
        r.sel2 = 0x7610u;
    }
    return r;
}

// CUDA's __byte_perm (one PRMT); on the host its documented meaning: result byte i is byte
// (s >> 4i) & 7 of the eight bytes b:a.
GGX_PAIR_WINDOW_FN uint32_t ggx_byte_perm(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __byte_perm(a, b, s);
#else
    const uint64_t bytes = (uint64_t)b << 32 | a;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)((bytes >> (8 * ((s >> (4 * i)) & 7))) & 255) << (8 * i);
    return r;
#endif
}

// Pair J's codes at bits 0 and 16 of the result (above each: other codes' bits, for the caller to
// mask), from the words w of a chunk of B-bit codes whose pairs are (J, J + H).
template <int B, int H, int J>
GGX_PAIR_WINDOW_FN uint32_t ggx_pair_window_bits(const uint32_t * w) {
    static_assert(H * B % 8 == 0, "a pair's codes a whole number of bytes apart");
    constexpr ggx_pair_window pw = ggx_pair_window_of(B, H, J);
    uint32_t x;
    if constexpr (pw.n_perm == 1) x = ggx_byte_perm(w[pw.wa], w[pw.wb], pw.sel1);
    else if constexpr (pw.n_perm == 2) x = ggx_byte_perm(ggx_byte_perm(w[pw.wa], w[pw.wb], pw.sel1), w[pw.wc], pw.sel2);
    else x = ggx_byte_perm(ggx_byte_perm(w[pw.wa], w[pw.wb], pw.sel1), ggx_byte_perm(w[pw.wc], w[pw.wd], pw.sel3), pw.sel2);
    if constexpr (pw.shift != 0) x >>= pw.shift;
    return x;
}
