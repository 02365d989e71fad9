//! `graphc run`: every example runs; inputs from .npy files are checked; outputs are written;
//! steps, checkpoints and restores work; run-time errors are located.

mod common;

use common::{fails, ok};
use graphc_ir::TensorData;
use graphc_runtime::{npy, RunRequest, Session, SessionOptions, Tensor};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn graphc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_graphc")).args(args).output().expect("graphc runs")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn example(name: &str) -> String {
    root().join("ir-spec/examples").join(name).display().to_string()
}

fn tmpdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-run-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn ramp(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_data(shape, TensorData::F32((0..n).map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0).collect())).unwrap()
}

fn save(dir: &Path, name: &str, t: &Tensor) -> String {
    let p = dir.join(name);
    npy::write_npy(&p, t).unwrap();
    p.display().to_string()
}

#[test]
fn every_example_runs_with_the_interpreter() {
    let dir = root().join("ir-spec/examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "gir") {
            ok(&["run", "--backend", "interp", path.to_str().unwrap()]);
            n += 1;
        }
    }
    assert!(n >= 14);
}

#[test]
fn outputs_match_the_session_api_and_are_written_as_npy() {
    let dir = tmpdir("mlp");
    let shapes: [(&str, &[usize]); 5] =
        [("x", &[64, 784]), ("w1", &[784, 256]), ("b1", &[256]), ("w2", &[256, 10]), ("b2", &[10])];
    // The interpreter, for bit-identical results (the JIT's are within 1e-5: tests/jit.rs).
    let mut args = vec![
        "run".to_string(),
        example("mlp.gir"),
        "--backend".into(),
        "interp".into(),
        "--out-dir".into(),
        dir.join("out").display().to_string(),
    ];
    let mut req = RunRequest::new("mlp");
    for (name, shape) in shapes {
        let t = ramp(shape);
        args.push("--input".into());
        args.push(format!("{name}={}", save(&dir, &format!("{name}.npy"), &t)));
        req = req.feed(name, t);
    }
    let out = ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.contains("probs: f32[64,10] ->"), "{out}");
    assert!(!out.contains("random inputs"), "every input came from a file: {out}");
    let written = npy::read_npy(&dir.join("out/probs.npy")).unwrap();
    let module = graphc_ir::parse_file(Path::new(&example("mlp.gir"))).1.unwrap();
    let want = Session::new(module, SessionOptions::default()).unwrap().run(req).unwrap();
    assert!(written.bit_identical(want.get("probs").unwrap()));
}

#[test]
fn random_inputs_are_seeded_and_said() {
    let a = ok(&["run", &example("layernorm.gir")]);
    let b = ok(&["run", &example("layernorm.gir")]);
    let c = ok(&["run", &example("layernorm.gir"), "--seed", "5"]);
    assert!(a.contains("random inputs (seed 0): x f32[32,128], gamma f32[128], beta f32[128]"), "{a}");
    let values = |s: &str| s.lines().find(|l| l.starts_with("y:")).unwrap().to_string();
    assert_eq!(values(&a), values(&b));
    assert_ne!(values(&a), values(&c));
}

