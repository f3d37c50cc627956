// Decode attention on tensor cores (f16 caches): k_attn_decode.
//
// Grid (Hkv, n_splits), 4 warps. A block takes one KV head and one split of the visible keys, for
// every query row that reads that KV head: the rows (t, g) of the T tokens and the G query heads
// of the group, R = T G <= 16 of them, are the 16 rows of one mma.sync tile (the rows past R are
// zero and never written). So S = Q K^T and O += P V are a few m16n8k16 products per 16 keys, and
// the K/V rows are read once for all the heads that share them.
//
// The CUDA-core kernel it replaces for these shapes (k_attn_split) spent its time in latency
// chains: per tile of 32 keys four block barriers, the score shuffles of G heads one after the
// other (1.7 us per tile at G = 4 on the H200, 0.6 at G = 1), the softmax in shared memory. Here
// each warp owns its own tiles of 16 keys (warp w takes tiles w, w + 4, ...), copies them into its
// own shared stages with cp.async (a.stages of them: 2 or 3 tiles in flight) and keeps the
// online-softmax state (m, l, O) in registers, as the prefill kernel does: no block barrier until
// the warps' states are merged at the end. The rows that earlier steps wrote are requested before
// the PDL wait, the rows at pos after it. One split active: the block writes the output itself;
// otherwise it writes (m, l, O) per head and the last block of the KV head merges the splits
// (merge_splits).
#include "attn-common.cuh"
#include "async-copy.cuh"

#include <algorithm>

namespace ggx_cuda_attn {

#if defined(GGX_ATTN_WMMA)
namespace {

constexpr int dm_warps = 4, dm_threads = 32 * dm_warps;
constexpr int dm_bk = 16;     // keys per warp tile
constexpr int dm_rows = 16;   // query rows (t, g) per block: one mma row tile

template <int HD> struct dm_cfg {
    static constexpr int ld = HD + 8;            // halves per shared row: +16 bytes keeps ldmatrix conflict-free
    static constexpr int tile = dm_bk * ld;      // halves per K or V warp tile
    static constexpr size_t q_bytes = sizeof(half) * dm_rows * ld;
    // per warp: `stages` stages of K, V
    static constexpr size_t kv_bytes(int stages) { return sizeof(half) * (size_t)dm_warps * 2 * stages * tile; }
    // after the loop the stages hold the warps' states: O [warps][rows][o_ld], m and l [warps][rows].
    // A warp's float2 store of O writes 8 rows (lanes g = 0..7) x 4 column pairs: with rows HD
    // floats apart (a multiple of 32) all 8 rows fall on the same 8 banks, 8 wavefronts per store
    // and ~0.5 us per layer for the 32 stores of each warp (run 163's B, 0.68 us); HD + 8 floats
    // (8 or 24 banks apart for HD 64-128) spreads them over all 32 banks: 2 wavefronts, the least
    // 256 bytes take.
    static constexpr int o_ld = HD + 8;
    static constexpr size_t merge_bytes = sizeof(float) * (size_t)dm_warps * dm_rows * (o_ld + 2);
    static_assert(merge_bytes <= kv_bytes(2), "the warps' states fit in the K/V stages");
    static constexpr size_t bytes(int stages) { return q_bytes + kv_bytes(stages); }
};

// Eight floats (16-byte aligned) as eight halves.
static __device__ __forceinline__ uint4 f32x8_to_h8(const float * p) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    return make_uint4(pack_h2(a.x, a.y), pack_h2(a.z, a.w), pack_h2(b.x, b.y), pack_h2(b.z, b.w));
}

template <int HD>
__global__ void __launch_bounds__(dm_threads) k_attn_decode(const __grid_constant__ attn_args a) {
    using C = dm_cfg<HD>;
    constexpr int KS = HD / 16;     // k-steps of Q K^T
    constexpr int NT_O = HD / 8;    // n-tiles of O
    constexpr int PR = HD / 8;      // 16-byte pieces per K/V row
    extern __shared__ __align__(128) unsigned char smraw[];
    half * Qs = (half *)smraw;                   // [16][ld]
    half * KV = (half *)(smraw + C::q_bytes);    // warp w, stage s: K at (2 (S w + s)) tile, V after it
    __shared__ float wsum[dm_rows], wmax[dm_rows];
    __shared__ int trace_slot;
    __shared__ unsigned long long warps_end;   // traced: the last warp's loop end (trace point A)
    ggx_trace_begin(a.trace, &trace_slot);
    if (attn_done_in_qkv_tail(a, &trace_slot)) return;

    const int G = a.H / a.Hkv, R = a.T * G;
    const int S = a.stages;   // this warp's tiles i .. i + S - 1 in flight while it works on tile i
    const int kvh = blockIdx.x, split = blockIdx.y;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, tq = lane % 4;
    const half * K = (const half *)a.k;
    const half * V = (const half *)a.v;

    // pos is uploaded before the graph runs: the key range is known before the wait. The block's
    // range is the union over its tokens; each row masks what its own token does not see.
    const int p_last = a.pos[a.T - 1];
    int end = 0, lo0 = 1 << 30, fresh = 1 << 30;
    for (int t = 0; t < a.T; t++) {
        const int pt = a.pos[t], pv = a.non_causal ? p_last : pt;   // pv: its last visible key
        end = max(end, pv + 1);
        lo0 = min(lo0, a.window > 0 ? max(0, pv - a.window + 1) : 0);
        fresh = min(fresh, pt);   // rows at or past it are written by this step's qkv GEMV
    }
    end = min(end, a.C);
    const int chunk = max(a.min_chunk, ((max(end - lo0, 1) + a.n_splits - 1) / a.n_splits + 63) / 64 * 64);
    const int k_lo = lo0 + split * chunk, k_hi = min(end, k_lo + chunk);
    const int n_active = max(1, (end - lo0 + chunk - 1) / chunk);
    if (split >= n_active) {   // no visible keys: the active splits do it all
        ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_EXIT);
        return;
    }
    const int n_tiles = k_hi > k_lo ? (k_hi - k_lo + dm_bk - 1) / dm_bk : 0;
    const int n_mine = n_tiles > warp ? (n_tiles - warp + dm_warps - 1) / dm_warps : 0;   // this warp's tiles

