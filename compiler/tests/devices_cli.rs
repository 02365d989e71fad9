//! `--devices`, `--profile`, `--trace`, `--write-profile` and `graphc simulate` from the
//! command line.

mod common;

use common::{example, graphc, text};
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-devices-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The output lines after the timing line: the values themselves.
fn values(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|l| l.starts_with("y:") || l.starts_with("probs:")).collect()
}

#[test]
fn run_on_two_cpus_gives_the_single_device_outputs() {
    for ex in ["two_branches.gir", "mlp.gir"] {
        let one = graphc(&["run", &example(ex)]);
        let two = graphc(&["run", &example(ex), "--devices", &example("two_cpus.devices.toml")]);
        let ((a, ea), (b, eb)) = (text(&one), text(&two));
        assert!(one.status.success() && two.status.success(), "{ea}{eb}");
        assert!(b.contains("placed @"), "{b}");
        assert!(!values(&a).is_empty());
        assert_eq!(values(&a), values(&b), "{ex}");
    }
    let two = graphc(&["run", &example("two_branches.gir"), "--devices", &example("two_cpus.devices.toml")]);
    assert!(text(&two).0.contains("placed @two_branches on 2 devices"), "{}", text(&two).0);
}

#[test]
fn trace_and_profile_feed_the_simulator() {
    let trace = tmp("run.json");
    let profile = tmp("profile.json");
    let devices = example("two_cpus.devices.toml");
    let o = graphc(&[
        "run",
        &example("two_branches.gir"),
        "--backend",
        "interp",
        "--devices",
        &devices,
        "--steps",
        "3",
        "--trace",
        trace.to_str().unwrap(),
        "--write-profile",
        profile.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    let t: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().unwrap();
    let tracks: Vec<&str> =
        events.iter().filter(|e| e["name"] == "thread_name").map(|e| e["args"]["name"].as_str().unwrap()).collect();
    assert_eq!(tracks, ["cpu0", "cpu1", "transfers"]);
    let matmuls = events.iter().filter(|e| e["ph"] == "X" && e["name"].as_str().unwrap().starts_with("matmul")).count();
    assert_eq!(matmuls, 18, "6 matmuls a step, 3 steps");
    assert!(events.iter().any(|e| e["ph"] == "b" && e["cat"] == "transfer"));

    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    assert_eq!(p["format"], "graphc-profile");
    assert!(p["ops"].as_object().unwrap().keys().any(|k| k.starts_with("matmul (f32[128,512], f32[512,512])")), "{p}");

    let sim_trace = tmp("sim.json");
    let o = graphc(&[
        "simulate",
        &example("two_branches.gir"),
        "--devices",
        &devices,
        "--profile",
        profile.to_str().unwrap(),
        "--trace",
        sim_trace.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("@two_branches: predicted step time") && out.contains("from profile and estimates"), "{out}");
    assert!(out.contains("cpu0") && out.contains("cpu1") && out.contains("transfers: 2"), "{out}");
    let t: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&sim_trace).unwrap()).unwrap();
    assert!(t["traceEvents"].as_array().unwrap().iter().any(|e| e["ph"] == "X" && e["tid"] == 2));
}

#[test]
fn a_profiles_gpu_times_move_placement() {
    // A big matmul goes to the GPU of cpu_gpu (40x on contractions)...
    let gir = tmp("big_matmul.gir");
    std::fs::write(
        &gir,
        "graph @g(%x: f32[256,256], %w: f32[256,256]) -> (y: f32[256,256]) {\n  %y = matmul %x, %w : f32[256,256]\n  return %y\n}\n",
    )
    .unwrap();
    let devices = example("cpu_gpu.devices.toml");
    let placed = |profile: Option<&PathBuf>| {
        let out = tmp("placed.gir");
        let mut args = vec!["opt", gir.to_str().unwrap(), "--passes", "place", "--devices", &devices, "-o"];
        args.push(out.to_str().unwrap());
        if let Some(p) = profile {
            args.extend(["--profile", p.to_str().unwrap()]);
        }
        let o = graphc(&args);
        assert!(o.status.success(), "{}", text(&o).1);
        let ir = std::fs::read_to_string(&out).unwrap();
        ir.lines().find(|l| l.contains("= matmul")).unwrap().to_string()
    };
    assert!(placed(None).contains("device:gpu:0"), "{}", placed(None));
    // ... unless a profile measured it there as slower than the CPU: a GPU's own times are
    // taken as they are, not its reference time over its speed.
    let measured = tmp("cpu_profile.json");
    let o =
        graphc(&["run", gir.to_str().unwrap(), "--backend", "interp", "--write-profile", measured.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o).1);
    let mut p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&measured).unwrap()).unwrap();
    let ops = p["ops"].clone();
    let sig = ops.as_object().unwrap().keys().find(|k| k.starts_with("matmul")).unwrap().clone();
    // Twice the CPU's time: slower as it is, far faster divided by the GPU's speed (40).
    let cpu_us = ops[&sig]["mean_us"].as_f64().unwrap();
    p["devices"] = serde_json::json!({ "gpu": { sig.clone(): { "mean_us": 2.0 * cpu_us, "count": 3 } } });
    let slow_gpu = tmp("slow_gpu_profile.json");
    std::fs::write(&slow_gpu, p.to_string()).unwrap();
    assert!(placed(Some(&slow_gpu)).contains("device:cpu:0"), "{}", placed(Some(&slow_gpu)));
    // The CPU's measurement alone leaves the GPU's speed to scale it.
    assert!(placed(Some(&measured)).contains("device:gpu:0"), "{}", placed(Some(&measured)));
}

