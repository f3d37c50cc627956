#include "json.h"
#include "error.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace exl2 {

std::string strfmt(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(nullptr, 0, fmt, ap);
    va_end(ap);
    std::string s(n > 0 ? (size_t)n : 0, '\0');
    if (n > 0) vsnprintf(&s[0], (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return s;
}

void fail(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(nullptr, 0, fmt, ap);
    va_end(ap);
    std::string s(n > 0 ? (size_t)n : 0, '\0');
    if (n > 0) vsnprintf(&s[0], (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    throw Error(s);
}

void utf8_append(std::string & out, uint32_t cp) {
    if (cp < 0x80) {
        out += (char)cp;
    } else if (cp < 0x800) {
        out += (char)(0xC0 | (cp >> 6));
        out += (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += (char)(0xE0 | (cp >> 12));
        out += (char)(0x80 | ((cp >> 6) & 0x3F));
        out += (char)(0x80 | (cp & 0x3F));
    } else {
        out += (char)(0xF0 | (cp >> 18));
        out += (char)(0x80 | ((cp >> 12) & 0x3F));
        out += (char)(0x80 | ((cp >> 6) & 0x3F));
        out += (char)(0x80 | (cp & 0x3F));
    }
}

// ---------------------------------------------------------------------------------------------
class JsonParser {
public:
    JsonParser(const char * p, size_t n, const std::string & what) : s_(p), n_(n), what_(what) {}

    Json parse_document() {
        skip_ws();
        Json v = parse_value(0);
        skip_ws();
        if (i_ != n_) error("unexpected trailing data");
        return v;
    }

private:
    const char * s_;
    size_t n_;
    size_t i_ = 0;
    const std::string & what_;

    [[noreturn]] void error(const char * msg) {
        size_t line = 1;
        for (size_t k = 0; k < i_ && k < n_; k++) if (s_[k] == '\n') line++;
        fail("%s: invalid JSON at byte %zu (line %zu): %s", what_.c_str(), i_, line, msg);
    }
    void skip_ws() {
        while (i_ < n_ && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) i_++;
    }
    bool consume(const char * lit) {
        size_t l = strlen(lit);
        if (n_ - i_ >= l && memcmp(s_ + i_, lit, l) == 0) { i_ += l; return true; }
        return false;
    }

    Json parse_value(int depth) {
        if (depth > 512) error("nesting too deep");
        if (i_ >= n_) error("unexpected end of input");
        char c = s_[i_];
        Json v;
        if (c == '{') {
            v.type_ = Json::Type::Object;
            i_++;
            skip_ws();
            if (i_ < n_ && s_[i_] == '}') { i_++; return v; }
            for (;;) {
                skip_ws();
                if (i_ >= n_ || s_[i_] != '"') error("expected a string key");
                std::string key = parse_string();
                skip_ws();
                if (i_ >= n_ || s_[i_] != ':') error("expected ':'");
                i_++;
                skip_ws();
                v.obj_.emplace_back(std::move(key), parse_value(depth + 1));
                skip_ws();
                if (i_ < n_ && s_[i_] == ',') { i_++; continue; }
                if (i_ < n_ && s_[i_] == '}') { i_++; break; }
                error("expected ',' or '}'");
            }
            v.build_index();
            return v;
        }
        if (c == '[') {
            v.type_ = Json::Type::Array;
            i_++;
            skip_ws();
            if (i_ < n_ && s_[i_] == ']') { i_++; return v; }
            for (;;) {
                skip_ws();
                v.arr_.push_back(parse_value(depth + 1));
                skip_ws();
                if (i_ < n_ && s_[i_] == ',') { i_++; continue; }
                if (i_ < n_ && s_[i_] == ']') { i_++; break; }
                error("expected ',' or ']'");
            }
            return v;
        }
        if (c == '"') {
            v.type_ = Json::Type::String;
            v.str_ = parse_string();
            return v;
        }
        if (consume("true")) { v.type_ = Json::Type::Bool; v.bool_ = true; return v; }
        if (consume("false")) { v.type_ = Json::Type::Bool; v.bool_ = false; return v; }
        if (consume("null")) return v;
        // Python's json writes these; accept them.
        if (consume("NaN")) { v.type_ = Json::Type::Number; v.num_ = NAN; return v; }
        if (consume("Infinity")) { v.type_ = Json::Type::Number; v.num_ = INFINITY; return v; }
        if (consume("-Infinity")) { v.type_ = Json::Type::Number; v.num_ = -INFINITY; return v; }
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
        error("unexpected character");
    }

    Json parse_number() {
        size_t start = i_;
        bool is_int = true;
        if (s_[i_] == '-') i_++;
        if (i_ >= n_ || !(s_[i_] >= '0' && s_[i_] <= '9')) error("invalid number");
        while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') i_++;
        if (i_ < n_ && s_[i_] == '.') {
            is_int = false;
            i_++;
            if (i_ >= n_ || !(s_[i_] >= '0' && s_[i_] <= '9')) error("invalid number");
            while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') i_++;
        }
        if (i_ < n_ && (s_[i_] == 'e' || s_[i_] == 'E')) {
            is_int = false;
            i_++;
            if (i_ < n_ && (s_[i_] == '+' || s_[i_] == '-')) i_++;
            if (i_ >= n_ || !(s_[i_] >= '0' && s_[i_] <= '9')) error("invalid number");
            while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') i_++;
        }
        std::string tok(s_ + start, i_ - start);
        Json v;
        v.type_ = Json::Type::Number;
        v.num_ = strtod(tok.c_str(), nullptr);
        if (is_int) {
            errno = 0;
            long long ll = strtoll(tok.c_str(), nullptr, 10);
            if (errno == 0) { v.is_int_ = true; v.int_ = ll; }
        }
        return v;
    }

    uint32_t hex4() {
        if (n_ - i_ < 4) error("truncated \\u escape");
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            char c = s_[i_++];
            v <<= 4;
            if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
            else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
            else error("invalid \\u escape");
        }
        return v;
    }

    std::string parse_string() {
        i_++;  // opening quote
        std::string out;
        for (;;) {
            if (i_ >= n_) error("unterminated string");
            char c = s_[i_++];
            if (c == '"') break;
            if ((unsigned char)c < 0x20) error("control character in string");
            if (c != '\\') { out += c; continue; }
            if (i_ >= n_) error("unterminated escape");
            char e = s_[i_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    uint32_t cp = hex4();
                    if (cp >= 0xD800 && cp < 0xDC00) {
                        // high surrogate: combine with a following low surrogate, else U+FFFD
                        if (n_ - i_ >= 6 && s_[i_] == '\\' && s_[i_ + 1] == 'u') {
                            size_t save = i_;
                            i_ += 2;
                            uint32_t lo = hex4();
                            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            else { i_ = save; cp = 0xFFFD; }
                        } else {
                            cp = 0xFFFD;
                        }
                    } else if (cp >= 0xDC00 && cp < 0xE000) {
                        cp = 0xFFFD;
                    }
                    utf8_append(out, cp);
                    break;
                }
                default: error("invalid escape");
            }
        }
        return out;
    }
};

// ---------------------------------------------------------------------------------------------
static const Json & null_json() {
    static const Json n;
    return n;
}

const char * Json::type_name(Type t) {
    switch (t) {
        case Type::Null: return "null";
        case Type::Bool: return "bool";
        case Type::Number: return "number";
        case Type::String: return "string";
        case Type::Array: return "array";
        case Type::Object: return "object";
    }
    return "?";
}

bool Json::as_bool() const {
    if (type_ != Type::Bool) fail("expected bool, got %s", type_name(type_));
    return bool_;
}
double Json::as_number() const {
    if (type_ != Type::Number) fail("expected number, got %s", type_name(type_));
    return is_int_ ? (double)int_ : num_;
}
int64_t Json::as_int() const {
    if (type_ != Type::Number) fail("expected integer, got %s", type_name(type_));
    if (is_int_) return int_;
    if (std::floor(num_) != num_ || std::fabs(num_) > 9.007199254740992e15) fail("expected integer, got %g", num_);
    return (int64_t)num_;
}
const std::string & Json::as_string() const {
    if (type_ != Type::String) fail("expected string, got %s", type_name(type_));
    return str_;
}
const std::vector<Json> & Json::as_array() const {
    if (type_ != Type::Array) fail("expected array, got %s", type_name(type_));
    return arr_;
}
const std::vector<std::pair<std::string, Json>> & Json::as_object() const {
    if (type_ != Type::Object) fail("expected object, got %s", type_name(type_));
    return obj_;
}
size_t Json::size() const {
    if (type_ == Type::Array) return arr_.size();
    if (type_ == Type::Object) return obj_.size();
    return 0;
}
const Json & Json::operator[](size_t i) const {
    const auto & a = as_array();
    if (i >= a.size()) fail("array index %zu out of range (size %zu)", i, a.size());
    return a[i];
}
void Json::build_index() {
    if (obj_.size() <= 8) { index_.reset(); return; }
    index_ = std::make_shared<std::unordered_map<std::string, size_t>>();
    index_->reserve(obj_.size());
    for (size_t i = 0; i < obj_.size(); i++) (*index_)[obj_[i].first] = i;  // last duplicate wins
}
const Json * Json::find(const std::string & key) const {
    if (type_ != Type::Object) return nullptr;
    if (index_) {
        auto it = index_->find(key);
        return it == index_->end() ? nullptr : &obj_[it->second].second;
    }
    for (size_t i = obj_.size(); i-- > 0;)
        if (obj_[i].first == key) return &obj_[i].second;
    return nullptr;
}
const Json & Json::get(const std::string & key) const {
    const Json * v = find(key);
    return v ? *v : null_json();
}
int64_t Json::get_int(const std::string & key, int64_t def) const {
    const Json * v = find(key);
    if (!v || v->is_null()) return def;
    try { return v->as_int(); } catch (const Error & e) { fail("field \"%s\": %s", key.c_str(), e.what()); }
}
double Json::get_number(const std::string & key, double def) const {
    const Json * v = find(key);
    if (!v || v->is_null()) return def;
    try { return v->as_number(); } catch (const Error & e) { fail("field \"%s\": %s", key.c_str(), e.what()); }
}
bool Json::get_bool(const std::string & key, bool def) const {
    const Json * v = find(key);
    if (!v || v->is_null()) return def;
    try { return v->as_bool(); } catch (const Error & e) { fail("field \"%s\": %s", key.c_str(), e.what()); }
}
std::string Json::get_string(const std::string & key, const std::string & def) const {
    const Json * v = find(key);
    if (!v || v->is_null()) return def;
    try { return v->as_string(); } catch (const Error & e) { fail("field \"%s\": %s", key.c_str(), e.what()); }
}

Json Json::parse(const char * data, size_t size, const std::string & what) {
    JsonParser p(data, size, what);
    return p.parse_document();
}
Json Json::parse(const std::string & text, const std::string & what) { return parse(text.data(), text.size(), what); }
Json Json::parse_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("%s: cannot open file", path.c_str());
    std::stringstream ss;
    ss << f.rdbuf();
    if (f.bad()) fail("%s: read error", path.c_str());
    return parse(ss.str(), path);
}

Json Json::make_bool(bool b) { Json j; j.type_ = Type::Bool; j.bool_ = b; return j; }
Json Json::make_number(double d) { Json j; j.type_ = Type::Number; j.num_ = d; return j; }
Json Json::make_int(int64_t i) { Json j; j.type_ = Type::Number; j.is_int_ = true; j.int_ = i; j.num_ = (double)i; return j; }
Json Json::make_string(std::string s) { Json j; j.type_ = Type::String; j.str_ = std::move(s); return j; }
Json Json::make_array() { Json j; j.type_ = Type::Array; return j; }
Json Json::make_object() { Json j; j.type_ = Type::Object; return j; }
void Json::push_back(Json v) {
    if (type_ != Type::Array) fail("push_back on %s", type_name(type_));
    arr_.push_back(std::move(v));
}
void Json::set(const std::string & key, Json v) {
    if (type_ != Type::Object) fail("set on %s", type_name(type_));
    for (auto & kv : obj_)
        if (kv.first == key) { kv.second = std::move(v); return; }
    obj_.emplace_back(key, std::move(v));
    build_index();
}

static void dump_string(std::string & out, const std::string & s) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); out += b; }
                else out += (char)c;
        }
    }
    out += '"';
}

