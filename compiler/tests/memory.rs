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
        // A graph input of that type gets no random data either.
        let input = tmp(
            &format!("input{i}.gir"),
            &format!("graph @g(%x: f32[{n}]) -> (y: f32[{n}]) {{\n  %y = neg %x : f32[{n}]\n  return %y\n}}\n"),
        );
        for cmd in ["run", "bench"] {
            let out = graphc(&[cmd, input.to_str().unwrap()]);
            assert_eq!(out.status.code(), Some(1), "{cmd} {n}: {}", text(&out));
            assert!(text(&out).contains(&format!("input 'x' of @g: a tensor of type f32[{n}]")), "{}", text(&out));
        }
        // opt leaves the constant unfolded; simulate predicts without building it.
        let out = graphc(&["opt", p]);
        assert!(out.status.success(), "opt: {}", text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("reduce_sum %c"), "opt: {}", text(&out));
        let out = graphc(&["simulate", p]);
        assert!(out.status.success(), "simulate: {}", text(&out));
    }
}

/// Kernels over more bytes than i64 offsets reach are not planned (compiling one overflowed
/// in debug builds): the graph fails as too large to allocate, as in the interpreter.
#[test]
fn kernels_past_what_offsets_reach_are_not_compiled() {
    let n = "4611686018427387905";
    let p = tmp(
        "huge_relu.gir",
        &format!(
            "graph @g() -> (y: f32[{n}]) {{\n  %x = constant {{value = dense<-1.0> : f32[{n}]}} : f32[{n}]\n  \
             %y = relu %x : f32[{n}]\n  return %y\n}}\n"
        ),
    );
    let p = p.to_str().unwrap();
    for backend in ["jit", "interp"] {
        let out = graphc(&["run", "--backend", backend, p]);
        assert_eq!(out.status.code(), Some(1), "{backend}: {}", text(&out));
        assert!(!text(&out).contains("panicked"), "{backend}: {}", text(&out));
    }
}

/// Four 1 MiB values live at once in the interpreter.
const FOUR_LIVE: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/four_live.gir"));

#[test]
fn the_memory_budget_comes_from_the_flag_or_the_environment() {
    let p = tmp("four_live.gir", FOUR_LIVE);
    let p = p.to_str().unwrap();
    for cmd in ["run", "bench"] {
        let out = graphc(&[cmd, "--backend", "interp", "--memory-limit", "3.5MiB", p]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains("node 'abs %d': the node's results: 1.0 MiB more would exceed"), "{}", text(&out));
        let out = Command::new(env!("CARGO_BIN_EXE_graphc"))
            .args([cmd, "--backend", "interp", p])
            .env("GRAPHC_MEMORY_LIMIT", "3.5MiB")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains("memory budget of 3.5 MiB"), "{}", text(&out));
    }
    assert!(graphc(&["run", "--backend", "interp", "--memory-limit", "8MiB", p]).status.success());
    // Step counts are not allocations: a huge count that fails at its first step is that
    // step's error (it aborted, reserving room for every step's time).
    let huge = "1000000000000000";
    for counts in [vec!["run", "--steps", huge], vec!["bench", "--iters", huge, "--warmup", "18446744073709551615"]] {
        let out = graphc(&[&counts[..], &["--backend", "interp", "--memory-limit", "3.5MiB", p]].concat());
        assert_eq!(out.status.code(), Some(1), "{counts:?}: {}", text(&out));
        assert!(text(&out).contains("would exceed the session's memory budget"), "{}", text(&out));
    }
    let out = graphc(&["run", "--memory-limit", "lots", p]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = Command::new(env!("CARGO_BIN_EXE_graphc")).args(["run", p]).env("GRAPHC_MEMORY_LIMIT", "lots").output();
    let out = out.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("GRAPHC_MEMORY_LIMIT: expected a size"), "{}", text(&out));
}

/// Under a lowered RLIMIT_AS, live values that outgrow the address space end in an error and
/// exit code 1 (the budget respects the limit), not an allocation failure's abort (134).
#[test]
fn a_lowered_address_space_limit_gives_an_error_not_an_abort() {
    // Four 512 MiB values, all live; 2 GiB of address space, of which the process itself
    // takes some.
    let n = 134_217_728;
    let graph = FOUR_LIVE.replace("262144", &n.to_string());
    let p = tmp("four_live_big.gir", &graph);
    let script =
        format!("ulimit -v 2097152 && exec '{}' run --backend interp '{}'", env!("CARGO_BIN_EXE_graphc"), p.display());
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("would exceed the session's memory budget"), "{}", text(&out));
}
