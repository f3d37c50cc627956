// C API: tokenizers and streaming detokenization. Every entry point catches all exceptions and
// reports them through exl2_last_error().
#include "exl2.h"

#include "api-error.h"
#include "error.h"
#include "tokenizer/api-handle.h"

#include <climits>
#include <cstring>
#include <memory>
#include <new>

struct exl2_detok_stream {
    const exl2::Tokenizer & tok;
    exl2::StreamDecoder dec;
    std::string out;  // the string returned by the last push/flush
    exl2_detok_stream(const exl2::Tokenizer & t, bool skip) : tok(t), dec(t, skip) {}
};

namespace {

// Copies s into buf as snprintf does; returns the full length or an error code.
int32_t copy_out(const std::string & s, char * buf, int32_t buf_size) {
    if (s.size() > (size_t)INT32_MAX - 1) {
        exl2_api_set_error("output longer than 2 GiB");
        return EXL2_ERR_BUFFER_SMALL;
    }
    if (buf && buf_size > 0) {
        size_t n = std::min(s.size(), (size_t)buf_size - 1);
        std::memcpy(buf, s.data(), n);
        buf[n] = '\0';
    }
    return (int32_t)s.size();
}

bool valid_id(const exl2::Tokenizer & t, int32_t id) { return id >= 0 && id < t.n_vocab(); }

}  // namespace

extern "C" {

exl2_tokenizer * exl2_tokenizer_load(const char * dir) {
    try {
        if (!dir) {
            exl2_api_set_error("exl2_tokenizer_load: dir is NULL");
            return nullptr;
        }
        return exl2_tokenizer_handle(exl2::Tokenizer::load(dir).release());
    } catch (...) {
        exl2_api_status_from_exception();
        return nullptr;
    }
}

void exl2_tokenizer_free(exl2_tokenizer * tok) {
    delete const_cast<exl2::Tokenizer *>(exl2_tokenizer_unwrap(tok));
}

int32_t exl2_tokenize(const exl2_tokenizer * tok, const char * text, int32_t len, int32_t * ids,
                      int32_t max_ids, int add_special, int parse_special) {
    try {
        if (!tok || (!text && len != 0) || max_ids < 0 || (!ids && max_ids > 0)) {
            exl2_api_set_error("exl2_tokenize: invalid argument");
            return EXL2_ERR_INVALID_ARG;
        }
        std::string s = !text ? std::string() : len < 0 ? std::string(text) : std::string(text, (size_t)len);
        std::vector<int32_t> v = exl2_tokenizer_unwrap(tok)->encode(s, add_special != 0, parse_special != 0);
        if (v.size() > (size_t)INT32_MAX) {
            exl2_api_set_error("exl2_tokenize: more than 2^31 tokens");
            return EXL2_ERR_INVALID_ARG;
        }
        size_t n = std::min(v.size(), (size_t)max_ids);
        if (n) std::memcpy(ids, v.data(), n * sizeof(int32_t));
        return (int32_t)v.size();
    } catch (...) {
        return exl2_api_status_from_exception();
    }
}

int32_t exl2_detokenize(const exl2_tokenizer * tok, const int32_t * ids, int32_t n_ids, char * buf,
                        int32_t buf_size, int skip_special) {
    try {
        if (!tok || n_ids < 0 || (!ids && n_ids > 0) || buf_size < 0 || (!buf && buf_size > 0)) {
            exl2_api_set_error("exl2_detokenize: invalid argument");
            return EXL2_ERR_INVALID_ARG;
        }
        const exl2::Tokenizer & t = *exl2_tokenizer_unwrap(tok);
        for (int32_t i = 0; i < n_ids; i++)
            if (!valid_id(t, ids[i])) {
                exl2_api_set_error(exl2::strfmt("exl2_detokenize: id %d at position %d is outside [0, %d)", ids[i], i,
                                                t.n_vocab()).c_str());
                return EXL2_ERR_INVALID_ARG;
            }
        std::vector<int32_t> v(ids, ids + n_ids);
        return copy_out(t.decode(v, skip_special != 0), buf, buf_size);
    } catch (...) {
        return exl2_api_status_from_exception();
    }
}

int32_t exl2_token_to_piece(const exl2_tokenizer * tok, int32_t id, char * buf, int32_t buf_size) {
    try {
        if (!tok || buf_size < 0 || (!buf && buf_size > 0) || !valid_id(*exl2_tokenizer_unwrap(tok), id)) {
            exl2_api_set_error("exl2_token_to_piece: invalid argument");
            return EXL2_ERR_INVALID_ARG;
        }
        return copy_out(exl2_tokenizer_unwrap(tok)->token_to_piece(id), buf, buf_size);
    } catch (...) {
        return exl2_api_status_from_exception();
    }
}

int32_t exl2_tokenizer_n_vocab(const exl2_tokenizer * tok) {
    if (!tok) {
        exl2_api_set_error("exl2_tokenizer_n_vocab: tok is NULL");
        return EXL2_ERR_INVALID_ARG;
    }
    return exl2_tokenizer_unwrap(tok)->n_vocab();
}

int32_t exl2_tokenizer_bos(const exl2_tokenizer * tok) { return tok ? exl2_tokenizer_unwrap(tok)->bos_id() : -1; }
int32_t exl2_tokenizer_eos(const exl2_tokenizer * tok) { return tok ? exl2_tokenizer_unwrap(tok)->eos_id() : -1; }

int exl2_tokenizer_is_special(const exl2_tokenizer * tok, int32_t id) {
    return tok && exl2_tokenizer_unwrap(tok)->is_special(id) ? 1 : 0;
}

const char * exl2_tokenizer_chat_template(const exl2_tokenizer * tok) {
    return tok ? exl2_tokenizer_unwrap(tok)->chat_template().c_str() : "";
}

exl2_detok_stream * exl2_detok_stream_new(const exl2_tokenizer * tok, int skip_special) {
    try {
        if (!tok) {
            exl2_api_set_error("exl2_detok_stream_new: tok is NULL");
            return nullptr;
        }
        return new exl2_detok_stream(*exl2_tokenizer_unwrap(tok), skip_special != 0);
    } catch (...) {
        exl2_api_status_from_exception();
        return nullptr;
    }
}

void exl2_detok_stream_free(exl2_detok_stream * s) { delete s; }

const char * exl2_detok_stream_push(exl2_detok_stream * s, int32_t id) {
    try {
        if (!s) {
            exl2_api_set_error("exl2_detok_stream_push: stream is NULL");
            return nullptr;
        }
        if (!valid_id(s->tok, id)) {
            exl2_api_set_error(exl2::strfmt("exl2_detok_stream_push: id %d is outside [0, %d)", id, s->tok.n_vocab()).c_str());
            return nullptr;
        }
        s->out = s->dec.push(id);
        return s->out.c_str();
    } catch (...) {
        exl2_api_status_from_exception();
        return nullptr;
    }
}

const char * exl2_detok_stream_flush(exl2_detok_stream * s) {
    try {
        if (!s) {
            exl2_api_set_error("exl2_detok_stream_flush: stream is NULL");
            return nullptr;
        }
        s->out = s->dec.flush();
        return s->out.c_str();
    } catch (...) {
        exl2_api_status_from_exception();
        return nullptr;
    }
}

}  // extern "C"
