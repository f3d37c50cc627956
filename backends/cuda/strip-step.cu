#include "strip-step.h"

#include "activation.cuh"
#include "common.cuh"
#include "async-copy.cuh"
#include "exl2-unpack.cuh"
#include "trace.cuh"

using namespace ggx_exl2_unpack;

namespace {

constexpr int NT = GGX_STRIP_WARPS * GGX_CUDA_WARP;
static_assert(GGX_CUDA_WARP == 32, "a unit is 32 slices, one per lane");

__host__ __device__ inline size_t align16(size_t v) { return (v + 15) & ~(size_t)15; }

__device__ __forceinline__ ggx_strip_unit load_unit(const ggx_strip_unit * p) {
    const uint4 v = ggx_load_ro((const uint4 *)p);
    return {v.x, v.y, v.z, v.w};
}

// The lane's slice of one unit: sum over its 32 rows of (q - z) x per column, in fp16 pairs.
template <int B> __device__ __forceinline__ float4 slice_dot(const uint4 (&w)[8], const half * xs) {
    half2 s[1][4];
#pragma unroll
    for (int c = 0; c < 4; c++) s[0][c] = __float2half2_rn(0.0f);
    piece_dot<B, 1>(w, 32, xs, 0, s);
    return make_float4(__low2float(s[0][0]) + __high2float(s[0][0]), __low2float(s[0][1]) + __high2float(s[0][1]),
                       __low2float(s[0][2]) + __high2float(s[0][2]), __low2float(s[0][3]) + __high2float(s[0][3]));
}

// A warp's units, their descriptors held one per lane in batches of 32 and broadcast with
// shuffles, so that no descriptor load stands in front of a unit's word loads.
struct unit_batch {
    ggx_strip_unit mine;   // descriptor of unit base + lane
    int base;
    __device__ __forceinline__ void load(const ggx_strip_unit * units, int b, int e, int lane) {
        base = b;
        mine = b + lane < e ? load_unit(units + b + lane) : ggx_strip_unit{};
    }
    // reloads (uniformly) unless units i .. i + ahead are in the batch
    __device__ __forceinline__ void cover(const ggx_strip_unit * units, int i, int ahead, int e, int lane) {
        if (i + ahead - base >= 32) load(units, i, e, lane);
    }
    // unit i's descriptor (i in base .. base + 31), in every lane
    __device__ __forceinline__ ggx_strip_unit get(int i) const {
        const int src = i - base;
        return {__shfl_sync(0xffffffffu, mine.offset, src), __shfl_sync(0xffffffffu, mine.quad, src),
                __shfl_sync(0xffffffffu, mine.slice0, src), __shfl_sync(0xffffffffu, mine.bits_lanes, src)};
    }
};

// A warp's running sums of its current quad (registers), added into the block's column sums in
// shared memory when the quad changes: one warp reduction per quad, not per unit.
struct quad_sums {
    float4 acc;
    int    cur;   // quad the sums belong to
    int    q0;    // the strip's first quad
    float * colsum;
    __device__ __forceinline__ void flush(int lane) {
        const float v = ggx_warp_sum4(acc);
        if (lane % 8 == 0) atomicAdd(colsum + (cur - q0) * 4 + lane / 8, v);
        acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    __device__ __forceinline__ void add(int quad, float4 v, uint2 s, int lane) {
        if (quad != cur) {   // uniform: the unit is the warp's
            flush(lane);
            cur = quad;
        }
        const float2 s01 = __half22float2(u32_as_half2(s.x)), s23 = __half22float2(u32_as_half2(s.y));
        acc.x += v.x * s01.x;
        acc.y += v.y * s01.y;
        acc.z += v.z * s23.x;
        acc.w += v.w * s23.y;
    }
};

// A unit's words into L2 ([bits][lanes] uint4, contiguous).
__device__ __forceinline__ void prefetch_unit(const ggx_strip_matrix & m, const ggx_strip_unit & u) {
    ggx_prefetch_l2(m.words + u.offset, (u.bits_lanes & 0xffu) * (u.bits_lanes >> 8) * 16u);
}

// This lane's scales of unit u (0 in idle lanes, so that they add 0 x 0, never 0 x garbage).
// grp: the slice groups in shared memory, so that the scale load depends on no global load.
__device__ __forceinline__ uint2 unit_scales(const ggx_strip_matrix & m, const int * grp, const ggx_strip_unit & u, int lane) {
    if (lane >= (int)(u.bits_lanes >> 8)) return make_uint2(0, 0);
    return ggx_load_ro((const uint2 *)(m.scales + (size_t)grp[u.slice0 + lane] * m.Np + 4 * u.quad));
}

// Units a .. e - 1 of matrix m, all of width B, of the warp's range that ends at `end`. D units'
// words in flight in registers (static slots: the loop body is unrolled D times, each slot
// refilled right after its multiply); the scales one unit ahead (their load waited behind the
// multiply, and was the largest stall at depth 1: run 89); with pf > 0, the words of unit i + pf
// asked of L2 while unit i multiplies.
template <int B, int D>
__device__ __forceinline__ void run_width(const ggx_strip_matrix & m, const half * xs, int xs_ld, const int * grp, int a, int e,
                                          int end, int pf, int lane, unit_batch & batch, quad_sums & qs) {
    uint4 w[D][8];
    uint32_t quad[D], sl[D];   // per slot: the unit's quad, and slice0 | lanes << 24
    const int ahead = 2 * D + pf;
    batch.cover(m.units, a, ahead, end, lane);
    auto fetch = [&](int d, int i) {   // unit i into slot d
        const ggx_strip_unit u = batch.get(i);
        const int lanes = u.bits_lanes >> 8;
        quad[d] = u.quad;
        sl[d] = u.slice0 | (uint32_t)lanes << 24;
        if (lane >= lanes) return;
        const uint4 * p = m.words + u.offset + lane;
#pragma unroll
        for (int r = 0; r < B; r++) w[d][r] = ggx_load_ro(p + (size_t)r * lanes);
    };
#pragma unroll
    for (int d = 0; d < D; d++)
        if (a + d < e) fetch(d, a + d);
    uint2 sc = unit_scales(m, grp, batch.get(a), lane);
    for (int i = a; i < e; i += D) {
        batch.cover(m.units, i, ahead, end, lane);
#pragma unroll
        for (int d = 0; d < D; d++) {
            if (i + d >= e) break;
            const int uq = (int)quad[d];
            const uint2 sc_next = i + d + 1 < e ? unit_scales(m, grp, batch.get(i + d + 1), lane) : make_uint2(0, 0);
            if (pf > 0 && i + d + pf < end) {   // (its range may go on in another width)
                const ggx_strip_unit u = batch.get(i + d + pf);
                if (lane == 0) prefetch_unit(m, u);
            }
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (lane < (int)(sl[d] >> 24)) v = slice_dot<B>(w[d], xs + ((sl[d] & 0xffffffu) + lane) * xs_ld);
            if (i + d + D < e) fetch(d, i + d + D);
            qs.add(uq, v, sc, lane);
            sc = sc_next;
        }
    }
}

// The ring form (ggx_strip_step::ring): units a .. e - 1 of width B streamed through this warp's
// R slots of shared memory with cp.async, R - 1 units in flight while one multiplies, no
// registers held by the copies (the register form spills past one unit in flight, run 85). A
// lane copies and later reads only its own slice's words, so no barrier is needed between
// them. The scales run a step ahead in registers: unit i + 1's load while unit i multiplies.
constexpr int k_ring_bytes = 8192;   // per warp: R = 16 / B slots of B x 512 bytes

template <int B, int R>
__device__ __forceinline__ void run_width_ring(const ggx_strip_matrix & m, const half * xs, int xs_ld, const int * grp, int a, int e, int end,
                                               int lane, unit_batch & batch, quad_sums & qs, uint4 * ring) {
    static_assert(R >= 2 && R * B * 512 <= k_ring_bytes, "ring slots");
    batch.cover(m.units, a, R, end, lane);
    auto issue = [&](int i) {   // unit i's words into slot i % R; always one commit group
        if (i < e) {
            const ggx_strip_unit u = batch.get(i);
            const int lanes = u.bits_lanes >> 8;
            const uint4 * p = m.words + u.offset + lane;
            uint4 * slot = ring + (size_t)(i % R) * B * 32 + lane;
#pragma unroll
            for (int r = 0; r < B; r++) ggx_cp_async16(slot + r * 32, p + (size_t)r * lanes, lane < lanes);
        }
        ggx_cp_async_commit();
    };
#pragma unroll
    for (int j = 0; j < R - 1; j++) issue(a + j);
    uint2 sc = unit_scales(m, grp, batch.get(a), lane);
    for (int i = a; i < e; i++) {
        batch.cover(m.units, i, R, end, lane);   // keeps i .. i + R in the batch
        issue(i + R - 1);
        const uint2 sc_next = i + 1 < e ? unit_scales(m, grp, batch.get(i + 1), lane) : make_uint2(0, 0);
        ggx_cp_async_wait<R - 1>();   // unit i's group is in
        const ggx_strip_unit u = batch.get(i);
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (lane < (int)(u.bits_lanes >> 8)) {
            uint4 w[8];
            const uint4 * slot = ring + (size_t)(i % R) * B * 32 + lane;
#pragma unroll
            for (int r = 0; r < B; r++) w[r] = slot[r * 32];
            v = slice_dot<B>(w, xs + (u.slice0 + lane) * xs_ld);
        }
        qs.add((int)u.quad, v, sc, lane);
        sc = sc_next;
    }
}

// This warp's share of one matrix in one stage. The tables it comes from do not depend on any
// stage's results, so it is read before the stage's wait into shared memory: read after it, its
// chain of dependent loads (deal, then the units' descriptors) stood in front of every matrix's
// first words (~2 L2 round trips per warp and matrix; per-warp setup was ~20% of the stall
// samples, run 90).
struct warp_plan {
    int            u0, u1;                          // its units
    int            q0, q1;                          // the strip's first and last quad (q1 < q0: no units)
    int            wu[GGX_EXL2_N_WIDTHS + 1];       // where each width's units start in the strip
    int            pad1;
    ggx_strip_unit first[GGX_CUDA_WARP];            // descriptors u0 .. u0 + 31 (zero past u1)
};
static_assert(sizeof(warp_plan) % 16 == 0, "warp plans are 16-byte aligned");

__device__ __forceinline__ void plan_load(const ggx_strip_matrix & m, int b, int warp, int lane, int pf, warp_plan & P) {
    const int * deal = m.deal + (size_t)b * (GGX_STRIP_WARPS + 1);
    const int u0 = ggx_load_ro(deal + warp), u1 = ggx_load_ro(deal + warp + 1);
    const int d0 = ggx_load_ro(deal), d1 = ggx_load_ro(deal + GGX_STRIP_WARPS);
    const int wu = lane <= GGX_EXL2_N_WIDTHS ? ggx_load_ro(m.width_unit0 + (size_t)b * (GGX_EXL2_N_WIDTHS + 1) + lane) : 0;
    const ggx_strip_unit u = u0 + lane < u1 ? load_unit(m.units + u0 + lane) : ggx_strip_unit{};
    if (lane < pf && u0 + lane < u1) prefetch_unit(m, u);   // the first pf units' words into L2
    if (lane == 0) {
        P.u0 = u0;
        P.u1 = u1;
        // (units run width by width, each width over all of the strip's quads: the first unit
        // holds the strip's first quad, the last unit its last)
        P.q0 = d0 < d1 ? (int)load_unit(m.units + d0).quad : 0;
        P.q1 = d0 < d1 ? (int)load_unit(m.units + d1 - 1).quad : -1;
    }
    if (lane <= GGX_EXL2_N_WIDTHS) P.wu[lane] = wu;
    P.first[lane] = u;
}

// One warp's dealt units of matrix m in strip b (plan P), summed into colsum[(quad - strip's
// first quad) * 4 + c]. A strip's units run width by width, so the warp's range splits into at
// most 6 runs of one width.
template <bool RING, int DLO>
__device__ __forceinline__ void run_units(const ggx_strip_matrix & m, const warp_plan & P, const half * xs, int xs_ld, const int * grp,
                                          float * colsum, int lane, int pf, uint4 * ring) {
    const int u0 = P.u0, u1 = P.u1;
    if (u0 >= u1) return;
    unit_batch batch;
    batch.base = u0;
    batch.mine = P.first[lane];
    quad_sums qs;
    qs.acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    qs.q0 = P.q0;
    qs.cur = (int)batch.get(u0).quad;
    qs.colsum = colsum;
#pragma unroll 1
    for (int r = 0; r < GGX_EXL2_N_WIDTHS; r++) {
        const int a = max(u0, P.wu[r]), e = min(u1, P.wu[r + 1]);
        if (a >= e) continue;
        if constexpr (RING) {
            switch (r) {   // ggx_exl2_widths order; slots: 16 / B, at least 2
                case 0: run_width_ring<8, 2>(m, xs, xs_ld, grp, a, e, u1, lane, batch, qs, ring); break;
                case 1: run_width_ring<6, 2>(m, xs, xs_ld, grp, a, e, u1, lane, batch, qs, ring); break;
                case 2: run_width_ring<5, 3>(m, xs, xs_ld, grp, a, e, u1, lane, batch, qs, ring); break;
                case 3: run_width_ring<4, 4>(m, xs, xs_ld, grp, a, e, u1, lane, batch, qs, ring); break;
                case 4: run_width_ring<3, 5>(m, xs, xs_ld, grp, a, e, u1, lane, batch, qs, ring); break;
                default: run_width_ring<2, 8>(m, xs, xs_ld, grp, a, e, u1, lane, batch, qs, ring); break;
            }
        } else {
            switch (r) {   // ggx_exl2_widths order
                case 0: run_width<8, 1>(m, xs, xs_ld, grp, a, e, u1, pf, lane, batch, qs); break;
                case 1: run_width<6, 1>(m, xs, xs_ld, grp, a, e, u1, pf, lane, batch, qs); break;
                case 2: run_width<5, 1>(m, xs, xs_ld, grp, a, e, u1, pf, lane, batch, qs); break;
                case 3: run_width<4, DLO>(m, xs, xs_ld, grp, a, e, u1, pf, lane, batch, qs); break;
                case 4: run_width<3, DLO>(m, xs, xs_ld, grp, a, e, u1, pf, lane, batch, qs); break;
                default: run_width<2, DLO>(m, xs, xs_ld, grp, a, e, u1, pf, lane, batch, qs); break;
            }
        }
    }
    qs.flush(lane);
}

// Norm weights 4 i .. 4 i + 3 (rows of 16-byte aligned f32, 8-byte aligned f16 / bf16).
__device__ __forceinline__ float4 load_norm_w4(const void * p, int type, int i) {
    switch (type) {
        case GGX_TYPE_F16: {
            const uint2 u = ggx_load_ro((const uint2 *)p + i);
            const float2 a = __half22float2(u32_as_half2(u.x)), b = __half22float2(u32_as_half2(u.y));
            return make_float4(a.x, a.y, b.x, b.y);
        }
        case GGX_TYPE_BF16: {
            const uint2 u = ggx_load_ro((const uint2 *)p + i);
            return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                               __uint_as_float(u.y & 0xffff0000u));
        }
        default: return ggx_load_ro((const float4 *)p + i);
    }
}

// Grid-wide hand-off between stages, as cooperative groups' grid sync does it: the block's
// writes, then one fenced arrival; a waiting block polls the count, fences, and its reads of the
// other blocks' results go past L1 (ggx_load_cg).
__device__ __forceinline__ void grid_arrive(int * counter) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(counter, 1);
    }
}
__device__ __forceinline__ void grid_wait(int * counter, int target) {
    if (threadIdx.x == 0) {
        while (*(volatile int *)counter < target) {
        }
        __threadfence();
    }
    __syncthreads();
}

