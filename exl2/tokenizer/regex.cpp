#include "regex.h"
#include "unicode.h"

#include "exl2/error.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace exl2 {

namespace {

constexpr uint32_t kInf = UINT32_MAX;

// Patterns in error messages: long ones are cut (a message is one line).
std::string shorten(const std::string & p) { return p.size() <= 80 ? p : p.substr(0, 77) + "..."; }

// One set of code points. ASCII is a precomputed bitmap; other code points are tested against
// the items (categories, White_Space, word, ranges), then the class negation is applied.
struct CharClass {
    uint64_t ascii[2] = {0, 0};
    uint32_t cat_pos = 0;      // categories that are members
    uint32_t cat_neg = 0;      // members: code points whose category is NOT in this mask (\P{..})
    bool has_cat_neg = false;
    bool ws = false, not_ws = false, word = false, not_word = false;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // non-ASCII parts of explicit ranges
    std::vector<CharClass> subs;                        // nested classes (union)
    bool negated = false;

    bool test_items(uint32_t cp) const {
        if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1u;
        uint8_t p = uni::props(cp);
        uint32_t cat = cp < 0x110000 ? (p & 0x1Fu) : (uint32_t)uni::Cn;
        if ((cat_pos >> cat) & 1u) return true;
        if (has_cat_neg && !((cat_neg >> cat) & 1u)) return true;
        bool is_ws = cp < 0x110000 && (p & 0x20);
        if (ws && is_ws) return true;
        if (not_ws && !is_ws) return true;
        if (word || not_word) {
            bool w = uni::is_word(cp);
            if ((word && w) || (not_word && !w)) return true;
        }
        for (const auto & r : ranges)
            if (cp >= r.first && cp <= r.second) return true;
        for (const auto & s : subs)
            if (s.matches(cp)) return true;
        return false;
    }
    bool matches(uint32_t cp) const { return test_items(cp) != negated; }
};

enum Op : uint8_t { CLASS, REPEAT, SPLIT, JMP, LOOK, BOL, EOL, BOT, EOT, EOTNL, WORDB, NWORDB, MATCH };

struct Inst {
    Op op;
    bool flag = false;   // REPEAT: greedy; LOOK: negative
    int32_t a = 0, b = 0;  // CLASS/REPEAT: class; SPLIT: preferred, other; JMP: target; LOOK: program
    uint32_t min = 0, max = 0;
    // SPLIT: ASCII characters that can start branch a. When the next character is ASCII and not
    // in the set (or the text has ended), branch a cannot match and is skipped without a frame.
    bool guarded = false;
    uint64_t guard[2] = {0, 0};
};

// ---- AST ------------------------------------------------------------------------------------

struct Node {
    enum Kind { Empty, Class, Cat, Alt, Rep, Look, Assert } kind = Empty;
    int cls = -1;
    std::vector<std::unique_ptr<Node>> kids;
    uint32_t min = 0, max = 0;
    bool greedy = true, neg = false;
    Op assert_op = BOL;
};
using NodeP = std::unique_ptr<Node>;

bool nullable(const Node & n) {
    switch (n.kind) {
    case Node::Empty: case Node::Look: case Node::Assert: return true;
    case Node::Class: return false;
    case Node::Cat:
        for (auto & k : n.kids) if (!nullable(*k)) return false;
        return true;
    case Node::Alt:
        for (auto & k : n.kids) if (nullable(*k)) return true;
        return false;
    case Node::Rep: return n.min == 0 || nullable(*n.kids[0]);
    }
    return true;
}

class Parser {
public:
    Parser(const std::string & pat, std::vector<CharClass> & classes)
        : pat_(pat), cps_(uni::utf8_decode(pat)), classes_(classes) {}

    NodeP parse() {
        NodeP n = parse_alt();
        if (i_ < cps_.size()) err("unbalanced ')'");
        return n;
    }

private:
    const std::string & pat_;
    std::vector<uint32_t> cps_;
    std::vector<CharClass> & classes_;
    size_t i_ = 0;
    int depth_ = 0;  // group nesting; bounded so that a hostile pattern cannot exhaust the stack
    bool icase_ = false;

