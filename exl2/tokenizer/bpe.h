// Internal: the BPE model (tokenizers' models::bpe), with byte fallback, unknown-token fusing,
// ignore_merges, continuing-subword prefix / end-of-word suffix, and a cache of merged words.
//
// Speed: words are looked up in a cache first. Long words (SentencePiece-style pipelines give the
// whole text as one word) are cut where no vocabulary token can span the cut (no token contains
// the two characters on either side next to each other), which leaves the result unchanged and
// lets the pieces hit the cache. Byte-level pipelines can hand raw bytes to the model
// (set_byte_input), which saves mapping every byte to GPT-2's printable characters and back.
#pragma once

#include "pipeline.h"
#include "strmap.h"

#include <mutex>
#include <unordered_map>

namespace exl2 {
namespace tok {

struct BpeOptions {
    std::string unk_token;        // empty: none
    bool fuse_unk = false;
    bool byte_fallback = false;
    bool ignore_merges = false;
    std::string continuing_subword_prefix;
    std::string end_of_word_suffix;
};

// Open-addressing map from a pair of ids to (rank, merged id).
class MergeMap {
public:
    void reserve(size_t n);
    // Keeps the first rank given for a pair (as tokenizers does for duplicate merges).
    void insert(int32_t a, int32_t b, int32_t rank, int32_t merged);
    bool find(int32_t a, int32_t b, int32_t & rank, int32_t & merged) const {
        if (keys_.empty()) return false;
        uint64_t k = key(a, b);
        size_t mask = keys_.size() - 1;
        for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
            if (keys_[i] == k) {
                rank = vals_[i].first;
                merged = vals_[i].second;
                return true;
            }
            if (keys_[i] == kEmpty) return false;
        }
    }
    bool contains(int32_t a, int32_t b) const {
        int32_t r, m;
        return find(a, b, r, m);
    }
    size_t size() const { return count_; }

private:
    static constexpr uint64_t kEmpty = ~0ull;
    static uint64_t key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
    static size_t hash(uint64_t k) { return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20); }
    void grow();
    std::vector<uint64_t> keys_;
    std::vector<std::pair<int32_t, int32_t>> vals_;
    size_t count_ = 0;
};

class BpeModel final : public Model {
public:
    // vocab: token -> id. merges: pairs of token strings in priority order. Throws exl2::Error
    // (prefixed by `where`) when a merge names a token that is not in the vocabulary.
    BpeModel(const std::unordered_map<std::string, int32_t> & vocab,
             const std::vector<std::pair<std::string, std::string>> & merges, BpeOptions opt,
             const Where & where);
    // Same, with merges already given as ids and ranks (tiktoken / SentencePiece conversions).
    BpeModel(const std::unordered_map<std::string, int32_t> & vocab, MergeMap merges, BpeOptions opt);

    void encode(const char * piece, size_t n, std::vector<int32_t> & out) const override;
    int32_t token_to_id(const std::string & token) const override { return vocab_.find(token); }
    const std::string * id_to_token(int32_t id) const override;
    int32_t vocab_size() const override { return (int32_t)id_to_tok_.size(); }

    // Pieces will arrive as raw bytes instead of GPT-2 byte characters (see ByteLevel pre-tokenizer).
    // Only valid without subword affixes, unk token or byte fallback.
    bool set_byte_input() override;

private:
    StrMap vocab_;                    // token text -> id
    std::vector<std::string> id_to_tok_;
    std::vector<bool> has_id_;
    MergeMap merges_;
    BpeOptions opt_;
    int32_t unk_id_ = -1;
    int32_t byte_ids_[256];           // "<0xAB>" tokens (byte fallback)
    // Initial symbols: id of each single-character token (by code point), or of each byte in
    // byte-input mode.
    std::unordered_map<uint32_t, int32_t> char_ids_;
    int32_t small_char_ids_[512];
    bool byte_input_ = false;
    int32_t byte_syms_[256];          // byte-input mode: id of each byte's token
    StrMap raw_vocab_;                // byte-input mode: raw token bytes -> id
    // Pairs of adjacent characters (code points, or bytes in byte-input mode) that occur inside
    // some token; a long word may be cut between two characters that form no such pair.
    MergeMap inner_pairs_;

    mutable std::mutex cache_mu_;
    mutable StrMap cache_;            // word -> index into cache_spans_
    mutable std::vector<std::pair<uint32_t, uint32_t>> cache_spans_;
    mutable std::vector<int32_t> cache_ids_;

    void init(const std::unordered_map<std::string, int32_t> & vocab);
    void build_inner_pairs();
    int32_t symbol_id(uint32_t cp) const;
    void encode_chunk(const char * p, size_t n, std::vector<int32_t> & out) const;
    void merge_word(const char * p, size_t n, std::vector<int32_t> & out) const;
};

}  // namespace tok
}  // namespace exl2
