#include "tile-gemv.h"

#include "common.cuh"
#include "exl2-unpack.cuh"
#include "tile-loop.cuh"

#include <algorithm>
#include <cstddef>

namespace {

namespace tl = ggx_tile_loop;

// Shared memory: [x staged for V = 1, 4, 16 (tile-loop.cuh's x_halves)][per step (S, T4, T16)]
// [per chunk (S, T4, T16, first scale of the group: group x Np, as int bits)][the block's unit
// descriptors: read from global memory inside the loop, the one two units ahead was still on its
// way when needed (run 100's profile)].
struct tile_smem {
    size_t xs, step_sums, chunk_sums, desc, total;
};
__host__ __device__ inline tile_smem tile_smem_of(int K, int n_chunks, int max_block_units) {
    tile_smem L;
    L.xs = 0;
    L.step_sums = (tl::x_halves(K) * 2 + 15) & ~(size_t)15;
    L.chunk_sums = L.step_sums + (size_t)(K / 16) * 16;
    L.desc = L.chunk_sums + (size_t)n_chunks * 16;
    L.total = L.desc + (size_t)max_block_units * sizeof(ggx_tile_unit_dev);
    return L;
}

#if !defined(GGX_USE_HIP)   // (the HIP build has no mma.sync: ggx_cuda_tile_gemv returns cudaErrorNotSupported)

constexpr int NT = GGX_TILE_WARPS * GGX_CUDA_WARP;

// y's columns of one tile, added by the lanes t == 0 of a warp (its sums times 2^e: unscaled here).
struct atomic_sink {
    float * y;
    float   unscale;
    __device__ __forceinline__ void operator()(int tile, int g, float lo, float hi) {
        atomicAdd(y + 16 * tile + g, lo * unscale);
        atomicAdd(y + 16 * tile + g + 8, hi * unscale);
    }
};

__global__ void __launch_bounds__(NT, 1) k_tile_gemv(const ggx_tile_matrix m, const float * __restrict__ xq, float * y) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float red[GGX_CUDA_WARP];
    const tile_smem L = tile_smem_of(m.K, m.n_chunks, m.max_block_units);
    half * xs = (half *)(smem + L.xs);
    float4 * step_sums = (float4 *)(smem + L.step_sums);
    float4 * csum = (float4 *)(smem + L.chunk_sums);
    const int tid = threadIdx.x, lane = tid % GGX_CUDA_WARP, warp = tid / GGX_CUDA_WARP;
    const int K = m.K;

    // the warp's first unit's words load first: they do not depend on x
    const int gw = blockIdx.x * GGX_TILE_WARPS + warp;
    const int u0 = ggx_load_ro(m.deal + gw), u1 = ggx_load_ro(m.deal + gw + 1);
    tl::warp_pipe pipe;
    tl::warp_begin(m.words, m.units, u0, u1, lane, pipe);
    // the block's descriptors into shared memory (published by the staging's barriers)
    const int b0 = ggx_load_ro(m.deal + blockIdx.x * GGX_TILE_WARPS), b1 = ggx_load_ro(m.deal + (blockIdx.x + 1) * GGX_TILE_WARPS);
    ggx_tile_unit_dev * desc = (ggx_tile_unit_dev *)(smem + L.desc);
    for (int j = tid; j < b1 - b0; j += NT) ((uint4 *)desc)[j] = ggx_load_ro((const uint4 *)(m.units + b0 + j));
    tl::stage_chunks(m.chunks, m.n_chunks, csum, tid, NT);

    // x: the power of two that takes max |x| into [8, 16), then each step's fragment order per
    // variant with the step and chunk sums
    float am = 0.0f;
    for (int i = tid; i < K; i += NT) am = fmaxf(am, fabsf(xq[i]));
    am = ggx_block_max(am, red);
    const int e = ggx_exl2_unpack::x_scale_exponent(am);
    const float xscale = ldexpf(1.0f, e);
    auto rows = [&](int s, float(&v)[16]) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float4 q = ((const float4 *)xq)[4 * s + j];
            v[4 * j] = q.x * xscale;
            v[4 * j + 1] = q.y * xscale;
            v[4 * j + 2] = q.z * xscale;
            v[4 * j + 3] = q.w * xscale;
        }
    };
    tl::stage_x(K, rows, xs, step_sums, tid, NT, m.variants);
    __syncthreads();
    tl::chunk_sums(m.n_chunks, m.Np, step_sums, csum, tid, NT);
    __syncthreads();

    const tl::warp_src src = {m.words, desc - b0, m.scales, xs, csum, K, m.prefetch};
    atomic_sink sink = {y, ldexpf(1.0f, -e)};
    tl::warp_run(src, u0, u1, lane, pipe, sink);
}

#endif  // !GGX_USE_HIP

