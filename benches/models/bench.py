#!/usr/bin/env python3
"""Real architectures exported from PyTorch with random weights (benches/models/zoo.py: 1-D conv
audio, 3-D conv, transposed conv, LSTM/GRU, small transformers, 2-D CNNs; TorchScript and dynamo
exporters) at batch 1: graphc against ONNX Runtime with two intra-op threads, in one run.

    python3 benches/models/bench.py [--iters 20] [--rounds 2] [--only resnet18,bert@dynamo]
        [--graphc target/release/graphc] [--json results.json] [--show-ops 6]

Sets up benches/models/.venv on first use and exports what benches/models/out/ lacks (export.py;
a failed export is reported, not retried: `export.py --force --only NAME`). Builds graphc in
release unless --graphc names one (default: target/release/graphc when it exists).

Per model, interleaved: --rounds times `graphc bench --json` (median of --iters steps after
--warmup) and ORT on the same inputs (the same count), each engine's time the best round's
median; then one `graphc bench --ops --json` for the per-op profile (the share of the step's
node time on reference kernels, and the slowest nodes); then `graphc run -o` to compare graphc's
outputs with ORT's: max abs difference and max abs difference / max |ORT output| ("ok" under
--tol). A probe step first sizes graphc's runs: a model that would spend more than --budget
seconds gets one round of fewer steps; one whose single step takes longer keeps the probe's
(profiled) step as its time, and one over 3 x --budget is not checked against ORT.
Prints a table of milliseconds and the ratio ORT / graphc (above 1: graphc is faster),
failures per model (export, import, run, mismatch) and, for the --show-ops models with the
lowest ratio, their slowest nodes. Times are wall-clock on a shared host: noisy when others run.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402


def first_error(text):
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower() or "panicked" in ln.lower():
            return ln[:300]
    return (lines[0] if lines else "(no output)")[:300]


def graphc_bench(graphc, path, flags, iters, warmup, ops=False, ops_top=30, timeout=900):
    cmd = [graphc, "bench", path, "--json", "--iters", str(iters), "--warmup", str(warmup)] + flags
    if ops:
        cmd += ["--ops", "--ops-top", str(ops_top)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"graphc bench ran past {timeout} s"
    if r.returncode != 0:
        return None, first_error(r.stderr or r.stdout)
    return json.loads(r.stdout), None


def ort_times(sess, feeds, iters, warmup):
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[len(times) // 2]


def compare(np, graphc, path, flags, ort_names, ort_outs, work, tol):
    out_dir = os.path.join(work, "out")
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, f))
    r = subprocess.run([graphc, "run", path, "-o", out_dir, "--json"] + flags, capture_output=True, text=True,
                       timeout=900)
    if r.returncode != 0:
        return {"ok": False, "error": first_error(r.stderr or r.stdout)}
    files = {o["name"]: o.get("file") for o in json.loads(r.stdout)["outputs"]}
    worst_abs, worst_rel = 0.0, 0.0
    for name, ref in zip(ort_names, ort_outs):
        if files.get(name) is None:
            return {"ok": False, "error": f"graphc wrote no output {name!r} (it has {sorted(files)})"}
        got = np.load(files[name])
        if got.shape != ref.shape:
            return {"ok": False, "error": f"output {name}: shape {list(got.shape)}, ORT {list(ref.shape)}"}
        if ref.dtype.kind in "fc":
            d = np.abs(got.astype(np.float64) - ref.astype(np.float64))
            a = float(np.nanmax(d)) if d.size else 0.0
            if np.isnan(d).any() and not (np.isnan(got) == np.isnan(ref)).all():
                a = math.inf
            scale = float(np.nanmax(np.abs(ref))) if ref.size else 0.0
        else:
            a = float(np.abs(got.astype(np.int64) - ref.astype(np.int64)).max()) if ref.size else 0.0
            scale = 1.0
        worst_abs = max(worst_abs, a)
        worst_rel = max(worst_rel, a / scale if scale > 0 else a)
    return {"ok": worst_rel <= tol, "max_abs": worst_abs, "max_rel": worst_rel}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="graphc/ORT alternations per model")
    ap.add_argument("--only", default="", help="entries (NAME or NAME@dynamo) or model names")
    ap.add_argument("--graphc", default="")
    ap.add_argument("--json", default="", help="write every result (and each profile's top rows) here")
    ap.add_argument("--budget", type=float, default=30,
                    help="seconds of graphc steps per model before --iters and --rounds are cut down")
    ap.add_argument("--tol", type=float, default=1e-3, help="max |graphc - ORT| / max |ORT| for 'ok'")
    ap.add_argument("--ops-top", type=int, default=10, help="profile rows kept per model")
    ap.add_argument("--show-ops", type=int, default=6,
                    help="print the top profile rows of this many models, lowest ratio first")
    ap.add_argument("--no-export", action="store_true", help="bench only what out/ already holds")
    args = ap.parse_args()
    zoo.ensure_venv()
    import numpy as np
    import onnxruntime as ort

    graphc = args.graphc or os.path.join(zoo.ROOT, "target", "release", "graphc")
    if not args.graphc and not os.path.exists(graphc):
        subprocess.check_call(["cargo", "build", "-q", "--release", "-p", "graphc"], cwd=zoo.ROOT)
    if not args.no_export:
        export = [sys.executable, os.path.join(zoo.HERE, "export.py")] + (["--only", args.only] if args.only else [])
        subprocess.run(export, check=True)

    avx512 = "avx512f" in open("/proc/cpuinfo").read()
    print(f"host: {os.cpu_count()} cores, {'AVX-512' if avx512 else 'AVX2 (no AVX-512)'}; "
          f"onnxruntime {ort.__version__}, 2 intra-op threads; best of {args.rounds} rounds' median of "
          f"{args.iters} steps; graphc {graphc}")
    hdr = f"{'model':<20} {'exporter':<8} {'graphc ms':>10} {'ORT ms':>9} {'ORT/graphc':>10} {'ref %':>6}  agreement"
    print(hdr)
    results = []
    with tempfile.TemporaryDirectory() as work:
        for entry, name, exporter in zoo.entries(args.only):
            res = {"model": name, "entry": entry, "exporter": exporter}
            results.append(res)
            onnx_path, npz_path = zoo.paths(entry)
            err_path = onnx_path[:-len(".onnx")] + ".error.txt"
            if not os.path.exists(onnx_path):
                res["error"] = "export: " + (last_error_file(err_path) or "not exported")
                print(f"{name:<20} {exporter:<8} {res['error']}")
                continue
            inputs = dict(np.load(npz_path))
            flags = []
            for k, (iname, x) in enumerate(inputs.items()):
                p = os.path.join(work, f"in{k}.npy")
                np.save(p, x)
                flags += ["--input", f"{iname}={p}"]
            try:
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = 2
                opts.inter_op_num_threads = 1
                sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
                ort_names = [o.name for o in sess.get_outputs()]
                ort_outs = sess.run(None, inputs)
            except Exception as e:  # noqa: BLE001
                sess, ort_err = None, f"ORT: {type(e).__name__}: {str(e).splitlines()[0][:250]}"
                res["ort_error"] = ort_err
            # A probe step (with the per-op profile) sizes the runs: a model whose graphc step is
            # slow gets fewer steps (at least 1) and one round, to spend about --budget seconds per
            # engine; one whose probe step alone exceeds --budget keeps the probe as its time and
            # profile, and with a step over 3 x --budget skips the output check.
            iters, warmup, rounds = args.iters, args.warmup, args.rounds
            probe, g_err = graphc_bench(graphc, onnx_path, flags, 1, 0, ops=True, ops_top=args.ops_top)
            step_s = probe["median_ms"] / 1e3 if probe else 0.0
            slow = step_s > args.budget
            if probe and step_s * (iters + warmup) * rounds > args.budget:
                rounds = 1
                iters = max(1, min(iters, int(args.budget / step_s) - 1))
                warmup = 1 if iters >= 3 else 0
            res["iters"], res["rounds"] = (1, 1) if slow else (iters, rounds)
            g_meds, o_meds, last = ([probe["median_ms"]], [], probe) if slow else ([], [], None)
            for _ in range(rounds):
                if g_err is None and not slow:
                    last, g_err = graphc_bench(graphc, onnx_path, flags, iters, warmup)
                    if last:
                        g_meds.append(last["median_ms"])
                if sess is not None:
                    o_meds.append(ort_times(sess, inputs, args.iters, args.warmup))
            if g_err:
                res["error"] = "graphc: " + g_err
            g_ms = min(g_meds) if g_meds else None
            o_ms = min(o_meds) if o_meds else None
            res.update(graphc_ms=g_ms, ort_ms=o_ms, graphc_round_ms=g_meds, ort_round_ms=o_meds)
            if last:
                res["compile_ms"] = last.get("compile_ms")
                res["tier"] = last.get("tier")
            if g_ms and o_ms:
                res["ratio"] = o_ms / g_ms
            if not g_err:
                if slow:
                    prof, p_err = probe, None
                else:
                    prof, p_err = graphc_bench(graphc, onnx_path, flags, max(1, iters // 2), warmup, ops=True,
                                               ops_top=args.ops_top)
                if prof:
                    ops = prof["ops"]
                    res["reference_percent"] = ops.get("reference_percent")
                    res["by_path_percent"] = ops.get("by_path_percent")
                    res["ops_rows"] = [
                        {k: row.get(k) for k in ("node", "op", "operands", "results", "path", "ms_per_step",
                                                 "share_percent")}
                        for row in ops.get("rows", [])[:args.ops_top]]
                else:
                    res["ops_error"] = p_err
                if step_s > 3 * args.budget:
                    res["agreement"] = {"ok": None, "skipped": f"graphc step {step_s:.0f} s"}
                elif sess is not None:
                    try:
                        res["agreement"] = compare(np, graphc, onnx_path, flags, ort_names, ort_outs, work, args.tol)
                    except Exception as e:  # noqa: BLE001
                        res["agreement"] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
            print(row_line(res), flush=True)
            if args.json:  # after each model, so that an interrupted run keeps what it measured
                write_json(args, graphc, avx512, ort.__version__, results)
    if args.json:
        write_json(args, graphc, avx512, ort.__version__, results)
    ratios = [r["ratio"] for r in results if r.get("ratio")]
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"geomean ORT/graphc over {len(ratios)} models: {geo:.2f}")
    failed = [r for r in results if r.get("error") or r.get("ort_error")
              or (r.get("agreement") and r["agreement"].get("ok") is False)]
    if failed:
        print("\nfailures:")
        for r in failed:
            why = r.get("error") or r.get("ort_error") or r["agreement"].get("error") or \
                f"mismatch: max abs {r['agreement']['max_abs']:.3g}, rel {r['agreement']['max_rel']:.3g}"
            print(f"  {r['entry']:<24} {why}")
    worst = sorted([r for r in results if r.get("ratio") and r.get("ops_rows")], key=lambda r: r["ratio"])
    for r in worst[:args.show_ops]:
        print(f"\n{r['entry']}: ORT/graphc {r['ratio']:.2f}, reference kernels {r['reference_percent']:.1f}%, "
              f"by path " + ", ".join(f"{k} {v:.1f}%" for k, v in sorted(r["by_path_percent"].items(),
                                                                            key=lambda kv: -kv[1])))
        for row in r["ops_rows"][:5]:
            shapes = ", ".join(row["operands"] or []) + " -> " + ", ".join(row["results"] or [])
            print(f"  {row['op'][:40]:<40} {shapes[:90]:<90} {row['path']:<12} {row['ms_per_step']:8.3f} ms "
                  f"{row['share_percent']:5.1f}%")


def write_json(args, graphc, avx512, ort_version, results):
    with open(args.json, "w") as f:
        json.dump({"host": {"cores": os.cpu_count(), "avx512": avx512, "onnxruntime": ort_version},
                   "iters": args.iters, "rounds": args.rounds, "graphc": graphc, "results": results}, f, indent=1)


def row_line(r):
    def f(v, w, p=2):
        return f"{v:>{w}.{p}f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"
    ag = r.get("agreement")
    if r.get("error"):
        agree = r["error"]
    elif r.get("ort_error"):
        agree = r["ort_error"]
    elif ag is None:
        agree = "-"
    elif ag.get("error"):
        agree = "FAIL: " + ag["error"]
    elif ag.get("skipped"):
        agree = "not checked (" + ag["skipped"] + ")"
    else:
        agree = f"{'ok' if ag['ok'] else 'MISMATCH'} (abs {ag['max_abs']:.2g}, rel {ag['max_rel']:.2g})"
    return (f"{r['model']:<20} {r['exporter']:<8} {f(r.get('graphc_ms'), 10)} {f(r.get('ort_ms'), 9)} "
            f"{f(r.get('ratio'), 10)} {f(r.get('reference_percent'), 6, 1)}  {agree}")


def last_error_file(path):
    if not os.path.exists(path):
        return None
    import export
    return export.last_error(open(path).read())


if __name__ == "__main__":
    main()
