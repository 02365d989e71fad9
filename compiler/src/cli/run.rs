//! `graphc run`: feeds inputs (from .npy files, or seeded random data), runs graphs for a
//! number of steps on a session, writes or summarizes the outputs, and saves or restores
//! checkpoints. The driver does the work; this prints.

use super::args::RunArgs;
use super::output::{write_file, Report};
use super::signals::Interrupt;
use anyhow::anyhow;
use graphc::driver::{self, import_options_for, plural, prepare, Inputs, Prepared, Timeline};
use graphc_ir::{Diagnostic, Module, SourceFile};
use graphc_runtime::checkpoint::Checkpointer;
use graphc_runtime::tensor::ToF64;
use graphc_runtime::{outputs, RtValue, RunError, RunOutput, SessionOptions};
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

pub fn run(a: &RunArgs) -> anyhow::Result<ExitCode> {
    // What the run reads and writes, checked before the work and again with --out-dir's files
    // once the outputs are known.
    let mut files = files(a);
    files.check()?;
    let (file, module) = driver::load(&a.file, &import_options_for(&a.file, &a.inputs, &a.shapes)?)?;
    let file = &file;
    run_loaded(a, file, module, &mut files)
}

fn run_loaded(a: &RunArgs, file: &SourceFile, module: Module, files: &mut driver::Files) -> anyhow::Result<ExitCode> {
    let inputs = Inputs {
        graphs: &a.graphs,
        flags: &a.inputs,
        fetches: &a.fetches,
        seed: a.seed,
        memory_limit: a.session.memory_limit,
    };
    let mut report = Report::new(a.json);
    report.set("file", json!(file.name));
    let backend = a.session.backend()?;
    let module = driver::optimize(backend, module, !a.fetches.is_empty(), file)?;
    let Prepared { graphs, module, job, random, placements } =
        prepare(&inputs, &a.session.devices.devices(), file, module)?;
    if let Some(dir) = &a.out_dir {
        files.write_in_dir("--out-dir", job.output_names().map(|n| outputs::output_path(dir, n))).check()?;
    }
    for p in placements {
        report.push("placement", json!(p), || p.clone());
    }
    let options = SessionOptions {
        trace: a.trace.is_some() || a.write_profile.is_some() || a.profile_ops,
        ..a.session.options()
    };
    let compile_options = a.session.compile_options();
    // Kept to the end: dropping it waits for a background tier (auto) to finish compiling.
    let (session, _compiled, warning) = driver::session(backend, module, options, &compile_options)?;
    // What ran the nodes, for the profile: the interpreter when the backend could not compile.
    let mut measured_by = backend;
    if let Some(w) = warning {
        tracing::warn!("{w}");
        measured_by = graphc::backend::backend("interp").map_err(|e| anyhow!(e))?;
    }
    if let Some(path) = &a.restore {
        // A cluster's checkpoint (its index) restores as one process's.
        let loaded = driver::read_checkpoint(path)?;
        graphc_runtime::checkpoint::restore(session.state(), &loaded)
            .map_err(|e| anyhow!("--restore {}: {e}", path.display()))?;
        let step = loaded.step;
        let n = session.state().variables.len();
        let value = json!({"path": path.display().to_string(), "step": step, "variables": n});
        report.add("restored", value, || {
            let at = step.map(|s| format!(" (saved at step {s})")).unwrap_or_default();
            format!("restored {n} variable{} from {}{at}", plural(n), path.display())
        });
    }
    let checkpointer = match (&a.checkpoint, a.checkpoint_every) {
        (Some(path), Some(_)) => Some(Checkpointer::start(path.clone())),
        _ => None,
    };
    // With a checkpoint to keep the work in, SIGINT and SIGTERM stop after the step in flight;
    // without, they end the run at once as usual (a long step is not waited for).
    let interrupt = a.checkpoint.as_ref().map(|_| Interrupt::install()).transpose()?;
    let stop_asked = || interrupt.as_ref().and_then(Interrupt::received);

    let show_every = if a.steps <= 20 { 1 } else { a.steps / 10 };
    // Room for the times of a usual run up front; --steps may be any u64.
    let mut times = Vec::with_capacity(a.steps.min(1 << 16) as usize);
    let mut timeline = Timeline::new(&job, session.module(), measured_by).keeping(
        a.trace.is_some(),
        a.write_profile.is_some(),
        a.profile_ops,
    );
    let mut last = Vec::new();
    let mut stopped = None;
    for step in 1..=a.steps {
        if let Some(signal) = stop_asked() {
            stopped = Some((signal, step - 1));
            break;
        }
        let start = Instant::now();
        let outs = match session.run_step(job.requests.clone()) {
            Ok(o) => o,
            Err(e) => {
                report_run_error(&e, file, step, a.steps);
                return Ok(ExitCode::FAILURE);
            }
        };
        times.push(start.elapsed());
        // The first of several steps warms caches and allocators; profiles leave it out.
        timeline.record(session.module(), start, &outs, a.steps == 1 || step > 1);
        if a.steps > 1 && (step % show_every == 0 || step == a.steps) {
            let scalars = outputs::scalar_summary(&job.named_outputs(&outs));
            if !scalars.is_empty() {
                report.line(|| format!("step {step}: {scalars}"));
            }
        }
        if let (Some(c), Some(every)) = (&checkpointer, a.checkpoint_every) {
            if !checkpoint_failures_allow_going_on(c.take_failures(), a, step) {
                return Ok(ExitCode::FAILURE);
            }
            if step % every == 0 {
                c.submit(session.snapshot(), Some(step));
            }
        }
        // The previous step's results are done with: their buffers take the next results.
        session.recycle(std::mem::replace(&mut last, outs));
    }
    let ran = stopped.map_or(a.steps, |(_, step)| step);
    if let Some(c) = checkpointer {
        if !checkpoint_failures_allow_going_on(c.close().1, a, ran) {
            return Ok(ExitCode::FAILURE);
        }
    }
    if let Some(path) = &a.checkpoint {
        session.save(path, Some(ran)).map_err(|e| anyhow!("{e}"))?;
        let n = session.state().variables.len();
        tracing::info!("saved the checkpoint at step {ran} to {}", path.display());
        let value = json!({"path": path.display().to_string(), "step": ran, "variables": n});
        report.add("checkpoint", value, || format!("saved {n} variable{} to {}", plural(n), path.display()));
    }
    if let Some((signal, step)) = stopped {
        // The outputs are a step's before the last; only the checkpoint is kept.
        let path = a.checkpoint.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        eprintln!("{}: stopped after step {step} of {}; checkpoint at step {step}: {path}", signal.name(), a.steps);
        report.set("stopped", json!({"signal": signal.name(), "step": step, "checkpoint": path}));
        report.finish();
        return Ok(signal.exit_code());
    }
    if let Some(path) = &a.trace {
        write_file(path, &timeline.chrome_trace())?;
        let value =
            json!({"path": path.display().to_string(), "spans": timeline.spans.len(), "dropped": timeline.dropped});
        report.add("trace", value, || {
            format!("trace of {} step{} -> {}", a.steps, plural(a.steps as usize), path.display())
        });
        if timeline.dropped > 0 {
            tracing::warn!(
                "the trace is truncated: it holds the first {} spans; {} more node executions and transfers were left out",
                timeline.spans.len(),
                timeline.dropped
            );
        }
    }
    if let Some(path) = &a.write_profile {
        write_file(path, &timeline.profile.to_json())?;
        let kinds = timeline.profile.len();
        let value = json!({"path": path.display().to_string(), "node_kinds": kinds});
        report.add("profile", value, || format!("profile of {kinds} node kind{} -> {}", plural(kinds), path.display()));
    }

    print_timing(&graphs, &last, &times, a, &mut report);
    if let Some(ops) = &timeline.ops {
        // The steps the profile measured: after the first, when there are several.
        let measured = if times.len() > 1 { &times[1..] } else { &times[..] };
        let mean = measured.iter().map(Duration::as_secs_f64).sum::<f64>() / measured.len().max(1) as f64;
        let table = ops.table(session.module(), timeline.graphs(), file, mean);
        report.add("ops", table.to_json(), || table.lines(a.ops_top).join("\n"));
    }
    if !random.is_empty() {
        let value = json!({"seed": a.seed, "inputs": random});
        report.add("random_inputs", value, || format!("random inputs (seed {}): {}", a.seed, random.join(", ")));
    }
    let named = job.named_outputs(&last);
    match &a.out_dir {
        Some(dir) => write_outputs(dir, &named, &mut report)?,
        None if report.is_json() => report.set("outputs", named.iter().map(|(n, v)| output_json(n, v, None)).collect()),
        None => outputs::output_summaries(&named).into_iter().for_each(|l| say!("{l}")),
    }
    report.finish();
    Ok(ExitCode::SUCCESS)
}

