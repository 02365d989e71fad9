#!/usr/bin/env python3
"""Runs the ONNX backend node tests through `graphc run` and compares with expected outputs.

Sets itself up: creates tests/onnx/.venv with onnx==1.22.0 (the last release whose wheel ships
the node tests as files) on first use, builds graphc, then for every test in
onnx/backend/test/data/node converts the inputs to .npy, runs
`graphc run model.onnx --backend B --input NAME=PATH ... --out-dir DIR`, and compares each
output (rtol 1e-3, atol 1e-4 for floats; exact for ints and bools). It does so on every
backend the binary has: the reference interpreter, the JIT (Cranelift) and, where graphc was
built with the llvm feature (GRAPHC_FEATURES=llvm), the LLVM tier (`auto`, the default then,
runs the one and then the other's kernels), each with its own per-op table and 'N passed,
N failed' line.

tests/onnx/passing.txt lists the tests that passed when it was last updated; a test on that
list that fails now on any backend makes the run fail (exit 1). `--update` rewrites the list
(from the interpreter's run: the JIT must then pass the same tests).

`--backend aot` compiles each test on passing.txt with `graphc compile` into an executable (a
release build of graphc and libgraphc_aot.a) and runs the data sets through it; its list is
tests/onnx/passing_aot.txt. An input whose value the import needs (a Reshape's shape fed as an
input) is fixed at compile time with `graphc compile --input` and not fed.

`--suite NAME` runs another directory of the wheel's backend tests instead of `node`, such as
`pytorch-converted` and `pytorch-operator` (the PyTorch exports), with its own lists
(passing_pytorch_converted.txt, ...).

Usage: python3 tests/onnx/conformance.py [--update] [--suite NAME] [--backend interp|jit|llvm|aot] [--filter SUBSTRING] [-v]
"""

import os
import re
import subprocess
import sys

from onnx_common import HERE, ROOT, build_graphc, compare, ensure_venv, sanitize



