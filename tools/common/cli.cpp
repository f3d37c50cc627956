#include "cli.h"

#include "exl2.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cli {

static const char * g_tool = "exl2";
void set_tool_name(const char * name) { g_tool = name; }

void die(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: ", g_tool);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

bool Args::next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    return true;
}

std::string Args::value() {
    if (i_ + 1 >= argc_) die("%s needs a value (see --help)", flag_.c_str());
    return argv_[++i_];
}

int64_t Args::value_int(int64_t lo, int64_t hi) {
    const std::string v = value();
    char * end = nullptr;
    errno = 0;
    long long x = strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || errno) die("%s: '%s' is not an integer", flag_.c_str(), v.c_str());
    if (x < lo || x > hi) die("%s: %lld is out of range [%lld, %lld]", flag_.c_str(), x, (long long)lo, (long long)hi);
    return x;
}

double Args::value_float(double lo, double hi) {
    const std::string v = value();
    char * end = nullptr;
    errno = 0;
    double x = strtod(v.c_str(), &end);
    if (v.empty() || *end || errno || !std::isfinite(x)) die("%s: '%s' is not a number", flag_.c_str(), v.c_str());
    if (x < lo || x > hi) die("%s: %g is out of range [%g, %g]", flag_.c_str(), x, lo, hi);
    return x;
}

uint64_t Args::value_u64() {
    const std::string v = value();
    char * end = nullptr;
    errno = 0;
    unsigned long long x = strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end || errno || v[0] == '-') die("%s: '%s' is not a non-negative integer", flag_.c_str(), v.c_str());
    return x;
}

std::string read_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) die("%s: cannot open: %s", path.c_str(), strerror(errno));
    std::stringstream ss;
    ss << f.rdbuf();
    if (f.bad()) die("%s: read error", path.c_str());
    return ss.str();
}

long utf8_invalid_offset(const std::string & s) {
    const unsigned char * p = (const unsigned char *)s.data();
    const size_t n = s.size();
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return (long)i;
        if (i + len > n) return (long)i;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return (long)i;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp < 0xE000))
            return (long)i;
        i += len;
    }
    return -1;
}

std::vector<int32_t> parse_ids(const std::string & s, const char * flag) {
    std::vector<int32_t> ids;
    const char * p = s.c_str();
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char * end = nullptr;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) die("%s: '%s' is not a list of token ids", flag, s.c_str());
        ids.push_back((int32_t)v);
        p = end;
    }
    if (ids.empty()) die("%s: no token ids given", flag);
    return ids;
}

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

exl2_model * load_model(const std::string & dir, const exl2_model_params & mp) {
    exl2_model * m = exl2_model_load(dir.c_str(), mp);
    if (!m) die("%s", exl2_last_error());
    if (*exl2_model_device_note(m)) fprintf(stderr, "%s: %s; running on the CPU\n", g_tool, exl2_model_device_note(m));
    return m;
}

const char * const device_help = "auto (default: the GPU when built with one and it answers, else the CPU), cpu, cuda, cuda:N or hip";

}  // namespace cli
