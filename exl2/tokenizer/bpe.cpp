#include "bpe.h"
#include "unicode.h"

#include "exl2/error.h"

#include <algorithm>

namespace exl2 {
namespace tok {

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

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>> & merges, BpeOptions opt,
                   const Where & where)
    : vocab_(std::move(vocab)), opt_(std::move(opt)) {
    const size_t prefix_len = opt_.continuing_subword_prefix.size();
    merges_.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); r++) {
        const auto & m = merges[r];
        auto ia = vocab_.find(m.first);
        auto ib = vocab_.find(m.second);
        if (ia == vocab_.end() || ib == vocab_.end())
            fail_at(where.at(r), "merge \"" + m.first + " " + m.second + "\" names token \"" +
                                     (ia == vocab_.end() ? m.first : m.second) + "\" absent from the vocab");
        // With a continuing-subword prefix the right part loses it in the merged token.
        std::string merged = m.first;
        if (prefix_len && m.second.compare(0, prefix_len, opt_.continuing_subword_prefix) == 0)
            merged.append(m.second, prefix_len, std::string::npos);
        else
            merged += m.second;
        auto im = vocab_.find(merged);
        if (im == vocab_.end())
            fail_at(where.at(r), "merged token \"" + merged + "\" absent from the vocab");
        merges_.insert(ia->second, ib->second, (int32_t)r, im->second);
    }
    init();
}

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab, MergeMap merges, BpeOptions opt)
    : vocab_(std::move(vocab)), merges_(std::move(merges)), opt_(std::move(opt)) {
    init();
}

void BpeModel::init() {
    int32_t max_id = -1;
    for (auto & kv : vocab_) max_id = std::max(max_id, kv.second);
    id_to_tok_.assign((size_t)(max_id + 1), std::string());
    has_id_.assign((size_t)(max_id + 1), false);
    for (auto & kv : vocab_) {
        if (kv.second < 0) continue;
        id_to_tok_[(size_t)kv.second] = kv.first;
        has_id_[(size_t)kv.second] = true;
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        auto it = vocab_.find(name);
        byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
    }
    for (int32_t & v : small_char_ids_) v = -1;
    for (auto & kv : vocab_) {
        size_t i = 0;
        uint32_t cp = uni::utf8_next(kv.first.data(), kv.first.size(), i);
        if (i != kv.first.size() || kv.first.empty()) continue;
        if (cp < 512) small_char_ids_[cp] = kv.second;
        else char_ids_[cp] = kv.second;
    }
    if (!opt_.unk_token.empty()) {
        auto it = vocab_.find(opt_.unk_token);
        unk_id_ = it == vocab_.end() ? -1 : it->second;
    }
}

int32_t BpeModel::token_to_id(const std::string & token) const {
    auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
}

const std::string * BpeModel::id_to_token(int32_t id) const {
    if (id < 0 || (size_t)id >= id_to_tok_.size() || !has_id_[(size_t)id]) return nullptr;
    return &id_to_tok_[(size_t)id];
}

void BpeModel::encode(const std::string & piece, std::vector<int32_t> & out) const {
    if (piece.empty()) return;
    if (opt_.ignore_merges) {
        auto it = vocab_.find(piece);
        if (it != vocab_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    {
        std::lock_guard<std::mutex> lock(cache_mu_);
        auto it = cache_.find(piece);
        if (it != cache_.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    size_t start = out.size();
    merge_word(piece, out);
    if (piece.size() < 256) {
        std::lock_guard<std::mutex> lock(cache_mu_);
        if (cache_.size() < 200000)
            cache_.emplace(piece, std::vector<int32_t>(out.begin() + (long)start, out.end()));
    }
}

void BpeModel::merge_word(const std::string & w, std::vector<int32_t> & out) const {
    struct Sym {
        int32_t id;
        int32_t prev, next;
        bool alive;
    };
    struct Cand {
        int32_t rank;
        int32_t pos;
        int32_t merged;
        // std heap is a max-heap: "greater" means lower priority.
        bool operator<(const Cand & o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    thread_local std::vector<Sym> syms;
    thread_local std::vector<Cand> heap;
    syms.clear();
    heap.clear();

    const bool affixes = !opt_.continuing_subword_prefix.empty() || !opt_.end_of_word_suffix.empty();
    int32_t unk_pending = -1;  // fused unknown run waiting to be added
    auto add = [&](int32_t id) {
        syms.push_back({id, (int32_t)syms.size() - 1, (int32_t)syms.size() + 1, true});
    };
    std::string buf;
    for (size_t i = 0; i < w.size();) {
        size_t b = i;
        uint32_t cp = uni::utf8_next(w.data(), w.size(), i);
        int32_t id = -1;
        if (!affixes) {
            if (cp < 512) id = small_char_ids_[cp];
            else if (cp < uni::kInvalidBase) {
                auto it = char_ids_.find(cp);
                if (it != char_ids_.end()) id = it->second;
            }
        } else {
            buf.clear();
            if (b != 0) buf += opt_.continuing_subword_prefix;
            buf.append(w, b, i - b);
            if (i == w.size()) buf += opt_.end_of_word_suffix;
            auto it = vocab_.find(buf);
            if (it != vocab_.end()) id = it->second;
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
                if (byte_ids_[(unsigned char)w[k]] < 0) all = false;
            if (all) {
                // As tokenizers: a pending fused unknown is not flushed before byte tokens.
                for (size_t k = b; k < i; k++) add(byte_ids_[(unsigned char)w[k]]);
                continue;
            }
        }
        if (unk_id_ >= 0) {
            if (unk_pending >= 0 && !opt_.fuse_unk) add(unk_pending);
            unk_pending = unk_id_;
        }
    }
    if (unk_pending >= 0) add(unk_pending);
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