#[test]
fn opt_places_and_partitions_into_ir_that_checks() {
    let out = tmp("parted.gir");
    let o = graphc(&[
        "opt",
        &example("two_branches.gir"),
        "--passes",
        "place,partition",
        "--devices",
        &example("two_cpus.devices.toml"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    let ir = std::fs::read_to_string(&out).unwrap();
    assert!(ir.contains("graph @\"two_branches@cpu0\"") && ir.contains("graph @\"two_branches@cpu1\""), "{ir}");
    assert!(graphc(&["check", out.to_str().unwrap()]).status.success());
    assert!(graphc(&["fmt", "--check", out.to_str().unwrap()]).status.success());
    // The partitions run together by default, and simulate treats them as one step.
    let run = graphc(&["run", out.to_str().unwrap()]);
    assert!(run.status.success(), "{}", text(&run).1);
    let sim = graphc(&["simulate", out.to_str().unwrap(), "--devices", &example("two_cpus.devices.toml")]);
    assert!(text(&sim).0.contains("predicted step time"), "{}{}", text(&sim).0, text(&sim).1);
    let dot = graphc(&["dot", &example("two_branches.gir"), "--devices", &example("two_cpus.devices.toml")]);
    let d = text(&dot).0;
    assert!(d.contains("cluster_legend") && d.contains("fillcolor=palegreen") && d.contains("shape=rarrow"), "{d}");
}

#[test]
fn bad_device_specs_and_placements_are_clear_errors() {
    let bad = tmp("bad.devices.toml");
    std::fs::write(&bad, "[[device]]\nspec = \"/cpu:0\"\nspeed = { warp = 2.0 }\n").unwrap();
    let profile = |devices: &str| {
        let path = tmp(&format!("bad_profile_{}.json", devices.len()));
        let text = format!(r#"{{"format": "graphc-profile", "version": 1, "ops": {{}}, "devices": {{{devices}}}}}"#);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--devices".into(), "/nonexistent/x.toml".into()], "cannot read device spec /nonexistent/x.toml"),
        (vec!["--devices".into(), bad.display().to_string()], "unknown op class 'warp'"),
        (
            vec!["--devices".into(), example("two_cpus.devices.toml"), "--profile".into(), bad.display().to_string()],
            "is not a graphc profile",
        ),
        (
            vec!["--devices".into(), example("two_cpus.devices.toml"), "--profile".into(), profile(r#""tpu": {}"#)],
            "devices.tpu: expected a device kind other than the reference CPU's (gpu)",
        ),
        (
            vec![
                "--devices".into(),
                example("two_cpus.devices.toml"),
                "--profile".into(),
                profile(r#""gpu": {"add": {"mean_us": -1.0, "count": 2}}"#),
            ],
            "devices.gpu: 'add' has mean_us -1 over 2 runs; expected a finite time",
        ),
    ];
    for (flags, want) in cases {
        let mut args = vec!["run".to_string(), example("mlp.gir")];
        args.extend(flags);
        let o = graphc(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(want), "want '{want}' in: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // A pin no device matches points at the node.
    let o = graphc(&["simulate", &example("devices.gir"), "--devices", &example("two_cpus.devices.toml")]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("devices.gir:4:3: error: 'variable %w' is pinned to"), "{err}");
    assert!(err.contains("help: the devices are cpu0"), "{err}");
}

#[test]
fn a_device_failure_fails_the_run_with_the_original_error() {
    let g = tmp("fail.gir");
    std::fs::write(
        &g,
        "graph @g(%x: f32[4]) -> (y: f32[2]) {\n  %a = tanh %x device \"/cpu:0\" : f32[4]\n  %i = constant {value = dense<[0, 7]> : i32[2]} device \"/cpu:1\" : i32[2]\n  %y = gather %a, %i device \"/cpu:1\" : f32[2]\n  return %y\n}\n",
    )
    .unwrap();
    let o = graphc(&["run", g.to_str().unwrap(), "--devices", &example("two_cpus.devices.toml")]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("fail.gir:4:3: error:") && err.contains("gather"), "{err}");
}

#[test]
fn bench_reports_compile_and_step_times() {
    let o = graphc(&["bench", &example("mlp.gir"), "--iters", "5", "--warmup", "1", "--json"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    for key in ["compile_ms", "median_ms", "min_ms", "max_ms"] {
        assert!(j[key].as_f64().is_some_and(|v| v >= 0.0), "{key}: {j}");
    }
    assert!(j["min_ms"].as_f64() <= j["median_ms"].as_f64() && j["median_ms"].as_f64() <= j["max_ms"].as_f64());
    assert_eq!(j["iters"], 5);
    assert!(j["peak_rss_bytes"].as_u64().is_some_and(|b| b > 1 << 20), "{j}");
    let o = graphc(&["bench", &example("mlp.gir"), "--iters", "2"]);
    let (out, _) = text(&o);
    assert!(out.contains("step median") && out.contains("peak RSS"), "{out}");
    let o = graphc(&["bench", &example("mlp.gir"), "--iters", "0"]);
    assert_eq!(o.status.code(), Some(1), "clap rejects --iters 0");
}
