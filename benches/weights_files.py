#!/usr/bin/env python3
"""Weights as binary files: the size of a model on disk, and the time and peak memory of
`graphc run`, for one large MatMul (x: f32[1,K] @ W: f32[K,N], W an initializer; K=2560,
N=4096 is 40 MB of weights) as

  - the ONNX model itself,
  - `graphc import --inline-weights`: every literal in the text (the old form),
  - `graphc import -o`: the text naming W in a safetensors file beside it.

The model is written here (protobuf by hand: no onnx or numpy needed). Run from the
repository root after `cargo build --release -p graphc`:

    python3 benches/weights_files.py [--graphc target/release/graphc] [--k 2560 --n 4096]

Peak memory is the maximum resident set size /usr/bin/time -v reports.
"""

import argparse
import array
import os
import re
import struct
import subprocess
import sys
import tempfile


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(tag, wire, payload):
    key = varint(tag << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload


def msg(tag, body):
    return field(tag, 2, body)


def string(tag, s):
    return field(tag, 2, s.encode() if isinstance(s, str) else s)


def value_info(name, dims):
    shape = b"".join(msg(1, field(1, 0, d)) for d in dims)  # Dimension.dim_value
    tensor = field(1, 0, 1) + msg(2, shape)  # elem_type FLOAT, shape
    return string(1, name) + msg(2, msg(1, tensor))


def model(k, n):
    w = array.array("f", (((i * 2654435761) % 2001) / 1000.0 - 1.0 for i in range(k * n)))
    if sys.byteorder != "little":
        w.byteswap()
    init = field(1, 0, k) + field(1, 0, n) + field(2, 0, 1) + string(8, "W") + string(9, w.tobytes())
    node = string(1, "x") + string(1, "W") + string(2, "y") + string(3, "matmul") + string(4, "MatMul")
    graph = (
        msg(1, node)
        + string(2, "big")
        + msg(5, init)
        + msg(11, value_info("x", [1, k]))
        + msg(12, value_info("y", [1, n]))
    )
    opset = string(1, "") + field(2, 0, 17)
    return field(1, 0, 8) + string(2, "weights_files.py") + msg(7, graph) + msg(8, opset)


def measure(cmd):
    out = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", out.stderr).group(1)
    secs = sum(float(p) * 60**i for i, p in enumerate(reversed(wall.split(":"))))
    return secs, rss / 1024


def size(*paths):
    return sum(os.path.getsize(p) for p in paths if os.path.exists(p)) / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphc", default="target/release/graphc")
    ap.add_argument("--k", type=int, default=2560)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--dir", help="where the files go (default: a temporary directory)")
    args = ap.parse_args()
    d = args.dir or tempfile.mkdtemp(prefix="graphc-weights-")
    os.makedirs(d, exist_ok=True)
    onnx, inline, gir = (os.path.join(d, f) for f in ("big.onnx", "big_inline.gir", "big.gir"))
    weights = os.path.join(d, "big.weights.safetensors")
    with open(onnx, "wb") as f:
        f.write(model(args.k, args.n))
    g = args.graphc
    subprocess.run([g, "import", onnx, "-o", inline, "--inline-weights"], check=True)
    subprocess.run([g, "import", onnx, "-o", gir], check=True)
    print(f"one MatMul, W f32[{args.k},{args.n}]; `graphc run FILE` (seeded random x), in {d}")
    print(f"{'model':<32} {'on disk MB':>10} {'run s':>8} {'peak RSS MB':>12}")
    for name, path, files in [
        ("ONNX", onnx, [onnx]),
        (".gir, every literal in the text", inline, [inline]),
        (".gir + weights file", gir, [gir, weights]),
    ]:
        secs, rss = measure([g, "run", path])
        print(f"{name:<32} {size(*files):>10.1f} {secs:>8.2f} {rss:>12.0f}")
    for name, cmd in [("check .gir + weights", [g, "check", gir]), ("check .gir inline", [g, "check", inline])]:
        secs, rss = measure(cmd)
        print(f"{name:<32} {'':>10} {secs:>8.2f} {rss:>12.0f}")


if __name__ == "__main__":
    main()
