// Normalizers of tokenizer.json: NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Replace,
// Prepend, ByteLevel, BertNormalizer, Precompiled (only when empty) and Sequence.
#include "pipeline.h"
#include "unicode.h"

#include "exl2/error.h"
#include "exl2/json.h"

namespace exl2 {
namespace tok {

void fail_at(const Where & w, const std::string & msg) {
    fail("%s: %s: %s", w.file.c_str(), w.field.c_str(), msg.c_str());
}

void rethrow_at(const Where & w, const Error & e) {
    if (std::string(e.what()).rfind(w.file, 0) == 0) throw;
    fail_at(w, e.what());
}

namespace {

class NormForm final : public Normalizer {
public:
    explicit NormForm(uni::NormForm f) : f_(f) {}
    void apply(std::string & s) const override { s = uni::normalize(s, f_); }

private:
    uni::NormForm f_;
};

class Lowercase final : public Normalizer {
public:
    void apply(std::string & s) const override { s = uni::lowercase(s); }
};

class Strip final : public Normalizer {
public:
    Strip(bool l, bool r) : l_(l), r_(r) {}
    void apply(std::string & s) const override {
        std::vector<uint32_t> cps = uni::utf8_decode(s);
        size_t a = 0, b = cps.size();
        if (l_) while (a < b && uni::is_white_space(cps[a])) a++;
        if (r_) while (b > a && uni::is_white_space(cps[b - 1])) b--;
        if (a == 0 && b == cps.size()) return;
        s = uni::utf8_encode(std::vector<uint32_t>(cps.begin() + (long)a, cps.begin() + (long)b));
    }

private:
    bool l_, r_;
};

class StripAccents final : public Normalizer {
public:
    void apply(std::string & s) const override {
        std::string out;
        for (size_t i = 0; i < s.size();) {
            uint32_t cp = uni::utf8_next(s.data(), s.size(), i);
            if (!uni::in_mask(cp, uni::kMaskM)) uni::utf8_put(out, cp);
        }
        s.swap(out);
    }
};

class ReplaceString final : public Normalizer {
public:
    ReplaceString(std::string pat, std::string content) : pat_(std::move(pat)), content_(std::move(content)) {}
    void apply(std::string & s) const override {
        if (pat_.empty() || s.find(pat_) == std::string::npos) return;
        std::string out;
        size_t i = 0;
        while (true) {
            size_t j = s.find(pat_, i);
            if (j == std::string::npos) break;
            out.append(s, i, j - i);
            out += content_;
            i = j + pat_.size();
        }
        out.append(s, i, std::string::npos);
        s.swap(out);
    }

private:
    std::string pat_, content_;
};

class ReplaceRegex final : public Normalizer {
public:
    ReplaceRegex(const std::string & pat, std::string content) : re_(pat), content_(std::move(content)) {}
    void apply(std::string & s) const override {
        std::vector<uint32_t> cps = uni::utf8_decode(s);
        std::vector<std::pair<uint32_t, uint32_t>> m;
        re_.find_all(cps.data(), cps.size(), m);
        if (m.empty()) return;
        std::string out;
        size_t prev = 0;
        for (auto & r : m) {
            for (size_t k = prev; k < r.first; k++) uni::utf8_put(out, cps[k]);
            if (r.second > r.first) out += content_;  // empty matches replace nothing
            prev = r.second;
        }
        for (size_t k = prev; k < cps.size(); k++) uni::utf8_put(out, cps[k]);
        s.swap(out);
    }

private:
    Regex re_;
    std::string content_;
};

class Prepend final : public Normalizer {
public:
    explicit Prepend(std::string p) : p_(std::move(p)) {}
    void apply(std::string & s) const override {
        if (!s.empty()) s.insert(0, p_);
    }

private:
    std::string p_;
};

class ByteLevelNorm final : public Normalizer {
public:
    void apply(std::string & s) const override {
        std::string out;
        out.reserve(s.size() * 2);
        for (unsigned char c : s) out += byte_to_char(c);
        s.swap(out);
    }
};

class Bert final : public Normalizer {
public:
    Bert(bool clean, bool chinese, bool strip_accents, bool lower)
        : clean_(clean), chinese_(chinese), strip_(strip_accents), lower_(lower) {}
    void apply(std::string & s) const override {
        std::string out;
        for (size_t i = 0; i < s.size();) {
            uint32_t cp = uni::utf8_next(s.data(), s.size(), i);
            if (clean_) {
                if (cp == 0 || cp == 0xFFFD) continue;
                bool ws = cp == '\t' || cp == '\n' || cp == '\r' || uni::is_white_space(cp);
                if (!ws && uni::in_mask(cp, (1u << uni::Cc) | (1u << uni::Cf) | (1u << uni::Cn) |
                                                (1u << uni::Co) | (1u << uni::Cs)) && cp < 0x110000)
                    continue;
                if (ws) cp = ' ';
            }
            bool cjk = (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
                       (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
                       (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
                       (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
            if (chinese_ && cjk) {
                out += ' ';
                uni::utf8_put(out, cp);
                out += ' ';
            } else {
                uni::utf8_put(out, cp);
            }
        }
        if (strip_) {
            out = uni::normalize(out, uni::NormForm::NFD);
            StripAccents().apply(out);
        }
        if (lower_) out = uni::lowercase(out);
        s.swap(out);
    }

private:
    bool clean_, chinese_, strip_, lower_;
};

class Sequence final : public Normalizer {
public:
    explicit Sequence(std::vector<std::unique_ptr<Normalizer>> v) : v_(std::move(v)) {}
    void apply(std::string & s) const override {
        for (auto & n : v_) n->apply(s);
    }

private:
    std::vector<std::unique_ptr<Normalizer>> v_;
};

class Identity final : public Normalizer {
public:
    void apply(std::string &) const override {}
};

}  // namespace

std::unique_ptr<Normalizer> make_nfc_normalizer() {
    return std::make_unique<NormForm>(uni::NormForm::NFC);
}

// Reads {"String": s} or {"Regex": r} pattern objects (Replace, Split).
static void read_pattern(const Json & j, const Where & w, std::string & text, bool & is_regex) {
    if (const Json * s = j.find("String")) {
        if (!s->is_string()) fail_at(w, "String must be a string");
        text = s->as_string();
        is_regex = false;
    } else if (const Json * r = j.find("Regex")) {
        if (!r->is_string()) fail_at(w, "Regex must be a string");
        text = r->as_string();
        is_regex = true;
    } else if (j.is_string()) {
        text = j.as_string();
        is_regex = false;
    } else {
        fail_at(w, "expected {\"String\": ...} or {\"Regex\": ...}");
    }
}

std::unique_ptr<Normalizer> normalizer_from_json(const Json & j, const Where & w) {
    if (j.is_null()) return nullptr;
    if (!j.is_object()) fail_at(w, "expected an object");
    const Json * t = j.find("type");
    if (!t || !t->is_string()) fail_at(w, "missing \"type\"");
    const std::string & type = t->as_string();
    try {
        if (type == "NFC") return std::make_unique<NormForm>(uni::NormForm::NFC);
        if (type == "NFD") return std::make_unique<NormForm>(uni::NormForm::NFD);
        if (type == "NFKC") return std::make_unique<NormForm>(uni::NormForm::NFKC);
        if (type == "NFKD") return std::make_unique<NormForm>(uni::NormForm::NFKD);
        if (type == "Lowercase") return std::make_unique<Lowercase>();
        if (type == "StripAccents") return std::make_unique<StripAccents>();
        if (type == "Strip")
            return std::make_unique<Strip>(j.get_bool("strip_left", true), j.get_bool("strip_right", true));
        if (type == "Prepend") {
            const Json & p = j.get("prepend");
            if (!p.is_string()) fail_at(w.at("prepend"), "expected a string");
            return std::make_unique<Prepend>(p.as_string());
        }
        if (type == "Replace") {
            std::string pat;
            bool is_re = false;
            read_pattern(j.get("pattern"), w.at("pattern"), pat, is_re);
            const Json & c = j.get("content");
            if (!c.is_string()) fail_at(w.at("content"), "expected a string");
            if (is_re) return std::make_unique<ReplaceRegex>(pat, c.as_string());
            return std::make_unique<ReplaceString>(pat, c.as_string());
        }
        if (type == "ByteLevel") return std::make_unique<ByteLevelNorm>();
        if (type == "BertNormalizer") {
            bool lower = j.get_bool("lowercase", true);
            const Json & sa = j.get("strip_accents");
            bool strip = sa.is_null() ? lower : sa.as_bool();
            return std::make_unique<Bert>(j.get_bool("clean_text", true),
                                          j.get_bool("handle_chinese_chars", true), strip, lower);
        }
        if (type == "Precompiled") {
            const Json & m = j.get("precompiled_charsmap");
            if (m.is_null() || (m.is_string() && m.as_string().empty())) return std::make_unique<Identity>();
            fail_at(w, "normalizer type \"Precompiled\" with a non-empty charsmap is not supported");
        }
        if (type == "Sequence") {
            auto v = sequence_stages<Normalizer>(j, "normalizers", w, normalizer_from_json);
            return std::make_unique<Sequence>(std::move(v));
        }
    } catch (const Error & e) {
        rethrow_at(w, e);
    }
    fail_at(w.at("type"), "unknown normalizer type \"" + type + "\"");
}

}  // namespace tok
}  // namespace exl2