def run_test(graphc, test_dir, work, backend):
    """Returns (op, error or None)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
    op = model.graph.node[0].op_type if model.graph.node else "?"
    inits = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    outputs = [o.name for o in model.graph.output]
    sets = sorted(d for d in os.listdir(test_dir) if d.startswith("test_data_set_"))
    if not sets:
        return op, "no test data"
    for ds in sets:
        d = os.path.join(test_dir, ds)
        args = [graphc, "run", os.path.join(test_dir, "model.onnx"), "--backend", backend]
        for i, name in enumerate(inputs):
            pb = os.path.join(d, f"input_{i}.pb")
            if not os.path.exists(pb):
                return op, f"missing {pb}"
            t = onnx.TensorProto()
            with open(pb, "rb") as f:
                t.ParseFromString(f.read())
            try:
                arr = numpy_helper.to_array(t)
            except Exception as e:  # noqa: BLE001 - any unreadable test input
                return op, f"numpy cannot read input {i}: {e}"
            path = os.path.join(work, f"in{i}.npy")
            np.save(path, arr)
            args += ["--input", f"{name}={path}"]
        if backend == "aot":
            args, err = compile_program(graphc, test_dir, work, args[5:])
            if err:
                return op, err
        out_dir = os.path.join(work, "out")
        for f in os.listdir(out_dir) if os.path.isdir(out_dir) else []:
            os.remove(os.path.join(out_dir, f))
        args += ["--out-dir", out_dir]
        try:
            r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return op, "timed out"
        if r.returncode != 0:
            lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
            return op, (lines[0] if lines else f"exit {r.returncode}")[:300]
        for i, name in enumerate(outputs):
            t = onnx.TensorProto()
            with open(os.path.join(d, f"output_{i}.pb"), "rb") as f:
                t.ParseFromString(f.read())
            expected = numpy_helper.to_array(t)
            path = os.path.join(out_dir, sanitize(name) + ".npy")
            if not os.path.exists(path):
                return op, f"output '{name}' was not written"
            err = compare(expected, np.load(path))
            if err:
                return op, f"output '{name}': {err}"
    return op, None


def compile_program(graphc, test_dir, work, input_flags):
    """For --backend aot: the model compiled to an executable, with the inputs whose values the
    import needs (a Reshape's shape fed as an input) fixed at compile time (`graphc compile
    --input`); returns (the executable's command with the other inputs, error or None)."""
    program = os.path.join(work, "program")
    given = dict(zip(input_flags[1::2], [None] * (len(input_flags) // 2)))
    fixed = []
    while True:
        if os.path.exists(program):
            os.remove(program)
        cmd = [graphc, "compile", os.path.join(test_dir, "model.onnx"), "-o", program]
        for flag in fixed:
            cmd += ["--input", flag]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return None, "compile timed out"
        if r.returncode == 0:
            break
        m = re.search(r"comes from graph input '([^']+)', whose value graphc needs", r.stderr)
        flag = next((f for f in given if m and f.split("=", 1)[0] == m.group(1)), None)
        if flag is None or flag in fixed:
            lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
            return None, "compile: " + (lines[0] if lines else f"exit {r.returncode}")[:300]
        fixed.append(flag)
    args = [program]
    for flag in given:
        if flag not in fixed:
            args += ["--input", flag]
    return args, None


def run_suite(graphc, node_dir, tests, work, backend, verbose):
    """Runs every test on one backend; prints its table; returns (passed, {name: error})."""
    by_op = {}
    passed, failed = [], {}
    print(f"== backend {backend}", flush=True)
    for i, name in enumerate(tests):
        op, err = run_test(graphc, os.path.join(node_dir, name), work, backend)
        stats = by_op.setdefault(op, [0, 0])
        if err is None:
            passed.append(name)
            stats[0] += 1
        else:
            failed[name] = err
            stats[1] += 1
            if verbose:
                print(f"FAIL {name}: {err}")
        if (i + 1) % 200 == 0:
            print(f"... {i + 1}/{len(tests)}", flush=True)

    print(f"\n{'op':<32} {'passed':>7} {'failed':>7}")
    for op in sorted(by_op):
        p, f = by_op[op]
        print(f"{op:<32} {p:>7} {f:>7}")

    reasons = {}
    for err in failed.values():
        key = err.split(":", 2)[-1].strip()[:90] if "not supported" in err else err[:90]
        reasons[key] = reasons.get(key, 0) + 1
    print(f"\nmost common failures ({backend}):")
    for r, c in sorted(reasons.items(), key=lambda x: -x[1])[:15]:
        print(f"{c:>6}  {r}")
    print(f"\n{backend}: {len(passed)} passed, {len(failed)} failed", flush=True)
    return passed, failed


def main():
    ensure_venv(__file__)
    import onnx

    args = sys.argv[1:]
    update = "--update" in args
    verbose = "-v" in args
    flt = args[args.index("--filter") + 1] if "--filter" in args else ""
    aot = "--backend" in args and args[args.index("--backend") + 1] == "aot"
    graphc = build_graphc(release=aot)
    if aot:
        subprocess.check_call(["cargo", "build", "-q", "--release", "-p", "graphc-aot"], cwd=ROOT)
    # Every backend the binary has (llvm where it was built with that feature).
    listed = subprocess.run([graphc, "run", "--help"], capture_output=True, text=True).stdout
    every = ["interp", "jit"] + (["llvm"] if "- llvm:" in listed else [])
    backends = [args[args.index("--backend") + 1]] if "--backend" in args else every
    if update and (flt or backends[0] not in ("interp", "aot")):
        sys.exit("--update runs the whole suite on the interpreter, or with --backend aot (no --filter)")
    suite = args[args.index("--suite") + 1] if "--suite" in args else "node"
    suffix = "" if suite == "node" else "_" + suite.replace("-", "_")
    interp_list = os.path.join(HERE, f"passing{suffix}.txt")
    passing = os.path.join(HERE, f"passing_aot{suffix}.txt") if aot else interp_list
    node_dir = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", suite)
    if not os.path.isdir(node_dir):
        sys.exit(f"--suite {suite}: the wheel has no test directory {node_dir}")
    tests = sorted(t for t in os.listdir(node_dir) if flt in t)
    if aot:
        # Ahead of time only what passes on the interpreter: the rest fails at import anyway.
        with open(interp_list) as f:
            listed = {l.strip() for l in f if l.strip()}
        tests = [t for t in tests if t in listed]
    work = os.path.join(ROOT, "target", "onnx-conformance")
    os.makedirs(work, exist_ok=True)

    results = {b: run_suite(graphc, node_dir, tests, work, b, verbose) for b in backends}

    if update:
        passed = results[backends[0]][0]
        with open(passing, "w") as f:
            f.write("".join(t + "\n" for t in passed))
        print(f"\nwrote {len(passed)} tests to {passing}")
        return
    known = set()
    if os.path.exists(passing):
        with open(passing) as f:
            known = {l.strip() for l in f if l.strip()}
    bad = False
    for backend, (passed, failed) in results.items():
        regressed = sorted(t for t in known if t in failed)
        new = sorted(t for t in passed if t not in known)
        if new:
            print(f"\n{backend}: {len(new)} tests pass that {os.path.basename(passing)} does not list; run with --update to record them")
        if regressed:
            bad = True
            print(f"\nREGRESSIONS on {backend}: {len(regressed)} tests on passing.txt fail now:")
            for t in regressed:
                print(f"  {t}: {failed[t]}")
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
