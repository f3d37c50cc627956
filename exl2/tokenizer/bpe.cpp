#include "bpe.h"
#include "unicode.h"

#include "exl2/error.h"

#include <algorithm>

namespace exl2 {
namespace tok {

namespace {
constexpr size_t kChunkMin = 48;        // words longer than this are cut where that is safe
constexpr size_t kCacheMaxWord = 256;   // longer chunks are not cached
constexpr size_t kCacheMaxEntries = 1 << 18;
}  // namespace

void MergeMap::reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    if (cap <= keys_.size()) return;
    std::vector<uint64_t> old_k = std::move(keys_);
    std::vector<std::pair<int32_t, int32_t>> old_v = std::move(vals_);
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, {0, 0});
    count_ = 0;
    for (size_t i = 0; i < old_k.size(); i++)
        if (old_k[i] != kEmpty)
            insert((int32_t)(old_k[i] >> 32), (int32_t)(uint32_t)old_k[i], old_v[i].first, old_v[i].second);
}

void MergeMap::grow() { reserve(std::max<size_t>(16, count_ * 2 + 2)); }

void MergeMap::insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    if ((count_ + 1) * 2 > keys_.size()) grow();
    uint64_t k = key(a, b);
    size_t mask = keys_.size() - 1;
    for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
        if (keys_[i] == k) return;
        if (keys_[i] == kEmpty) {
            keys_[i] = k;
            vals_[i] = {rank, merged};
            count_++;
            return;
        }
    }
}

BpeModel::BpeModel(const std::unordered_map<std::string, int32_t> & vocab,
                   const std::vector<std::pair<std::string, std::string>> & merges, BpeOptions opt,
                   const Where & where)
    : opt_(std::move(opt)) {
    const size_t prefix_len = opt_.continuing_subword_prefix.size();
    merges_.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); r++) {
        const auto & m = merges[r];
        auto ia = vocab.find(m.first);
        auto ib = vocab.find(m.second);
        if (ia == vocab.end() || ib == vocab.end())
            fail_at(where.at(r), "merge \"" + m.first + " " + m.second + "\" names token \"" +
                                     (ia == vocab.end() ? m.first : m.second) + "\" absent from the vocab");
        // With a continuing-subword prefix the right part loses it in the merged token.
        std::string merged = m.first;
        if (prefix_len && m.second.compare(0, prefix_len, opt_.continuing_subword_prefix) == 0)
            merged.append(m.second, prefix_len, std::string::npos);
        else
            merged += m.second;
        auto im = vocab.find(merged);
        if (im == vocab.end()) fail_at(where.at(r), "merged token \"" + merged + "\" absent from the vocab");
        merges_.insert(ia->second, ib->second, (int32_t)r, im->second);
    }
    init(vocab);
}

BpeModel::BpeModel(const std::unordered_map<std::string, int32_t> & vocab, MergeMap merges, BpeOptions opt)
    : merges_(std::move(merges)), opt_(std::move(opt)) {
    init(vocab);
}

void BpeModel::init(const std::unordered_map<std::string, int32_t> & vocab) {
    int32_t max_id = -1;
    for (auto & kv : vocab) max_id = std::max(max_id, kv.second);
    id_to_tok_.assign((size_t)(max_id + 1), std::string());
    has_id_.assign((size_t)(max_id + 1), false);
    for (auto & kv : vocab) {
        if (kv.second < 0) continue;
        id_to_tok_[(size_t)kv.second] = kv.first;
        has_id_[(size_t)kv.second] = true;
    }
    // Insert in id order so that a duplicated text keeps its lowest id deterministically.
    for (size_t id = 0; id < id_to_tok_.size(); id++)
        if (has_id_[id]) vocab_.insert(id_to_tok_[id], (int32_t)id);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        byte_ids_[b] = vocab_.find(name);
    }
    for (int32_t & v : small_char_ids_) v = -1;
    for (size_t id = 0; id < id_to_tok_.size(); id++) {
        const std::string & t = id_to_tok_[id];
        if (!has_id_[id] || t.empty()) continue;
        size_t i = 0;
        uint32_t cp = uni::utf8_next(t.data(), t.size(), i);
        if (i != t.size()) continue;
        if (cp < 512) {
            if (small_char_ids_[cp] < 0) small_char_ids_[cp] = (int32_t)id;
        } else {
            char_ids_.emplace(cp, (int32_t)id);
        }
    }
    if (!opt_.unk_token.empty()) unk_id_ = vocab_.find(opt_.unk_token);
    build_inner_pairs();
}

