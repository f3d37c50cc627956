// Library errors. Inside the library C++ code throws exl2::Error with a one-line message that
// names what is wrong (file, tensor, field, value); the C API catches it at the boundary and
// turns it into a return code plus exl2_last_error().
#pragma once

#include <cstdarg>
#include <stdexcept>
#include <string>

namespace exl2 {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string & msg) : std::runtime_error(msg) {}
};

// printf-style message builder.
std::string strfmt(const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

[[noreturn]] void fail(const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

}  // namespace exl2
