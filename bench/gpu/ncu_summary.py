#!/usr/bin/env python3
"""Per-kernel GPU time from an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum).

    ncu --clock-control none --metrics gpu__time_duration.sum --csv PROGRAM ... > ncu.csv
    python3 bench/gpu/ncu_summary.py ncu.csv [--skip-first N]

Groups the launches by kernel (template arguments dropped) and prints, largest total first: the
number of launches, the median and the total microseconds, and the share of all kernel time. Lines
before the CSV header (the program's own output) are ignored. --skip-first drops the first N
launches (warm-up, weight fills).

Must not: time anything itself (it only reads what ncu measured).
"""
import argparse
import csv
import io
import re
import statistics
import sys


def short_name(name):
    name = re.sub(r"<.*>", "", name)
    return name.split("(")[0].strip() or name


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--skip-first", type=int, default=0)
    args = ap.parse_args()
    text = open(args.csv, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        print("ncu_summary: no CSV header in", args.csv, file=sys.stderr)
        return 1
    rows = [r for r in csv.DictReader(io.StringIO(text[start:])) if r.get("Metric Name") == "gpu__time_duration.sum"]
    rows = rows[args.skip_first:]
    per = {}
    for r in rows:
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        us = value / 1e3 if unit.startswith("n") else value if unit.startswith("u") else value * 1e3
        per.setdefault(short_name(r["Kernel Name"]), []).append(us)
    total = sum(sum(v) for v in per.values()) or 1.0
    print(f"{'kernel':40s} {'launches':>8s} {'median us':>10s} {'total us':>10s} {'share':>6s}")
    for name, v in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name[:40]:40s} {len(v):8d} {statistics.median(v):10.2f} {sum(v):10.1f} {sum(v) / total:6.1%}")
    print(f"{'all kernels':40s} {len(rows):8d} {'':10s} {total:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
