// C API: synthetic models and device facts, for bench and other tools (include/exl2.h).
#include "exl2.h"
#include "api-internal.h"

#include "api-error.h"
#include "error.h"
#include "model.h"
#include "synthetic-model.h"

#include "ggx/ggx-backend.h"

#include <chrono>
#include <memory>

// Defined in api-model.cpp: wraps a loaded model in a C handle (takes ownership of both).

const char * exl2_synthetic_names(void) {
    static const std::string names = exl2::synthetic_names();
    return names.c_str();
}

exl2_model * exl2_model_load_synthetic(const char * name, float bpw, int32_t n_layers, uint64_t seed,
                                       struct exl2_model_params params) {
    try {
        if (!name) exl2::fail("exl2_model_load_synthetic: name is NULL");
        exl2::SyntheticModel sm = exl2::synthetic_build(name, bpw, n_layers, seed);
        const exl2::ModelParams p = exl2_model_params_internal(params);
        auto m = exl2::Model::load_tensors(std::move(sm.st), sm.config, p);
        exl2_model * h = exl2_model_from_internal(std::move(m), nullptr);
        if (!h) exl2::fail("exl2_model_load_synthetic: out of memory");
        return h;
    } catch (...) {
        exl2_api_status_from_exception();
        return nullptr;
    }
}

int exl2_synthetic_save(const char * name, float bpw, int32_t n_layers, uint64_t seed, const char * dir) {
    try {
        if (!name || !dir) exl2::fail("exl2_synthetic_save: name and dir are required");
        exl2::synthetic_save(name, bpw, n_layers, seed, dir);
        return EXL2_OK;
    } catch (...) {
        return exl2_api_status_from_exception();
    }
}

namespace {
struct BackendGuard {
    ggx_backend * be;
    ~BackendGuard() { ggx_backend_free(be); }
};
}  // namespace

int exl2_device_memory(const char * device, uint64_t * free_bytes, uint64_t * total_bytes) {
    try {
        if (!device || !free_bytes || !total_bytes) exl2::fail("exl2_device_memory: invalid argument");
        BackendGuard g{exl2::backend_open(device, 1, nullptr)};
        if (!g.be) exl2::fail("%s", ggx_last_error());
        if (!g.be->iface.memory_info) exl2::fail("exl2_device_memory: %s does not report its memory", device);
        size_t fr = 0, tot = 0;
        g.be->iface.memory_info(g.be, &fr, &tot);
        *free_bytes = fr;
        *total_bytes = tot;
        return EXL2_OK;
    } catch (...) {
        return exl2_api_status_from_exception();
    }
}

double exl2_device_copy_bandwidth(const char * device, uint64_t bytes) {
    try {
        if (!device) exl2::fail("exl2_device_copy_bandwidth: device is NULL");
        if (bytes == 0) bytes = 1ull << 30;
        BackendGuard g{exl2::backend_open(device, 0, nullptr)};
        if (!g.be) exl2::fail("%s", ggx_last_error());
        if (!g.be->iface.copy) exl2::fail("exl2_device_copy_bandwidth: %s has no device copy", device);
        void * a = exl2::backend_alloc(g.be, bytes, "copy bandwidth source");
        void * b = nullptr;
        try {
            b = exl2::backend_alloc(g.be, bytes, "copy bandwidth destination");
        } catch (...) {
            g.be->iface.dealloc(g.be, a);
            throw;
        }
        auto run = [&](int reps) {
            for (int i = 0; i < reps; i++)
                if (g.be->iface.copy(g.be, i % 2 ? a : b, i % 2 ? b : a, bytes) != GGX_STATUS_OK) return false;
            return g.be->iface.synchronize(g.be) == GGX_STATUS_OK;
        };
        g.be->iface.memset(g.be, a, 1, bytes);   // never time untouched memory
        bool ok = run(2);
        const int reps = 10;
        const auto t0 = std::chrono::steady_clock::now();
        ok = ok && run(reps);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const std::string err = ok ? "" : ggx_last_error();
        g.be->iface.dealloc(g.be, a);
        g.be->iface.dealloc(g.be, b);
        if (!ok) exl2::fail("exl2_device_copy_bandwidth: %s", err.c_str());
        return 2.0 * (double)bytes * reps / s;
    } catch (...) {
        return (double)exl2_api_status_from_exception();
    }
}
