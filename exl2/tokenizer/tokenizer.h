// Tokenizers that give the same ids as Hugging Face transformers, with no dependency.
//
//   auto tok = exl2::Tokenizer::load("models/kjv-6m");        // throws exl2::Error
//   std::vector<int32_t> ids = tok->encode("In the beginning", /*add_special=*/true);
//   std::string text = tok->decode(ids);
//   exl2::StreamDecoder sd(*tok);                              // for generation loops
//   for (int32_t id : generated) fputs(sd.push(id).c_str(), stdout);
//   fputs(sd.flush().c_str(), stdout);
//
// A model folder may hold tokenizer.json (the tokenizers library's format), a SentencePiece
// tokenizer.model, a tiktoken tokenizer.model (Llama 3), or vocab.json + merges.txt (GPT-2 and
// Qwen2 style), plus tokenizer_config.json (special tokens, add_bos_token / add_eos_token, chat
// template). The pipeline matches what transformers 5 builds from the folder (AutoTokenizer):
// for LlamaTokenizer, GPT2Tokenizer and Qwen2Tokenizer it rebuilds normalizer, pre-tokenizer and
// decoder as those classes do, and otherwise runs tokenizer.json as written. With
// TokenizerOptions::literal_json it always runs tokenizer.json as written, as the tokenizers
// library's Tokenizer.from_file does.
//
// Goals: exact ids, safe on any input bytes (invalid UTF-8 never crashes; byte-level models keep
// the bytes), fast enough not to matter (>= 10 MB/s for byte-level BPE on one core).
// Non-goals: offsets/alignments, pairs of sequences, truncation and padding, training.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace exl2 {

struct TokenizerOptions {
    bool literal_json = false;  // run tokenizer.json as written (tokenizers library semantics)
};

class Tokenizer {
public:
    // Loads from a model folder. Throws exl2::Error naming the file and field on bad input.
    static std::unique_ptr<Tokenizer> load(const std::string & dir, const TokenizerOptions & opt = {});
    ~Tokenizer();
    Tokenizer(const Tokenizer &) = delete;
    Tokenizer & operator=(const Tokenizer &) = delete;

    // add_special: apply the post-processor template (BOS/EOS as configured).
    // parse_special: special-token text in the input becomes those tokens (transformers' default);
    // false encodes it as plain text (non-special added tokens are still matched).
    std::vector<int32_t> encode(const std::string & text, bool add_special, bool parse_special = true) const;
    // Text of ids as transformers' decode gives it (invalid UTF-8 becomes U+FFFD). Unknown ids are
    // skipped. skip_special: leave special tokens out.
    std::string decode(const std::vector<int32_t> & ids, bool skip_special = false) const;
    // Raw bytes of one token as the decoder maps it on its own (may be a partial UTF-8 character);
    // "" for an unknown id.
    std::string token_to_piece(int32_t id) const;
    // The vocabulary string of a token (as in tokenizer.json), "" if unknown; and the reverse (-1).
    std::string token_text(int32_t id) const;
    int32_t token_id(const std::string & token_text) const;

    int32_t n_vocab() const;  // largest id + 1 (model and added tokens)
    int32_t bos_id() const;   // -1 if none
    int32_t eos_id() const;   // -1 if none
    int32_t pad_id() const;   // -1 if none
    int32_t unk_id() const;   // -1 if none
    // eos plus the other end-of-generation ids of config.json / generation_config.json.
    std::vector<int32_t> eos_ids() const;
    bool is_special(int32_t id) const;
    bool add_bos() const;  // encode(.., add_special=true) puts BOS first
    bool add_eos() const;  // ... and EOS last
    const std::string & chat_template() const;  // "" if none
    // Short description: which files and which pipeline were used.
    const std::string & desc() const;

    struct Impl;  // internal (tokenizer-impl.h); used by StreamDecoder
    const Impl & impl() const { return *impl_; }

private:
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Incremental decoding for generation: push() returns the text that became final with this id
// (complete UTF-8 characters only; a token ending inside a character returns "" until the
// character is complete; invalid bytes become U+FFFD). The concatenation of every push() and the
// final flush() equals decode() of all ids for valid text. Cost per push: two decodes of a window
// of at most 16 ids.
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer & tok, bool skip_special = false);
    std::string push(int32_t id);
    std::string flush();  // whatever is held back (an incomplete character becomes U+FFFD)
    void reset();

private:
    const Tokenizer & tok_;
    bool skip_special_;
    std::vector<int32_t> ids_;      // the last ids (a window, trimmed once its text is settled)
    std::string emitted_raw_;       // raw decoder output of the window, already accounted for
    std::string pending_;           // raw bytes not yet emitted (an incomplete character)
};

}  // namespace exl2
