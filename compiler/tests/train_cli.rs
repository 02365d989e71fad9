//! `graphc train`: the loss of the hand-written linear regression falls on generated data; the
//! log is JSON lines; a run restored from a mid-training checkpoint ends with the same weights,
//! bit for bit, as the uninterrupted run; bad data is a one-line error; without a terminal,
//! progress is plain lines.

use graphc_ir::TensorData;
use graphc_runtime::{npy, Tensor};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn graphc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_graphc")).args(args).output().expect("graphc runs")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn train_step() -> String {
    root().join("ir-spec/examples/train_step.gir").display().to_string()
}

fn tmpdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-train-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Runs `graphc train` and returns its standard output; fails the test if it fails.
fn ok(args: &[&str]) -> String {
    let mut all = vec!["train"];
    all.extend_from_slice(args);
    let o = graphc(&all);
    let (out, err) = text(&o);
    assert!(o.status.success(), "graphc {all:?} failed:\n{out}\n{err}");
    out
}

/// Runs `graphc train`, which must fail with one line on standard error (no panic); returns it.
fn one_line_error(args: &[&str]) -> String {
    let mut all = vec!["train"];
    all.extend_from_slice(args);
    let o = graphc(&all);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "graphc {all:?} should fail:\n{out}\n{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("note: ")).collect();
    assert_eq!(lines.len(), 1, "graphc {all:?}: one line of error expected, got:\n{err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    lines[0].to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A small deterministic generator, so the data are the same on every run.
struct Lcg(u64);

impl Lcg {
    /// Roughly uniform in [-1, 1).
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn write(dir: &Path, name: &str, shape: &[usize], data: TensorData) {
    npy::write_npy(&dir.join(name), &Tensor::from_data(shape, data).unwrap()).unwrap();
}

/// `n` examples of t = x w + b + noise, with x of 4 features: `dir/x.npy` f32[n,4] and
/// `dir/t.npy` f32[n,1].
fn regression_data(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let mut rng = Lcg(7);
    let w = [1.5f32, -2.0, 0.5, 3.0];
    let x: Vec<f32> = (0..n * 4).map(|_| rng.next() * 2.0).collect();
    let t: Vec<f32> =
        (0..n).map(|i| (0..4).map(|j| x[i * 4 + j] * w[j]).sum::<f32>() + 0.25 + 0.01 * rng.next()).collect();
    write(dir, "x.npy", &[n, 4], TensorData::F32(x));
    write(dir, "t.npy", &[n, 1], TensorData::F32(t));
}

/// The lines of a `--log` file, each parsed: (step, loss or None for null, time_s).
fn read_log(path: &Path) -> Vec<(u64, Option<f64>, f64)> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"));
            let o = v.as_object().unwrap_or_else(|| panic!("not an object: {line}"));
            assert_eq!(o.len(), 3, "{line}");
            let loss = match &o["loss"] {
                serde_json::Value::Null => None,
                l => Some(l.as_f64().unwrap_or_else(|| panic!("loss is no number: {line}"))),
            };
            (o["step"].as_u64().unwrap(), loss, o["time_s"].as_f64().unwrap())
        })
        .collect()
}

