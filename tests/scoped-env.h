// An environment variable set (or unset, with a null value) for one scope, and what was there
// before put back when the scope ends, also when a REQUIRE throws out of it: a knob one test
// case turns on must not leak into the cases after it.
#pragma once

#include <cstdlib>
#include <string>

class ScopedEnv {
public:
    ScopedEnv(const char * name, const char * value) : name_(name) {
        const char * old = getenv(name);
        had_ = old != nullptr;
        if (had_) old_ = old;
        if (value) setenv(name, value, 1);
        else unsetenv(name);
    }
    ~ScopedEnv() {
        if (had_) setenv(name_.c_str(), old_.c_str(), 1);
        else unsetenv(name_.c_str());
    }
    ScopedEnv(const ScopedEnv &) = delete;
    ScopedEnv & operator=(const ScopedEnv &) = delete;

private:
    std::string name_, old_;
    bool had_ = false;
};