    [[noreturn]] void err(const char * what) const {
        fail("regex \"%s\": %s at character %zu", shorten(pat_).c_str(), what, i_);
    }
    bool eof() const { return i_ >= cps_.size(); }
    uint32_t peek(size_t k = 0) const { return i_ + k < cps_.size() ? cps_[i_ + k] : 0; }

    int add_class(CharClass c) {
        classes_.push_back(std::move(c));
        return (int)classes_.size() - 1;
    }
    NodeP class_node(CharClass c) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Class;
        n->cls = add_class(std::move(c));
        return n;
    }

    static void set_ascii(CharClass & c, uint32_t cp) { c.ascii[cp >> 6] |= 1ull << (cp & 63); }
    static void add_range(CharClass & c, uint32_t lo, uint32_t hi) {
        for (uint32_t cp = lo; cp <= hi && cp < 128; cp++) set_ascii(c, cp);
        if (hi >= 128) c.ranges.push_back({std::max<uint32_t>(lo, 128), hi});
    }
    void add_char(CharClass & c, uint32_t cp) const {
        if (icase_)
            for (uint32_t e : uni::fold_equivalents(cp)) add_range(c, e, e);
        else
            add_range(c, cp, cp);
    }
    void add_range_icase(CharClass & c, uint32_t lo, uint32_t hi) const {
        add_range(c, lo, hi);
        if (icase_ && hi - lo < 2048)
            for (uint32_t cp = lo; cp <= hi; cp++)
                for (uint32_t e : uni::fold_equivalents(cp)) add_range(c, e, e);
    }
    // ASCII bits of a category / property item, computed from the tables.
    template <class F> static void ascii_from(CharClass & c, F f) {
        for (uint32_t cp = 0; cp < 128; cp++)
            if (f(cp)) set_ascii(c, cp);
    }

    uint32_t parse_hex(size_t max_digits, bool braced) {
        uint32_t v = 0;
        size_t nd = 0;
        while (!eof() && nd < max_digits) {
            uint32_t ch = peek();
            int d = (ch >= '0' && ch <= '9') ? (int)(ch - '0')
                  : (ch >= 'a' && ch <= 'f') ? (int)(ch - 'a' + 10)
                  : (ch >= 'A' && ch <= 'F') ? (int)(ch - 'A' + 10) : -1;
            if (d < 0) break;
            v = v * 16 + (uint32_t)d;
            i_++;
            nd++;
        }
        if (nd == 0) err("bad hex escape");
        if (braced) {
            if (peek() != '}') err("missing '}' in \\x{...}");
            i_++;
        }
        if (v >= 0x110000) err("code point out of range");
        return v;
    }