/// What a run reads and writes: the model, its --input files, the device spec; the restored
/// checkpoint, which --checkpoint may replace (a run goes on from it), and the profile, which
/// --write-profile may (refining it); --checkpoint, --trace, --write-profile.
fn files(a: &RunArgs) -> driver::Files {
    let mut files = driver::Files::reading(&a.file, &a.inputs);
    let devices = &a.session.devices;
    if let Some(spec) = &devices.devices {
        files.read("the --devices spec", spec);
    }
    files
        .updated("the --restore checkpoint", a.restore.as_deref(), "--checkpoint")
        .updated("the --profile file", devices.profile.as_deref(), "--write-profile")
        .write("--checkpoint", a.checkpoint.as_deref())
        .write("--trace", a.trace.as_deref())
        .write("--write-profile", a.write_profile.as_deref());
    files
}

/// Reports failed periodic saves: each a warning with --keep-going-on-checkpoint-error, else
/// the first ends the run (a checkpoint that silently never lands defeats its purpose).
fn checkpoint_failures_allow_going_on(failures: Vec<RunError>, a: &RunArgs, step: u64) -> bool {
    for e in failures {
        if a.keep_going_on_checkpoint_error {
            tracing::warn!("{e}; going on (--keep-going-on-checkpoint-error)");
        } else {
            eprintln!("error: {e}; stopped after step {step} (--keep-going-on-checkpoint-error goes on)");
            return false;
        }
    }
    true
}

