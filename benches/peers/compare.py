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
numpy runs every workload too (W0-W4 and W6 checked against XLA's result before timing).
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
    mlp_gir = open(os.path.join(HERE, "workloads", "w4_mlp.gir")).read()
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


def numpy_fn(name):
    """The workload in numpy: matrix products through its BLAS (OpenBLAS in the wheel), the
    rest in its elementwise loops."""
    import numpy as np

    def softmax(z):
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def ln(x, gamma, beta):
        d = x - x.mean(axis=-1, keepdims=True)
        return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + np.float32(1e-5)) * gamma + beta

    def mlp(x, w1, b1, w2, b2, w3, b3):
        h = np.maximum(x @ w1 + b1, 0)
        h = np.maximum(h @ w2 + b2, 0)
        return softmax(h @ w3 + b3)

    return {
        "W0": lambda x, a, b: a * x + b,
        "W1": lambda x, a, b: np.maximum(x * a + b, 0) / (1 + np.exp(-x)) - np.tanh(x),
        "W2": softmax,
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


# ---- W5: one SGD training step of W4's MLP ----------------------------------------------

W5_BATCH = 256
W5_LR = 0.01
W5_PARAMS = {"w1": (784, 1024), "b1": (1024,), "w2": (1024, 1024), "b2": (1024,), "w3": (1024, 10), "b3": (10,)}
# Three matrix products per layer (forward, input gradient, weight gradient).
W5_FLOPS = 2 * 3 * W5_BATCH * (784 * 1024 + 1024 * 1024 + 1024 * 10)


def w5_jax_step(w1, b1, w2, b2, w3, b3, x, label):
    """(new w1, b1, w2, b2, w3, b3, loss): the mean softmax cross-entropy of the MLP's logits
    against integer labels, its gradients by jax.value_and_grad, and p -= lr * dp."""
    import jax
    import jax.numpy as jnp

    def loss_fn(p):
        w1, b1, w2, b2, w3, b3 = p
        h = jax.nn.relu(x @ w1 + b1)
        h = jax.nn.relu(h @ w2 + b2)
        logits = h @ w3 + b3
        picked = jnp.take_along_axis(logits, label[:, None], axis=-1)[:, 0]
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)

    params = (w1, b1, w2, b2, w3, b3)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    return tuple(p - W5_LR * g for p, g in zip(params, grads)) + (loss,)


def w5_numpy_step(p, x, label):
    """The same step in numpy (matrix products through its BLAS), updating the arrays of the
    dict `p` in place; returns the loss. In the dtype of the arrays given (f32 when timed)."""
    import numpy as np

    n = x.shape[0]
    rows = np.arange(n)
    a1 = x @ p["w1"] + p["b1"]
    r1 = np.maximum(a1, 0)
    a2 = r1 @ p["w2"] + p["b2"]
    r2 = np.maximum(a2, 0)
    logits = r2 @ p["w3"] + p["b3"]
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    s = e.sum(axis=1, keepdims=True)
    loss = np.mean(np.log(s[:, 0]) + m[:, 0] - logits[rows, label])
    dl = e / s
    dl[rows, label] -= 1
    dl /= n
    dw3, db3 = r2.T @ dl, dl.sum(axis=0)
    da2 = (dl @ p["w3"].T) * (a2 > 0)
    dw2, db2 = r1.T @ da2, da2.sum(axis=0)
    da1 = (da2 @ p["w2"].T) * (a1 > 0)
    dw1, db1 = x.T @ da1, da1.sum(axis=0)
    for k, g in (("w1", dw1), ("b1", db1), ("w2", dw2), ("b2", db2), ("w3", dw3), ("b3", db3)):
        p[k] -= W5_LR * g
    return loss