    uint32_t category_mask(const std::string & name) {
        static const char * const short_names[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me",
            "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs",
            "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
        std::string n;
        for (char ch : name)
            if (ch != '_' && ch != ' ' && ch != '-') n += (char)std::tolower((unsigned char)ch);
        for (int k = 0; k < (int)uni::kCatCount; k++) {
            std::string s = short_names[k];
            s[0] = (char)std::tolower((unsigned char)s[0]);
            s[1] = (char)std::tolower((unsigned char)s[1]);
            if (n == s) return 1u << k;
        }
        struct Named { const char * name; uint32_t mask; };
        static const Named named[] = {
            {"l", uni::kMaskL}, {"letter", uni::kMaskL}, {"m", uni::kMaskM}, {"mark", uni::kMaskM},
            {"combiningmark", uni::kMaskM},
            {"n", uni::kMaskN}, {"number", uni::kMaskN}, {"p", uni::kMaskP}, {"punctuation", uni::kMaskP},
            {"punct", uni::kMaskP},
            {"s", uni::kMaskS}, {"symbol", uni::kMaskS}, {"z", uni::kMaskZ}, {"separator", uni::kMaskZ},
            {"c", uni::kMaskC}, {"other", uni::kMaskC},
            {"l&", (1u << uni::Lu) | (1u << uni::Ll) | (1u << uni::Lt)},
            {"lc", (1u << uni::Lu) | (1u << uni::Ll) | (1u << uni::Lt)},
            {"casedletter", (1u << uni::Lu) | (1u << uni::Ll) | (1u << uni::Lt)},
            {"uppercaseletter", 1u << uni::Lu}, {"lowercaseletter", 1u << uni::Ll},
            {"titlecaseletter", 1u << uni::Lt}, {"modifierletter", 1u << uni::Lm},
            {"otherletter", 1u << uni::Lo}, {"nonspacingmark", 1u << uni::Mn},
            {"spacingmark", 1u << uni::Mc}, {"enclosingmark", 1u << uni::Me},
            {"decimalnumber", 1u << uni::Nd}, {"digit", 1u << uni::Nd}, {"letternumber", 1u << uni::Nl},
            {"othernumber", 1u << uni::No}, {"connectorpunctuation", 1u << uni::Pc},
            {"dashpunctuation", 1u << uni::Pd}, {"openpunctuation", 1u << uni::Ps},
            {"closepunctuation", 1u << uni::Pe}, {"initialpunctuation", 1u << uni::Pi},
            {"finalpunctuation", 1u << uni::Pf}, {"otherpunctuation", 1u << uni::Po},
            {"mathsymbol", 1u << uni::Sm}, {"currencysymbol", 1u << uni::Sc},
            {"modifiersymbol", 1u << uni::Sk}, {"othersymbol", 1u << uni::So},
            {"spaceseparator", 1u << uni::Zs}, {"lineseparator", 1u << uni::Zl},
            {"paragraphseparator", 1u << uni::Zp}, {"control", 1u << uni::Cc}, {"cntrl", 1u << uni::Cc},
            {"format", 1u << uni::Cf}, {"unassigned", 1u << uni::Cn}, {"privateuse", 1u << uni::Co},
            {"surrogate", 1u << uni::Cs},
        };
        for (const auto & e : named)
            if (n == e.name) return e.mask;
        fail("regex \"%s\": unsupported property \\p{%s}", shorten(pat_).c_str(), name.c_str());
    }

    // After '\p' or '\P': reads {Name}, {^Name} or a one-letter name.
    void parse_property(CharClass & c, bool negate) {
        std::string name;
        if (peek() == '{') {
            i_++;
            if (peek() == '^') {
                negate = !negate;
                i_++;
            }
            while (!eof() && peek() != '}') uni::utf8_put(name, cps_[i_++]);
            if (eof()) err("missing '}' in \\p{...}");
            i_++;
        } else {
            if (eof()) err("bad \\p");
            uni::utf8_put(name, cps_[i_++]);
        }
        uint32_t mask = category_mask(name);
        if (!negate) {
            c.cat_pos |= mask;
            ascii_from(c, [&](uint32_t cp) { return (mask >> uni::category(cp)) & 1u; });
        } else {
            c.cat_neg |= mask;  // multiple \P items: each is a separate union member
            if (c.has_cat_neg) err("more than one \\P{..} in one class");
            c.has_cat_neg = true;
            ascii_from(c, [&](uint32_t cp) { return !((mask >> uni::category(cp)) & 1u); });
        }
    }

    // Class escapes shared by [..] and top level. Returns false if `e` is not one.
    bool class_escape(uint32_t e, CharClass & c) {
        switch (e) {
        case 'd': c.cat_pos |= 1u << uni::Nd; ascii_from(c, [](uint32_t cp) { return cp >= '0' && cp <= '9'; }); return true;
        case 'D': c.cat_neg |= 1u << uni::Nd; if (c.has_cat_neg) err("\\D with \\P in one class");
                  c.has_cat_neg = true; ascii_from(c, [](uint32_t cp) { return !(cp >= '0' && cp <= '9'); }); return true;
        case 's': c.ws = true; ascii_from(c, [](uint32_t cp) { return uni::is_white_space(cp); }); return true;
        case 'S': c.not_ws = true; ascii_from(c, [](uint32_t cp) { return !uni::is_white_space(cp); }); return true;
        case 'w': c.word = true; ascii_from(c, [](uint32_t cp) { return uni::is_word(cp); }); return true;
        case 'W': c.not_word = true; ascii_from(c, [](uint32_t cp) { return !uni::is_word(cp); }); return true;
        case 'h': add_range(c, '0', '9'); add_range(c, 'a', 'f'); add_range(c, 'A', 'F'); return true;
        case 'p': parse_property(c, false); return true;
        case 'P': parse_property(c, true); return true;
        default: return false;
        }
    }

    // A single-character escape (after '\'); returns the code point.
    uint32_t char_escape(uint32_t e) {
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'f': return '\f';
        case 'v': return '\v';
        case 'a': return 7;
        case 'e': return 27;
        case '0': return 0;
        case 'x':
            if (peek() == '{') {
                i_++;
                return parse_hex(8, true);
            }
            return parse_hex(2, false);
        case 'u': return parse_hex(4, false);
        default:
            if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9'))
                fail("regex \"%s\": unsupported escape \\%c", shorten(pat_).c_str(), (char)e);
            return e;  // escaped punctuation stands for itself
        }
    }

