// Tokenizer::load: finds the tokenizer files of a model folder and assembles the pipeline the way
// transformers 5 (AutoTokenizer) does, or literally from tokenizer.json (TokenizerOptions).
//
// transformers 5 rebuilds some classes from the vocabulary and merges alone:
//   LlamaTokenizer: no normalizer, Metaspace(prepend "first" unless legacy, split=false), BPE with
//                   byte fallback and no unk token, decoder Replace/ByteFallback/Fuse/Strip;
//                   merges from tokenizer.json, or generated from tokenizer.model's vocabulary.
//   GPT2Tokenizer:  ByteLevel(regex) pre-tokenizer and decoder.
//   Qwen2Tokenizer: NFC, Split(Qwen2 regex) + ByteLevel, ByteLevel decoder.
//   tiktoken file:  Split(Llama 3 regex) + ByteLevel, ignore_merges, merges generated from ranks.
// Every other class with a tokenizer.json runs that file as written. Then tokenizer_config.json
// adds its added tokens and special tokens, and an explicit add_bos_token / add_eos_token (or a
// missing post-processor) replaces the template by [bos] $A [eos].
#include "loaders.h"
#include "tokenizer-impl.h"
#include "unicode.h"

#include "exl2/error.h"
#include "exl2/json.h"

#include <algorithm>
#include <climits>
#include <cstdlib>