// One thread per word of the layout: its uint4 index, lane and component, its unit (binary search
// over the units' offsets, which ascend), then the word through ggx_tile_word.
__global__ void k_tile_gather(const uint32_t * __restrict__ q_weight, int Np, const int4 * __restrict__ step_info,
                              const ggx_tile_unit_dev * __restrict__ units, int n_units, size_t n_words, uint32_t * words, int pair_hd,
                              int pair_half) {
    const size_t w = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= n_words) return;
    const size_t q = w / 128;
    const int lane = (int)(w / 4 % 32), comp = (int)(w % 4);
    int lo = 0, hi = n_units - 1;   // the last unit whose offset <= q
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (units[mid].offset <= q) lo = mid;
        else hi = mid - 1;
    }
    const ggx_tile_unit_dev u = units[lo];
    const int j = (int)(q - u.offset) * 4 + comp;
    auto code_of = [&](int i, int r, int e) {
        const int4 si = step_info[u.step0 + i];
        const int k = 16 * (u.step0 + i) + ggx_tile_row(lane, r, e), n = ggx_tile_src_col(16 * u.tile + ggx_tile_col(lane, r), pair_hd, pair_half);
        return ggx_exl2_code(q_weight, Np, si.x, si.y, k - si.z, n);
    };
    words[w] = ggx_tile_word(u.bits_n_uint4 & 15, u.n_steps, j, code_of);
}

}  // namespace

std::vector<int4> ggx_tile_step_info(const ggx::TileLayout & L) {
    std::vector<int4> r;
    r.reserve(L.step_group.size());
    for (int g : L.step_group) r.push_back(make_int4(L.groups[g].bits, L.groups[g].qrow0, L.groups[g].row0, 0));
    return r;
}

cudaError_t ggx_cuda_tile_gather(const uint32_t * q_weight, int Np, const int4 * step_info, const ggx_tile_unit_dev * units, int n_units,
                                 size_t n_uint4, uint4 * words, cudaStream_t stream, int pair_hd, int pair_half) {
    const size_t n_words = n_uint4 * 32 * 4;
    if (n_words == 0 || n_units < 1) return cudaSuccess;
    k_tile_gather<<<(unsigned)((n_words + 255) / 256), 256, 0, stream>>>(q_weight, Np, step_info, units, n_units, n_words, (uint32_t *)words,
                                                                         pair_hd, pair_half);
    return cudaGetLastError();
}

bool ggx_tile_units(const ggx::TileLayout & L, std::vector<ggx_tile_unit_dev> * units, std::vector<int4> * chunks) {
    if (L.n_tiles > 65535 || L.K / 16 > 65535 || L.chunks.size() > 65535) return false;
    units->clear();
    for (const ggx::TileUnit & u : L.units)
        units->push_back({u.offset, (uint16_t)u.tile, (uint16_t)u.step0, (uint16_t)u.chunk0, u.n_steps, (uint8_t)(u.bits | u.n_uint4 << 4),
                          u.chunk_starts});
    chunks->clear();
    for (const ggx::TileChunk & c : L.chunks) chunks->push_back(make_int4(c.step0, c.n_steps, c.group, 0));
    return true;
}

cudaError_t ggx_cuda_tile_upload(const ggx::TileLayout & L, int grid, ggx_tile_matrix * m) {
    std::vector<ggx_tile_unit_dev> units;
    std::vector<int4> chunks;
    *m = {};
    if (grid < 1 || !ggx_tile_units(L, &units, &chunks)) return cudaErrorInvalidValue;
    const std::vector<int> deal = ggx::tile_layout_deal(L, grid * GGX_TILE_WARPS);
    cudaError_t err = cudaSuccess;
    auto copy = [&](const void * src, size_t bytes, const void ** dst) {
        void * p = nullptr;
        if (err == cudaSuccess) err = cudaMalloc(&p, bytes > 0 ? bytes : 1);
        if (err == cudaSuccess) err = cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice);
        *dst = p;   // (freed with the rest on failure)
    };
    copy(L.words.data(), L.words.size() * sizeof(uint32_t), (const void **)&m->words);
    copy(units.data(), units.size() * sizeof(units[0]), (const void **)&m->units);
    copy(chunks.data(), chunks.size() * sizeof(int4), (const void **)&m->chunks);
    copy(L.scales.data(), L.scales.size() * sizeof(uint16_t), (const void **)&m->scales);
    copy(deal.data(), deal.size() * sizeof(int), (const void **)&m->deal);
    m->K = L.K;
    m->Np = L.Np;
    m->n_chunks = (int)chunks.size();
    m->variants = ggx::tile_layout_variants(L);
    for (int b = 0; b < grid; b++) m->max_block_units = std::max(m->max_block_units, deal[(size_t)(b + 1) * GGX_TILE_WARPS] - deal[(size_t)b * GGX_TILE_WARPS]);
    if (err != cudaSuccess) {
        ggx_cuda_tile_free(*m);
        *m = {};
    }
    return err;
}

void ggx_cuda_tile_free(const ggx_tile_matrix & m) {
    for (const void * p : {(const void *)m.words, (const void *)m.units, (const void *)m.chunks, (const void *)m.scales, (const void *)m.deal})
        if (p) (void)cudaFree((void *)p);
}

size_t ggx_tile_gemv_smem(const ggx_tile_matrix & m) { return tile_smem_of(m.K, m.n_chunks, m.max_block_units).total; }

cudaError_t ggx_cuda_tile_gemv(const ggx_tile_matrix & m, const float * xq, float * y, int grid, cudaStream_t stream) {
#if defined(GGX_USE_HIP)
    (void)m;
    (void)xq;
    (void)y;
    (void)grid;
    (void)stream;
    return cudaErrorNotSupported;   // mma.sync is NVIDIA's
#else
    const size_t smem = ggx_tile_gemv_smem(m);
    cudaError_t err = cudaFuncSetAttribute(k_tile_gemv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return err;
    k_tile_gemv<<<grid, NT, smem, stream>>>(m, xq, y);
    return cudaGetLastError();
#endif
}
