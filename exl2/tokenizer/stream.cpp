// StreamDecoder: text for one id at a time. It decodes a short window of recent ids twice (with
// and without the new id) and emits the difference, so every decoder (byte-level, SentencePiece
// with its first-token rules, byte fallback) behaves as in a full decode. Bytes are held back
// while they end inside a UTF-8 character.
#include "tokenizer-impl.h"
#include "unicode.h"

namespace exl2 {

namespace {

constexpr size_t kWindowMax = 16, kWindowKeep = 6;

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer & tok, bool skip_special) : tok_(tok), skip_special_(skip_special) {}

void StreamDecoder::reset() {
    ids_.clear();
    emitted_raw_.clear();
    pending_.clear();
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
    emitted_raw_.swap(raw);

    // Keep the window short once its text is settled; first-token rules (Strip, Metaspace) then
    // apply to text that was already emitted, in both decodes of the next difference.
    if (ids_.size() > kWindowMax) {
        std::vector<int32_t> keep(ids_.end() - (long)kWindowKeep, ids_.end());
        std::string r = im.decode(keep, skip_special_, true);
        if (!r.empty()) {
            ids_.swap(keep);
            emitted_raw_.swap(r);
        }
    }

    size_t ready = pending_.size() - uni::utf8_incomplete_tail(pending_);
    std::string out = uni::utf8_lossy(pending_.substr(0, ready));
    pending_.erase(0, ready);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out = uni::utf8_lossy(pending_);
    reset();
    return out;
}

}  // namespace exl2
