#!/usr/bin/env python3
"""Export benches/models' model set (zoo.py) to ONNX with random weights: each model and exporter
to benches/models/out/NAME[.dynamo].onnx, with its random inputs (seeded) beside it as
NAME[.dynamo].inputs.npz keyed by the ONNX input names. Cached: a model already exported is kept
unless --force. A failed export writes NAME[.dynamo].error.txt (its last error line is what
bench.py reports) and the run goes on.

    python3 benches/models/export.py [--only resnet18,bert@dynamo] [--force] [--list]

Sets up benches/models/.venv (torch, torchvision, timm, transformers, onnx, onnxruntime,
onnxscript) on first use. Each export runs in its own process (a crash or a hang of one exporter
costs that model only; --timeout seconds each). bench.py calls this for what is missing.
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402


def export_one(entry, model_name, exporter):
    import numpy as np
    import onnx
    import torch

    torch.manual_seed(0)
    builder, _ = zoo.MODELS[model_name]
    model, inputs = builder()
    model.eval()
    names = list(inputs)
    args = tuple(inputs[n] for n in names)
    onnx_path, npz_path = zoo.paths(entry)
    tmp = onnx_path + ".tmp"
    with torch.no_grad():
        if exporter == "ts":
            torch.onnx.export(model, args, tmp, dynamo=False, opset_version=zoo.TS_OPSET,
                              input_names=names, output_names=["output"])
        else:
            prog = torch.onnx.export(model, args, dynamo=True, opset_version=zoo.DYNAMO_OPSET,
                                     input_names=names, output_names=["output"])
            prog.save(tmp, external_data=False)
    m = onnx.load(tmp)
    inits = {t.name for t in m.graph.initializer}
    graph_inputs = [i.name for i in m.graph.input if i.name not in inits]
    if len(graph_inputs) > len(names):
        raise RuntimeError(f"exported graph has inputs {graph_inputs}, the model {names}")
    # An exporter may drop an input the graph does not use; inputs keep their order.
    by_name = {n: inputs[n] for n in names}
    feeds = {}
    for k, gi in enumerate(graph_inputs):
        t = by_name.get(gi, args[k])
        feeds[gi] = t.numpy()
    np.savez(npz_path, **feeds)
    os.replace(tmp, onnx_path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="entries or model names, comma-separated")
    ap.add_argument("--force", action="store_true", help="export again what is cached")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per export")
    ap.add_argument("--list", action="store_true", help="list the entries and exit")
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    zoo.ensure_venv()
    os.makedirs(zoo.OUT, exist_ok=True)
    if args.one:
        entry = args.one
        (e,) = [x for x in zoo.entries(entry) if x[0] == entry]
        export_one(*e)
        return
    if args.list:
        for entry, name, ex in zoo.entries(args.only):
            doc = (zoo.MODELS[name][0].__doc__ or "").split("\n")[0]
            print(f"{entry:<26} {doc}")
        return
    for entry, name, ex in zoo.entries(args.only):
        onnx_path, _ = zoo.paths(entry)
        err_path = onnx_path[:-len(".onnx")] + ".error.txt"
        if os.path.exists(onnx_path) and not args.force:
            continue
        if os.path.exists(err_path) and not args.force:
            print(f"{entry:<26} failed before (see {os.path.relpath(err_path)}; --force retries)")
            continue
        t = time.time()
        try:
            r = subprocess.run([sys.executable, __file__, "--one", entry], capture_output=True, text=True,
                               timeout=args.timeout)
            ok, log = r.returncode == 0, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            ok, log = False, f"{e.stdout or ''}{e.stderr or ''}\nTimeoutExpired: export ran past {args.timeout} s"
        if ok and os.path.exists(onnx_path):
            if os.path.exists(err_path):
                os.remove(err_path)
            mb = os.path.getsize(onnx_path) / 2**20
            print(f"{entry:<26} exported in {time.time() - t:5.1f} s  ({mb:.1f} MiB)")
        else:
            with open(err_path, "w") as f:
                f.write(log)
            print(f"{entry:<26} export FAILED: {last_error(log)}")


def last_error(log):
    """The line of a traceback that names the error (the last 'XxxError: ...' line)."""
    lines = [ln.strip() for ln in log.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        head = ln.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Expired")) and " " not in head:
            return ln[:300]
    return lines[-1][:300] if lines else "(no output)"


if __name__ == "__main__":
    main()