void Json::dump_to(std::string & out, int indent, int depth) const {
    auto nl = [&](int d) {
        if (indent < 0) return;
        out += '\n';
        out.append((size_t)(indent * d), ' ');
    };
    switch (type_) {
        case Type::Null: out += "null"; break;
        case Type::Bool: out += bool_ ? "true" : "false"; break;
        case Type::Number: {
            char b[40];
            if (is_int_) snprintf(b, sizeof b, "%lld", (long long)int_);
            else if (std::isnan(num_)) snprintf(b, sizeof b, "NaN");
            else if (std::isinf(num_)) snprintf(b, sizeof b, num_ > 0 ? "Infinity" : "-Infinity");
            else snprintf(b, sizeof b, "%.17g", num_);
            out += b;
            break;
        }
        case Type::String: dump_string(out, str_); break;
        case Type::Array:
            out += '[';
            for (size_t i = 0; i < arr_.size(); i++) {
                if (i) out += indent < 0 ? ", " : ",";
                nl(depth + 1);
                arr_[i].dump_to(out, indent, depth + 1);
            }
            if (!arr_.empty()) nl(depth);
            out += ']';
            break;
        case Type::Object:
            out += '{';
            for (size_t i = 0; i < obj_.size(); i++) {
                if (i) out += indent < 0 ? ", " : ",";
                nl(depth + 1);
                dump_string(out, obj_[i].first);
                out += ": ";
                obj_[i].second.dump_to(out, indent, depth + 1);
            }
            if (!obj_.empty()) nl(depth);
            out += '}';
            break;
    }
}
std::string Json::dump(int indent) const {
    std::string out;
    dump_to(out, indent, 0);
    return out;
}

}  // namespace exl2
