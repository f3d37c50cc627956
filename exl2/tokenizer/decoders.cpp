// Decoders of tokenizer.json: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, WordPiece,
// BPEDecoder and Sequence, each rewriting the token list as tokenizers' decode_chain does.
#include "pipeline.h"
#include "unicode.h"

#include "exl2/error.h"
#include "exl2/json.h"

namespace exl2 {
namespace tok {

namespace {

const char * const kReplacementChar = "\xEF\xBF\xBD";

class ByteLevelDec final : public Decoder {
public:
    void apply(std::vector<std::string> & tokens, bool raw) const override {
        std::string bytes;
        for (const std::string & t : tokens) {
            size_t start = bytes.size();
            bool all = true;
            for (size_t i = 0; i < t.size();) {
                int b = char_to_byte(uni::utf8_next(t.data(), t.size(), i));
                if (b < 0) {
                    all = false;
                    break;
                }
                bytes += (char)b;
            }
            if (!all) {  // a token with characters outside the byte alphabet is kept as it is
                bytes.resize(start);
                bytes += t;
            }
        }
        tokens.assign(1, raw ? bytes : uni::utf8_lossy(bytes));
    }
};

class MetaspaceDec final : public Decoder {
public:
    MetaspaceDec(uint32_t rep, PrependScheme scheme) : rep_(rep), scheme_(scheme) {}
    void apply(std::vector<std::string> & tokens, bool) const override {
        for (size_t k = 0; k < tokens.size(); k++) {
            const std::string & t = tokens[k];
            std::string out;
            for (size_t i = 0; i < t.size();) {
                uint32_t cp = uni::utf8_next(t.data(), t.size(), i);
                if (cp == rep_) {
                    if (!(k == 0 && scheme_ != PrependScheme::Never)) out += ' ';
                } else {
                    uni::utf8_put(out, cp);
                }
            }
            tokens[k].swap(out);
        }
    }

private:
    uint32_t rep_;
    PrependScheme scheme_;
};

int byte_token(const std::string & t) {  // "<0xAB>" -> 0xAB, else -1
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = t[(size_t)i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

class ByteFallbackDec final : public Decoder {
public:
    void apply(std::vector<std::string> & tokens, bool raw) const override {
        std::vector<std::string> out;
        out.reserve(tokens.size());
        std::string pending;
        auto flush = [&]() {
            if (pending.empty()) return;
            std::string fixed = uni::utf8_lossy(pending);
            if (raw || fixed == pending) {
                out.push_back(pending);
            } else {
                for (size_t i = 0; i < pending.size(); i++) out.push_back(kReplacementChar);
            }
            pending.clear();
        };
        for (std::string & t : tokens) {
            int b = byte_token(t);
            if (b >= 0) {
                pending += (char)b;
            } else {
                flush();
                out.push_back(std::move(t));
            }
        }
        flush();
        tokens.swap(out);
    }
};

class FuseDec final : public Decoder {
public:
    void apply(std::vector<std::string> & tokens, bool) const override {
        std::string s;
        for (auto & t : tokens) s += t;
        tokens.assign(1, s);
    }
};

class StripDec final : public Decoder {
public:
    StripDec(uint32_t content, size_t start, size_t stop) : c_(content), start_(start), stop_(stop) {}
    void apply(std::vector<std::string> & tokens, bool) const override {
        for (auto & t : tokens) {
            std::vector<uint32_t> cps = uni::utf8_decode(t);
            size_t a = 0, b = cps.size();
            for (size_t i = 0; i < start_ && i < cps.size() && cps[i] == c_; i++) a = i + 1;
            for (size_t i = 0; i < stop_ && i < cps.size() && b > a && cps[cps.size() - 1 - i] == c_; i++)
                b = cps.size() - 1 - i;
            if (a != 0 || b != cps.size())
                t = uni::utf8_encode(std::vector<uint32_t>(cps.begin() + (long)a, cps.begin() + (long)b));
        }
    }
    bool prefix_stable() const override { return stop_ == 0; }

private:
    uint32_t c_;
    size_t start_, stop_;
};

class ReplaceDec final : public Decoder {
public:
    ReplaceDec(std::string pat, bool is_regex, std::string content) : pat_(std::move(pat)), content_(std::move(content)) {
        if (is_regex) re_ = std::make_unique<Regex>(pat_);
    }
    void apply(std::vector<std::string> & tokens, bool) const override {
        for (auto & t : tokens) {
            if (re_) {
                std::vector<uint32_t> cps = uni::utf8_decode(t);
                std::vector<std::pair<uint32_t, uint32_t>> m;
                re_->find_all(cps.data(), cps.size(), m);
                std::string out;
                size_t prev = 0;
                for (auto & r : m) {
                    for (size_t k = prev; k < r.first; k++) uni::utf8_put(out, cps[k]);
                    out += content_;
                    prev = r.second;
                }
                for (size_t k = prev; k < cps.size(); k++) uni::utf8_put(out, cps[k]);
                t.swap(out);
            } else if (!pat_.empty() && t.find(pat_) != std::string::npos) {
                std::string out;
                size_t i = 0;
                for (size_t j; (j = t.find(pat_, i)) != std::string::npos; i = j + pat_.size()) {
                    out.append(t, i, j - i);
                    out += content_;
                }
                out.append(t, i, std::string::npos);
                t.swap(out);
            }
        }
    }

private:
    std::string pat_, content_;
    std::unique_ptr<Regex> re_;
};

class WordPieceDec final : public Decoder {
public:
    WordPieceDec(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
    void apply(std::vector<std::string> & tokens, bool) const override {
        for (size_t k = 0; k < tokens.size(); k++) {
            std::string & t = tokens[k];
            if (k != 0) {
                if (t.compare(0, prefix_.size(), prefix_) == 0) t.erase(0, prefix_.size());
                else t.insert(0, " ");
            }
            if (cleanup_) t = clean_up_tokenization(t);
        }
    }
    bool prefix_stable() const override { return !cleanup_; }

private:
    std::string prefix_;
    bool cleanup_;
};

class BpeDec final : public Decoder {
public:
    explicit BpeDec(std::string suffix) : suffix_(std::move(suffix)) {}
    void apply(std::vector<std::string> & tokens, bool) const override {
        for (size_t k = 0; k < tokens.size(); k++) {
            std::string & t = tokens[k];
            std::string rep = k + 1 == tokens.size() ? "" : " ";
            std::string out;
            size_t i = 0;
            if (!suffix_.empty())
                for (size_t j; (j = t.find(suffix_, i)) != std::string::npos; i = j + suffix_.size()) {
                    out.append(t, i, j - i);
                    out += rep;
                }
            out.append(t, i, std::string::npos);
            t.swap(out);
        }
    }
    bool prefix_stable() const override { return false; }

private:
    std::string suffix_;
};

class SequenceDec final : public Decoder {
public:
    explicit SequenceDec(std::vector<std::unique_ptr<Decoder>> v) : v_(std::move(v)) {}
    void apply(std::vector<std::string> & tokens, bool raw) const override {
        for (auto & d : v_) d->apply(tokens, raw);
    }
    bool prefix_stable() const override {
        for (auto & d : v_)
            if (!d->prefix_stable()) return false;
        return true;
    }

private:
    std::vector<std::unique_ptr<Decoder>> v_;
};

}  // namespace

std::string clean_up_tokenization(const std::string & s) {
    // transformers' PreTrainedTokenizerBase.clean_up_tokenization: these replacements, in order.
    static const char * const pairs[][2] = {{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","},
                                            {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
                                            {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    std::string cur = s;
    for (const auto & p : pairs) {
        const std::string from = p[0], to = p[1];
        if (cur.find(from) == std::string::npos) continue;
        std::string out;
        size_t i = 0;
        for (size_t j; (j = cur.find(from, i)) != std::string::npos; i = j + from.size()) {
            out.append(cur, i, j - i);
            out += to;
        }
        out.append(cur, i, std::string::npos);
        cur.swap(out);
    }
    return cur;
}

std::unique_ptr<Decoder> make_byte_level_decoder() { return std::make_unique<ByteLevelDec>(); }

std::unique_ptr<Decoder> make_sp_decoder(bool strip_first_space) {
    std::vector<std::unique_ptr<Decoder>> v;
    v.push_back(std::make_unique<ReplaceDec>("\xE2\x96\x81", false, " "));
    v.push_back(std::make_unique<ByteFallbackDec>());
    v.push_back(std::make_unique<FuseDec>());
    if (strip_first_space) v.push_back(std::make_unique<StripDec>(' ', 1, 0));
    return std::make_unique<SequenceDec>(std::move(v));
}

std::unique_ptr<Decoder> make_metaspace_decoder(uint32_t replacement, PrependScheme scheme) {
    return std::make_unique<MetaspaceDec>(replacement, scheme);
}

std::unique_ptr<Decoder> decoder_from_json(const Json & j, const Where & w) {
    if (j.is_null()) return nullptr;
    if (!j.is_object()) fail_at(w, "expected an object");
    const Json * t = j.find("type");
    if (!t || !t->is_string()) fail_at(w, "missing \"type\"");
    const std::string & type = t->as_string();
    try {
        if (type == "ByteLevel") return std::make_unique<ByteLevelDec>();
        if (type == "Metaspace")
            return std::make_unique<MetaspaceDec>(json_char(j.get("replacement"), w.at("replacement")),
                                                  prepend_scheme_from(j, w));
        if (type == "ByteFallback") return std::make_unique<ByteFallbackDec>();
        if (type == "Fuse") return std::make_unique<FuseDec>();
        if (type == "Strip") {
            uint32_t c = json_char(j.get("content"), w.at("content"));
            int64_t a = j.get_int("start", 0), b = j.get_int("stop", 0);
            if (a < 0 || b < 0) fail_at(w, "start/stop must be >= 0");
            return std::make_unique<StripDec>(c, (size_t)a, (size_t)b);
        }
        if (type == "Replace") {
            const Json & pat = j.get("pattern");
            const Json & c = j.get("content");
            if (!c.is_string()) fail_at(w.at("content"), "expected a string");
            if (const Json * r = pat.find("Regex")) {
                if (!r->is_string()) fail_at(w.at("pattern"), "Regex must be a string");
                return std::make_unique<ReplaceDec>(r->as_string(), true, c.as_string());
            }
            if (const Json * s = pat.find("String")) {
                if (!s->is_string()) fail_at(w.at("pattern"), "String must be a string");
                return std::make_unique<ReplaceDec>(s->as_string(), false, c.as_string());
            }
            fail_at(w.at("pattern"), "expected {\"String\": ...} or {\"Regex\": ...}");
        }
        if (type == "WordPiece")
            return std::make_unique<WordPieceDec>(j.get_string("prefix", "##"), j.get_bool("cleanup", true));
        if (type == "BPEDecoder") return std::make_unique<BpeDec>(j.get_string("suffix", "</w>"));
        if (type == "Sequence") {
            auto v = sequence_stages<Decoder>(j, "decoders", w, decoder_from_json);
            return std::make_unique<SequenceDec>(std::move(v));
        }
    } catch (const Error & e) {
        rethrow_at(w, e);
    }
    fail_at(w.at("type"), "unknown decoder type \"" + type + "\"");
}

}  // namespace tok
}  // namespace exl2
