//! Memory limits through the binary: absurd tensors, live sets over the budget and lowered
//! process limits end in an error and exit code 1, never a panic (101) or an abort (134).

use std::path::PathBuf;
use std::process::{Command, Output};

fn graphc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_graphc")).args(args).output().expect("graphc runs")
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn example(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    root.join("ir-spec/examples").join(name).display().to_string()
}

/// A splat whose type has `n` elements, reduced to a scalar (small enough to fold).
fn huge_splat(n: &str) -> String {
    format!(
        "graph @g() -> (y: f32[]) {{\n  %c = constant {{value = dense<1.0> : f32[{n}]}} : f32[{n}]\n  \
         %y = reduce_sum %c {{axes = [0]}} : f32[]\n  return %y\n}}\n"
    )
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn huge_splat_constants_are_errors_in_every_subcommand() {
    for (i, n) in ["2305843009213693952", "2000000000000000000"].into_iter().enumerate() {
        let p = tmp(&format!("splat{i}.gir"), &huge_splat(n));
        let p = p.to_str().unwrap();
        assert!(graphc(&["check", p]).status.success());
        for cmd in ["run", "bench"] {
            let out = graphc(&[cmd, p]);
            assert_eq!(out.status.code(), Some(1), "{cmd} {n}: {}", text(&out));
            assert!(text(&out).contains(&format!("a tensor of type f32[{n}]")), "{cmd}: {}", text(&out));
        }
        for backend in ["interp", "jit"] {
            let out = graphc(&["run", "--backend", backend, p]);
            assert_eq!(out.status.code(), Some(1), "run --backend {backend}: {}", text(&out));
        }
        // opt leaves the constant unfolded; simulate predicts without building it.
        let out = graphc(&["opt", p]);
        assert!(out.status.success(), "opt: {}", text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("reduce_sum %c"), "opt: {}", text(&out));
        let out = graphc(&["simulate", p]);
        assert!(out.status.success(), "simulate: {}", text(&out));
    }
}