// A stage's shared memory: [region 0][x in fp16 per matrix][slice groups per matrix][warp plans]
// [column sums]. Region 0 holds x w (fp32) and each matrix's inverse permutation during the
// staging and then, in the ring form, the warps' rings. x takes xs_ld halves per 32-row slice (40
// with xpad). The kernel and ggx_strip_stage_smem both read it from here.
struct stage_smem {
    int    xs_ld;
    size_t xs_n;     // halves of one matrix's x
    size_t perm;     // byte offsets: int [n_mat][K] (in region 0, after x w)
    size_t xs;
    size_t grp;      // int [n_mat][K / 32]
    size_t plan;     // warp_plan [n_mat][GGX_STRIP_WARPS]
    size_t colsum;
    size_t total;
};
__host__ __device__ inline stage_smem stage_smem_of(int n_mat, int K, int max_quads, const ggx_strip_form & form) {
    stage_smem L;
    L.xs_ld = form.xpad ? 40 : 32;
    L.xs_n = (size_t)(K / 32) * L.xs_ld;
    L.perm = align16((size_t)K * 4);
    const size_t staging = L.perm + (size_t)n_mat * K * 4, rings = form.ring ? (size_t)GGX_STRIP_WARPS * k_ring_bytes : 0;
    L.xs = align16(staging > rings ? staging : rings);
    L.grp = align16(L.xs + (size_t)n_mat * L.xs_n * 2);
    L.plan = align16(L.grp + (size_t)n_mat * (K / 32) * 4);
    L.colsum = L.plan + (size_t)n_mat * GGX_STRIP_WARPS * sizeof(warp_plan);
    L.total = L.colsum + (size_t)n_mat * max_quads * 16;
    return L;
}

