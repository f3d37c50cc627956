#!/bin/bash
# The GPU work of a session in one call (the device tool runs it from the repository root):
# build for sm_90, then the named parts in order. Fixtures do not travel by themselves: copy
# ../shared/fixtures/exl2 to fixtures-local/fx/exl2 (git-ignored) and carry fixtures-local. The
# device's copy of .git may be stale (session 21 saw an old HEAD there): write the commit first,
# `git describe --always --dirty > fixtures-local/COMMIT`, and the suite prints it. Or run
# bench/prebuild.sh [VARIANT...] here first: it writes that file and the binaries built here, and
# the suite then skips its build (about 75 s of device time) when they start on the device.
#
#   bench/device-suite.sh tests figures            # full test-cuda, then the decode/prefill table
#   bench/device-suite.sh tests:'*attention*' attn-sweep
#
# Parts:
#   tests[:FILTER]  build-dev/test-cuda (doctest -tc FILTER when given)
#   figures         tg128@16 for llama3-8b at 2.5-8.0 bpw, llama3.2-1b, 4.0 @4096, pp512/pp2048
#   figures-short   the same for llama3-8b 4.0 @16 and @4096, llama3.2-1b and pp512/pp2048 only
#   attn-sweep      GGX_ATTN_MIN_SPLIT_KEYS = 64, 128, 256, 512 at --ctx 16,512,4096
#   trace           GGX_CUDA_TRACE=4 summaries at 4.0 bpw and for llama3.2-1b; the GEMVs' A, B, C (since
#                   session 35): A the last blocks past their acquire (from the loop's start), B the
#                   partials summed, C the results stored, each after a block barrier
#   blocks          every block of layer 5's q/k/v and gate/up launches (GGX_CUDA_TRACE_BLOCKS): entry,
#                   wait, loop, hand-off and exit of each, after the per-layer trace lines
#   codecopy        tg128@16 of llama3-8b 4.0 with o alone, q/k/v alone, and gate/up with down on the GEMV
#                   kernel's second code copy (GGX_QGEMV_CODE_COPY_FOR), then the default; the layer
#                   trace with o alone and with q/k/v alone on it
#   ffnprobe        bench/probes/ffn-fused.cu built and run (16 layers): fused, loads only, split,
#                   residual in place, and the per-block timeline
#   pairs           tg128@16 at 2.5, 3.0, 4.0 bpw and llama3.2-1b with GGX_QGEMV_PAIR_BITS=4 (only
#                   4-bit pieces paired, as before session 21) and with the default (2, 3 and 4)
#   sample          tg128@16 drawing with main's default sampler (bench --sample): sampled run-ahead
#                   (the default: the draw on the device), with GGX_CUDA_SAMPLE_AHEAD=0 (candidates
#                   ranked on the device, the draw on the host), with GGX_CUDA_NO_TOP_N=1 (the whole
#                   row read back), and greedy
#   ropetable       tg128@16 of llama3-8b 4.0 and llama3.2-1b 4.0 with GGX_QGEMV_ROPE_TABLE=0 (each q/k
#                   block's RoPE factors in its prologue, not from the step's table), then the default
#   normtable       the same with GGX_QGEMV_NORM_TABLE=0 (norm weights read through q_perm, not from
#                   a table in q_perm order)
#   fa32            pp512 and pp2048 of llama3-8b 4.0 with GGX_ATTN_FA_ROWS=32, then =16 (prefill
#                   attention with two 16-row tiles per warp or one; the default picks 32 where the
#                   grid gives every SM two blocks), twice each (prefill figures move by ~1-3%
#                   between runs); the attention lines of an eager profile of each
#   stages          tg128 of llama3-8b 4.0 at ctx 16, 512, 2048 and 4096 with GGX_ATTN_STAGES=3 (three
#                   K/V tiles in flight per decode attention warp), with GGX_ATTN_SMEM_STAGES=3 (two,
#                   in the shared memory of three), then the default (two), twice each
#   stages-sweep    tg128 of llama3-8b 4.0 at ctx 512, 2048 and 4096 with at least 128, 192, 256 and 384
#                   keys per decode attention split (fewer splits, longer walks), each with 3 K/V
#                   stages per warp and with 2
#   orows           tg128@16 of llama3-8b 4.0 with GGX_QGEMV_ROWS_FOR= (the default), o_proj:128 (o in
#                   8 K-slices, 64 blocks, against 16 and 128), o_proj:96 (11, 88 blocks),
#                   down_proj:448 (8 K-slices, 64 blocks) and both 128 and 448, twice
#   smemconfig      ncu's shared memory configuration size of 8 decode GEMV / attention launches of an
#                   eager llama3-8b step, with 2 and with 3 attention stages (the carveout each runs at)
#   carveout        tg128 of llama3-8b 4.0 at ctx 16, 512 and 4096: the default (the decode GEMV and
#                   attention kernels prefer the most shared memory), then with GGX_CUDA_CARVEOUT=-1
#                   (the driver's choice, the default up to run 146), =72 (164 KB of shared memory),
#                   GGX_CUDA_CARVEOUT_ALL=1 (every kernel prefers the same), and the default again
#   stages-ab       tg128 of llama3-8b 4.0 at ctx 16, 512, 2048 and 4096 with GGX_ATTN_STAGES=3, then 2
#   plan            tg128@16 with the decode GEMV plan's knobs: the default, GGX_QGEMV_SLICE_COST=8,
#                   =12, and 12 with GGX_QGEMV_ODD_COST=16; llama3-8b and llama3.2-1b 4.0 twice, then
#                   the default, 8 and 12+16 for llama3-8b 2.5 and 8.0, qwen2.5-7b and mistral-7b 4.0
#   plan-trace      GGX_CUDA_TRACE=4 summaries of llama3-8b at 2.5, 4.0 and 5.0 bpw with the default
#                   plan and with GGX_QGEMV_SLICE_COST=12 GGX_QGEMV_ODD_COST=16 (where that plan's
#                   +3% at 4.0 and -3.5 to -5.7% elsewhere come from, kernel by kernel)
#   piececosts      tg128@16 with GGX_QGEMV_PIECE_COSTS=0 (the decode GEMV plan counting rows only)
#                   against the default (measured piece costs), two rounds: llama3-8b 4.0, qwen2.5-7b
#                   4.0 and 4.25 (now the same plan both ways; run 153's costs lost 5% at 3.5 and 4.25
#                   there); llama3-8b 4.0 @4096
#   slicecost       tg128@16 of llama3.2-1b at 4.0, 2.5, 5.0 and 8.0 bpw with GGX_QGEMV_SLICE_COST=6
#                   (a cost per K-slice of a column tile: with the piece costs it moves llama3.2-1b's
#                   q/k/v and o to m = 2 and its down to 3-4, and no plan of llama3-8b, qwen2.5-7b or
#                   mistral-7b at any synthetic width; host check), then the default, two rounds
#   smem-driver     part smemconfig with GGX_CUDA_CARVEOUT=-1 (the driver's choice of split)
#   clusters        bench/probes/cluster-fit.cu built and run: clusters of whole-SM blocks that fit
#                   at once per cluster size, and their SMs (split-K through clusters needs 16)
#   pairgroups      the pairgroups variant (bench/variants.sh: paired pieces also across two groups):
#                   its test-cuda's across-groups, synthetic and logits cases, then tg128@16 of
#                   llama3-8b 4.25, 4.5 and 4.0, qwen2.5-7b 4.25 and llama3.2-1b 4.5 with the variant,
#                   the variant with GGX_QGEMV_PAIR_GROUPS=0 and the default build, two rounds
#   compact         the compact build variant (-DGGX_QGEMV_COMPACT_HALVES=1: a 64-row piece's halves by
#                   one copy of the code): its model tests, then tg128@16 of llama3-8b 4.0 / 2.5 / 3.0,
#                   llama3.2-1b and qwen2.5-7b 4.0 against the default build, twice; 8B 4.0 @4096
#   tail            attention in the q/k/v GEMV's tail (GGX_ATTN_TAIL=N: while pos + 1 <= N keys): its
#                   test-cuda case, then tg128 of llama3-8b 4.0 @16 with N = 256 (the whole run), 0 (off,
#                   the default) and 256 again; 2.5 and llama3.2-1b / qwen2.5-7b 4.0 @16 with 256 and 0;
#                   llama3-8b 4.0 @512 (past the bound: the attention kernel) with 256 and 0; a trace
#   tail-short      tg128@16 of llama3-8b 4.0 with GGX_ATTN_TAIL=256 and 0, then the trace with 256 (the
#                   q/k/v kernel's A, B, C: the tail's part A, arrival, part B)
#   sections        what the few-hundred-instruction sections (attention's merge and output, the GEMVs'
#                   tile tails; 0.6-3.5 us each) wait for: the default trace, the trace with
#                   GGX_CUDA_NO_PDL=1 (no next kernel loading its first weights beside them: if the
#                   sections shrink, they wait on memory traffic), and the trace with GGX_ATTN_TAIL=256
#                   (the tail's A, B, C now print: b4f268d). Run 167 (H100): without PDL attention's
#                   loop and merge take half as long (o's first weights no longer stream beside them)
#   blocks-od       the per-block dump of layer 5's o and down
#   uneven          the build variant uneven (the decode GEMV's grid K-slice by K-slice; gate/up's first K-slices
#                   longer, 18 and 14 fine slices per group on llama3-8b): its uneven, EXL2, synthetic,
#                   logits and rows tests, its per-block dump, then tg128@16 with it, with it under
#                   GGX_QGEMV_UNEVEN_FOR= (the K-slice order alone) and the default build: llama3-8b 4.0
#                   and 3.0, llama3.2-1b 4.0 (order alone there), two rounds; llama3-8b 4.0 with
#                   gate_proj:4 (20 and 12); @4096 (session 52)
#   gemv-short:VARIANT  its tests, then tg128@16 of llama3-8b 4.0 twice and llama3.2-1b 4.0 (variant, default)
#   gemv:VARIANT    a build variant of the decode GEMV (bench/variants.sh) against the default: its
#                   EXL2, synthetic, logits and rows tests, its per-block dump, tg128@16 of llama3-8b 4.0
#                   and 3.0 and llama3.2-1b 4.0, two rounds, and llama3-8b 4.0 @4096 (session 44: heads)
#   fencesc         the build variant fencesc (every hand-off between blocks with __threadfence, as
#                   before session 35) against the default (fence.acq_rel by thread 0): tg128 of
#                   llama3-8b 4.0 @16 and @4096 and llama3.2-1b 4.0 @16, two rounds
#   handoff         the fences in the decode kernels' SASS (MEMBAR kinds per kernel: fence.acq_rel is
#                   MEMBAR.ALL.GPU, __threadfence MEMBAR.SC.GPU) and the default trace (run 169 also
#                   measured the knobs GGX_QGEMV_LIGHT_FENCE and GGX_QGEMV_RESID_EARLY, since removed)
#   partialrt       bench/probes/partial-rt.cu built and run: what one batch of split-K partial reads
#                   costs in a tile's last block (fresh, old lines, under streaming load; one L2 hit)
#   red             GGX_QGEMV_RED=0 (o and down through the split-K hand-off, not adding each K-slice's
#                   sums into the residual with atomics: the default since session 36): its trace,
#                   tg128@16 of llama3-8b and llama3.2-1b 4.0 with it and without, two rounds, llama3-8b
#                   4.0 @4096 both ways, and the test-cuda case comparing the two
#   qkvrows         GGX_QKV_ROWS=0 (q/k/v through the split-K hand-off, not adding each K-slice's rotated
#                   sums into the q/k/v rows the decode attention reads: the default since session 37):
#                   tg128@16 of llama3-8b, llama3.2-1b and qwen2.5-7b 4.0 with it and without, two rounds;
#                   llama3-8b 4.0 @4096 both ways; both traces; the test-cuda case comparing the two
#   qkvm            tg128@16 with q/k/v in other K-slice counts (GGX_QGEMV_ROWS_FOR=q_proj:R) now that its
#                   K-slices add into the q/k/v rows: llama3-8b 4.0 with the default (m 4, 96 blocks),
#                   R = 96 (m 3, 132 blocks, unpaired tables), 160 (84 blocks) and 192 (72 blocks);
#                   llama3.2-1b 4.0 with the default (m 2, 48 blocks), 32 (96 blocks) and 96 (36); twice
#   rowsmore        the q/k/v rows where run 185 did not look: GGX_QKV_ROWS=0 then the default for
#                   llama3-8b 4.0 at ctx 512 and 2048 and for llama2-7b 4.0 (one query head per KV
#                   head); then the reducing jobs' plan where the 48 MB rule decides without data,
#                   two rounds: o in 8 K-slices (GGX_QGEMV_ROWS_FOR=o_proj:128) against the default
#                   for llama3-8b 5.0 and 8.0 and qwen2.5-7b 4.0, and o in 4 (o_proj:512, 64 blocks
#                   instead of 128) for 16 layers of llama3-70b 4.0
#   clusterhandoff  bench/probes/cluster-handoff.cu built and run at 512 and 128 KB per block: gate/up's
#                   2-slice split-K hand-off in a PDL chain against a thread block cluster's (the
#                   sums through distributed shared memory) and no hand-off
#   downm           tg128@16 with down in more blocks (its K-slices add into the residual, no tail):
#                   llama3-8b 4.0 with GGX_QGEMV_ROWS_FOR=down_proj:224 (m 7, 128 blocks, unpaired
#                   tables) and llama3.2-1b 4.0 with down_proj:64 (m 2, 128 blocks), each against
#                   the default, two rounds
#   prefetchfor     GGX_QGEMV_PREFETCH_FOR=o_proj:0 (o's blocks warm their whole slice in L2 before the PDL
#                   wait, during the decode attention, when DRAM idles) against the default, two rounds:
#                   llama3-8b 4.0 and 2.5, llama3.2-1b 4.0 @16, llama3-8b 4.0 @4096; then once each the
#                   whole slice for gate_proj, down_proj and q_proj, and o_proj:8 (eight rows)
#   mma4            the variant mma4 (4-bit pieces on the tensor cores) against the default build: its
#                   tests, tg128@16 A/B (8B 4.0, 4.25, 1B 4.0 twice; 3.0, 5.0, @4096 once), the layer
#                   traces, ncu's warp instructions of its four GEMV launches
#   vtests:VARIANT  a build variant's test-cuda: the cases of TC_FILTER, default all
#   downfew         tg128@16 with down in 96 and 80 blocks (GGX_QGEMV_ROWS_FOR=down_proj:320 / 384) against
#                   the default 112, two rounds; 96 @4096; the traces of 96 and the default
#   sassdump[:VARIANT]  gate/up's ncu source page (SASS lines with executed counts and stall samples) as
#                   xz-compressed CSV into $OUT, and its opcode sums (of a build variant's bench)
#   loopbound       ncu on one layer's four decode GEMV launches (eager): warp instructions, issue use, DRAM;
#                   then gate/up's stall reasons and its SASS summed by opcode (bench/probes/sass-mix.py)
#   l2miss          ncu (eager, --cache-control none: L2 as the step left it) on 10 decode GEMV / attention
#                   launches of llama3-8b 4.0 at ctx 16 and 4096: L2 read sectors, their lookup hits and
#                   misses, DRAM bytes read: which kernels' loads miss L2 (under the stream a dependent
#                   miss costs ~1 us, run 197)
#   queuedepth      bench/probes/queue-depth.cu built and run: the stream's bandwidth and a dependent L2
#                   hit's (and DRAM miss's) latency under it, per bytes in flight per SM (threads x
#                   16-byte loads each): does a hit wait behind the stream's loads in flight?
#   onedeep         GGX_QGEMV_ONE_DEEP=1 (one piece per thread in flight in every one-row decode GEMV,
#                   not two) against the default, two rounds: llama3-8b 4.0, 8.0 and 2.5, llama3.2-1b
#                   4.0 @16; llama3-8b 4.0 @4096 both ways; the trace with it (runs 194-195)
#   onedeep-rule    with GGX_QGEMV_ONE_DEEP=2 (one deep for one-row jobs below 4 bits per weight, the
#                   default to be): the GEMV and model cases of test-cuda, then tg128@16 against the
#                   default (none one deep): llama3-8b 3.0, 2.5, 3.5 and 4.0, llama3.2-1b 2.5, twice; then
#                   GGX_QGEMV_ONE_DEEP=3 (one deep where a job holds more than one width) against the
#                   default at 4.25, 4.5, 3.0 and 4.0 (the widths measured so far confound "below 4
#                   bits" with "mixed widths"; 4.25 and 4.5 are mixed 4/5-bit layouts, 4.0 uniform)
#   deterministic   the test-cuda cases of deterministic mode (a model's logits and the GPTQ GEMV repeat
#                   bit for bit; how often the default order's runs differ is printed), then tg128@16
#                   of llama3-8b and llama3.2-1b 4.0 with bench --deterministic and without, two rounds
#   redcost         tg128@16 with GGX_QGEMV_RED_SLICE_COST=8 (o and down, whose K-slices add into the
#                   residual, pay 8 per slice instead of the default 4: fewer o blocks on llama3-8b and
#                   mistral-7b 4.0, fewer o and down blocks on llama3.2-1b) against the default, two
#                   rounds: the models and widths whose plans differ (llama3-8b and mistral-7b 4.0,
#                   llama3.2-1b 2.5, 5.0, 8.0) and llama3.2-1b 4.0 and llama3-8b 2.5, whose plans do not
#   handoffchain    bench/probes/handoff-chain.cu at 128 and 256 KB per block (o's and down's sizes): us per
#                   kernel of a PDL chain with no hand-off, the engine's split-K hand-off, and float4
#                   atomics into the output
#   icache          bench/probes/icache-cold.cu built and run (32 and 512 threads per block): cycles of
#                   once-per-launch sections after the same kernel, a tiny one, or ~256 KB of other code
#                   (run 164: ~400 cycles once at the kernel's start, then nothing)
#   qwengu          tg128@16 of qwen2.5-7b 4.0 and 2.5 with its gate/up in one wave of 74 blocks
#                   (GGX_QGEMV_ROWS_FOR=gate_proj:896, m = 28: one K-slice per tile, 58 SMs idle),
#                   in 148 blocks (gate_proj:448) and as planned (222 blocks, 2 waves: the plan's costs
#                   of the first and the third are within 2%; bench-plan-report), two rounds
#   pairwidths      the pairgroups variant's across-groups case (llama3.2-1b 4.5 and 2.5), then tg128@16
#                   of llama3-8b 2.5 and 3.5 and llama3.2-1b 2.5 with GGX_QGEMV_PAIR_GROUPS=0 (no joins),
#                   =2 (2-bit pairs across groups only), =3 (3-bit only), =1 (2-4 bits), then the
#                   default build; and the default build's llama3.2-1b 4.0 (its plan of session 31)
#   windows         a second bench built with -DGGX_PAIR_WINDOWS=0 (3-, 5- and 6-bit codes placed one
#                   by one, as before session 22) against the default (byte-permuted windows,
#                   backends/cuda/pair-window.h): tg128@16 at 3.0, 5.0, 6.0, 4.0 and 2.5 bpw
#   x16             a second bench built with -DGGX_PAIR_X16_2BIT=0 (each 2-bit pair shifted into
#                   place) against the default (half of them read 4 bits high, no shift): tg128@16
#                   at 2.5, 3.0 and 4.0 bpw
set -u
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
if [ -f fixtures-local/COMMIT ]; then echo "commit $(cat fixtures-local/COMMIT)"; else echo "commit unknown (no fixtures-local/COMMIT)"; fi
# Binaries built off the device by bench/prebuild.sh, when they were built from this very tree
# and start here; unpack BIN TARGET
prebuilt_ok=0
unpack() { xz -dc "fixtures-local/prebuilt/$1.xz" > "$2" && chmod +x "$2"; }
. bench/variants.sh
# build-dev-VARIANT/bench (bench/variants.sh): the prebuilt one when it starts (a failed one is
# removed, so that make rebuilds it), else built here
variant_bench() {
    local v=$1 flags
    flags=$(variant_flags "$v") || { echo "unknown variant $v"; return 1; }
    mkdir -p build-dev-$v
    if [ $prebuilt_ok = 1 ] && [ -f fixtures-local/prebuilt/bench-$v.xz ]; then
        unpack bench-$v build-dev-$v/bench && build-dev-$v/bench --help >/dev/null 2>&1 && return 0
        rm -f build-dev-$v/bench
    fi
    NVCCFLAGS="-O3 -lineinfo $flags" make -j"$(nproc)" BUILD=build-dev-$v CUDA_ARCH=90 \
        BENCH=build-dev-$v/bench build-dev-$v/bench >/tmp/device-build-$v.log 2>&1 && return 0
    tail -30 /tmp/device-build-$v.log
    return 1
}
# variant_rounds VARIANT EXTRA "MODEL BPW"...: tg128@16 of each with build-dev-VARIANT/bench, then
# (EXTRA a VAR=VALUE, or "") with that bench under EXTRA, then with the default build; two rounds
variant_rounds() {
    local v=$1 extra=$2 r mb m b
    shift 2
    for r in 1 2; do
        for mb in "$@"; do
            read -r m b <<< "$mb"
            echo "-- $m $b @16, round $r: $v ($(variant_flags "$v"))${extra:+, with $extra}, the default build"
            B=build-dev-$v/bench tg --synthetic $m --bpw $b --ctx 16
            if [ -n "$extra" ]; then (export "$extra"; B=build-dev-$v/bench tg --synthetic $m --bpw $b --ctx 16); fi
            tg --synthetic $m --bpw $b --ctx 16
        done
    done
}
# a decode GEMV variant's EXL2, synthetic, logits and rows tests, then its bench (status 1 without one)
gemv_variant_ready() {
    variant_tests "$1" && TC=build-dev-$1/test-cuda run_tests -tc='*EXL2*,*synthetic*,*logits*,*rows*'
    variant_bench "$1"
}
# tg128@16 of llama3-8b at each bpw with the variant's bench, then the default's
ab_variant() {
    local v=$1 what=$2
    shift 2
    variant_bench "$v" || return
    for b in "$@"; do
        echo "-- llama3-8b $b @16: $what ($v: $(variant_flags "$v")), then the default"
        B=build-dev-$v/bench tg --synthetic llama3-8b --bpw "$b" --ctx 16
        tg --synthetic llama3-8b --bpw "$b" --ctx 16
    done
}
if [ -f fixtures-local/prebuilt/STAMP ] && [ -f fixtures-local/COMMIT ] &&
   [ "$(cat fixtures-local/prebuilt/STAMP)" = "$(cat fixtures-local/COMMIT)" ]; then
    mkdir -p build-dev
    if unpack test-cuda build-dev/test-cuda && unpack bench bench/bench &&
       build-dev/test-cuda -ltc >/dev/null 2>&1 && bench/bench --help >/dev/null 2>&1; then
        prebuilt_ok=1
        echo "prebuilt binaries (bench/prebuild.sh), no build here"
    else
        rm -f build-dev/test-cuda bench/bench   # else make would take them as up to date
        echo "prebuilt binaries do not start here; building"
    fi