    CharClass parse_class() {  // after '['
        CharClass c;
        if (peek() == '^') {
            c.negated = true;
            i_++;
        }
        bool first = true;
        while (true) {
            if (eof()) err("missing ']'");
            uint32_t ch = cps_[i_];
            if (ch == ']' && !first) {
                i_++;
                break;
            }
            first = false;
            if (ch == '[') {
                if (peek(1) == ':') err("POSIX bracket classes are not supported");
                i_++;
                if (++depth_ > 100) err("classes nested too deeply");
                c.subs.push_back(parse_class());
                depth_--;
                for (uint32_t cp = 0; cp < 128; cp++)
                    if (c.subs.back().matches(cp)) set_ascii(c, cp);
                continue;
            }
            if (ch == '&' && peek(1) == '&') err("class intersection is not supported");
            uint32_t lo;
            i_++;
            if (ch == '\\') {
                if (eof()) err("trailing '\\'");
                uint32_t e = cps_[i_++];
                if (class_escape(e, c)) continue;
                lo = char_escape(e);
            } else {
                lo = ch;
            }
            if (peek() == '-' && peek(1) != ']' && i_ + 1 < cps_.size()) {
                i_++;
                uint32_t hi = cps_[i_++];
                if (hi == '\\') {
                    if (eof()) err("trailing '\\'");
                    hi = char_escape(cps_[i_++]);
                }
                if (hi < lo) err("bad class range");
                add_range_icase(c, lo, hi);
            } else {
                add_char(c, lo);
            }
        }
        return c;
    }

    NodeP parse_alt() {
        std::vector<NodeP> alts;
        alts.push_back(parse_concat());
        while (peek() == '|' && !eof()) {
            i_++;
            alts.push_back(parse_concat());
        }
        if (alts.size() == 1) return std::move(alts[0]);
        auto n = std::make_unique<Node>();
        n->kind = Node::Alt;
        n->kids = std::move(alts);
        return n;
    }

    NodeP parse_concat() {
        auto n = std::make_unique<Node>();
        n->kind = Node::Cat;
        while (!eof() && peek() != '|' && peek() != ')') {
            NodeP a = parse_atom();
            if (!a) continue;  // inline flag group
            a = parse_quant(std::move(a));
            n->kids.push_back(std::move(a));
        }
        // (?i) lasts to the end of the enclosing group (restored by parse_atom at its ')'),
        // alternatives after '|' included.
        return n;
    }

