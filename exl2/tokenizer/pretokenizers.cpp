// Pre-tokenizers of tokenizer.json: Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace,
// WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit and Sequence. The split behaviours follow
// tokenizers' NormalizedString::split (matches and gaps, then Removed/Isolated/Merged*/Contiguous).
#include "pipeline.h"
#include "unicode.h"

#include "exl2/error.h"
#include "exl2/json.h"

#include <algorithm>
#include <functional>

namespace exl2 {
namespace tok {

namespace {

struct Seg {
    size_t a, b;
    bool match;
};

// Applies a split behaviour to the segments of one piece and appends the kept pieces to out.
void emit_split(const Piece & p, const std::vector<Seg> & segs, SplitBehavior beh, bool invert,
                std::vector<Piece> & out) {
    std::vector<Seg> keep;  // match here means "remove"
    bool prev = false;
    switch (beh) {
    case SplitBehavior::Isolated:
        for (auto s : segs) keep.push_back({s.a, s.b, false});
        break;
    case SplitBehavior::Removed:
        for (auto s : segs) keep.push_back({s.a, s.b, s.match != invert});
        break;
    case SplitBehavior::Contiguous:
        for (auto s : segs) {
            bool m = s.match != invert;
            if (m == prev && !keep.empty()) keep.back().b = s.b;
            else keep.push_back({s.a, s.b, false});
            prev = m;
        }
        break;
    case SplitBehavior::MergedWithPrevious:
        for (auto s : segs) {
            bool m = s.match != invert;
            if (m && !prev && !keep.empty()) keep.back().b = s.b;
            else keep.push_back({s.a, s.b, false});
            prev = m;
        }
        break;
    case SplitBehavior::MergedWithNext:
        for (size_t k = segs.size(); k-- > 0;) {
            bool m = segs[k].match != invert;
            if (m && !prev && !keep.empty()) keep.back().a = segs[k].a;
            else keep.push_back({segs[k].a, segs[k].b, false});
            prev = m;
        }
        std::reverse(keep.begin(), keep.end());
        break;
    }
    for (auto & k : keep) {
        if (k.match || k.b <= k.a) continue;
        Piece np;
        np.text.assign(p.text, k.a, k.b - k.a);
        np.at_start = p.at_start && k.a == 0;
        out.push_back(std::move(np));
    }
}

// Segments from a per-character predicate (tokenizers' Pattern for Fn(char) -> bool): every
// matching character is its own match.
void char_segments(const std::string & s, const std::function<bool(uint32_t)> & pred,
                   std::vector<Seg> & segs) {
    segs.clear();
    size_t last = 0;
    for (size_t i = 0; i < s.size();) {
        size_t b = i;
        uint32_t cp = uni::utf8_next(s.data(), s.size(), i);
        if (pred(cp)) {
            if (last < b) segs.push_back({last, b, false});
            segs.push_back({b, i, true});
            last = i;
        }
    }
    if (last < s.size()) segs.push_back({last, s.size(), false});
}

// Segments from regex matches.
void regex_segments(const Regex & re, const std::string & s, std::vector<Seg> & segs) {
    thread_local std::vector<uint32_t> cps;
    thread_local std::vector<uint32_t> offs;
    thread_local std::vector<std::pair<uint32_t, uint32_t>> m;
    cps.clear();
    offs.clear();
    m.clear();
    for (size_t i = 0; i < s.size();) {
        offs.push_back((uint32_t)i);
        cps.push_back(uni::utf8_next(s.data(), s.size(), i));
    }
    offs.push_back((uint32_t)s.size());
    re.find_all(cps.data(), cps.size(), m);
    segs.clear();
    size_t prev = 0;
    for (auto & r : m) {
        size_t a = offs[r.first], b = offs[r.second];
        if (prev != a) segs.push_back({prev, a, false});
        segs.push_back({a, b, true});
        prev = b;
    }
    if (prev != s.size()) segs.push_back({prev, s.size(), false});
}

void string_segments(const std::string & pat, const std::string & s, std::vector<Seg> & segs) {
    segs.clear();
    if (pat.empty()) {
        segs.push_back({0, s.size(), false});
        return;
    }
    size_t prev = 0;
    while (true) {
        size_t j = s.find(pat, prev);
        if (j == std::string::npos) break;
        if (j != prev) segs.push_back({prev, j, false});
        segs.push_back({j, j + pat.size(), true});
        prev = j + pat.size();
    }
    if (prev != s.size()) segs.push_back({prev, s.size(), false});
}

template <class SegFn>
void split_all(std::vector<Piece> & pieces, SplitBehavior beh, bool invert, SegFn segfn) {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 2);
    std::vector<Seg> segs;
    for (const Piece & p : pieces) {
        if (p.text.empty()) continue;
        segfn(p.text, segs);
        emit_split(p, segs, beh, invert, out);
    }
    pieces.swap(out);
}

class SplitRegex final : public PreTokenizer {
public:
    SplitRegex(const std::string & pat, SplitBehavior b, bool invert) : re_(pat), b_(b), inv_(invert) {}
    void apply(std::vector<Piece> & pieces) const override {
        split_all(pieces, b_, inv_, [&](const std::string & s, std::vector<Seg> & segs) {
            regex_segments(re_, s, segs);
        });
    }

private:
    Regex re_;
    SplitBehavior b_;
    bool inv_;
};

class SplitString final : public PreTokenizer {
public:
    SplitString(std::string pat, SplitBehavior b, bool invert) : pat_(std::move(pat)), b_(b), inv_(invert) {}
    void apply(std::vector<Piece> & pieces) const override {
        split_all(pieces, b_, inv_, [&](const std::string & s, std::vector<Seg> & segs) {
            string_segments(pat_, s, segs);
        });
    }

private:
    std::string pat_;
    SplitBehavior b_;
    bool inv_;
};

class SplitChars final : public PreTokenizer {
public:
    SplitChars(std::function<bool(uint32_t)> pred, SplitBehavior b) : pred_(std::move(pred)), b_(b) {}
    void apply(std::vector<Piece> & pieces) const override {
        split_all(pieces, b_, false, [&](const std::string & s, std::vector<Seg> & segs) {
            char_segments(s, pred_, segs);
        });
    }

private:
    std::function<bool(uint32_t)> pred_;
    SplitBehavior b_;
};

const char * const kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPre final : public PreTokenizer {
public:
    ByteLevelPre(bool add_prefix_space, bool use_regex) : prefix_(add_prefix_space) {
        if (use_regex) re_ = std::make_unique<Regex>(kGpt2Pattern);
    }
    void apply(std::vector<Piece> & pieces) const override {
        if (prefix_)
            for (Piece & p : pieces)
                if (!p.text.empty() && p.text[0] != ' ') p.text.insert(0, " ");
        if (re_)
            split_all(pieces, SplitBehavior::Isolated, false,
                      [&](const std::string & s, std::vector<Seg> & segs) { regex_segments(*re_, s, segs); });
        if (!map_) return;
        for (Piece & p : pieces) {
            std::string m;
            m.reserve(p.text.size() * 2);
            for (unsigned char c : p.text) m += byte_to_char(c);
            p.text.swap(m);
        }
    }
    bool ends_with_byte_level() const override { return true; }
    void skip_final_byte_mapping() override { map_ = false; }

private:
    bool prefix_;
    bool map_ = true;
    std::unique_ptr<Regex> re_;
};

class Metaspace final : public PreTokenizer {
public:
    Metaspace(uint32_t repl, PrependScheme scheme, bool split) : scheme_(scheme), split_(split) {
        uni::utf8_put(rep_, repl);
    }
    void apply(std::vector<Piece> & pieces) const override {
        for (Piece & p : pieces) {
            if (p.text.empty()) continue;
            std::string s;
            s.reserve(p.text.size() + 8);
            for (char c : p.text) {
                if (c == ' ') s += rep_;
                else s += c;
            }
            bool starts = s.compare(0, rep_.size(), rep_) == 0;
            if (!starts && (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && p.at_start)))
                s.insert(0, rep_);
            p.text.swap(s);
        }
        if (split_)
            split_all(pieces, SplitBehavior::MergedWithNext, false,
                      [&](const std::string & s, std::vector<Seg> & segs) { string_segments(rep_, s, segs); });
    }

private:
    std::string rep_;
    PrependScheme scheme_;
    bool split_;
};

class Sequence final : public PreTokenizer {
public:
    explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> v) : v_(std::move(v)) {}
    void apply(std::vector<Piece> & pieces) const override {
        for (auto & p : v_) p->apply(pieces);
    }
    bool ends_with_byte_level() const override { return !v_.empty() && v_.back()->ends_with_byte_level(); }
    void skip_final_byte_mapping() override {
        if (!v_.empty()) v_.back()->skip_final_byte_mapping();
    }

private:
    std::vector<std::unique_ptr<PreTokenizer>> v_;
};

