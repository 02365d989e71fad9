#!/usr/bin/env python3
"""Runs the "light" model-zoo CNNs shipped in the onnx wheel through `graphc run`.

onnx/backend/test/data/light holds nine classic CNNs exported at opset 9 (AlexNet,
DenseNet-121, Inception v1 and v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512), their
weights replaced by ConstantOfShape nodes to keep them small, each with its expected output
(light_X_output_0.pb). The input is what ONNX's backend test feeds them
(onnx/backend/test/runner, generate_dummy_data with random=False): arange(n) / n reshaped to
the input's shape, as float32.

For every model and backend (the reference interpreter and the JIT) this runs
`graphc run MODEL --backend B --input NAME=in.npy --out-dir DIR`, compares the output with the
expected one (rtol 1e-3, atol 1e-4) and prints a line per model: PASS or FAIL, and the time.

Sets itself up like conformance.py (re-runs itself in tests/onnx/.venv). It builds graphc in
release mode (`cargo build --release -p graphc`): in a debug build even the small models take
two to three minutes each per backend (SqueezeNet 135 s, AlexNet 180 s on the interpreter),
where a release build takes 10 to 12 s; in release the set takes about 12 minutes per backend
on a loaded 2-core machine, VGG-19 alone five to six. $GRAPHC names another binary.

The light models' weights are constants, so most of their outputs are a uniform softmax
(0.001 everywhere; DenseNet-121's is a constant 0.461): passing shows that the models import
and run end to end with the right shapes, not that every operator is numerically right
(the node tests in conformance.py check those, LRN and the old-opset entries included).

tests/onnx/models_passing.txt lists the models that passed on every backend when it was last
updated; one of them failing now makes the run fail (exit 1). `--update` rewrites it.

Usage: python3 tests/onnx/models.py [--update] [--backend interp|jit] [--filter SUBSTRING]
"""

import os
import subprocess
import sys
import time

from onnx_common import HERE, ROOT, build_graphc, compare, ensure_venv, sanitize

PASSING = os.path.join(HERE, "models_passing.txt")
TIMEOUT_S = 900


def dummy_input(vi):
    """ONNX's backend-test input for a light model: arange(n) / n in the input's shape."""
    import numpy as np

    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    n = np.prod(shape)
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def run_model(graphc, path, work, backend):
    """Returns (error or None, seconds)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    prefix = os.path.splitext(path)[0]
    args = [graphc, "run", path, "--backend", backend]
    for i, vi in enumerate(inputs):
        p = os.path.join(work, f"in{i}.npy")
        np.save(p, dummy_input(vi))
        args += ["--input", f"{vi.name}={p}"]
    out_dir = os.path.join(work, "out")
    for f in os.listdir(out_dir) if os.path.isdir(out_dir) else []:
        os.remove(os.path.join(out_dir, f))
    args += ["--out-dir", out_dir]
    start = time.monotonic()
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"timed out after {TIMEOUT_S} s", time.monotonic() - start
    secs = time.monotonic() - start
    if r.returncode != 0:
        lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
        return (lines[0] if lines else f"exit {r.returncode}")[:300], secs
    for i, vo in enumerate(model.graph.output):
        pb = f"{prefix}_output_{i}.pb"
        if not os.path.exists(pb):
            continue
        t = onnx.TensorProto()
        with open(pb, "rb") as f:
            t.ParseFromString(f.read())
        got = os.path.join(out_dir, sanitize(vo.name) + ".npy")
        if not os.path.exists(got):
            return f"output '{vo.name}' was not written", secs
        err = compare(numpy_helper.to_array(t), np.load(got))
        if err:
            return f"output '{vo.name}': {err}", secs
    return None, secs


def main():
    ensure_venv(__file__)
    import onnx

    args = sys.argv[1:]
    update = "--update" in args
    backends = [args[args.index("--backend") + 1]] if "--backend" in args else ["interp", "jit"]
    flt = args[args.index("--filter") + 1] if "--filter" in args else ""
    if update and (flt or len(backends) != 2):
        sys.exit("--update runs every model on both backends (no --filter, no --backend)")
    graphc = build_graphc(release=True)
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    models = sorted(
        f[: -len(".onnx")] for f in os.listdir(light) if f.endswith(".onnx") and flt in f
    )
    work_root = os.path.join(ROOT, "target", "onnx-models")

    failed = {}
    passed = {m: True for m in models}
    for backend in backends:
        total = 0.0
        work = os.path.join(work_root, backend)  # one per backend: runs may go side by side
        os.makedirs(work, exist_ok=True)
        print(f"== backend {backend}", flush=True)
        for m in models:
            err, secs = run_model(graphc, os.path.join(light, m + ".onnx"), work, backend)
            total += secs
            if err:
                passed[m] = False
                failed[(m, backend)] = err
                print(f"FAIL {m:<24} {backend:<6} {secs:7.1f} s  {err}", flush=True)
            else:
                print(f"PASS {m:<24} {backend:<6} {secs:7.1f} s", flush=True)
        ok = sum(1 for m in models if (m, backend) not in failed)
        print(f"{backend}: {ok} passed, {len(models) - ok} failed, {total:.1f} s", flush=True)

    if update:
        good = [m for m in models if passed[m]]
        with open(PASSING, "w") as f:
            f.write("".join(m + "\n" for m in good))
        print(f"\nwrote {len(good)} models to {PASSING}")
        return
    known = set()
    if os.path.exists(PASSING):
        with open(PASSING) as f:
            known = {l.strip() for l in f if l.strip()}
    regressed = sorted((m, b) for (m, b) in failed if m in known)
    if regressed:
        print(f"\nREGRESSIONS: {len(regressed)} runs of models on models_passing.txt fail now:")
        for m, b in regressed:
            print(f"  {m} ({b}): {failed[(m, b)]}")
        sys.exit(1)


if __name__ == "__main__":
    main()
