//! The subcommands over IR text: `check`, `fmt`, `opt`, `dot`, `import`.

use super::args::{CheckArgs, DotArgs, Emit, FmtArgs, ImportArgs, OptArgs};
use super::output::write_output;
use graphc::driver::{self, plural, Reported};
use graphc_ir::{print_module, Module};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// Loads a `.gir` or `.onnx` file with the default import options.
pub fn load(path: &Path) -> Result<(graphc_ir::SourceFile, Module), Reported> {
    driver::load(path, &graphc_onnx::ImportOptions::default())
}

/// `graphc check`: each file parsed, verified and its shapes inferred; with --json one object
/// for all the files, `{"ok": BOOL, "files": [...]}` in the order given (the diagnostics are
/// on standard error as well).
pub fn check(a: &CheckArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let mut ok = true;
    let mut results = Vec::new();
    for path in &a.files {
        match driver::load_diagnosed(path, &graphc_onnx::ImportOptions::default()) {
            Ok((file, m)) => {
                let nodes: usize = m.graphs.iter().map(|g| g.node_count()).sum();
                if a.json {
                    results.push(json!({"file": file.name, "ok": true, "graphs": m.graphs.len(), "nodes": nodes}));
                } else if !quiet {
                    say!(
                        "{}: ok ({} graph{}, {nodes} node{})",
                        file.name,
                        m.graphs.len(),
                        plural(m.graphs.len()),
                        plural(nodes)
                    );
                }
            }
            Err(f) => {
                eprint!("{}", f.rendered);
                ok = false;
                if a.json {
                    results.push(failure_json(path, &f));
                }
            }
        }
    }
    if a.json {
        say!("{}", json!({"ok": ok, "files": results}));
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// A file that failed `check`, as JSON: each diagnostic's severity, message, place (1-based
/// line and column, where it has one), notes and help, and the text as rendered.
fn failure_json(path: &Path, f: &driver::LoadFailure) -> serde_json::Value {
    let place = |span: Option<graphc_ir::Span>| match (span, &f.file) {
        (Some(s), Some(file)) => {
            let (line, column) = file.line_col(s.start as usize);
            json!({"line": line, "column": column})
        }
        _ => json!({"line": null, "column": null}),
    };
    let diagnostics: Vec<serde_json::Value> = f
        .diagnostics
        .iter()
        .map(|d| {
            let mut o = place(d.span);
            o["severity"] = json!(match d.severity {
                graphc_ir::Severity::Error => "error",
                graphc_ir::Severity::Warning => "warning",
                graphc_ir::Severity::Note => "note",
            });
            o["message"] = json!(d.message);
            o["notes"] = d
                .notes
                .iter()
                .map(|(span, note)| {
                    let mut n = place(Some(*span));
                    n["message"] = json!(note);
                    n
                })
                .collect();
            o["help"] = json!(d.help);
            o
        })
        .collect();
    let name = f.file.as_ref().map_or_else(|| path.display().to_string(), |file| file.name.clone());
    let errors = f.diagnostics.iter().filter(|d| d.severity == graphc_ir::Severity::Error).count();
    json!({"file": name, "ok": false, "errors": errors, "diagnostics": diagnostics, "rendered": f.rendered})
}

pub fn fmt(a: &FmtArgs) -> anyhow::Result<ExitCode> {
    let (file, m) = load(&a.file)?;
    let text = print_module(&m);
    if a.check {
        if text != file.text {
            eprintln!("{}: not in canonical form; run `graphc fmt --in-place {}`", file.name, file.name);
            return Ok(ExitCode::FAILURE);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if a.in_place && a.file != Path::new("-") {
        super::output::write_file(&a.file, &text)?;
    } else {
        std::io::stdout().write_all(text.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn opt(a: &OptArgs) -> anyhow::Result<ExitCode> {
    use graphc::lower::cpu;
    use graphc::passes::{kernel_count, timing_table, PassManager, PrintAfter};
    let ctx = a.devices.devices().context()?;
    let lowered = graphc::backend::LOWERINGS.split(',').all(|l| a.passes.split(',').any(|p| p.trim() == l));
    let pipeline = if lowered { a.passes.clone() } else { format!("{},{}", graphc::backend::LOWERINGS, a.passes) };
    let mut pm = PassManager::with_context(&pipeline, &ctx).map_err(|e| anyhow::anyhow!("--passes: {e}"))?;
    for name in &a.print_after {
        if !graphc::passes::PASSES.iter().any(|(k, _)| k == name) {
            anyhow::bail!("--print-after: unknown pass '{name}'");
        }
    }
    pm.verify_each = a.verify_each;
    pm.print_after = if a.print_after_all {
        PrintAfter::All
    } else if a.print_after.is_empty() {
        PrintAfter::Never
    } else {
        PrintAfter::Some(a.print_after.clone())
    };
    let weights = if a.emit == Emit::Ir { driver::weights_output(a.output.as_deref(), a.inline_weights) } else { None };
    check_output(&a.file, &a.devices.files(), a.output.as_deref(), weights.as_deref())?;
    let (file, mut m) = load(&a.file)?;
    let count = |m: &Module| -> (usize, usize) {
        (m.graphs.iter().map(|g| g.node_count()).sum(), m.graphs.iter().map(kernel_count).sum())
    };
    let before = count(&m);
    let timings = match pm.run(&mut m, &mut |text| eprint!("{text}")) {
        Ok(t) => t,
        Err(e) if !e.diagnostics.is_empty() => {
            return Err(graphc::driver::Reported(e.diagnostics.iter().map(|d| d.render(&file)).collect()).into())
        }
        Err(e) => anyhow::bail!("{}: {e}", file.name),
    };
    for w in ctx.take_warnings() {
        eprint!("{}", w.render(&file));
    }
    if a.time_passes {
        eprint!("{}", timing_table(&timings));
    }
    if a.stats {
        let after = count(&m);
        eprintln!("nodes: {} -> {}; kernels: {} -> {}", before.0, after.0, before.1, after.1);
    }
    let text = match a.emit {
        Emit::Ir => {
            driver::place_weights(&mut m, a.output.as_deref(), a.inline_weights)?;
            print_module(&m)
        }
        Emit::Plan => graphc::lower::plan::print_kernels(&m),
        Emit::Clif => cpu::listing(&m, a.isa, cpu::Emit::Clif).map_err(|e| anyhow::anyhow!("{}: {e}", file.name))?,
        Emit::Asm => cpu::listing(&m, a.isa, cpu::Emit::Asm).map_err(|e| anyhow::anyhow!("{}: {e}", file.name))?,
        Emit::Mlir => graphc::lower::mlir::listing(
            &m,
            graphc::lower::mlir::lanes_for(a.isa).map_err(|e| anyhow::anyhow!("--isa: {e}"))?,
        )
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.name))?,
    };
    write_output(a.output.as_deref(), &text)?;
    Ok(ExitCode::SUCCESS)
}

pub fn dot(a: &DotArgs) -> anyhow::Result<ExitCode> {
    let (file, m) = load(&a.file)?;
    let m = match &a.devices.devices {
        Some(_) => driver::place_and_partition(a.devices.devices().context()?, &file, m)?.module,
        None => m,
    };
    say!("{}", graphc::dot::to_dot(&m));
    Ok(ExitCode::SUCCESS)
}

pub fn import(a: &ImportArgs) -> anyhow::Result<ExitCode> {
    let weights = driver::weights_output(a.output.as_deref(), a.inline_weights);
    check_output(&a.model, &[], a.output.as_deref(), weights.as_deref())?;
    let options = graphc_onnx::ImportOptions {
        weights_as_variables: a.weights_as_variables,
        ..driver::import_options_for(&a.model, &[], &a.shapes)?
    };
    let mut m = graphc_onnx::import_file(&a.model, &options).map_err(|e| anyhow::anyhow!("{e}"))?;
    driver::place_weights(&mut m, a.output.as_deref(), a.inline_weights)?;
    write_output(a.output.as_deref(), &print_module(&m))?;
    Ok(ExitCode::SUCCESS)
}

/// Refuses `-o OUT` (other than `-`, standard output) and the weights file beside it where
/// they cannot be written or would replace a file read, before any work.
fn check_output(
    input: &Path,
    reads: &[(&str, &Path)],
    out: Option<&Path>,
    weights: Option<&Path>,
) -> anyhow::Result<()> {
    let Some(out) = out.filter(|o| o.as_os_str() != "-") else { return Ok(()) };
    let mut files = driver::Files::reading(input, &[]);
    for (what, path) in reads {
        files.read(what, path);
    }
    files.write("-o", Some(out)).write("the weights file of -o", weights).check()
}