class BertPre final : public PreTokenizer {
public:
    void apply(std::vector<Piece> & pieces) const override {
        ws_.apply(pieces);
        punct_.apply(pieces);
    }

private:
    SplitChars ws_{[](uint32_t c) { return uni::is_white_space(c); }, SplitBehavior::Removed};
    SplitChars punct_{[](uint32_t c) { return uni::is_punctuation(c); }, SplitBehavior::Isolated};
};

SplitBehavior behavior_from(const Json & j, const Where & w, SplitBehavior def) {
    if (j.is_null()) return def;
    if (!j.is_string()) fail_at(w, "expected a string");
    const std::string & s = j.as_string();
    if (s == "Removed" || s == "removed") return SplitBehavior::Removed;
    if (s == "Isolated" || s == "isolated") return SplitBehavior::Isolated;
    if (s == "MergedWithPrevious" || s == "merged_with_previous") return SplitBehavior::MergedWithPrevious;
    if (s == "MergedWithNext" || s == "merged_with_next") return SplitBehavior::MergedWithNext;
    if (s == "Contiguous" || s == "contiguous") return SplitBehavior::Contiguous;
    fail_at(w, "unknown split behavior \"" + s + "\"");
}

struct ByteTable {
    std::string to_char[256];
    int from_char[512];
    ByteTable() {
        // Printable Latin-1 bytes stand for themselves; the others map to U+0100.. in byte order.
        for (int & v : from_char) v = -1;
        int n = 0;
        for (int b = 0; b < 256; b++) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            uint32_t cp = printable ? (uint32_t)b : (uint32_t)(256 + n++);
            uni::utf8_put(to_char[b], cp);
            from_char[cp] = b;
        }
    }
};
const ByteTable & byte_table() {
    static const ByteTable t;
    return t;
}

}  // namespace

