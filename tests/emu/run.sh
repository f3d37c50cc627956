#!/bin/bash
# run.sh [prefill|decode|qgemv|qgemv-pairgroups|qgemv-compact|qgemv-mma4|qgemv-uneven|all]: builds the emulators into $EMU_BUILD (default build-emu/ at the
# repository root) and runs their default cases. Exit status 0 when every run passes.
# Each run's report goes to $EMU_BUILD/KIND.out (check failures to KIND.err).
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${EMU_BUILD:-$root/build-emu}
what=${1:-all}
case "$what" in
    prefill | decode | qgemv | qgemv-pairgroups | qgemv-compact | qgemv-mma4 | qgemv-uneven) kinds=$what ;;
    all) kinds="prefill decode qgemv qgemv-pairgroups qgemv-compact qgemv-mma4 qgemv-uneven" ;;
    *) echo "usage: run.sh [prefill|decode|qgemv|qgemv-pairgroups|qgemv-compact|qgemv-mma4|qgemv-uneven|all]" >&2; exit 2 ;;
esac
rc=0
for k in $kinds; do
    if ! "$here/build.sh" "$k" "$build"; then echo "$k: build failed" >&2; rc=1; continue; fi
    start=$SECONDS
    "$build/emu-$k" > "$build/$k.out" 2> "$build/$k.err"
    r=$?
    echo "$(tail -n 1 "$build/$k.out") ($((SECONDS - start)) s, exit $r)"
    [ -s "$build/$k.err" ] && head -n 5 "$build/$k.err"
    [ $r -eq 0 ] || rc=1
done
exit $rc
