#!/usr/bin/env python3
"""Writes ir-spec/examples/ps_mlp.gir to standard output: an MLP (4 -> 32 -> 32 -> 1, tanh)
trained with Adam on a generated regression set (256 points from a fixed linear congruential
generator, the targets computed in the graph from a fixed function of the points), with
initial weights from the same generator, so the file is reproducible without numpy.

    python3 ir-spec/examples/data/make_ps_mlp.py > ir-spec/examples/ps_mlp.gir
    graphc fmt --in-place ir-spec/examples/ps_mlp.gir   # the canonical text the tests expect
"""
import math

from make_spirals import Lcg  # the same generator, beside this script


def fmt(v):
    return repr(round(v, 4))


def dense(rows):
    return "[" + ", ".join("[" + ", ".join(fmt(v) for v in r) + "]" for r in rows) + "]"


N, D, H = 256, 4, 32
rng = Lcg(23)
points = [[rng.unit() * 2 - 1 for _ in range(D)] for _ in range(N)]


def glorot(rows, cols):
    s = math.sqrt(6.0 / (rows + cols))
    return [[(rng.unit() * 2 - 1) * s for _ in range(cols)] for _ in range(rows)]


w1, w2, w3 = glorot(D, H), glorot(H, H), glorot(H, 1)
layers = [("w1", w1, f"f32[{D},{H}]"), ("b1", None, f"f32[{H}]"), ("w2", w2, f"f32[{H},{H}]"),
          ("b2", None, f"f32[{H}]"), ("w3", w3, f"f32[{H},1]"), ("b3", None, "f32[1]")]

out = []
out.append("""// Parameter-server training's example: an MLP (4 -> 32 -> 32 -> 1, tanh) fitted with Adam to a
// generated regression set, 256 points in [-1, 1]^4 (written by data/make_ps_mlp.py) with the
// target y = sin(2 x0) x1 + 0.5 x2 - x3^2 computed here. Each step runs on the whole set.
// On one machine:       graphc train ir-spec/examples/ps_mlp.gir --graph step --steps 300
// 1 ps and 2 workers:   see the README ("Training across processes").
graph @step() -> (loss: f32[]) {""")
out.append(f"  %x = constant {{value = dense<{dense(points)}> : f32[{N},{D}]}} : f32[{N},{D}]")
out.append(f"""  %x0 = slice %x {{starts = [0, 0], ends = [{N}, 1]}} : f32[{N},1]
  %x1 = slice %x {{starts = [0, 1], ends = [{N}, 2]}} : f32[{N},1]
  %x2 = slice %x {{starts = [0, 2], ends = [{N}, 3]}} : f32[{N},1]
  %x3 = slice %x {{starts = [0, 3], ends = [{N}, 4]}} : f32[{N},1]
  %two = constant {{value = dense<2.0> : f32[]}} : f32[]
  %half = constant {{value = dense<0.5> : f32[]}} : f32[]
  %t0 = mul %x0, %two : f32[{N},1]
  %t1 = sin %t0 : f32[{N},1]
  %t2 = mul %t1, %x1 : f32[{N},1]
  %t3 = mul %x2, %half : f32[{N},1]
  %t4 = mul %x3, %x3 : f32[{N},1]
  %t5 = add %t2, %t3 : f32[{N},1]
  %y = sub %t5, %t4 : f32[{N},1]""")
for name, w, ty in layers:
    init = f"dense<{dense(w)}>" if w is not None else "dense<0.0>"
    out.append(f'  %{name} = variable {{name = "{name}", init = {init} : {ty}}} : var<{ty}>')
for name, _, ty in layers:
    for slot in ("m", "v"):
        out.append(f'  %{slot}_{name} = variable {{name = "adam/{slot}/{name}", init = dense<0.0> : {ty}}} : var<{ty}>')
    out.append(f'  %t_{name} = variable {{name = "adam/t/{name}", init = dense<0.0> : f32[]}} : var<f32[]>')
for name, _, ty in layers:
    out.append(f"  %{name}v = read %{name} : {ty}")
out.append(f"""  %0 = matmul %x, %w1v : f32[{N},{H}]
  %1 = add %0, %b1v : f32[{N},{H}]
  %h1 = tanh %1 : f32[{N},{H}]
  %2 = matmul %h1, %w2v : f32[{N},{H}]
  %3 = add %2, %b2v : f32[{N},{H}]
  %h2 = tanh %3 : f32[{N},{H}]
  %4 = matmul %h2, %w3v : f32[{N},1]
  %pred = add %4, %b3v : f32[{N},1]
  %err = sub %pred, %y : f32[{N},1]
  %sq = mul %err, %err : f32[{N},1]
  %loss = reduce_mean %sq {{axes = [0, 1]}} : f32[]""")
names = [n for n, _, _ in layers]
types = [t for _, _, t in layers]
out.append("  " + ", ".join(f"%d{n}" for n in names) + " = grad %loss, " + ", ".join(f"%{n}v" for n in names) + " : " + ", ".join(types))
out.append("  %lr = constant {value = dense<0.002> : f32[]} : f32[]")
for name, _, ty in layers:
    out.append(f"  %u_{name} = apply_adam %{name}, %m_{name}, %v_{name}, %t_{name}, %lr, %d{name} : {ty}")
out.append("  %done = no_op after(" + ", ".join(f"%u_{n}" for n in names) + ") : token")
out.append("  %out = identity %loss after(%done) : f32[]")
out.append("  return %out")
out.append("}")
print("\n".join(out))
