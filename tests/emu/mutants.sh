#!/bin/bash
# mutants.sh [prefill|decode|qgemv|qgemv-pairgroups|qgemv-compact|qgemv-mma4|qgemv-uneven|all]: injects known bugs into a copy of the kernel source, one at a
# time, and runs the emulator's default cases on each (stopping at the first failure). One line
# per mutant: caught or NOT caught. Exit status 0 only when every mutant is caught.
# A mutant whose sed expression no longer changes the source, or that does not build, counts as
# a failure: fix its expression here after the kernel changed.
# Work files: $EMU_BUILD/mut/KIND/NAME (src.cu, diff.txt, build.txt, out.txt, err.txt).
# EMU_JOBS mutants run at a time (default: the number of cores); EMU_MUTANTS=REGEX runs only the
# mutants whose names match it (e.g. '^attn_').
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${EMU_BUILD:-$root/build-emu}
jobs=${EMU_JOBS:-$(nproc)}
what=${1:-all}
case "$what" in
    prefill | decode | qgemv | qgemv-pairgroups | qgemv-compact | qgemv-mma4 | qgemv-uneven) kinds=$what ;;
    all) kinds="prefill decode qgemv" ;;
    *) echo "usage: mutants.sh [prefill|decode|qgemv|qgemv-pairgroups|qgemv-compact|qgemv-mma4|qgemv-uneven|all]" >&2; exit 2 ;;
esac