    // this thread's two rows (g and g + 8): their last and first visible key
    int hi_r[2], lo_r[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = g + 8 * i;
        if (r < R) {
            const int pv = a.non_causal ? p_last : a.pos[r / G];   // the window ends at the last visible key
            hi_r[i] = min(pv, k_hi - 1);
            lo_r[i] = a.window > 0 ? pv - a.window + 1 : 0;
        } else {
            hi_r[i] = -1;
            lo_r[i] = 0;
        }
    }

    // copies of the rows [r_lo, r_hi) of this warp's i-th tile; rows past k_hi are zero-filled
    // (an unwritten cache row may hold NaN, and 0 * NaN would poison O). With the q/k/v rows (one
    // query row: fresh is pos), the row at pos comes from them, converted here, and goes into the
    // caches too: the q/k/v GEMV's K-slices added their sums there and stored nothing.
    auto issue = [&](int i, int r_lo, int r_hi, bool zero_tail) {
        const int j0 = k_lo + (warp + dm_warps * i) * dm_bk;
        half * Kd = KV + (size_t)(2 * (S * warp + i % S)) * C::tile;
        half * Vd = Kd + C::tile;
        const int lo = max(r_lo, j0), hi = min(min(r_hi, k_hi), j0 + dm_bk);
        for (int e = lane; e < (hi - lo) * PR; e += 32) {
            const int r = lo + e / PR, c = (e % PR) * 8;
            const size_t off = ((size_t)r * a.Hkv + kvh) * HD + c;
            if (a.rows_k && r >= fresh) {
                const uint4 k8 = f32x8_to_h8(a.rows_k + kvh * HD + c), v8 = f32x8_to_h8(a.rows_v + kvh * HD + c);
                *(uint4 *)(Kd + (r - j0) * C::ld + c) = k8;
                *(uint4 *)(Vd + (r - j0) * C::ld + c) = v8;
                *(uint4 *)((half *)a.k + off) = k8;   // (the caches are written here in this mode only)
                *(uint4 *)((half *)a.v + off) = v8;
                continue;
            }
            ggx_cp_async16(Kd + (r - j0) * C::ld + c, K + off, true);
            ggx_cp_async16(Vd + (r - j0) * C::ld + c, V + off, true);
        }
        if (zero_tail)
            for (int e = lane; e < (j0 + dm_bk - max(k_hi, j0)) * PR; e += 32) {
                const int r = max(k_hi, j0) + e / PR, c = (e % PR) * 8;
                ggx_cp_async16(Kd + (r - j0) * C::ld + c, K, false);
                ggx_cp_async16(Vd + (r - j0) * C::ld + c, V, false);
            }
    };
    for (int i = 0; i < S && i < n_mine; i++) issue(i, k_lo, fresh, true);
    ggx_cp_async_commit();