#[test]
fn bad_inputs_give_one_clear_line() {
    let dir = tmpdir("bad-inputs");
    let mlp = example("mlp.gir");
    let small = save(&dir, "small.npy", &ramp(&[2, 2]));
    let err = fails(&["run", &mlp, "--input", &format!("x={small}")]);
    assert_eq!(err.trim(), format!("error: input 'x' of @mlp: expected f32[64,784], got f32[2,2] from {small}"));
    let ints = save(&dir, "ints.npy", &Tensor::from_data(&[64, 784], TensorData::I64(vec![0; 64 * 784])).unwrap());
    let err = fails(&["run", &mlp, "--input", &format!("x={ints}")]);
    assert!(err.contains("expected f32[64,784], got i64[64,784]"), "{err}");
    let junk = dir.join("junk.npy");
    std::fs::write(&junk, b"this is not numpy").unwrap();
    let err = fails(&["run", &mlp, "--input", &format!("x={}", junk.display())]);
    assert!(err.starts_with("error: input 'x': ") && err.contains("is not a valid .npy file"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let err = fails(&["run", &mlp, "--input", "x=/nonexistent/x.npy"]);
    assert!(err.contains("input 'x': cannot read /nonexistent/x.npy"), "{err}");
    let err = fails(&["run", &mlp, "--input", &format!("w3={small}")]);
    assert!(
        err.contains("--input 'w3': @mlp has no input of that name") && err.contains("inputs are x, w1, b1, w2, b2"),
        "{err}"
    );
    let err = fails(&["run", &mlp, "--input", "x"]);
    assert!(err.contains("not of the form NAME=PATH.npy"), "{err}");
    let err = fails(&["run", &mlp, "--graph", "nope"]);
    assert!(err.contains("has no graph @nope") && err.contains("@mlp"), "{err}");
}

#[test]
fn steps_checkpoints_and_restores() {
    let dir = tmpdir("train");
    let ckpt = dir.join("w.safetensors").display().to_string();
    let train = example("train_step.gir");
    let out =
        ok(&["run", &train, "--graph", "step", "--steps", "40", "--checkpoint", &ckpt, "--checkpoint-every", "10"]);
    let losses: Vec<f64> = out.lines().filter_map(|l| l.split_once("loss=").map(|(_, v)| v.parse().unwrap())).collect();
    assert!(losses.len() >= 4 && losses.windows(2).all(|w| w[1] < w[0]), "the loss falls: {out}");
    assert!(out.contains("saved 2 variables to"), "{out}");
    // Restoring continues where the run stopped: the next loss is below the last one.
    let more = ok(&["run", &train, "--graph", "step", "--restore", &ckpt]);
    assert!(more.contains("restored 2 variables") && more.contains("(saved at step 40)"), "{more}");
    let next: f64 =
        more.lines().find_map(|l| l.strip_prefix("loss: f32[] [")).unwrap().trim_end_matches(']').parse().unwrap();
    assert!(next < *losses.last().unwrap(), "{next} after {losses:?}");
    // A checkpoint of another module is refused with what differs.
    let other = dir.join("other.safetensors").display().to_string();
    ok(&["run", &example("devices.gir"), "--checkpoint", &other]);
    let err = fails(&["run", &train, "--restore", &other]);
    assert!(err.contains("\"w\" (f32[4,1]) is missing") && err.contains("\"layer.w\" is in the checkpoint"), "{err}");
}

#[test]
fn run_time_errors_point_at_the_node() {
    let dir = tmpdir("errors");
    let p = dir.join("div.gir");
    std::fs::write(
        &p,
        "graph @g(%x: i32[2]) -> (y: i32[2]) {\n  %z = constant {value = dense<0> : i32[]} : i32[]\n  %y = div %x, %z : i32[2]\n  return %y\n}\n",
    )
    .unwrap();
    let err = fails(&["run", p.to_str().unwrap()]);
    assert!(err.contains("div.gir:3:3: error: in @g, node 'div %y': integer division by zero"), "{err}");
    assert!(err.contains("3 |   %y = div %x, %z : i32[2]"), "{err}");
}

#[test]
fn a_dequeue_nobody_can_satisfy_fails_instead_of_hanging() {
    let pipeline = example("queue_pipeline.gir");
    let err = fails(&["run", &pipeline, "--graph", "consume"]);
    assert!(
        err.contains("dequeue from queue \"batches\" is blocked: it is empty") && err.contains("wait forever"),
        "{err}"
    );
    // With a producer in the same step it runs.
    let out = ok(&["run", &pipeline, "--graph", "produce", "--graph", "consume"]);
    assert!(out.contains("consume.left: i64[] [0]"), "{out}");
}

#[test]
fn absurd_sizes_are_errors_not_aborts() {
    let dir = tmpdir("absurd");
    let big = dir.join("big.gir");
    std::fs::write(&big, "graph @g(%x: f32[1000000000000]) -> (y: f32[1000000000000]) {\n  %0 = neg %x : f32[1000000000000]\n  return %0\n}\n").unwrap();
    let err = fails(&["run", big.to_str().unwrap()]);
    assert!(err.contains("input 'x' of @g: a tensor of type f32[1000000000000] takes 3725.3 GiB"), "{err}");
    // A tiny .npy whose header claims a huge shape.
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<117}\n");
    bytes.extend((padded.len() as u16).to_le_bytes());
    bytes.extend(padded.as_bytes());
    bytes.extend([0u8; 16]);
    let lying = dir.join("lying.npy");
    std::fs::write(&lying, bytes).unwrap();
    let err = fails(&["run", big.to_str().unwrap(), "--input", &format!("x={}", lying.display())]);
    assert!(err.contains("declares 1000000000000 elements") && err.contains("holds 16 bytes"), "{err}");
    let node = dir.join("node.gir");
    std::fs::write(&node, "graph @g(%x: f32[1]) -> (y: f32[100000,100000,100]) {\n  %0 = broadcast %x {shape = [100000, 100000, 100]} : f32[100000,100000,100]\n  return %0\n}\n").unwrap();
    let err = fails(&["run", node.to_str().unwrap()]);
    assert!(
        err.contains("node.gir:2:3: error: in @g, node 'broadcast': a tensor of type f32[100000,100000,100]"),
        "{err}"
    );
}

#[test]
fn truncated_and_foreign_npy_files_are_refused() {
    let dir = tmpdir("npy");
    let good = save(&dir, "x.npy", &ramp(&[2, 3]));
    let bytes = std::fs::read(&good).unwrap();
    let g = dir.join("g.gir");
    std::fs::write(&g, "graph @g(%x: f32[2,3]) -> (y: f32[2,3]) {\n  %0 = neg %x : f32[2,3]\n  return %0\n}\n")
        .unwrap();
    for cut in [0, 5, 9, 40, bytes.len() - 1] {
        let p = dir.join(format!("cut{cut}.npy"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let err = fails(&["run", g.to_str().unwrap(), "--input", &format!("x={}", p.display())]);
        assert!(err.starts_with("error: input 'x': ") && err.contains("not a valid .npy file"), "cut {cut}: {err}");
    }
    // complex64 is numpy's but not graphc's.
    let at = bytes.windows(3).position(|w| w == b"<f4").unwrap();
    let mut complex = bytes.clone();
    complex[at + 1..at + 3].copy_from_slice(b"c8");
    let path = dir.join("complex.npy");
    std::fs::write(&path, complex).unwrap();
    let err = fails(&["run", g.to_str().unwrap(), "--input", &format!("x={}", path.display())]);
    assert!(err.contains("holds elements of numpy type") && err.contains("'<c8'"), "{err}");
    // float16 is graphc's too: the same bytes read as f16 are twice the data the shape holds.
    let mut half = bytes.clone();
    half[at + 2] = b'2';
    let path = dir.join("half.npy");
    std::fs::write(&path, half).unwrap();
    let err = fails(&["run", g.to_str().unwrap(), "--input", &format!("x={}", path.display())]);
    assert!(err.contains("declares 6 elements (12 bytes) but the file holds 24 bytes"), "{err}");
}

#[test]
fn fetch_runs_only_what_the_fetched_values_need() {
    let out = ok(&["run", &example("mlp.gir"), "--fetch", "hb"]);
    assert!(out.contains("@mlp: ran 2 nodes"), "matmul and add only: {out}");
    assert!(out.contains("hb: f32[64,256]"), "{out}");
    let err = fails(&["run", &example("mlp.gir"), "--fetch", "logitz"]);
    assert!(err.contains("cannot fetch 'logitz'") && err.contains("did you mean 'logits'"), "{err}");
}

#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    // `graphc run ... | head -1`: the reader goes away before graphc prints.
    let mut child = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(["run", &example("attention.gir"), "--steps", "3"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{:?}: {err}", out.status);
}

#[test]
fn timeouts_of_any_size_are_errors_or_no_limit_never_panics() {
    let mlp = example("mlp.gir");
    // Too large for the clock, or infinite: no limit.
    for t in ["1e20", "inf", "1e308"] {
        ok(&["run", &mlp, "--backend", "interp", "--timeout", t]);
    }
    for t in ["-1", "0", "nan", "NaN", "-inf", "abc", "", "1e-300"] {
        let o = graphc(&["run", &mlp, &format!("--timeout={t}")]);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "--timeout {t:?}: {err}");
        assert!(err.contains("invalid value") && err.contains("--timeout"), "--timeout {t:?}: {err}");
    }
}

#[test]
fn a_loop_that_never_ends_fails_at_the_timeout_naming_the_loop() {
    let dir = tmpdir("spin");
    let p = dir.join("spin.gir");
    std::fs::write(&p, common::SPIN).unwrap();
    let path = p.to_str().unwrap();
    for backend in ["interp", "jit"] {
        let start = std::time::Instant::now();
        let err = fails(&["run", path, "--timeout", "0.5", "--backend", backend]);
        assert!(start.elapsed() < std::time::Duration::from_secs(20), "{backend}: {:?}", start.elapsed());
        assert!(
            err.contains(
                "spin.gir:2:3: error: in @spin, node 'while %r': the step ran longer than its time limit of 0.5s"
            ),
            "{backend}: {err}"
        );
    }
    let err = fails(&["bench", path, "--timeout", "0.5", "--warmup", "0", "--iters", "3"]);
    assert!(
        err.contains("node 'while %r'") && err.contains("time limit of 0.5s") && err.contains("(step 1 of 3)"),
        "{err}"
    );
}

#[test]
fn ctrl_c_interrupts_a_loop_that_never_ends() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tmpdir("sigint");
    let p = dir.join("spin.gir");
    std::fs::write(&p, common::SPIN).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(["run", p.to_str().unwrap(), "--backend", "interp"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            panic!("graphc ignored SIGINT");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Killed by SIGINT, which a shell reports as exit status 130.
    assert_eq!(status.signal(), Some(2), "{status:?}");
}

#[test]
fn a_periodic_checkpoint_that_cannot_be_written_stops_the_run_at_once() {
    let dir = tmpdir("unwritable");
    // A name that can be written (it is checked before the run) but not its temporary file,
    // which takes 20 more bytes than a file name may have.
    let ckpt = dir.join(format!("{}.st", "w".repeat(245))).display().to_string();
    let train = example("train_step.gir");
    let args = ["run", &train, "--graph", "step", "--backend", "interp", "--checkpoint", &ckpt];
    let o = graphc(&[&args[..], &["--steps", "100000", "--checkpoint-every", "1"]].concat());
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(!out.contains("step 100000:"), "the run stopped early: {out}");
    assert!(
        err.starts_with("error: saving step ")
            && err.contains(&format!("cannot write checkpoint {ckpt}"))
            && err.contains("stopped after step"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // Going on: a warning per failure, every step runs, and the final save still must work.
    let o =
        graphc(&[&args[..], &["--steps", "5", "--checkpoint-every", "1", "--keep-going-on-checkpoint-error"]].concat());
    let (out, err) = text(&o);
    assert!(out.contains("step 5:"), "{out}");
    assert!(err.starts_with("warning: saving step ") && err.contains("going on"), "{err}");
    assert!(err.lines().last().unwrap().starts_with(&format!("error: cannot write checkpoint {ckpt}")), "{err}");
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn output_files_never_collide_or_leave_the_directory() {
    let dir = tmpdir("names");
    let clash = dir.join("clash.gir");
    std::fs::write(
        &clash,
        "graph @g(%x: f32[2]) -> (\"a/b\": f32[2], a_b: f32[2]) {\n  %y = neg %x : f32[2]\n  return %x, %y\n}\n",
    )
    .unwrap();
    let out = dir.join("out");
    let err = fails(&["run", clash.to_str().unwrap(), "--out-dir", out.to_str().unwrap()]);
    assert_eq!(
        err.trim(),
        format!(
            "error: outputs 'a/b' and 'a_b' would both be written to {}; rename one of them",
            out.join("a_b.npy").display()
        )
    );
    assert!(!out.exists(), "nothing was written");
    let long = "n".repeat(300);
    let odd = dir.join("odd.gir");
    std::fs::write(&odd, format!("graph @g(%x: f32[2]) -> (\"..\": f32[2], \".hidden\": f32[2], \"{long}\": f32[2]) {{\n  return %x, %x, %x\n}}\n")).unwrap();
    let stdout = ok(&["run", odd.to_str().unwrap(), "--out-dir", out.to_str().unwrap()]);
    let mut files: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(
        files,
        ["_..npy".to_string(), "_hidden.npy".to_string(), format!("{}.npy", "n".repeat(200))],
        "{stdout}"
    );
}

#[test]
fn fetching_a_value_inside_a_region_says_why_with_its_name_and_place() {
    let err = fails(&["run", &example("loop.gir"), "--graph", "power", "--fetch", "prod"]);
    assert!(
        err.contains("loop.gir:14:7: error: cannot fetch 'prod': it is defined inside the body region of node 'while %i' of @power")
            && err.contains("fetch a value the node returns instead"),
        "{err}"
    );
    let err = fails(&["run", &example("fused.gir"), "--fetch", "%biased"]);
    assert!(err.contains("cannot fetch 'biased': it is defined inside the kernel region of node 'fusion %a'"), "{err}");
    assert!(!err.contains(" v1") && !err.contains("was not computed"), "no internal ids: {err}");
}

/// A version 1 .npy file with this header text and data.
fn npy_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<117}\n");
    bytes.extend((padded.len() as u16).to_le_bytes());
    bytes.extend(padded.as_bytes());
    bytes.extend(data);
    bytes
}

#[test]
fn odd_flags_and_broken_inputs_never_crash_run() {
    let dir = tmpdir("never-panics");
    let g = dir.join("g.gir");
    std::fs::write(&g, "graph @g(%x: f32[2,3]) -> (y: f32[2,3]) {\n  %y = neg %x : f32[2,3]\n  return %y\n}\n")
        .unwrap();
    let g = g.display().to_string();
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let zeros = [0u8; 24];
    let npys = [
        file(
            "dup.npy",
            &npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (3000000000,), }", &zeros),
        ),
        file("unknown.npy", &npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1, }", &zeros)),
        file("missing.npy", &npy_bytes("{'descr': '<f4', 'shape': (2, 3), }", &zeros)),
        file("descr.npy", &npy_bytes("{'descr': 'zz', 'fortran_order': False, 'shape': (2, 3), }", &zeros)),
        file("order.npy", &npy_bytes("{'descr': '<f4', 'fortran_order': maybe, 'shape': (2, 3), }", &zeros)),
        file("trailing.npy", &npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }}", &zeros)),
        file(
            "overflow.npy",
            &npy_bytes(
                "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999), }",
                &zeros,
            ),
        ),
        file("short.npy", &npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", &zeros[..5])),
        file("empty.npy", b""),
        file("junk.npy", b"\x93NUMPY\x02\x00\xff\xff\xff\xff{"),
        file("text.npy", "\u{1F600} not numpy".as_bytes()),
    ];
    let fifo = dir.join("fifo.npy");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let fifo = fifo.display().to_string();
    let a_dir = dir.display().to_string();
    let cut_ckpt = file("cut.safetensors", &[8, 0, 0, 0, 0, 0, 0, 0, b'{']);
    let a_file = file("plain.txt", b"x");
    let mut cases: Vec<Vec<String>> = Vec::new();
    for p in npys.iter().chain([&fifo, &a_dir, &"/dev/zero".to_string(), &"/nonexistent/x.npy".to_string()]) {
        cases.push(vec!["--input".into(), format!("x={p}")]);
    }
    for p in [&fifo, &a_dir, &"/dev/zero".to_string(), &cut_ckpt, &"/nonexistent/c".to_string()] {
        cases.push(vec!["--restore".into(), p.clone()]);
    }
    for flags in [
        &["--timeout=nan"][..],
        &["--timeout=-1"],
        &["--timeout=0"],
        &["--timeout=1e-400"],
        &["--timeout", "soon"],
        &["--steps", "0"],
        &["--steps=-1"],
        &["--steps", "1e3"],
        &["--steps", "99999999999999999999999"],
        &["--seed=-1"],
        &["--checkpoint-every", "0"],
        &["--checkpoint-every", "2"],
        &["--input", "=x"],
        &["--input", "x="],
        &["--input", "nope=1.npy"],
        &["--fetch", ""],
        &["--fetch", "%"],
        &["--fetch", "nope"],
        &["--graph", ""],
        &["--backend", "gpu"],
    ] {
        cases.push(flags.iter().map(|s| s.to_string()).collect());
    }
    // Spec and profile files: the same rules as inputs (a device never ends, a FIFO blocks).
    for p in [&fifo, &a_dir, &"/dev/zero".to_string()] {
        cases.push(vec!["--devices".into(), p.clone()]);
    }
    cases.push(vec!["--checkpoint".into(), a_dir.clone()]);
    cases.push(vec!["--out-dir".into(), a_file.clone()]);
    cases.push(vec!["--trace".into(), a_dir.clone()]);
    for case in &cases {
        let args: Vec<&str> = ["run", g.as_str()].into_iter().chain(case.iter().map(String::as_str)).collect();
        let o = graphc(&args);
        let (out, err) = text(&o);
        let code = o.status.code();
        assert_eq!(code, Some(1), "graphc {args:?}: exit {:?}\n{out}\n{err}", o.status);
        assert!(!err.contains("panicked") && err.starts_with("error: "), "graphc {args:?}:\n{err}");
        // clap's usage errors add a usage line and a hint; graphc's own are one line.
        if !err.contains("For more information, try '--help'") {
            assert_eq!(err.lines().count(), 1, "graphc {args:?}: one line:\n{err}");
        }
    }
    // The file to run itself: a device, a FIFO, a directory.
    for p in ["/dev/zero", &fifo, &a_dir] {
        let o = graphc(&["run", p]);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{p}: {err}");
        assert!(err.trim().ends_with("not a regular file") && err.lines().count() == 1, "{p}: {err}");
    }
}

#[test]
fn the_default_backend_keeps_nan_payloads_as_the_interpreter_does() {
    // i32 bits of a quiet NaN with a payload and of a negative signalling NaN, bitcast to f32
    // and back: the default backend folds the bitcasts into constants, which must keep the
    // interpreter's bits.
    let dir = tmpdir("nan-bits");
    let p = dir.join("bitcasts.gir");
    std::fs::write(
        &p,
        "graph @g() -> (f: f32[2], y: i32[2]) {
  %c = constant {value = dense<[2143289345, -4194305]> : i32[2]} : i32[2]
  %f = bitcast %c {to = f32} : f32[2]
  %y = bitcast %f {to = i32} : i32[2]
  return %f, %y
}
",
    )
    .unwrap();
    let file = p.display().to_string();
    let interp = dir.join("interp").display().to_string();
    let default = dir.join("default").display().to_string();
    ok(&["run", &file, "--backend", "interp", "--out-dir", &interp]);
    ok(&["run", &file, "--out-dir", &default]);
    for name in ["f.npy", "y.npy"] {
        let want = npy::read_npy(&dir.join("interp").join(name)).unwrap();
        let got = npy::read_npy(&dir.join("default").join(name)).unwrap();
        assert!(got.bit_identical(&want), "{name}: {got:?} vs the interpreter's {want:?}");
    }
    let y = npy::read_npy(&dir.join("default/y.npy")).unwrap();
    assert_eq!(y.to_data(), TensorData::I32(vec![2143289345, -4194305]));
}

#[test]
fn outputs_never_replace_the_model_an_input_or_each_other() {
    let dir = tmpdir("clobber");
    let model = dir.join("ts.gir");
    std::fs::copy(example("train_step.gir"), &model).unwrap();
    let m = model.to_str().unwrap();
    let p = |name: &str| dir.join(name).display().to_string();
    let cases: [(Vec<String>, &str); 8] = [
        (vec!["--checkpoint".into(), m.into()], "--checkpoint"),
        (vec!["--trace".into(), m.into()], "is the model"),
        (vec!["--trace".into(), p("t.json"), "--write-profile".into(), p("t.json")], "are the same file"),
        (vec!["--trace".into(), p("prof.json"), "--profile".into(), p("prof.json")], "is the --profile file"),
        (vec!["--trace".into(), "/dev/full".into()], "is a character device"),
        (vec!["--trace".into(), "-".into()], "--trace -: give a file"),
        (vec!["--write-profile".into(), p("missing/prof.json")], "there is no directory"),
        (
            vec!["--checkpoint".into(), p("c.st"), "--restore".into(), p("c.st"), "--trace".into(), p("c.st")],
            "is the --restore checkpoint",
        ),
    ];
    std::fs::write(dir.join("prof.json"), "{}").unwrap();
    for (extra, what) in cases {
        let mut args = vec!["run", m, "--graph", "step"];
        args.extend(extra.iter().map(String::as_str));
        let err = fails(&args);
        assert!(err.contains(what) && err.trim().lines().count() == 1, "{extra:?}: expected '{what}' in: {err}");
    }
    assert_eq!(std::fs::read(&model).unwrap(), std::fs::read(example("train_step.gir")).unwrap());
    // An --out-dir file that is an --input file: @predict's output 'y' and its input 'x'.
    let x = save(&dir, "y.npy", &ramp(&[8, 4]));
    let before = std::fs::read(&x).unwrap();
    let err =
        fails(&["run", m, "--graph", "predict", "--input", &format!("x={x}"), "--out-dir", dir.to_str().unwrap()]);
    assert!(err.contains("is the --input file of 'x'"), "{err}");
    assert_eq!(std::fs::read(&x).unwrap(), before);
    // An --out-dir that is a file or a device is named as such before the run.
    for (dir, is) in [(m, "it is a regular file, not a directory"), ("/dev/null", "it is a character device")] {
        let err = fails(&["run", m, "--graph", "step", "--out-dir", dir]);
        assert!(err.contains(is) && err.lines().count() == 1, "{err}");
    }
    // A profile is refined in place: --write-profile may replace the --profile read.
    let prof = p("refined.json");
    ok(&["run", m, "--graph", "step", "--write-profile", &prof]);
    ok(&["run", m, "--graph", "step", "--write-profile", &prof, "--profile", &prof]);
    // A run that goes on saves over the checkpoint it restored.
    let c = p("c.safetensors");
    ok(&["run", m, "--graph", "step", "--checkpoint", &c]);
    ok(&["run", m, "--graph", "step", "--restore", &c, "--checkpoint", &c]);
}

#[test]
fn fed_arrays_count_against_the_memory_limit_before_they_are_read() {
    let dir = tmpdir("feed-limit");
    let mlp = example("mlp.gir");
    // x is f32[64,784]: 196 KiB; the limit leaves less for it.
    let x = save(&dir, "x.npy", &ramp(&[64, 784]));
    let err = fails(&["run", &mlp, "--input", &format!("x={x}"), "--memory-limit", "100KiB"]);
    assert!(
        err.contains("input 'x' of @mlp")
            && err.contains("196.0 KiB, more than the 100.0 KiB the memory limit leaves for the inputs"),
        "{err}"
    );
    // Random inputs take their room too: w1 alone is 784 KiB.
    let err = fails(&["run", &mlp, "--memory-limit", "300KiB"]);
    assert!(err.contains("random data of type f32[784,256]"), "{err}");
    // A file of the wrong shape is refused on its header.
    let small = save(&dir, "small.npy", &ramp(&[2, 3]));
    let err = fails(&["run", &mlp, "--input", &format!("x={small}")]);
    assert!(err.contains("expected f32[64,784], got f32[2,3]"), "{err}");
}

#[cfg(not(feature = "llvm"))]
#[test]
fn a_backend_not_built_in_says_which_feature_it_needs() {
    for b in ["llvm", "auto", "cuda"] {
        let err = fails(&["run", &example("mlp.gir"), "--backend", b]);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!(
                "--backend {b}: backend '{b}' is not built into this graphc: it needs the llvm feature"
            )),
            "{err}"
        );
    }
    let err = fails(&["run", &example("mlp.gir"), "--backend", "jitt"]);
    assert!(err.contains("unknown backend 'jitt'; did you mean 'jit'?"), "{err}");
}

#[test]
fn usage_errors_exit_1_as_every_error_does() {
    let mlp = example("mlp.gir");
    for flags in [&["--steps", "-5"][..], &["--timeout", "0"], &["--memory-limit", "0"], &["--no-such-flag"]] {
        let o = graphc(&[&["run", &mlp][..], flags].concat());
        assert_eq!(o.status.code(), Some(1), "{flags:?}: {}", text(&o).1);
    }
    assert_eq!(graphc(&["run", "--help"]).status.code(), Some(0));
}

/// An ONNX model `y = x + b` of two floats at `path`: `x`'s dim as given, `b` stored in the
/// external data file `w.bin` beside it.
fn onnx_add_model(path: &Path, x_dim: graphc_onnx::proto::Dimension) {
    use graphc_onnx::proto::*;
    use prost::Message;
    let vi = |name: &str, dim: Dimension| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: Some(data_type::FLOAT),
                shape: Some(TensorShapeProto { dim: vec![dim] }),
            }),
            ..Default::default()
        }),
    };
    let bias = TensorProto {
        name: Some("b".into()),
        dims: vec![2],
        data_type: Some(data_type::FLOAT),
        data_location: Some(1),
        external_data: vec![StringStringEntryProto { key: Some("location".into()), value: Some("w.bin".into()) }],
        ..Default::default()
    };
    let graph = GraphProto {
        node: vec![NodeProto {
            input: vec!["x".into(), "b".into()],
            output: vec!["y".into()],
            name: Some("add".into()),
            op_type: Some("Add".into()),
            ..Default::default()
        }],
        name: Some("g".into()),
        initializer: vec![bias],
        input: vec![vi("x", x_dim.clone())],
        output: vec![vi("y", x_dim)],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        producer_name: Some("test".into()),
        graph: Some(graph),
    };
    std::fs::write(path, model.encode_to_vec()).unwrap();
    let bytes: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(path.with_file_name("w.bin"), bytes).unwrap();
}

