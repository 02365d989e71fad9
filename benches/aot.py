#!/usr/bin/env python3
"""AOT-compiled executables against `graphc run`: binary size, start-up time (process start to
first output), step time and compile time, on the bundled MLP and W4 (compare.py's MLP
784-1024-1024-10 at batch 256). Release builds; every timing the median of --runs runs.

Usage: python3 benches/aot.py [--runs N] [--cpu baseline|native]
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W4 = os.path.join(ROOT, "benches", "peers", "workloads", "w4_mlp.gir")


def wall(cmd, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    args = sys.argv[1:]
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 7
    cpu = args[args.index("--cpu") + 1] if "--cpu" in args else "baseline"
    subprocess.check_call(["cargo", "build", "-q", "--release", "-p", "graphc", "-p", "graphc-aot"], cwd=ROOT)
    graphc = os.path.join(ROOT, "target", "release", "graphc")
    avx512 = "avx512f" in open("/proc/cpuinfo").read()
    print(f"host: {os.cpu_count()} cores, {'AVX-512' if avx512 else 'no AVX-512'}; AOT code: --cpu {cpu}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for name, path in [("MLP (examples/mlp.gir)", os.path.join(ROOT, "ir-spec", "examples", "mlp.gir")), ("W4", W4)]:
            exe = os.path.join(tmp, "prog")
            compile_ms = wall([graphc, "compile", path, "-o", exe, "--cpu", cpu], runs)
            bench = json.loads(subprocess.run([graphc, "bench", path, "--json", "--iters", "50"], check=True,
                                              capture_output=True, text=True).stdout)
            out = subprocess.run([exe, "--bench", "50"], check=True, capture_output=True, text=True).stdout
            aot_step = float(next(l for l in out.splitlines() if l.startswith("bench:")).split("median ")[1].split()[0])
            rows.append({
                "workload": name,
                "size_mb": (os.path.getsize(exe) / 1e6, os.path.getsize(graphc) / 1e6),
                "startup_ms": (wall([exe], runs), wall([graphc, "run", path], runs)),
                "step_ms": (aot_step, bench["median_ms"]),
                "compile_ms": (compile_ms, bench["compile_ms"]),
            })
    print(f"\n{'workload':<24} {'':>10} {'aot':>10} {'graphc run':>11}")
    for r in rows:
        for key, label in [("size_mb", "size MB"), ("startup_ms", "start ms"), ("step_ms", "step ms"),
                           ("compile_ms", "compile ms")]:
            a, g = r[key]
            print(f"{r['workload']:<24} {label:>10} {a:>10.2f} {g:>11.2f}")
    print("\nsize: the executable against the graphc binary; start: process start to the first output (one step, "
          "random inputs); step: median of 50; compile: `graphc compile` (object and link) against the JIT's "
          "compile time in `graphc bench`.")


if __name__ == "__main__":
    main()
