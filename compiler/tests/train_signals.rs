//! `graphc train` stopped by SIGTERM or SIGINT keeps its work: it stops after the step in
//! flight, writes its checkpoint (the step and the data position) and the log's last lines,
//! says where on standard error, and exits 143 or 130; resumed with --restore it ends with the
//! weights of the uninterrupted run, bit for bit. Without --checkpoint it says nothing was
//! kept. A second signal ends it at once, the checkpoint whole. `graphc run --steps N
//! --checkpoint` stops the same way.

mod common;

use common::{example, graphc, text};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Steps in all: slowed by --step-delay, the run is still going when the signal comes.
const STEPS: &str = "3000";

fn tmpdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-signals-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `graphc train` on the spirals example with `extra` flags.
fn train_args<'a>(steps: &'a str, file: &'a str, data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["train", file, "--graph", "step", "--steps", steps, "--data", data];
    args.extend_from_slice(extra);
    args
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("graphc starts")
}

/// Waits until `ready` holds (the run is under way), failing the test after a minute.
fn wait_for(child: &mut Child, what: &str, ready: impl Fn() -> bool) {
    let start = Instant::now();
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("graphc ended ({status}) before {what}");
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no {what} within a minute");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill").args([sig, &child.id().to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig} failed");
}

/// The process's exit code, standard output and standard error, once it ends (within a minute).
fn finish(child: Child) -> (Option<i32>, String, String) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let o = rx.recv_timeout(Duration::from_secs(60)).expect("graphc ends within a minute after the signal").unwrap();
    let (out, err) = text(&o);
    (o.status.code(), out, err)
}

/// The step of the stderr line `SIG: stopped after step K of N; ...`.
fn stopped_step(err: &str, sig: &str) -> u64 {
    let line = err.lines().find(|l| l.starts_with(&format!("{sig}: stopped after step "))).unwrap_or_else(|| {
        panic!("no '{sig}: stopped after step' line:\n{err}");
    });
    line[format!("{sig}: stopped after step ").len()..].split(' ').next().unwrap().parse().unwrap()
}

/// Every `.npy` file of `dir`, by name, as bytes.
fn npy_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    assert!(out.len() >= 6, "the weights and biases are written: {:?}", out.iter().map(|f| &f.0).collect::<Vec<_>>());
    out
}

/// Interrupts a checkpointed, logged run with `sig`, checks what it kept, resumes it to the
/// end, and compares the weights with an uninterrupted run's.
fn interrupted_and_resumed(name: &str, sig: &str, status: i32, name_in_messages: &str) {
    let dir = tmpdir(name);
    let (file, data) = (example("mlp_train.gir"), example("data/spirals"));
    let (ckpt, log) = (dir.join("w.ckpt"), dir.join("loss.jsonl"));
    let flags = ["--checkpoint", s(&ckpt), "--log", s(&log), "--log-every", "7", "--step-delay", "1"];
    let mut child = spawn(&train_args(STEPS, &file, &data, &flags));
    // The log is buffered: its first bytes on disk mean a hundred steps or more are done.
    wait_for(&mut child, "log lines", || std::fs::metadata(&log).is_ok_and(|m| m.len() > 0));
    signal(&child, sig);
    let (code, _out, err) = finish(child);
    assert_eq!(code, Some(status), "{sig} exits {status}:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    let step = stopped_step(&err, name_in_messages);
    assert!(step > 0 && step < 3000, "stopped mid-run: step {step}\n{err}");
    assert!(
        err.contains(&format!("checkpoint at step {step}: {}", ckpt.display())) && err.contains("--restore"),
        "the message says where the checkpoint is:\n{err}"
    );

    // The log: its step lines, the stopped step's included (though not a 7th), then the last.
    let logged = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = logged.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let last = lines.last().unwrap();
    assert_eq!(last["stopped_at"], step, "{logged}");
    assert_eq!(last["signal"], name_in_messages);
    assert_eq!(last["checkpoint"], s(&ckpt));
    assert_eq!(lines[lines.len() - 2]["step"], step, "the stopped step's loss is logged");
    assert!(lines[..lines.len() - 1].iter().all(|l| l["loss"].is_number()));

    // Taken up from the checkpoint to the end: the weights of a run never interrupted.
    let (resumed, full) = (dir.join("resumed"), dir.join("full"));
    let o = graphc(&train_args(STEPS, &file, &data, &["--restore", s(&ckpt), "--out-dir", s(&resumed)]));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains(&format!("restored 24 variables from {} (step {step})", ckpt.display())), "{out}");
    let o = graphc(&train_args(STEPS, &file, &data, &["--out-dir", s(&full)]));
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(npy_files(&resumed), npy_files(&full), "interrupted at {step} and resumed == uninterrupted");
}

