//! FileCheck-style tests of the passes and the CPU backend's kernels: each
//! `tests/filetests/*.gir` names its pipeline in a `// RUN: PASSES` line and states what the
//! output must hold in `// CHECK:` (the text occurs, after the previous match), `// CHECK-NEXT:`
//! (on the line after the previous match), `// CHECK-NOT:` (does not occur between the previous
//! match and the next one, or the end) and `// KERNELS: N` (the kernel count after the
//! pipeline) lines. `// DEVICES: FILE` places on a device spec (found beside the test, else in
//! ir-spec/examples); `// ERROR: TEXT` says the pipeline must fail with an error containing
//! TEXT.
//!
//! The output is the IR after the pipeline, or what `// EMIT: KIND` names (as `graphc opt
//! --emit KIND` prints it): `plan`, the plan of every kernel
//! (`graphc::lower::plan::print_kernels`); `clif`, every kernel's Cranelift IR as generated,
//! before Cranelift's optimizations, for the SSE instruction set (`--isa sse`, so that the text
//! is the same on every x86-64 host, AVX2 and AVX-512 alike; skipped on other hosts).
//!
//! A `// OUTPUT:` line makes a precise-output test, as Cranelift's own filetests are: the rest
//! of the file is the whole expected output, each line `// `-prefixed (`//` alone for an empty
//! one), compared exactly. `clif` tests must have one. `GRAPHC_BLESS=1 cargo test -p graphc
//! --test filetests` rewrites every OUTPUT block with what the test printed (and adds one to a
//! `clif` test that lacks it).

use graphc::lower::cpu::{listing, Emit, Isa};
use graphc::lower::plan::print_kernels;
use graphc::passes::{kernel_count, PassContext, PassManager};
use graphc::placement::cluster::Cluster;
use graphc_ir::{parse_module, print_module, Module};
use std::path::{Path, PathBuf};

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
    emit: Option<String>,
    /// The expected output of a precise-output test.
    output: Option<String>,
}

/// The line that starts a precise-output test's expected text.
const OUTPUT: &str = "// OUTPUT:";

/// The file split at its `// OUTPUT:` line: the test, and the expected output after the line
/// (`None` without one).
fn split_output(text: &str) -> (&str, Option<&str>) {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == OUTPUT {
            return (&text[..at], Some(&text[at + line.len()..]));
        }
        at += line.len();
    }
    (text, None)
}

/// The expected output from the lines after `// OUTPUT:`: each `// TEXT` or `//`.
fn expected_output(block: &str) -> Result<String, String> {
    let mut out = String::new();
    for (i, line) in block.lines().enumerate() {
        let text = match line.strip_prefix("// ") {
            Some(t) => t,
            None if line == "//" => "",
            None => return Err(format!("OUTPUT: line {} after it is not a `// ` comment: {line:?}", i + 1)),
        };
        out.push_str(text);
        out.push('\n');
    }
    Ok(out)
}

/// `output` as an OUTPUT block, the line included.
fn output_block(output: &str) -> String {
    let mut block = format!("{OUTPUT}\n");
    for line in output.lines() {
        block.push_str(if line.is_empty() { "//" } else { "// " });
        block.push_str(line);
        block.push('\n');
    }
    block
}