namespace exl2 {

using namespace tok;

namespace {

const char * const kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char * const kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string join(const std::string & dir, const char * name) {
    if (dir.empty()) return name;
    return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// ---- tokenizer.json model section -------------------------------------------------------------

struct BpeParts {
    std::unordered_map<std::string, int32_t> vocab;
    std::vector<std::pair<std::string, std::string>> merges;
    BpeOptions opt;
};

std::string opt_string(const Json & j, const char * key, const Where & w) {
    const Json & v = j.get(key);
    if (v.is_null()) return "";
    if (!v.is_string()) fail_at(w.at(key), "expected a string or null");
    return v.as_string();
}

BpeParts bpe_parts_from_json(const Json & m, const Where & w) {
    BpeParts p;
    const Json & vocab = m.get("vocab");
    if (!vocab.is_object()) fail_at(w.at("vocab"), "expected an object of token -> id");
    p.vocab.reserve(vocab.size());
    for (auto & kv : vocab.as_object()) {
        if (!kv.second.is_integer() || kv.second.as_int() < 0 || kv.second.as_int() > INT32_MAX)
            fail_at(w.at("vocab").at(kv.first), "id must be a non-negative integer");
        p.vocab[kv.first] = (int32_t)kv.second.as_int();
    }
    const Json & merges = m.get("merges");
    if (!merges.is_null() && !merges.is_array()) fail_at(w.at("merges"), "expected an array");
    for (size_t i = 0; i < merges.size(); i++) {
        const Json & e = merges[i];
        if (e.is_string()) {
            const std::string & s = e.as_string();
            size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                fail_at(w.at("merges").at(i), "expected \"left right\"");
            p.merges.push_back({s.substr(0, sp), s.substr(sp + 1)});
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            p.merges.push_back({e[0].as_string(), e[1].as_string()});
        } else {
            fail_at(w.at("merges").at(i), "expected \"left right\" or [left, right]");
        }
    }
    p.opt.unk_token = opt_string(m, "unk_token", w);
    p.opt.fuse_unk = m.get_bool("fuse_unk", false);
    p.opt.byte_fallback = m.get_bool("byte_fallback", false);
    p.opt.ignore_merges = m.get_bool("ignore_merges", false);
    p.opt.continuing_subword_prefix = opt_string(m, "continuing_subword_prefix", w);
    p.opt.end_of_word_suffix = opt_string(m, "end_of_word_suffix", w);
    return p;
}

void check_model_type(const Json & m, const Where & w) {
    if (!m.is_object()) fail_at(w, "expected an object");
    const Json & t = m.get("type");
    std::string type = t.is_string() ? t.as_string() : (m.has("merges") ? "BPE" : "");
    if (type == "BPE") return;
    if (type == "WordPiece" || type == "WordLevel" || type == "Unigram")
        fail_at(w.at("type"), "model type \"" + type + "\" is not supported (BPE only)");
    fail_at(w.at("type"), "unknown model type \"" + type + "\"");
}

// ---- added and special tokens ------------------------------------------------------------------

AddedToken added_from_json(const Json & j, const Where & w, bool default_special) {
    AddedToken t;
    if (j.is_string()) {
        t.content = j.as_string();
        t.special = default_special;
        t.normalized = !default_special;
        return t;
    }
    if (!j.is_object()) fail_at(w, "expected a string or an object");
    const Json & c = j.get("content");
    if (!c.is_string()) fail_at(w.at("content"), "expected a string");
    t.content = c.as_string();
    t.special = j.get_bool("special", default_special);
    t.lstrip = j.get_bool("lstrip", false);
    t.rstrip = j.get_bool("rstrip", false);
    t.single_word = j.get_bool("single_word", false);
    t.normalized = j.get_bool("normalized", !t.special);
    if (const Json * id = j.find("id")) {
        if (!id->is_integer() || id->as_int() < 0 || id->as_int() > INT32_MAX) fail_at(w.at("id"), "bad id");
        t.id = (int32_t)id->as_int();
    }
    return t;
}

void add_json_added_tokens(Tokenizer::Impl & im, const Json & arr, const Where & w) {
    if (arr.is_null()) return;
    if (!arr.is_array()) fail_at(w, "expected an array");
    for (size_t i = 0; i < arr.size(); i++) {
        AddedToken t = added_from_json(arr[i], w.at(i), false);
        if (t.id < 0) fail_at(w.at(i).at("id"), "missing id");
        im.add_token(t);
    }
}

// Text of a special-token entry of tokenizer_config.json (string or AddedToken object).
std::string special_text(const Json & v) {
    if (v.is_string()) return v.as_string();
    if (v.is_object() && v.get("content").is_string()) return v.get("content").as_string();
    return "";
}

struct Config {
    Json j;        // null when there is no tokenizer_config.json
    std::string path;
};

const char * const kSpecialKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                     "pad_token", "cls_token", "mask_token"};

// transformers: the config's added tokens (or tokenizer.json's when the config has none), then the
// named special tokens and extra special tokens that are not added tokens yet.
void apply_config_tokens(Tokenizer::Impl & im, const Config & cfg, const Json * json_added, const Where & jw) {
    const Json & c = cfg.j;
    if (!c.is_object()) {
        if (json_added) add_json_added_tokens(im, *json_added, jw);
        return;
    }
    Where cw{cfg.path, ""};
    const Json & decoder = c.get("added_tokens_decoder");
    if (decoder.is_object()) {
        std::vector<std::pair<int64_t, const Json *>> entries;
        for (auto & kv : decoder.as_object()) {
            char * end = nullptr;
            long long id = std::strtoll(kv.first.c_str(), &end, 10);
            if (!end || *end || id < 0 || id > INT32_MAX)
                fail_at(cw.at("added_tokens_decoder").at(kv.first), "key must be a token id");
            entries.push_back({id, &kv.second});
        }
        std::sort(entries.begin(), entries.end(), [](auto & a, auto & b) { return a.first < b.first; });
        for (auto & e : entries) {
            AddedToken t = added_from_json(*e.second, cw.at("added_tokens_decoder").at(std::to_string(e.first)), false);
            t.id = (int32_t)e.first;
            im.add_token(t);
        }
    } else if (json_added) {
        add_json_added_tokens(im, *json_added, jw);
    }
    auto add_special = [&](const Json & v, const Where & w) {
        std::string text = special_text(v);
        if (text.empty() || im.added_ids.count(text)) return;
        AddedToken t = added_from_json(v, w, true);
        t.special = true;
        im.add_token(t);
    };
    for (const char * k : kSpecialKeys) add_special(c.get(k), cw.at(k));
    for (const char * k : {"additional_special_tokens", "extra_special_tokens"}) {
        const Json & a = c.get(k);
        if (a.is_array())
            for (size_t i = 0; i < a.size(); i++) add_special(a[i], cw.at(k).at(i));
        else if (a.is_object())
            for (auto & kv : a.as_object()) add_special(kv.second, cw.at(k).at(kv.first));
    }
}

// transformers' update_post_processor: "[bos] $A [eos]" from the config flags.
void rebuild_template(Tokenizer::Impl & im, bool add_bos, bool add_eos) {
    im.post = Template();
    im.post.present = true;
    if (add_bos && im.bos >= 0) im.post.single.push_back({false, {im.bos}});
    im.post.single.push_back({true, {}});
    if (add_eos && im.eos >= 0) im.post.single.push_back({false, {im.eos}});
}

// Ids from config.json / generation_config.json ("bos_token_id": 1 or [1, 2]).
std::vector<int32_t> config_ids(const std::string & dir, const char * key) {
    std::vector<int32_t> out;
    for (const char * f : {"config.json", "generation_config.json"}) {
        std::string path = join(dir, f);
        if (!file_exists(path)) continue;
        Json j = Json::parse_file(path);
        const Json & v = j.get(key);
        if (v.is_integer()) out.push_back((int32_t)v.as_int());
        else if (v.is_array())
            for (size_t i = 0; i < v.size(); i++)
                if (v[i].is_integer()) out.push_back((int32_t)v[i].as_int());
    }
    return out;
}

std::string read_chat_template(const std::string & dir, const Config & cfg) {
    std::string jinja = join(dir, "chat_template.jinja");
    if (file_exists(jinja)) return read_file(jinja);
    const Json & t = cfg.j.get("chat_template");
    if (t.is_string()) return t.as_string();
    if (t.is_array()) {  // [{"name": ..., "template": ...}]: the default one, else the first
        std::string first;
        for (size_t i = 0; i < t.size(); i++) {
            const Json & e = t[i];
            std::string name = e.get_string("name", ""), text = e.get_string("template", "");
            if (name == "default") return text;
            if (first.empty()) first = text;
        }
        return first;
    }
    return "";
}

std::string class_name(const Config & cfg) {
    std::string c = cfg.j.get_string("tokenizer_class", "");
    if (c.size() > 4 && c.compare(c.size() - 4, 4, "Fast") == 0) c.resize(c.size() - 4);
    return c;
}

enum class Kind { JsonLiteral, Llama, Gpt2, Qwen2, Tiktoken };

// LlamaTokenizer (transformers 5): Metaspace without split, Llama decoder.
void llama_pipeline(Tokenizer::Impl & im, const Config & cfg) {
    const Json & aps = cfg.j.get("add_prefix_space");
    bool add_prefix_space = aps.is_bool() ? aps.as_bool() : true;
    bool legacy = cfg.j.get("legacy").is_bool() && cfg.j.get("legacy").as_bool();
    PrependScheme scheme = !add_prefix_space ? PrependScheme::Never
                           : legacy          ? PrependScheme::Always
                                             : PrependScheme::First;
    im.pre = make_metaspace_pre(0x2581, scheme, false);
    im.decoder = make_sp_decoder(add_prefix_space);
}

// The model of a SentencePiece file as transformers converts it: every piece in the vocabulary,
// merges generated from the vocabulary, control pieces as special added tokens.
void load_sentencepiece(Tokenizer::Impl & im, const std::string & data, const std::string & path) {
    SpModel sp = read_sentencepiece(data, path);
    if (sp.model_type != 2)
        fail("%s: trainer_spec.model_type: %d is not supported (BPE = 2 only)", path.c_str(), sp.model_type);
    std::unordered_map<std::string, int32_t> vocab;
    vocab.reserve(sp.pieces.size());
    for (size_t i = 0; i < sp.pieces.size(); i++) vocab.emplace(sp.pieces[i], (int32_t)i);
    MergeMap merges = merges_from_vocab(vocab);
    BpeOptions bo;
    bo.fuse_unk = true;
    bo.byte_fallback = true;
    im.model = std::make_unique<BpeModel>(std::move(vocab), std::move(merges), bo);
    for (size_t i = 0; i < sp.pieces.size(); i++) {
        if (sp.types[i] != SpModel::CONTROL && sp.types[i] != SpModel::USER_DEFINED) continue;
        AddedToken t;
        t.content = sp.pieces[i];
        t.id = (int32_t)i;
        t.special = sp.types[i] == SpModel::CONTROL;
        t.normalized = false;
        im.add_token(t);
    }
}

// transformers' TikTokenConverter: byte-level vocabulary from the ranks, Llama 3 split regex.
void load_tiktoken(Tokenizer::Impl & im, const std::string & data, const std::string & path) {
    auto ranks = read_tiktoken(data, path);
    std::unordered_map<std::string, int32_t> bytes_vocab, vocab;
    bytes_vocab.reserve(ranks.size());
    vocab.reserve(ranks.size());
    for (auto & r : ranks) {
        bytes_vocab[r.first] = r.second;
        std::string mapped;
        for (unsigned char c : r.first) mapped += byte_to_char(c);
        vocab[mapped] = r.second;
    }
    MergeMap merges = merges_from_ranks(bytes_vocab);
    BpeOptions bo;
    bo.ignore_merges = true;
    im.model = std::make_unique<BpeModel>(std::move(vocab), std::move(merges), bo);
    std::vector<std::unique_ptr<PreTokenizer>> seq;
    seq.push_back(make_split_regex(kLlama3Pattern, SplitBehavior::Isolated, false));
    seq.push_back(make_byte_level_pre(false, false));
    im.pre = make_pre_sequence(std::move(seq));
    im.decoder = make_byte_level_decoder();
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string & dir, const TokenizerOptions & opt) {
    auto im = std::make_unique<Impl>();
    const std::string json_path = join(dir, "tokenizer.json");
    const std::string model_path = join(dir, "tokenizer.model");
    const std::string vocab_path = join(dir, "vocab.json");
    const std::string merges_path = join(dir, "merges.txt");
    Config cfg;
    cfg.path = join(dir, "tokenizer_config.json");
    if (file_exists(cfg.path)) {
        cfg.j = Json::parse_file(cfg.path);
        if (!cfg.j.is_object()) fail("%s: expected a JSON object", cfg.path.c_str());
    }
    const bool has_json = file_exists(json_path);
    const bool has_model = file_exists(model_path);
    const bool has_vocab = file_exists(vocab_path) && file_exists(merges_path);
    if (!has_json && !has_model && !has_vocab)
        fail("%s: no tokenizer.json, tokenizer.model or vocab.json + merges.txt", dir.c_str());

    // Which pipeline: see the comment at the top of this file.
    std::string cls;
    try {
        cls = class_name(cfg);
    } catch (const Error & e) {
        fail("%s: tokenizer_class: %s", cfg.path.c_str(), e.what());
    }
    std::string model_data;
    Kind kind;
    if (has_json && opt.literal_json) kind = Kind::JsonLiteral;
    else if (cls == "LlamaTokenizer" && (has_json || has_model)) kind = Kind::Llama;
    else if (cls == "GPT2Tokenizer" && (has_json || has_vocab)) kind = Kind::Gpt2;
    else if (cls == "Qwen2Tokenizer" && (has_json || has_vocab)) kind = Kind::Qwen2;
    else if (has_json) kind = Kind::JsonLiteral;
    else if (has_model) {
        model_data = read_file(model_path);
        kind = looks_like_tiktoken(model_data) ? Kind::Tiktoken : Kind::Llama;
    } else kind = Kind::Gpt2;

    Json tj;  // tokenizer.json when read
    const Where jw{json_path, ""};
    bool have_post = false;
    if (has_json && kind != Kind::Tiktoken) {
        tj = Json::parse_file(json_path);
        if (!tj.is_object()) fail_at(jw, "expected a JSON object");
        if (kind != Kind::JsonLiteral || !opt.literal_json) {
            // transformers keeps tokenizer.json's post-processor for the rebuilt classes too
            im->post = template_from_json(tj.get("post_processor"), jw.at("post_processor"));
            have_post = !tj.get("post_processor").is_null();
        }
    }
    auto json_bpe = [&](BpeOptions * override_opt) {
        const Json & m = tj.get("model");
        check_model_type(m, jw.at("model"));
        BpeParts p = bpe_parts_from_json(m, jw.at("model"));
        if (override_opt) p.opt = *override_opt;
        return std::make_unique<BpeModel>(std::move(p.vocab), p.merges, p.opt, jw.at("model").at("merges"));
    };

    switch (kind) {
    case Kind::JsonLiteral:
        im->model = json_bpe(nullptr);
        im->normalizer = normalizer_from_json(tj.get("normalizer"), jw.at("normalizer"));
        im->pre = pre_tokenizer_from_json(tj.get("pre_tokenizer"), jw.at("pre_tokenizer"));
        im->decoder = decoder_from_json(tj.get("decoder"), jw.at("decoder"));
        im->post = template_from_json(tj.get("post_processor"), jw.at("post_processor"));
        have_post = !tj.get("post_processor").is_null();
        add_json_added_tokens(*im, tj.get("added_tokens"), jw.at("added_tokens"));
        im->desc = "tokenizer.json as written";
        break;
    case Kind::Llama:
        if (has_json) {
            BpeOptions bo;
            bo.fuse_unk = true;
            bo.byte_fallback = true;
            im->model = json_bpe(&bo);
            im->desc = "tokenizer.json vocabulary and merges, LlamaTokenizer pipeline";
        } else {
            if (model_data.empty()) model_data = read_file(model_path);
            load_sentencepiece(*im, model_data, model_path);
            im->desc = "SentencePiece tokenizer.model, LlamaTokenizer pipeline";
        }
        llama_pipeline(*im, cfg);
        break;
    case Kind::Gpt2:
    case Kind::Qwen2: {
        BpeOptions bo;
        if (has_json) {
            im->model = json_bpe(&bo);
            im->desc = "tokenizer.json vocabulary and merges";
        } else {
            im->model = std::make_unique<BpeModel>(read_vocab_json(vocab_path), read_merges_txt(merges_path), bo,
                                                   Where{merges_path, "merges"});
            im->desc = "vocab.json + merges.txt";
        }
        bool aps = cfg.j.get("add_prefix_space").is_bool() && cfg.j.get("add_prefix_space").as_bool();
        if (kind == Kind::Qwen2) {
            im->normalizer = make_nfc_normalizer();
            std::vector<std::unique_ptr<PreTokenizer>> seq;
            seq.push_back(make_split_regex(kQwen2Pattern, SplitBehavior::Isolated, false));
            seq.push_back(make_byte_level_pre(aps, false));
            im->pre = make_pre_sequence(std::move(seq));
            im->desc += ", Qwen2Tokenizer pipeline";
        } else {
            im->pre = make_byte_level_pre(aps, true);
            im->desc += ", GPT2Tokenizer pipeline";
        }
        im->decoder = make_byte_level_decoder();
        break;
    }
    case Kind::Tiktoken:
        load_tiktoken(*im, model_data, model_path);
        im->desc = "tiktoken tokenizer.model, Llama 3 pipeline";
        break;
    }

    try {
        if (!opt.literal_json) {
            // Added tokens: the config's list, or tokenizer.json's for the rebuilt classes.
            const Json * json_added = (has_json && kind != Kind::JsonLiteral) ? tj.find("added_tokens") : nullptr;
            apply_config_tokens(*im, cfg, json_added, jw.at("added_tokens"));
        }
        auto id_of = [&](const char * key) {
            std::string text = special_text(cfg.j.get(key));
            return text.empty() ? -1 : im->find_id(text);
        };
        im->bos = id_of("bos_token");
        im->eos = id_of("eos_token");
        im->pad = id_of("pad_token");
        im->unk = id_of("unk_token");
        if (im->bos < 0) {
            auto v = config_ids(dir, "bos_token_id");
            if (!v.empty()) im->bos = v[0];
        }
        std::vector<int32_t> eos_cfg = config_ids(dir, "eos_token_id");
        if (im->eos < 0 && !eos_cfg.empty()) im->eos = eos_cfg[0];
        im->extra_eos = eos_cfg;
        if (!opt.literal_json) {
            const bool explicit_flags = cfg.j.has("add_bos_token") || cfg.j.has("add_eos_token");
            if (explicit_flags || !have_post)
                rebuild_template(*im, cfg.j.get_bool("add_bos_token", false), cfg.j.get_bool("add_eos_token", false));
        }
        im->chat_template = read_chat_template(dir, cfg);
    } catch (const Error & e) {
        std::string msg = e.what();
        if (msg.find(dir) != std::string::npos) throw;
        fail("%s: %s", cfg.path.c_str(), msg.c_str());
    }
    // Byte-level pipelines: hand raw bytes to the model (same ids, less work).
    if (im->pre && im->pre->ends_with_byte_level() && im->model->set_byte_input()) im->pre->skip_final_byte_mapping();
    im->finish();
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(im)));
}

}  // namespace exl2
