#include "unicode.h"
#include "unicode-data.h"

#include "exl2/json.h"

#include <algorithm>

namespace exl2 {
namespace uni {

namespace {

// Second-byte range of a valid sequence started by lead byte b (RFC 3629 table 3-7).
inline void second_range(unsigned char b, unsigned char & lo, unsigned char & hi) {
    lo = 0x80;
    hi = 0xBF;
    if (b == 0xE0) lo = 0xA0;
    else if (b == 0xED) hi = 0x9F;
    else if (b == 0xF0) lo = 0x90;
    else if (b == 0xF4) hi = 0x8F;
}

// Valid prefix length of the sequence at s[i]: how many bytes (from 1) agree with a valid
// sequence, and the full length it needs. need == 0: invalid lead byte.
inline void seq_prefix(const unsigned char * s, size_t n, size_t i, int & have, int & need) {
    unsigned char b = s[i];
    need = utf8_len(b);
    if (need == 1) {
        have = 1;
        need = b < 0x80 ? 1 : 0;
        return;
    }
    have = 1;
    unsigned char lo, hi;
    second_range(b, lo, hi);
    while (have < need && i + have < n) {
        unsigned char c = s[i + have];
        if (have == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
        have++;
    }
}

const uint32_t * find_pair(const uint32_t * table, size_t count, uint32_t cp) {
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (table[2 * mid] < cp) lo = mid + 1;
        else hi = mid;
    }
    return (lo < count && table[2 * lo] == cp) ? &table[2 * lo] : nullptr;
}

constexpr uint32_t SBase = 0xAC00, LBase = 0x1100, VBase = 0x1161, TBase = 0x11A7;
constexpr uint32_t LCount = 19, VCount = 21, TCount = 28, NCount = VCount * TCount,
                   SCount = LCount * NCount;

void decompose(uint32_t cp, bool compat, std::vector<uint32_t> & out) {
    if (cp >= SBase && cp < SBase + SCount) {
        uint32_t s = cp - SBase;
        out.push_back(LBase + s / NCount);
        out.push_back(VBase + (s % NCount) / TCount);
        if (s % TCount) out.push_back(TBase + s % TCount);
        return;
    }
    if (cp >= 0xC0 && cp < 0x110000) {
        const uint32_t * e = compat ? find_pair(unidata::nfkd_table, unidata::nfkd_count, cp)
                                    : find_pair(unidata::nfd_table, unidata::nfd_count, cp);
        if (e) {
            const uint32_t * p = unidata::decomp_pool + (e[1] >> 8);
            out.insert(out.end(), p, p + (e[1] & 0xFF));
            return;
        }
    }
    out.push_back(cp);
}

uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= LBase && a < LBase + LCount && b >= VBase && b < VBase + VCount)
        return SBase + ((a - LBase) * VCount + (b - VBase)) * TCount;
    if (a >= SBase && a < SBase + SCount && (a - SBase) % TCount == 0 && b > TBase &&
        b < TBase + TCount)
        return a + (b - TBase);
    size_t lo = 0, hi = unidata::comp_count;
    const uint32_t * t = unidata::comp_table;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t[3 * mid] < a || (t[3 * mid] == a && t[3 * mid + 1] < b)) lo = mid + 1;
        else hi = mid;
    }
    if (lo < unidata::comp_count && t[3 * lo] == a && t[3 * lo + 1] == b) return t[3 * lo + 2];
    return 0;
}

}  // namespace

uint32_t utf8_next(const char * s, size_t n, size_t & i) {
    const unsigned char * u = (const unsigned char *)s;
    unsigned char b = u[i];
    if (b < 0x80) {
        i++;
        return b;
    }
    int have, need;
    seq_prefix(u, n, i, have, need);
    if (need == 0 || have < need) {
        i++;
        return kInvalidBase + b;
    }
    uint32_t cp = b & (0x7F >> need);
    for (int k = 1; k < need; k++) cp = (cp << 6) | (u[i + k] & 0x3F);
    i += need;
    return cp;
}

void utf8_put(std::string & out, uint32_t cp) {
    // Values past U+10FFFF carry an invalid input byte (see kInvalidBase): put the byte back.
    if (cp < 0x110000) utf8_append(out, cp);
    else out += (char)(cp - kInvalidBase);
}

std::vector<uint32_t> utf8_decode(const std::string & s) {
    std::vector<uint32_t> out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) out.push_back(utf8_next(s.data(), s.size(), i));
    return out;
}

std::string utf8_encode(const std::vector<uint32_t> & cps) {
    std::string out;
    out.reserve(cps.size());
    for (uint32_t cp : cps) utf8_put(out, cp);
    return out;
}

std::string utf8_lossy(const std::string & s) {
    const unsigned char * u = (const unsigned char *)s.data();
    size_t n = s.size();
    std::string out;
    out.reserve(n);
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            out += (char)u[i++];
            continue;
        }
        int have, need;
        seq_prefix(u, n, i, have, need);
        if (need != 0 && have == need) {
            out.append(s, i, (size_t)need);
        } else {
            out += "\xEF\xBF\xBD";
        }
        i += (size_t)have;
    }
    return out;
}

