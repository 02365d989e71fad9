#!/usr/bin/env python3
"""graphc against XLA CPU (jax.jit), ONNX Runtime and IREE on the issue's workloads, in one run.

    python3 benches/peers/compare.py [--iters 20] [--only W0,W1] [--graphc target/release/graphc]

Sets up benches/peers/.venv (jax[cpu], onnxruntime, onnx, numpy, iree-base-compiler,
iree-base-runtime) on first use. IREE compiles the StableHLO jax lowers each workload to. For each
workload it writes the graphc IR and an ONNX model to a temporary directory, builds the same
function for jax, and times each engine the same way: warm-up runs, then the median of
--iters runs of one step on the same inputs. graphc is timed by `graphc bench --json`
(backends jit and interp, and llvm where graphc was built with `--features llvm`). Also measured in the same run: a STREAM triad (a = b + s*c on
2^25 f32 in C with OpenMP, triad.c) as the machine's memory bandwidth, and XLA's compile
time.
W5 is a training step (W4's MLP: forward, backward, SGD update of every weight and bias in
place): graphc's `grad` and `apply_sgd` on variables (workloads/w5_train_step.gir),
jax.value_and_grad jitted with the parameters donated, IREE on that function's StableHLO, a
forward+backward+update ONNX graph written by hand for ONNX Runtime (which cannot
differentiate), and numpy. Before timing, every engine's step from the same random weights is
checked against jax's: the loss and the updated weights and biases (graphc's through
`graphc run --restore/--checkpoint`); an engine that disagrees is reported and left out.
Prints a table of milliseconds and the ratios peer / graphc-jit (above 1: graphc is faster).
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.path.join(HERE, ".venv")
PACKAGES = ["jax[cpu]", "onnxruntime", "onnx", "numpy", "iree-base-compiler", "iree-base-runtime"]


def ensure_venv():
    py = os.path.join(VENV, "bin", "python")
    if os.environ.get("GRAPHC_PEERS_IN_VENV"):
        return
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q"] + PACKAGES, check=True)
    elif subprocess.run([py, "-c", "import iree.runtime, iree.compiler"], capture_output=True).returncode != 0:
        # A venv from before IREE was a peer.
        subprocess.run([py, "-m", "pip", "install", "-q", "iree-base-compiler", "iree-base-runtime"], check=True)
    env = dict(os.environ, GRAPHC_PEERS_IN_VENV="1")
    sys.exit(subprocess.run([py] + sys.argv, env=env).returncode)


N = 1 << 24


def workloads():
    """Name -> (description, graphc IR, inputs {name: shape}, jax fn builder, onnx builder)."""
    import numpy as np

    def w0_gir():
        return open(os.path.join(HERE, "workloads", "w0_axpb.gir")).read()

    def w1_gir():
        return open(os.path.join(HERE, "workloads", "w1_activation.gir")).read()

    softmax_gir = """graph @w2(%x: f32[4096,1024]) -> (y: f32[4096,1024]) {
  %y = softmax %x {axis = -1} : f32[4096,1024]
  return %y
}
"""
    layernorm_gir = """graph @w3(%x: f32[4096,1024], %gamma: f32[1024], %beta: f32[1024]) -> (y: f32[4096,1024]) {
  %mean = reduce_mean %x {axes = [-1], keep_dims = true} : f32[4096,1]
  %d = sub %x, %mean : f32[4096,1024]
  %sq = mul %d, %d : f32[4096,1024]
  %var = reduce_mean %sq {axes = [-1], keep_dims = true} : f32[4096,1]
  %eps = constant {value = dense<1.0e-5> : f32[]} : f32[]
  %ve = add %var, %eps : f32[4096,1]
  %sd = sqrt %ve : f32[4096,1]
  %n = div %d, %sd : f32[4096,1024]
  %g = mul %n, %gamma : f32[4096,1024]
  %y = add %g, %beta : f32[4096,1024]
  return %y
}
"""
    mlp_gir = """graph @w4(%x: f32[256,784], %w1: f32[784,1024], %b1: f32[1024], %w2: f32[1024,1024], %b2: f32[1024], %w3: f32[1024,10], %b3: f32[10]) -> (y: f32[256,10]) {
  %h1 = matmul %x, %w1 : f32[256,1024]
  %a1 = add %h1, %b1 : f32[256,1024]
  %r1 = relu %a1 : f32[256,1024]
  %h2 = matmul %r1, %w2 : f32[256,1024]
  %a2 = add %h2, %b2 : f32[256,1024]
  %r2 = relu %a2 : f32[256,1024]
  %h3 = matmul %r2, %w3 : f32[256,10]
  %a3 = add %h3, %b3 : f32[256,10]
  %y = softmax %a3 {axis = -1} : f32[256,10]
  return %y
}
"""
    matmul_gir = """graph @w6(%a: f32[1024,1024], %b: f32[1024,1024]) -> (c: f32[1024,1024]) {
  %c = matmul %a, %b : f32[1024,1024]
  return %c
}
"""
    return {
        "W0": ("y = a*x+b, 2^24 f32", w0_gir(), {"x": (N,), "a": (), "b": ()}),
        "W1": ("relu(x*a+b)*sigmoid(x) - tanh(x), 2^24 f32", w1_gir(), {"x": (N,), "a": (), "b": ()}),
        "W2": ("row softmax [4096,1024]", softmax_gir, {"x": (4096, 1024)}),
        "W3": ("layernorm [4096,1024]", layernorm_gir, {"x": (4096, 1024), "gamma": (1024,), "beta": (1024,)}),
        "W4": ("MLP 784-1024-1024-10, batch 256", mlp_gir,
               {"x": (256, 784), "w1": (784, 1024), "b1": (1024,), "w2": (1024, 1024), "b2": (1024,),
                "w3": (1024, 10), "b3": (10,)}),
        "W6": ("matmul 1024^3", matmul_gir, {"a": (1024, 1024), "b": (1024, 1024)}),
    }


def jax_fn(name):
    import jax
    import jax.numpy as jnp

    def ln(x, gamma, beta):
        m = jnp.mean(x, axis=-1, keepdims=True)
        d = x - m
        v = jnp.mean(d * d, axis=-1, keepdims=True)
        return d / jnp.sqrt(v + 1e-5) * gamma + beta

    def mlp(x, w1, b1, w2, b2, w3, b3):
        h = jax.nn.relu(x @ w1 + b1)
        h = jax.nn.relu(h @ w2 + b2)
        return jax.nn.softmax(h @ w3 + b3, axis=-1)

    return {
        "W0": lambda x, a, b: a * x + b,
        "W1": lambda x, a, b: jax.nn.relu(x * a + b) * jax.nn.sigmoid(x) - jnp.tanh(x),
        "W2": lambda x: jax.nn.softmax(x, axis=-1),
        "W3": ln,
        "W4": mlp,
        "W6": lambda a, b: a @ b,
    }[name]


def onnx_model(name, shapes):
    import onnx
    from onnx import TensorProto, helper

    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in shapes.items()]
    nodes = {
        "W0": [helper.make_node("Mul", ["a", "x"], ["ax"]), helper.make_node("Add", ["ax", "b"], ["y"])],
        "W1": [helper.make_node("Mul", ["x", "a"], ["xa"]), helper.make_node("Add", ["xa", "b"], ["xab"]),
               helper.make_node("Relu", ["xab"], ["r"]), helper.make_node("Sigmoid", ["x"], ["s"]),
               helper.make_node("Mul", ["r", "s"], ["rs"]), helper.make_node("Tanh", ["x"], ["t"]),
               helper.make_node("Sub", ["rs", "t"], ["y"])],
        "W2": [helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
        "W3": [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5)],
        "W4": [helper.make_node("MatMul", ["x", "w1"], ["h1"]), helper.make_node("Add", ["h1", "b1"], ["a1"]),
               helper.make_node("Relu", ["a1"], ["r1"]), helper.make_node("MatMul", ["r1", "w2"], ["h2"]),
               helper.make_node("Add", ["h2", "b2"], ["a2"]), helper.make_node("Relu", ["a2"], ["r2"]),
               helper.make_node("MatMul", ["r2", "w3"], ["h3"]), helper.make_node("Add", ["h3", "b3"], ["a3"]),
               helper.make_node("Softmax", ["a3"], ["y"], axis=-1)],
        "W6": [helper.make_node("MatMul", ["a", "b"], ["y"])],
    }[name]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, name, ins, [out])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def median_ms(f, warmup, iters):
    for _ in range(warmup):
        f()
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def iree_ms(fn, args, warmup, iters):
    """IREE (llvm-cpu for the host CPU, the local-task driver on every core) on the StableHLO
    that jax lowers `fn` to, the inputs on the device first: (median ms, compile ms)."""
    import iree.compiler as ic
    import iree.runtime as ir
    import jax

    text = jax.jit(fn).lower(*args).as_text(dialect="stablehlo")
    t0 = time.perf_counter()
    vmfb = ic.compile_str(text, input_type="stablehlo", target_backends=["llvm-cpu"],
                          extra_args=["--iree-llvmcpu-target-cpu=host"])
    compile_ms = (time.perf_counter() - t0) * 1e3
    config = ir.Config("local-task")
    ctx = ir.SystemContext(config=config)
    ctx.add_vm_module(ir.VmModule.copy_buffer(ctx.instance, vmfb))
    module = [m for name, m in ctx.modules.items() if name != "hal"][-1]
    f = module["main"]
    dev = [ir.asdevicearray(config.device, x) for x in args]
    return median_ms(lambda: f(*dev), warmup, iters), compile_ms


def main():
    ensure_venv()
    import numpy as np
    import jax
    import onnxruntime as ort

    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--graphc", default=os.path.join(ROOT, "target", "release", "graphc"))
    a = ap.parse_args()
    if not os.path.exists(a.graphc):
        # With the LLVM tier where MLIR 19 is installed (tests/mlir-toolchain.sh).
        llvm = os.path.exists("/usr/lib/llvm-19/bin/llvm-config")
        subprocess.run(["cargo", "build", "--release", "-p", "graphc"] + (["--features", "llvm"] if llvm else []), cwd=ROOT, check=True)
    tmp = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    # The llvm backend exists where graphc was built with the llvm feature.
    help_text = subprocess.run([a.graphc, "bench", "--help"], capture_output=True, text=True).stdout
    backends = ["jit", "interp"] + (["llvm"] if "- llvm:" in help_text else [])

    # The machine's memory bandwidth: a STREAM triad in C with OpenMP (gcc).
    exe = os.path.join(tmp, "triad")
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", os.path.join(HERE, "triad.c"), "-o", exe], check=True)
    stream_gbs = float(subprocess.run([exe], capture_output=True, text=True, check=True).stdout)
    print(f"STREAM triad (C, OpenMP, 2^25 f32): {stream_gbs:.1f} GB/s")
    # The peak fp32 FMA rate with the host's widest vectors on every core, for W6.
    peak_exe = os.path.join(tmp, "peak")
    built = subprocess.run(["gcc", "-O3", "-funroll-loops", "-march=native", "-mfma", "-fopenmp", os.path.join(HERE, "peak.c"), "-o", peak_exe])
    out = subprocess.run([peak_exe], capture_output=True, text=True).stdout.split() if built.returncode == 0 else []
    peak, width = (float(out[0]), out[1]) if len(out) == 2 else (float("nan"), "?")
    print(f"peak fp32 FMA rate (C, {width}-bit vectors, all cores): {peak:.1f} GFLOP/s")

    rows = []
    for name, (desc, gir, shapes) in workloads().items():
        if a.only and name not in a.only.split(","):
            continue
        inputs = {k: rng.standard_normal(s, dtype=np.float32) if s else np.float32(rng.standard_normal()) for k, s in shapes.items()}
        inputs = {k: np.asarray(v, dtype=np.float32) for k, v in inputs.items()}
        # graphc, fed the same inputs from .npy files.
        gpath = os.path.join(tmp, f"{name}.gir")
        open(gpath, "w").write(gir)
        flags = []
        for k, v in inputs.items():
            p = os.path.join(tmp, f"{name}_{k}.npy")
            np.save(p, v)
            flags += ["--input", f"{k}={p}"]
        res = {"llvm": (float("nan"), float("nan"))}
        for backend in backends:
            iters = max(3, a.iters // 4) if backend == "interp" else a.iters
            out = subprocess.run([a.graphc, "bench", gpath, "--backend", backend, "--iters", str(iters),
                                  "--warmup", str(a.warmup), "--json"] + flags, capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{name} graphc {backend} failed: {out.stderr.strip()[:300]}")
                res[backend] = (float("nan"), float("nan"))
                continue
            j = json.loads(out.stdout.strip().splitlines()[-1])
            res[backend] = (j["median_ms"], j["compile_ms"])
        # XLA CPU.
        f = jax.jit(jax_fn(name))
        args = [jax.device_put(inputs[k]) for k in shapes]
        t0 = time.perf_counter()
        compiled = f.lower(*args).compile()
        xla_compile = (time.perf_counter() - t0) * 1e3
        xla = median_ms(lambda: compiled(*args).block_until_ready(), a.warmup, a.iters)
        # ONNX Runtime.
        sess = ort.InferenceSession(onnx_model(name, shapes).SerializeToString(), providers=["CPUExecutionProvider"])
        feed = {k: inputs[k] for k in shapes}
        ortt = median_ms(lambda: sess.run(None, feed), a.warmup, a.iters)
        try:
            iree = iree_ms(jax_fn(name), [inputs[k] for k in shapes], a.warmup, a.iters)[0]
        except Exception as e:  # a workload IREE cannot compile is reported, not fatal
            print(f"{name} IREE failed: {str(e).strip()[:300]}")
            iree = float("nan")
        rows.append((name, desc, res["jit"][0], res["interp"][0], xla, ortt, res["jit"][1], xla_compile, res["llvm"], iree))

    print()
    print(f"{'':4} {'workload':<44} {'graphc':>9} {'llvm':>9} {'interp':>9} {'XLA':>9} {'ORT':>9} {'IREE':>9} {'XLA/g':>6} {'ORT/g':>6} {'IREE/g':>6} {'XLA/l':>6} {'ORT/l':>6} {'IREE/l':>6}")
    for name, desc, g, gi, x, o, gc, xc, (lt, lc), ie in rows:
        print(f"{name:4} {desc:<44} {g:>9.2f} {lt:>9.2f} {gi:>9.2f} {x:>9.2f} {o:>9.2f} {ie:>9.2f} {x / g:>6.2f} {o / g:>6.2f} {ie / g:>6.2f} {x / lt:>6.2f} {o / lt:>6.2f} {ie / lt:>6.2f}")
    print("(milliseconds per step, medians; graphc is the jit backend (Cranelift), llvm the LLVM tier;")
    print(" ratios above 1 mean graphc (g) or its LLVM tier (l) is faster)")
    for name, desc, g, gi, x, o, gc, xc, (lt, lc), ie in rows:
        if name == "W0":
            gbs = 2 * 4 * N / (g * 1e-3) / 1e9
            print(f"W0 bandwidth: graphc {gbs:.1f} GB/s = {100 * gbs / stream_gbs:.0f}% of the STREAM triad")
        if name == "W6":
            gf, xf = 2 * 1024**3 / (g * 1e-3) / 1e9, 2 * 1024**3 / (x * 1e-3) / 1e9
            print(f"W6: graphc {gf:.1f} GFLOP/s ({100 * gf / peak:.0f}% of peak), XLA {xf:.1f} GFLOP/s ({100 * xf / peak:.0f}%)")
        if name == "W4":
            print(f"W4 compile: graphc {gc:.1f} ms, LLVM tier {lc:.1f} ms, XLA {xc:.1f} ms ({xc / max(gc, 1e-9):.0f}x graphc's)")
        if name in ("W1", "W2", "W3"):
            # Each reads its input once and writes its output once: 2 x 4 bytes per element.
            n = N if name == "W1" else 4096 * 1024
            best = min(t for t in (g, lt) if t == t)
            gbs = 2 * 4 * n / (best * 1e-3) / 1e9
            print(f"{name} bandwidth: graphc's best {gbs:.1f} GB/s = {100 * gbs / stream_gbs:.0f}% of the STREAM triad")


if __name__ == "__main__":
    main()
