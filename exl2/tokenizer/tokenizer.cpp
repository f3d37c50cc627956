// Encoding and decoding with a loaded pipeline: added-token matching (tokenizers'
// AddedVocabulary, leftmost-longest with lstrip/rstrip/single_word), normalization,
// pre-tokenization, the model and the template; decoding through the decoder chain.
#include "tokenizer-impl.h"
#include "unicode.h"

#include "exl2/error.h"

#include <algorithm>
#include <cstring>

namespace exl2 {

void Tokenizer::Impl::add_token(AddedToken t) {
    if (t.content.empty()) return;
    auto it = added_ids.find(t.content);
    int32_t id;
    if (it != added_ids.end()) {
        id = it->second;
    } else {
        id = t.id >= 0 ? t.id : (model ? model->token_to_id(t.content) : -1);
        if (id < 0) {
            int32_t next = model ? model->vocab_size() : 0;
            for (auto & kv : added) next = std::max(next, kv.first + 1);
            id = next;
        }
    }
    t.id = id;
    if (t.special) special_contents.insert(t.content);
    auto old = added.find(id);
    if (old != added.end() && old->second.content != t.content) added_ids.erase(old->second.content);
    added_ids[t.content] = id;
    added[id] = std::move(t);
}

int32_t Tokenizer::Impl::find_id(const std::string & content) const {
    auto it = added_ids.find(content);
    if (it != added_ids.end()) return it->second;
    return model ? model->token_to_id(content) : -1;
}

void Tokenizer::Impl::finish() {
    for (Matcher * m : {&match_raw_, &match_norm_}) {
        for (auto & v : m->by_byte) v.clear();
        m->empty = true;
    }
    for (auto & kv : added) {
        AddedToken & t = kv.second;
        // Normalized tokens are matched in normalized text, so by their normalized form.
        t.norm.clear();
        if (t.normalized && normalizer) {
            std::string n = t.content;
            normalizer->apply(n);
            if (n != t.content) t.norm = n;
        }
        if (t.key().empty()) continue;
        Matcher & m = (t.normalized && normalizer) ? match_norm_ : match_raw_;
        m.by_byte[(unsigned char)t.key()[0]].push_back(kv.first);
        m.empty = false;
    }
    for (Matcher * m : {&match_raw_, &match_norm_})
        for (auto & v : m->by_byte)
            std::sort(v.begin(), v.end(), [&](int32_t a, int32_t b) {
                size_t la = added.at(a).key().size(), lb = added.at(b).key().size();
                return la != lb ? la > lb : a < b;
            });
}

namespace {

size_t ws_run_before(const std::string & s, size_t end) {  // start of the \s* run ending at end
    size_t i = end;
    while (i > 0) {
        size_t j = i - 1;
        while (j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
        size_t k = j;
        uint32_t cp = uni::utf8_next(s.data(), i, k);
        if (k != i || !uni::is_white_space(cp)) break;
        i = j;
    }
    return i;
}

size_t ws_run_after(const std::string & s, size_t start) {
    size_t i = start;
    while (i < s.size()) {
        size_t k = i;
        uint32_t cp = uni::utf8_next(s.data(), s.size(), k);
        if (!uni::is_white_space(cp)) break;
        i = k;
    }
    return i;
}

bool word_before(const std::string & s, size_t end) {
    if (end == 0) return false;
    size_t j = end - 1;
    while (j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
    size_t k = j;
    uint32_t cp = uni::utf8_next(s.data(), end, k);
    return uni::is_word(cp);
}

bool word_after(const std::string & s, size_t start) {
    if (start >= s.size()) return false;
    size_t k = start;
    return uni::is_word(uni::utf8_next(s.data(), s.size(), k));
}

}  // namespace

void Tokenizer::Impl::find_added(const std::string & s, const Matcher & m, bool parse_special,
                                 std::vector<Segment> & out) const {
    out.clear();
    if (m.empty) {
        if (!s.empty()) out.push_back({0, s.size(), -1});
        return;
    }
    size_t start_offset = 0;
    size_t i = 0;
    while (i < s.size()) {
        const auto & cands = m.by_byte[(unsigned char)s[i]];
        int32_t hit = -1;
        for (int32_t id : cands) {
            const std::string & c = added.at(id).key();
            if (c.size() <= s.size() - i && std::memcmp(s.data() + i, c.data(), c.size()) == 0) {
                hit = id;
                break;
            }
        }
        if (hit < 0) {
            i++;
            continue;
        }
        const AddedToken & t = added.at(hit);
        size_t start = i, stop = i + t.key().size();
        i = stop;  // the match is consumed even when it is discarded below (as tokenizers does)
        if (!parse_special && special_contents.count(t.content)) continue;
        if (t.single_word && (word_before(s, start) || word_after(s, stop))) continue;
        if (t.lstrip) start = std::max(ws_run_before(s, start), start_offset);
        if (t.rstrip) stop = ws_run_after(s, stop);
        if (start_offset < start) out.push_back({start_offset, start, -1});
        out.push_back({start, stop, hit});
        start_offset = stop;
        i = std::max(i, stop);
    }
    if (start_offset < s.size()) out.push_back({start_offset, s.size(), -1});
}

void Tokenizer::Impl::encode_text(const std::string & s, bool at_start, std::vector<int32_t> & ids) const {
    if (!pre) {
        model->encode(s.data(), s.size(), ids);
        return;
    }
    pre->for_each(s.data(), s.size(), at_start,
                  [&](const char * p, size_t n, bool) { model->encode(p, n, ids); });
}

std::vector<int32_t> Tokenizer::Impl::encode(const std::string & text, bool add_special, bool parse_special) const {
    // Offsets inside the pipeline are 32-bit.
    if (text.size() >= (size_t(1) << 31)) fail("encode: text of %zu bytes is over the 2 GiB limit", text.size());
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 8);
    std::vector<Segment> segs, sub;
    find_added(text, match_raw_, parse_special, segs);
    for (const Segment & sg : segs) {
        if (sg.id >= 0) {
            ids.push_back(sg.id);
            continue;
        }
        std::string part = text.substr(sg.a, sg.b - sg.a);
        if (normalizer) normalizer->apply(part);
        find_added(part, match_norm_, parse_special, sub);
        for (const Segment & s2 : sub) {
            if (s2.id >= 0) ids.push_back(s2.id);
            else encode_text(part.substr(s2.a, s2.b - s2.a), sg.a == 0 && s2.a == 0, ids);
        }
    }
    if (!add_special || !post.present) return ids;
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const auto & item : post.single) {
        if (item.is_sequence) out.insert(out.end(), ids.begin(), ids.end());
        else out.insert(out.end(), item.ids.begin(), item.ids.end());
    }
    return out;
}

bool Tokenizer::Impl::is_special(int32_t id) const {
    auto it = added.find(id);
    return it != added.end() && special_contents.count(it->second.content) > 0;
}

int32_t Tokenizer::Impl::n_vocab() const {
    int32_t n = model ? model->vocab_size() : 0;
    for (auto & kv : added) n = std::max(n, kv.first + 1);
    return n;
}

std::string Tokenizer::Impl::decode(const std::vector<int32_t> & ids, bool skip_special, bool raw) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
        auto it = added.find(id);
        if (it != added.end()) {
            if (skip_special && special_contents.count(it->second.content)) continue;
            tokens.push_back(it->second.key());
            continue;
        }
        const std::string * t = model ? model->id_to_token(id) : nullptr;
        if (t) tokens.push_back(*t);
    }
    std::string out;
    if (decoder) {
        decoder->apply(tokens, raw);
        for (auto & t : tokens) out += t;
    } else {
        for (size_t k = 0; k < tokens.size(); k++) {
            if (k) out += ' ';
            out += tokens[k];
        }
    }
    return raw ? out : uni::utf8_lossy(out);
}

