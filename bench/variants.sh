# Build variants for A/B measurements on the device: a second bench (and test-cuda) built with one
# compile-time switch changed, measured against the default build. Sourced by bench/prebuild.sh
# (which can build them here) and bench/device-suite.sh (which uses those or builds them there).
#
#   nowin       -DGGX_PAIR_WINDOWS=0       3-, 5- and 6-bit codes placed one by one (before session 22)
#   nox16       -DGGX_PAIR_X16_2BIT=0      2-bit pairs each shifted into place (before session 24)
#   pairgroups  -DGGX_QGEMV_PAIR_GROUPS=1  paired pieces also across two groups (session 30; -2.8% to +2%, runs 155, 157)
#   compact     -DGGX_QGEMV_COMPACT_HALVES=1  a 64-row piece's two halves by one copy of the code (session 32)
#   mma4        -DGGX_QGEMV_MMA4=1         a one-row GEMV's 4-bit pieces on the tensor cores (session 46; H100: -6.5% in run 212, -2.8% in run 215)
#   fencesc     -DGGX_FENCE_SC=1           the blocks' hand-offs fence with __threadfence (fence.sc) in their one
#                                          fencing thread (run 170: within 0.2% of fence.acq_rel)
#   nocopy      -DGGX_QGEMV_CODE_COPY=0    no second instantiation of k_qgemv<1, 4> (GGX_QGEMV_CODE_COPY_FOR
#                                          gone): its SASS then differs from the default's (session 51);
#                                          measure before the knob is removed
#   uneven      -DGGX_QGEMV_UNEVEN=1       the decode GEMV's grid K-slice by K-slice, and gate/up's first half of
#                                          K-slices m / 8 fine slices per group longer than its second half
#                                          (GGX_QGEMV_UNEVEN_FOR; session 52): its late blocks do less
variant_names="nowin nox16 pairgroups compact mma4 fencesc nocopy uneven"
variant_flags() {
    case "$1" in
        nowin) echo "-DGGX_PAIR_WINDOWS=0" ;;
        nox16) echo "-DGGX_PAIR_X16_2BIT=0" ;;
        pairgroups) echo "-DGGX_QGEMV_PAIR_GROUPS=1" ;;
        compact) echo "-DGGX_QGEMV_COMPACT_HALVES=1" ;;
        mma4) echo "-DGGX_QGEMV_MMA4=1" ;;
        fencesc) echo "-DGGX_FENCE_SC=1" ;;
        nocopy) echo "-DGGX_QGEMV_CODE_COPY=0" ;;
        uneven) echo "-DGGX_QGEMV_UNEVEN=1" ;;
        *) return 1 ;;
    esac
}