# NAME SED_EXPRESSION
decode_mutants=(
    l_no_quad_sum 's/l_r\[r\] += __shfl_xor_sync(0xffffffffu, l_r\[r\], \([12]\));/\/\/ (no quad sum of l over \1)/'
    stage_i2 's/^        half \* Kd = KV + (size_t)(2 \* (S \* warp + i % S))/        half * Kd = KV + (size_t)(2 * (S * warp + (i < 2 ? i : i + 1) % S))/'
    ahead_s 's/const int ahead = min(min(i, S - 1), n_mine - 1 - i);/const int ahead = min(min(i, S), n_mine - 1 - i);/'
    wait2 's/ggx_cp_async_wait<1>();/ggx_cp_async_wait<2>();/'
    arrive_nsplits 's/arrive_last(a.counters + kvh, n_active)/arrive_last(a.counters + kvh, a.n_splits)/'
    pdl_early 's/issue(i, k_lo, fresh, true);/issue(i, k_lo, fresh + 1, true);/'
    n_mine_floor 's/(n_tiles - warp + dm_warps - 1) \/ dm_warps/(n_tiles - warp) \/ dm_warps/'
    window_off1 's/lo_r\[i\] = a.window > 0 ? pv - a.window + 1 : 0;/lo_r[i] = a.window > 0 ? pv - a.window : 0;/'
    window_own 's/max(0, pv - a.window + 1) : 0);/max(0, pt - a.window + 1) : 0);/; s/lo_r\[i\] = a.window > 0 ? pv - a.window + 1 : 0;/lo_r[i] = a.window > 0 ? a.pos[r \/ G] - a.window + 1 : 0;/'
    rows_not_stored 's/\*(uint4 \*)((half \*)a.k + off) = k8;/(void)k8;/'
    rows_from_cache 's/if (a.rows_k \&\& r >= fresh) {/if (a.rows_k \&\& r > fresh) {/'
    ldsm_k_swap 's/ldsm_x4(b, smem_addr(Kd + (lane % 8 + (lane \/ 16) \* 8) \* C::ld + kk \* 16 + ((lane \/ 8) % 2) \* 8));/ldsm_x4(b, smem_addr(Kd + (lane % 8 + ((lane \/ 8) % 2) * 8) * C::ld + kk * 16 + (lane \/ 16) * 8));/'
)
prefill_mutants=(
    full0 's/full &= hi_r\[mt\]\[i\] >= k0 + BK - 1 \&\& lo_r\[mt\]\[i\] <= k0;/full \&= hi_r[0][i] >= k0 + BK - 1 \&\& lo_r[0][i] <= k0;/'
    hirow '/int hi_r\[MT\]\[2\], lo_r\[MT\]\[2\];/,/lo_r\[mt\]\[i\] =/s/q0 + row0 + 16 \* mt + g/q0 + row0 + 8 * mt + g/'
    mask0 's/if (j > hi_r\[mt\]\[i\] || j < lo_r\[mt\]\[i\]) s\[mt\]/if (j > hi_r[0][i] || j < lo_r[0][i]) s[mt]/'
    qrow 's/Qs + (row0 + 16 \* mt + lane % 16)/Qs + (row0 + lane % 16)/'
    vis0 '/bool vis = false, full = true;/,/vis |=/s/for (int mt = 0; mt < MT; mt++)/for (int mt = 0; mt < 1; mt++)/'
    vis1 '/bool vis = false, full = true;/,/vis |=/s/for (int mt = 0; mt < MT; mt++)/for (int mt = MT - 1; mt < MT; mt++)/'
    wait2 's/ggx_cp_async_wait<1>();/ggx_cp_async_wait<2>();/'
    window_off1 's/? pv - a.window + 1 : 0;/? pv - a.window : 0;/'
    window_own 's/lo = a.window > 0 ? max(0, pv - a.window + 1) : 0;/lo = a.window > 0 ? max(0, a.pos[q0 + tid] - a.window + 1) : 0;/; s/lo_r\[mt\]\[i\] = (t < a.T \&\& a.window > 0) ? pv - a.window + 1 : 0;/lo_r[mt][i] = (t < a.T \&\& a.window > 0) ? a.pos[t] - a.window + 1 : 0;/'
)
qgemv_mutants=(
    counter_kept 's/if (threadIdx.x == 0) \*ctr = 0;   \/\/ ready for the next launch/\/\/ (counter not reset)/'
    red_bias_every_slice 's/if (slice == 0) add_bias<T>(M, n, v);/add_bias<T>(M, n, v);/'
    red_slice0_only 's/if (lead \&\& n < M.Np) ggx_red_add4(/if (lead \&\& n < M.Np \&\& slice == 0) ggx_red_add4(/'
    rows_unrotated 's/        rope(v);   \/\/ (the q\/k\/v rows only/        \/\/ (not rotated/'
    red_not_in_place 's/M.in_place = ggx_qgemv_adds_in_place(jm);/M.in_place = jm.epi == GGX_QGEMV_ADD;/'
    no_unscale 's/for (int c = 0; c < 4; c++) v\[t\]\[c\] \*= xunscale\[t\];/for (int c = 0; c < 4; c++) v[t][c] *= 1.0f;/'
    one_deep_short 's/if (p + 1 < p_end) piece_load(M, p + 1, nl, A, a.evict_first, L);/if (p + 2 < p_end) piece_load(M, p + 1, nl, A, a.evict_first, L);/'
    second_half_w0 's/piece_dot<B, 1, B>(s.w, 32, xp + 32, ld, acc);/piece_dot<B, 1, 0>(s.w, 32, xp + 32, ld, acc);/'
    slices_short 's/sum_partials<T, 1>(one, ns, n, s);/sum_partials<T, 1>(one, ns - 1, n, s);/'
    rope_sign 's/v\[t\]\[c\] = first ? x0 \* cs - x1 \* sn : x0 \* sn + x1 \* cs;/v[t][c] = first ? x0 * cs + x1 * sn : x0 * sn + x1 * cs;/'
    glu_swap 's/const gemv_mat \* gu\[2\] = {M.is_gate ? &M : &a.m\[M.pair\], M.is_gate ? &a.m\[M.pair\] : &M};/const gemv_mat * gu[2] = {M.is_gate ? \&a.m[M.pair] : \&M, M.is_gate ? \&M : \&a.m[M.pair]};/'
    group_bit4 's/const int bits = s.pc.z \& 15, g = s.pc.z >> 5;/const int bits = s.pc.z \& 15, g = s.pc.z >> 4;/'
    cache_pos0 's/const int p = a.pos\[t\];/const int p = a.pos[0];/'
    groups_sum1 's/for (int g = 1; g < W; g++)/for (int g = 2; g < W; g++)/'
    norm_weight 's/if (a.norm) xv\[j\]\[t\] \*= rinv\[t\] \* nw\[j\];/if (a.norm) xv[j][t] *= rinv[t];/'
    last_early 's/last = atomicAdd(ctr, 1) == M.arrivals - 1;/last = atomicAdd(ctr, 1) == M.arrivals - 2;/'
    odd_pieces 's/if (p + 3 < p_end) piece_load(M, p + 3, nl, B, a.evict_first, L);/if (p + 3 < p_end - 1) piece_load(M, p + 3, nl, B, a.evict_first, L);/'
    glu_arrivals 's/a.m\[jm.pair\].arrivals = M.arrivals = a.m\[jm.pair\].n_slices + M.n_slices;/a.m[jm.pair].arrivals = M.arrivals = M.n_slices;/'
    paired_m_odd 's/const bool paired = pairs \&\& e->pieces2;/const bool paired = e->pieces2;/'
    scale_half 's/s.sw = load_u16_wide((const uint16_t \*)qs + (n % 8) \/ 4);/s.sw = load_u16_wide((const uint16_t *)qs);/'
    over_read 's/if (i < nw) s.w\[i\] = load_weights/if (i < nw + 1) s.w[i] = load_weights/'
    first_desc_twice 's/if (p_begin + 1 < p_end \&\& !one_piece) piece_load_from(M, h1,/if (p_begin + 1 < p_end \&\& !one_piece) piece_load_from(M, h0,/'
    head_range_short 's/he = ggx_load_ro(M.heads + 4 \* ((min(fine + m, M.n_fine) + sh) >> sh) + 3);/he = ggx_load_ro(M.heads + 4 * ((min(fine + m, M.n_fine) + sh) >> sh) - 1);/'
    rope_regs_neighbour 's/if (rope_pair(a, lt \* 4 + c, i)) rcs\[lt \* 4 + c\] = rope_early\[c\];/if (rope_pair(a, lt * 4 + c, i)) rcs[lt * 4 + c] = rope_early[c ^ 1];/'
    attn_last_early 's/if (atomicAdd(ctr, 1) == q_tiles + 1) {/if (atomicAdd(ctr, 1) == q_tiles) {/'
    attn_q_tiles 's/const int q_tiles = ((g + 1) \* G \* hd - 1) \/ k_tile - g \* G \* hd \/ k_tile + 1;/const int q_tiles = 1;/'
    attn_key_left_out 's/r\[i\] = j + i \* step < end ? /r[i] = j + i * step < end - 1 ? /'
    attn_pos_kv_head 's/const half \* kp = at.k + ((size_t)pos \* at.Hkv + g) \* hd;/const half * kp = at.k + ((size_t)pos * at.Hkv + 0) * hd;/'
    attn_no_rescale 's/wa = __expf(m - mn), wb/wa = 1.0f, wb/'
    attn_warps_sum 's/for (int w = 0; w < NT \/ GGX_CUDA_WARP; w++) sum += red/for (int w = 1; w < NT \/ GGX_CUDA_WARP; w++) sum += red/'
    attn_state_head 's/float \* st = at.state + (size_t)(h0 + hl) \* (hd + 2);/float * st = at.state + (size_t)hl * (hd + 2);/'
)
qgemv_pairgroups_mutants=(
    across_same_scale 's/piece_scale<1>(s.sw >> 16, __high2half(s.mx), acc, v);/piece_scale<1>(s.sw, __low2half(s.mx), acc, v);/'
    across_next_row 's/s.sw = (s.sw \& 0xffffu) | (ggx_load_ro(qs + M.Np \/ 8) >> (4 \* (n % 8))) << 16;/s.sw = (s.sw \& 0xffffu) | (ggx_load_ro(qs) >> (4 * (n % 8))) << 16;/'
)
qgemv_compact_mutants=(
    compact_front 's/for (int i = 0; i < B; i++) s.w\[i\] = s.w\[B + i\];/for (int i = 1; i < B; i++) s.w[i] = s.w[B + i];/'
    compact_x 's/piece_dot<B, 1>(s.w, min(s.pc.w - 32 \* h, 32), xp + 32 \* h, ld, acc);/piece_dot<B, 1>(s.w, min(s.pc.w - 32 * h, 32), xp, ld, acc);/'
)
qgemv_mma4_mutants=(
    tc_own 's/const uint4 x = \*(b == own ? xr + 4 \* h : zero);/const uint4 x = *(b != own ? xr + 4 * h : zero);/'
    tc_bias_odd 's/nodd = 0xe480e480u/nodd = 0xe408e408u/'
    tc_odd_quads 's/const int own = g % 2 ? -1 : g \/ 2;/const int own = g \/ 2;/'
    tc_bias_other 's/v\[2\] = fmaf(c1\[0\] + c0\[1\], s23.x, v\[2\]);/v[2] = fmaf(c1[0], s23.x, v[2]);/'
    tc_remap 's/from = 4 \* (lane % 8) + lane \/ 8;/from = lane;/'
    tc_row 's/shift = (int)(threadIdx.x % 4) \* (M.Np - 32);/shift = (int)(threadIdx.x % 4) * M.Np;/'
    tc_x_order 's/half \* xm = xh + ldx + (4 \* (r % 4 \/ 2) + 2 \* (r % 2) + r \/ 4) - r;/half * xm = xh + ldx;/'
    tc_part_warp 's/+ 4 \* GGX_CUDA_WARP <= M.Np;/+ 4 * GGX_CUDA_WARP <= M.Np + 64;/'
    tc_one_half 's/if (h \* 32 >= s.pc.w) break;/if (h >= 1) break;/'
    tc_lanes 's/return n - 4 \* lane + 32 \* (lane % 4) + 4 \* (lane \/ 4);/return n;/'
)
qgemv_uneven_mutants=(
    uneven_late_start 's/: a.s0 \* W \* (M.m + a.dm) + (slice - a.s0) \* W \* m;/: a.s0 * W * M.m + (slice - a.s0) * W * m;/'
    uneven_late_step 's/+ (slice - a.s0) \* W \* m;/+ (slice - a.s0) * W * M.m;/'
    uneven_half 's/a.s0 = dm ? a.m\[0\].n_slices \/ 2 : 0;/a.s0 = dm ? a.m[0].n_slices \/ 2 - 1 : 0;/'
    uneven_ldx '0,/    const int ldx = W \* m \* k_fine;/s//    const int ldx = W * M.m * k_fine;/'
)

