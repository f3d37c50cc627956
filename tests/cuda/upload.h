// A host vector copied into fresh device memory (at least one element allocated), for the GPU
// tests that drive kernels directly; the caller frees it with cudaFree.
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

}  // namespace cudatest
