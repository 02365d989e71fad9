//! Logging: by default standard error has warnings only; `-v` adds the driver's stages with
//! their times, `-vv` each pass; `-q` leaves errors only; without them `RUST_LOG` decides (a
//! bad one is a warning). The flags go before or after the subcommand.

mod common;

use common::{example, text};
use std::process::{Command, Output};

fn graphc_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_graphc"));
    c.args(args).env_remove("RUST_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("graphc runs")
}

fn stderr_of(args: &[&str], env: &[(&str, &str)]) -> String {
    let o = graphc_env(args, env);
    let (out, err) = text(&o);
    assert!(o.status.success(), "graphc {args:?} failed:\n{out}\n{err}");
    err
}

#[test]
fn by_default_only_warnings_and_with_v_the_stages_and_their_times() {
    let file = example("mlp.gir");
    let quiet = stderr_of(&["run", &file], &[]);
    assert!(!quiet.contains("info:") && !quiet.contains("debug:"), "{quiet}");

    // The JIT named: a build with the llvm feature defaults to the auto tier.
    for args in [vec!["-v", "run", &file, "--backend", "jit"], vec!["run", &file, "--verbose", "--backend", "jit"]] {
        let err = stderr_of(&args, &[]);
        assert!(err.contains(&format!("info: parsed and verified {file} (1 graph, 6 nodes) in ")), "{err}");
        assert!(err.contains("info: optimized for backend jit"), "{err}");
        assert!(err.contains("info: session ready (backend jit)"), "{err}");
        assert!(!err.contains("debug:"), "{err}");
    }
    let err = stderr_of(&["-vv", "run", &file, "--backend", "jit"], &[]);
    assert!(err.lines().any(|l| l.starts_with("debug: [graphc::driver") && l.contains("pass fuse: ")), "{err}");
}

#[test]
fn training_logs_its_checkpoints() {
    let dir = std::env::temp_dir().join(format!("graphc-logging-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ckpt = dir.join("w.ckpt");
    let (file, data) = (example("mlp_train.gir"), example("data/spirals"));
    let ckpt_s = ckpt.to_str().unwrap();
    let args =
        ["-v", "train", &file, "--steps", "20", "--data", &data, "--checkpoint", ckpt_s, "--checkpoint-every", "10"];
    let err = stderr_of(&args, &[]);
    for step in [10, 20] {
        assert!(err.contains(&format!("info: saved the checkpoint at step {step} to {ckpt_s} (")), "{err}");
    }
}

#[test]
fn quiet_leaves_errors_only_and_rust_log_is_honoured() {
    let file = example("mlp.gir");
    // A retired variable is a warning, which -q leaves out.
    let retired = [("GRAPHC_JIT_ISA", "sse")];
    let err = stderr_of(&["run", &file], &retired);
    assert!(err.contains("warning: GRAPHC_JIT_ISA is no longer read; use --isa"), "{err}");
    let err = stderr_of(&["-q", "run", &file], &retired);
    assert_eq!(err, "", "-q: nothing but errors");
    let o = graphc_env(&["-q", "run", "missing.gir"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!text(&o).1.is_empty(), "errors still show with -q");

    let err = stderr_of(&["run", &file], &[("RUST_LOG", "graphc=debug")]);
    assert!(err.contains("info: session ready") && err.contains("debug: [graphc::driver"), "{err}");
    // -v and -q win over RUST_LOG.
    let err = stderr_of(&["-q", "run", &file], &[("RUST_LOG", "graphc=debug")]);
    assert_eq!(err, "");
    let err = stderr_of(&["run", &file], &[("RUST_LOG", "graphc=loud")]);
    assert!(err.starts_with("warning: RUST_LOG=graphc=loud: "), "a bad RUST_LOG is a warning:\n{err}");
    assert!(!err.contains("info:"), "{err}");

    let o = graphc_env(&["-q", "-v", "run", &file], &[]);
    assert_eq!(o.status.code(), Some(1), "-q and -v conflict");
}

#[test]
fn check_q_prints_nothing_for_valid_files() {
    let o = graphc_env(&["check", "-q", &example("mlp.gir")], &[]);
    assert!(o.status.success());
    assert_eq!(text(&o), (String::new(), String::new()));
}