// What a stage needs that no stage's results change, into shared memory: each matrix's inverse
// permutation and slice groups, this warp's plans, zeroed column sums; and the first pf units'
// words of each warp into L2. Runs before the stage's wait (the previous stage has left shared
// memory: its end has a block barrier).
__device__ __forceinline__ void stage_static(const ggx_strip_stage & S, const stage_smem & L, unsigned char * smem, int b, int t,
                                             int warp, int lane, int pf) {
    const int K4 = S.K / 4, G = S.K / 32;
    for (int mi = 0; mi < S.n_mat; mi++) {
        const int * inv = S.m[mi].inv_perm;
        int4 * perm = (int4 *)(smem + L.perm) + (size_t)mi * K4;
#pragma unroll 4
        for (int i = t; i < K4; i += NT) perm[i] = inv ? ggx_load_ro((const int4 *)inv + i) : make_int4(4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3);
        int * grp = (int *)(smem + L.grp) + (size_t)mi * G;
        for (int i = t; i < G; i += NT) grp[i] = ggx_load_ro(S.m[mi].slice_group + i);
    }
    float * colsum = (float *)(smem + L.colsum);
    for (int i = t; i < S.n_mat * S.m[0].max_quads * 4; i += NT) colsum[i] = 0.0f;
    if (b < S.m[0].n_strips) {
        warp_plan * plans = (warp_plan *)(smem + L.plan);
        for (int mi = 0; mi < S.n_mat; mi++) plan_load(S.m[mi], b, warp, lane, pf, plans[mi * GGX_STRIP_WARPS + warp]);
    }
}

