// A small JSON reader (RFC 8259) for config.json, tokenizer.json and safetensors headers.
// Objects keep their key order (tokenizer vocabularies are large; lookup uses a hash index).
// Parse errors throw exl2::Error with the byte offset, line and what was expected.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace exl2 {

class Json {
public:
    enum class Type { Null, Bool, Number, String, Array, Object };

    Json() = default;
    Type type() const { return type_; }
    bool is_null() const { return type_ == Type::Null; }
    bool is_bool() const { return type_ == Type::Bool; }
    bool is_number() const { return type_ == Type::Number; }
    bool is_string() const { return type_ == Type::String; }
    bool is_array() const { return type_ == Type::Array; }
    bool is_object() const { return type_ == Type::Object; }
    // True when the number was written without fraction/exponent and fits in int64.
    bool is_integer() const { return type_ == Type::Number && is_int_; }

    // Typed accessors throw exl2::Error("expected <type>, got <type>") on mismatch.
    bool               as_bool() const;
    double             as_number() const;
    int64_t            as_int() const;      // integer, or a number with an exact integer value
    const std::string & as_string() const;
    const std::vector<Json> & as_array() const;
    const std::vector<std::pair<std::string, Json>> & as_object() const;

    size_t size() const;                               // array or object length, else 0
    const Json & operator[](size_t i) const;           // array element (throws if out of range)
    // Object member or nullptr (also nullptr when this is not an object).
    const Json * find(const std::string & key) const;
    bool has(const std::string & key) const { return find(key) != nullptr; }
    // Object member or a shared null value.
    const Json & get(const std::string & key) const;

    // Convenience getters with defaults for optional config fields (throw on wrong type).
    int64_t     get_int(const std::string & key, int64_t def) const;
    double      get_number(const std::string & key, double def) const;
    bool        get_bool(const std::string & key, bool def) const;
    std::string get_string(const std::string & key, const std::string & def) const;

    static const char * type_name(Type t);

    // Parse a whole document. `what` names the source in error messages (usually a path).
    static Json parse(const std::string & text, const std::string & what = "json");
    static Json parse(const char * data, size_t size, const std::string & what = "json");
    static Json parse_file(const std::string & path);

    // Builders (used by writers and tests).
    static Json make_null() { return Json(); }
    static Json make_bool(bool b);
    static Json make_number(double d);
    static Json make_int(int64_t i);
    static Json make_string(std::string s);
    static Json make_array();
    static Json make_object();
    void push_back(Json v);                        // array
    void set(const std::string & key, Json v);     // object (replaces an existing key)

    // Serialise; indent < 0 gives one line.
    std::string dump(int indent = -1) const;

private:
    friend class JsonParser;
    Type type_ = Type::Null;
    bool bool_ = false;
    bool is_int_ = false;
    double num_ = 0;
    int64_t int_ = 0;
    std::string str_;
    std::vector<Json> arr_;
    std::vector<std::pair<std::string, Json>> obj_;
    std::shared_ptr<std::unordered_map<std::string, size_t>> index_;  // built for objects > 8 keys
    void build_index();
    void dump_to(std::string & out, int indent, int depth) const;
};

// Append the UTF-8 encoding of code point `cp` to `out`.
void utf8_append(std::string & out, uint32_t cp);

}  // namespace exl2
