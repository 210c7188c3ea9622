#!/usr/bin/env python3
"""judge.py BASE.csv [VARIANT.csv] [-t] [-p POLICY]: the case benchmark's
verdict with tide's columns taken from VARIANT (tide-only rows) when given;
-t adds a line per trace; -p judges POLICY against the others (tide among
them) by the same rule instead of tide."""
import csv, sys, statistics
args = sys.argv[1:]
judged = "tide"
if "-p" in args:
    i = args.index("-p")
    judged = args[i+1]
    del args[i:i+2]
files = [a for a in args if not a.startswith("-")]
pols = [p for p in ["tide","skyward","target-tracking","utilization","karpenter","cluster-autoscaler"] if p != judged]
def load(p):
    return {r["case"]: r for r in csv.DictReader(open(p))}
base = load(files[0])
if len(files) > 1:
    var = load(files[1])
    # Only the cases the variant ran, with its tide columns.
    base = {c: b for c, b in base.items() if c in var and var[c].get("tide_cost")}
    for c, b in base.items():
        b.update({k: v for k, v in var[c].items() if k.startswith("tide_")})
var = {c: {k[len(judged)+1:]: v for k, v in b.items() if k.startswith(judged+"_")} for c, b in base.items()}
dom, worst, vs, rows = 0, (0, ""), [], []
pertrace = {}
for c, b in base.items():
    v = var.get(c)
    if v is None or not v.get("cost"):
        continue
    tc, ts, tp = float(v["cost"]), float(v["spread_pct"]), float(v["p95_s"])
    best = min((float(b[p+"_cost"]) for p in pols if b.get(p+"_cost")), default=None)
    d = None
    for p in pols:
        if not b.get(p+"_cost"):
            continue
        pc, ps, pp = float(b[p+"_cost"]), float(b[p+"_spread_pct"]), float(b[p+"_p95_s"])
        m = (1 - pc/tc)*100 if tc > 0 else 0
        if pp <= tp*(1+1e-9) and m > max(ts, ps) + 1e-7:
            if d is None or m > d[1]:
                d = (p, m)
    tr = b["trace"]
    pertrace.setdefault(tr, [0, 0, []])
    pertrace[tr][0] += 1
    if best:
        vs.append(tc/best - 1)
        pertrace[tr][2].append(tc/best - 1)
    if d:
        dom += 1
        pertrace[tr][1] += 1
        rows.append((c, tr, d[0], round(d[1], 2), tp))
        if d[1] > worst[0]:
            worst = (d[1], c)
n = len(vs)
print(f"cases {n} dominated {dom} ({100*(n-dom)/n:.1f}% not) worst {worst[0]:.2f}% {worst[1]} vs best other mean {100*statistics.mean(vs):+.2f}% median {100*statistics.median(vs):+.2f}%")
for r in sorted(rows, key=lambda r: -r[3]):
    print("  ", *r)
if "-t" in sys.argv:
    for tr, (k, dd, l) in sorted(pertrace.items()):
        print(f"  {tr:45s} {k:3d} dom {dd} mean vs best {100*statistics.mean(l):+.2f}%")
