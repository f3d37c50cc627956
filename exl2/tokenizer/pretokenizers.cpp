// Pre-tokenizers of tokenizer.json: Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace,
// WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit and Sequence. The split behaviours follow
// tokenizers' NormalizedString::split (matches and gaps, then Removed/Isolated/Merged*/Contiguous).
#include "pipeline.h"
#include "unicode.h"

#include "exl2/error.h"
#include "exl2/json.h"

#include <algorithm>
#include <functional>
#include <string_view>

namespace exl2 {
namespace tok {

namespace {

struct Seg {
    uint32_t a, b;
    bool match;
};

// Per-thread scratch buffers, one set per nesting level (a Sequence runs stage i+1 inside the
// sink of stage i, so the levels must not share buffers).
struct Scratch {
    std::vector<uint32_t> cps;
    std::vector<Seg> segs, keep;
    std::string text, mapped;
};
thread_local std::vector<std::unique_ptr<Scratch>> t_scratch;
thread_local size_t t_depth = 0;

class ScratchLevel {
public:
    ScratchLevel() {
        if (t_scratch.size() <= t_depth) t_scratch.push_back(std::make_unique<Scratch>());
        s_ = t_scratch[t_depth++].get();
    }
    ~ScratchLevel() { t_depth--; }
    Scratch & operator*() { return *s_; }
    Scratch * operator->() { return s_; }

private:
    Scratch * s_;
};

// Applies a split behaviour to the segments of one piece and sends the kept parts to sink.
void emit_split(const char * p, bool at_start, const std::vector<Seg> & segs, SplitBehavior beh, bool invert,
                std::vector<Seg> & keep, const PieceSink & sink) {
    auto out = [&](uint32_t a, uint32_t b) {
        if (b > a) sink(p + a, b - a, at_start && a == 0);
    };
    bool prev = false;
    switch (beh) {
    case SplitBehavior::Isolated:
        for (const Seg & s : segs) out(s.a, s.b);
        return;
    case SplitBehavior::Removed:
        for (const Seg & s : segs)
            if (s.match == invert) out(s.a, s.b);
        return;
    case SplitBehavior::Contiguous:
        keep.clear();
        for (const Seg & s : segs) {
            bool m = s.match != invert;
            if (m == prev && !keep.empty()) keep.back().b = s.b;
            else keep.push_back({s.a, s.b, false});
            prev = m;
        }
        break;
    case SplitBehavior::MergedWithPrevious:
        keep.clear();
        for (const Seg & s : segs) {
            bool m = s.match != invert;
            if (m && !prev && !keep.empty()) keep.back().b = s.b;
            else keep.push_back({s.a, s.b, false});
            prev = m;
        }
        break;
    case SplitBehavior::MergedWithNext:
        keep.clear();
        for (size_t k = segs.size(); k-- > 0;) {
            bool m = segs[k].match != invert;
            if (m && !prev && !keep.empty()) keep.back().a = segs[k].a;
            else keep.push_back({segs[k].a, segs[k].b, false});
            prev = m;
        }
        std::reverse(keep.begin(), keep.end());
        break;
    }
    for (const Seg & k : keep) out(k.a, k.b);
}

// Segments from a per-character predicate (tokenizers' Pattern for Fn(char) -> bool): every
// matching character is its own match.
void char_segments(const char * s, size_t n, const std::function<bool(uint32_t)> & pred, std::vector<Seg> & segs) {
    segs.clear();
    uint32_t last = 0;
    for (size_t i = 0; i < n;) {
        uint32_t b = (uint32_t)i;
        uint32_t cp = uni::utf8_next(s, n, i);
        if (pred(cp)) {
            if (last < b) segs.push_back({last, b, false});
            segs.push_back({b, (uint32_t)i, true});
            last = (uint32_t)i;
        }
    }
    if (last < n) segs.push_back({last, (uint32_t)n, false});
}

// Byte length of a decoded code point (an invalid byte is one byte).
inline uint32_t cp_bytes(uint32_t cp) {
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : cp < 0x110000 ? 4 : 1;
}

// Regex matches as byte segments: Isolated pieces go straight to the sink, other behaviours
// collect the segments first.
void regex_split(const Regex & re, const char * s, size_t n, bool at_start, SplitBehavior beh, bool invert,
                 Scratch & sc, const PieceSink & sink) {
    sc.cps.clear();
    sc.cps.reserve(n);
    for (size_t i = 0; i < n;) sc.cps.push_back(uni::utf8_next(s, n, i));
    sc.segs.clear();
    const bool direct = beh == SplitBehavior::Isolated;
    uint32_t cp_at = 0, byte_at = 0, prev = 0;  // byte offset of code point cp_at
    auto to_bytes = [&](uint32_t cp_index) {
        while (cp_at < cp_index) byte_at += cp_bytes(sc.cps[cp_at++]);
        return byte_at;
    };
    auto seg = [&](uint32_t a, uint32_t b, bool match) {
        if (direct) {
            if (b > a) sink(s + a, b - a, at_start && a == 0);
        } else {
            sc.segs.push_back({a, b, match});
        }
    };
    re.find_each(sc.cps.data(), sc.cps.size(), [&](uint32_t ma, uint32_t mb) {
        uint32_t a = to_bytes(ma), b = to_bytes(mb);
        if (prev != a) seg(prev, a, false);
        seg(a, b, true);
        prev = b;
    });
    if (prev != n) seg(prev, (uint32_t)n, false);
    if (!direct) emit_split(s, at_start, sc.segs, beh, invert, sc.keep, sink);
}

void string_segments(const std::string & pat, const char * s, size_t n, std::vector<Seg> & segs) {
    segs.clear();
    if (pat.empty()) {
        segs.push_back({0, (uint32_t)n, false});
        return;
    }
    size_t prev = 0;
    const std::string_view text(s, n);
    while (true) {
        size_t j = text.find(pat, prev);
        if (j == std::string_view::npos) break;
        if (j != prev) segs.push_back({(uint32_t)prev, (uint32_t)j, false});
        segs.push_back({(uint32_t)j, (uint32_t)(j + pat.size()), true});
        prev = j + pat.size();
    }
    if (prev != n) segs.push_back({(uint32_t)prev, (uint32_t)n, false});
}

class SplitRegex final : public PreTokenizer {
public:
    SplitRegex(const std::string & pat, SplitBehavior b, bool invert) : re_(pat), b_(b), inv_(invert) {}
    void for_each(const char * p, size_t n, bool at_start, const PieceSink & sink) const override {
        ScratchLevel sc;
        regex_split(re_, p, n, at_start, b_, inv_, *sc, sink);
    }

private:
    Regex re_;
    SplitBehavior b_;
    bool inv_;
};

class SplitString final : public PreTokenizer {
public:
    SplitString(std::string pat, SplitBehavior b, bool invert) : pat_(std::move(pat)), b_(b), inv_(invert) {}
    void for_each(const char * p, size_t n, bool at_start, const PieceSink & sink) const override {
        ScratchLevel sc;
        string_segments(pat_, p, n, sc->segs);
        emit_split(p, at_start, sc->segs, b_, inv_, sc->keep, sink);
    }

private:
    std::string pat_;
    SplitBehavior b_;
    bool inv_;
};

class SplitChars final : public PreTokenizer {
public:
    SplitChars(std::function<bool(uint32_t)> pred, SplitBehavior b) : pred_(std::move(pred)), b_(b) {}
    void for_each(const char * p, size_t n, bool at_start, const PieceSink & sink) const override {
        ScratchLevel sc;
        char_segments(p, n, pred_, sc->segs);
        emit_split(p, at_start, sc->segs, b_, false, sc->keep, sink);
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
    void for_each(const char * p, size_t n, bool at_start, const PieceSink & sink) const override {
        ScratchLevel sc;
        if (prefix_ && n > 0 && p[0] != ' ') {
            sc->text.assign(1, ' ');
            sc->text.append(p, n);
            p = sc->text.data();
            n = sc->text.size();
        }
        auto map = [&](const char * q, size_t m, bool st) {
            if (!map_) {
                sink(q, m, st);
                return;
            }
            sc->mapped.clear();
            for (size_t i = 0; i < m; i++) sc->mapped += byte_to_char((uint8_t)q[i]);
            sink(sc->mapped.data(), sc->mapped.size(), st);
        };
        if (re_) {
            regex_split(*re_, p, n, at_start, SplitBehavior::Isolated, false, *sc, map);
        } else if (n > 0) {
            map(p, n, at_start);
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
    void for_each(const char * p, size_t n, bool at_start, const PieceSink & sink) const override {
        if (n == 0) return;
        ScratchLevel sc;
        std::string & s = sc->text;
        s.clear();
        s.reserve(n + n / 4 + 8);
        for (size_t i = 0; i < n; i++) {
            if (p[i] == ' ') s += rep_;
            else s += p[i];
        }
        bool starts = s.compare(0, rep_.size(), rep_) == 0;
        if (!starts && (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && at_start)))
            s.insert(0, rep_);
        if (!split_) {
            sink(s.data(), s.size(), at_start);
            return;
        }
        string_segments(rep_, s.data(), s.size(), sc->segs);
        emit_split(s.data(), at_start, sc->segs, SplitBehavior::MergedWithNext, false, sc->keep, sink);
    }

private:
    std::string rep_;
    PrependScheme scheme_;
    bool split_;
};

class Sequence final : public PreTokenizer {
public:
    explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> v) : v_(std::move(v)) {}
    void for_each(const char * p, size_t n, bool at_start, const PieceSink & sink) const override {
        run(0, p, n, at_start, sink);
    }
    bool ends_with_byte_level() const override { return !v_.empty() && v_.back()->ends_with_byte_level(); }
    void skip_final_byte_mapping() override {
        if (!v_.empty()) v_.back()->skip_final_byte_mapping();
    }

private:
    std::vector<std::unique_ptr<PreTokenizer>> v_;
    // Stage i streams each of its pieces into stage i + 1.
    void run(size_t i, const char * p, size_t n, bool at_start, const PieceSink & sink) const {
        if (i == v_.size()) {
            if (n) sink(p, n, at_start);
            return;
        }
        v_[i]->for_each(p, n, at_start, [&](const char * q, size_t m, bool st) { run(i + 1, q, m, st, sink); });
    }
};

class BertPre final : public PreTokenizer {
public:
    void for_each(const char * p, size_t n, bool at_start, const PieceSink & sink) const override {
        ws_.for_each(p, n, at_start, [&](const char * q, size_t m, bool st) { punct_.for_each(q, m, st, sink); });
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

void PreTokenizer::apply(std::vector<Piece> & pieces) const {
    std::vector<Piece> out;
    for (const Piece & p : pieces)
        for_each(p.text.data(), p.text.size(), p.at_start,
                 [&](const char * q, size_t n, bool st) { out.push_back({std::string(q, n), st}); });
    pieces.swap(out);
}
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
            auto v = sequence_stages<PreTokenizer>(j, "pretokenizers", w, pre_tokenizer_from_json);
            return std::make_unique<Sequence>(std::move(v));
        }
    } catch (const Error & e) {
        rethrow_at(w, e);
    }
    fail_at(w.at("type"), "unknown pre_tokenizer type \"" + type + "\"");
}

}  // namespace tok
}  // namespace exl2
