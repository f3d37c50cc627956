#!/usr/bin/env python3
"""Sum an ncu source page (--page source --csv --print-source sass) by SASS opcode.

The decode GEMV's loop is unrolled, so no single SASS line stands out by its executed count: what
says where the issue slots go is the mix of opcodes over the whole kernel, and the stall samples
(where the report has them) say what the warps waited on.  Reads the CSV on stdin.
"""
import csv
import re
import sys
from collections import defaultdict


def number(text):
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def opcode(sass):
    # "@!P1 LOP3.LUT R1, ..." -> "LOP3.LUT"; keep the modifiers that change the unit (HFMA2.MMA)
    words = sass.strip().split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].rstrip(",;") if words else "?"


rows = list(csv.reader(sys.stdin))
head = next((i for i, r in enumerate(rows) if any(c.strip() == "Instructions Executed" for c in r)), None)
if head is None:
    sys.exit("sass-mix: no 'Instructions Executed' column in the ncu source page")
cols = [c.strip() for c in rows[head]]
ie = cols.index("Instructions Executed")
src = cols.index("Source") if "Source" in cols else 1
stall_cols = [i for i, c in enumerate(cols) if re.search(r"stall|Sampling", c, re.I)]
body = [r for r in rows[head + 1:] if len(r) > ie and number(r[ie]) is not None]

total = sum(number(r[ie]) for r in body)
by_op = defaultdict(float)
for r in body:
    by_op[opcode(r[src])] += number(r[ie])
print("warp instructions executed: %.0f in %d SASS lines" % (total, len(body)))
print("columns: " + " | ".join(cols))
print("%-16s %12s %7s" % ("opcode", "executed", "share"))
for op, n in sorted(by_op.items(), key=lambda kv: -kv[1])[:40]:
    print("%-16s %12.0f %6.1f%%" % (op, n, 100.0 * n / total if total else 0.0))

for i in stall_cols:
    values = [(number(r[i]) or 0.0, r) for r in body if len(r) > i]
    s = sum(v for v, _ in values)
    if s <= 0:
        continue
    print("-- %s: %.0f in all; by opcode:" % (cols[i], s))
    per = defaultdict(float)
    for v, r in values:
        per[opcode(r[src])] += v
    for op, v in sorted(per.items(), key=lambda kv: -kv[1])[:12]:
        print("   %-16s %10.0f %6.1f%%" % (op, v, 100.0 * v / s))
