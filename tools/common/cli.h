// Small helpers shared by the command-line tools: strict number parsing, one-line errors,
// reading files, UTF-8 checks, timing. Tools include only this, include/exl2.h and the
// standard library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct exl2_model;
struct exl2_model_params;

namespace cli {

// Prints "<tool>: error: <message>" to stderr and exits with status 1.
[[noreturn]] void die(const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
void set_tool_name(const char * name);

// Argument cursor: flags with values, strict conversions with messages naming the flag.
class Args {
public:
    Args(int argc, char ** argv) : argc_(argc), argv_(argv) {}
    bool next();                         // advance; false at the end
    const std::string & flag() const { return flag_; }
    std::string value();                 // the flag's value (next argument), dies if missing
    int64_t value_int(int64_t lo, int64_t hi);
    double value_float(double lo, double hi);
    uint64_t value_u64();

private:
    int argc_;
    char ** argv_;
    int i_ = 0;
    std::string flag_;
};

std::string read_file(const std::string & path);      // dies with a message on failure
// Offset of the first byte that is not part of valid UTF-8, or -1.
long utf8_invalid_offset(const std::string & s);
// "1 306 337" -> ids; dies on anything that is not a list of non-negative integers.
std::vector<int32_t> parse_ids(const std::string & s, const char * flag);
double now_seconds();

// The model at dir, or die with the library's message. With device "auto" (the tools' default),
// says on stderr when a GPU was built in but did not answer, so the CPU runs it.
exl2_model * load_model(const std::string & dir, const exl2_model_params & mp);
// "cpu, cuda, cuda:N, hip or auto", with what auto means: the --device help line of the tools
extern const char * const device_help;

}  // namespace cli
