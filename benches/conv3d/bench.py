#!/usr/bin/env python3
"""3-D convolutions and pools, transposed convolutions and a 2-D convolution
(benches/conv3d/conv3d.gir) timed by `graphc bench`.

    python3 benches/conv3d/bench.py [--iters 20] [--warmup 3] [--backend jit] [-g GRAPH] [GRAPHC ...]

Times each graph of conv3d.gir (a 3-D ResNet's 3x3x3 convolution and max pool, a U-Net
decoder's two ConvTranspose2d upsamplings with their biases, a ResNet stage's 2-D
convolution) with each graphc binary given (default
target/release/graphc), the binaries interleaved graph by graph so that they share the
machine's state, and prints the median step time of each in ms and, with two binaries, the
first's time over the second's (above 1: the second is faster): `bench.py OLD/graphc
target/release/graphc`, OLD a copy of a build from before a change, is its before/after table.
"""
import argparse
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GIR = os.path.join(HERE, "conv3d.gir")


def graphs():
    with open(GIR) as f:
        return [line.split("@", 1)[1].split("(", 1)[0] for line in f if line.startswith("graph @")]


def median_ms(graphc, graph, backend, iters, warmup):
    cmd = [graphc, "bench", GIR, "-g", graph, "--backend", backend, "--iters", str(iters), "--warmup", str(warmup)]
    cmd.append("--json")
    run = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(run.stdout)["median_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graphc", nargs="*", default=[os.path.join(ROOT, "target", "release", "graphc")])
    # A binary whose kernels are the reference's takes seconds a step on the 3-D graphs:
    # `--iters 3 --warmup 1` for such a one.
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("-g", "--graph", action="append", help="only these graphs (repeatable)")
    ap.add_argument("--backend", default="jit")
    args = ap.parse_args()
    width = max(len(g) for g in graphs()) + 2
    head = "".join(f"{'binary ' + str(i):>12}" for i in range(len(args.graphc)))
    for i, g in enumerate(args.graphc):
        print(f"# binary {i}: {g}")
    print(f"{'graph':<{width}}{head}" + (f"{'0 / 1':>10}" if len(args.graphc) == 2 else ""))
    for graph in args.graph or graphs():
        times = [median_ms(g, graph, args.backend, args.iters, args.warmup) for g in args.graphc]
        cells = "".join(f"{t:>12.3f}" for t in times)
        ratio = f"{times[0] / times[1]:>10.1f}" if len(times) == 2 else ""
        print(f"{graph:<{width}}{cells}{ratio}")


if __name__ == "__main__":
    main()
