# Build variants for A/B measurements on the device: a second bench built with one compile-time
# switch turned off, measured against the default build. Sourced by bench/prebuild.sh (which can
# build them here) and bench/device-suite.sh (which uses those or builds them there).
#
#   nowin   -DGGX_PAIR_WINDOWS=0    3-, 5- and 6-bit codes placed one by one (before session 22)
#   nox16   -DGGX_PAIR_X16_2BIT=0   2-bit pairs each shifted into place (before session 24)
#   tail2   -DGGX_QGEMV_TAIL_TWICE=1   a GEMV tile's last block sums its partials twice (the first
#           result dropped): how much of a tail is its first, cold run (session 25)
variant_names="nowin nox16 tail2"
variant_flags() {
    case "$1" in
        nowin) echo "-DGGX_PAIR_WINDOWS=0" ;;
        nox16) echo "-DGGX_PAIR_X16_2BIT=0" ;;
        tail2) echo "-DGGX_QGEMV_TAIL_TWICE=1" ;;
        *) return 1 ;;
    esac
}