template <bool RING, int DLO>
__global__ void __launch_bounds__(NT, 1) k_strip_step(const __grid_constant__ ggx_strip_step s, const ggx_trace_dev tr) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float red[2][GGX_CUDA_WARP];
    __shared__ int trace_slot;
    ggx_trace_begin(tr, &trace_slot);
    const int b = blockIdx.x, t = threadIdx.x, lane = t % GGX_CUDA_WARP, warp = t / GGX_CUDA_WARP;
    const int pf = s.form.prefetch;
    for (int si = 0; si < s.n_stages; si++) {
        const ggx_strip_stage & S = s.st[si];
        const stage_smem sl = stage_smem_of(S.n_mat, S.K, S.m[0].max_quads, s.form);
        stage_static(S, sl, smem, b, t, warp, lane, pf);
        if (si == 0) {
            // Launched with PDL after the attention kernel: this block may start on an SM
            // attention has left, before attention's results are complete. The grid counter is
            // safe with that: no block waits for another before stage 0 ends, and attention never
            // waits for this kernel.
            ggx_pdl_wait();
            ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_WAITED);
            if (s.n_stages == 1) ggx_pdl_launch_next();
        } else {
            grid_wait(s.counter, si * (int)gridDim.x);
            // every block of this grid is resident now: the next kernel may launch, its blocks
            // taking the SMs this grid leaves (they wait for its completion before reading)
            if (si == s.n_stages - 1) ggx_pdl_launch_next();
            if (si == s.n_stages - 1 && t == 0 && atomicAdd(s.counter, 1) == s.n_stages * (int)gridDim.x - 1)
                atomicExch(s.counter, 0);   // every block is past its last wait: ready for the next launch
        }
        const int xs_ld = sl.xs_ld;
        const size_t xs_n = sl.xs_n;
        float * xw = (float *)smem;                                      // [K] x times the norm weights
        const int4 * perm = (const int4 *)(smem + sl.perm);              // [n_mat][K]: inverse permutations
        uint4 * ring = (uint4 *)(smem + (size_t)warp * k_ring_bytes);  // (RING) this warp's slots, after the staging
        half * xs = (half *)(smem + sl.xs);                              // [n_mat][K / 32][xs_ld]
        const int * grp = (const int *)(smem + sl.grp);                  // [n_mat][K / 32]
        const warp_plan * plans = (const warp_plan *)(smem + sl.plan);   // [n_mat][GGX_STRIP_WARPS]
        float * colsum = (float *)(smem + sl.colsum);                    // [n_mat][max_quads * 4]
        const int cs_ld = S.m[0].max_quads * 4;

        // x: sum of squares (RMS norm) and max |x w| in one pass that keeps x w in shared memory,
        // then x w / rms times the power of two of x_scale_exponent, in fp16 to each matrix's
        // quantized row order. Four values per load and four
        // loads in flight per thread: a load per element in a loop put ~2 x K / 512 L2 round
        // trips in a row in front of every stage (~13 us for K = 14336, run 84).
        float ss = 0.0f, am = 0.0f;
        const int K4 = S.K / 4;