# one mutant: its result line into DIR/result
mutant() {
    local kind=$1 name=$2 expr=$3 src=$4 d=$5 r
    rm -rf "$d"; mkdir -p "$d"
    if ! sed "$expr" "$src" > "$d/src.cu" 2> "$d/diff.txt"; then r="BROKEN: bad sed expression ($(head -n 1 "$d/diff.txt"))"
    elif diff "$src" "$d/src.cu" > "$d/diff.txt"; then r="BROKEN: the sed expression no longer changes the source"
    elif ! "$here/build.sh" "$kind" "$d" "$d/src.cu" > "$d/build.txt" 2>&1; then r="BROKEN: does not build (build.txt)"
    else
        EMU_FAIL_FAST=1 timeout 1800 "$d/emu-$kind" > "$d/out.txt" 2> "$d/err.txt"
        local rc=$?
        if [ $rc -eq 0 ]; then r="NOT caught ($(tail -n 1 "$d/out.txt"))"
        else
            local why
            why=$(head -n 1 "$d/err.txt")
            if [ -z "$why" ]; then   # the first failed run: its start and its error
                local line
                line=$(grep -m 1 'bad [1-9]' "$d/out.txt" | tr -s ' ')
                [ -n "$line" ] && why="run ${line:0:60}... $(grep -o 'bad [0-9]*/[0-9]* max err [^ ]*' <<< "$line")"
            fi
            [ -n "$why" ] || why="exit status $rc"
            r="caught: ${why:0:150}"
        fi
    fi
    echo "$r" > "$d/result"
}

rc=0
for kind in $kinds; do
    src=$root/backends/cuda/attn-$kind.cu
    [ "${kind%%-*}" = qgemv ] && src=$root/backends/cuda/qgemv.cu
    declare -n list=${kind//-/_}_mutants
    names=()
    for ((i = 0; i < ${#list[@]}; i += 2)); do
        [[ -n "${EMU_MUTANTS:-}" && ! "${list[i]}" =~ $EMU_MUTANTS ]] && continue
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
        mutant "$kind" "${list[i]}" "${list[i + 1]}" "$src" "$build/mut/$kind/${list[i]}" &
        names+=("${list[i]}")
    done
    wait
    for n in "${names[@]}"; do
        res=$(cat "$build/mut/$kind/$n/result" 2> /dev/null || echo "BROKEN: no result")
        printf '%-8s %-20s %s\n' "$kind" "$n" "$res"
        case "$res" in caught*) ;; *) rc=1 ;; esac
    done
    unset -n list
done
exit $rc
