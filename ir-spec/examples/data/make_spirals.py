#!/usr/bin/env python3
"""Writes the two-spirals data set (x.npy: f32[1024,2], label.npy: i32[1024]) beside this
script, and the initial weights of ir-spec/examples/mlp_train.gir to standard output, all
from a fixed linear congruential generator, so the files are reproducible without numpy.

    python3 ir-spec/examples/data/make_spirals.py > /tmp/init.txt
"""
import math
import os
import struct

N = 512  # points per class


class Lcg:
    def __init__(self, seed):
        self.s = seed

    def unit(self):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (self.s >> 11) / float(1 << 53)


def write_npy(path, descr, shape, fmt, values):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join("%d" % d for d in shape) if len(shape) > 1 else "%d," % shape[0])
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))


def main():
    rng = Lcg(2026)
    xs, labels = [], []
    for c in range(2):
        for i in range(N):
            t = i / N
            angle = 3.0 * math.pi * t + math.pi * c
            r = 0.15 + 0.85 * t
            xs += [r * math.cos(angle) + 0.03 * (rng.unit() - 0.5), r * math.sin(angle) + 0.03 * (rng.unit() - 0.5)]
            labels.append(c)
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spirals")
    os.makedirs(here, exist_ok=True)
    write_npy(os.path.join(here, "x.npy"), "<f4", (2 * N, 2), "f", xs)
    write_npy(os.path.join(here, "label.npy"), "<i4", (2 * N,), "i", labels)
    # Glorot-uniform weights for 2 -> 32 -> 32 -> 2.
    for name, (fan_in, fan_out) in [("w1", (2, 32)), ("w2", (32, 32)), ("w3", (32, 2))]:
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        rows = []
        for _ in range(fan_in):
            rows.append("[" + ", ".join("%.4f" % ((2 * rng.unit() - 1) * limit) for _ in range(fan_out)) + "]")
        print("%s = dense<[%s]> : f32[%d,%d]" % (name, ", ".join(rows), fan_in, fan_out))


if __name__ == "__main__":
    main()
