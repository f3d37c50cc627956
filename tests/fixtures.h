// Locating reference data. Fixtures live in ../shared/fixtures beside the checkout (CI lays it
// there) or wherever EXL2_FIXTURES points. Tests that need them call fixture_path(); when the
// folder is missing they fail loudly in CI (CI=true) and skip with a message elsewhere.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <sys/stat.h>

namespace testfx {

inline bool path_exists(const std::string & p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0;
}

inline std::string fixtures_root() {
    if (const char * env = std::getenv("EXL2_FIXTURES")) return env;
    for (const char * c : {"../shared/fixtures", "../../shared/fixtures", "shared/fixtures"})
        if (path_exists(c)) return c;
    return "";
}

// Full path of a fixture file or folder, or "" when unavailable.
inline std::string fixture(const std::string & rel) {
    std::string root = fixtures_root();
    if (root.empty()) return "";
    std::string p = root + "/" + rel;
    return path_exists(p) ? p : "";
}

inline bool in_ci() {
    const char * ci = std::getenv("CI");
    return ci && *ci && std::string(ci) != "0" && std::string(ci) != "false";
}

}  // namespace testfx

// Use at the top of a test case: binds `var` to the fixture path or skips / fails.
#define REQUIRE_FIXTURE(var, rel)                                                         \
    const std::string var = testfx::fixture(rel);                                         \
    if (var.empty()) {                                                                    \
        if (testfx::in_ci()) FAIL("fixture missing: " << rel << " (set EXL2_FIXTURES)"); \
        MESSAGE("skipped: fixture missing: " << rel);                                     \
        return;                                                                           \
    }
