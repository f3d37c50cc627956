// Backend selection by name and the convenience wrappers of ggx-backend.h.
#include "ggx-backend.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

struct ggx_backend * ggx_backend_init(const char * name, int n_threads) {
    if (!name) {
        ggx_set_error("ggx_backend_init: no backend name given (try \"cpu\")");
        return nullptr;
    }
    if (strcmp(name, "cpu") == 0) return ggx_backend_cpu_init(n_threads);

    // "cuda", "cuda:N", "hip", "hip:N"
    const char * rest = nullptr;
    if (strncmp(name, "cuda", 4) == 0) rest = name + 4;
    else if (strncmp(name, "hip", 3) == 0) rest = name + 3;
    if (!rest || (*rest != '\0' && *rest != ':')) {
        ggx_set_error("ggx_backend_init: unknown backend '%s' (compiled in: %s)", name, ggx_backend_list());
        return nullptr;
    }
    long device = 0;
    if (*rest == ':') {
        char * end = nullptr;
        errno = 0;
        device = strtol(rest + 1, &end, 10);
        if (end == rest + 1 || *end != '\0' || errno || device < 0 || device > 1024) {
            ggx_set_error("ggx_backend_init: bad device index in '%s' (expected e.g. cuda:0)", name);
            return nullptr;
        }
    }
#ifdef GGX_USE_CUDA
    return ggx_backend_cuda_init((int)device);
#else
    ggx_set_error("backend '%s' not compiled in (rebuild with nvcc installed, or HIP=1 with hipcc)", name);
    return nullptr;
#endif
}

void ggx_backend_free(struct ggx_backend * be) {
    if (be && be->iface.free) be->iface.free(be);
}

int ggx_backend_gpu_built(void) {
#ifdef GGX_USE_CUDA
    return 1;
#else
    return 0;
#endif
}

const char * ggx_backend_list(void) {
#if defined(GGX_USE_HIP)
    return "cpu,hip";   // "cuda" names the same backend
#elif defined(GGX_USE_CUDA)
    return "cpu,cuda";
#else
    return "cpu";
#endif
}

// Checks that [offset, offset + n) lies inside t's data; sets the error naming `what` if not.
static int check_range(const struct ggx_backend * be, const struct ggx_tensor * t, size_t offset, size_t n,
                       const char * what) {
    if (!be || !t) {
        ggx_set_error("%s: null backend or tensor", what);
        return 0;
    }
    if (!t->data) {
        ggx_set_error("%s: tensor '%s' has no data (not allocated or bound)", what, t->name);
        return 0;
    }
    const size_t size = ggx_nbytes(t);
    if (size == 0) {
        ggx_set_error("%s: tensor '%s' of type %s has no plain byte size (quantized or empty)", what, t->name,
                      ggx_type_name(t->type));
        return 0;
    }
    if (offset > size || n > size - offset) {
        ggx_set_error("%s: range [%zu, %zu + %zu) is outside tensor '%s' of %zu bytes", what, offset, offset, n,
                      t->name, size);
        return 0;
    }
    return 1;
}

enum ggx_status ggx_backend_tensor_set(struct ggx_backend * be, struct ggx_tensor * t, const void * src, size_t offset,
                                       size_t n) {
    if (!check_range(be, t, offset, n, "ggx_backend_tensor_set")) return GGX_STATUS_FAILED;
    if (n == 0) return GGX_STATUS_OK;
    return be->iface.set(be, (char *)t->data + offset, src, n);
}

enum ggx_status ggx_backend_tensor_get(struct ggx_backend * be, const struct ggx_tensor * t, void * dst, size_t offset,
                                       size_t n) {
    if (!check_range(be, t, offset, n, "ggx_backend_tensor_get")) return GGX_STATUS_FAILED;
    if (n == 0) return GGX_STATUS_OK;
    return be->iface.get(be, dst, (const char *)t->data + offset, n);
}

enum ggx_status ggx_backend_graph_compute(struct ggx_backend * be, struct ggx_graph * g) {
    if (!be || !g) {
        ggx_set_error("ggx_backend_graph_compute: null backend or graph");
        return GGX_STATUS_FAILED;
    }
    return be->iface.graph_compute(be, g);
}

enum ggx_status ggx_backend_synchronize(struct ggx_backend * be) {
    if (!be) {
        ggx_set_error("ggx_backend_synchronize: null backend");
        return GGX_STATUS_FAILED;
    }
    return be->iface.synchronize ? be->iface.synchronize(be) : GGX_STATUS_OK;
}

enum ggx_status ggx_backend_set_deterministic(struct ggx_backend * be, int on) {
    if (!be) {
        ggx_set_error("ggx_backend_set_deterministic: null backend");
        return GGX_STATUS_FAILED;
    }
    return be->iface.set_deterministic ? be->iface.set_deterministic(be, on) : GGX_STATUS_OK;
}

int ggx_backend_can_read_ahead(const struct ggx_backend * be) {
    return be && be->iface.get_begin && be->iface.get_end;
}

enum ggx_status ggx_backend_tensor_get_begin(struct ggx_backend * be, const struct ggx_tensor * t, size_t offset,
                                             size_t n) {
    if (!check_range(be, t, offset, n, "ggx_backend_tensor_get_begin")) return GGX_STATUS_FAILED;
    if (!ggx_backend_can_read_ahead(be)) {
        ggx_set_error("ggx_backend_tensor_get_begin: backend '%s' has no mailbox reads", be->name);
        return GGX_STATUS_FAILED;
    }
    if (n > GGX_BACKEND_MAILBOX_BYTES) {
        ggx_set_error("ggx_backend_tensor_get_begin: %zu bytes of '%s' do not fit the %d-byte mailbox", n, t->name,
                      GGX_BACKEND_MAILBOX_BYTES);
        return GGX_STATUS_FAILED;
    }
    return be->iface.get_begin(be, (const char *)t->data + offset, n);
}

enum ggx_status ggx_backend_tensor_get_end(struct ggx_backend * be, void * dst, size_t n) {
    if (!ggx_backend_can_read_ahead(be) || n > GGX_BACKEND_MAILBOX_BYTES) {
        ggx_set_error("ggx_backend_tensor_get_end: no mailbox read of %zu bytes on this backend", n);
        return GGX_STATUS_FAILED;
    }
    return be->iface.get_end(be, dst, n);
}
