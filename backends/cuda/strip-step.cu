#include "strip-step.h"

#include "async-copy.cuh"
#include "common.cuh"
#include "exl2-unpack.cuh"
#include "step-common.cuh"
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
__device__ __forceinline__ void run_width(const ggx_strip_matrix & m, const ggx_strip_unit * desc, const half * xs, int xs_ld,
                                          const int * grp, int a, int e, int end, int pf, int lane, quad_sums & qs) {
    uint4 w[D][8];
    uint32_t quad[D], sl[D];   // per slot: the unit's quad, and slice0 | lanes << 24
    auto fetch = [&](int d, int i) {   // unit i into slot d
        const ggx_strip_unit u = desc[i];
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
    uint2 sc = unit_scales(m, grp, desc[a], lane);
    for (int i = a; i < e; i += D) {
#pragma unroll
        for (int d = 0; d < D; d++) {
            if (i + d >= e) break;
            const int uq = (int)quad[d];
            const uint2 sc_next = i + d + 1 < e ? unit_scales(m, grp, desc[i + d + 1], lane) : make_uint2(0, 0);
            if (pf > 0 && lane == 0 && i + d + pf < end) prefetch_unit(m, desc[i + d + pf]);   // (may be of the next width)
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
__device__ __forceinline__ void run_width_ring(const ggx_strip_matrix & m, const ggx_strip_unit * desc, const half * xs, int xs_ld,
                                               const int * grp, int a, int e, int lane, quad_sums & qs, uint4 * ring) {
    static_assert(R >= 2 && R * B * 512 <= k_ring_bytes, "ring slots");
    auto issue = [&](int i) {   // unit i's words into slot i % R; always one commit group
        if (i < e) {
            const ggx_strip_unit u = desc[i];
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
    uint2 sc = unit_scales(m, grp, desc[a], lane);
    for (int i = a; i < e; i++) {
        issue(i + R - 1);
        const uint2 sc_next = i + 1 < e ? unit_scales(m, grp, desc[i + 1], lane) : make_uint2(0, 0);
        ggx_cp_async_wait<R - 1>();   // unit i's group is in
        const ggx_strip_unit u = desc[i];
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

// A strip's share of one matrix in one stage. The tables it comes from do not depend on any
// stage's results, so it is read into shared memory before the stage's wait, together with the
// strip's unit descriptors (strip_desc). Read after the wait, the chain of dependent loads (deal,
// then the descriptors) stood in front of every matrix's first words (11% of the stall samples in
// run 90), and reloading descriptors from global memory inside the loop cost 6% (run 91).
struct strip_plan {
    int deal[GGX_STRIP_WARPS + 1];   // the warps' units: deal[w] .. deal[w + 1] - 1
    int q0, q1;                      // the strip's first and last quad (q1 < q0: no units)
    int wu[GGX_EXL2_N_WIDTHS + 1];   // where each width's units start in the strip
};

// Strip b's plan of m and its descriptors (desc[j] = unit deal[0] + j), by the whole block.
__device__ __forceinline__ void plan_load(const ggx_strip_matrix & m, int b, int t, strip_plan & P, ggx_strip_unit * desc) {
    const int * deal = m.deal + (size_t)b * (GGX_STRIP_WARPS + 1);
    const int d0 = ggx_load_ro(deal), d1 = ggx_load_ro(deal + GGX_STRIP_WARPS);
    if (t <= GGX_STRIP_WARPS) P.deal[t] = ggx_load_ro(deal + t);
    if (t <= GGX_EXL2_N_WIDTHS) P.wu[t] = ggx_load_ro(m.width_unit0 + (size_t)b * (GGX_EXL2_N_WIDTHS + 1) + t);
    // (units run width by width, each width over all of the strip's quads: the first unit holds
    // the strip's first quad, the last unit its last)
    if (t == NT - 1) P.q0 = d0 < d1 ? (int)load_unit(m.units + d0).quad : 0;
    if (t == NT - 2) P.q1 = d0 < d1 ? (int)load_unit(m.units + d1 - 1).quad : -1;
#pragma unroll 4
    for (int j = t; j < d1 - d0; j += NT) desc[j] = load_unit(m.units + d0 + j);
}

// Warp `warp`'s dealt units of matrix m in the strip of plan P (descriptors strip_desc: unit
// P.deal[0] + j at j), summed into colsum[(quad - strip's first quad) * 4 + c]. A strip's units
// run width by width, so the warp's range splits into at most 6 runs of one width.
template <bool RING, int DLO>
__device__ __forceinline__ void run_units(const ggx_strip_matrix & m, const strip_plan & P, const ggx_strip_unit * strip_desc, const half * xs,
                                          int xs_ld, const int * grp, float * colsum, int warp, int lane, int pf, uint4 * ring) {
    const int u0 = P.deal[warp], u1 = P.deal[warp + 1];
    if (u0 >= u1) return;
    const ggx_strip_unit * desc = strip_desc - P.deal[0];   // indexed by unit
    quad_sums qs;
    qs.acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    qs.q0 = P.q0;
    qs.cur = (int)desc[u0].quad;
    qs.colsum = colsum;
#pragma unroll 1
    for (int r = 0; r < GGX_EXL2_N_WIDTHS; r++) {
        const int a = max(u0, P.wu[r]), e = min(u1, P.wu[r + 1]);
        if (a >= e) continue;
        if constexpr (RING) {
            switch (r) {   // ggx_exl2_widths order; slots: 16 / B, at least 2
                case 0: run_width_ring<8, 2>(m, desc, xs, xs_ld, grp, a, e, lane, qs, ring); break;
                case 1: run_width_ring<6, 2>(m, desc, xs, xs_ld, grp, a, e, lane, qs, ring); break;
                case 2: run_width_ring<5, 3>(m, desc, xs, xs_ld, grp, a, e, lane, qs, ring); break;
                case 3: run_width_ring<4, 4>(m, desc, xs, xs_ld, grp, a, e, lane, qs, ring); break;
                case 4: run_width_ring<3, 5>(m, desc, xs, xs_ld, grp, a, e, lane, qs, ring); break;
                default: run_width_ring<2, 8>(m, desc, xs, xs_ld, grp, a, e, lane, qs, ring); break;
            }
        } else {
            switch (r) {   // ggx_exl2_widths order
                case 0: run_width<8, 1>(m, desc, xs, xs_ld, grp, a, e, u1, pf, lane, qs); break;
                case 1: run_width<6, 1>(m, desc, xs, xs_ld, grp, a, e, u1, pf, lane, qs); break;
                case 2: run_width<5, 1>(m, desc, xs, xs_ld, grp, a, e, u1, pf, lane, qs); break;
                case 3: run_width<4, DLO>(m, desc, xs, xs_ld, grp, a, e, u1, pf, lane, qs); break;
                case 4: run_width<3, DLO>(m, desc, xs, xs_ld, grp, a, e, u1, pf, lane, qs); break;
                default: run_width<2, DLO>(m, desc, xs, xs_ld, grp, a, e, u1, pf, lane, qs); break;
            }
        }
    }
    qs.flush(lane);
}

// A stage's shared memory: [region 0][x in fp16 per matrix][slice groups per matrix][strip plans]
// [unit descriptors per matrix][column sums]. Region 0 holds x w (fp32) and each matrix's inverse
// permutation during the staging and then, in the ring form, the warps' rings. x takes xs_ld
// halves per 32-row slice (40 with xpad). The kernel and ggx_strip_stage_smem both read it from
// here.
struct stage_smem {
    int    xs_ld;
    size_t xs_n;     // halves of one matrix's x
    size_t perm;     // byte offsets: int [n_mat][K] (in region 0, after x w)
    size_t xs;
    size_t grp;      // int [n_mat][K / 32]
    size_t plan;     // strip_plan [n_mat]
    size_t desc;     // ggx_strip_unit [n_mat][max_units]
    size_t colsum;
    size_t total;
};
__host__ __device__ inline stage_smem stage_smem_of(int n_mat, int K, int max_quads, int max_units, const ggx_strip_form & form) {
    stage_smem L;
    L.xs_ld = form.xpad ? 40 : 32;
    L.xs_n = (size_t)(K / 32) * L.xs_ld;
    L.perm = align16((size_t)K * 4);
    const size_t staging = L.perm + (size_t)n_mat * K * 4, rings = form.ring ? (size_t)GGX_STRIP_WARPS * k_ring_bytes : 0;
    L.xs = align16(staging > rings ? staging : rings);
    L.grp = align16(L.xs + (size_t)n_mat * L.xs_n * 2);
    L.plan = align16(L.grp + (size_t)n_mat * (K / 32) * 4);
    L.desc = align16(L.plan + (size_t)n_mat * sizeof(strip_plan));
    L.colsum = L.desc + (size_t)n_mat * max_units * sizeof(ggx_strip_unit);
    L.total = L.colsum + (size_t)n_mat * max_quads * 16;
    return L;
}

// The descriptors of a stage's matrices take the larger matrix's strip units each.
__host__ __device__ inline int stage_max_units(const ggx_strip_stage & S) {
    return S.n_mat > 1 ? max(S.m[0].max_units, S.m[1].max_units) : S.m[0].max_units;
}
__host__ __device__ inline stage_smem stage_smem_of(const ggx_strip_stage & S, const ggx_strip_form & form) {
    return stage_smem_of(S.n_mat, S.K, S.m[0].max_quads, stage_max_units(S), form);
}

// What a stage needs that no stage's results change, into shared memory: each matrix's inverse
// permutation and slice groups, the strip's plans and unit descriptors, zeroed column sums; and
// the first pf units' words of each warp into L2. Runs before the stage's wait (the previous
// stage has left shared memory: its end has a block barrier).
__device__ __forceinline__ void stage_static(const ggx_strip_stage & S, const stage_smem & L, unsigned char * smem, int b, int t, int pf) {
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
    if (b >= S.m[0].n_strips) return;
    const int max_units = stage_max_units(S);
    for (int mi = 0; mi < S.n_mat; mi++) {
        const ggx_strip_matrix & m = S.m[mi];
        plan_load(m, b, t, ((strip_plan *)(smem + L.plan))[mi], (ggx_strip_unit *)(smem + L.desc) + (size_t)mi * max_units);
        if (t < GGX_STRIP_WARPS * pf) {   // thread w pf + j: warp w's unit j
            const int * deal = m.deal + (size_t)b * (GGX_STRIP_WARPS + 1) + t / pf;
            const int i = ggx_load_ro(deal) + t % pf;
            if (i < ggx_load_ro(deal + 1)) prefetch_unit(m, load_unit(m.units + i));
        }
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
        const stage_smem sl = stage_smem_of(S, s.form);
        stage_static(S, sl, smem, b, t, pf);
        ggx_step::stage_wait(si, s.n_stages, s.counter, tr, &trace_slot);
        const int xs_ld = sl.xs_ld;
        const size_t xs_n = sl.xs_n;
        float * xw = (float *)smem;                                      // [K] x times the norm weights
        const int4 * perm = (const int4 *)(smem + sl.perm);              // [n_mat][K]: inverse permutations
        uint4 * ring = (uint4 *)(smem + (size_t)warp * k_ring_bytes);  // (RING) this warp's slots, after the staging
        half * xs = (half *)(smem + sl.xs);                              // [n_mat][K / 32][xs_ld]
        const int * grp = (const int *)(smem + sl.grp);                  // [n_mat][K / 32]
        const strip_plan * plans = (const strip_plan *)(smem + sl.plan); // [n_mat]
        const ggx_strip_unit * desc = (const ggx_strip_unit *)(smem + sl.desc);   // [n_mat][max_units]
        float * colsum = (float *)(smem + sl.colsum);                    // [n_mat][max_quads * 4]
        const int cs_ld = S.m[0].max_quads * 4;

        // x w and its scaling (step-common.cuh), then x w / rms times 2^e in fp16 to each matrix's
        // quantized row order
        const ggx_step::x_scaling xsc = ggx_step::norm_pass(S, xw, t, NT, red);
        const float xscale = xsc.scale, xunscale = xsc.unscale;
        const int K4 = S.K / 4;
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
                run_units<RING, DLO>(S.m[mi], plans[mi], desc + (size_t)mi * stage_max_units(S), xs + mi * xs_n, xs_ld,
                                     grp + mi * (S.K / 32), colsum + mi * cs_ld, warp, lane, pf, ring);
            __syncthreads();
            if (si == 0) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_LOOP_END);
            // the owners' epilogue (m[1] of a GLU has the same strips)
            const int q0 = plans[0].q0, q1 = plans[0].q1;
            for (int i = t; i < (q1 - q0 + 1) * 4; i += NT) {
                const int n = q0 * 4 + i;
                if (n < S.N) ggx_step::put_output(S, n, colsum[i], S.epi == GGX_STRIP_GLU ? colsum[cs_ld + i] : 0.0f, xunscale);
            }
        }
        if (si < 3) ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_A + si);   // stage ends (first three)
        if (si + 1 < s.n_stages) ggx_step::grid_arrive(s.counter);
        else __syncthreads();   // (shared memory is reused by nothing after the last stage)
    }
    ggx_trace_stamp(tr, &trace_slot, GGX_TRACE_EXIT);
}

}  // namespace

size_t ggx_strip_stage_smem(int n_mat, int K, int max_quads, int max_units, const ggx_strip_form & form) {
    return stage_smem_of(n_mat, K, max_quads, max_units, form).total;
}

size_t ggx_strip_step_smem(const ggx_strip_step & s) {
    size_t need = 0;
    for (int i = 0; i < s.n_stages; i++)
        need = std::max(need, stage_smem_of(s.st[i], s.form).total);
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
    return ggx_cuda_launch_ex(stream, pdl, kernel, dim3(grid), dim3(NT), smem, s, tr);
}

cudaError_t ggx_cuda_strip_gemv(const ggx_strip_matrix & m, const float * xq, float * y, int * counter, cudaStream_t stream,
                                const ggx_strip_form & form) {
    ggx_strip_step s = ggx_step::one_matrix_step<ggx_strip_step>(m, xq, y, counter);
    s.form = form;
    s.st[0].m[0].inv_perm = nullptr;
    return ggx_cuda_strip_step(s, m.n_strips, stream);
}