    // q and the rows at pos come from the previous kernel (the qkv GEMV); the next one (the o
    // GEMV) may start its static loads on the SMs this small grid leaves free
    ggx_pdl_wait();
    ggx_pdl_launch_next();
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_WAITED);
    for (int i = 0; i < S && i < n_mine; i++) issue(i, fresh, 1 << 30, false);
    ggx_cp_async_commit();

    // Q rows (t, g) pre-scaled, in fp16; rows past R are zero. All loads before the stores.
    {
        constexpr int NV = dm_rows * HD / 4, QV = (NV + dm_threads - 1) / dm_threads;   // float4s
        float4 qv[QV];
#pragma unroll
        for (int u = 0; u < QV; u++) {
            const int e = tid + u * dm_threads, r = e / (HD / 4), c = (e % (HD / 4)) * 4;
            qv[u] = e < NV && r < R ? *(const float4 *)(a.q + ((size_t)(r / G) * a.H + kvh * G + r % G) * HD + c)
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < QV; u++) {
            const int e = tid + u * dm_threads, r = e / (HD / 4), c = (e % (HD / 4)) * 4;
            if (e < NV)
                *(uint2 *)(Qs + r * C::ld + c) =
                make_uint2(pack_h2(qv[u].x * a.scale, qv[u].y * a.scale), pack_h2(qv[u].z * a.scale, qv[u].w * a.scale));
        }
    }
    if (ggx_trace_on(a.trace) && tid == 0) warps_end = 0;
    __syncthreads();
    uint32_t qf[KS][4];
#pragma unroll
    for (int kk = 0; kk < KS; kk++) ldsm_x4(qf[kk], smem_addr(Qs + (lane % 16) * C::ld + kk * 16 + (lane / 16) * 8));

    float o[NT_O][4];
#pragma unroll
    for (int nt = 0; nt < NT_O; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_LOOP);

    for (int i = 0; i < n_mine; i++) {
        // Groups committed: tiles 0 .. S-1 in the two before the loop, then one per iteration j (tile
        // j + S, possibly empty). Newer than tile i's: min(i, S - 1) of them; those holding tiles
        // this warp walks stay in flight.
        const int ahead = min(min(i, S - 1), n_mine - 1 - i);
        if (ahead >= 2) ggx_cp_async_wait<2>();
        else if (ahead == 1) ggx_cp_async_wait<1>();
        else ggx_cp_async_wait<0>();
        __syncwarp();
        const int j0 = k_lo + (warp + dm_warps * i) * dm_bk;
        const half * Kd = KV + (size_t)(2 * (S * warp + i % S)) * C::tile;
        const half * Vd = Kd + C::tile;
        // S = Q K^T for 16 keys: two n-tiles of 8 keys
        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t b[4];
            ldsm_x4(b, smem_addr(Kd + (lane % 8 + (lane / 16) * 8) * C::ld + kk * 16 + ((lane / 8) % 2) * 8));
            mma16816(s[0], qf[kk], b[0], b[1]);
            mma16816(s[1], qf[kk], b[2], b[3]);
        }
        if (a.softcap > 0.0f) {
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[nt][e] = a.softcap * tanhf(s[nt][e] / a.softcap);
        }
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = j0 + nt * 8 + 2 * tq + (e & 1), r = e / 2;
                if (j > hi_r[r] || j < lo_r[r]) s[nt][e] = -INFINITY;
            }
        online_softmax_step(s, m_r, l_r, o);
        // O += P V: the S accumulators of the two n-tiles are the A fragment of one k-step
        const uint32_t pa[4] = {pack_h2(s[0][0], s[0][1]), pack_h2(s[0][2], s[0][3]), pack_h2(s[1][0], s[1][1]),
                                pack_h2(s[1][2], s[1][3])};
