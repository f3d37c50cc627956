// The C API's exl2_tokenizer handle is an exl2::Tokenizer. Code that owns a Tokenizer (the model)
// hands it to C callers with exl2_tokenizer_handle(); exl2_tokenizer_free() deletes it.
#pragma once

#include "exl2.h"
#include "tokenizer.h"

inline exl2_tokenizer * exl2_tokenizer_handle(exl2::Tokenizer * t) { return reinterpret_cast<exl2_tokenizer *>(t); }
inline const exl2::Tokenizer * exl2_tokenizer_unwrap(const exl2_tokenizer * h) {
    return reinterpret_cast<const exl2::Tokenizer *>(h);
}