elif [ -f fixtures-local/prebuilt/STAMP ]; then
    echo "prebuilt binaries are of $(cat fixtures-local/prebuilt/STAMP), not this tree; building"
fi
if [ $prebuilt_ok = 0 ] &&
   ! make -j"$(nproc)" BUILD=build-dev CUDA_ARCH=90 build-dev/test-cuda bench/bench >/tmp/device-build.log 2>&1; then
    tail -30 /tmp/device-build.log
    exit 1
fi
[ -d fixtures-local/fx ] && export EXL2_FIXTURES=$PWD/fixtures-local/fx
export EXL2_REQUIRE_GPU=1   # test-cuda fails, not skips, when the GPU does not come up
B=bench/bench
NCU=/usr/local/cuda/bin/ncu
# ncu over an eager step (no graph: ncu profiles launches) of llama3-8b 4.0 at context CTX (default
# 16) run by the bench NB (default $B); the arguments are ncu's (sections or metrics, -k, -s, -c, -o)
ncu_step() {
    GGX_CUDA_NO_GRAPH=1 timeout 240 $NCU --cache-control none --clock-control none "$@" \
        ${NB:-$B} --synthetic llama3-8b --bpw 4.0 -p 0 -n 4 -r 1 --ctx ${CTX:-16}
}
tg() { $B "$@" -p 0 -n 128 -r 3 2>&1 | grep -E '^\| tg|^copy bandwidth'; }
# tg128 at context CTX (default 16) of each "model bpw" with the environment setting $1
# (VAR=VALUE), then without it
ab() {
    local setting=$1 ctx=${CTX:-16}
    shift
    for mb in "$@"; do
        read -r model bpw <<< "$mb"
        echo "-- $model $bpw @$ctx: $setting, then the default"
        (export "$setting"; tg --synthetic "$model" --bpw "$bpw" --ctx "$ctx")
        tg --synthetic "$model" --bpw "$bpw" --ctx "$ctx"
    done
}
# the per-layer lines of a GGX_CUDA_TRACE=4 summary of llama3-8b 4.0 @16 by $B with the environment
# setting $1 (VAR=VALUE, or "" for none)
layer_trace() {
    echo "-- trace, llama3-8b 4.0 @16: ${1:-no setting}, $B"
    (if [ -n "${1:-}" ]; then export "$1"; fi; GGX_CUDA_TRACE=4 $B --synthetic llama3-8b --bpw 4.0 -p 0 -n 8 -r 1 --ctx 16 2>&1 | sed -n 4,11p)
}
# every block of layer 5's q/k/v and gate/up launches (GGX_CUDA_TRACE_BLOCKS) in a GGX_CUDA_TRACE=4
# step of llama3-8b 4.0 @16 by $B with the environment setting $1 (VAR=VALUE, or "" for none),
# after the per-layer lines
block_dump() {
    local names=${NAMES:-layers.5.self_attn.q_proj,layers.5.mlp.gate_proj}
    echo "-- blocks of $names, llama3-8b 4.0 @16: ${1:-no setting}, $B"
    (if [ -n "${1:-}" ]; then export "$1"; fi; GGX_CUDA_TRACE=4 GGX_CUDA_TRACE_BLOCKS=$names \
        $B --synthetic llama3-8b --bpw 4.0 -p 0 -n 8 -r 1 --ctx 16 2>&1 | sed -n '4,11p;/blocks of/,$p' | head -${LINES_MAX:-230})
}
# test-cuda (TC, default build-dev/test-cuda) with each failure's case, values and messages (run
# 143 printed only the ERROR lines)
run_tests() {
    ${TC:-build-dev/test-cuda} "$@" > /tmp/test-cuda.log 2>&1
    grep -E -A4 'TEST CASE|ERROR|FAILED' /tmp/test-cuda.log | head -120
    grep -E 'test cases|assertions|Status' /tmp/test-cuda.log
}
# build-dev-VARIANT/test-cuda: the prebuilt one when it starts, else built here
variant_tests() {
    local v=$1 flags
    flags=$(variant_flags "$v") || { echo "unknown variant $v"; return 1; }
    mkdir -p build-dev-$v
    if [ $prebuilt_ok = 1 ] && [ -f fixtures-local/prebuilt/test-cuda-$v.xz ]; then
        unpack test-cuda-$v build-dev-$v/test-cuda && build-dev-$v/test-cuda -ltc >/dev/null 2>&1 && return 0
        rm -f build-dev-$v/test-cuda
    fi
    NVCCFLAGS="-O3 -lineinfo $flags" make -j"$(nproc)" BUILD=build-dev-$v CUDA_ARCH=90 \
        build-dev-$v/test-cuda >/tmp/device-build-$v-tests.log 2>&1 && return 0
    tail -30 /tmp/device-build-$v-tests.log
    return 1
}
for part in "$@"; do
    echo "== $part (at ${SECONDS} s)"
    case "$part" in
        tests) run_tests ;;
        tests:*) run_tests -tc="${part#tests:}" ;;
        figures)
            for b in 4.0 2.5 3.0 5.0 6.0 8.0; do echo "-- llama3-8b $b @16"; tg --synthetic llama3-8b --bpw "$b" --ctx 16; done
            echo "-- llama3.2-1b 4.0 @16"; tg --synthetic llama3.2-1b --bpw 4.0 --ctx 16
            echo "-- llama3-8b 4.0 @4096"; tg --synthetic llama3-8b --bpw 4.0 --ctx 4096
            echo "-- prefill"; $B --synthetic llama3-8b --bpw 4.0 -p 512,2048 -n 0 -r 3 2>&1 | grep -E '^\| pp|^memory:' ;;
        figures-short)
            echo "-- llama3-8b 4.0 @16"; tg --synthetic llama3-8b --bpw 4.0 --ctx 16
            echo "-- llama3.2-1b 4.0 @16"; tg --synthetic llama3.2-1b --bpw 4.0 --ctx 16
            echo "-- llama3-8b 4.0 @4096"; tg --synthetic llama3-8b --bpw 4.0 --ctx 4096
            echo "-- prefill"; $B --synthetic llama3-8b --bpw 4.0 -p 512,2048 -n 0 -r 3 2>&1 | grep -E '^\| pp|^memory:' ;;
        attn-sweep)
            for k in 64 128 256 512; do echo "-- GGX_ATTN_MIN_SPLIT_KEYS=$k"; GGX_ATTN_MIN_SPLIT_KEYS=$k tg --synthetic llama3-8b --bpw 4.0 --ctx 16,512,4096; done ;;
        trace)
            GGX_CUDA_TRACE=4 $B --synthetic llama3-8b --bpw 4.0 -p 0 -n 8 -r 1 --ctx 16 2>&1 | head -20
            GGX_CUDA_TRACE=4 $B --synthetic llama3.2-1b --bpw 4.0 -p 0 -n 8 -r 1 --ctx 16 2>&1 | grep -E 'trace, step|^\| tg' ;;
        codecopy)
            for st in GGX_QGEMV_CODE_COPY_FOR=o_proj:1 GGX_QGEMV_CODE_COPY_FOR=q_proj:1 GGX_QGEMV_CODE_COPY_FOR=gate_proj:1,down_proj:1 ""; do
                echo "-- llama3-8b 4.0 @16: ${st:-the default}"
                (for e in $st; do export "$e"; done; tg --synthetic llama3-8b --bpw 4.0 --ctx 16)
            done
            layer_trace GGX_QGEMV_CODE_COPY_FOR=o_proj:1
            layer_trace GGX_QGEMV_CODE_COPY_FOR=q_proj:1 ;;
        ffnprobe)
            nvcc -O3 -std=c++17 -arch=sm_90 -Ibackends/cuda -I. -Iinclude bench/probes/ffn-fused.cu -o /tmp/ffn-fused && /tmp/ffn-fused 16 ;;
        pairs)
            ab GGX_QGEMV_PAIR_BITS=4 "llama3-8b 2.5" "llama3-8b 3.0" "llama3-8b 4.0" "llama3.2-1b 4.0" ;;
        sample)
            for m in llama3-8b llama3.2-1b; do
                echo "-- $m 4.0 @16: greedy, sampled (run-ahead), with GGX_CUDA_SAMPLE_AHEAD=0, with GGX_CUDA_NO_TOP_N=1"
                tg --synthetic $m --bpw 4.0 --ctx 16
                tg --synthetic $m --bpw 4.0 --ctx 16 --sample
                GGX_CUDA_SAMPLE_AHEAD=0 tg --synthetic $m --bpw 4.0 --ctx 16 --sample
                GGX_CUDA_NO_TOP_N=1 tg --synthetic $m --bpw 4.0 --ctx 16 --sample
            done ;;
        ropetable) ab GGX_QGEMV_ROPE_TABLE=0 "llama3-8b 4.0" "llama3.2-1b 4.0" ;;
        normtable) ab GGX_QGEMV_NORM_TABLE=0 "llama3-8b 4.0" "llama3.2-1b 4.0" ;;
        fa32)
            for r in 1 2; do
                echo "-- llama3-8b 4.0 prefill, round $r: GGX_ATTN_FA_ROWS=32, then =16"
                GGX_ATTN_FA_ROWS=32 $B --synthetic llama3-8b --bpw 4.0 -p 512,2048 -n 0 -r 3 2>&1 | grep -E '^\| pp'
                GGX_ATTN_FA_ROWS=16 $B --synthetic llama3-8b --bpw 4.0 -p 512,2048 -n 0 -r 3 2>&1 | grep -E '^\| pp'
            done
            echo "-- eager profiles at -p 2048 (GGX_CUDA_PROFILE=1): attention with GGX_ATTN_FA_ROWS=32, then =16"
            GGX_ATTN_FA_ROWS=32 GGX_CUDA_PROFILE=1 $B --synthetic llama3-8b --bpw 4.0 -p 2048 -n 0 -r 1 2>&1 | grep -iE 'attn|attention'
            GGX_ATTN_FA_ROWS=16 GGX_CUDA_PROFILE=1 $B --synthetic llama3-8b --bpw 4.0 -p 2048 -n 0 -r 1 2>&1 | grep -iE 'attn|attention' ;;
        stages)
            for r in 1 2; do
                echo "-- llama3-8b 4.0 @16,512,2048,4096, round $r: GGX_ATTN_STAGES=3; 2 stages in 3 stages' shared memory (GGX_ATTN_SMEM_STAGES=3); the default (2)"
                GGX_ATTN_STAGES=3 tg --synthetic llama3-8b --bpw 4.0 --ctx 16,512,2048,4096
                GGX_ATTN_SMEM_STAGES=3 tg --synthetic llama3-8b --bpw 4.0 --ctx 16,512,2048,4096
                tg --synthetic llama3-8b --bpw 4.0 --ctx 16,512,2048,4096
            done ;;
        stages-sweep)
            for k in 128 192 256 384; do
                echo "-- llama3-8b 4.0 @512,2048,4096: GGX_ATTN_MIN_SPLIT_KEYS=$k with 3 stages, then with 2"
                GGX_ATTN_MIN_SPLIT_KEYS=$k GGX_ATTN_STAGES=3 tg --synthetic llama3-8b --bpw 4.0 --ctx 512,2048,4096
                GGX_ATTN_MIN_SPLIT_KEYS=$k GGX_ATTN_STAGES=2 tg --synthetic llama3-8b --bpw 4.0 --ctx 512,2048,4096
            done ;;
        orows)
            for r in 1 2; do
                for v in "" o_proj:128 o_proj:96 down_proj:448 o_proj:128,down_proj:448; do
                    echo "-- llama3-8b 4.0 @16, round $r: ${v:+GGX_QGEMV_ROWS_FOR=}${v:-the default}"
                    GGX_QGEMV_ROWS_FOR=$v tg --synthetic llama3-8b --bpw 4.0 --ctx 16
                done
            done ;;
        stages-ab)
            for st in 3 2; do
                echo "-- llama3-8b 4.0 @16,512,2048,4096: GGX_ATTN_STAGES=$st"
                GGX_ATTN_STAGES=$st tg --synthetic llama3-8b --bpw 4.0 --ctx 16,512,2048,4096
            done ;;
        plan)
            for r in 1 2; do
                for m in llama3-8b llama3.2-1b; do
                    for c in 0:0 8:0 12:0 12:16; do
                        echo "-- $m 4.0 @16, round $r: GGX_QGEMV_SLICE_COST=${c%:*} GGX_QGEMV_ODD_COST=${c#*:}"
                        GGX_QGEMV_SLICE_COST=${c%:*} GGX_QGEMV_ODD_COST=${c#*:} tg --synthetic $m --bpw 4.0 --ctx 16
                    done
                done
            done
            for mb in "llama3-8b 2.5" "llama3-8b 8.0" "qwen2.5-7b 4.0" "mistral-7b 4.0"; do
                read -r m b <<< "$mb"
                for c in 0:0 8:0 12:16; do
                    echo "-- $m $b @16: GGX_QGEMV_SLICE_COST=${c%:*} GGX_QGEMV_ODD_COST=${c#*:}"
                    GGX_QGEMV_SLICE_COST=${c%:*} GGX_QGEMV_ODD_COST=${c#*:} tg --synthetic $m --bpw $b --ctx 16
                done
            done ;;
        plan-trace)
            for b in 2.5 4.0 5.0; do
                for c in 0:0 12:16; do
                    echo "-- llama3-8b $b @16: GGX_QGEMV_SLICE_COST=${c%:*} GGX_QGEMV_ODD_COST=${c#*:}, trace of step 4"
                    GGX_QGEMV_SLICE_COST=${c%:*} GGX_QGEMV_ODD_COST=${c#*:} GGX_CUDA_TRACE=4 \
                        $B --synthetic llama3-8b --bpw $b -p 0 -n 8 -r 1 --ctx 16 2>&1 | grep -A11 "trace, step"
                done
            done ;;
        slicecost)
            for r in 1 2; do
                ab GGX_QGEMV_SLICE_COST=6 "llama3.2-1b 4.0" "llama3.2-1b 2.5" "llama3.2-1b 5.0" "llama3.2-1b 8.0"
            done ;;
        piececosts)
            for r in 1 2; do
                echo "-- round $r: GGX_QGEMV_PIECE_COSTS=0 is rows only, the plan before session 30"
                ab GGX_QGEMV_PIECE_COSTS=0 "llama3-8b 4.0" "qwen2.5-7b 4.0" "qwen2.5-7b 4.25"
            done
            CTX=4096 ab GGX_QGEMV_PIECE_COSTS=0 "llama3-8b 4.0" ;;
        smemconfig|smem-driver)
            # the L1/shared split each decode kernel launched with (ncu: kernels of one eager step)
            (if [ $part = smem-driver ]; then export GGX_CUDA_CARVEOUT=-1; fi
            for st in 2 3; do
                echo "-- llama3-8b 4.0 @16, GGX_ATTN_STAGES=$st: shared memory configuration per launch (ncu, eager)"
                GGX_ATTN_STAGES=$st GGX_CUDA_NO_GRAPH=1 timeout 120 $NCU \
                    --metrics launch__shared_mem_config_size,launch__shared_mem_per_block_dynamic,gpu__time_duration.sum \
                    -k regex:'k_qgemv|k_attn_decode' -s 200 -c 8 $B --synthetic llama3-8b --bpw 4.0 -p 0 -n 4 -r 1 --ctx 16 2>&1 |
                    grep -E 'k_qgemv|k_attn_decode|shared_mem|duration' | head -40
            done) ;;
        carveout)
            for v in "" GGX_CUDA_CARVEOUT=-1 GGX_CUDA_CARVEOUT=72 GGX_CUDA_CARVEOUT_ALL=1 ""; do
                echo "-- llama3-8b 4.0 @16,512,4096: ${v:-the default}"
                (if [ -n "$v" ]; then export "$v"; fi; tg --synthetic llama3-8b --bpw 4.0 --ctx 16,512,4096)
            done ;;
        sections)
            for v in "" GGX_CUDA_NO_PDL=1 GGX_ATTN_TAIL=256; do
                echo "-- trace, llama3-8b 4.0 @16: ${v:-the default}"
                (if [ -n "$v" ]; then export "$v"; fi; GGX_CUDA_TRACE=4 $B --synthetic llama3-8b --bpw 4.0 -p 0 -n 8 -r 1 --ctx 16 2>&1 | head -12)
            done ;;
        fencesc)
            variant_bench fencesc || continue
            for r in 1 2; do
                for spec in "llama3-8b 4.0 16" "llama3-8b 4.0 4096" "llama3.2-1b 4.0 16"; do
                    read -r m b c <<< "$spec"
                    echo "-- $m $b @$c, round $r: fencesc ($(variant_flags fencesc)), then the default"
                    B=build-dev-fencesc/bench tg --synthetic $m --bpw $b --ctx $c
                    tg --synthetic $m --bpw $b --ctx $c
                done
            done ;;
        handoff)
            echo "-- fences in the SASS: MEMBAR kinds per kernel"
            cuobjdump -sass $B 2>/dev/null | awk '/Function :/ { f = $3 } /MEMBAR/ { match($0, /MEMBAR[.A-Z]*/); n[f " " substr($0, RSTART, RLENGTH)]++ }
                END { for (k in n) print n[k], k }' | sort -k2
            echo "-- trace, llama3-8b 4.0 @16"
            GGX_CUDA_TRACE=4 $B --synthetic llama3-8b --bpw 4.0 -p 0 -n 8 -r 1 --ctx 16 2>&1 | head -12 ;;
        partialrt)
            nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/partial-rt.cu -o /tmp/partial-rt && /tmp/partial-rt ;;
        red)
            layer_trace GGX_QGEMV_RED=0
            for r in 1 2; do ab GGX_QGEMV_RED=0 "llama3-8b 4.0" "llama3.2-1b 4.0"; done
            CTX=4096 ab GGX_QGEMV_RED=0 "llama3-8b 4.0"
            run_tests -tc='*reduced into the residual*' ;;
        qkvrows)
            for r in 1 2; do ab GGX_QKV_ROWS=0 "llama3-8b 4.0" "llama3.2-1b 4.0" "qwen2.5-7b 4.0"; done
            CTX=4096 ab GGX_QKV_ROWS=0 "llama3-8b 4.0"
            for v in 0 1; do
                layer_trace GGX_QKV_ROWS=$v
            done
            run_tests -tc='*q/k/v rows*' ;;
        qkvm)
            for r in 1 2; do
                for mv in "llama3-8b " "llama3-8b q_proj:96" "llama3-8b q_proj:160" "llama3-8b q_proj:192" \
                          "llama3.2-1b " "llama3.2-1b q_proj:32" "llama3.2-1b q_proj:96"; do
                    read -r m v <<< "$mv"
                    echo "-- $m 4.0 @16, round $r: ${v:+GGX_QGEMV_ROWS_FOR=}${v:-the default}"
                    GGX_QGEMV_ROWS_FOR=$v tg --synthetic $m --bpw 4.0 --ctx 16
                done
            done ;;
        rowsmore)
            echo "-- llama3-8b 4.0 @512,2048: GGX_QKV_ROWS=0, then the default"
            (export GGX_QKV_ROWS=0; tg --synthetic llama3-8b --bpw 4.0 --ctx 512,2048)
            tg --synthetic llama3-8b --bpw 4.0 --ctx 512,2048
            ab GGX_QKV_ROWS=0 "llama2-7b 4.0"
            for r in 1 2; do
                ab GGX_QGEMV_ROWS_FOR=o_proj:128 "llama3-8b 5.0" "llama3-8b 8.0" "qwen2.5-7b 4.0"
                echo "-- llama3-70b (16 layers) 4.0 @16, round $r: GGX_QGEMV_ROWS_FOR=o_proj:512, then the default"
                (export GGX_QGEMV_ROWS_FOR=o_proj:512; tg --synthetic llama3-70b --layers 16 --bpw 4.0 --ctx 16)
                tg --synthetic llama3-70b --layers 16 --bpw 4.0 --ctx 16
            done ;;
        downm)
            for r in 1 2; do
                echo "-- round $r"
                ab GGX_QGEMV_ROWS_FOR=down_proj:224 "llama3-8b 4.0"
                ab GGX_QGEMV_ROWS_FOR=down_proj:64 "llama3.2-1b 4.0"
            done ;;
        mma4)
            # the tensor-core 4-bit pieces (variant mma4, session 46) against the default build: the
            # variant's GEMV and model tests, tg128@16 two rounds (4.0 and the mixed 4.25 on llama3-8b,
            # llama3.2-1b 4.0), once at 3.0 and 5.0 and @4096, both layer traces, and ncu's counts of
            # the variant's four GEMV launches (warp instructions per launch: run 210 had gate/up at
            # 10.59 M)
            gemv_variant_ready mma4 || continue
            variant_rounds mma4 "" "llama3-8b 4.0" "llama3-8b 4.25" "llama3.2-1b 4.0"
            ab_variant mma4 "4-bit pieces on the tensor cores" 3.0 5.0
            echo "-- llama3-8b 4.0 @4096: mma4, then the default build"
            B=build-dev-mma4/bench tg --synthetic llama3-8b --bpw 4.0 --ctx 4096
            tg --synthetic llama3-8b --bpw 4.0 --ctx 4096
            B=build-dev-mma4/bench layer_trace ""
            layer_trace ""
            echo "-- mma4: the GEMV launches of one layer (ncu, eager; launch 200 is gate/up)"
            NB=build-dev-mma4/bench ncu_step \
                --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum \
                -k regex:k_qgemv -s 200 -c 4 2>&1 | grep -vE '^==PROF==' | grep -E 'k_qgemv|gpu__|smsp__|dram__' | head -24 ;;
        vtests:*)
            # a build variant's test-cuda, the cases of TC_FILTER (default: all)
            v=${part#vtests:}
            variant_tests "$v" && TC=build-dev-$v/test-cuda run_tests -tc="${TC_FILTER:-*}" ;;
        downfew)
            # down in fewer blocks than its 112 (m 10: 96 blocks, m 12: 80), so that more of the next
            # q/k/v's blocks are resident before down ends (run 204: 20 early, 76 late by ~4 us). o
            # streams ~40 GB/s per SM on 64 SMs (run 200), so ~84-96 SMs may hold the H100's DRAM rate;
            # 64 blocks lost 5% (run 179)
            for r in 1 2; do
                echo "-- round $r"
                ab GGX_QGEMV_ROWS_FOR=down_proj:320 "llama3-8b 4.0"
                ab GGX_QGEMV_ROWS_FOR=down_proj:384 "llama3-8b 4.0"
            done
            CTX=4096 ab GGX_QGEMV_ROWS_FOR=down_proj:320 "llama3-8b 4.0"
            layer_trace GGX_QGEMV_ROWS_FOR=down_proj:320
            layer_trace "" ;;
        sassdump | sassdump:*)
            # gate/up's ncu source page (SASS, executed counts, stall samples per line) as CSV into
            # $OUT (or /tmp) for reading off the device, and summed by opcode; sassdump:VARIANT for a
            # build variant's bench
            sb=$B tag=""
            if [ "$part" != sassdump ]; then v=${part#sassdump:}; variant_bench "$v" || continue; sb=build-dev-$v/bench; tag=-$v; fi
            NB=$sb ncu_step --section SourceCounters --section WarpStateStats -k regex:k_qgemv -s 200 -c 1 -f -o /tmp/gateup-src > /dev/null 2>&1
            $NCU -i /tmp/gateup-src.ncu-rep --page source --csv --print-source sass 2>/dev/null > /tmp/gateup-sass.csv
            python3 bench/probes/sass-mix.py < /tmp/gateup-sass.csv | head -48
            xz < /tmp/gateup-sass.csv > ${OUT:-/tmp}/gateup-sass$tag.csv.xz
            ls -l ${OUT:-/tmp}/gateup-sass$tag.csv.xz ;;
        redcost)
            for r in 1 2; do
                ab GGX_QGEMV_RED_SLICE_COST=8 "llama3-8b 4.0" "mistral-7b 4.0" "llama3.2-1b 2.5" "llama3.2-1b 5.0" "llama3.2-1b 8.0" \
                    "llama3.2-1b 4.0" "llama3-8b 2.5"
            done ;;
        deterministic)
            build-dev/test-cuda -tc='*deterministic*' > /tmp/test-det.log 2>&1
            grep -E -A3 'differed|MESSAGE|ERROR|FAILED|rel err' /tmp/test-det.log | head -40
            grep -E 'test cases|assertions|Status' /tmp/test-det.log
            for r in 1 2; do
                for m in llama3-8b llama3.2-1b; do
                    echo "-- $m 4.0 @16, round $r: --deterministic, then the default"
                    tg --synthetic $m --bpw 4.0 --ctx 16 --deterministic
                    tg --synthetic $m --bpw 4.0 --ctx 16
                done
            done ;;
        onedeep-rule)
            (export GGX_QGEMV_ONE_DEEP=2; run_tests -tc='*EXL2*,*synthetic*,*q/k/v rows*,*deterministic*,*logits*')
            for r in 1 2; do ab GGX_QGEMV_ONE_DEEP=2 "llama3-8b 3.0" "llama3-8b 2.5" "llama3-8b 3.5" "llama3-8b 4.0" "llama3.2-1b 2.5"; done
            for r in 1 2; do ab GGX_QGEMV_ONE_DEEP=3 "llama3-8b 4.25" "llama3-8b 4.5" "llama3-8b 3.0" "llama3-8b 4.0"; done ;;
        prefetchfor)
            for r in 1 2; do
                ab GGX_QGEMV_PREFETCH_FOR=o_proj:0 "llama3-8b 4.0" "llama3.2-1b 4.0" "llama3-8b 2.5"
                CTX=4096 ab GGX_QGEMV_PREFETCH_FOR=o_proj:0 "llama3-8b 4.0"
            done
            for v in gate_proj:0 down_proj:0 q_proj:0 o_proj:8; do ab GGX_QGEMV_PREFETCH_FOR=$v "llama3-8b 4.0"; done ;;
        l2miss)
            for c in 16 4096; do
                echo "-- llama3-8b 4.0 @$c: L2 lookups per launch (ncu, eager)"
                CTX=$c ncu_step \
                    --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum \
                    -k regex:'k_qgemv|k_attn_decode' -s 200 -c 10 2>&1 | grep -E 'k_qgemv|k_attn_decode|duration|dram__|lts__' | head -70
            done ;;
        loopbound)
            # Is the decode GEMV's loop bound by the SMs or by DRAM (session 45: 30% of gate/up warmed
            # in L2 shortened its loop 18.03 -> 17.76 us)? ncu on one layer's four GEMV launches of an
            # eager llama3-8b 4.0 step (run 209: launch 200 is gate/up, 112 blocks and ~59 MB; then
            # down, q/k/v, o): issue use, warp instructions, DRAM; then gate/up alone: stall reasons
            # and its SASS summed by opcode (the loop is unrolled, so no single line stands out)
            echo "-- llama3-8b 4.0 @16: the GEMV launches of one layer (ncu, eager)"
            ncu_step \
                --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,dram__bytes_read.sum,sm__cycles_active.avg,smsp__cycles_active.avg \
                -k regex:k_qgemv -s 200 -c 4 2>&1 | grep -vE '^==PROF==|^\|' | grep -E 'k_qgemv|gpu__|smsp__|dram__|sm__' | head -40
            echo "-- gate/up (k_qgemv launch 200): stall reasons and SASS by opcode"
            ncu_step --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section SourceCounters \
                --section LaunchStats -k regex:k_qgemv -s 200 -c 1 -f -o /tmp/gateup > /dev/null 2>&1
            $NCU -i /tmp/gateup.ncu-rep --page details 2>/dev/null |
                grep -E 'k_qgemv|Grid Size|Duration|DRAM Throughput|Issued Warp|No Eligible|Warp Cycles Per Issued|Active Warps Per' | head -10
            $NCU -i /tmp/gateup.ncu-rep --page raw --csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
