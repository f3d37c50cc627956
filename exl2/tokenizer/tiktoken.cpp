// tiktoken BPE files (Llama 3's tokenizer.model): one "base64(token) rank" per line, and the
// merge list transformers' TikTokenConverter derives from the ranks.
#include "loaders.h"

#include "exl2/error.h"

#include <algorithm>

namespace exl2 {
namespace tok {

namespace {

int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

bool b64_decode(const char * s, size_t n, std::string & out) {
    out.clear();
    uint32_t acc = 0;
    int bits = 0;
    size_t i = 0;
    for (; i < n && s[i] != '='; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) return false;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += (char)((acc >> bits) & 0xFF);
        }
    }
    for (; i < n; i++)
        if (s[i] != '=') return false;
    return true;
}

}  // namespace

bool looks_like_tiktoken(const std::string & data) {
    // First line: base64 characters, one space, decimal digits.
    size_t e = data.find('\n');
    std::string line = data.substr(0, e == std::string::npos ? data.size() : e);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size()) return false;
    for (size_t i = 0; i < sp; i++)
        if (b64_value((unsigned char)line[i]) < 0 && line[i] != '=') return false;
    for (size_t i = sp + 1; i < line.size(); i++)
        if (line[i] < '0' || line[i] > '9') return false;
    return true;
}

std::vector<std::pair<std::string, int32_t>> read_tiktoken(const std::string & data, const std::string & path) {
    std::vector<std::pair<std::string, int32_t>> out;
    size_t pos = 0, line_no = 0;
    std::string tok;
    while (pos < data.size()) {
        size_t e = data.find('\n', pos);
        if (e == std::string::npos) e = data.size();
        size_t n = e - pos;
        if (n && data[pos + n - 1] == '\r') n--;
        line_no++;
        if (n) {
            const char * s = data.data() + pos;
            size_t sp = std::string(s, n).find(' ');
            if (sp == std::string::npos) fail("%s: line %zu: expected \"base64 rank\"", path.c_str(), line_no);
            if (!b64_decode(s, sp, tok)) fail("%s: line %zu: bad base64 token", path.c_str(), line_no);
            long long rank = 0;
            if (sp + 1 >= n) fail("%s: line %zu: missing rank", path.c_str(), line_no);
            for (size_t i = sp + 1; i < n; i++) {
                if (s[i] < '0' || s[i] > '9' || rank > (1ll << 30))
                    fail("%s: line %zu: bad rank", path.c_str(), line_no);
                rank = rank * 10 + (s[i] - '0');
            }
            out.push_back({tok, (int32_t)rank});
        }
        pos = e + 1;
    }
    if (out.empty()) fail("%s: no tokens", path.c_str());
    return out;
}

MergeMap merges_from_ranks(const std::unordered_map<std::string, int32_t> & byte_vocab) {
    std::vector<std::pair<int32_t, const std::string *>> by_rank;
    by_rank.reserve(byte_vocab.size());
    for (auto & kv : byte_vocab) by_rank.push_back({kv.second, &kv.first});
    std::sort(by_rank.begin(), by_rank.end());
    MergeMap merges;
    merges.reserve(byte_vocab.size() * 2);
    int32_t rank = 0;
    std::string l, r;
    std::vector<std::pair<int32_t, int32_t>> local;
    for (auto & e : by_rank) {
        const std::string & t = *e.second;
        if (t.size() < 2) continue;
        local.clear();
        for (size_t i = 1; i < t.size(); i++) {
            l.assign(t, 0, i);
            auto il = byte_vocab.find(l);
            if (il == byte_vocab.end()) continue;
            r.assign(t, i, std::string::npos);
            auto ir = byte_vocab.find(r);
            if (ir == byte_vocab.end()) continue;
            local.push_back({il->second, ir->second});
        }
        std::sort(local.begin(), local.end());
        for (auto & p : local) merges.insert(p.first, p.second, rank++, e.first);
    }
    return merges;
}

}  // namespace tok
}  // namespace exl2