fn directives(text: &str) -> Result<Directives, String> {
    let (text, block) = split_output(text);
    let (mut run, mut kernels, mut checks) = (None, None, Vec::new());
    let (mut devices, mut error, mut emit) = (None, None, None);
    for line in text.lines().map(str::trim) {
        if let Some(e) = line.strip_prefix("// EMIT:") {
            emit = Some(e.trim().to_string());
        } else if let Some(d) = line.strip_prefix("// DEVICES:") {
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
    let output = block.map(expected_output).transpose()?;
    Ok(Directives { run, kernels, checks, devices, error, emit, output })
}

/// The text a test's checks read: the IR after the pipeline, or what `// EMIT:` names; `None`
/// for a `clif` test on a host that is not x86-64.
fn emitted(m: &Module, emit: Option<&str>) -> Result<Option<String>, String> {
    Ok(Some(match emit {
        None | Some("ir") => print_module(m),
        Some("plan") => print_kernels(m),
        Some("clif") if !cfg!(target_arch = "x86_64") => return Ok(None),
        Some("clif") => listing(m, Isa::Sse, Emit::Clif)?,
        Some(other) => return Err(format!("EMIT: expected ir, plan or clif, got '{other}'")),
    }))
}

/// The first line where `got` differs from `want`, described.
fn first_difference(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let at = (0..w.len().max(g.len())).find(|&i| w.get(i) != g.get(i)).unwrap_or(0);
    format!(
        "OUTPUT differs at line {}:\n  expected: {:?}\n  got:      {:?}\n(GRAPHC_BLESS=1 rewrites it)",
        at + 1,
        w.get(at),
        g.get(at)
    )
}

/// Rewrites the OUTPUT block of `path` (adding one if it has none) with `output`.
fn bless(path: &Path, text: &str, output: &str) -> Result<(), String> {
    let (test, _) = split_output(text);
    let mut new = test.to_string();
    if !new.is_empty() && !new.ends_with('\n') {
        new.push('\n');
    }
    new.push_str(&output_block(output));
    std::fs::write(path, new).map_err(|e| format!("cannot bless {}: {e}", path.display()))
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
    let blessing = std::env::var_os("GRAPHC_BLESS").is_some();
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let result = (|| {
            let Directives { run, kernels, checks, devices, error, emit, output } = directives(&text)?;
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
            let ran = pm.run(&mut m, &mut |_| {}).map_err(|e| e.to_string());
            match (ran, error) {
                (Err(e), Some(want)) if e.contains(&want) => return Ok(()),
                (Err(e), Some(want)) => return Err(format!("ERROR: expected '{want}', got: {e}")),
                (Ok(_), Some(want)) => {
                    return Err(format!("ERROR: expected '{want}', but it passed:\n{}", print_module(&m)))
                }
                (Err(e), None) => return Err(e),
                (Ok(_), None) => {}
            }
            let Some(out) = emitted(&m, emit.as_deref())? else { return Ok(()) };
            let precise = output.is_some() || emit.as_deref() == Some("clif");
            if checks.is_empty() && kernels.is_none() && !precise {
                return Err("no CHECK, KERNELS or OUTPUT line".to_string());
            }
            if let Some(k) = kernels {
                let got: usize = m.graphs.iter().map(kernel_count).sum();
                if got != k {
                    return Err(format!("KERNELS: expected {k}, got {got}\n{out}"));
                }
            }
            file_check(&out, &checks).map_err(|e| format!("{e}\n--- output ---\n{out}"))?;
            if precise {
                if blessing {
                    if output.as_deref() != Some(out.as_str()) {
                        bless(path, &text, &out)?;
                    }
                } else {
                    let want = output.ok_or("a clif test needs an OUTPUT block (GRAPHC_BLESS=1 writes it)")?;
                    if want != out {
                        return Err(format!("{}\n--- output ---\n{out}", first_difference(&want, &out)));
                    }
                }
            }
            Ok(())
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

#[test]
fn output_blocks_round_trip() {
    for output in ["", "a\n", "a\n\n  b\n", "; kernel 1: @g\nfunction u0:3() {\n\nblock0:\n    return\n}\n"] {
        let text = format!("// RUN: fuse\ngraph @g() -> () {{\n  return\n}}\n{}", output_block(output));
        let (test, block) = split_output(&text);
        assert!(test.ends_with("}\n"), "{test:?}");
        assert_eq!(expected_output(block.unwrap()).unwrap(), output);
    }
    assert!(expected_output("// a\nb\n").is_err(), "every line of the block is a comment");
    assert!(first_difference("a\nb\n", "a\nc\n").contains("line 2"));
}

/// `graphc` with `args`: its exit status, standard output and standard error.
fn graphc(args: &[&str]) -> (bool, String, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_graphc")).args(args).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn emit_stages_and_code_dumps_from_the_command_line() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/filetests/plan_matmul_epilogue.gir");
    let path = file.to_str().unwrap();
    let mut m = parse_module(&std::fs::read_to_string(&file).unwrap()).unwrap();
    PassManager::new("fuse").unwrap().run(&mut m, &mut |_| {}).unwrap();
    let (ok, ir, err) = graphc(&["opt", path, "--passes", "fuse"]);
    assert!(ok, "{err}");
    assert_eq!(ir, print_module(&m), "--emit ir is the default");
    let (ok, plan, err) = graphc(&["opt", path, "--passes", "fuse", "--emit", "plan"]);
    assert!(ok, "{err}");
    assert_eq!(plan, print_kernels(&m));
    if cfg!(target_arch = "x86_64") {
        let (ok, clif, err) = graphc(&["opt", path, "--passes", "fuse", "--emit", "clif", "--isa", "sse"]);
        assert!(ok, "{err}");
        assert_eq!(clif, listing(&m, Isa::Sse, Emit::Clif).unwrap());
        assert!(clif.contains("; kernel 2: @g: %z = matmul\n; no code"), "{clif}");
    }
    let (ok, asm, err) = graphc(&["opt", path, "--passes", "fuse", "--emit", "asm"]);
    assert!(ok, "{err}");
    assert!(asm.starts_with("; kernel 1: @g: %y = fusion {kind = \"output\"}\n; graphc_loop_1\n"), "{asm}");
    let (ok, _, err) = graphc(&["opt", path, "--emit", "plan", "--isa", "avx"]);
    assert!(!ok && err.contains("native, sse"), "{err}");

    let dir = std::env::temp_dir().join(format!("graphc-dump-code-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (ok, _, err) = graphc(&["bench", path, "--iters", "1", "--warmup", "0", "--dump-code", dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    let code = std::fs::read(dir.join("graphc_loop_1.bin")).expect("the epilogue's code");
    assert!(!code.is_empty());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "one kernel has code");
    let _ = std::fs::remove_dir_all(&dir);
    let (ok, _, err) = graphc(&["run", path, "--isa", "sse"]);
    assert!(ok, "{err}");
}