#[test]
fn sigterm_keeps_the_work_and_a_resumed_run_ends_bit_for_bit_as_an_uninterrupted_one() {
    interrupted_and_resumed("term", "-TERM", 143, "SIGTERM");
}

#[test]
fn sigint_does_the_same_with_status_130() {
    interrupted_and_resumed("int", "-INT", 130, "SIGINT");
}

#[test]
fn without_a_checkpoint_a_signal_says_nothing_was_kept() {
    let dir = tmpdir("nockpt");
    let (file, data) = (example("mlp_train.gir"), example("data/spirals"));
    let log = dir.join("loss.jsonl");
    let mut child = spawn(&train_args(STEPS, &file, &data, &["--log", s(&log), "--step-delay", "1"]));
    wait_for(&mut child, "log lines", || std::fs::metadata(&log).is_ok_and(|m| m.len() > 0));
    signal(&child, "-TERM");
    let (code, _, err) = finish(child);
    assert_eq!(code, Some(143), "{err}");
    stopped_step(&err, "SIGTERM");
    assert!(err.contains("no --checkpoint was configured"), "{err}");
    let logged = std::fs::read_to_string(&log).unwrap();
    let last: serde_json::Value = serde_json::from_str(logged.lines().last().unwrap()).unwrap();
    assert!(last["checkpoint"].is_null() && last["signal"] == "SIGTERM", "{logged}");
}

#[test]
fn a_second_signal_ends_at_once_and_the_checkpoint_stays_whole() {
    let dir = tmpdir("twice");
    let (file, data) = (example("mlp_train.gir"), example("data/spirals"));
    let ckpt = dir.join("w.ckpt");
    let flags = ["--checkpoint", s(&ckpt), "--checkpoint-every", "5", "--step-delay", "1"];
    let mut child = spawn(&train_args(STEPS, &file, &data, &flags));
    wait_for(&mut child, "a periodic checkpoint", || ckpt.exists());
    signal(&child, "-TERM");
    signal(&child, "-TERM");
    let (code, _, err) = finish(child);
    assert_eq!(code, Some(143), "{err}");
    // Whichever checkpoint is there (a periodic one, or the one the first signal asked for)
    // is whole, with its step and data position.
    let loaded = graphc_runtime::checkpoint::decode(&std::fs::read(&ckpt).unwrap()).expect("a whole checkpoint");
    let step = loaded.step.expect("the checkpoint has its step");
    assert!(step >= 5, "{err}");
    assert!(loaded.train.contains_key(graphc_runtime::checkpoint::meta::EPOCH), "the data position is kept");
}