#pragma unroll 4
        for (int i = t; i < K4; i += NT) {
            const float4 v = ggx_load_cg((const float4 *)S.x + i);
            const float4 w = S.norm_w ? load_norm_w4(S.norm_w, S.norm_type, i) : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            const float4 p = make_float4(v.x * w.x, v.y * w.y, v.z * w.z, v.w * w.w);
            am = fmaxf(am, fmaxf(fmaxf(fabsf(p.x), fabsf(p.y)), fmaxf(fabsf(p.z), fabsf(p.w))));
            ((float4 *)xw)[i] = p;
        }
        ss = ggx_block_sum(ss, red[0]);
        am = ggx_block_max(am, red[1]);   // (its barriers also publish xw)
        const float rms = S.norm ? rsqrtf(ss / (float)S.K + S.norm_eps) : 1.0f;
        const int e = x_scale_exponent(am * rms);
        const float xscale = rms * ldexpf(1.0f, e), xunscale = ldexpf(1.0f, -e);
        for (int mi = 0; mi < S.n_mat; mi++) {
            half * xm = xs + mi * xs_n;
            auto at = [&](int k) { return (k >> 5) * xs_ld + (k & 31); };   // quantized row k's place
#pragma unroll 4
            for (int i = t; i < K4; i += NT) {
                const float4 p = ((const float4 *)xw)[i];
                const int4 d = perm[(size_t)mi * K4 + i];
                xm[at(d.x)] = __float2half_rn(p.x * xscale);
                xm[at(d.y)] = __float2half_rn(p.y * xscale);
                xm[at(d.z)] = __float2half_rn(p.z * xscale);
                xm[at(d.w)] = __float2half_rn(p.w * xscale);
            }
        }
        __syncthreads();
        if (si == 0) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_LOOP);

        if (b < S.m[0].n_strips) {
            for (int mi = 0; mi < S.n_mat; mi++)
                run_units<RING, DLO>(S.m[mi], plans[mi * GGX_STRIP_WARPS + warp], xs + mi * xs_n, xs_ld, grp + mi * (S.K / 32),
                                     colsum + mi * cs_ld, lane, pf, ring);
            __syncthreads();
            if (si == 0) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_LOOP_END);
            // the owners' epilogue (m[1] of a GLU has the same strips)
            const int q0 = plans[0].q0, q1 = plans[0].q1;
            {
                for (int i = t; i < (q1 - q0 + 1) * 4; i += NT) {
                    const int n = q0 * 4 + i;
                    if (n >= S.N) continue;
                    float v = colsum[i] * xunscale + (S.bias[0] ? S.bias[0][n] : 0.0f);
                    if (S.epi == GGX_STRIP_GLU) {
                        const float up = colsum[cs_ld + i] * xunscale + (S.bias[1] ? S.bias[1][n] : 0.0f);
                        v = (S.act == GGX_ACT_SILU ? silu_f(v) : gelu_f(v)) * up;
                    } else if (S.epi == GGX_STRIP_ADD) {
                        v += ggx_load_cg(S.resid + n);
                    }
                    S.y[n] = v;
                }
            }
        }
        if (si < 3) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_A + si);   // stage ends (first three)
        if (si + 1 < s.n_stages) grid_arrive(s.counter);
        else __syncthreads();   // (shared memory is reused by nothing after the last stage)
    }
    ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_EXIT);
}

}  // namespace

