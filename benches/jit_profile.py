#!/usr/bin/env python3
"""Where a JIT kernel spends its time, instruction by instruction.

    python3 benches/jit_profile.py FILE.gir [graphc bench arguments...]

Runs `graphc bench FILE --iters 200 --dump-code DIR ...` under `perf record` (each kernel's
code bytes to DIR/graphc_loop_N.bin), then prints, for the kernel with the most samples, its
disassembly (objdump) with the share of that kernel's samples on each instruction. Samples
land on the instruction after the one that stalled, and on the oldest unretired one when the
core's window is full: a long run of heavy lines after a dependency chain means the loop is
latency-bound. Needs perf and objdump (binutils); builds nothing.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    graphc = os.environ.get("GRAPHC", os.path.join(ROOT, "target", "release", "graphc"))
    if not os.path.exists(graphc):
        sys.exit(f"no graphc at {graphc}: cargo build --release -p graphc (or set GRAPHC)")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        # PERF_BUILDID_DIR (set by perf record) makes cranelift-jit write /tmp/perf-PID.map.
        run = subprocess.run(["perf", "record", "-o", data, "--", graphc, "bench", sys.argv[1], "--iters", "200",
                              "--dump-code", tmp, *sys.argv[2:]], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"perf record failed:\n{run.stderr}")
        script = subprocess.run(["perf", "script", "-i", data, "-F", "pid,ip,sym"], capture_output=True, text=True)
        samples = collections.Counter()
        pid = None
        for line in script.stdout.splitlines():
            m = re.match(r"\s*(\d+)\s+([0-9a-f]+)\s+(graphc_loop_\d+)", line)
            if m:
                pid = m.group(1)
                samples[(m.group(3), int(m.group(2), 16))] += 1
        total = sum(1 for line in script.stdout.splitlines() if line.strip())
        if not samples:
            sys.exit("no samples in JIT code (is the graph compiled? run `graphc bench` alone to check)")
        # The map is cranelift-jit's, written because perf record ran it; read it and remove it.
        map_path = f"/tmp/perf-{pid}.map"
        if not os.path.exists(map_path):
            sys.exit(f"{map_path} is missing: cranelift-jit writes it only under `perf record`")
        starts = {}
        with open(map_path) as f:
            for line in f:
                start, _, name = line.split()
                starts[name] = int(start, 16)
        os.remove(map_path)
        per_kernel = collections.Counter()
        for (name, _), n in samples.items():
            per_kernel[name] += n
        for name, n in per_kernel.most_common():
            print(f"{name}: {100 * n / total:.1f}% of all samples")
        hot = per_kernel.most_common(1)[0][0]
        code = os.path.join(tmp, f"{hot}.bin")
        dis = subprocess.run(["objdump", "-D", "-b", "binary", "-mi386:x86-64", "--no-show-raw-insn", code],
                             capture_output=True, text=True).stdout
        print(f"\n{hot} (share of its samples per instruction):")
        for line in dis.splitlines():
            m = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
            if m:
                n = samples.get((hot, starts[hot] + int(m.group(1), 16)), 0)
                print(f"{100 * n / per_kernel[hot]:5.1f}  {m.group(1):>5}  {m.group(2)}")


if __name__ == "__main__":
    main()
