// Copies between host vectors and device memory for the GPU tests that drive kernels directly:
// upload into fresh device memory (at least one element allocated; the caller frees it with
// cudaFree), download after the device has finished.
#pragma once

#if defined(GGX_USE_HIP)
#include "backends/hip/hip-compat.h"
#else
#include <cuda_runtime.h>
#endif

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

namespace cudatest {

template <typename T> T * upload(const std::vector<T> & v) {
    void * p = nullptr;
    REQUIRE(cudaMalloc(&p, std::max<size_t>(v.size(), 1) * sizeof(T)) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
    return (T *)p;
}

// The first n elements at p once the device is idle (a kernel's failure is reported here).
template <typename T> std::vector<T> download(const T * p, size_t n) {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<T> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
}

}  // namespace cudatest