pub fn report_run_error(e: &RunError, file: &SourceFile, step: u64, steps: u64) {
    let at = if steps > 1 { format!(" (step {step} of {steps})") } else { String::new() };
    let message = format!("{e}{at}");
    match e.span {
        Some(span) => eprint!("{}", Diagnostic::error(span, message).render(file)),
        None => eprintln!("error: {message}"),
    }
}

fn print_timing(graphs: &[String], outs: &[RunOutput], times: &[Duration], a: &RunArgs, report: &mut Report) {
    let nodes: usize = outs.iter().map(|o| o.nodes_executed).sum();
    let names = graphs.iter().map(|g| format!("@{g}")).collect::<Vec<_>>().join(" + ");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut sorted = times.to_vec();
    sorted.sort();
    let backend = &a.session.backend;
    report.set("graphs", json!(graphs));
    report.set("backend", json!(backend));
    report.set("steps", json!(sorted.len()));
    report.set("nodes", json!(nodes));
    let (median, min, max) = (ms(sorted[sorted.len() / 2]), ms(sorted[0]), ms(sorted[sorted.len() - 1]));
    report.add("step_ms", json!({"median": median, "min": min, "max": max}), || {
        if sorted.len() == 1 {
            format!("{names}: ran {nodes} node{} in {median:.3} ms (backend {backend})", plural(nodes))
        } else {
            format!(
                "{names}: {} steps, {nodes} node{} each; step time median {median:.3} ms, min {min:.3} ms, max {max:.3} ms (backend {backend})",
                sorted.len(),
                plural(nodes),
            )
        }
    });
}

/// Writes each tensor output to DIR as `.npy` and says where each went (with --json, the
/// `outputs` list: name, dtype, shape and file).
pub(super) fn write_outputs(dir: &Path, named: &[(String, &RtValue)], report: &mut Report) -> anyhow::Result<()> {
    let lines = outputs::write_outputs(dir, named).map_err(|e| anyhow!(e))?;
    if report.is_json() {
        let written = named.iter().map(|(n, v)| output_json(n, v, Some(&outputs::output_path(dir, n)))).collect();
        report.set("outputs", written);
    } else {
        lines.into_iter().for_each(|l| say!("{l}"));
    }
    Ok(())
}

/// An output as JSON: its name, dtype and shape, and the file it was written to or its first
/// values (as numbers; a NaN or infinity as null); a value other than a tensor, its type.
fn output_json(name: &str, v: &RtValue, file: Option<&Path>) -> serde_json::Value {
    let Some(t) = v.as_tensor() else {
        return json!({"name": name, "type": v.ty().to_string()});
    };
    let mut o = json!({"name": name, "dtype": t.dtype().to_string(), "shape": t.shape(), "elements": t.len()});
    match file {
        Some(path) => o["file"] = json!(path.display().to_string()),
        None => {
            let first: Vec<f64> =
                graphc_runtime::each_dtype!(t, a => a.iter().take(SHOWN).map(|x| ToF64::to_f64(*x)).collect());
            o["first_values"] = json!(first);
        }
    }
    o
}

/// The elements shown of an output, as in the lines' summaries.
const SHOWN: usize = 8;
