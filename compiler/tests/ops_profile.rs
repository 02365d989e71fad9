//! The per-op profile (`graphc bench --ops`, `graphc run --profile-ops`): every node that ran
//! is a row, what ran it agrees with the kernel planner (a node with a kernel plan as
//! Cranelift's, or the CPU runtime's where the plan has no code; the others on the reference
//! kernels or the interpreter), the shares sum to
//! 100%, the lines agree with `--json`, and `--backend interp` runs nothing compiled. Times
//! are not asserted.

mod common;

use common::{example, graphc, text};
use graphc::backend::backend;
use graphc::driver::{import_options_for, load, optimize};
use graphc::lower::plan;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A small model whose last op has no compiled kernel (top_k), after fused ones.
const RANKED: &str = "\
graph @ranked(%x: f32[8,16], %w: f32[16,12], %b: f32[12]) -> (best: f32[8,3], at: i64[8,3]) {
  %h = matmul %x, %w : f32[8,12]
  %hb = add %h, %b : f32[8,12]
  %a = tanh %hb : f32[8,12]
  %best, %at = top_k %a {k = 3, axis = 1} : f32[8,3], i64[8,3]
  return %best, %at
}
";

fn ranked() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-ops-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ranked.gir");
    std::fs::write(&path, RANKED).unwrap();
    path
}

/// Runs graphc, which must succeed; its standard output.
fn ok(args: &[&str]) -> String {
    let o = graphc(args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "graphc {args:?} failed:\n{out}\n{err}");
    out
}

fn json(args: &[&str]) -> Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
}

/// The nodes of `file` (optimized for `backend_name`) that have a kernel plan, as the profile
/// names them (the value each defines), each with the path that runs it: Cranelift's code, or
/// the CPU runtime's kernel for a plan without code.
fn planned(file: &str, backend_name: &str) -> BTreeMap<String, &'static str> {
    let path = Path::new(file);
    let (source, m) = load(path, &import_options_for(path, &[], &[]).unwrap()).unwrap();
    let m = optimize(backend(backend_name).unwrap(), m, false, &source).unwrap();
    plan::kernels(&m)
        .iter()
        .map(|k| {
            let g = m.graph(&k.graph).unwrap();
            let v = g.nodes[k.node].results[0];
            let path = if k.plan.code().is_some() { "cranelift" } else { "cpu-runtime" };
            (format!("%{}", g.values[v].name.as_deref().unwrap()), path)
        })
        .collect()
}

