#!/usr/bin/env python3
"""`graphc opt` on chains of 20k, 40k, 80k and 160k relus (`%x0 = relu %in` ... `%x{n-1}`):
the time of each (the minimum of --runs runs of the release build, parsing, verification,
the pipeline and printing included), each pass's share of the largest (`--time-passes`), and
the ratio of the 160k chain's time to the 20k chain's. Linear work gives 8x; the goal is at
most 10x (a quadratic part gives 64x). With --check, exits 1 when the ratio is above --limit.

Usage: python3 benches/opt_scaling.py [--runs N] [--check] [--limit X] [--no-build]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPHC = os.path.join(ROOT, "target", "release", "graphc")
SIZES = [20_000, 40_000, 80_000, 160_000]


def relu_chain(n):
    lines = ["graph @chain(%in: f32[16]) -> (y: f32[16]) {"]
    prev = "%in"
    for i in range(n):
        lines.append(f"  %x{i} = relu {prev} : f32[16]")
        prev = f"%x{i}"
    lines.append(f"  return {prev}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def wall(path):
    start = time.perf_counter()
    subprocess.run([GRAPHC, "opt", path], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--check", action="store_true", help="exit 1 when the 160k/20k ratio is above --limit")
    ap.add_argument("--limit", type=float, default=10.0)
    ap.add_argument("--no-build", action="store_true", help="time target/release/graphc as it is")
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-p", "graphc"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for n in SIZES:
            paths[n] = os.path.join(tmp, f"chain{n}.gir")
            with open(paths[n], "w") as f:
                f.write(relu_chain(n))
        # Sizes interleaved run by run, so that a slow moment of the machine hits them alike.
        best = {n: float("inf") for n in SIZES}
        for _ in range(a.runs):
            for n in SIZES:
                best[n] = min(best[n], wall(paths[n]))
        for n in SIZES:
            print(f"{n:>7} nodes  {best[n] * 1e3:8.1f} ms  {best[n] / best[SIZES[0]]:5.2f}x")
        passes = subprocess.run(
            [GRAPHC, "opt", "--time-passes", paths[SIZES[-1]]],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        ).stderr
        print(f"passes on {SIZES[-1]} nodes:")
        print(passes, end="")
    ratio = best[SIZES[-1]] / best[SIZES[0]]
    print(f"160k / 20k: {ratio:.2f}x (limit {a.limit}x)")
    if a.check and ratio > a.limit:
        sys.exit(1)


if __name__ == "__main__":
    main()