void BpeModel::build_inner_pairs() {
    inner_pairs_ = MergeMap();
    if (!opt_.continuing_subword_prefix.empty() || !opt_.end_of_word_suffix.empty()) return;
    for (size_t id = 0; id < id_to_tok_.size(); id++) {
        if (!has_id_[id]) continue;
        const std::string & t = id_to_tok_[id];
        if (byte_input_) {
            std::string raw;
            bool ok = true;
            for (size_t i = 0; i < t.size() && ok;) {
                int b = char_to_byte(uni::utf8_next(t.data(), t.size(), i));
                if (b < 0) ok = false;
                else raw += (char)b;
            }
            if (!ok) continue;
            for (size_t i = 1; i < raw.size(); i++) inner_pairs_.insert((uint8_t)raw[i - 1], (uint8_t)raw[i], 0, 0);
        } else {
            size_t i = 0;
            uint32_t prev = t.empty() ? 0 : uni::utf8_next(t.data(), t.size(), i);
            while (i < t.size()) {
                uint32_t cp = uni::utf8_next(t.data(), t.size(), i);
                inner_pairs_.insert((int32_t)prev, (int32_t)cp, 0, 0);
                prev = cp;
            }
        }
    }
}

bool BpeModel::set_byte_input() {
    if (!opt_.continuing_subword_prefix.empty() || !opt_.end_of_word_suffix.empty() || unk_id_ >= 0 ||
        opt_.byte_fallback)
        return false;
    // Tokens made only of byte characters, by their raw bytes. Other tokens (added tokens with
    // other characters) can never come out of byte-level input anyway.
    raw_vocab_.clear();
    for (size_t id = 0; id < id_to_tok_.size(); id++) {
        if (!has_id_[id]) continue;
        const std::string & t = id_to_tok_[id];
        std::string raw;
        bool ok = !t.empty();
        for (size_t i = 0; i < t.size() && ok;) {
            int b = char_to_byte(uni::utf8_next(t.data(), t.size(), i));
            if (b < 0) ok = false;
            else raw += (char)b;
        }
        if (ok) raw_vocab_.insert(raw, (int32_t)id);
    }
    for (int b = 0; b < 256; b++) {
        size_t i = 0;
        const std::string & c = byte_to_char((uint8_t)b);
        byte_syms_[b] = symbol_id(uni::utf8_next(c.data(), c.size(), i));
    }
    byte_input_ = true;
    build_inner_pairs();
    return true;
}

const std::string * BpeModel::id_to_token(int32_t id) const {
    if (id < 0 || (size_t)id >= id_to_tok_.size() || !has_id_[(size_t)id]) return nullptr;
    return &id_to_tok_[(size_t)id];
}

int32_t BpeModel::symbol_id(uint32_t cp) const {
    if (cp < 512) return small_char_ids_[cp];
    if (cp >= uni::kInvalidBase) return -1;
    auto it = char_ids_.find(cp);
    return it == char_ids_.end() ? -1 : it->second;
}

void BpeModel::encode(const char * p, size_t n, std::vector<int32_t> & out) const {
    if (n == 0) return;
    const StrMap & whole = byte_input_ ? raw_vocab_ : vocab_;
    if (opt_.ignore_merges) {
        int32_t id = whole.find(p, n);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }
    if (n <= kChunkMin || inner_pairs_.size() == 0) {
        encode_chunk(p, n, out);
        return;
    }
    // Cut between characters a|b where both are single-character tokens and no token contains
    // "ab": no merge can ever join the two sides, so each side merges on its own.
    size_t start = 0, i = 0;
    uint32_t prev = 0;
    bool prev_ok = false;
    while (i < n) {
        size_t b = i;
        uint32_t cp = byte_input_ ? (uint8_t)p[i++] : uni::utf8_next(p, n, i);
        bool ok = (byte_input_ ? byte_syms_[cp] : symbol_id(cp)) >= 0;
        if (prev_ok && ok && b > start && !inner_pairs_.contains((int32_t)prev, (int32_t)cp)) {
            encode_chunk(p + start, b - start, out);
            start = b;
        }
        prev = cp;
        prev_ok = ok;
    }
    encode_chunk(p + start, n - start, out);
}