const std::string & byte_to_char(uint8_t b) { return byte_table().to_char[b]; }
int char_to_byte(uint32_t cp) { return cp < 512 ? byte_table().from_char[cp] : -1; }

std::unique_ptr<PreTokenizer> make_split_regex(const std::string & pattern, SplitBehavior b, bool invert) {
    return std::make_unique<SplitRegex>(pattern, b, invert);
}
std::unique_ptr<PreTokenizer> make_byte_level_pre(bool add_prefix_space, bool use_regex) {
    return std::make_unique<ByteLevelPre>(add_prefix_space, use_regex);
}
std::unique_ptr<PreTokenizer> make_metaspace_pre(uint32_t replacement, PrependScheme scheme, bool split) {
    return std::make_unique<Metaspace>(replacement, scheme, split);
}
std::unique_ptr<PreTokenizer> make_pre_sequence(std::vector<std::unique_ptr<PreTokenizer>> seq) {
    return std::make_unique<Sequence>(std::move(seq));
}

uint32_t json_char(const Json & j, const Where & w) {
    if (!j.is_string()) fail_at(w, "expected a one-character string");
    std::vector<uint32_t> cps = uni::utf8_decode(j.as_string());
    if (cps.size() != 1) fail_at(w, "expected a one-character string");
    return cps[0];
}