// ---- public wrapper ---------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(const std::string & text, bool add_special, bool parse_special) const {
    return impl_->encode(text, add_special, parse_special);
}

std::string Tokenizer::decode(const std::vector<int32_t> & ids, bool skip_special) const {
    return impl_->decode(ids, skip_special, false);
}

std::string Tokenizer::token_to_piece(int32_t id) const {
    // Decode after a neutral token so that first-token rules (Strip, Metaspace) do not apply.
    if (token_text(id).empty()) return "";
    std::vector<std::string> tokens{"a"};
    auto it = impl_->added.find(id);
    const std::string * t = it != impl_->added.end() ? &it->second.key() : impl_->model->id_to_token(id);
    tokens.push_back(*t);
    if (!impl_->decoder) return *t;
    impl_->decoder->apply(tokens, true);
    std::string s;
    for (auto & x : tokens) s += x;
    return (!s.empty() && s[0] == 'a') ? s.substr(1) : s;
}

std::string Tokenizer::token_text(int32_t id) const {
    auto it = impl_->added.find(id);
    if (it != impl_->added.end()) return it->second.content;
    const std::string * t = impl_->model ? impl_->model->id_to_token(id) : nullptr;
    return t ? *t : std::string();
}

int32_t Tokenizer::token_id(const std::string & text) const { return impl_->find_id(text); }
int32_t Tokenizer::n_vocab() const { return impl_->n_vocab(); }
int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
int32_t Tokenizer::pad_id() const { return impl_->pad; }
int32_t Tokenizer::unk_id() const { return impl_->unk; }
bool Tokenizer::is_special(int32_t id) const { return impl_->is_special(id); }
const std::string & Tokenizer::chat_template() const { return impl_->chat_template; }
const std::string & Tokenizer::desc() const { return impl_->desc; }

std::vector<int32_t> Tokenizer::eos_ids() const {
    std::vector<int32_t> v;
    if (impl_->eos >= 0) v.push_back(impl_->eos);
    for (int32_t id : impl_->extra_eos)
        if (std::find(v.begin(), v.end(), id) == v.end()) v.push_back(id);
    return v;
}

bool Tokenizer::add_bos() const {
    const auto & s = impl_->post.single;
    return impl_->post.present && !s.empty() && !s.front().is_sequence && !s.front().ids.empty() &&
           s.front().ids.front() == impl_->bos && impl_->bos >= 0;
}

bool Tokenizer::add_eos() const {
    const auto & s = impl_->post.single;
    return impl_->post.present && !s.empty() && !s.back().is_sequence && !s.back().ids.empty() &&
           s.back().ids.back() == impl_->eos && impl_->eos >= 0;
}

}  // namespace exl2