    NodeP parse_quant(NodeP a) {
        while (!eof()) {
            uint32_t ch = peek();
            uint32_t mn, mx;
            if (ch == '?') { mn = 0; mx = 1; i_++; }
            else if (ch == '*') { mn = 0; mx = kInf; i_++; }
            else if (ch == '+') { mn = 1; mx = kInf; i_++; }
            else if (ch == '{') {
                size_t save = i_;
                i_++;
                auto num = [&](uint32_t & v) {
                    size_t nd = 0;
                    v = 0;
                    while (!eof() && peek() >= '0' && peek() <= '9') {
                        v = v * 10 + (peek() - '0');
                        if (v > 100000) err("repeat count too large");
                        i_++;
                        nd++;
                    }
                    return nd > 0;
                };
                bool ok = num(mn);
                mx = mn;
                if (ok && peek() == ',') {
                    i_++;
                    if (!num(mx)) mx = kInf;
                }
                if (!ok || peek() != '}') {  // not a quantifier: '{' is a literal (Oniguruma)
                    i_ = save;
                    return a;
                }
                i_++;
                if (mx < mn) err("bad repeat range");
            } else {
                return a;
            }
            bool greedy = true;
            if (peek() == '?') {
                greedy = false;
                i_++;
            } else if (peek() == '+' && ch != '{') {
                err("possessive quantifiers are not supported");
            }
            if (a->kind == Node::Look || a->kind == Node::Assert) err("quantified assertion");
            if (mx == kInf && nullable(*a)) err("unbounded repeat of an expression that can be empty");
            auto r = std::make_unique<Node>();
            r->kind = Node::Rep;
            r->min = mn;
            r->max = mx;
            r->greedy = greedy;
            r->kids.push_back(std::move(a));
            a = std::move(r);
        }
        return a;
    }

    NodeP assert_node(Op op) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Assert;
        n->assert_op = op;
        return n;
    }

    NodeP parse_atom() {
        uint32_t ch = cps_[i_++];
        switch (ch) {
        case '(': {
            if (++depth_ > 100) err("groups nested too deeply");
            bool saved = icase_;
            NodeP inner;
            if (peek() == '?') {
                i_++;
                uint32_t k = peek();
                if (k == ':') {
                    i_++;
                    inner = parse_alt();
                } else if (k == '=' || k == '!') {
                    i_++;
                    auto n = std::make_unique<Node>();
                    n->kind = Node::Look;
                    n->neg = k == '!';
                    n->kids.push_back(parse_alt());
                    inner = std::move(n);
                } else if (k == '<' && (peek(1) == '=' || peek(1) == '!')) {
                    err("lookbehind is not supported");
                } else if (k == '>') {
                    err("atomic groups are not supported");
                } else {
                    // flags: (?i) (?-i) (?i:...) (?i-m:...)
                    bool on = true, flag_i = icase_;
                    while (!eof() && peek() != ')' && peek() != ':') {
                        uint32_t f = cps_[i_++];
                        if (f == '-') on = false;
                        else if (f == 'i') flag_i = on;
                        else if (f == 'm' || f == 's' || f == 'x' || f == 'u') {
                            if (on && f != 'u') err("unsupported inline flag");
                        } else err("bad group");
                    }
                    if (eof()) err("missing ')'");
                    if (peek() == ')') {  // flags for the rest of the enclosing group
                        i_++;
                        icase_ = flag_i;
                        depth_--;
                        return nullptr;
                    }
                    i_++;  // ':'
                    icase_ = flag_i;
                    inner = parse_alt();
                }
            } else {
                inner = parse_alt();
            }
            if (peek() != ')' || eof()) err("missing ')'");
            i_++;
            icase_ = saved;
            depth_--;
            return inner;
        }
        case ')': err("unbalanced ')'");
        case '[': return class_node(parse_class());
        case '.': {
            CharClass c;
            add_range(c, '\n', '\n');
            c.negated = true;
            return class_node(std::move(c));
        }
        case '^': return assert_node(BOL);
        case '$': return assert_node(EOL);
        case '\\': {
            if (eof()) err("trailing '\\'");
            uint32_t e = cps_[i_++];
            if (e == 'A') return assert_node(BOT);
            if (e == 'z') return assert_node(EOT);
            if (e == 'Z') return assert_node(EOTNL);
            if (e == 'b') return assert_node(WORDB);
            if (e == 'B') return assert_node(NWORDB);
            CharClass c;
            if (class_escape(e, c)) return class_node(std::move(c));
            add_char(c, char_escape(e));
            return class_node(std::move(c));
        }
        default: {
            if (ch == '*' || ch == '+' || ch == '?') err("nothing to repeat");
            CharClass c;
            add_char(c, ch);
            return class_node(std::move(c));
        }
        }
    }
};