#pragma unroll
        for (int dp = 0; dp < NT_O / 2; dp++) {
            uint32_t b[4];
            ldsm_x4_t(b, smem_addr(Vd + (lane % 8 + ((lane / 8) % 2) * 8) * C::ld + dp * 16 + (lane / 16) * 8));
            mma16816(o[2 * dp], pa, b[0], b[1]);
            mma16816(o[2 * dp + 1], pa, b[2], b[3]);
        }
        __syncwarp();   // this stage is free: the warp's tile S ahead goes into it
        if (i + S < n_mine) issue(i + S, k_lo, 1 << 30, true);
        ggx_cp_async_commit();
    }
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_LOOP_END);   // warp 0's
    if (ggx_trace_on(a.trace) && lane == 0) atomicMax(&warps_end, (unsigned long long)ggx_trace_now());

    // the warps' states into the (now free) stages: O [warp][row][o_ld], then m and l [warp][row]
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 1);
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 2);
    }
    __syncthreads();   // every warp is done with its stages
    // A: the last warp's loop end, so that a trace tells a warp slower than warp 0 (A past the
    // loop's end) from the merge below (B: states stored, C: weights, then the output stores;
    // run 200 put ~1.5 us between warp 0's loop end and B at ctx 16, not yet placed)
    ggx_trace_stamp_at(a.trace, &trace_slot, GGX_TRACE_A, warps_end);
    float * Os = (float *)KV;
    float * Ms = Os + dm_warps * dm_rows * C::o_ld;
    float * Ls = Ms + dm_warps * dm_rows;
    // Every warp stores its state, all 16 rows: storing only the warps with a tile and the rows < R
    // read, with the scores in two mma chains, lost (session 42's variant leanmerge, run 208, H100,
    // tg128@16 llama3-8b 4.0 458.8 against 460.4 t/s, @4096 -0.6%, llama3.2-1b -0.4%).
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = g + 8 * r;
        float * orow = Os + ((size_t)warp * dm_rows + row) * C::o_ld + 2 * tq;
#pragma unroll
        for (int nt = 0; nt < NT_O; nt++) *(float2 *)(orow + nt * 8) = make_float2(o[nt][2 * r], o[nt][2 * r + 1]);
        if (tq == 0) {
            Ms[warp * dm_rows + row] = m_r[r];
            Ls[warp * dm_rows + row] = l_r[r];
        }
    }
    __syncthreads();
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_B);
    // per row: the common max and each warp's weight e^(m_w - M) (into Ms), the total sum
    if (tid < R) {
        float M = -INFINITY, L = 0.0f;
        for (int w = 0; w < dm_warps; w++) M = fmaxf(M, Ms[w * dm_rows + tid]);
        for (int w = 0; w < dm_warps; w++) {
            const float m = Ms[w * dm_rows + tid];
            const float e = m == -INFINITY ? 0.0f : expf(m - M);
            Ms[w * dm_rows + tid] = e;
            L += e * Ls[w * dm_rows + tid];
        }
        wmax[tid] = M;
        wsum[tid] = L;
    }
    __syncthreads();
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_C);
    const int stride = part_stride(HD);
    for (int e = tid; e < R * HD; e += dm_threads) {
        const int row = e / HD, d = e % HD, t = row / G, h = kvh * G + row % G;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < dm_warps; w++)
            v = fmaf(Ms[w * dm_rows + row], Os[((size_t)w * dm_rows + row) * C::o_ld + d], v);
        if (n_active == 1) {
            const float L = wsum[row];
            a.out[((size_t)t * a.H + h) * HD + d] = L > 0.0f ? v / L : 0.0f;
        } else {
            float * pp = a.part + (((size_t)t * a.H + h) * a.n_splits + split) * stride;
            pp[4 + d] = v;
            if (d == 0) { pp[0] = wmax[row]; pp[1] = wsum[row]; }
        }
    }
    if (n_active == 1) {
        ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_HANDOFF);
        ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_EXIT);
        return;
    }
    // the last active block of this KV head merges the splits of its rows, token by token
    const bool last = arrive_last(a.counters + kvh, n_active);
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_HANDOFF);
    if (last) {
        float * wt = Os;                          // [G][ns]
        float * lt = wt + G * n_active;           // [G][ns]
        float * ms = lt + G * n_active;           // [G]
        float * ls = ms + G;                      // [G]
        for (int t = 0; t < a.T; t++) {
            merge_splits(a, t, kvh * G, G, n_active, wt, lt, ms, ls);
            __syncthreads();   // the scratch is reused by the next token
        }
    }
    ggx_trace_stamp(a.trace, &trace_slot, GGX_TRACE_EXIT);
}

