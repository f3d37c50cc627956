// Knobs of the CUDA backend read from the environment (host code only): measurement switches and
// tuning overrides. One set of rules for every source file, so that "GGX_X=0" and "GGX_X=" mean
// the same thing wherever X is read.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// A switch: set, non-empty and not "0".
inline bool ggx_env_flag(const char * name) {
    const char * v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

// An integer: `def` when unset, atoi's reading otherwise (so an empty value is 0).
inline int ggx_env_int(const char * name, int def) {
    const char * v = getenv(name);
    return v ? atoi(v) : def;
}

// An integer in lo .. hi: `def` when unset, or (with a message naming the variable) out of range.
inline int ggx_env_int_in(const char * name, int lo, int hi, int def) {
    const char * v = getenv(name);
    if (!v) return def;
    const int n = atoi(v);
    if (n >= lo && n <= hi) return n;
    fprintf(stderr, "ggx-cuda: %s=%s: expected %d..%d; using %d\n", name, v, lo, hi, def);
    return def;
}

// The first item of a comma-separated list whose key `name` contains, "" when none: the key is the
// whole item, or with `valued` the part before its last ':' (items without one are skipped). Empty
// keys match nothing. Lists name launches or matrices, e.g. GGX_QGEMV_ROWS_FOR=o_proj:128.
inline std::string ggx_list_match(const std::string & list, const std::string & name, bool valued) {
    for (size_t at = 0; at < list.size();) {
        size_t end = list.find(',', at);
        if (end == std::string::npos) end = list.size();
        const std::string item = list.substr(at, end - at);
        const size_t key_end = valued ? item.rfind(':') : item.size();
        if (key_end != std::string::npos && key_end > 0 && name.find(item.substr(0, key_end)) != std::string::npos) return item;
        at = end + 1;
    }
    return "";
}
