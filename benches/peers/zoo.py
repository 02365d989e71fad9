#!/usr/bin/env python3
"""The nine model-zoo CNNs of the onnx wheel (onnx/backend/test/data/light, opset 9) at batch 1:
graphc's JIT against ONNX Runtime with two intra-op threads, in one run.

    python3 benches/peers/zoo.py [--iters 20] [--only resnet50,vgg19] [--graphc target/release/graphc]

Sets up benches/peers/.venv-zoo (onnx, onnxruntime, numpy) on first use and builds graphc in
release unless --graphc names one. Both engines get the same input (ONNX's backend-test input,
arange(n)/n) and are timed the same way: warm-up steps, then the median of --iters steps.
graphc is timed by `graphc bench --json`. Prints a table of milliseconds and the ratio
ORT / graphc (above 1: graphc is faster).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.path.join(HERE, ".venv-zoo")
PACKAGES = ["onnx==1.22.0", "onnxruntime", "numpy"]


def ensure_venv():
    if os.environ.get("GRAPHC_ZOO_IN_VENV"):
        return
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q"] + PACKAGES, check=True)
    env = dict(os.environ, GRAPHC_ZOO_IN_VENV="1")
    sys.exit(subprocess.run([py] + sys.argv, env=env).returncode)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--graphc", default="")
    args = ap.parse_args()
    ensure_venv()
    import numpy as np
    import onnx
    import onnxruntime as ort

    graphc = args.graphc
    if not graphc:
        subprocess.check_call(["cargo", "build", "-q", "--release", "-p", "graphc"], cwd=ROOT)
        graphc = os.path.join(ROOT, "target", "release", "graphc")
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    models = sorted(glob.glob(os.path.join(light, "light_*.onnx")))
    only = [o for o in args.only.split(",") if o]
    if only:
        models = [m for m in models if any(o in os.path.basename(m) for o in only)]
    avx512 = "avx512f" in open("/proc/cpuinfo").read()
    print(f"host: {os.cpu_count()} cores, {'AVX-512' if avx512 else 'AVX2 (no AVX-512)'}; "
          f"onnxruntime {ort.__version__}, 2 intra-op threads; median of {args.iters} steps")
    print(f"{'model':<22} {'graphc ms':>10} {'ORT ms':>10} {'ORT/graphc':>11}")
    with tempfile.TemporaryDirectory() as work:
        for path in models:
            name = os.path.basename(path)[len("light_"):-len(".onnx")]
            model = onnx.load(path)
            inits = {t.name for t in model.graph.initializer}
            inputs = [i for i in model.graph.input if i.name not in inits]
            feeds, flags = {}, []
            for k, vi in enumerate(inputs):
                shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
                n = int(np.prod(shape))
                x = (np.arange(n).reshape(shape) / n).astype(np.float32)
                feeds[vi.name] = x
                p = os.path.join(work, f"{name}_{k}.npy")
                np.save(p, x)
                flags += ["--input", f"{vi.name}={p}"]
            r = subprocess.run(
                [graphc, "bench", path, "--json", "--iters", str(args.iters), "--warmup", str(args.warmup)] + flags,
                capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name:<22} graphc failed: {r.stderr.strip().splitlines()[:1]}")
                continue
            g_ms = json.loads(r.stdout)["median_ms"]
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 2
            opts.inter_op_num_threads = 1
            sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
            for _ in range(args.warmup):
                sess.run(None, feeds)
            times = []
            for _ in range(args.iters):
                t = time.perf_counter()
                sess.run(None, feeds)
                times.append((time.perf_counter() - t) * 1e3)
            o_ms = sorted(times)[len(times) // 2]
            print(f"{name:<22} {g_ms:>10.2f} {o_ms:>10.2f} {o_ms / g_ms:>11.2f}")


if __name__ == "__main__":
    main()