template <int HD>
ggx_status launch(const ggx_cuda_ctx & ctx, const attn_args & args) {
    attn_args a = args;
    // 3 stages need 108.8 KB per block at hd 128: more than sm_86 and sm_89 give one (99 KB)
    if (a.stages != 3 || dm_cfg<HD>::bytes(3) > ctx.smem_optin) a.stages = 2;
    if (dm_cfg<HD>::bytes(a.smem_stages) > ctx.smem_optin) a.smem_stages = 0;
    // At most two blocks per SM, as k_attn_split: the blocks start on the SMs the qkv GEMV frees
    // first, and the scheduler would stack these latency-bound blocks there
    const int smem_stages = std::max(a.stages, a.smem_stages);
    const size_t smem = std::max(dm_cfg<HD>::bytes(smem_stages), std::min(ctx.smem_optin, ctx.smem_per_sm / 3 + 1024));
    static size_t allowed = 48 * 1024;   // raising the dynamic shared memory limit is per kernel
    if (smem > allowed) {
        GGX_CUDA_CHECK(cudaFuncSetAttribute(k_attn_decode<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        allowed = smem;
    }
    void (*kernel)(attn_args) = k_attn_decode<HD>;
    static bool carveout_set = false;   // once per instantiation, as the GEMV's (the registry takes a lock)
    if (!carveout_set) {
        GGX_RETURN_IF_ERR(ggx_cuda_carveout((const void *)kernel, true));
        carveout_set = true;
    }
    return ggx_cuda_launch(ctx, kernel, dim3(a.Hkv, a.n_splits), dim3(dm_threads), smem, a);
}

}  // namespace

bool decode_mma_ok(int hd, int G, int T, int cache_type) {
    return cache_type == GGX_TYPE_F16 && (hd == 64 || hd == 80 || hd == 96 || hd == 128) && T >= 1 && T <= 8 &&
           T * G <= dm_rows;
}

int decode_mma_stages(const attn_args & a) {
    // the kernel's chunk at its largest: every key of the cache visible
    const int ns = std::max(1, a.n_splits);
    const int chunk = std::max(a.min_chunk, ((a.C + ns - 1) / ns + 63) / 64 * 64);
    return chunk > 2 * dm_warps * dm_bk ? 3 : 2;
}

ggx_status decode_mma_launch(const ggx_cuda_ctx & ctx, const attn_args & a) {
    switch (a.hd) {
        case 64:  return launch<64>(ctx, a);
        case 80:  return launch<80>(ctx, a);
        case 96:  return launch<96>(ctx, a);
        default:  return launch<128>(ctx, a);
    }
}
#else
bool decode_mma_ok(int, int, int, int) { return false; }
int decode_mma_stages(const attn_args &) { return 2; }
ggx_status decode_mma_launch(const ggx_cuda_ctx &, const attn_args &) {
    ggx_set_error("cuda: the tensor-core decode attention is not built for this target");
    return GGX_STATUS_FAILED;
}
#endif  // GGX_ATTN_WMMA

}  // namespace ggx_cuda_attn
