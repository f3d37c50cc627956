#!/bin/bash
# Build the device suite's binaries on this machine (no GPU needed), so that a device call spends
# its time on tests and measurements instead of the ~75 s build. Writes, for the tree as it is now:
#
#   fixtures-local/prebuilt/test-cuda.xz, bench.xz    sm_90, host code for x86-64-v3, stripped
#   fixtures-local/prebuilt/bench-nowin.xz            the same bench with -DGGX_PAIR_WINDOWS=0
#                                                     (only with --windows: the suite's `windows` part)
#   fixtures-local/prebuilt/STAMP, fixtures-local/COMMIT   the tree's name: `git describe --always
#                                                     --dirty`, plus a hash of the changes if dirty
#
# bench/device-suite.sh uses them when STAMP equals fixtures-local/COMMIT and they start on the
# device (other system libraries there could stop them), and builds there otherwise. xz keeps the
# three at ~13 MB against the 64 MiB a call carries (the tree ~16 MB, the EXL2 fixtures ~20 MB).
#
#   bench/prebuild.sh [--windows]      then carry ["fixtures-local"]
set -eu
cd "$(dirname "$0")/.."
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
jobs=$(nproc)

pack() {  # pack BINARY NAME: strip (host symbols only; the GPU code is untouched) and compress
    strip -o "$out/$2" "$1"
    xz -T"$jobs" -6 -f "$out/$2"
}

mkdir -p "$out"
rm -f "$out"/*.xz "$out/STAMP"
echo "prebuild: test-cuda and bench at $stamp"
make -j"$jobs" "${common[@]}" BUILD=build-pre BENCH=build-pre/bench build-pre/test-cuda build-pre/bench >/tmp/prebuild.log 2>&1 ||
    { tail -30 /tmp/prebuild.log; echo "prebuild: error: the build failed (log: /tmp/prebuild.log)" >&2; exit 1; }
pack build-pre/test-cuda test-cuda
pack build-pre/bench bench
if [ "${1:-}" = --windows ]; then
    echo "prebuild: bench with -DGGX_PAIR_WINDOWS=0"
    NVCCFLAGS="-O3 -lineinfo -DGGX_PAIR_WINDOWS=0" make -j"$jobs" "${common[@]}" BUILD=build-pre-nowin \
        BENCH=build-pre-nowin/bench build-pre-nowin/bench >/tmp/prebuild-nowin.log 2>&1 ||
        { tail -30 /tmp/prebuild-nowin.log; echo "prebuild: error: the no-windows build failed" >&2; exit 1; }
    pack build-pre-nowin/bench bench-nowin
fi
# The stamp last: a tree changed during the build must not pass as the one built.
if [ "$(tree_stamp)" != "$stamp" ]; then
    echo "prebuild: error: the tree changed during the build; run it again" >&2
    exit 1
fi
echo "$stamp" > "$out/STAMP"
echo "$stamp" > fixtures-local/COMMIT
ls -l "$out"
