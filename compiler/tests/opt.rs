//! `graphc opt` and `graphc dot` from the command line.

mod common;

use common::{example, graphc, text};

#[test]
fn opt_prints_fused_ir_that_checks_and_runs() {
    let dir = std::env::temp_dir().join(format!("graphc-opt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("mlp.opt.gir");
    let o = graphc(&["opt", &example("mlp.gir"), "-o", out.to_str().unwrap(), "--stats", "--time-passes"]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.is_empty(), "with -o nothing goes to stdout: {stdout}");
    assert!(stderr.contains("kernels: 6 -> 3"), "{stderr}");
    for pass in ["canonicalize", "fold", "cse", "dce", "fuse", "total"] {
        assert!(stderr.contains(pass), "the timing table names {pass}: {stderr}");
    }
    let fused = std::fs::read_to_string(&out).unwrap();
    assert_eq!(fused.matches("= fusion").count(), 3, "{fused}");
    assert!(graphc(&["check", out.to_str().unwrap()]).status.success());
    assert!(graphc(&["fmt", "--check", out.to_str().unwrap()]).status.success(), "opt prints canonical text");
    let run = graphc(&["run", out.to_str().unwrap()]);
    assert!(run.status.success(), "{}", text(&run).1);
}

#[test]
fn print_after_all_dumps_valid_ir_after_each_pass() {
    let o = graphc(&["opt", &example("layernorm.gir"), "--print-after-all"]);
    let (_, stderr) = text(&o);
    assert!(o.status.success());
    let dumps: Vec<&str> = stderr.split("// ----- IR after ").skip(1).collect();
    // The lowerings (autodiff), then the five passes of the default pipeline.
    assert_eq!(dumps.len(), 6, "{stderr}");
    assert!(dumps[0].starts_with("autodiff"), "{stderr}");
    let dir = std::env::temp_dir().join(format!("graphc-dumps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, d) in dumps.iter().enumerate() {
        let p = dir.join(format!("dump{i}.gir"));
        std::fs::write(&p, format!("// ----- IR after {d}")).unwrap();
        let c = graphc(&["check", p.to_str().unwrap()]);
        assert!(c.status.success(), "dump {i} does not check: {}\n{d}", text(&c).1);
    }
    let one = graphc(&["opt", &example("layernorm.gir"), "--print-after", "fuse"]);
    assert_eq!(text(&one).1.matches("// ----- IR after").count(), 1);
}

#[test]
fn bad_pipelines_are_clear_errors() {
    let o = graphc(&["opt", &example("mlp.gir"), "--passes", "canonicalize,fusee"]);
    assert_eq!(o.status.code(), Some(1));
    let (_, err) = text(&o);
    assert!(err.contains("unknown pass 'fusee'") && err.contains("did you mean 'fuse'"), "{err}");
    let o = graphc(&["opt", &example("mlp.gir"), "--print-after", "nope"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn dot_draws_graphs_kernels_and_transfers() {
    let o = graphc(&["opt", &example("mlp.gir")]);
    assert!(o.status.success());
    let dir = std::env::temp_dir().join(format!("graphc-dot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("fused.gir");
    std::fs::write(&p, &o.stdout).unwrap();
    let (dot, _) = text(&graphc(&["dot", p.to_str().unwrap()]));
    assert!(dot.starts_with("digraph module {"), "{dot}");
    assert!(dot.contains("subgraph cluster_g0 {") && dot.contains("label=\"@mlp\""), "{dot}");
    assert_eq!(dot.matches("label=\"fusion kernel\"").count(), 3, "one cluster per kernel: {dot}");
    let (dot, _) = text(&graphc(&["dot", &example("partitioned.gir")]));
    assert_eq!(dot.matches("style=bold, color=blue").count(), 2, "both send/recv pairs: {dot}");
}

#[test]
fn fused_graphs_run_on_random_inputs() {
    // Seeded random inputs of the optimized graph: the gather's indices must stay in range.
    let dir = std::env::temp_dir().join(format!("graphc-opt-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("array_ops.opt.gir");
    assert!(graphc(&["opt", &example("array_ops.gir"), "-o", out.to_str().unwrap()]).status.success());
    let run = graphc(&["run", out.to_str().unwrap()]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
}

/// The graph: i32 bits of a quiet NaN with a payload and of a negative signalling NaN,
/// bitcast to f32 and back.
const NAN_BITCASTS: &str = "graph @g() -> (f: f32[2], y: i32[2]) {
  %c = constant {value = dense<[2143289345, -4194305]> : i32[2]} : i32[2]
  %f = bitcast %c {to = f32} : f32[2]
  %y = bitcast %f {to = i32} : i32[2]
  return %f, %y
}
";

#[test]
fn folding_keeps_nan_payloads_through_print_and_parse() {
    let dir = std::env::temp_dir().join(format!("graphc-opt-nan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bitcasts.gir");
    std::fs::write(&p, NAN_BITCASTS).unwrap();
    let o = graphc(&["opt", "--passes", "fold", p.to_str().unwrap()]);
    let (folded, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(!folded.contains("bitcast"), "{folded}");
    // The NaNs print as their bits (not `nan`), and the round trip gives the input back.
    assert!(folded.contains("dense<[0x7FC00001, 0xFFBFFFFF]> : f32[2]"), "{folded}");
    assert!(folded.contains("dense<[2143289345, -4194305]> : i32[2]"), "{folded}");
    // The folded text reads back to the same bits: folding it again changes nothing.
    let q = dir.join("folded.gir");
    std::fs::write(&q, &folded).unwrap();
    let again = graphc(&["opt", "--passes", "fold", q.to_str().unwrap()]);
    assert_eq!(text(&again).0, folded);
    assert!(graphc(&["fmt", "--check", q.to_str().unwrap()]).status.success(), "opt prints canonical text");
}
