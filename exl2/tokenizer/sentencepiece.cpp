// SentencePiece tokenizer.model reader: a minimal protobuf wire-format decoder for ModelProto
// (pieces, trainer_spec, normalizer_spec), and the merge list transformers derives from it.
#include "loaders.h"
#include "unicode.h"

#include "exl2/error.h"

#include <cstring>

namespace exl2 {
namespace tok {

namespace {

// Protobuf wire format: varint keys (field << 3 | wire type), then varint / fixed64 /
// length-delimited / fixed32 payloads.
class Reader {
public:
    Reader(const char * p, size_t n, const std::string & path, const char * what)
        : p_((const unsigned char *)p), n_(n), path_(path), what_(what) {}
    bool done() const { return i_ >= n_; }
    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (i_ >= n_) bad("truncated varint");
            unsigned char b = p_[i_++];
            v |= (uint64_t)(b & 0x7F) << shift;
            if (!(b & 0x80)) return v;
        }
        bad("varint too long");
    }
    void key(uint32_t & field, uint32_t & wire) {
        uint64_t k = varint();
        field = (uint32_t)(k >> 3);
        wire = (uint32_t)(k & 7);
    }
    Reader sub(const char * what) {
        uint64_t len = varint();
        if (len > n_ - i_) bad("length past the end");
        Reader r((const char *)p_ + i_, (size_t)len, path_, what);
        i_ += (size_t)len;
        return r;
    }
    std::string bytes() {
        uint64_t len = varint();
        if (len > n_ - i_) bad("length past the end");
        std::string s((const char *)p_ + i_, (size_t)len);
        i_ += (size_t)len;
        return s;
    }
    float fixed32_float() {
        if (n_ - i_ < 4) bad("truncated fixed32");
        float f;
        std::memcpy(&f, p_ + i_, 4);
        i_ += 4;
        return f;
    }
    void skip(uint32_t wire) {
        switch (wire) {
        case 0: varint(); break;
        case 1: if (n_ - i_ < 8) bad("truncated fixed64"); i_ += 8; break;
        case 2: { uint64_t len = varint(); if (len > n_ - i_) bad("length past the end"); i_ += (size_t)len; break; }
        case 5: if (n_ - i_ < 4) bad("truncated fixed32"); i_ += 4; break;
        default: bad("unknown wire type");
        }
    }
    [[noreturn]] void bad(const char * msg) const {
        fail("%s: not a SentencePiece model: %s: %s at byte %zu", path_.c_str(), what_, msg, i_);
    }

private:
    const unsigned char * p_;
    size_t n_;
    size_t i_ = 0;
    const std::string & path_;
    const char * what_;
};

}  // namespace

SpModel read_sentencepiece(const std::string & data, const std::string & path) {
    SpModel m;
    Reader r(data.data(), data.size(), path, "ModelProto");
    while (!r.done()) {
        uint32_t f, w;
        r.key(f, w);
        if (f == 1 && w == 2) {  // repeated SentencePiece pieces
            Reader p = r.sub("pieces");
            std::string piece;
            float score = 0;
            int type = SpModel::NORMAL;
            while (!p.done()) {
                uint32_t pf, pw;
                p.key(pf, pw);
                if (pf == 1 && pw == 2) piece = p.bytes();
                else if (pf == 2 && pw == 5) score = p.fixed32_float();
                else if (pf == 3 && pw == 0) type = (int)p.varint();
                else p.skip(pw);
            }
            m.pieces.push_back(piece);
            m.scores.push_back(score);
            m.types.push_back(type);
        } else if (f == 2 && w == 2) {  // TrainerSpec
            Reader t = r.sub("trainer_spec");
            while (!t.done()) {
                uint32_t tf, tw;
                t.key(tf, tw);
                if (tw == 0 && tf == 3) m.model_type = (int)t.varint();
                else if (tw == 0 && tf == 35) m.byte_fallback = t.varint() != 0;
                else if (tw == 0 && tf == 40) m.unk_id = (int)(int32_t)t.varint();
                else if (tw == 0 && tf == 41) m.bos_id = (int)(int32_t)t.varint();
                else if (tw == 0 && tf == 42) m.eos_id = (int)(int32_t)t.varint();
                else if (tw == 0 && tf == 43) m.pad_id = (int)(int32_t)t.varint();
                else if (tw == 2 && tf == 45) m.unk_piece = t.bytes();
                else if (tw == 2 && tf == 46) m.bos_piece = t.bytes();
                else if (tw == 2 && tf == 47) m.eos_piece = t.bytes();
                else if (tw == 2 && tf == 48) m.pad_piece = t.bytes();
                else t.skip(tw);
            }
        } else if (f == 3 && w == 2) {  // NormalizerSpec
            Reader n = r.sub("normalizer_spec");
            while (!n.done()) {
                uint32_t nf, nw;
                n.key(nf, nw);
                if (nw == 2 && nf == 2) m.precompiled_charsmap = n.bytes();
                else if (nw == 0 && nf == 3) m.add_dummy_prefix = n.varint() != 0;
                else if (nw == 0 && nf == 4) m.remove_extra_whitespaces = n.varint() != 0;
                else if (nw == 0 && nf == 5) m.escape_whitespaces = n.varint() != 0;
                else n.skip(nw);
            }
        } else {
            r.skip(w);
        }
    }
    if (m.pieces.empty()) fail("%s: not a SentencePiece model: ModelProto: no pieces", path.c_str());
    return m;
}

MergeMap merges_from_vocab(const std::unordered_map<std::string, int32_t> & vocab) {
    std::vector<const std::string *> by_id;
    for (auto & kv : vocab) {
        if (kv.second < 0) continue;
        if ((size_t)kv.second >= by_id.size()) by_id.resize((size_t)kv.second + 1, nullptr);
        by_id[(size_t)kv.second] = &kv.first;
    }
    MergeMap merges;
    merges.reserve(vocab.size() * 2);
    int32_t rank = 0;
    std::string l, r;
    for (size_t id = 0; id < by_id.size(); id++) {
        if (!by_id[id]) continue;
        const std::string & tok = *by_id[id];
        // split points at code point boundaries, left part growing
        for (size_t i = 0; i < tok.size();) {
            uni::utf8_next(tok.data(), tok.size(), i);
            if (i >= tok.size()) break;
            l.assign(tok, 0, i);
            r.assign(tok, i, std::string::npos);
            auto il = vocab.find(l);
            if (il == vocab.end()) continue;
            auto ir = vocab.find(r);
            if (ir == vocab.end()) continue;
            merges.insert(il->second, ir->second, rank++, (int32_t)id);
        }
    }
    return merges;
}

}  // namespace tok
}  // namespace exl2
