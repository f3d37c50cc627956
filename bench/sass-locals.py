#!/usr/bin/env python3
# Where a kernel's local-memory loads and stores (spills, call frames) sit in its SASS, without a
# disassembler (this machine has ptxas but no cuobjdump / nvdisasm). ptxas -v says how many bytes
# spill, not where: a spill in the prologue costs once per thread, one in the weight loop every
# piece. Reads the cubin's ELF sections and takes each 128-bit instruction's opcode from the low
# 12 bits of its first word; the codes below were checked against ptxas -v on sm_90 (the counts of
# LDL and STL match its spill loads and stores in variants with and without spills, session 50).
#
#   bench/sass-locals.py [--ops] CUBIN [NAME_PART]
#
# prints, for each kernel whose name holds NAME_PART: its size, the offsets of LDL and STL, of the
# block barriers (BAR.SYNC) and the span of the HFMA2 instructions (the decode GEMV's loop: its
# fp16 multiply). A local access between two barriers that both precede the HFMA2 span is outside
# the loop. With --ops, also the instructions in the HFMA2 span per HFMA2 and their most frequent
# opcodes (raw codes: without a disassembler their names are unknown), to compare two builds' loops
# (session 51: the variant ffnshared's span held 9.7% more per HFMA2 than the default's). Build the
# cubin with e.g.
#   nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I. -Iinclude -DGGX_USE_CUDA -cubin \
#       -o /tmp/q.cubin backends/cuda/qgemv.cu
import collections
import re
import struct
import subprocess
import sys

OPS = {0x983: 'LDL', 0x387: 'STL', 0xb1d: 'BAR', 0x231: 'HFMA2'}


def text_sections(path):
    out = subprocess.run(['readelf', '-S', '-W', path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = re.search(r'\]\s+\.text\.(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)', line)
        if m and int(m.group(3), 16) > 0:
            yield m.group(1), int(m.group(2), 16), int(m.group(3), 16)


def main():
    args = sys.argv[1:]
    ops = bool(args) and args[0] == '--ops'
    args = args[1:] if ops else args
    if len(args) not in (1, 2):
        sys.exit('usage: sass-locals.py [--ops] CUBIN [NAME_PART]')
    path, part = args[0], args[1] if len(args) == 2 else ''
    data = open(path, 'rb').read()
    found = False
    for name, off, size in text_sections(path):
        if part not in name:
            continue
        found = True
        at = {k: [] for k in OPS.values()}
        codes = [struct.unpack_from('<Q', data, off + i)[0] & 0xfff for i in range(0, size, 16)]
        for n, op in enumerate(codes):
            if op in OPS:
                at[OPS[op]].append(16 * n)
        print(f'{name}: {size} bytes')
        h = at['HFMA2']
        print(f'  HFMA2 {len(h)}' + (f' from {h[0]} to {h[-1]}' if h else ''))
        for k in ('LDL', 'STL', 'BAR'):
            inside = [o for o in at[k] if h and h[0] <= o <= h[-1]]
            print(f'  {k} {len(at[k])} at {at[k][:24]}' + (f'; {len(inside)} inside the HFMA2 span' if k != 'BAR' else ''))
        if ops and h:
            span = codes[h[0] // 16:h[-1] // 16 + 1]
            top = collections.Counter(span).most_common(12)
            print(f'  span: {len(span)} instructions, {len(span) / len(h):.3f} per HFMA2; most frequent opcodes: ' +
                  ', '.join(f'{c:#x} {k}' for c, k in top))
    if not found:
        sys.exit(f'sass-locals.py: no kernel in {path} has "{part}" in its name')


if __name__ == '__main__':
    main()
