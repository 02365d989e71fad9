//! FileCheck-style tests of the passes: each `tests/filetests/*.gir` names its pipeline in a
//! `// RUN: PASSES` line and states what the output must hold in `// CHECK:` (the text occurs,
//! after the previous match), `// CHECK-NEXT:` (on the line after the previous match),
//! `// CHECK-NOT:` (does not occur between the previous match and the next one, or the end)
//! and `// KERNELS: N` (the kernel count after the pipeline) lines. `// DEVICES: FILE` places
//! on a device spec (found beside the test, else in ir-spec/examples); `// ERROR: TEXT` says
//! the pipeline must fail with an error containing TEXT.

use graphc::passes::{kernel_count, PassContext, PassManager};
use graphc::placement::cluster::Cluster;
use graphc_ir::{parse_module, print_module};
use std::path::PathBuf;

#[derive(Debug)]
enum Check {
    Find(String),
    Next(String),
    Not(String),
}

#[derive(Debug, Default)]
struct Directives {
    run: Option<String>,
    kernels: Option<usize>,
    checks: Vec<Check>,
    devices: Option<String>,
    error: Option<String>,
}

fn directives(text: &str) -> Directives {
    let (mut run, mut kernels, mut checks) = (None, None, Vec::new());
    let (mut devices, mut error) = (None, None);
    for line in text.lines().map(str::trim) {
        if let Some(d) = line.strip_prefix("// DEVICES:") {
            devices = Some(d.trim().to_string());
        } else if let Some(e) = line.strip_prefix("// ERROR:") {
            error = Some(e.trim().to_string());
        } else if let Some(p) = line.strip_prefix("// RUN:") {
            run = Some(p.trim().to_string());
        } else if let Some(k) = line.strip_prefix("// KERNELS:") {
            kernels = Some(k.trim().parse().expect("KERNELS takes a number"));
        } else if let Some(c) = line.strip_prefix("// CHECK-NEXT:") {
            checks.push(Check::Next(c.trim().to_string()));
        } else if let Some(c) = line.strip_prefix("// CHECK-NOT:") {
            checks.push(Check::Not(c.trim().to_string()));
        } else if let Some(c) = line.strip_prefix("// CHECK:") {
            checks.push(Check::Find(c.trim().to_string()));
        }
    }
    Directives { run, kernels, checks, devices, error }
}

/// Matches the checks against the output lines; the first failure, described.
fn file_check(output: &str, checks: &[Check]) -> Result<(), String> {
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim_start().starts_with("// ")).collect();
    let mut at = 0; // the first line after the previous match
    let mut nots: Vec<&str> = Vec::new();
    let not_in = |nots: &[&str], range: &[&str]| -> Result<(), String> {
        for n in nots {
            if let Some(l) = range.iter().find(|l| l.contains(n)) {
                return Err(format!("CHECK-NOT: '{n}' occurs in: {l}"));
            }
        }
        Ok(())
    };
    for c in checks {
        match c {
            Check::Not(s) => nots.push(s),
            Check::Find(s) => {
                let i = (at..lines.len())
                    .find(|&i| lines[i].contains(s.as_str()))
                    .ok_or(format!("CHECK: '{s}' not found"))?;
                not_in(&nots, &lines[at..i])?;
                nots.clear();
                at = i + 1;
            }
            Check::Next(s) => {
                if !lines.get(at).is_some_and(|l| l.contains(s.as_str())) {
                    return Err(format!("CHECK-NEXT: '{s}' is not on the next line: {:?}", lines.get(at)));
                }
                not_in(&nots, &[])?;
                nots.clear();
                at += 1;
            }
        }
    }
    not_in(&nots, &lines[at.min(lines.len())..])
}

#[test]
fn filetests() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/filetests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gir"))
        .collect();
    files.sort();
    assert!(files.len() >= 30, "at least 30 filetests, found {}", files.len());
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Directives { run, kernels, checks, devices, error } = directives(&text);
        let result = (|| {
            let run = run.ok_or("no // RUN: line")?;
            let mut m = parse_module(&text).map_err(|d| format!("does not parse: {d:?}"))?;
            let mut ctx = PassContext::default();
            if let Some(file) = devices {
                let beside = dir.join(&file);
                let path = if beside.exists() { beside } else { dir.join("../../ir-spec/examples").join(&file) };
                ctx.cluster = Cluster::load(&path)?;
            }
            let mut pm = PassManager::with_context(&run, &ctx)?;
            pm.verify_each = true;
            let ran = pm.run(&mut m, &mut |_| {}).map_err(|e| e.message);
            match (ran, error) {
                (Err(e), Some(want)) if e.contains(&want) => return Ok(()),
                (Err(e), Some(want)) => return Err(format!("ERROR: expected '{want}', got: {e}")),
                (Ok(_), Some(want)) => {
                    return Err(format!("ERROR: expected '{want}', but it passed:\n{}", print_module(&m)))
                }
                (Err(e), None) => return Err(e),
                (Ok(_), None) => {}
            }
            let out = print_module(&m);
            if checks.is_empty() && kernels.is_none() {
                return Err("no CHECK or KERNELS line".to_string());
            }
            if let Some(k) = kernels {
                let got: usize = m.graphs.iter().map(kernel_count).sum();
                if got != k {
                    return Err(format!("KERNELS: expected {k}, got {got}\n{out}"));
                }
            }
            file_check(&out, &checks).map_err(|e| format!("{e}\n--- output ---\n{out}"))
        })();
        if let Err(e) = result {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} filetests failed:\n{}", failures.len(), files.len(), failures.join("\n\n"));
}

#[test]
fn file_check_itself_can_fail() {
    let out = "a\nb\nc\n";
    assert!(file_check(out, &[Check::Find("b".into()), Check::Next("c".into())]).is_ok());
    assert!(file_check(out, &[Check::Find("c".into()), Check::Find("a".into())]).is_err());
    assert!(file_check(out, &[Check::Find("a".into()), Check::Next("c".into())]).is_err());
    assert!(file_check(out, &[Check::Not("b".into()), Check::Find("c".into())]).is_err());
    assert!(file_check(out, &[Check::Find("b".into()), Check::Not("a".into())]).is_ok());
}
