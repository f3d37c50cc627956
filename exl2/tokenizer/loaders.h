// Internal: readers for the tokenizer files other than tokenizer.json, and the merge-list
// generators transformers uses when it converts them.
#pragma once

#include "bpe.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace exl2 {
namespace tok {

// SentencePiece ModelProto (tokenizer.model), read without a protobuf library.
struct SpModel {
    enum PieceType { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6 };
    std::vector<std::string> pieces;
    std::vector<float> scores;
    std::vector<int> types;
    int model_type = 1;  // 1 unigram, 2 BPE, 3 word, 4 char
    bool byte_fallback = false;
    int unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
    std::string unk_piece = "<unk>", bos_piece = "<s>", eos_piece = "</s>", pad_piece = "<pad>";
    bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
    std::string precompiled_charsmap;
};
// Throws exl2::Error naming the file and the field when the bytes are not a ModelProto.
SpModel read_sentencepiece(const std::string & data, const std::string & path);
// A tiktoken BPE file: lines "base64(token) rank".
bool looks_like_tiktoken(const std::string & data);
std::vector<std::pair<std::string, int32_t>> read_tiktoken(const std::string & data, const std::string & path);

// transformers' generate_merges(vocab) (no scores): for every token in id order, each split into
// two vocabulary tokens, shorter left part first.
MergeMap merges_from_vocab(const std::unordered_map<std::string, int32_t> & vocab);
// transformers' TikTokenConverter: splits of every token (by rank), ordered by the ranks of the
// two parts. `byte_vocab` maps raw token bytes to ranks; the returned ids are those ranks.
MergeMap merges_from_ranks(const std::unordered_map<std::string, int32_t> & byte_vocab);

// vocab.json + merges.txt (GPT-2 / Qwen2 style).
std::unordered_map<std::string, int32_t> read_vocab_json(const std::string & path);
std::vector<std::pair<std::string, std::string>> read_merges_txt(const std::string & path);

std::string read_file(const std::string & path);  // throws exl2::Error naming the file
bool file_exists(const std::string & path);

}  // namespace tok
}  // namespace exl2
