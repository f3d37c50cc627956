#!/bin/bash
# build.sh prefill|decode|qgemv[-VARIANT] OUT_DIR [KERNEL_SRC]: the kernel text as host
# code (gen-KIND.sh), then the emulator OUT_DIR/emu-KIND (qgemv-VARIANT: the GEMV of a build variant
# of bench/variants.sh that changes it, pairgroups, compact or mma4). KERNEL_SRC defaults to the repository's
# kernel (mutants.sh passes a changed copy). CUDA_HOME (default /usr/local/cuda) gives cuda_fp16.h; CXX the compiler.
set -e -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cu=$root/backends/cuda
kind=$1; out=$2
usage() { echo "usage: build.sh prefill|decode|qgemv[-pairgroups|-compact|-mma4|-uneven] OUT_DIR [KERNEL_SRC]" >&2; exit 2; }
case "$kind" in
    prefill) def=$cu/attn-prefill.cu ;;
    decode) def=$cu/attn-decode.cu ;;
    qgemv | qgemv-pairgroups | qgemv-compact | qgemv-mma4 | qgemv-uneven) def=$cu/qgemv.cu ;;
    *) usage ;;
esac
[ -n "$out" ] || usage
src=${3:-$def}
mkdir -p "$out"
flags=(-std=c++17 -O2 -g -ftrivial-auto-var-init=pattern -Wall -Wextra -I"${CUDA_HOME:-/usr/local/cuda}/include" -I"$out")
base=${kind%%-*}
variant=()   # a variant's switch from bench/variants.sh
if [ "$kind" != "$base" ]; then
    . "$root/bench/variants.sh"
    read -ra variant <<< "$(variant_flags "${kind#*-}")"
fi
if [ "$base" = qgemv ]; then
    # the reference dequantizer (exl2/quant), ggx's tensors (the job) and the piece tables
    # (qmatrix.cu's host code)
    "$here/gen-qgemv.sh" "$src" "$cu" "$out/kern-qgemv.inc"
    ${CXX:-g++} "${flags[@]}" -I"$root" -DKERN_INC='"kern-qgemv.inc"' -DTABLES_INC='"tables.inc"' "${variant[@]}" \
        "$here/emu-qgemv.cpp" "$root/exl2/quant/dequant.cpp" "$root/exl2/quant/exl2-pack.cpp" "$root/ggx/ggx.cpp" -o "$out/emu-$kind"
else
    "$here/gen-$base.sh" "$src" "$cu/attn-common.cuh" "$out/kern-$kind.inc"
    # (-I the repository: decode-plan.h's ggx_attn_tail_takes, which the kernels' common text calls)
    ${CXX:-g++} "${flags[@]}" -I"$root" -DKERN_INC="\"kern-$kind.inc\"" "${variant[@]}" "$here/emu-$base.cpp" -o "$out/emu-$kind"
fi