// ---- compiler -------------------------------------------------------------------------------

struct Program {
    std::vector<Inst> code;
};

constexpr size_t kMaxProgram = 1 << 16;

class Compiler {
public:
    explicit Compiler(std::vector<Program> & progs) : progs_(progs) {}

    int compile(const Node & root) {
        int id = (int)progs_.size();
        progs_.emplace_back();
        std::vector<Inst> code;
        emit(root, code);
        Inst m;
        m.op = MATCH;
        code.push_back(m);
        progs_[(size_t)id].code = std::move(code);
        return id;
    }

private:
    std::vector<Program> & progs_;

    static size_t add(std::vector<Inst> & code, Op op, int a = 0, int b = 0) {
        if (code.size() >= kMaxProgram) fail("pattern too large (over %zu instructions)", kMaxProgram);
        Inst in;
        in.op = op;
        in.a = a;
        in.b = b;
        code.push_back(in);
        return code.size() - 1;
    }

    void emit(const Node & n, std::vector<Inst> & code) {
        switch (n.kind) {
        case Node::Empty: break;
        case Node::Class: add(code, CLASS, n.cls); break;
        case Node::Assert: add(code, n.assert_op); break;
        case Node::Cat:
            for (auto & k : n.kids) emit(*k, code);
            break;
        case Node::Alt: {
            std::vector<size_t> jumps;
            for (size_t k = 0; k < n.kids.size(); k++) {
                if (k + 1 < n.kids.size()) {
                    size_t split = add(code, SPLIT);
                    code[split].a = (int)code.size();
                    emit(*n.kids[k], code);
                    jumps.push_back(add(code, JMP));
                    code[split].b = (int)code.size();
                } else {
                    emit(*n.kids[k], code);
                }
            }
            for (size_t j : jumps) code[j].a = (int)code.size();
            break;
        }
        case Node::Look: {
            Compiler sub(progs_);
            int prog = sub.compile(*n.kids[0]);
            size_t at = add(code, LOOK, prog);
            code[at].flag = n.neg;
            break;
        }
        case Node::Rep: {
            const Node & body = *n.kids[0];
            if (body.kind == Node::Class) {
                size_t at = add(code, REPEAT, body.cls);
                code[at].min = n.min;
                code[at].max = n.max;
                code[at].flag = n.greedy;
                break;
            }
            for (uint32_t k = 0; k < n.min; k++) emit(body, code);
            if (n.max == kInf) {
                size_t loop = add(code, SPLIT);
                code[loop].a = (int)code.size();
                emit(body, code);
                add(code, JMP, (int)loop);
                code[loop].b = (int)code.size();
                if (!n.greedy) std::swap(code[loop].a, code[loop].b);
            } else {
                std::vector<size_t> splits;
                for (uint32_t k = n.min; k < n.max; k++) {
                    size_t s = add(code, SPLIT);
                    splits.push_back(s);
                    code[s].a = (int)code.size();
                    emit(body, code);
                }
                for (size_t s : splits) {
                    code[s].b = (int)code.size();
                    if (!n.greedy) std::swap(code[s].a, code[s].b);
                }
            }
            break;
        }
        }
    }
};

}  // namespace

struct Regex::Impl {
    std::vector<CharClass> classes;
    std::vector<Program> progs;
    int main = 0;
    // Code points that can start a match (ASCII bitmap + "any non-ASCII"), or all when nullable.
    uint64_t first_ascii[2] = {~0ull, ~0ull};
    bool first_non_ascii = true;

    struct Frame {
        int32_t pc;
        uint32_t pos;
        uint32_t lo;    // REPEAT greedy: smallest end still to try; lazy: unused
        uint32_t left;  // REPEAT lazy: how many more may be taken
        int32_t cls;    // REPEAT lazy: class, -1 for plain frames / greedy
    };