#[test]
fn the_loss_falls_and_the_log_is_json_lines_with_a_plot_beside_it() {
    let dir = tmpdir("falls");
    regression_data(&dir.join("data"), 64);
    let log = dir.join("loss.jsonl");
    let out =
        ok(&[&train_step(), "--graph", "step", "--steps", "60", "--data", s(&dir.join("data")), "--log", s(&log)]);
    let lines = read_log(&log);
    assert_eq!(lines.len(), 60);
    for (i, (step, loss, _)) in lines.iter().enumerate() {
        assert_eq!(*step, i as u64 + 1);
        assert!(loss.is_some_and(f64::is_finite), "{lines:?}");
    }
    assert!(lines.windows(2).all(|w| w[0].2 <= w[1].2), "time_s never goes back");
    let (first, last) = (lines[0].1.unwrap(), lines[59].1.unwrap());
    assert!(last < first / 100.0, "the loss falls: {first} -> {last}");
    // The curve, beside the log by default.
    let svg = std::fs::read_to_string(dir.join("loss.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("loss"), "{}", &svg[..200.min(svg.len())]);
    // The summary: steps, the final loss, the speed.
    let summary = out.lines().last().unwrap();
    assert!(summary.starts_with("trained @step for 60 steps in "), "{out}");
    assert!(summary.contains("steps/s"), "{out}");
    assert!(out.contains("64 examples") && out.contains("batches of 8"), "{out}");
}

#[test]
fn without_a_terminal_progress_is_a_line_every_twentieth_of_the_steps() {
    let dir = tmpdir("lines");
    regression_data(&dir.join("data"), 32);
    let out = ok(&[&train_step(), "-g", "step", "--steps", "40", "--data", s(&dir.join("data"))]);
    let steps: Vec<&str> = out.lines().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(steps.len(), 20, "{out}");
    for (i, line) in steps.iter().enumerate() {
        // step 2/40 loss 1.2345 (812 steps/s)
        let rest = line.strip_prefix(&format!("step {}/40 loss ", (i + 1) * 2)).unwrap_or_else(|| panic!("{line}"));
        let (loss, rate) = rest.split_once(" (").unwrap();
        assert!(loss.parse::<f64>().is_ok(), "{line}");
        assert!(rate.ends_with(" steps/s)"), "{line}");
    }
    // Fewer than 20 steps: every one.
    let out = ok(&[&train_step(), "-g", "step", "--steps", "3", "--data", s(&dir.join("data"))]);
    assert_eq!(out.lines().filter(|l| l.starts_with("step ")).count(), 3, "{out}");
}

#[test]
fn a_restored_run_ends_with_the_weights_of_the_uninterrupted_one_bit_for_bit() {
    let dir = tmpdir("restore");
    let data = dir.join("data");
    // 60 examples in batches of 8: 7 batches an epoch, 4 examples dropped; 30 steps cross
    // four epochs, each shuffled anew.
    regression_data(&data, 60);
    let common =
        [train_step(), "-g".into(), "step".into(), "--data".into(), s(&data).into(), "--seed".into(), "5".into()];
    let run = |extra: &[&str]| {
        let mut args: Vec<&str> = common.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        ok(&args)
    };
    let (whole, first, second) = (dir.join("whole"), dir.join("first"), dir.join("second"));
    run(&["--steps", "30", "--out-dir", s(&whole), "--log", s(&dir.join("whole.jsonl"))]);
    // Interrupted after step 13 (mid-epoch: the second epoch's sixth batch), with periodic
    // saves before that.
    let ck = dir.join("ck.safetensors");
    let taken_log = dir.join("taken.jsonl");
    run(&[
        "--steps",
        "13",
        "--checkpoint",
        s(&ck),
        "--checkpoint-every",
        "4",
        "--out-dir",
        s(&first),
        "--log",
        s(&taken_log),
    ]);
    // The checkpoint knows the step, the seed and the data position.
    let header = std::fs::read(&ck).unwrap();
    let len = u64::from_le_bytes(header[..8].try_into().unwrap()) as usize;
    let meta: serde_json::Value = serde_json::from_slice(&header[8..8 + len]).unwrap();
    let meta = &meta["__metadata__"];
    assert_eq!(meta["graphc.step"], "13");
    assert_eq!(meta["graphc.train.seed"], "5");
    assert_eq!((&meta["graphc.train.epoch"], &meta["graphc.train.batch"]), (&"1".into(), &"6".into()));

    // Taken up without --seed: the checkpoint's is used.
    let mut args: Vec<&str> = vec![&common[0], "-g", "step", "--data", s(&data)];
    args.extend_from_slice(&["--steps", "30", "--restore", s(&ck), "--out-dir", s(&second)]);
    // The run taken up goes on with the interrupted run's log.
    args.extend_from_slice(&["--log", s(&taken_log)]);
    let out = ok(&args);
    assert!(out.contains("restored 2 variables") && out.contains("taking up at step 14: epoch 1, batch 6"), "{out}");
    for name in ["w.npy", "b.npy"] {
        let (a, b) = (std::fs::read(whole.join(name)).unwrap(), std::fs::read(second.join(name)).unwrap());
        assert_eq!(a, b, "{name}: the restored run's final weights differ from the uninterrupted run's");
    }
    // The same batches: the same losses, step for step, in one log from step 1 to 30.
    let (whole_log, taken_log) = (read_log(&dir.join("whole.jsonl")), read_log(&taken_log));
    assert_eq!(taken_log.len(), 30);
    for (a, b) in whole_log.iter().zip(&taken_log) {
        assert_eq!((a.0, a.1.map(f64::to_bits)), (b.0, b.1.map(f64::to_bits)));
    }
    // The comparison means something: after 13 steps the weights were elsewhere, and another
    // seed (other batches) ends elsewhere too.
    assert_ne!(std::fs::read(first.join("w.npy")).unwrap(), std::fs::read(whole.join("w.npy")).unwrap());
    let other = dir.join("other");
    ok(&[&common[0], "-g", "step", "--data", s(&data), "--seed", "6", "--steps", "30", "--out-dir", s(&other)]);
    assert_ne!(std::fs::read(other.join("w.npy")).unwrap(), std::fs::read(whole.join("w.npy")).unwrap());

    // The checkpoint's seed or data cannot be changed under it.
    let e = one_line_error(&[
        &common[0],
        "-g",
        "step",
        "--data",
        s(&data),
        "--steps",
        "30",
        "--restore",
        s(&ck),
        "--seed",
        "1",
    ]);
    assert!(e.contains("--seed 1") && e.contains("seed 5"), "{e}");
    let fewer = dir.join("fewer");
    regression_data(&fewer, 40);
    let e = one_line_error(&[&common[0], "-g", "step", "--data", s(&fewer), "--steps", "30", "--restore", s(&ck)]);
    assert!(e.contains("60 examples") && e.contains("40"), "{e}");
    let e = one_line_error(&[&common[0], "-g", "step", "--data", s(&data), "--steps", "10", "--restore", s(&ck)]);
    assert!(e.contains("step 13") && e.contains("--steps 10"), "{e}");
}

#[test]
fn the_pipeline_runs_across_partitions_with_the_same_result() {
    let dir = tmpdir("devices");
    let data = dir.join("data");
    regression_data(&data, 32);
    // The forward and backward products on a second CPU: the step's dequeue and the producer
    // stay with the queue, the batch crosses by send/recv.
    let text = std::fs::read_to_string(train_step()).unwrap();
    let placed = text
        .replace("%xw = matmul %x, %wv : f32[8,1]", "%xw = matmul %x, %wv device \"/device:cpu:1\" : f32[8,1]")
        .replace("%dw = matmul %xt, %gy : f32[4,1]", "%dw = matmul %xt, %gy device \"/device:cpu:1\" : f32[4,1]");
    assert_ne!(placed, text);
    let gir = dir.join("placed.gir");
    std::fs::write(&gir, placed).unwrap();
    let devices = root().join("ir-spec/examples/two_cpus.devices.toml");
    let (one, two) = (dir.join("one"), dir.join("two"));
    ok(&[&train_step(), "-g", "step", "--steps", "20", "--data", s(&data), "--out-dir", s(&one)]);
    let out = ok(&[
        s(&gir),
        "-g",
        "step",
        "--steps",
        "20",
        "--data",
        s(&data),
        "--out-dir",
        s(&two),
        "--devices",
        s(&devices),
    ]);
    assert!(out.contains("placed @step on 2 devices"), "{out}");
    assert_eq!(std::fs::read(one.join("w.npy")).unwrap(), std::fs::read(two.join("w.npy")).unwrap());
}

#[test]
fn bad_data_and_flags_are_one_line_errors() {
    let dir = tmpdir("errors");
    let good = dir.join("good");
    regression_data(&good, 16);
    let gir = train_step();
    let base = |data: &Path| {
        vec![
            gir.clone(),
            "-g".into(),
            "step".into(),
            "--steps".into(),
            "5".into(),
            "--data".into(),
            s(data).to_string(),
        ]
    };
    let fail = |args: Vec<String>| one_line_error(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let with = |data: &Path, extra: &[&str]| {
        let mut a = base(data);
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };

    // The batch size is the inputs' leading dim.
    let e = fail(with(&good, &["--batch", "16"]));
    assert!(e.contains("--batch 16") && e.contains("'x'") && e.contains("8"), "{e}");
    // A wrong per-example shape, a wrong dtype: the file is named.
    let shape = dir.join("shape");
    regression_data(&shape, 16);
    write(&shape, "t.npy", &[16, 2], TensorData::F32(vec![0.0; 32]));
    let e = fail(base(&shape));
    assert!(e.contains("t.npy") && e.contains("f32[16,2]") && e.contains("f32[N,1]"), "{e}");
    let dtype = dir.join("dtype");
    regression_data(&dtype, 16);
    write(&dtype, "x.npy", &[16, 4], TensorData::F64(vec![0.0; 64]));
    let e = fail(base(&dtype));
    assert!(e.contains("x.npy") && e.contains("f64[16,4]"), "{e}");
    // Arrays of different lengths.
    let uneven = dir.join("uneven");
    regression_data(&uneven, 16);
    write(&uneven, "t.npy", &[12, 1], TensorData::F32(vec![0.0; 12]));
    let e = fail(base(&uneven));
    assert!(e.contains("t.npy") && e.contains("12") && e.contains("16"), "{e}");
    // A missing array, an empty data set, fewer examples than a batch.
    let missing = dir.join("missing");
    regression_data(&missing, 16);
    std::fs::remove_file(missing.join("t.npy")).unwrap();
    let e = fail(base(&missing));
    assert!(e.contains("'t'") && e.contains("f32[8,1]"), "{e}");
    let empty = dir.join("empty");
    regression_data(&empty, 0);
    let e = fail(base(&empty));
    assert!(e.contains("no examples"), "{e}");
    let small = dir.join("small");
    regression_data(&small, 5);
    let e = fail(base(&small));
    assert!(e.contains("larger than the data set") && e.contains("5 examples"), "{e}");
    // Not a directory, not an .npy file.
    let e = fail(base(&dir.join("nowhere")));
    assert!(e.contains("nowhere"), "{e}");
    let broken = dir.join("broken");
    regression_data(&broken, 16);
    std::fs::write(broken.join("x.npy"), b"not numpy").unwrap();
    let e = fail(base(&broken));
    assert!(e.contains("x.npy"), "{e}");
    // No steps; no loss to log; a checkpoint that is not one.
    let mut a = base(&good);
    a[4] = "0".into();
    assert!(fail(a).contains("--steps 0"));
    let mut a = base(&good);
    a[2] = "predict".into();
    let e = fail(a);
    assert!(e.contains("no output named 'loss'") && e.contains("y"), "{e}");
    std::fs::write(dir.join("bogus.safetensors"), b"bogus").unwrap();
    let e = fail(with(&good, &["--restore", s(&dir.join("bogus.safetensors"))]));
    assert!(e.contains("bogus.safetensors"), "{e}");
}

#[test]
fn a_nan_loss_is_null_in_the_log_with_a_warning() {
    let dir = tmpdir("nan");
    let data = dir.join("data");
    regression_data(&data, 16);
    write(&data, "t.npy", &[16, 1], TensorData::F32(vec![f32::NAN; 16]));
    let log = dir.join("nan.jsonl");
    let o = graphc(&["train", &train_step(), "-g", "step", "--steps", "4", "--data", s(&data), "--log", s(&log)]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(err.contains("warning: step 1: the loss is NaN"), "{err}");
    let lines = read_log(&log);
    assert_eq!(lines.len(), 4);
    assert!(lines.iter().all(|l| l.1.is_none()), "{lines:?}");
}

#[test]
fn without_data_the_inputs_are_seeded_random_and_variables_are_written() {
    let dir = tmpdir("random");
    let out = ok(&[&train_step(), "-g", "step", "--steps", "5", "--seed", "3", "--out-dir", s(&dir.join("vars"))]);
    assert!(out.contains("random inputs (seed 3, the same every step): x f32[8,4], t f32[8,1]"), "{out}");
    let w = npy::read_npy(&dir.join("vars/w.npy")).unwrap();
    assert_eq!(w.ty().to_string(), "f32[4,1]");
    assert!(w.to_f64_vec().iter().any(|&v| v != 0.0), "trained away from the initial zeros");
}

fn as_str(a: &[String]) -> Vec<&str> {
    a.iter().map(String::as_str).collect()
}

/// Rewrites the checkpoint at `path` with its metadata changed by `edit`.
fn edit_metadata(path: &Path, edit: impl FnOnce(&mut std::collections::HashMap<String, String>)) {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let mut meta = header.metadata().clone().unwrap_or_default();
    edit(&mut meta);
    let edited = safetensors::serialize(st.tensors(), Some(meta)).unwrap();
    std::fs::write(path, edited).unwrap();
}

#[test]
fn a_malformed_checkpoint_field_is_refused_not_taken_as_step_0() {
    let dir = tmpdir("malformed");
    let data = dir.join("data");
    // 16 examples in batches of 8: 2 batches an epoch.
    regression_data(&data, 16);
    let ck = dir.join("ck.safetensors");
    let common = [train_step(), "-g".into(), "step".into(), "--data".into(), s(&data).into()];
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = common.to_vec();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    ok(&as_str(&args(&["--steps", "3", "--checkpoint", s(&ck)])));
    let good = std::fs::read(&ck).unwrap();
    let restore = args(&["--steps", "6", "--restore", s(&ck)]);
    let invalid = format!("error: --restore: {} is not a valid checkpoint: ", ck.display());
    for (key, value, expected) in [
        ("graphc.step", "-1", "expected the steps done, a whole number from 0 to 18446744073709551615"),
        ("graphc.step", "ten", "expected the steps done"),
        ("graphc.step", "1e23", "expected the steps done"),
        ("graphc.train.seed", "five", "expected the shuffling seed"),
        ("graphc.train.epoch", "-1", "expected the epoch of the next batch"),
        ("graphc.train.batch", "2", "expected a batch of an epoch, below the 2 of 16 examples in batches of 8"),
        ("graphc.train.batch_size", "0", "expected the examples in a batch, at least 1"),
        (
            "graphc.train.examples",
            "4",
            "expected the examples in the data, at least a batch (graphc.train.batch_size is 8)",
        ),
    ] {
        std::fs::write(&ck, &good).unwrap();
        edit_metadata(&ck, |m| {
            m.insert(key.into(), value.into());
        });
        let e = one_line_error(&as_str(&restore));
        let want = format!("{invalid}its metadata {key} is {value:?}; {expected}");
        assert!(e.starts_with(&want), "{key} = {value:?}:\n{e}\nwanted:\n{want}");
    }
    // A data position missing a field, or its seed.
    for (key, why) in [
        ("graphc.train.examples", "its data position is incomplete: it lacks graphc.train.examples"),
        ("graphc.train.seed", "it has a data position but no graphc.train.seed"),
    ] {
        std::fs::write(&ck, &good).unwrap();
        edit_metadata(&ck, |m| {
            m.remove(key);
        });
        let e = one_line_error(&as_str(&restore));
        assert!(e.starts_with(&format!("{invalid}{why}")), "{e}");
    }
    // The checkpoint as written takes up at step 4.
    std::fs::write(&ck, &good).unwrap();
    let out = ok(&as_str(&restore));
    assert!(out.contains("taking up at step 4"), "{out}");
}

#[test]
fn another_models_checkpoint_is_refused_for_its_variables_before_anything_else() {
    let dir = tmpdir("stranger");
    let spirals = root().join("ir-spec/examples/data/spirals");
    let other = dir.join("spirals.ckpt");
    // The spirals MLP's checkpoint: other variables, and a data position of 1024 examples.
    let mlp = root().join("ir-spec/examples/mlp_train.gir");
    ok(&[s(&mlp), "-g", "step", "--steps", "2", "--data", s(&spirals), "--checkpoint", s(&other)]);
    let data = dir.join("data");
    regression_data(&data, 16);
    let restore = |ck: &Path, extra: &[&str]| {
        let mut a = vec![train_step(), "-g".into(), "step".into(), "--data".into(), s(&data).into()];
        a.extend(["--steps", "5", "--restore", s(ck)].map(String::from));
        a.extend(extra.iter().map(|s| s.to_string()));
        one_line_error(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    // Not its data position, its seed or its step: its variables.
    let e = restore(&other, &["--seed", "9"]);
    let want = format!(
        "error: --restore {}: the checkpoint does not match the module's variables (it has none of them: another model's checkpoint?): ",
        other.display()
    );
    assert!(e.starts_with(&want), "{e}");
    assert!(e.contains("\"b\" (f32[1]) is missing from the checkpoint; \"w\" (f32[4,1]) is missing"), "{e}");
    assert!(e.contains("\"adam/m/b1\" is in the checkpoint but is no variable of the module"), "{e}");
    assert!(e.ends_with("and 14 more differences (in all: 2 missing, 24 extra)"), "{e}");
    assert!(!e.contains("examples") && !e.contains("seed"), "{e}");
    // Some variables shared: each difference named.
    let gir = dir.join("near.gir");
    std::fs::write(
        &gir,
        "graph @g() -> (y: f32[4,2]) {
  %w = variable {name = \"w\", init = dense<0.0> : f32[4,2]} : var<f32[4,2]>
  %b = variable {name = \"b\", init = dense<[0.0]> : f32[1]} : var<f32[1]>
  %n = variable {name = \"steps\", init = dense<0> : i64[]} : var<i64[]>
  %y = read %w : f32[4,2]
  return %y
}
",
    )
    .unwrap();
    let near = dir.join("near.ckpt");
    let o = graphc(&["run", s(&gir), "--checkpoint", s(&near)]);
    assert!(o.status.success(), "{:?}", text(&o));
    let e = restore(&near, &[]);
    assert_eq!(
        e,
        format!(
            "error: --restore {}: the checkpoint does not match the module's variables: \"w\": the module has f32[4,1], the checkpoint f32[4,2]; \"steps\" is in the checkpoint but is no variable of the module",
            near.display()
        )
    );
}

#[test]
fn outputs_never_replace_the_model_the_data_or_each_other() {
    let dir = tmpdir("clobber");
    let data = dir.join("data");
    regression_data(&data, 16);
    let model = dir.join("m.gir");
    std::fs::copy(train_step(), &model).unwrap();
    let (m, d) = (s(&model), s(&data));
    let base = [m, "--graph", "step", "--steps", "2", "--data", d];
    let fails = |extra: &[&str], what: &str| {
        let e = one_line_error(&[&base[..], extra].concat());
        assert!(e.contains(what), "{extra:?}: expected '{what}' in: {e}");
    };
    let (log, plot) = (dir.join("log.jsonl"), dir.join("curve.svg"));
    fails(&["--log", m], "is the model");
    fails(&["--log", s(&log), "--plot", m], "--plot");
    fails(&["--log", s(&data.join("x.npy"))], "is a --data file");
    fails(&["--checkpoint", s(&data.join("t.npy"))], "is a --data file");
    fails(&["--log", s(&log), "--plot", s(&log)], "are the same file");
    fails(&["--log", s(&log), "--checkpoint", s(&log)], "are the same file");
    // The loss curve beside the log by default: log.svg, the checkpoint's name here.
    fails(&["--log", s(&log), "--checkpoint", s(&dir.join("log.svg"))], "are the same file");
    fails(&["--log", "-"], "--log -: give a file");
    fails(&["--log", "/dev/full"], "is a character device");
    fails(&["--checkpoint", "/dev/null"], "is a character device");
    fails(&["--log", s(&dir.join("missing/log.jsonl"))], "there is no directory");
    let e = one_line_error(&[m, "--graph", "step", "--steps", "2", "--data", m]);
    assert!(e.contains("it is a regular file; expected a directory of .npy files"), "{e}");
    fails(&["--out-dir", s(&dir), "--log", s(&dir.join("w.npy"))], "are the same file");
    // Nothing was written, and the model and the data are whole.
    assert_eq!(std::fs::read(&model).unwrap(), std::fs::read(train_step()).unwrap());
    assert!(!log.exists() && !plot.exists());
    assert!(npy::read_npy(&data.join("x.npy")).is_ok() && npy::read_npy(&data.join("t.npy")).is_ok());
    // A run goes on from its checkpoint and saves over it; the log may not replace it.
    let ckpt = dir.join("c.safetensors");
    ok(&[&base[..], &["--checkpoint", s(&ckpt)]].concat());
    ok(&[m, "--graph", "step", "--steps", "4", "--data", d, "--restore", s(&ckpt), "--checkpoint", s(&ckpt)]);
    let e =
        one_line_error(&[m, "--graph", "step", "--steps", "6", "--data", d, "--restore", s(&ckpt), "--log", s(&ckpt)]);
    assert!(e.contains("is the --restore checkpoint"), "{e}");
}

#[test]
fn the_data_set_counts_against_the_memory_limit_before_it_is_read() {
    let dir = tmpdir("data-limit");
    let data = dir.join("data");
    // x.npy f32[64,4] is 1 KiB, t.npy f32[64,1] 256 bytes.
    regression_data(&data, 64);
    let e = one_line_error(&[
        &train_step(),
        "--graph",
        "step",
        "--steps",
        "2",
        "--data",
        s(&data),
        "--memory-limit",
        "1KiB",
    ]);
    assert!(
        e.contains(
            "the data set takes 1.2 KiB (x.npy 1.0 KiB, t.npy 256 bytes), more than the memory limit of 1.0 KiB"
        ),
        "{e}"
    );
    ok(&[&train_step(), "--graph", "step", "--steps", "2", "--data", s(&data), "--memory-limit", "64KiB"]);
}

#[test]
fn log_every_thins_the_log_and_keeps_the_last_step() {
    let dir = tmpdir("log-every");
    regression_data(&dir.join("data"), 64);
    let log = dir.join("loss.jsonl");
    let (model, data) = (train_step(), dir.join("data"));
    let args = [&model, "--graph", "step", "--steps", "25", "--data", s(&data), "--log", s(&log)];
    let out = ok(&[&args[..], &["--log-every", "10"]].concat());
    let steps: Vec<u64> = read_log(&log).iter().map(|l| l.0).collect();
    assert_eq!(steps, [10, 20, 25]);
    assert!(out.contains("log of 3 steps (every 10 steps) ->"), "{out}");
    // The curve still has every step.
    assert!(dir.join("loss.svg").exists());
    let o = graphc(&[&["train"][..], &args, &["--log-every", "0"]].concat());
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("invalid value '0' for '--log-every <K>'"), "{}", text(&o).1);
}
