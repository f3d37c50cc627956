#include "api-error.h"

#include "exl2.h"
#include "error.h"

#include <exception>
#include <new>
#include <stdexcept>
#include <string>

namespace {

thread_local std::string g_last_error;

bool contains(const std::string & s, const char * what) { return s.find(what) != std::string::npos; }

int classify(const std::string & msg) {
    if (contains(msg, "cannot open") || contains(msg, "read error") || contains(msg, "No such file"))
        return EXL2_ERR_IO;
    if (contains(msg, "not supported") || contains(msg, "unsupported")) return EXL2_ERR_UNSUPPORTED;
    return EXL2_ERR_FORMAT;
}

}  // namespace

void exl2_api_set_error(const char * msg) {
    try {
        g_last_error = msg ? msg : "";
    } catch (...) {
        // out of memory while copying the message: keep whatever was there
    }
}

int exl2_api_status_from_exception() {
    try {
        throw;
    } catch (const std::bad_alloc &) {
        exl2_api_set_error("out of memory");
        return EXL2_ERR_OUT_OF_MEMORY;
    } catch (const exl2::Error & e) {
        exl2_api_set_error(e.what());
        return classify(e.what());
    } catch (const std::invalid_argument & e) {
        exl2_api_set_error(e.what());
        return EXL2_ERR_INVALID_ARG;
    } catch (const std::out_of_range & e) {
        exl2_api_set_error(e.what());
        return EXL2_ERR_INVALID_ARG;
    } catch (const std::exception & e) {
        exl2_api_set_error(e.what());
        return EXL2_ERR_FORMAT;
    } catch (...) {
        exl2_api_set_error("unknown error");
        return EXL2_ERR_FORMAT;
    }
}

extern "C" const char * exl2_last_error(void) { return g_last_error.c_str(); }
