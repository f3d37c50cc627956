// A small backtracking regex engine for pre-tokenizer split patterns (GPT-2, Llama 3, Qwen2,
// DeepSeek, ... as written in tokenizer.json for Oniguruma, or as tiktoken pat_str).
//
// Semantics are Perl/Oniguruma leftmost-first: alternatives are tried in order, quantifiers are
// greedy unless followed by '?'. Supported: literals and escapes (\n \r \t \f \v \e \xHH \x{H..}
// \uHHHH), '.', classes [...] with ranges, negation and nested classes, \s \S \d \D \w \W (Unicode
// White_Space, Nd, word), \p{..} \P{..} with general categories (L, Lu, N, Nd, P, S, M, Z, C, ...
// and their long names), groups (...) (?:...), inline flags (?i) (?i:...) (?-i), lookahead (?=...)
// (?!...), anchors ^ $ \A \z \Z \b \B, quantifiers ? * + {n} {n,} {n,m} and their lazy forms.
// Not supported (exl2::Error naming the pattern): backreferences, lookbehind, atomic groups,
// possessive quantifiers, scripts (\p{Han}), class intersection.
//
// Matching runs over code points (see uni::utf8_next: invalid bytes are code points of category
// Cn). Quantified single classes run as one instruction, so \p{L}+ costs no backtrack frame per
// character.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace exl2 {

class Regex {
public:
    explicit Regex(const std::string & pattern);  // throws exl2::Error
    ~Regex();
    Regex(Regex &&) noexcept;
    Regex & operator=(Regex &&) noexcept;

    const std::string & pattern() const { return pattern_; }

    // Appends every successive non-overlapping match [start, end) in code point indices of
    // text[0, n). After an empty match the search resumes one code point further on.
    void find_all(const uint32_t * text, size_t n,
                  std::vector<std::pair<uint32_t, uint32_t>> & out) const;

    // The same matches, handed to `cb(start, end)` one at a time (no list is built).
    void find_each(const uint32_t * text, size_t n, const std::function<void(uint32_t, uint32_t)> & cb) const;

    // Anchored match at pos: end of the match, or -1.
    long match_at(const uint32_t * text, size_t n, size_t pos) const;

    struct Impl;

private:
    std::string pattern_;
    std::unique_ptr<Impl> impl_;
};

}  // namespace exl2
