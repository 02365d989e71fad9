//! The bundled training example, `ir-spec/examples/mlp_train.gir` on the two-spirals data set:
//! trained as the README shows, its loss falls below 0.05 and it classifies at least 99% of the
//! set right; the same run on one CPU and on the two-CPU spec ends with the same weights; a
//! run restored from a mid-training checkpoint ends with the same weights, bit for bit, as an
//! uninterrupted run. And `grad`'s errors and warnings as the CLI shows them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn path(rel: &str) -> String {
    root().join(rel).display().to_string()
}

fn graphc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_graphc")).args(args).output().expect("graphc runs")
}

fn ok(args: &[&str]) -> String {
    let o = graphc(args);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "graphc {args:?} failed:\n{out}\n{err}");
    format!("{out}{err}")
}

fn tmpdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-example-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Trains the example for `steps` with extra flags, the final variables written to `out`.
fn train(steps: u32, out: &Path, extra: &[&str]) -> String {
    let (file, data, steps, out) =
        (path("ir-spec/examples/mlp_train.gir"), path("ir-spec/examples/data/spirals"), steps.to_string(), s(out));
    let mut args = vec!["train", &file, "--graph", "step", "--steps", &steps, "--data", &data, "--out-dir", &out];
    args.extend_from_slice(extra);
    ok(&args)
}

/// Every `.npy` file of `dir`, by name, as bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "npy"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    assert!(
        out.len() >= 6,
        "the weights and biases are written: {out:?}",
        out = out.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    out
}

#[test]
fn the_example_learns_the_spirals() {
    let dir = tmpdir("learns");
    let log = dir.join("loss.jsonl");
    let ckpt = dir.join("spirals.ckpt");
    train(1500, &dir.join("w"), &["--log", &s(&log), "--checkpoint", &s(&ckpt)]);
    let last = std::fs::read_to_string(&log).unwrap().lines().last().unwrap().to_string();
    let loss: f64 = last.split("\"loss\": ").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
    assert!(loss < 0.05, "the loss after 1500 steps is {loss}");
    assert!(dir.join("loss.svg").exists(), "the loss curve is drawn");
    let out = ok(&[
        "run",
        &path("ir-spec/examples/mlp_train.gir"),
        "--graph",
        "accuracy",
        "--restore",
        &s(&ckpt),
        "--input",
        &format!("x={}", path("ir-spec/examples/data/spirals/x.npy")),
        "--input",
        &format!("label={}", path("ir-spec/examples/data/spirals/label.npy")),
    ]);
    let acc: f64 = out.split("accuracy: f32[] [").nth(1).unwrap().split(']').next().unwrap().parse().unwrap();
    assert!(acc >= 0.99, "accuracy {acc}:\n{out}");
}

#[test]
fn one_cpu_and_two_cpus_end_with_the_same_weights() {
    let dir = tmpdir("devices");
    train(200, &dir.join("one"), &[]);
    train(200, &dir.join("two"), &["--devices", &path("ir-spec/examples/two_cpus.devices.toml")]);
    assert_eq!(files(&dir.join("one")), files(&dir.join("two")), "the weights differ between one and two CPUs");
}

#[test]
fn a_restored_run_ends_where_an_uninterrupted_one_does() {
    let dir = tmpdir("restore");
    let ckpt = dir.join("mid.ckpt");
    train(200, &dir.join("whole"), &[]);
    train(90, &dir.join("first"), &["--checkpoint", &s(&ckpt)]);
    train(200, &dir.join("rest"), &["--restore", &s(&ckpt)]);
    assert_ne!(files(&dir.join("first")), files(&dir.join("whole")), "90 steps are not 200");
    assert_eq!(files(&dir.join("rest")), files(&dir.join("whole")), "restored at step 90, the run ends elsewhere");
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    s(&p)
}

#[test]
fn grad_through_an_assign_names_the_op_and_the_path() {
    let dir = tmpdir("errors");
    let file = write(
        &dir,
        "assign.gir",
        "graph @g(%x: f32[3]) -> (d: f32[3]) {
  %v = variable {name = \"v\", init = dense<0.0> : f32[3]} : var<f32[3]>
  %a = assign %v, %x : f32[3]
  %t = tanh %a : f32[3]
  %l = reduce_sum %t {axes = [0]} : f32[]
  %d = grad %l, %x : f32[3]
  return %d
}
",
    );
    for backend in ["interp", "jit"] {
        let o = graphc(&["run", &file, "--backend", backend]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            err.contains(
                "assign.gir:3:3: error: 'assign' is not differentiable, but the loss depends on %x through it"
            ),
            "{err}"
        );
        assert!(err.contains("%x -> 'assign %a'"), "the path is named: {err}");
        assert!(err.contains("in the gradient asked for here"), "{err}");
    }
    let o = graphc(&["opt", &file]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn a_value_the_loss_ignores_gets_zeros_and_a_warning() {
    let dir = tmpdir("zeros");
    let file = write(
        &dir,
        "unused.gir",
        "graph @g(%x: f32[3], %w: f32[2]) -> (dx: f32[3], dw: f32[2]) {
  %t = tanh %x : f32[3]
  %l = reduce_sum %t {axes = [0]} : f32[]
  %dx, %dw = grad %l, %x, %w : f32[3], f32[2]
  return %dx, %dw
}
",
    );
    let out = ok(&["run", &file, "--backend", "interp"]);
    assert!(out.contains("warning: the loss does not depend on %w; its gradient is zero"), "{out}");
    assert!(out.contains("dw: f32[2] [0, 0]") || out.contains("dw: f32[2] [0.0, 0.0]"), "{out}");
}

#[test]
fn opt_shows_the_expansion() {
    let out = ok(&["opt", &path("ir-spec/examples/mlp_train.gir"), "--passes", "autodiff"]);
    assert!(!out.contains(" grad "), "grad is expanded:\n{out}");
    assert!(out.contains("transpose_b = true") && out.contains("transpose_a = true"), "{out}");
    assert!(!out.contains(" transpose %"), "no transpose is materialized:\n{out}");
}
