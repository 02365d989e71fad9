#!/usr/bin/env python3
"""How close `graphc simulate` comes to `graphc run`: for every example graph, on one CPU and
on each example device spec, measure the median step time over --steps runs (writing a
profile), then predict it with the simulator from estimates alone and from the profile, and
print the ratios predicted / measured.

    python3 benches/placement/simulator_accuracy.py [--steps 200] [--graphc target/release/graphc]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "ir-spec", "examples")


def graphs_of(path):
    text = open(path).read()
    return re.findall(r'^graph @("?[^(]+?"?)\(', text, re.M)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--graphc", default=os.path.join(ROOT, "target", "release", "graphc"))
    ap.add_argument("--specs", default="none,two_cpus,cpu_gpu,four_uneven")
    a = ap.parse_args()
    if not os.path.exists(a.graphc):
        subprocess.run(["cargo", "build", "--release", "-p", "graphc"], cwd=ROOT, check=True)
    rows = []
    tmp = tempfile.mkdtemp()
    for name in sorted(os.listdir(EXAMPLES)):
        if not name.endswith(".gir"):
            continue
        path = os.path.join(EXAMPLES, name)
        for graph in graphs_of(path):
            graph = graph.strip('"')
            for spec in a.specs.split(","):
                dev = [] if spec == "none" else ["--devices", os.path.join(EXAMPLES, spec + ".devices.toml")]
                prof = os.path.join(tmp, "p.json")
                rc, out = run([a.graphc, "run", path, "--graph", graph, "--steps", str(a.steps),
                               "--write-profile", prof] + dev)
                m = re.search(r"step time median ([0-9.]+) ms", out)
                if rc != 0 or not m:
                    continue  # a graph that cannot run alone (a consumer without its producer) or that spec cannot host
                measured = float(m.group(1))
                preds = []
                for extra in ([], ["--profile", prof]):
                    rc, out = run([a.graphc, "simulate", path, "--graph", graph] + dev + extra)
                    p = re.search(r"predicted step time ([0-9.]+) ms", out)
                    preds.append(float(p.group(1)) if rc == 0 and p else float("nan"))
                rows.append((f"{name} @{graph}", spec, measured, preds[0], preds[1]))
    print(f"{'graph':<40} {'devices':<12} {'measured ms':>12} {'estimate':>10} {'ratio':>6} {'profile':>10} {'ratio':>6}")
    within = 0
    for g, spec, meas, est, prof in rows:
        r1, r2 = est / meas, prof / meas
        within += abs(r2 - 1) <= 0.25
        print(f"{g:<40} {spec:<12} {meas:>12.3f} {est:>10.3f} {r1:>6.2f} {prof:>10.3f} {r2:>6.2f}")
    print(f"with a profile, {within} of {len(rows)} predictions are within 25% of the measured median")


if __name__ == "__main__":
    sys.exit(main())
