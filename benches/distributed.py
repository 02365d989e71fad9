#!/usr/bin/env python3
"""Parameter-server training across processes on loopback (release build), four reports:

1. Throughput of 1, 2 and 4 worker processes (1 ps task, --sync async) on a compute-bound
   model: W5, compare.py's training step (MLP 784-1024-1024-10, batch 256, softmax
   cross-entropy, SGD), against one process training alone (no cluster).
2. `sync` against `backup:1` with 3 workers, one a straggler slowed by --step-delay: rounds the
   ps task applies per second (from its --log), and the fast workers' steps per second.
3. Bytes of tensors moved per worker step (pulls and pushes), against the model's size.
4. What a step costs across processes: ps_mlp.gir (a tiny model, so the step is all wire) and
   W5 trained by 1 ps + 1 worker in sync mode, against one process alone.

Each run is timed from the workers' own logs (first to last step), so process start-up and the
JIT compile are not counted. Workers share this host's cores with the ps task and each other:
on a host with fewer cores than processes, more workers cannot add throughput.

Usage: python3 benches/distributed.py [--steps N] [--delay MS] [--graphc PATH]
"""

import argparse
import json
import os
import socket
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W5 = os.path.join(ROOT, "benches", "peers", "workloads", "w5_train_step.gir")
EXAMPLE = os.path.join(ROOT, "ir-spec", "examples", "ps_mlp.gir")


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def tf_config(ps, workers, job, index):
    return json.dumps({"cluster": {"ps": [f"127.0.0.1:{p}" for p in ps], "worker": [f"127.0.0.1:{p}" for p in workers]},
                       "task": {"type": job, "index": index}})


def log_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def rate(lines, key="step"):
    """Steps (or updates) per second between the first and the last line."""
    if len(lines) < 2:
        return 0.0
    return (lines[-1][key] - lines[0][key]) / (lines[-1]["time_s"] - lines[0]["time_s"])


def cluster(graphc, model, graph, workers, steps, sync, delays, out):
    """Trains `model` with 1 ps and `workers` workers; returns (worker logs, ps log, outputs)."""
    ports = free_ports(1 + workers)
    ps, ws = ports[:1], ports[1:]
    common = [graphc, "train", model, "--graph", graph, "--steps", str(steps), "--sync", sync, "--peer-timeout", "120"]
    env = dict(os.environ)
    procs = []
    env["TF_CONFIG"] = tf_config(ps, ws, "ps", 0)
    procs.append(subprocess.Popen(common + ["--log", os.path.join(out, "ps.jsonl")], env=dict(env),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for i in range(workers):
        env["TF_CONFIG"] = tf_config(ps, ws, "worker", i)
        extra = ["--log", os.path.join(out, f"w{i}.jsonl"), "--step-delay", str(delays[i])]
        procs.append(subprocess.Popen(common + extra, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    for p in procs:
        text, _ = p.communicate(timeout=1200)
        if p.returncode != 0:
            raise SystemExit(f"a task failed:\n{text}")
        outputs.append(text)
    logs = [log_lines(os.path.join(out, f"w{i}.jsonl")) for i in range(workers)]
    return logs, log_lines(os.path.join(out, "ps.jsonl")), outputs


def bytes_per_step(outputs):
    for text in outputs:
        for line in text.splitlines():
            if "bytes of tensors moved" in line:
                return int(line.split(", ")[-1].split()[0])
    return None


def model_bytes(outputs):
    for line in outputs[0].splitlines():
        if line.startswith("ps task 0:") and "bytes)" in line:
            return int(line.split("(")[1].split()[0])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60, help="steps per worker for W5 (default 60)")
    ap.add_argument("--delay", type=int, default=20, help="the straggler's delay per step, ms (default 20)")
    ap.add_argument("--graphc", default=os.path.join(ROOT, "target", "release", "graphc"))
    a = ap.parse_args()
    cores = os.cpu_count()
    avx512 = "avx512f" in open("/proc/cpuinfo").read()
    print(f"host: {cores} cores, {'AVX-512' if avx512 else 'no AVX-512'}; graphc {a.graphc}")

    with tempfile.TemporaryDirectory() as tmp:
        alone = os.path.join(tmp, "alone.jsonl")
        subprocess.run([a.graphc, "train", W5, "--graph", "w5", "--steps", str(a.steps), "--log", alone],
                       check=True, capture_output=True)
        base = rate(log_lines(alone))
        print(f"\n1. throughput, W5 (MLP 784-1024-1024-10, batch 256), --sync async, {a.steps} steps a worker")
        print(f"   one process alone: {base:.1f} steps/s")
        print("   workers | steps/s, all workers | per worker | vs alone")
        for n in (1, 2, 4):
            out = os.path.join(tmp, f"t{n}")
            os.makedirs(out)
            logs, _, outputs = cluster(a.graphc, W5, "w5", n, a.steps, "async", [0] * n, out)
            total = sum(rate(l) for l in logs)
            print(f"   {n:7} | {total:20.1f} | {total / n:10.1f} | {total / base:7.2f}x")
            if n == 1:
                moved, size = bytes_per_step(outputs), model_bytes(outputs)

        print(f"\n2. sync against backup:1, ps_mlp.gir, 3 workers, worker 2 sleeping {a.delay} ms after each step, 300 steps each")
        print("   (rounds/s: while every worker runs; a round averages n - K updates)")
        print("   mode     | rounds/s at the ps | fast workers' steps/s | updates dropped")
        for mode in ("sync", "backup:1"):
            out = os.path.join(tmp, mode.replace(":", ""))
            os.makedirs(out)
            logs, ps, _ = cluster(a.graphc, EXAMPLE, "step", 3, 300, mode, [0, 0, a.delay], out)
            fast = (rate(logs[0]) + rate(logs[1])) / 2
            # While the fast workers run: the rounds before any closed with fewer than n - K
            # updates (after the fast workers finish, the straggler's rounds are its own).
            need = 3 if mode == "sync" else 2
            full = [r for r in ps if r["workers"] >= need]
            print(f"   {mode:8} | {rate(full, 'update'):18.1f} | {fast:21.1f} | {ps[-1]['dropped'] if ps else 0}")

        print("\n3. bytes moved per worker step, W5")
        print(f"   {moved} bytes per step (pulls and pushes) for a model of {size} bytes: {moved / size:.2f}x its size")

        print("\n4. a step across processes: 1 ps + 1 worker, --sync sync, against one process alone")
        print("   model   | alone, steps/s | 1 ps + 1 worker | ratio | added per step")
        for name, model, graph, steps in (("ps_mlp", EXAMPLE, "step", 2000), ("W5", W5, "w5", a.steps)):
            out = os.path.join(tmp, f"step-{name}")
            os.makedirs(out)
            log = os.path.join(out, "alone.jsonl")
            subprocess.run([a.graphc, "train", model, "--graph", graph, "--steps", str(steps), "--log", log],
                           check=True, capture_output=True)
            alone = rate(log_lines(log))
            logs, _, _ = cluster(a.graphc, model, graph, 1, steps, "sync", [0], out)
            both = rate(logs[0])
            added = 1000 / both - 1000 / alone
            print(f"   {name:7} | {alone:14.1f} | {both:15.1f} | {both / alone:5.2f} | {added:8.2f} ms")


if __name__ == "__main__":
    main()