/// The profile's rows as (node, path).
fn rows(ops: &Value) -> Vec<(String, String)> {
    ops["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["node"].as_str().unwrap().to_string(), r["path"].as_str().unwrap().to_string()))
        .collect()
}

/// Checks the sums: shares add up to 100%, per path too, and the reference share is the
/// reference rows'.
fn check_sums(ops: &Value) {
    let rows = ops["rows"].as_array().unwrap();
    let share: f64 = rows.iter().map(|r| r["share_percent"].as_f64().unwrap()).sum();
    assert!((share - 100.0).abs() < 0.01, "the shares sum to {share}%: {ops}");
    let by_path: f64 = ops["by_path_percent"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
    assert!((by_path - 100.0).abs() < 0.01, "the paths' shares sum to {by_path}%: {ops}");
    let reference: f64 =
        rows.iter().filter(|r| r["path"] == "reference").map(|r| r["share_percent"].as_f64().unwrap()).sum();
    let said = ops["reference_percent"].as_f64().unwrap();
    assert!((reference - said).abs() < 0.01, "reference share {said}%, its rows {reference}%");
    let ms: f64 = rows.iter().map(|r| r["ms_per_step"].as_f64().unwrap()).sum();
    let node_ms = ops["node_ms_per_step"].as_f64().unwrap();
    assert!((ms - node_ms).abs() <= 1e-9 + 1e-6 * node_ms, "rows {ms} ms, node time {node_ms} ms");
    // Slowest first.
    let times: Vec<f64> = rows.iter().map(|r| r["ms_per_step"].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "not slowest first: {times:?}");
}

/// Every node that ran is a row; those with a kernel plan ran Cranelift's kernel, the others
/// a reference kernel (or, for ops that are no kernel, the interpreter; a step-invariant
/// constant is kept).
fn check_against_the_planner(file: &str, ops: &Value, nodes_per_step: u64) {
    let rows = rows(ops);
    assert_eq!(rows.len() as u64, nodes_per_step, "one row per node that ran: {rows:?}");
    let planned = planned(file, "jit");
    assert!(!planned.is_empty());
    for (node, path) in &rows {
        if let Some(want) = planned.get(node) {
            assert_eq!(path, want, "{node} has a kernel plan: {rows:?}");
        } else {
            assert!(["reference", "interpreter", "kept"].contains(&path.as_str()), "{node} ran on {path}: {rows:?}");
        }
    }
    for node in planned.keys() {
        assert!(rows.iter().any(|(n, _)| n == node), "{node} has a kernel but no row: {rows:?}");
    }
}

#[test]
fn bench_ops_lists_every_node_compiled_or_reference_as_the_planner_says() {
    let ranked = ranked();
    let ranked = ranked.to_str().unwrap();
    for file in [example("mlp.gir"), example("cnn.gir"), ranked.to_string()] {
        let run = json(&["run", &file, "--backend", "jit", "--json"]);
        let j = json(&["bench", &file, "--backend", "jit", "--ops", "--iters", "3", "--warmup", "1", "--json"]);
        let ops = &j["ops"];
        assert_eq!(ops["steps"], 3, "the timed steps: {ops}");
        check_against_the_planner(&file, ops, run["nodes"].as_u64().unwrap());
        check_sums(ops);
    }
    // The top_k runs on its reference kernel, the fused layer compiled.
    let j = json(&["bench", ranked, "--backend", "jit", "--ops", "--iters", "2", "--json"]);
    let rows = rows(&j["ops"]);
    assert!(rows.contains(&("%best".into(), "reference".into())), "{rows:?}");
    assert!(rows.contains(&("%a".into(), "cranelift".into())), "{rows:?}");
    let a = j["ops"]["rows"].as_array().unwrap().iter().find(|r| r["node"] == "%a").unwrap();
    assert_eq!(a["op"], "fusion(matmul, add, tanh)", "a fusion is one row with its ops");
    assert_eq!(a["operands"], serde_json::json!(["f32[8,16]", "f32[16,12]", "f32[12]"]));
    assert_eq!(a["results"], serde_json::json!(["f32[8,12]"]));
    assert!(a["location"].as_str().unwrap().ends_with("ranked.gir:4:3"), "{a}");
    assert!(j["ops"]["reference_percent"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_table_agrees_with_the_json() {
    let ranked = ranked();
    let file = ranked.to_str().unwrap();
    let j = json(&["bench", file, "--backend", "jit", "--ops", "--iters", "2", "--json"]);
    let want: BTreeMap<String, String> = rows(&j["ops"]).into_iter().collect();
    let out = ok(&["bench", file, "--backend", "jit", "--ops", "--iters", "2"]);
    let lines: Vec<&str> = out.lines().collect();
    let head = lines.iter().position(|l| l.trim_start().starts_with("node ")).unwrap_or_else(|| panic!("{out}"));
    let columns: Vec<&str> = lines[head].split_whitespace().collect();
    assert_eq!(columns, ["node", "op", "shapes", "ran", "on", "ms/step", "share"]);
    let mut got = BTreeMap::new();
    let mut reference_share = 0.0;
    for l in &lines[head + 1..head + 1 + want.len()] {
        let words: Vec<&str> = l.split_whitespace().collect();
        let share: f64 = words[words.len() - 1].trim_end_matches('%').parse().unwrap();
        let path = words[words.len() - 3];
        if path == "reference" {
            reference_share += share;
        }
        got.insert(words[0].to_string(), path.to_string());
    }
    assert_eq!(got, want, "the rows of the table and of the JSON:\n{out}");
    let last = lines.last().unwrap();
    let said: f64 = last
        .strip_prefix("reference kernels: ")
        .and_then(|s| s.split('%').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("the last line sums the reference kernels: {last}"));
    assert!((said - reference_share).abs() <= 0.05 * want.len() as f64, "{said} vs {reference_share}:\n{out}");

    // Rows past --ops-top are one 'others' row.
    let out = ok(&["bench", file, "--backend", "jit", "--ops", "--ops-top", "1", "--iters", "2"]);
    let lines: Vec<&str> = out.lines().collect();
    let head = lines.iter().position(|l| l.trim_start().starts_with("node ")).unwrap();
    assert!(lines[head + 2].trim_start().starts_with(&format!("others ({} nodes)", want.len() - 1)), "{out}");
    assert!(lines[head + 3].starts_with("by path: "), "{out}");
}

#[test]
fn the_interpreter_runs_every_row_on_the_reference_kernels() {
    let file = example("mlp.gir");
    let j = json(&["bench", &file, "--backend", "interp", "--ops", "--iters", "2", "--json"]);
    let rows = rows(&j["ops"]);
    assert_eq!(rows.len(), 6, "mlp's six nodes, unfused: {rows:?}");
    for (node, path) in &rows {
        assert_eq!(path, "reference", "{node}");
    }
    check_sums(&j["ops"]);
    assert!((j["ops"]["reference_percent"].as_f64().unwrap() - 100.0).abs() < 0.01);
}

#[test]
fn run_profile_ops_covers_the_nodes_inside_a_loop() {
    let file = example("loop.gir");
    let j = json(&["run", &file, "--graph", "power", "--steps", "3", "--profile-ops", "--json"]);
    let ops = &j["ops"];
    assert_eq!(ops["steps"], 2, "steps after the first: {ops}");
    check_sums(ops);
    let rows = rows(ops);
    // The loop's own time is a row, and so is each node of its body, once.
    assert!(rows.iter().any(|(n, p)| n == "%i" && p == "interpreter"), "{rows:?}");
    for body in ["%more", "%next", "%prod"] {
        assert_eq!(rows.iter().filter(|(n, _)| n == body).count(), 1, "{body}: {rows:?}");
    }
    // Without the flag there is no profile.
    let j = json(&["run", &file, "--graph", "power", "--json"]);
    assert!(j.get("ops").is_none());
}

#[test]
fn ops_top_needs_ops() {
    let o = graphc(&["bench", &example("mlp.gir"), "--ops-top", "3"]);
    let (_, err) = text(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("--ops"), "{err}");
}

#[test]
fn partitions_are_rows_of_their_graphs() {
    let file = example("two_branches.gir");
    let devices = example("two_cpus.devices.toml");
    let j = json(&["run", &file, "--devices", &devices, "--steps", "2", "--profile-ops", "--backend", "jit", "--json"]);
    let ops = &j["ops"];
    check_sums(ops);
    let graphs: BTreeMap<&str, usize> = ops["rows"].as_array().unwrap().iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r["graph"].as_str().unwrap()).or_default() += 1;
        m
    });
    assert_eq!(graphs.len(), 2, "one graph per CPU: {graphs:?}");
    assert_eq!(graphs.values().sum::<usize>() as u64, j["nodes"].as_u64().unwrap(), "every node that ran: {ops}");
    // A recv's time is mostly waiting for the other partition: it says so, and no other row does.
    let rows = ops["rows"].as_array().unwrap();
    let recvs: Vec<&Value> = rows.iter().filter(|r| r["op"] == "recv").collect();
    assert!(!recvs.is_empty(), "the partitions exchange tensors: {ops}");
    assert!(recvs.iter().all(|r| r["path"] == "waiting"), "{recvs:?}");
    assert!(rows.iter().filter(|r| r["op"] != "recv").all(|r| r["path"] != "waiting"), "{ops}");
}