size_t utf8_incomplete_tail(const std::string & s) {
    const unsigned char * u = (const unsigned char *)s.data();
    size_t n = s.size();
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        size_t i = n - k;
        if ((u[i] & 0xC0) == 0x80) continue;  // continuation byte: look further back
        int have, need;
        seq_prefix(u, n, i, have, need);
        return (need > 1 && have == (int)k && have < need) ? k : 0;
    }
    return 0;
}

uint8_t props(uint32_t cp) {
    if (cp >= 0x110000) return 0;
    return unidata::prop_stage2[(size_t)unidata::prop_stage1[cp >> 8] * 256 + (cp & 0xFF)];
}

bool is_word(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
               cp == '_';
    uint8_t p = props(cp);
    constexpr uint32_t mask = kMaskL | kMaskM | (1u << Nd) | (1u << Nl) | (1u << Pc);
    return ((mask >> (p & 0x1F)) & 1u) || (p & 0x40);
}

bool is_punctuation(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) ||
               (cp >= 0x5B && cp <= 0x60) || (cp >= 0x7B && cp <= 0x7E);
    return in_mask(cp, kMaskP);
}

uint8_t combining_class(uint32_t cp) {
    if (cp < 0x300 || cp >= 0x110000) return 0;
    size_t lo = 0, hi = unidata::ccc_count;
    const uint32_t * r = unidata::ccc_ranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[3 * mid + 1] < cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo < unidata::ccc_count && r[3 * lo] <= cp && cp <= r[3 * lo + 1]) return (uint8_t)r[3 * lo + 2];
    return 0;
}

std::string normalize(const std::string & s, NormForm form) {
    // Pure ASCII is invariant under every form.
    bool ascii = true;
    for (unsigned char c : s)
        if (c >= 0x80) {
            ascii = false;
            break;
        }
    if (ascii) return s;

    bool compat = form == NormForm::NFKC || form == NormForm::NFKD;
    bool compose = form == NormForm::NFC || form == NormForm::NFKC;
    std::vector<uint32_t> d;
    d.reserve(s.size() + 8);
    for (size_t i = 0; i < s.size();) decompose(utf8_next(s.data(), s.size(), i), compat, d);

    // Canonical ordering: stable sort of each run of non-starters by combining class.
    std::vector<uint8_t> cc(d.size());
    for (size_t i = 0; i < d.size(); i++) cc[i] = combining_class(d[i]);
    for (size_t i = 0; i < d.size();) {
        if (cc[i] == 0) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < d.size() && cc[j] != 0) j++;
        for (size_t a = i + 1; a < j; a++)  // insertion sort, stable
            for (size_t b = a; b > i && cc[b - 1] > cc[b]; b--) {
                std::swap(d[b - 1], d[b]);
                std::swap(cc[b - 1], cc[b]);
            }
        i = j;
    }

    if (compose && !d.empty()) {
        std::vector<uint32_t> r;
        r.reserve(d.size());
        long starter = -1;
        int last_cc = -1;  // class of the last char appended after the starter; -1: none
        for (size_t i = 0; i < d.size(); i++) {
            uint32_t ch = d[i];
            int c = cc[i];
            if (starter >= 0 && (last_cc == -1 || last_cc < c)) {
                uint32_t comp = compose_pair(r[(size_t)starter], ch);
                if (comp) {
                    r[(size_t)starter] = comp;
                    continue;
                }
            }
            if (c == 0) {
                starter = (long)r.size();
                last_cc = -1;
            } else {
                last_cc = c;
            }
            r.push_back(ch);
        }
        d.swap(r);
    }
    return utf8_encode(d);
}

std::string lowercase(const std::string & s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        unsigned char b = (unsigned char)s[i];
        if (b < 0x80) {
            out += (char)((b >= 'A' && b <= 'Z') ? b + 32 : b);
            i++;
            continue;
        }
        uint32_t cp = utf8_next(s.data(), s.size(), i);
        const uint32_t * e = find_pair(unidata::lower_table, unidata::lower_count, cp);
        if (!e) {
            utf8_put(out, cp);
            continue;
        }
        const uint32_t * p = unidata::lower_pool + (e[1] >> 8);
        for (uint32_t k = 0; k < (e[1] & 0xFF); k++) utf8_put(out, p[k]);
    }
    return out;
}

uint32_t simple_fold(uint32_t cp) {
    const uint32_t * e = find_pair(unidata::fold_table, unidata::fold_count, cp);
    return e ? e[1] : cp;
}

std::vector<uint32_t> fold_equivalents(uint32_t cp) {
    uint32_t f = simple_fold(cp);
    std::vector<uint32_t> out{f};
    for (size_t i = 0; i < unidata::fold_count; i++)
        if (unidata::fold_table[2 * i + 1] == f) out.push_back(unidata::fold_table[2 * i]);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

}  // namespace uni
}  // namespace exl2