size_t ggx_strip_stage_smem(int n_mat, int K, int max_quads, const ggx_strip_form & form) {
    return stage_smem_of(n_mat, K, max_quads, form).total;
}

size_t ggx_strip_step_smem(const ggx_strip_step & s) {
    size_t need = 0;
    for (int i = 0; i < s.n_stages; i++)
        need = std::max(need, ggx_strip_stage_smem(s.st[i].n_mat, s.st[i].K, s.st[i].m[0].max_quads, s.form));
    return need;
}

cudaError_t ggx_cuda_strip_step(const ggx_strip_step & s, int grid, cudaStream_t stream, bool pdl, const ggx_trace_dev * trace) {
    const size_t smem = ggx_strip_step_smem(s);
    void (*kernel)(ggx_strip_step, ggx_trace_dev) = s.form.ring ? k_strip_step<true, 1>
                                                    : s.form.depth_lo == 2 ? k_strip_step<false, 2>
                                                                           : k_strip_step<false, 1>;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return err;
    const ggx_trace_dev tr = trace ? *trace : ggx_trace_dev{};
#if !defined(GGX_USE_HIP)
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(NT);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, s, tr);
#else
    (void)pdl;
    kernel<<<grid, NT, smem, stream>>>(s, tr);
    return cudaGetLastError();
#endif
}

cudaError_t ggx_cuda_strip_gemv(const ggx_strip_matrix & m, const float * xq, float * y, int * counter, cudaStream_t stream,
                                const ggx_strip_form & form) {
    ggx_strip_step s = {};
    s.n_stages = 1;
    s.form = form;
    s.counter = counter;
    ggx_strip_stage & S = s.st[0];
    S.m[0] = m;
    S.m[0].inv_perm = nullptr;
    S.n_mat = 1;
    S.x = xq;
    S.K = m.K;
    S.N = m.Np;
    S.epi = GGX_STRIP_STORE;
    S.y = y;
    return ggx_cuda_strip_step(s, m.n_strips, stream);
}