def w5_onnx_model():
    """The step as an ONNX graph written by hand (ONNX Runtime's inference sessions cannot
    differentiate): inputs x, label (i32) and the six parameters; outputs the loss and the six
    updated parameters (w1_new, ...). The one-hot is `label == [0..10)`, relu's gradient a
    Where on the pre-activation > 0, the weight gradients Gemm with transA, the input
    gradients Gemm with transB."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n = helper.make_node
    consts = {
        "classes": np.arange(10, dtype=np.int32),
        "inv_n": np.array(1.0 / W5_BATCH, dtype=np.float32),
        "neg_inv_n": np.array(-1.0 / W5_BATCH, dtype=np.float32),
        "zero": np.array(0.0, dtype=np.float32),
        "lr": np.array(W5_LR, dtype=np.float32),
        "ax0": np.array([0], dtype=np.int64),
        "ax1": np.array([1], dtype=np.int64),
        "ax01": np.array([0, 1], dtype=np.int64),
    }
    nodes = [
        # Forward.
        n("MatMul", ["x", "w1"], ["h1"]), n("Add", ["h1", "b1"], ["a1"]), n("Relu", ["a1"], ["r1"]),
        n("MatMul", ["r1", "w2"], ["h2"]), n("Add", ["h2", "b2"], ["a2"]), n("Relu", ["a2"], ["r2"]),
        n("MatMul", ["r2", "w3"], ["h3"]), n("Add", ["h3", "b3"], ["logits"]),
        # Loss: -mean(sum(onehot * log_softmax(logits), axis 1)).
        n("Unsqueeze", ["label", "ax1"], ["label_col"]),
        n("Equal", ["label_col", "classes"], ["onehot_b"]),
        n("Cast", ["onehot_b"], ["onehot"], to=TensorProto.FLOAT),
        n("LogSoftmax", ["logits"], ["logp"], axis=-1),
        n("Mul", ["onehot", "logp"], ["picked"]),
        n("ReduceSum", ["picked", "ax01"], ["picked_sum"], keepdims=0),
        n("Mul", ["picked_sum", "neg_inv_n"], ["loss"]),
        # Backward: dlogits = (softmax - onehot) / n.
        n("Exp", ["logp"], ["prob"]), n("Sub", ["prob", "onehot"], ["dl_n"]), n("Mul", ["dl_n", "inv_n"], ["dl"]),
        n("Gemm", ["r2", "dl"], ["dw3"], transA=1), n("ReduceSum", ["dl", "ax0"], ["db3"], keepdims=0),
        n("Gemm", ["dl", "w3"], ["dr2"], transB=1),
        n("Greater", ["a2", "zero"], ["m2"]), n("Where", ["m2", "dr2", "zero"], ["da2"]),
        n("Gemm", ["r1", "da2"], ["dw2"], transA=1), n("ReduceSum", ["da2", "ax0"], ["db2"], keepdims=0),
        n("Gemm", ["da2", "w2"], ["dr1"], transB=1),
        n("Greater", ["a1", "zero"], ["m1"]), n("Where", ["m1", "dr1", "zero"], ["da1"]),
        n("Gemm", ["x", "da1"], ["dw1"], transA=1), n("ReduceSum", ["da1", "ax0"], ["db1"], keepdims=0),
    ]
    for k in W5_PARAMS:  # SGD: p_new = p - lr * dp
        nodes += [n("Mul", [f"d{k}", "lr"], [f"step_{k}"]), n("Sub", [k, f"step_{k}"], [f"{k}_new"])]
    f32 = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info("x", f32, [W5_BATCH, 784]),
           helper.make_tensor_value_info("label", TensorProto.INT32, [W5_BATCH])]
    ins += [helper.make_tensor_value_info(k, f32, list(s)) for k, s in W5_PARAMS.items()]
    outs = [helper.make_tensor_value_info("loss", f32, [])]
    outs += [helper.make_tensor_value_info(f"{k}_new", f32, list(s)) for k, s in W5_PARAMS.items()]
    inits = [numpy_helper.from_array(v, name=k) for k, v in consts.items()]
    g = helper.make_graph(nodes, "w5_train_step", ins, outs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def write_safetensors(path, tensors):
    """f32 arrays as a safetensors file (what `graphc run --restore` reads)."""
    import numpy as np

    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        b = np.ascontiguousarray(tensors[k], dtype="<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(np.shape(tensors[k])), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """The f32 tensors of a safetensors file (what `graphc run --checkpoint` writes)."""
    import numpy as np

    data = open(path, "rb").read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    out = {}
    for k, meta in header.items():
        if k == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            raise ValueError(f"{path}: {k} is {meta['dtype']}, not F32")
        s, e = meta["data_offsets"]
        out[k] = np.frombuffer(data[8 + hlen + s:8 + hlen + e], dtype="<f4").reshape(meta["shape"])
    return out


def w5_check(engine, got, ref, init):
    """Compares one step's loss and updated parameters with jax's from the same weights and
    inputs: the loss within 1e-4 relative; each updated tensor within 1e-4 of its largest
    magnitude; and its update (new - init, which rounding of the weights perturbs by an ulp of
    the weight) within 1e-3 of the largest update, so a wrong gradient cannot hide behind the
    small step. Prints the errors; returns whether all held."""
    import numpy as np

    problems = []
    loss_err = abs(float(got["loss"]) - float(ref["loss"])) / abs(float(ref["loss"]))
    if not loss_err <= 1e-4:
        problems.append(f"loss {float(got['loss']):.7g} vs jax {float(ref['loss']):.7g}")
    worst_p, worst_d = 0.0, 0.0
    for k in W5_PARAMS:
        g, r = np.asarray(got[k], dtype=np.float64), np.asarray(ref[k], dtype=np.float64)
        if g.shape != r.shape:
            problems.append(f"{k} has shape {g.shape}, jax's {r.shape}")
            continue
        ep = np.max(np.abs(g - r)) / np.max(np.abs(r))
        dr = r - init[k]
        ed = np.max(np.abs((g - init[k]) - dr)) / np.max(np.abs(dr))
        worst_p, worst_d = max(worst_p, ep), max(worst_d, ed)
        if not ep <= 1e-4:
            problems.append(f"updated {k} off by {ep:.2e} of its largest value")
        if not ed <= 1e-3:
            problems.append(f"{k}'s update off by {ed:.2e} of the largest update")
    print(f"W5 check {engine:<14} loss {float(got['loss']):.6f} (rel. err. {loss_err:.1e}); updated weights "
          f"rel. err. {worst_p:.1e}, updates rel. err. {worst_d:.1e}: {'ok' if not problems else 'FAILED'}")
    for p in problems:
        print(f"    {p}")
    return not problems


def w5_data(rng):
    """Inputs, labels and random initial weights for W5's check, on grids that make the
    forward pass exact in f32 whatever the order of the sums: x on a 1/4 grid, the weights on a
    1/64 grid (He-scaled), so that every product in x @ w1 is a multiple of 2^-8 and every
    partial sum far below 2^24 of them; b1 an odd multiple of 2^-9, so no pre-activation of
    the first layer is 0; likewise r1 @ w2 on a 2^-15 grid and b2 an odd multiple of 2^-16.
    Every engine then takes the same side of each relu's kink (a pre-activation within an
    ulp of 0 would otherwise flip between summation orders and change whole gradient
    entries), and the check compares only the rounding of the backward pass."""
    import numpy as np

    def grid(v, bits):
        return np.round(v * 2.0**bits) / 2.0**bits

    def odd(v, bits):  # an odd multiple of 2^-bits near v
        return (2 * np.round(v * 2.0 ** (bits - 1)) + 1) / 2.0**bits

    x = grid(rng.standard_normal((W5_BATCH, 784)), 2)
    label = rng.integers(0, 10, W5_BATCH).astype(np.int32)
    init = {}
    for k, s in W5_PARAMS.items():
        v = rng.standard_normal(s)
        init[k] = grid(v * np.sqrt(2.0 / s[0]), 6) if len(s) == 2 else {"b1": odd(0.1 * v, 9), "b2": odd(0.1 * v, 16), "b3": 0.1 * v}[k]
    return x.astype(np.float32), label, {k: v.astype(np.float32) for k, v in init.items()}


def run_w5(a, backends, tmp, rng):
    """Checks every engine's training step against jax's, then times it. Returns the table row."""
    import numpy as np
    import jax
    import onnxruntime as ort

    name = "W5"
    desc = "MLP 784-1024-1024-10 SGD step, batch 256"
    x, label, init = w5_data(rng)
    xp, lp = os.path.join(tmp, "W5_x.npy"), os.path.join(tmp, "W5_label.npy")
    np.save(xp, x)
    np.save(lp, label)
    feeds = ["--input", f"x={xp}", "--input", f"label={lp}"]
    gpath = os.path.join(HERE, "workloads", "w5_train_step.gir")

    # The reference: jax, not donated, on copies.
    ref_out = jax.jit(w5_jax_step)(*[init[k].copy() for k in W5_PARAMS], x, label)
    ref = dict(zip(list(W5_PARAMS) + ["loss"], [np.asarray(v) for v in ref_out]))

    ok = {}
    # numpy.
    p = {k: v.copy() for k, v in init.items()}
    loss = w5_numpy_step(p, x, label)
    ok["numpy"] = w5_check("numpy", dict(p, loss=loss), ref, init)
    # ONNX Runtime.
    sess = ort.InferenceSession(w5_onnx_model().SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(None, {"x": x, "label": label, **{k: v.copy() for k, v in init.items()}})
    ok["ORT"] = w5_check("ORT", dict(zip(["loss"] + list(W5_PARAMS), outs)), ref, init)
    # graphc: one step from the same weights (restored from a safetensors file), the updated
    # variables saved to a checkpoint.
    init_ck = os.path.join(tmp, "W5_init.safetensors")
    write_safetensors(init_ck, init)
    for backend in backends:
        out_ck, out_dir = os.path.join(tmp, f"W5_{backend}.safetensors"), os.path.join(tmp, f"W5_{backend}_out")
        r = subprocess.run([a.graphc, "run", gpath, "--backend", backend, "--restore", init_ck, "--checkpoint", out_ck,
                            "--out-dir", out_dir] + feeds, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"W5 check graphc {backend} failed to run: {r.stderr.strip()[:300]}")
            ok[backend] = False
            continue
        got = dict(read_safetensors(out_ck), loss=np.load(os.path.join(out_dir, "loss.npy")))
        ok[backend] = w5_check(f"graphc {backend}", got, ref, init)

    # graphc, timed from the .gir's splat initial values (the step's time does not depend on them).
    res = {"llvm": (float("nan"), float("nan"))}
    for backend in backends:
        res[backend] = graphc_bench(a, name, backend, gpath, feeds) if ok[backend] else (float("nan"), float("nan"))
    # XLA CPU: the parameters donated, each step's new ones fed to the next.
    step = jax.jit(w5_jax_step, donate_argnums=tuple(range(len(W5_PARAMS))))
    xd, ld = jax.device_put(x), jax.device_put(label)
    state = [jax.device_put(init[k].copy()) for k in W5_PARAMS]
    t0 = time.perf_counter()
    compiled = step.lower(*state, xd, ld).compile()
    xla_compile = (time.perf_counter() - t0) * 1e3

    def xla_step():
        out = compiled(*state, xd, ld)
        state[:] = out[:-1]
        jax.block_until_ready(out)

    xla = median_ms(xla_step, a.warmup, a.iters)
    # ONNX Runtime: each step's updated parameters fed to the next.
    ort_state = {k: v.copy() for k, v in init.items()}

    def ort_step():
        outs = sess.run(None, {"x": x, "label": label, **ort_state})
        ort_state.update(zip(W5_PARAMS, outs[1:]))

    ortt = median_ms(ort_step, a.warmup, a.iters) if ok["ORT"] else float("nan")
    # numpy, updating its arrays in place.
    np_state = {k: v.copy() for k, v in init.items()}
    npt = median_ms(lambda: w5_numpy_step(np_state, x, label), a.warmup, a.iters) if ok["numpy"] else float("nan")
    # IREE, on the StableHLO of the (undonated) jax step.
    try:
        iree = iree_ms(w5_jax_step, [init[k] for k in W5_PARAMS] + [x, label], a.warmup, a.iters)[0]
    except Exception as e:  # reported, not fatal, as for the other workloads
        print(f"{name} IREE failed: {str(e).strip()[:300]}")
        iree = float("nan")
    return (name, desc, res["jit"][0], res["interp"][0], xla, ortt, res["jit"][1], xla_compile, res["llvm"], iree, npt)


def graphc_bench(a, name, backend, gpath, flags):
    """`graphc bench --json` of one backend: (median ms, compile ms), NaNs when it fails."""
    iters = max(3, a.iters // 4) if backend == "interp" else a.iters
    out = subprocess.run([a.graphc, "bench", gpath, "--backend", backend, "--iters", str(iters),
                          "--warmup", str(a.warmup), "--json"] + flags, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{name} graphc {backend} failed: {out.stderr.strip()[:300]}")
        return float("nan"), float("nan")
    j = json.loads(out.stdout.strip().splitlines()[-1])
    return j["median_ms"], j["compile_ms"]


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
    wl = workloads()
    order = list(wl)
    order.insert(order.index("W6"), "W5")
    for name in order:
        if a.only and name not in a.only.split(","):
            continue
        if name == "W5":
            # Its own generator, so its inputs do not depend on --only.
            rows.append(run_w5(a, backends, tmp, np.random.default_rng(5)))
            continue
        desc, gir, shapes = wl[name]
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
            res[backend] = graphc_bench(a, name, backend, gpath, flags)
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
        # numpy, checked against XLA's result first (one that disagrees is reported, not timed).
        npf, npargs = numpy_fn(name), [inputs[k] for k in shapes]
        if np.allclose(npf(*npargs), np.asarray(compiled(*args)), rtol=1e-3, atol=1e-4):
            npt = median_ms(lambda: npf(*npargs), a.warmup, a.iters)
        else:
            print(f"{name}: numpy's result differs from XLA's; numpy left out")
            npt = float("nan")
        rows.append((name, desc, res["jit"][0], res["interp"][0], xla, ortt, res["jit"][1], xla_compile, res["llvm"], iree, npt))

    def cell(v, width, places=2):
        """A number, or '-' for one not measured (NaN)."""
        return f"{v:>{width}.{places}f}" if v == v else f"{'-':>{width}}"

    print()
    print(f"{'':4} {'workload':<44} {'graphc':>9} {'llvm':>9} {'interp':>9} {'XLA':>9} {'ORT':>9} {'IREE':>9} {'numpy':>9} "
          f"{'XLA/g':>6} {'ORT/g':>6} {'IREE/g':>6} {'np/g':>6} {'XLA/l':>6} {'ORT/l':>6} {'IREE/l':>6} {'np/l':>6}")
    for name, desc, g, gi, x, o, gc, xc, (lt, lc), ie, npt in rows:
        times = "".join(" " + cell(t, 9) for t in (g, lt, gi, x, o, ie, npt))
        ratios = "".join(" " + cell(p / base, 6) for base in (g, lt) for p in (x, o, ie, npt))
        print(f"{name:4} {desc:<44}{times}{ratios}")
    print("(milliseconds per step, medians; graphc is the jit backend (Cranelift), llvm the LLVM tier;")
    print(" ratios above 1 mean graphc (g) or its LLVM tier (l) is faster; '-': not measured or failed)")
    for name, desc, g, gi, x, o, gc, xc, (lt, lc), ie, npt in rows:
        if name == "W5":
            gf = {k: W5_FLOPS / (t * 1e-3) / 1e9 for k, t in (("graphc", g), ("llvm", lt), ("XLA", x), ("numpy", npt))}
            print(f"W5: {W5_FLOPS / 1e9:.2f} GFLOP per step; graphc {gf['graphc']:.1f} GFLOP/s ({100 * gf['graphc'] / peak:.0f}% of peak), "
                  f"LLVM tier {gf['llvm']:.1f}, XLA {gf['XLA']:.1f}, numpy {gf['numpy']:.1f} GFLOP/s")
            print(f"W5 compile: graphc {gc:.1f} ms, LLVM tier {lc:.1f} ms, XLA {xc:.1f} ms")
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
