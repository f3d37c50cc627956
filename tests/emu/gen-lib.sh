# Helpers of gen-prefill.sh and gen-decode.sh (sourced): pieces of the kernel sources as host code.
# Each step fails loudly when its text is not found: the kernel source changed shape, and the
# gen script needs the same change.

die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# range FILE START END: the lines from the first one matching START (an extended regex) up to,
# not including, the next one matching END
range() {
    local out
    out=$(S="$2" E="$3" awk 'on && $0 ~ ENVIRON["E"] { found = 1; exit } $0 ~ ENVIRON["S"] { on = 1 } on { print }
                             END { exit found ? 0 : 1 }' "$1") || die "$1: no lines from /$2/ to /$3/"
    printf '%s\n' "$out"
}

# fix FILE FROM TO: every FROM (fixed text) in FILE becomes TO; FROM must occur
fix() {
    grep -qF -- "$2" "$1" || die "'$2' not found in the extracted text"
    F="$2" T="$3" perl -pi -e 's/\Q$ENV{F}\E/$ENV{T}/g' "$1"
}

# check OUT KERNEL: no device-only text left, the kernel is there
check() {
    if grep -n '__shared__\|__global__\|__device__\|__grid_constant__\|asm' "$1" >&2; then die "device-only text left in $1"; fi
    grep -q "void $2" "$1" || die "$2 not found in $1"
}

# kernel SRC FIRST: from the line matching FIRST (the kernel's first constant) up to its launch
# function, without the launch's template line: the kernel and its helpers
kernel() {
    range "$1" "$2" '^ggx_status launch\(' | sed "\${/^template </d}"
}

# fix_kernel OUT THREADS: the device-only spellings every attention kernel has (inline helpers,
# the __global__ line with its launch bounds, the dynamic shared memory) as host code
fix_kernel() {
    fix "$1" '__device__ __forceinline__' 'inline'
    fix "$1" "__global__ void __launch_bounds__($2)" 'void'
    fix "$1" 'extern __shared__ __align__(128) unsigned char smraw[];' 'unsigned char * smraw = g_smem;'
}
