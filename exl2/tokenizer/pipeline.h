// Internal: the stages of a Hugging Face tokenizer pipeline, as tokenizer.json describes them.
//
//   text -> added-token split -> Normalizer -> PreTokenizer -> Model (ids) -> PostProcessor
//   ids  -> tokens -> Decoder -> text
//
// Strings are UTF-8 throughout (invalid bytes are carried as they are; see unicode.h). Offsets
// are not tracked: only ids matter here. Each stage is built from its JSON object by a factory
// that throws exl2::Error naming the file and the field.
#pragma once

#include "regex.h"

#include "exl2/json.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace exl2 {

class Error;

namespace tok {

// Where an error message says a stage came from: "<file>: <field path>".
struct Where {
    std::string file;
    std::string field;
    Where at(const std::string & sub) const { return {file, field.empty() ? sub : field + "." + sub}; }
    Where at(size_t i) const { return {file, field + "[" + std::to_string(i) + "]"}; }
};
[[noreturn]] void fail_at(const Where & w, const std::string & msg);
// Call inside a catch block: an Error from a nested factory already names the file and goes on
// as it is; any other gets the location `w`.
[[noreturn]] void rethrow_at(const Where & w, const Error & e);

// The stages of a "Sequence" object: j[key] must be an array, each element is built by
// make(element, where), and stages that do nothing (nullptr) are left out.
template <class Stage, class Make>
std::vector<std::unique_ptr<Stage>> sequence_stages(const Json & j, const char * key, const Where & w, Make make) {
    const Json & a = j.get(key);
    if (!a.is_array()) fail_at(w.at(key), "expected an array");
    std::vector<std::unique_ptr<Stage>> v;
    for (size_t i = 0; i < a.size(); i++)
        if (auto s = make(a[i], w.at(key).at(i))) v.push_back(std::move(s));
    return v;
}

// ---- normalizers ------------------------------------------------------------------------------

class Normalizer {
public:
    virtual ~Normalizer() = default;
    virtual void apply(std::string & s) const = 0;
};
std::unique_ptr<Normalizer> normalizer_from_json(const Json & j, const Where & w);
// Common pieces for pipelines built in code (transformers' class rebuilds).
std::unique_ptr<Normalizer> make_nfc_normalizer();

// ---- pre-tokenizers ---------------------------------------------------------------------------

// One piece of pre-tokenized text. at_start: it begins at offset 0 of the original input (the
// Metaspace "first" prepend scheme needs that).
struct Piece {
    std::string text;
    bool at_start = false;
};

// Receives pre-tokenized pieces one at a time (data valid only during the call).
using PieceSink = std::function<void(const char * p, size_t n, bool at_start)>;

class PreTokenizer {
public:
    virtual ~PreTokenizer() = default;
    // Streams the non-empty pieces of one input to `sink`, in order, without building a list of
    // every piece of a long text.
    virtual void for_each(const char * p, size_t n, bool at_start, const PieceSink & sink) const = 0;
    // Replaces `pieces` by their split (empty pieces dropped): for_each over each of them.
    void apply(std::vector<Piece> & pieces) const;
    // The last stage maps bytes to GPT-2's byte characters (ByteLevel). A byte-level BPE model
    // can take raw bytes instead: then the loader calls skip_final_byte_mapping().
    virtual bool ends_with_byte_level() const { return false; }
    virtual void skip_final_byte_mapping() {}
};
std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const Json & j, const Where & w);
// Shared JSON readers: a one-character string; Metaspace's prepend_scheme / add_prefix_space.
uint32_t json_char(const Json & j, const Where & w);

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
std::unique_ptr<PreTokenizer> make_split_regex(const std::string & pattern, SplitBehavior b, bool invert);
std::unique_ptr<PreTokenizer> make_byte_level_pre(bool add_prefix_space, bool use_regex);
enum class PrependScheme { First, Never, Always };
PrependScheme prepend_scheme_from(const Json & metaspace, const Where & w);
std::unique_ptr<PreTokenizer> make_metaspace_pre(uint32_t replacement, PrependScheme scheme, bool split);
std::unique_ptr<PreTokenizer> make_pre_sequence(std::vector<std::unique_ptr<PreTokenizer>> seq);

// GPT-2's byte <-> character table (printable characters stand for themselves).
const std::string & byte_to_char(uint8_t b);   // UTF-8 of the character for byte b
int char_to_byte(uint32_t cp);                 // byte for a mapped character, or -1

// ---- decoders ---------------------------------------------------------------------------------

class Decoder {
public:
    virtual ~Decoder() = default;
    // Rewrites the token list, as tokenizers' decode_chain. `raw`: leave invalid byte runs as raw
    // bytes instead of U+FFFD (the streaming decoder converts them itself).
    virtual void apply(std::vector<std::string> & tokens, bool raw) const = 0;
    // True when decoding a prefix of the ids always gives a prefix of the text (no stage looks at
    // the end of the sequence), so a streaming decoder can emit text early.
    virtual bool prefix_stable() const { return true; }
};
// " ." -> ".", " n't" -> "n't" and the like (WordPiece decoder's cleanup).
std::string clean_up_tokenization(const std::string & s);
std::unique_ptr<Decoder> decoder_from_json(const Json & j, const Where & w);
std::unique_ptr<Decoder> make_byte_level_decoder();
// Llama-style: Replace(U+2581 -> ' '), ByteFallback, Fuse, optionally Strip(' ', 1, 0).
std::unique_ptr<Decoder> make_sp_decoder(bool strip_first_space);
std::unique_ptr<Decoder> make_metaspace_decoder(uint32_t replacement, PrependScheme scheme);

// ---- models -----------------------------------------------------------------------------------

class Model {
public:
    virtual ~Model() = default;
    virtual void encode(const char * piece, size_t n, std::vector<int32_t> & out) const = 0;
    virtual int32_t token_to_id(const std::string & token) const = 0;  // -1 when absent
    virtual const std::string * id_to_token(int32_t id) const = 0;     // nullptr when absent
    virtual int32_t vocab_size() const = 0;  // number of ids the model knows (max id + 1)
    // Switch to raw-byte input (see PreTokenizer::skip_final_byte_mapping); false if unsupported.
    virtual bool set_byte_input() { return false; }
};

// ---- post-processor ---------------------------------------------------------------------------

// TemplateProcessing for single sequences: items are special tokens (their ids) or the sequence.
struct Template {
    struct Item {
        bool is_sequence = false;
        std::vector<int32_t> ids;
    };
    std::vector<Item> single;
    bool present = false;  // false: add_special adds nothing
};
// Reads a post_processor object (TemplateProcessing, ByteLevel, RobertaProcessing,
// BertProcessing, Sequence). Null JSON gives an empty template.
Template template_from_json(const Json & j, const Where & w);

}  // namespace tok
}  // namespace exl2
