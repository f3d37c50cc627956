#!/bin/bash
# build.sh prefill|decode OUT_DIR [KERNEL_SRC]: the kernel text as host code (gen-KIND.sh), then
# the emulator OUT_DIR/emu-KIND. KERNEL_SRC defaults to the repository's kernel (mutants.sh
# passes a changed copy). CUDA_HOME (default /usr/local/cuda) gives cuda_fp16.h; CXX the compiler.
set -e -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
kind=$1; out=$2
case "$kind" in
    prefill) def=$root/backends/cuda/attn-prefill.cu ;;
    decode) def=$root/backends/cuda/attn-decode.cu ;;
    *) echo "usage: build.sh prefill|decode OUT_DIR [KERNEL_SRC]" >&2; exit 2 ;;
esac
[ -n "$out" ] || { echo "usage: build.sh prefill|decode OUT_DIR [KERNEL_SRC]" >&2; exit 2; }
src=${3:-$def}
mkdir -p "$out"
"$here/gen-$kind.sh" "$src" "$root/backends/cuda/attn-common.cuh" "$out/kern-$kind.inc"
${CXX:-g++} -std=c++17 -O2 -g -ftrivial-auto-var-init=pattern -Wall -Wextra -I"${CUDA_HOME:-/usr/local/cuda}/include" \
    -I"$out" -DKERN_INC="\"kern-$kind.inc\"" "$here/emu-$kind.cpp" -o "$out/emu-$kind"
