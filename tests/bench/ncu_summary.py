#!/usr/bin/env python3
"""ncu_summary.py — what limits a codec kernel, from Nsight Compute's source page.

    ncu --import REPORT --page source --csv --print-source sass > kernel.csv
    tests/bench/ncu_summary.py kernel.csv --elements N [--top 15]

Prints the warp instructions the kernel executed and the thread instructions
per element of the tensor (N: the elements it coded; each warp instruction
counted for 32 lanes), the share of each warp stall reason in the
sampled cycles, and the instructions that took the most samples, with their
two main stall reasons. The method behind the decoder and encoder figures in
tests/bench/RESULTS.md ("GPU codec", "This round").
"""
import argparse
import collections
import csv
import sys


def number(row, col):
    v = row[col].replace(",", "")
    return int(v) if v and v != "-" else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--elements", type=int, required=True, help="elements of the tensor the kernel coded")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.reader(f))
    header = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if header is None:
        sys.exit(f"{a.csv}: no source table (ncu --page source --csv --print-source sass)")
    cols = {name: i for i, name in enumerate(rows[header])}
    body = [r for r in rows[header + 1:] if len(r) == len(rows[header])]
    executed = cols["Instructions Executed"]
    samples = cols["Warp Stall Sampling (All Samples)"]
    stalls = [c for c in cols if c.startswith("stall_") and "Not Issued" not in c]

    total = sum(number(r, executed) for r in body)
    print(f"{total:,} warp instructions executed: {total * 32 / a.elements:.1f} thread instructions per element")
    by_reason = collections.Counter({c[len("stall_"):]: sum(number(r, cols[c]) for r in body) for c in stalls})
    sampled = sum(by_reason.values()) or 1
    print("stall samples:", ", ".join(f"{k} {100 * v / sampled:.1f}%" for k, v in by_reason.most_common(9)))
    print(f"\n{'row':>5} {'executed':>10} {'samples':>8}  instruction")
    hot = sorted(range(len(body)), key=lambda i: -number(body[i], samples))[:a.top]
    for i in sorted(hot):
        r = body[i]
        reasons = sorted(((number(r, cols[c]), c[len("stall_"):]) for c in stalls), reverse=True)[:2]
        why = ", ".join(f"{name} {n}" for n, name in reasons if n)
        print(f"{i:5d} {number(r, executed):10,d} {number(r, samples):8d}  {r[cols['Source']].strip()[:64]:64s} {why}")


if __name__ == "__main__":
    main()
