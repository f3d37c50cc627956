#!/bin/bash
# Build the device suite's binaries on this machine (no GPU needed), so that a device call spends
# its time on tests and measurements instead of the ~75 s build. Writes, for the tree as it is now:
#
#   fixtures-local/prebuilt/test-cuda.xz, bench.xz    sm_90, host code for x86-64-v3, stripped
#   fixtures-local/prebuilt/bench-VARIANT.xz,         the same bench and test-cuda with a switch
#     test-cuda-VARIANT.xz                            changed, for each VARIANT named (bench/
#                                                     variants.sh: nowin, nox16, pairgroups; the
#                                                     suite's `windows`, `x16`, `pairgroups` parts)
#   fixtures-local/prebuilt/STAMP, fixtures-local/COMMIT   the tree's name: `git describe --always
#                                                     --dirty`, plus a hash of the changes if dirty
#
# bench/device-suite.sh uses them when STAMP equals fixtures-local/COMMIT and they start on the
# device (other system libraries there could stop them), and builds there otherwise. xz keeps the
# two at ~9 MB, ~18 MB with one variant, against the 64 MiB a call carries (the tree ~16 MB, the
# EXL2 fixtures ~20 MB): one variant per call.
#
#   bench/prebuild.sh [VARIANT...]     then carry ["fixtures-local"]
set -eu
cd "$(dirname "$0")/.."
. bench/variants.sh
variants=()
for v in "$@"; do
    [ "$v" = --windows ] && v=nowin   # the old spelling
    variant_flags "$v" >/dev/null || { echo "prebuild: error: unknown variant '$v' (known: $variant_names)" >&2; exit 2; }
    variants+=("$v")
done
out=fixtures-local/prebuilt
# The tree's name; a dirty tree's changes (tracked and untracked) are hashed into it, so that an
# edit after the build cannot pass as the tree built.
tree_stamp() {
    local d
    d=$(git describe --always --dirty)
    case "$d" in
        *-dirty) echo "$d-$({ git diff HEAD; git ls-files -z --others --exclude-standard | xargs -0r cat; } | sha1sum | cut -c1-10)" ;;
        *) echo "$d" ;;
    esac
}
stamp=$(tree_stamp)
common=(CUDA=1 CUDA_ARCH=90 NATIVE=x86-64-v3)
# (the bench binary is bench-bin here: build-pre/bench/ holds the objects of bench/*.cpp, e.g. the
# plan report's)
jobs=$(nproc)

pack() {  # pack BINARY NAME: strip (host symbols only; the GPU code is untouched) and compress
    strip -o "$out/$2" "$1"
    xz -T"$jobs" -6 -f "$out/$2"
}

mkdir -p "$out"
rm -f "$out"/*.xz "$out/STAMP"
echo "prebuild: test-cuda and bench at $stamp"
make -j"$jobs" "${common[@]}" BUILD=build-pre BENCH=build-pre/bench-bin build-pre/test-cuda build-pre/bench-bin >/tmp/prebuild.log 2>&1 ||
    { tail -30 /tmp/prebuild.log; echo "prebuild: error: the build failed (log: /tmp/prebuild.log)" >&2; exit 1; }
pack build-pre/test-cuda test-cuda
pack build-pre/bench-bin bench
for v in ${variants[@]+"${variants[@]}"}; do
    flags=$(variant_flags "$v")
    echo "prebuild: bench $v ($flags)"
    NVCCFLAGS="-O3 -lineinfo $flags" make -j"$jobs" "${common[@]}" BUILD=build-pre-$v \
        BENCH=build-pre-$v/bench-bin build-pre-$v/bench-bin build-pre-$v/test-cuda >/tmp/prebuild-$v.log 2>&1 ||
        { tail -30 /tmp/prebuild-$v.log; echo "prebuild: error: the $v build failed (log: /tmp/prebuild-$v.log)" >&2; exit 1; }
    pack build-pre-$v/bench-bin bench-$v
    pack build-pre-$v/test-cuda test-cuda-$v
done
# The stamp last: a tree changed during the build must not pass as the one built.
if [ "$(tree_stamp)" != "$stamp" ]; then
    echo "prebuild: error: the tree changed during the build; run it again" >&2
    exit 1
fi
echo "$stamp" > "$out/STAMP"
echo "$stamp" > fixtures-local/COMMIT
ls -l "$out"