    bool run(int prog, const uint32_t * t, size_t n, size_t pos, size_t & end,
             std::vector<Frame> & st) const {
        const Inst * code = progs[(size_t)prog].code.data();
        const size_t base = st.size();
        int32_t pc = 0;
        size_t p = pos;
        while (true) {
            const Inst & in = code[pc];
            bool ok = true;
            switch (in.op) {
            case CLASS:
                if (p < n && classes[(size_t)in.a].matches(t[p])) {
                    p++;
                    pc++;
                } else ok = false;
                break;
            case REPEAT: {
                const CharClass & c = classes[(size_t)in.a];
                if (in.flag) {
                    size_t k = 0;
                    while (k < in.max && p + k < n && c.matches(t[p + k])) k++;
                    if (k < in.min) {
                        ok = false;
                        break;
                    }
                    if (k > in.min)
                        st.push_back({pc + 1, (uint32_t)(p + k - 1), (uint32_t)(p + in.min), 0, -1});
                    p += k;
                    pc++;
                } else {
                    size_t k = 0;
                    while (k < in.min && p + k < n && c.matches(t[p + k])) k++;
                    if (k < in.min) {
                        ok = false;
                        break;
                    }
                    p += k;
                    if (in.max > in.min)
                        st.push_back({pc + 1, (uint32_t)p, 0,
                                      in.max == kInf ? kInf : in.max - in.min, in.a});
                    pc++;
                }
                break;
            }
            case SPLIT:
                if (in.guarded && (p >= n || (t[p] < 128 && !((in.guard[t[p] >> 6] >> (t[p] & 63)) & 1u)))) {
                    pc = in.b;
                    break;
                }
                st.push_back({in.b, (uint32_t)p, 0, 0, -2});
                pc = in.a;
                break;
            case JMP: pc = in.a; break;
            case LOOK: {
                size_t e;
                bool m = run(in.a, t, n, p, e, st);
                if (m != in.flag) pc++;
                else ok = false;
                break;
            }
            case BOL: if (p == 0 || t[p - 1] == '\n') pc++; else ok = false; break;
            case EOL: if (p == n || t[p] == '\n') pc++; else ok = false; break;
            case BOT: if (p == 0) pc++; else ok = false; break;
            case EOT: if (p == n) pc++; else ok = false; break;
            case EOTNL: if (p == n || (p + 1 == n && t[p] == '\n')) pc++; else ok = false; break;
            case WORDB: case NWORDB: {
                bool a = p > 0 && uni::is_word(t[p - 1]);
                bool b = p < n && uni::is_word(t[p]);
                if ((a != b) == (in.op == WORDB)) pc++;
                else ok = false;
                break;
            }
            case MATCH:
                end = p;
                st.resize(base);
                return true;
            }
            if (ok) continue;
            // backtrack
            while (true) {
                if (st.size() == base) return false;
                Frame & f = st.back();
                if (f.cls == -2) {  // SPLIT alternative
                    pc = f.pc;
                    p = f.pos;
                    st.pop_back();
                    break;
                }
                if (f.cls == -1) {  // greedy REPEAT: give back one more
                    pc = f.pc;
                    p = f.pos;
                    if (f.pos > f.lo) f.pos--;
                    else st.pop_back();
                    break;
                }
                // lazy REPEAT: take one more
                if (f.left > 0 && f.pos < n && classes[(size_t)f.cls].matches(t[f.pos])) {
                    f.pos++;
                    if (f.left != kInf) f.left--;
                    pc = f.pc;
                    p = f.pos;
                    if (f.left == 0) st.pop_back();
                    break;
                }
                st.pop_back();
            }
        }
    }