#[test]
fn run_with_a_checkpoint_stops_after_the_step_in_flight_and_saves() {
    let dir = tmpdir("run");
    let ckpt = dir.join("w.safetensors");
    let file = example("train_step.gir");
    let mut child = spawn(&[
        "run",
        &file,
        "--graph",
        "step",
        "--steps",
        "100000000",
        "--checkpoint",
        s(&ckpt),
        "--checkpoint-every",
        "1000",
    ]);
    wait_for(&mut child, "a periodic checkpoint", || ckpt.exists());
    signal(&child, "-INT");
    let (code, _, err) = finish(child);
    assert_eq!(code, Some(130), "{err}");
    let step = stopped_step(&err, "SIGINT");
    assert!(step >= 1000, "{err}");
    let o = graphc(&["run", &file, "--graph", "predict", "--restore", s(&ckpt), "--json"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["restored"]["step"], step, "the checkpoint holds the step the run stopped at: {out}");
}

/// `n` ports free right now.
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> =
        (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    listeners.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

#[test]
fn in_a_cluster_the_chief_saves_the_clusters_checkpoint_and_both_tasks_take_up_from_it() {
    let dir = tmpdir("cluster");
    let ports = free_ports(2);
    let cluster = dir.join("cluster.json");
    std::fs::write(
        &cluster,
        format!(r#"{{"cluster": {{"ps": ["127.0.0.1:{}"], "worker": ["127.0.0.1:{}"]}}}}"#, ports[0], ports[1]),
    )
    .unwrap();
    let (file, ckpt, log) = (example("ps_mlp.gir"), dir.join("ps.ckpt"), dir.join("w.jsonl"));
    let task = |steps: &str, task: &str, extra: &[&str]| -> Child {
        let mut args = vec!["train", &file, "--graph", "step", "--steps", steps, "--cluster", s(&cluster)];
        args.extend_from_slice(&["--task", task, "--checkpoint", s(&ckpt), "--peer-timeout", "60"]);
        args.extend_from_slice(extra);
        spawn(&args)
    };
    let ps = task("100000", "ps:0", &[]);
    let mut worker = task("100000", "worker:0", &["--log", s(&log), "--step-delay", "2"]);
    wait_for(&mut worker, "log lines", || std::fs::metadata(&log).is_ok_and(|m| m.len() > 0));
    signal(&worker, "-TERM");
    let (code, _, err) = finish(worker);
    assert_eq!(code, Some(143), "{err}");
    let step = stopped_step(&err, "SIGTERM");
    assert!(err.contains(&format!("the cluster's checkpoint at step {step}: {}", ckpt.display())), "{err}");
    assert!(dir.join(format!("ps.ckpt.ps0.step{step}")).is_file(), "the ps task's shard of step {step}");
    // The ps task, stopped in its turn, says so.
    signal(&ps, "-TERM");
    let (code, _, err) = finish(ps);
    assert_eq!(code, Some(143), "{err}");
    assert!(err.contains("ps task 0: SIGTERM: stopped serving"), "{err}");

    // Both restarted: the ps task restores its shard, the worker takes up after its last step.
    let steps = (step + 5).to_string();
    let ps = task(&steps, "ps:0", &[]);
    let worker = task(&steps, "worker:0", &[]);
    let (code, out, err) = finish(worker);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("taking up after it") && out.contains(&format!("steps {}..={steps}", step + 1)), "{out}");
    let (code, out, err) = finish(ps);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains(&format!("restored its variables from {} (step {step})", ckpt.display())), "{out}");
}

#[test]
fn a_step_that_never_ends_outlasts_the_first_signal_and_the_second_ends_it() {
    let dir = tmpdir("never");
    let file = dir.join("spin_train.gir");
    // A training step whose loss comes out of a loop that never ends.
    let spin = "graph @step(%x: f32[]) -> (loss: f32[]) {
  %r = while %x : f32[]
    cond(%c: f32[]) {
      %t = constant {value = dense<true> : bool[]} : bool[]
      yield %t
    }
    body(%b: f32[]) {
      %n = neg %b : f32[]
      yield %n
    }
  return %r
}
";
    std::fs::write(&file, spin).unwrap();
    let err_file = dir.join("stderr");
    let ckpt = dir.join("w.ckpt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(["train", s(&file), "--graph", "step", "--steps", "10", "--checkpoint", s(&ckpt), "-v"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .expect("graphc starts");
    wait_for(&mut child, "the session", || {
        std::fs::read_to_string(&err_file).is_ok_and(|e| e.contains("session ready"))
    });
    // The handlers are installed right after the session, then the first step starts.
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, "-TERM");
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "the first signal waits for the step in flight");
    signal(&child, "-INT");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the second signal ends graphc at once");
        std::thread::sleep(Duration::from_millis(20));
    };
    // 128 + the second signal's number; no step ended, so nothing was saved.
    assert_eq!(status.code(), Some(130));
    let err = std::fs::read_to_string(&err_file).unwrap();
    assert!(!err.contains("stopped after step"), "{err}");
    assert!(!ckpt.exists());
}
