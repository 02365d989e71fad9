//! `--json` on `check`, `run`, `simulate` and `train`: one JSON object on standard output
//! holding what the lines say, numbers as numbers and shapes as lists, checked against the
//! values (the files written, the log, the lines of a run without --json).

mod common;

use common::{example, graphc, text};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn tmpdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-json-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs graphc, which must succeed and print one JSON object (a single line) on stdout.
fn json_ok(args: &[&str]) -> Value {
    let o = graphc(args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "graphc {args:?} failed:\n{out}\n{err}");
    assert_eq!(out.lines().count(), 1, "one line of JSON, nothing else on stdout:\n{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
}

#[test]
fn check_lists_every_file_and_the_diagnostics_of_those_that_fail() {
    let dir = tmpdir("check");
    let bad = dir.join("bad.gir");
    std::fs::write(&bad, "graph @g(%x: f32[2]) -> (y: f32[2]) {\n  %y = matmull %x : f32[2]\n  return %y\n}\n")
        .unwrap();
    let good = example("mlp.gir");

    let j = json_ok(&["check", &good, "--json"]);
    assert_eq!(j["ok"], true);
    let f = &j["files"][0];
    assert_eq!(
        (f["file"].as_str(), f["ok"].as_bool(), f["graphs"].as_u64(), f["nodes"].as_u64()),
        (Some(good.as_str()), Some(true), Some(1), Some(6)),
        "{j}"
    );

    let o = graphc(&["check", &good, s(&bad), "--json"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "a failed file exits 1");
    assert!(err.contains("unknown op 'matmull'"), "the diagnostics still go to stderr:\n{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["ok"], false);
    let files = j["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["ok"], true);
    let f = &files[1];
    assert_eq!((f["file"].as_str(), f["ok"].as_bool(), f["errors"].as_u64()), (Some(s(&bad)), Some(false), Some(1)));
    let d = &f["diagnostics"][0];
    assert_eq!(d["severity"], "error");
    assert!(d["message"].as_str().unwrap().contains("unknown op 'matmull'"), "{d}");
    assert_eq!((d["line"].as_u64(), d["column"].as_u64()), (Some(2), Some(8)), "{d}");
    assert!(f["rendered"].as_str().unwrap().contains(&format!("{}:2:8: error", bad.display())), "{f}");

    // A file that is not there: no place in it, the message still said.
    let missing = dir.join("missing.gir");
    let o = graphc(&["check", s(&missing), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let j: Value = serde_json::from_str(&text(&o).0).unwrap();
    let d = &j["files"][0]["diagnostics"][0];
    assert!(d["line"].is_null() && !d["message"].as_str().unwrap().is_empty(), "{j}");
}

#[test]
fn run_reports_steps_outputs_and_files_as_the_lines_do() {
    let dir = tmpdir("run");
    let file = example("mlp.gir");
    // The outputs' first values, and the same outputs written as .npy.
    // The JIT named: a build with the llvm feature defaults to the auto tier.
    let j = json_ok(&["run", &file, "--json", "--seed", "3", "--steps", "2", "--backend", "jit"]);
    assert_eq!(j["graphs"], serde_json::json!(["mlp"]));
    assert_eq!(j["steps"], 2);
    assert_eq!(j["backend"], "jit");
    assert!(j["nodes"].as_u64().unwrap() > 0, "{j}");
    let ms = &j["step_ms"];
    assert!(ms["min"].as_f64().unwrap() <= ms["median"].as_f64().unwrap(), "{j}");
    assert!(ms["median"].as_f64().unwrap() <= ms["max"].as_f64().unwrap(), "{j}");
    assert_eq!(j["random_inputs"]["seed"], 3);
    assert_eq!(j["random_inputs"]["inputs"].as_array().unwrap().len(), 5, "x, w1, b1, w2, b2: {j}");
    let out = &j["outputs"][0];
    assert_eq!((out["name"].as_str(), out["dtype"].as_str()), (Some("probs"), Some("f32")));
    assert_eq!(out["shape"], serde_json::json!([64, 10]));
    assert_eq!(out["elements"], 640);
    let first: Vec<f32> = out["first_values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    assert_eq!(first.len(), 8);

    let out_dir = dir.join("out");
    let ckpt = dir.join("none.safetensors");
    let j = json_ok(&["run", &file, "--json", "--seed", "3", "--out-dir", s(&out_dir)]);
    let written = &j["outputs"][0];
    let path = out_dir.join("probs.npy");
    assert_eq!(written["file"], s(&path));
    assert_eq!(written["shape"], serde_json::json!([64, 10]));
    let t = graphc_runtime::npy::read_npy(&path).unwrap();
    assert_eq!(t.shape(), &[64, 10]);
    let values = t.to_f64_vec();
    let npy_first: Vec<f32> = values[..8].iter().map(|&v| v as f32).collect();
    assert_eq!(first, npy_first, "the JSON's first values are the output's, exactly");
    assert!(!ckpt.exists());
}

#[test]
fn run_with_variables_reports_the_restore_and_the_checkpoint() {
    let dir = tmpdir("run-ckpt");
    let file = example("train_step.gir");
    let ckpt = dir.join("w.safetensors");
    let j = json_ok(&["run", &file, "--graph", "step", "--steps", "5", "--checkpoint", s(&ckpt), "--json"]);
    assert_eq!(j["checkpoint"]["path"], s(&ckpt));
    assert_eq!(j["checkpoint"]["step"], 5);
    let variables = j["checkpoint"]["variables"].as_u64().unwrap();
    assert!(variables >= 2, "{j}");
    assert_eq!(j["outputs"][0]["name"], "loss");
    assert_eq!(j["outputs"][0]["shape"], serde_json::json!([]));
    let j = json_ok(&["run", &file, "--graph", "predict", "--restore", s(&ckpt), "--json"]);
    assert_eq!(j["restored"]["path"], s(&ckpt));
    assert_eq!(j["restored"]["step"], 5);
    assert_eq!(j["restored"]["variables"], variables);
}

#[test]
fn simulate_gives_the_predicted_times_of_the_lines() {
    let (file, devices) = (example("two_branches.gir"), example("two_cpus.devices.toml"));
    let j = json_ok(&["simulate", &file, "--devices", &devices, "--json"]);
    assert_eq!(j["source"], "estimates");
    let g = &j["graphs"][0];
    assert_eq!(g["graph"], "two_branches");
    let names: Vec<&str> = g["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["cpu0", "cpu1"]);
    assert_eq!(g["transfers"], 2);
    // The lines print the same numbers, rounded.
    let o = graphc(&["simulate", &file, "--devices", &devices]);
    let (out, _) = text(&o);
    let step = g["step_time_ms"].as_f64().unwrap();
    assert!(out.contains(&format!("predicted step time {step:.3} ms on 2 devices")), "{out}\n{j}");
    for d in g["devices"].as_array().unwrap() {
        let (busy, util) = (d["busy_ms"].as_f64().unwrap(), d["utilization"].as_f64().unwrap());
        assert!((0.0..=1.0).contains(&util), "{d}");
        let line = format!("{:>10.3} {:>11.1}% {:>7}", busy, util * 100.0, d["nodes"].as_u64().unwrap());
        assert!(out.contains(&line), "{line:?} in\n{out}");
    }
    assert!(out.contains(&format!("transfers: 2 ({} bytes)", g["transfer_bytes"])), "{out}");
}

#[test]
fn train_sums_the_run_up_and_agrees_with_its_log() {
    let dir = tmpdir("train");
    let (log, ckpt) = (dir.join("loss.jsonl"), dir.join("w.ckpt"));
    let (file, data) = (example("mlp_train.gir"), example("data/spirals"));
    let j = json_ok(&[
        "train",
        &file,
        "--graph",
        "step",
        "--steps",
        "40",
        "--data",
        &data,
        "--log",
        s(&log),
        "--log-every",
        "10",
        "--checkpoint",
        s(&ckpt),
        "--json",
        "--backend",
        "jit",
    ]);
    assert_eq!((j["graph"].as_str(), j["backend"].as_str()), (Some("step"), Some("jit")));
    assert_eq!(j["steps"], serde_json::json!({"from": 0, "to": 40, "ran": 40}));
    let d = &j["data"];
    assert_eq!(
        (d["examples"].as_u64(), d["batch"].as_u64(), d["batches_per_epoch"].as_u64()),
        (Some(1024), Some(64), Some(16))
    );
    assert_eq!(d["seed"], 0);
    let lines: Vec<Value> =
        std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(j["log"], serde_json::json!({"path": s(&log), "lines": 4, "every": 10}));
    // The log's f32 loss, and the summary's the same number (as f64).
    assert_eq!(j["loss"]["last"]["step"], 40);
    let (logged, summed) =
        (lines[3]["loss"].as_f64().unwrap() as f32, j["loss"]["last"]["loss"].as_f64().unwrap() as f32);
    assert_eq!(logged, summed);
    assert!(j["loss"]["time_s"].as_f64().unwrap() > 0.0 && j["loss"]["steps_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(j["checkpoint"]["step"], 40);
    assert_eq!(j["checkpoint"]["variables"], 24);
    assert_eq!(j["plot"], s(&log.with_extension("svg")));
    assert_eq!(j["nonfinite_losses"], 0);

    // Restored: where it took up.
    let j = json_ok(&[
        "train",
        &file,
        "--graph",
        "step",
        "--steps",
        "50",
        "--data",
        &data,
        "--restore",
        s(&ckpt),
        "--json",
    ]);
    assert_eq!(j["restored"]["step"], 40);
    assert_eq!(j["taking_up"], serde_json::json!({"step": 41, "epoch": 2, "batch": 8, "from_checkpoint": true}));
    assert_eq!(j["steps"]["ran"], 10);
    assert_eq!(j["loss"]["first"]["step"], 41);
}