PrependScheme prepend_scheme_from(const Json & j, const Where & w) {
    PrependScheme scheme = PrependScheme::Always;
    const Json & ps = j.get("prepend_scheme");
    if (ps.is_string()) {
        const std::string & s = ps.as_string();
        if (s == "first") scheme = PrependScheme::First;
        else if (s == "never") scheme = PrependScheme::Never;
        else if (s == "always") scheme = PrependScheme::Always;
        else fail_at(w.at("prepend_scheme"), "unknown value \"" + s + "\"");
    } else if (!ps.is_null()) {
        fail_at(w.at("prepend_scheme"), "expected a string");
    }
    const Json & aps = j.get("add_prefix_space");  // older files
    if (aps.is_bool() && !aps.as_bool()) scheme = PrependScheme::Never;
    return scheme;
}

std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const Json & j, const Where & w) {
    if (j.is_null()) return nullptr;
    if (!j.is_object()) fail_at(w, "expected an object");
    const Json * t = j.find("type");
    if (!t || !t->is_string()) fail_at(w, "missing \"type\"");
    const std::string & type = t->as_string();
    try {
        if (type == "Split") {
            const Json & pat = j.get("pattern");
            SplitBehavior b = behavior_from(j.get("behavior"), w.at("behavior"), SplitBehavior::Isolated);
            bool inv = j.get_bool("invert", false);
            if (const Json * r = pat.find("Regex")) {
                if (!r->is_string()) fail_at(w.at("pattern"), "Regex must be a string");
                return std::make_unique<SplitRegex>(r->as_string(), b, inv);
            }
            if (const Json * s = pat.find("String")) {
                if (!s->is_string()) fail_at(w.at("pattern"), "String must be a string");
                return std::make_unique<SplitString>(s->as_string(), b, inv);
            }
            fail_at(w.at("pattern"), "expected {\"String\": ...} or {\"Regex\": ...}");
        }
        if (type == "ByteLevel")
            return std::make_unique<ByteLevelPre>(j.get_bool("add_prefix_space", true), j.get_bool("use_regex", true));
        if (type == "Metaspace") {
            uint32_t rep = json_char(j.get("replacement"), w.at("replacement"));
            return std::make_unique<Metaspace>(rep, prepend_scheme_from(j, w), j.get_bool("split", true));
        }
        if (type == "Digits") {
            bool individual = j.get_bool("individual_digits", false);
            return std::make_unique<SplitChars>([](uint32_t c) { return uni::is_number(c); },
                                                individual ? SplitBehavior::Isolated : SplitBehavior::Contiguous);
        }
        if (type == "Punctuation") {
            SplitBehavior b = behavior_from(j.get("behavior"), w.at("behavior"), SplitBehavior::Isolated);
            return std::make_unique<SplitChars>([](uint32_t c) { return uni::is_punctuation(c); }, b);
        }
        if (type == "Whitespace")  // \w+|[^\w\s]+ kept, the rest removed
            return std::make_unique<SplitRegex>("\\w+|[^\\w\\s]+", SplitBehavior::Removed, true);
        if (type == "WhitespaceSplit")
            return std::make_unique<SplitChars>([](uint32_t c) { return uni::is_white_space(c); },
                                                SplitBehavior::Removed);
        if (type == "BertPreTokenizer") return std::make_unique<BertPre>();
        if (type == "CharDelimiterSplit") {
            uint32_t d = json_char(j.get("delimiter"), w.at("delimiter"));
            return std::make_unique<SplitChars>([d](uint32_t c) { return c == d; }, SplitBehavior::Removed);
        }
        if (type == "Sequence") {
            const Json & a = j.get("pretokenizers");
            if (!a.is_array()) fail_at(w.at("pretokenizers"), "expected an array");
            std::vector<std::unique_ptr<PreTokenizer>> v;
            for (size_t i = 0; i < a.size(); i++) {
                auto p = pre_tokenizer_from_json(a[i], w.at("pretokenizers").at(i));
                if (p) v.push_back(std::move(p));
            }
            return std::make_unique<Sequence>(std::move(v));
        }
    } catch (const Error & e) {
        if (std::string(e.what()).rfind(w.file, 0) == 0) throw;
        fail_at(w, e.what());
    }
    fail_at(w.at("type"), "unknown pre_tokenizer type \"" + type + "\"");
}

}  // namespace tok
}  // namespace exl2