#[test]
fn outputs_never_replace_an_onnx_models_external_data_or_standard_output() {
    let dir = tmpdir("onnx-ext");
    let m = dir.join("m.onnx");
    onnx_add_model(&m, graphc_onnx::proto::Dimension { dim_value: Some(2), dim_param: None });
    let data = dir.join("w.bin");
    let (m, d) = (m.to_str().unwrap(), data.to_str().unwrap());
    ok(&["run", m]);
    for args in [
        vec!["run", m, "--checkpoint", d],
        vec!["import", m, "-o", d],
        vec!["compile", m, "--weights-file", d, "-o", "x"],
    ] {
        let err = fails(&args);
        assert!(err.contains("is the model's external data") && err.lines().count() == 1, "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&data).unwrap().len(), 8);
    // Standard output: a pipe is no file to write, and a file it goes to is not replaced.
    let err = fails(&["run", m, "--trace", "/dev/stdout"]);
    assert!(err.contains("is a FIFO"), "{err}");
    let log = dir.join("stdout.txt");
    let o = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(["run", m, "--trace", "/dev/stdout"])
        .stdout(std::fs::File::create(&log).unwrap())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("is this process's standard output"), "{}", text(&o).1);
    // A path ending in '/' names a directory, and '-' no file.
    let err = fails(&["run", m, "--trace", &format!("{}/new/", dir.display())]);
    assert!(err.contains("it names a directory"), "{err}");
    let err = fails(&["compile", m, "-o", "-"]);
    assert!(err.contains("-o -: give a file"), "{err}");
}

#[test]
fn import_binds_a_symbolic_dim_with_shape() {
    let dir = tmpdir("import-shape");
    let m = dir.join("n.onnx");
    onnx_add_model(&m, graphc_onnx::proto::Dimension { dim_value: None, dim_param: Some("N".into()) });
    let m = m.to_str().unwrap();
    let err = fails(&["import", m]);
    assert!(err.contains("give it a size with --shape N=SIZE"), "{err}");
    let out = ok(&["import", m, "--shape", "N=2"]);
    assert!(out.contains("(%x: f32[2]) -> (y: f32[2])"), "{out}");
    let err = fails(&["import", m, "--shape", "N"]);
    assert!(err.contains("--shape 'N' is not of the form DIM=SIZE"), "{err}");
}

#[cfg(feature = "llvm")]
#[test]
fn bench_times_the_background_tier_unless_told_not_to_wait() {
    let cnn = example("cnn.gir");
    let tier = |flags: &[&str]| {
        let o = graphc(
            &[&["bench", &cnn, "--backend", "auto", "--json", "--warmup", "0", "--iters", "2"][..], flags].concat(),
        );
        assert!(o.status.success(), "{:?}", text(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        j["tier"].clone()
    };
    // By default every timed step runs the LLVM tier's kernels.
    let t = tier(&[]);
    assert_eq!(t["name"], "llvm", "{t}");
    assert_eq!(t["from_step"], 1, "{t}");
    // Without the wait, the first step starts while it compiles (its kernels take over later,
    // or after the last step).
    let t = tier(&["--no-tier-wait"]);
    assert_eq!(t["name"], "llvm", "{t}");
    assert_ne!(t["from_step"], 1, "{t}");
}
