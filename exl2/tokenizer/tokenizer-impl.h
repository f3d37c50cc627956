// Internal: the state behind exl2::Tokenizer, shared by the loaders (load.cpp, sentencepiece.cpp,
// tiktoken.cpp, vocab-files.cpp), the encoder/decoder (tokenizer.cpp) and the stream decoder.
#pragma once

#include "pipeline.h"
#include "tokenizer.h"

#include <unordered_map>
#include <unordered_set>

namespace exl2 {

struct AddedToken {
    std::string content;
    int32_t id = -1;
    bool special = false;
    bool lstrip = false, rstrip = false, single_word = false;
    bool normalized = true;
    // Normalized form of content when the normalizer changes it (normalized tokens only): the
    // text matched in normalized input and handed to the decoder, as tokenizers does.
    std::string norm;
    const std::string & key() const { return norm.empty() ? content : norm; }
};

struct Tokenizer::Impl {
    std::unique_ptr<tok::Model> model;
    std::unique_ptr<tok::Normalizer> normalizer;  // may be null
    std::unique_ptr<tok::PreTokenizer> pre;       // may be null
    std::unique_ptr<tok::Decoder> decoder;        // null: tokens joined with ' '
    tok::Template post;

    // Added tokens (tokenizers' AddedVocabulary): by id, content -> id, and the contents that were
    // ever added as special (tokenizers keeps that set even if a token is re-added as non-special).
    std::unordered_map<int32_t, AddedToken> added;
    std::unordered_map<std::string, int32_t> added_ids;
    std::unordered_set<std::string> special_contents;

    int32_t bos = -1, eos = -1, pad = -1, unk = -1;
    std::vector<int32_t> extra_eos;
    std::string chat_template;
    std::string desc;

    // Adds or updates an added token with tokenizers' rules (an existing content keeps its id; a
    // new one takes the model's id for that text, or the next free id).
    void add_token(AddedToken t);
    int32_t find_id(const std::string & content) const;  // added tokens first, then the model
    void finish();  // builds the matchers; call after the last add_token

    std::vector<int32_t> encode(const std::string & text, bool add_special, bool parse_special) const;
    // Decoder chain output. raw: invalid byte runs stay raw bytes (no U+FFFD).
    // transformers 5.17 does not apply clean_up_tokenization_spaces here (golden.json: Llama 3's
    // "3 != z" decodes unchanged although its config turns the option on), so neither do we.
    std::string decode(const std::vector<int32_t> & ids, bool skip_special, bool raw) const;
    bool is_special(int32_t id) const;
    int32_t n_vocab() const;

private:
    struct Matcher {
        std::vector<int32_t> by_byte[256];  // candidate token ids by first byte, longest first
        bool empty = true;
    };
    Matcher match_raw_, match_norm_;
    struct Segment {
        size_t a, b;
        int32_t id;  // -1: text
    };
    void find_added(const std::string & s, const Matcher & m, bool parse_special,
                    std::vector<Segment> & out) const;
    void encode_text(const std::string & s, bool at_start, std::vector<int32_t> & ids) const;
};

}  // namespace exl2
