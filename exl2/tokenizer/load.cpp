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
    if (!c.is_object()) return;
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

std::unique_ptr<Model> bpe_model(BpeParts & p, const Where & w) {
    return std::make_unique<BpeModel>(std::move(p.vocab), p.merges, p.opt, w);
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
    const std::string cls = class_name(cfg);
    const bool has_json = file_exists(json_path);
    const bool has_model = file_exists(model_path);
    const bool has_vocab = file_exists(vocab_path) && file_exists(merges_path);
    if (!has_json && !has_model && !has_vocab)
        fail("%s: no tokenizer.json, tokenizer.model or vocab.json + merges.txt", dir.c_str());

    Json tj;  // tokenizer.json when used
    Where jw{json_path, ""};
    const Json * json_added = nullptr;
    bool have_post = false;

    const bool llama = cls == "LlamaTokenizer" || cls == "LlamaTokenizer" || cls == "CodeLlamaTokenizer";
    const bool gpt2 = cls == "GPT2Tokenizer";
    const bool qwen2 = cls == "Qwen2Tokenizer";
    const bool rebuild = !opt.literal_json && (llama || gpt2 || qwen2);

    if (has_json && (opt.literal_json || !rebuild)) {
        // ---- tokenizer.json as written ----
        tj = Json::parse_file(json_path);
        if (!tj.is_object()) fail_at(jw, "expected a JSON object");
        const Json & m = tj.get("model");
        check_model_type(m, jw.at("model"));
        BpeParts p = bpe_parts_from_json(m, jw.at("model"));
        im->model = bpe_model(p, jw.at("model").at("merges"));
        im->normalizer = normalizer_from_json(tj.get("normalizer"), jw.at("normalizer"));
        im->pre = pre_tokenizer_from_json(tj.get("pre_tokenizer"), jw.at("pre_tokenizer"));
        im->decoder = decoder_from_json(tj.get("decoder"), jw.at("decoder"));
        im->post = template_from_json(tj.get("post_processor"), jw.at("post_processor"));
        have_post = !tj.get("post_processor").is_null();
        if (opt.literal_json) add_json_added_tokens(*im, tj.get("added_tokens"), jw.at("added_tokens"));
        json_added = tj.find("added_tokens");
        im->desc = "tokenizer.json (as written)";
    } else if (rebuild && (llama || (!gpt2 && !qwen2 && has_model && !has_json))) {
        // handled below with the SentencePiece / Llama rebuild
    }

    if (!im->model) {
        bool add_prefix_space = cfg.j.get("add_prefix_space").is_bool() ? cfg.j.get_bool("add_prefix_space", false)
                                                                         : llama || (!gpt2 && !qwen2);
        if (has_json && rebuild) {
            tj = Json::parse_file(json_path);
            if (!tj.is_object()) fail_at(jw, "expected a JSON object");
            json_added = tj.find("added_tokens");
            const Json & pp = tj.get("post_processor");
            im->post = template_from_json(pp, jw.at("post_processor"));
            have_post = !pp.is_null();
        }
        if (gpt2 || qwen2 || (!has_json && !has_model && has_vocab)) {
            BpeParts p;
            std::string what;
            if (has_json && rebuild) {
                check_model_type(tj.get("model"), jw.at("model"));
                p = bpe_parts_from_json(tj.get("model"), jw.at("model"));
                what = "tokenizer.json vocab/merges";
            } else {
                if (!has_vocab) fail("%s: %s needs vocab.json and merges.txt", dir.c_str(), cls.c_str());
                p.vocab = read_vocab_json(vocab_path);
                p.merges = read_merges_txt(merges_path);
                what = "vocab.json + merges.txt";
            }
            p.opt = BpeOptions();
            im->model = std::make_unique<BpeModel>(std::move(p.vocab), p.merges, p.opt, Where{merges_path, "merges"});
            if (qwen2) {
                im->normalizer = make_nfc_normalizer();
                std::vector<std::unique_ptr<PreTokenizer>> seq;
                seq.push_back(make_split_regex(kQwen2Pattern, SplitBehavior::Isolated, false));
                seq.push_back(make_byte_level_pre(add_prefix_space, false));
                im->pre = make_pre_sequence(std::move(seq));
                im->desc = what + ", Qwen2Tokenizer pipeline";
            } else {
                im->pre = make_byte_level_pre(add_prefix_space, true);
                im->desc = what + ", GPT2Tokenizer pipeline";
            }
            im->decoder = make_byte_level_decoder();
        } else if (has_json && rebuild) {
            // LlamaTokenizer from tokenizer.json's vocabulary and merges
            check_model_type(tj.get("model"), jw.at("model"));
            BpeParts p = bpe_parts_from_json(tj.get("model"), jw.at("model"));
            p.opt = BpeOptions();
            p.opt.fuse_unk = true;
            p.opt.byte_fallback = true;
            im->model = bpe_model(p, jw.at("model").at("merges"));
            im->desc = "tokenizer.json vocab/merges, LlamaTokenizer pipeline";
        } else if (has_model) {
            std::string data = read_file(model_path);
            if (looks_like_tiktoken(data)) {
                auto ranks = read_tiktoken(data, model_path);
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
                im->model = std::make_unique<BpeModel>(std::move(vocab), std::move(merges), bo);
                std::vector<std::unique_ptr<PreTokenizer>> seq;
                seq.push_back(make_split_regex(kLlama3Pattern, SplitBehavior::Isolated, false));
                seq.push_back(make_byte_level_pre(false, false));
                im->pre = make_pre_sequence(std::move(seq));
                im->decoder = make_byte_level_decoder();
                im->desc = "tiktoken tokenizer.model, Llama 3 pipeline";
                add_prefix_space = false;
                goto tokens;  // no Metaspace pipeline for tiktoken files
            }
            SpModel sp = read_sentencepiece(data, model_path);
            if (sp.model_type != 2)
                fail("%s: SentencePiece model type %d is not supported (BPE only)", model_path.c_str(), sp.model_type);
            std::unordered_map<std::string, int32_t> vocab;
            vocab.reserve(sp.pieces.size());
            for (size_t i = 0; i < sp.pieces.size(); i++) vocab.emplace(sp.pieces[i], (int32_t)i);
            MergeMap merges = merges_from_vocab(vocab);
            BpeOptions bo;
            bo.fuse_unk = true;
            bo.byte_fallback = true;
            im->model = std::make_unique<BpeModel>(std::move(vocab), std::move(merges), bo);
            // control pieces are special added tokens, user-defined ones plain added tokens
            for (size_t i = 0; i < sp.pieces.size(); i++) {
                if (sp.types[i] != SpModel::CONTROL && sp.types[i] != SpModel::USER_DEFINED) continue;
                AddedToken t;
                t.content = sp.pieces[i];
                t.id = (int32_t)i;
                t.special = sp.types[i] == SpModel::CONTROL;
                t.normalized = false;
                im->add_token(t);
            }
            im->desc = "SentencePiece tokenizer.model, LlamaTokenizer pipeline";
        }
        {
            // LlamaTokenizer pipeline (transformers 5)
            bool legacy = cfg.j.get("legacy").is_bool() && cfg.j.get("legacy").as_bool();
            PrependScheme scheme = !add_prefix_space ? PrependScheme::Never
                                   : legacy          ? PrependScheme::Always
                                                     : PrependScheme::First;
            im->pre = make_metaspace_pre(0x2581, scheme, false);
            im->decoder = make_sp_decoder(add_prefix_space);
        }
    }
tokens:
    if (!opt.literal_json) {
        apply_config_tokens(*im, cfg, json_added, jw.at("added_tokens"));
        im->clean_up_spaces = cfg.j.get_bool("clean_up_tokenization_spaces", false);
    }
    // named special tokens
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
    im->finish();
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(im)));
}

}  // namespace exl2