void BpeModel::encode_chunk(const char * p, size_t n, std::vector<int32_t> & out) const {
    if (n < kCacheMaxWord) {
        std::lock_guard<std::mutex> lock(cache_mu_);
        int32_t k = cache_.find(p, n);
        if (k >= 0) {
            auto span = cache_spans_[(size_t)k];
            out.insert(out.end(), cache_ids_.begin() + span.first, cache_ids_.begin() + span.first + span.second);
            return;
        }
    }
    size_t start = out.size();
    merge_word(p, n, out);
    if (n < kCacheMaxWord) {
        std::lock_guard<std::mutex> lock(cache_mu_);
        if (cache_.size() < kCacheMaxEntries && cache_.find(p, n) < 0) {
            cache_spans_.push_back({(uint32_t)cache_ids_.size(), (uint32_t)(out.size() - start)});
            cache_ids_.insert(cache_ids_.end(), out.begin() + (long)start, out.end());
            cache_.insert(p, n, (int32_t)cache_spans_.size() - 1);
        }
    }
}

void BpeModel::merge_word(const char * w, size_t n, std::vector<int32_t> & out) const {
    struct Sym {
        int32_t id;
        int32_t prev, next;
        bool alive;
    };
    struct Cand {
        int32_t rank;
        int32_t pos;
        int32_t merged;
        // std heap is a max-heap: "less" means lower priority (higher rank, then further right).
        bool operator<(const Cand & o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    thread_local std::vector<Sym> syms;
    thread_local std::vector<Cand> heap;
    thread_local std::string buf;
    syms.clear();
    heap.clear();
    auto add = [&](int32_t id) {
        syms.push_back({id, (int32_t)syms.size() - 1, (int32_t)syms.size() + 1, true});
    };

    if (byte_input_) {
        for (size_t i = 0; i < n; i++) {
            int32_t id = byte_syms_[(uint8_t)w[i]];
            if (id >= 0) add(id);  // a byte without a token is dropped, as with no unk token
        }
    } else {
        const bool affixes = !opt_.continuing_subword_prefix.empty() || !opt_.end_of_word_suffix.empty();
        int32_t unk_pending = -1;  // fused unknown run waiting to be added
        for (size_t i = 0; i < n;) {
            size_t b = i;
            uint32_t cp = uni::utf8_next(w, n, i);
            int32_t id;
            if (!affixes) {
                id = symbol_id(cp);
            } else {
                buf.clear();
                if (b != 0) buf += opt_.continuing_subword_prefix;
                buf.append(w + b, i - b);
                if (i == n) buf += opt_.end_of_word_suffix;
                id = vocab_.find(buf);
            }
            if (id >= 0) {
                if (unk_pending >= 0) {
                    add(unk_pending);
                    unk_pending = -1;
                }
                add(id);
                continue;
            }
            if (opt_.byte_fallback) {
                bool all = true;
                for (size_t k = b; k < i; k++)
                    if (byte_ids_[(uint8_t)w[k]] < 0) all = false;
                if (all) {
                    // As tokenizers: a pending fused unknown is not flushed before byte tokens.
                    for (size_t k = b; k < i; k++) add(byte_ids_[(uint8_t)w[k]]);
                    continue;
                }
            }
            if (unk_id_ >= 0) {
                if (unk_pending >= 0 && !opt_.fuse_unk) add(unk_pending);
                unk_pending = unk_id_;
            }
        }
        if (unk_pending >= 0) add(unk_pending);
    }
    if (syms.empty()) return;
    syms.back().next = -1;

    for (size_t k = 0; k + 1 < syms.size(); k++) {
        int32_t rank, merged;
        if (merges_.find(syms[k].id, syms[k + 1].id, rank, merged)) heap.push_back({rank, (int32_t)k, merged});
    }
    std::make_heap(heap.begin(), heap.end());
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end());
        Cand c = heap.back();
        heap.pop_back();
        Sym & s = syms[(size_t)c.pos];
        if (!s.alive || s.next < 0) continue;
        Sym & r = syms[(size_t)s.next];
        int32_t rank, merged;
        if (!merges_.find(s.id, r.id, rank, merged) || merged != c.merged) continue;  // stale
        s.id = merged;
        r.alive = false;
        s.next = r.next;
        if (s.next >= 0) syms[(size_t)s.next].prev = c.pos;
        if (s.prev >= 0 && merges_.find(syms[(size_t)s.prev].id, s.id, rank, merged)) {
            heap.push_back({rank, s.prev, merged});
            std::push_heap(heap.begin(), heap.end());
        }
        if (s.next >= 0 && merges_.find(s.id, syms[(size_t)s.next].id, rank, merged)) {
            heap.push_back({rank, c.pos, merged});
            std::push_heap(heap.begin(), heap.end());
        }
    }
    for (const Sym & s : syms)
        if (s.alive) out.push_back(s.id);
}

}  // namespace tok
}  // namespace exl2
