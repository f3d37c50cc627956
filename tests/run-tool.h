// Running the tools as a user would (from the repository root, where `make test` runs).
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace testfx {

struct Run {
    int status;        // exit status, -1 when killed by a signal
    std::string out;   // stdout and stderr together
};

inline Run run_cmd(const std::string & cmd) {
    Run r;
    FILE * p = popen((cmd + " 2>&1").c_str(), "r");
    REQUIRE(p);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

inline bool have_tool(const char * path) { return access(path, X_OK) == 0; }

inline bool contains(const std::string & s, const std::string & sub) { return s.find(sub) != std::string::npos; }

}  // namespace testfx

#define REQUIRE_TOOL(path)                                                          \
    if (!testfx::have_tool(path)) {                                                 \
        MESSAGE("skipped: " path " not built (run from the repository root after make)"); \
        return;                                                                     \
    }