    // ASCII characters that can start a match from `start` in program `prog` (followed through
    // SPLIT, JMP and, with follow_optional, repeats that may match nothing). False when the path
    // can match without consuming a character or meets an assertion (or, without follow_optional,
    // an optional repeat): then no guard is possible. *any_class: some class was met.
    bool first_set(const std::vector<Inst> & code, int start, bool follow_optional, uint64_t out[2],
                   bool * any_class = nullptr) const {
        std::vector<int> todo{start};
        std::vector<bool> seen(code.size(), false);
        while (!todo.empty()) {
            int pc = todo.back();
            todo.pop_back();
            if (seen[(size_t)pc]) continue;
            seen[(size_t)pc] = true;
            const Inst & in = code[(size_t)pc];
            if (in.op == SPLIT) {
                todo.push_back(in.a);
                todo.push_back(in.b);
            } else if (in.op == JMP) {
                todo.push_back(in.a);
            } else if (in.op == CLASS || (in.op == REPEAT && (follow_optional || in.min > 0))) {
                const CharClass & c = classes[(size_t)in.a];
                for (uint32_t cp = 0; cp < 128; cp++)
                    if (c.matches(cp)) out[cp >> 6] |= 1ull << (cp & 63);
                if (any_class) *any_class = true;
                if (in.op == REPEAT && in.min == 0) todo.push_back(pc + 1);
            } else {
                return false;
            }
        }
        return true;
    }

    void compute_guards() {
        for (auto & prog : progs)
            for (auto & in : prog.code)
                if (in.op == SPLIT) {
                    uint64_t g[2] = {0, 0};
                    in.guarded = first_set(prog.code, in.a, true, g);
                    in.guard[0] = g[0];
                    in.guard[1] = g[1];
                }
    }

    void compute_first() {
        // Conservative: follow the program from pc 0 through SPLIT/JMP; any class at the head
        // contributes; anything else (assertions, nullable) means "could start anywhere".
        uint64_t fa[2] = {0, 0};
        bool fna = false;
        if (!first_set(progs[(size_t)main].code, 0, false, fa, &fna)) return;   // keep "anything"
        first_ascii[0] = fa[0];
        first_ascii[1] = fa[1];
        first_non_ascii = fna;
    }
};

Regex::Regex(const std::string & pattern) : pattern_(pattern), impl_(std::make_unique<Impl>()) {
    Parser parser(pattern, impl_->classes);
    NodeP root = parser.parse();
    Compiler comp(impl_->progs);
    try {
        impl_->main = comp.compile(*root);
    } catch (const Error & e) {
        fail("regex \"%s\": %s", shorten(pattern).c_str(), e.what());
    }
    impl_->compute_first();
    impl_->compute_guards();
}

Regex::~Regex() = default;
Regex::Regex(Regex &&) noexcept = default;
Regex & Regex::operator=(Regex &&) noexcept = default;

long Regex::match_at(const uint32_t * text, size_t n, size_t pos) const {
    thread_local std::vector<Impl::Frame> st;
    size_t end;
    st.clear();
    return impl_->run(impl_->main, text, n, pos, end, st) ? (long)end : -1;
}

void Regex::find_all(const uint32_t * text, size_t n,
                     std::vector<std::pair<uint32_t, uint32_t>> & out) const {
    find_each(text, n, [&](uint32_t a, uint32_t b) { out.push_back({a, b}); });
}

void Regex::find_each(const uint32_t * text, size_t n, const std::function<void(uint32_t, uint32_t)> & cb) const {
    thread_local std::vector<Impl::Frame> st;
    st.clear();
    const Impl & im = *impl_;
    size_t pos = 0;
    while (pos <= n) {
        bool found = false;
        for (size_t s = pos; s <= n; s++) {
            if (s < n) {
                uint32_t c = text[s];
                bool can = c < 128 ? ((im.first_ascii[c >> 6] >> (c & 63)) & 1u) : im.first_non_ascii;
                if (!can) continue;
            } else if (!(im.first_ascii[0] == ~0ull && im.first_ascii[1] == ~0ull && im.first_non_ascii)) {
                continue;  // a pattern that needs a character cannot match at the end
            }
            size_t end;
            if (im.run(im.main, text, n, s, end, st)) {
                cb((uint32_t)s, (uint32_t)end);
                pos = end > s ? end : end + 1;
                found = true;
                break;
            }
        }
        if (!found) break;
    }
}

}  // namespace exl2