names, values = rows[0], rows[-1]
stalls = []
for n, v in zip(names, values):
    if "issue_stalled" in n and n.endswith("per_issue_active.ratio"):
        try: stalls.append((float(v.replace(",", "")), n))
        except ValueError: pass
print("stall cycles per issued instruction, by reason:")
for v, n in sorted(stalls, reverse=True)[:14]: print("%8.2f  %s" % (v, n))
'
            $NCU -i /tmp/gateup.ncu-rep --page source --csv --print-source sass 2>/dev/null | python3 bench/probes/sass-mix.py ;;
        queuedepth)
            nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/queue-depth.cu -o /tmp/queue-depth && /tmp/queue-depth ;;
        onedeep)
            for r in 1 2; do ab GGX_QGEMV_ONE_DEEP=1 "llama3-8b 4.0" "llama3-8b 8.0" "llama3-8b 2.5" "llama3.2-1b 4.0"; done
            CTX=4096 ab GGX_QGEMV_ONE_DEEP=1 "llama3-8b 4.0"
            layer_trace GGX_QGEMV_ONE_DEEP=1 ;;
        clusterhandoff)
            nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/cluster-handoff.cu -o /tmp/cluster-handoff && /tmp/cluster-handoff 512 &&
                /tmp/cluster-handoff 128 ;;
        handoffchain)
            nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/handoff-chain.cu -o /tmp/handoff-chain && /tmp/handoff-chain 128 && /tmp/handoff-chain 256 ;;
        icache)
            nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/icache-cold.cu -o /tmp/icache-cold && /tmp/icache-cold 32 20 && /tmp/icache-cold 512 20 ;;
        clusters)
            nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/cluster-fit.cu -o /tmp/cluster-fit && /tmp/cluster-fit ;;
        pairgroups)
            # the variant's test-cuda (the joined pieces against the same build without them, and the
            # model cases against the CPU), then tg128@16: the variant, the variant with its joins off
            # (what its kernel's extra code costs), the default build
            variant_tests pairgroups && TC=build-dev-pairgroups/test-cuda run_tests -tc='*across groups*,*synthetic*,*logits*'
            variant_bench pairgroups || continue
            variant_rounds pairgroups GGX_QGEMV_PAIR_GROUPS=0 "llama3-8b 4.25" "llama3-8b 4.5" "llama3-8b 4.0" "qwen2.5-7b 4.25" \
                "llama3.2-1b 4.5" ;;
        blocks)
            # every block of layer 5's q/k/v and gate/up launches: when each entered, passed its
            # wait, started and ended its loop (run 204: q/k/v's blocks that enter behind down)
            block_dump "" ;;
        blocks-od)
            # the same for layer 5's o and down (down's blocks enter as gate/up's exit)
            NAMES=layers.5.self_attn.o_proj,layers.5.mlp.down_proj LINES_MAX=300 block_dump "" ;;
        gemv:*)
            v=${part#gemv:}
            gemv_variant_ready "$v" || continue
            B=build-dev-$v/bench block_dump ""
            variant_rounds "$v" "" "llama3-8b 4.0" "llama3-8b 3.0" "llama3.2-1b 4.0"
            echo "-- llama3-8b 4.0 @4096: $v, then the default build"
            B=build-dev-$v/bench tg --synthetic llama3-8b --bpw 4.0 --ctx 4096
            tg --synthetic llama3-8b --bpw 4.0 --ctx 4096 ;;
        uneven)
            variant_tests uneven && TC=build-dev-uneven/test-cuda run_tests -tc='*uneven*,*EXL2*,*synthetic*,*logits*,*rows*'
            variant_bench uneven || continue
            B=build-dev-uneven/bench block_dump ""
            variant_rounds uneven GGX_QGEMV_UNEVEN_FOR= "llama3-8b 4.0" "llama3-8b 3.0" "llama3.2-1b 4.0"
            echo "-- llama3-8b 4.0 @16: uneven with GGX_QGEMV_UNEVEN_FOR=gate_proj:4, then the default build"
            (export GGX_QGEMV_UNEVEN_FOR=gate_proj:4; B=build-dev-uneven/bench tg --synthetic llama3-8b --bpw 4.0 --ctx 16)
            tg --synthetic llama3-8b --bpw 4.0 --ctx 16
            echo "-- llama3-8b 4.0 @4096: uneven, then the default build"
            B=build-dev-uneven/bench tg --synthetic llama3-8b --bpw 4.0 --ctx 4096
            tg --synthetic llama3-8b --bpw 4.0 --ctx 4096 ;;
        gemv-short:*)
            # the same question in ~100 s: the tests, then 8B 4.0 @16 twice and llama3.2-1b once, each
            # variant then default
            v=${part#gemv-short:}
            gemv_variant_ready "$v" || continue
            for mb in "llama3-8b 4.0" "llama3-8b 4.0" "llama3.2-1b 4.0"; do
                read -r m b <<< "$mb"
                echo "-- $m $b @16: $v, then the default build"
                B=build-dev-$v/bench tg --synthetic $m --bpw $b --ctx 16
                tg --synthetic $m --bpw $b --ctx 16
            done ;;
        compact)
            # the variant's model tests against the CPU, then tg128@16: the variant, the default build
            variant_tests compact && TC=build-dev-compact/test-cuda run_tests -tc='*EXL2*,*synthetic*,*logits*'
            variant_bench compact || continue
            variant_rounds compact "" "llama3-8b 4.0" "llama3-8b 2.5" "llama3-8b 3.0" "llama3.2-1b 4.0" "qwen2.5-7b 4.0"
            echo "-- llama3-8b 4.0 @4096: compact, then the default build"
            B=build-dev-compact/bench tg --synthetic llama3-8b --bpw 4.0 --ctx 4096
            tg --synthetic llama3-8b --bpw 4.0 --ctx 4096 ;;
        tail)
            run_tests -tc='*tail*'
            for n in 256 0 256; do echo "-- llama3-8b 4.0 @16, GGX_ATTN_TAIL=$n"; GGX_ATTN_TAIL=$n tg --synthetic llama3-8b --bpw 4.0 --ctx 16; done
            for mb in "llama3-8b 2.5" "llama3.2-1b 4.0" "qwen2.5-7b 4.0"; do
                read -r m b <<< "$mb"
                for n in 256 0; do echo "-- $m $b @16, GGX_ATTN_TAIL=$n"; GGX_ATTN_TAIL=$n tg --synthetic $m --bpw $b --ctx 16; done
            done
            for n in 256 0; do echo "-- llama3-8b 4.0 @512, GGX_ATTN_TAIL=$n"; GGX_ATTN_TAIL=$n tg --synthetic llama3-8b --bpw 4.0 --ctx 512; done
            GGX_ATTN_TAIL=256 GGX_CUDA_TRACE=4 $B --synthetic llama3-8b --bpw 4.0 -p 0 -n 8 -r 1 --ctx 16 2>&1 | head -20 ;;
        tail-short)
            for n in 256 0; do echo "-- llama3-8b 4.0 @16, GGX_ATTN_TAIL=$n"; GGX_ATTN_TAIL=$n tg --synthetic llama3-8b --bpw 4.0 --ctx 16; done
            GGX_ATTN_TAIL=256 GGX_CUDA_TRACE=4 $B --synthetic llama3-8b --bpw 4.0 -p 0 -n 8 -r 1 --ctx 16 2>&1 | head -12 ;;
        qwengu)
            for r in 1 2; do
                for b in 4.0 2.5; do
                    for rf in gate_proj:896 gate_proj:448; do
                        echo "-- qwen2.5-7b $b @16, round $r: GGX_QGEMV_ROWS_FOR=$rf, then the default"
                        GGX_QGEMV_ROWS_FOR=$rf tg --synthetic qwen2.5-7b --bpw $b --ctx 16
                    done
                    tg --synthetic qwen2.5-7b --bpw $b --ctx 16
                done
            done ;;
        pairwidths)
            variant_tests pairgroups && TC=build-dev-pairgroups/test-cuda run_tests -tc='*across groups*'
            variant_bench pairgroups || continue
            for mb in "llama3-8b 2.5" "llama3-8b 3.5" "llama3.2-1b 2.5"; do
                read -r m b <<< "$mb"
                for w in 0 2 3 1; do
                    echo "-- $m $b @16: pairgroups build, GGX_QGEMV_PAIR_GROUPS=$w"
                    GGX_QGEMV_PAIR_GROUPS=$w B=build-dev-pairgroups/bench tg --synthetic $m --bpw $b --ctx 16
                done
                echo "-- $m $b @16: the default build"
                tg --synthetic $m --bpw $b --ctx 16
            done
            echo "-- llama3.2-1b 4.0 @16: the default build"
            tg --synthetic llama3.2-1b --bpw 4.0 --ctx 16 ;;
        windows) ab_variant nowin "codes one by one" 3.0 5.0 6.0 4.0 2.5 ;;
        x16) ab_variant nox16 "2-bit pairs each shifted" 2.5 3.0 4.0 ;;
        *) echo "unknown part '$part' (tests[:FILTER], figures, figures-short, attn-sweep, trace, uneven, pairs, sample, ropetable, normtable, fa32, stages, stages-sweep, stages-ab, orows, plan, plan-trace, piececosts, slicecost, qwengu, compact, pairgroups, pairwidths, smemconfig, smem-driver, carveout, clusters, windows, x16)"; exit 2 ;;
    esac
done
echo "== done (at ${SECONDS} s)"
