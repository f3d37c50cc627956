// StreamDecoder: text for one id at a time. It decodes a short window of recent ids twice (with
// and without the new id) and emits the difference, so every decoder (byte-level, SentencePiece
// with its first-token rules, byte fallback) behaves as in a full decode. Bytes are held back
// while they end inside a UTF-8 character, and while they could start one of transformers'
// clean-up patterns (" ." and the like) when clean-up is on.
#include "tokenizer-impl.h"
#include "unicode.h"

namespace exl2 {

namespace {

// Longest tail of s that is a proper prefix of a clean-up pattern (" .", " n't", ...).
size_t cleanup_holdback(const std::string & s) {
    static const char * const pats[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
    size_t best = 0;
    for (const char * p : pats) {
        size_t n = std::char_traits<char>::length(p);
        for (size_t k = n - 1; k > best; k--)
            if (s.size() >= k && s.compare(s.size() - k, k, p, k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

constexpr size_t kWindowMax = 16, kWindowKeep = 6;

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer & tok, bool skip_special) : tok_(tok), skip_special_(skip_special) {}

void StreamDecoder::reset() {
    ids_.clear();
    emitted_raw_.clear();
    pending_.clear();
    first_ = true;
}

std::string StreamDecoder::push(int32_t id) {
    const Tokenizer::Impl & im = tok_.impl();
    ids_.push_back(id);
    std::string raw = im.decode(ids_, skip_special_, true);
    // New bytes: what this id added to the window's text. A decoder that rewrites earlier text
    // (not prefix-stable) can only have its common prefix kept.
    size_t common = 0;
    while (common < raw.size() && common < emitted_raw_.size() && raw[common] == emitted_raw_[common]) common++;
    pending_.append(raw, common, std::string::npos);
    emitted_raw_ = raw;

    // Keep the window short once its text is settled.
    if (ids_.size() > kWindowMax) {
        std::vector<int32_t> keep(ids_.end() - (long)kWindowKeep, ids_.end());
        std::string r = im.decode(keep, skip_special_, true);
        if (!r.empty()) {
            ids_.swap(keep);
            emitted_raw_ = r;
        }
    }

    size_t hold = uni::utf8_incomplete_tail(pending_);
    std::string ready = pending_.substr(0, pending_.size() - hold);
    if (im.clean_up_spaces) hold += cleanup_holdback(ready), ready.resize(pending_.size() - hold);
    pending_.erase(0, ready.size());
    std::string out = uni::utf8_lossy(ready);
    if (im.clean_up_spaces) out = tok::clean_up_tokenization(out);
    return out;
}

std::string StreamDecoder::flush() {
    const Tokenizer::Impl & im = tok_.impl();
    std::string out = uni::utf8_lossy(pending_);
    if (im.clean_up_spaces) out = tok::clean_up_tokenization(out);
    reset();
    return out;
}

}  // namespace exl2
