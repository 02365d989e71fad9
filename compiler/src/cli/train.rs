//! `graphc train`: a step graph run for --steps steps, fed by the driver's input pipeline;
//! this shows the progress (a bar on a terminal, lines otherwise), writes the JSON-lines log,
//! the loss curve (SVG), checkpoints and the final variables, and prints a summary.

use super::args::{ServeArgs, TrainArgs};
use super::output::{write_file, Report};
use super::signals::{Interrupt, Signal};
use anyhow::{anyhow, bail};
use graphc::driver::{
    self, import_options_for, plural, Distributed, Ended, Files, Periodic, Resume, StepDone, Steps, TrainLog,
    TrainSpec, Training,
};
use graphc_dist::{Role, Split};
use graphc_runtime::{RtValue, SessionOptions};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `graphc serve`: a ps task of the cluster.
pub fn serve(a: &ServeArgs) -> anyhow::Result<ExitCode> {
    let Some(d) = a.cluster.distributed()? else {
        bail!("graphc serve: give --cluster (or set TF_CONFIG): the task serves a cluster's workers");
    };
    let mut files = Files::reading(&a.file, &[]);
    for (what, path) in a.cluster.files() {
        files.read(what, path);
    }
    files.write("--checkpoint", a.checkpoint.as_deref()).write("--log", a.log.as_deref()).check()?;
    let (file, module) = driver::load(&a.file, &import_options_for(&a.file, &[], &[])?)?;
    let split = d.split(a.graph.as_deref(), &file, &module)?;
    match d.cluster.role() {
        Role::Ps(i) => serve_task(&d, i, split, a.checkpoint.as_deref(), a.log.as_deref()),
        Role::Worker(w) => bail!("graphc serve: this task is worker {w}; a worker runs graphc train"),
    }
}

/// Ps task `index`: serves until every worker is done, then saves its variables.
fn serve_task(
    d: &Distributed,
    index: usize,
    split: Split,
    checkpoint: Option<&Path>,
    log: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let (ps, listener) = d.parameter_server(index, split, checkpoint, log)?;
    let addr = listener.local_addr().map_err(|e| anyhow!("ps task {index}: its listener: {e}"))?;
    if let (Some(step), Some(path)) = (ps.restored, checkpoint) {
        say!("ps task {index}: restored its variables from {} (step {step})", path.display());
    }
    let (variables, bytes, workers) = (ps.program().reads.len(), ps.program().bytes, ps.options().workers as usize);
    say!(
        "ps task {index}: {variables} variable{} ({bytes} bytes) for {workers} worker{}, --sync {}, listening on {addr}",
        plural(variables),
        plural(workers),
        d.sync
    );
    stop_serving_on_a_signal(index, &ps)?;
    d.serve(&ps, listener)?;
    let (dropped, repeated) = ps.dropped();
    let repeated = match repeated {
        0 => String::new(),
        n => format!(", {n} update{} pushed again taken as in already", plural(n as usize)),
    };
    say!(
        "ps task {index}: every worker is done; {dropped} straggler update{} dropped{repeated}",
        plural(dropped as usize)
    );
    Ok(ExitCode::SUCCESS)
}

/// SIGINT and SIGTERM end a ps task at once, its log written out, with a line saying so and
/// the status 128 + the signal's number: it holds no step in flight, and its variables are
/// kept by the chief's checkpoints, which a restarted task restores its shard from.
fn stop_serving_on_a_signal(index: usize, ps: &std::sync::Arc<graphc_dist::ParameterServer>) -> anyhow::Result<()> {
    let interrupt = Interrupt::install()?;
    let ps = ps.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(signal) = interrupt.received() {
            if let Err(e) = ps.flush_log() {
                eprintln!("error: {e}");
            }
            eprintln!(
                "ps task {index}: {}: stopped serving; the workers wait for it up to --peer-timeout (restarted, it restores its shard from the --checkpoint index)",
                signal.name()
            );
            // From this thread, while the server's run: no exit handlers or destructors.
            super::output::exit_now(signal.status());
        }
    });
    Ok(())
}

pub fn train(a: &TrainArgs) -> anyhow::Result<ExitCode> {
    if a.steps == 0 {
        bail!("--steps 0: there is nothing to train; give the number of steps in all (at least 1)");
    }
    if a.batch == Some(0) {
        bail!("--batch 0: a batch holds at least one example");
    }
    if a.checkpoint_every == Some(0) {
        bail!("--checkpoint-every 0: give a number of steps (at least 1)");
    }
    // The checkpoint first: its seed decides the data. Its variables are checked against the
    // module's before anything else is (another model's checkpoint is that, whatever else).
    let resume = a.restore.as_deref().map(Resume::read).transpose()?;
    let plot = a.plot.clone().or_else(|| a.log.as_ref().map(|p| p.with_extension("svg")));
    let mut files = files(a, plot.as_deref());
    files.check()?;
    let (file, module) = driver::load(&a.file, &import_options_for(&a.file, &[], &[])?)?;
    if let Some(r) = &resume {
        r.check(&module)?;
    }
    let seed = Resume::seed(resume.as_ref(), a.seed)?;
    if let Some(r) = &resume {
        if r.step > a.steps {
            bail!(
                "--restore {}: the checkpoint is at step {}, past --steps {} (the steps in all, the checkpoint's included)",
                r.path.display(),
                r.step,
                a.steps
            );
        }
    }
    let mut report = Report::new(a.json);
    report.set("file", json!(file.name));
    // In a cluster: a ps task serves; a worker trains the step graph with its variables on
    // the ps tasks, its data shuffled with its own seed.
    let dist = a.cluster.distributed()?;
    // A worker's claim on its task, held to the end of the run: a second process for this
    // worker is refused.
    let _claim;
    let (module, client, seed) = match &dist {
        None => (module, None, seed),
        Some(d) => {
            let split = d.split(a.graph.as_deref(), &file, &module)?;
            let w = match d.cluster.role() {
                Role::Ps(i) => return serve_task(d, i, split, a.checkpoint.as_deref(), a.log.as_deref()),
                Role::Worker(w) => w,
            };
            for (flag, given) in [("--restore", a.restore.is_some()), ("--out-dir", a.out_dir.is_some())] {
                if given {
                    bail!("{flag}: a worker holds no variables (they live on the ps tasks, which restore from their --checkpoint)");
                }
            }
            _claim = d.claim_worker(w)?;
            let client = d.connect(w, &split)?;
            let n = d.cluster.workers().len();
            let rows = if split.partitioned.is_empty() {
                String::new()
            } else {
                let parts: Vec<String> = split.partitioned.iter().map(|(v, k)| format!("{v} in {k}")).collect();
                format!(" (split in rows: {})", parts.join(", "))
            };
            let worker = json!({
                "index": w, "workers": n, "sync": d.sync.to_string(), "ps_tasks": split.tasks.len(),
                "resumed_after": client.resume,
                "split_rows": split.partitioned.iter().map(|(v, k)| json!({"variable": v, "parts": k})).collect::<Vec<_>>(),
            });
            report.add("worker", worker, || {
                format!(
                    "worker {w} of {n}: --sync {}, variables on {} ps task{}{rows}",
                    d.sync,
                    split.tasks.len(),
                    plural(split.tasks.len())
                )
            });
            if client.resume > 0 {
                report.line(|| {
                    format!(
                        "worker {w}: the ps tasks have its updates up to step {}; taking up after it",
                        client.resume
                    )
                });
            }
            let seed = if a.data.is_some() { seed.wrapping_add(w as u64) } else { seed };
            let exchanges = graphc_dist::Exchange::of(&split.tasks);
            (split.worker, Some((client, exchanges, w == 0)), seed)
        }
    };
    let spec = TrainSpec {
        graph: a.graph.as_deref(),
        data: a.data.as_deref(),
        batch: a.batch,
        seed,
        memory_limit: a.session.memory_limit,
    };
    let (module, training) = driver::plan_training(&spec, &file, module)?;
    // Where to take up, checked before anything is restored.
    let (from, position) = match &client {
        Some((c, _, _)) => training.start_at(c.resume),
        None => training.start(resume.as_ref())?,
    };
    let backend = a.session.backend()?;
    let module = driver::optimize(backend, module, false, &file)?;
    // A worker's devices: --devices, else its spec in the cluster file.
    let mut devices = a.session.devices.devices();
    if devices.spec.is_none() {
        devices.spec = dist.as_ref().and_then(|d| d.cluster.task_devices()).map(Path::to_path_buf);
    }
    let (module, job) = training.prepare(&devices, &file, module)?;
    for p in &job.placements {
        report.push("placement", json!(p), || p.clone());
    }
    // The producer thread blocks on the queue between steps, which deadlock detection would
    // take for a deadlock (see the driver's train.rs).
    let options = SessionOptions {
        detect_deadlock: training.pipeline.is_none(),
        memory_limit: training.memory_left.or(a.session.memory_limit),
        ..a.session.options()
    };
    // Kept to the end: dropping it waits for a background tier (auto) to finish compiling.
    let (mut session, _compiled, warning) = driver::session(backend, module, options, &a.session.compile_options())?;
    if let Some((c, exchanges, _)) = &client {
        Distributed::attach(&mut session, c, from, exchanges.clone());
    }
    // In a cluster only the chief checkpoints: the ps tasks' variables, a shard each and an
    // index.
    let chief = match &client {
        Some((c, _, true)) => Some(c),
        _ => None,
    };
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    if let Some(dir) = &a.out_dir {
        let names: Vec<&str> = session.state().variables.keys().map(String::as_str).collect();
        graphc_runtime::outputs::check_output_names(dir, &names).map_err(|e| anyhow!(e))?;
        let written = names.iter().map(|n| graphc_runtime::outputs::output_path(dir, n));
        files.write_in_dir("--out-dir", written).check()?;
    }
    if let Some(r) = &resume {
        r.apply(&session)?;
        let n = session.state().variables.len();
        let restored = json!({"path": r.path.display().to_string(), "step": r.step, "variables": n});
        report.add("restored", restored, || {
            format!("restored {n} variable{} from {} (step {})", plural(n), r.path.display(), r.step)
        });
    }
    describe_data(&training, a, from, position, resume.as_ref(), &mut report);

    // A run that takes up from a checkpoint, or a restarted worker from the ps tasks' state,
    // goes on with the log of the run it takes up from.
    let mut log = a.log.as_deref().map(|p| TrainLog::open(p, "--log", from > 0)).transpose()?;
    let log_every = a.log_every.unwrap_or(1);
    let mut curve: Vec<(u64, f64)> = Vec::with_capacity((a.steps - from).min(1 << 20) as usize);
    let mut nonfinite = 0u64;
    let mut progress = Progress::new(from, a.steps, a.json);
    let periodic = match (&client, chief) {
        (None, _) => a.checkpoint.as_deref().map(Periodic::File),
        (Some(_), Some(c)) => a.checkpoint.as_deref().map(|path| Periodic::Cluster(c, path)),
        (Some(_), None) => None,
    };
    let periodic = periodic.zip(a.checkpoint_every);
    // From here on SIGINT and SIGTERM stop the steps and keep their work (see signals.rs).
    let interrupt = Interrupt::install()?;
    let steps = Steps { from, to: a.steps, position, periodic, stop: Some(interrupt.flag()) };
    // The last step run and whether the log has its line (a stopped run's last step gets one).
    let mut last: Option<(StepDone, bool)> = None;
    let started = Instant::now();
    let ran = if from < a.steps {
        training.run(&session, &job, &file, &steps, |d: &StepDone| {
            if !d.loss.is_finite() {
                nonfinite += 1;
                if nonfinite == 1 {
                    let note = if log.is_some() { "; the log has null for it" } else { "" };
                    progress.warn(&format!("step {}: the loss is {}{note}", d.step, d.loss));
                }
            }
            let logged = d.step.is_multiple_of(log_every) || d.step == a.steps;
            if let Some(l) = log.as_mut().filter(|_| logged) {
                l.write(d)?;
            }
            last = Some((*d, logged));
            curve.push((d.step, d.loss));
            if a.cluster.step_delay > 0 {
                std::thread::sleep(Duration::from_millis(a.cluster.step_delay));
            }
            progress.step(d);
            Ok(())
        })
    } else {
        report.line(|| format!("the checkpoint is at step {from} of {}: no steps to run", a.steps));
        Ok(Ended { step: from, position })
    };
    let elapsed = started.elapsed();
    let stopped = match &ran {
        Ok(end) if end.step < a.steps => interrupt.received(),
        _ => None,
    };
    progress.finish(ran.is_ok() && stopped.is_none());
    if let (Some(signal), Ok(end)) = (stopped, &ran) {
        summary(&training, from, end.step, &curve, elapsed, &a.session.backend, &mut report);
        let cluster = client.as_ref().map(|(c, _, _)| (c.as_ref(), chief.is_some()));
        let kept = Kept { log, last };
        return stop(a, &training, &session, cluster, signal, *end, kept, report);
    }
    // (Failed or not) the ps tasks stop waiting for this worker; then the chief's final
    // checkpoint, which holds every worker's last update (a failed training's last step is
    // no checkpoint).
    if let Some((c, _, _)) = &client {
        let final_checkpoint = a.checkpoint.as_deref().filter(|_| chief.is_some() && ran.is_ok());
        let told = c.done(final_checkpoint.is_some());
        let saved = match final_checkpoint {
            Some(path) if told.is_ok() => c.checkpoint(path, a.steps, true).map(|()| {
                let saved = json!({"path": path.display().to_string(), "step": a.steps, "shards": true});
                report.add("checkpoint", saved, || {
                    format!(
                        "saved the ps tasks' variables at step {} with every worker's last update: {} and its shards",
                        a.steps,
                        path.display()
                    )
                });
            }),
            _ => Ok(()),
        };
        if ran.is_ok() {
            told.map_err(|e| anyhow!("worker {}: {e}", c.worker))?;
            saved.map_err(|e| anyhow!("{e}"))?;
            let moved = c.bytes_moved();
            let per_step = moved / (a.steps - from).max(1);
            report.set("bytes_moved", json!(moved));
            report.line(|| format!("worker {}: {moved} bytes of tensors moved, {per_step} per step", c.worker));
        }
    }
    let logged = log.as_ref().map_or(0, |l| l.lines);
    let log_done = log.map(TrainLog::finish).transpose();
    let end = ran?;
    log_done?;
    if nonfinite > 1 {
        tracing::warn!("{nonfinite} steps had a NaN or infinite loss");
    }
    report.set("nonfinite_losses", json!(nonfinite));

    if let Some(path) = a.checkpoint.as_ref().filter(|_| client.is_none()) {
        training.save(&session, path, a.steps, end.position)?;
        let n = session.state().variables.len();
        let saved = json!({"path": path.display().to_string(), "step": a.steps, "variables": n});
        report.add("checkpoint", saved, || {
            format!("saved {n} variable{}, the step and the data position to {}", plural(n), path.display())
        });
    }
    if let Some(path) = &a.log {
        let every = a.log_every.filter(|&k| k > 1).map(|k| format!(" (every {k} steps)")).unwrap_or_default();
        let value = json!({"path": path.display().to_string(), "lines": logged, "every": log_every});
        report.add("log", value, || format!("log of {logged} step{}{every} -> {}", plural(logged), path.display()));
    }
    if let Some(path) = &plot {
        let name = Path::new(&file.name).file_name().map_or(file.name.clone(), |n| n.to_string_lossy().into_owned());
        if plot_loss(path, &curve, &format!("{name}: loss of @{}", training.graph))? {
            report.add("plot", json!(path.display().to_string()), || format!("loss curve -> {}", path.display()));
        } else {
            tracing::warn!("no finite loss to plot; {} not written", path.display());
        }
    }
    if let Some(dir) = &a.out_dir {
        let snapshot = session.snapshot();
        let named: Vec<(String, RtValue)> =
            snapshot.into_iter().filter_map(|(n, v)| Some((n, RtValue::Tensor(v?)))).collect();
        let refs: Vec<(String, &RtValue)> = named.iter().map(|(n, v)| (n.clone(), v)).collect();
        super::run::write_outputs(dir, &refs, &mut report)?;
    }
    summary(&training, from, a.steps, &curve, elapsed, &a.session.backend, &mut report);
    report.finish();
    Ok(ExitCode::SUCCESS)
}

/// A run stopped by `signal` after step `end.step`: its checkpoint there (in a cluster, the
/// chief's; a worker does not tell the ps tasks it is done, so that restarted it takes up
/// after its last update), the log's last lines, a line on standard error, and the status
/// 128 + the signal's number.
#[allow(clippy::too_many_arguments)]
fn stop(
    a: &TrainArgs,
    training: &Training,
    session: &graphc_runtime::Session,
    cluster: Option<(&graphc_dist::Client, bool)>,
    signal: Signal,
    end: Ended,
    Kept { log, last }: Kept,
    mut report: Report,
) -> anyhow::Result<ExitCode> {
    let step = end.step;
    let checkpoint = match (cluster, &a.checkpoint) {
        (None, Some(path)) => {
            training.save(session, path, step, end.position)?;
            Some(format!("checkpoint at step {step}: {} (take up with --restore {})", path.display(), path.display()))
        }
        (Some((c, true)), Some(path)) => {
            c.checkpoint(path, step, false).map_err(|e| anyhow!("{e}"))?;
            Some(format!("the cluster's checkpoint at step {step}: {} and its shards", path.display()))
        }
        (Some((c, _)), _) => Some(format!(
            "the ps tasks hold worker {}'s updates up to step {step}; restarted, it takes up after them",
            c.worker
        )),
        (_, None) => None,
    };
    let saved = match (cluster, &a.checkpoint) {
        (None | Some((_, true)), Some(path)) => Some(path.display().to_string()),
        _ => None,
    };
    if let Some(mut l) = log {
        if let Some((d, false)) = &last {
            l.write(d)?;
        }
        l.stopped(step, signal.name(), saved.as_deref())?;
        l.finish()?;
    }
    let kept = checkpoint.unwrap_or_else(|| "no --checkpoint was configured, so the steps' work is lost".to_string());
    // The command's last word, like an error's: on standard error whatever the log level.
    eprintln!("{}: stopped after step {step} of {}; {kept}", signal.name(), a.steps);
    report.set("stopped", json!({"signal": signal.name(), "step": step, "checkpoint": saved}));
    report.finish();
    Ok(signal.exit_code())
}

/// What training reads (the model, the data set's arrays, the device spec, the cluster's
/// files; the restored checkpoint, which --checkpoint alone may replace: that is how a run
/// goes on) and writes (the log, the plot, the checkpoint).
fn files(a: &TrainArgs, plot: Option<&Path>) -> Files {
    let mut files = Files::reading(&a.file, &[]);
    let data = a.data.as_deref().and_then(|d| std::fs::read_dir(d).ok());
    for entry in data.into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().ends_with(".npy") {
            files.read("a --data file", &entry.path());
        }
    }
    for (what, path) in a.session.devices.files().into_iter().chain(a.cluster.files()) {
        files.read(what, path);
    }
    // The curve beside the log by default: --plot names it otherwise.
    let plot_flag = if a.plot.is_some() { "--plot" } else { "--log's loss curve (see --plot)" };
    files
        .updated("the --restore checkpoint", a.restore.as_deref(), "--checkpoint")
        .write("--log", a.log.as_deref())
        .write(plot_flag, plot)
        .write("--checkpoint", a.checkpoint.as_deref());
    files
}

/// Where the batches come from (a line, or the JSON's `data` or `random_inputs`).
fn describe_data(
    t: &Training,
    a: &TrainArgs,
    from: u64,
    position: Option<driver::Position>,
    resume: Option<&Resume>,
    report: &mut Report,
) {
    match (&t.dataset, &a.data) {
        (Some(d), Some(dir)) => {
            let dropped = d.examples % d.batch;
            let value = json!({
                "dir": dir.display().to_string(), "examples": d.examples, "batch": d.batch,
                "batches_per_epoch": d.batches_per_epoch(), "dropped_per_epoch": dropped, "seed": t.seed,
                "queue_batches": driver::PREFETCH,
            });
            report.add("data", value, || {
                let dropped =
                    if dropped > 0 { format!(", the last {dropped} of each epoch dropped") } else { String::new() };
                format!(
                    "@{}: {} examples from {} in batches of {} ({} per epoch{dropped}), shuffled with seed {}; the input queue holds {} batches",
                    t.graph,
                    d.examples,
                    dir.display(),
                    d.batch,
                    d.batches_per_epoch(),
                    t.seed,
                    driver::PREFETCH
                )
            });
            if let (Some(r), Some(p)) = (resume, position) {
                let saved = r.data.is_some();
                let value = json!({"step": from + 1, "epoch": p.epoch, "batch": p.batch, "from_checkpoint": saved});
                report.add("taking_up", value, || {
                    let how = if saved {
                        "the checkpoint's data position"
                    } else {
                        "no data position in the checkpoint: where a run from step 0 would be"
                    };
                    format!("taking up at step {}: epoch {}, batch {} ({how})", from + 1, p.epoch, p.batch)
                });
            }
        }
        _ if !t.random.is_empty() => {
            let value = json!({"seed": t.seed, "inputs": t.random});
            report.add("random_inputs", value, || {
                format!("random inputs (seed {}, the same every step): {}", t.seed, t.random.join(", "))
            });
        }
        _ => {}
    }
}

/// The final line: steps, first and last loss, speed (with --json, the summary's fields).
fn summary(
    t: &Training,
    from: u64,
    to: u64,
    curve: &[(u64, f64)],
    elapsed: Duration,
    backend: &str,
    report: &mut Report,
) {
    report.set("graph", json!(t.graph));
    report.set("backend", json!(backend));
    report.set("steps", json!({"from": from, "to": to, "ran": curve.len()}));
    let Some(&(_, last)) = curve.last() else { return };
    let n = curve.len() as u64;
    let rate = n as f64 / elapsed.as_secs_f64().max(1e-9);
    let first = curve[0].1;
    let value = json!({
        "time_s": elapsed.as_secs_f64(), "steps_per_s": rate,
        "first": {"step": from + 1, "loss": first}, "last": {"step": to, "loss": last},
    });
    report.add("loss", value, || {
        let range =
            if from > 0 { format!("steps {}..={to}", from + 1) } else { format!("{n} step{}", plural(n as usize)) };
        format!(
            "trained @{} for {range} in {:.3} s ({} steps/s, backend {backend}); loss {} at step {}, {} at step {to}",
            t.graph,
            elapsed.as_secs_f64(),
            fmt_rate(rate),
            fmt_loss(first),
            from + 1,
            fmt_loss(last)
        )
    });
}

fn fmt_loss(x: f64) -> String {
    if !x.is_finite() || x == 0.0 || (1e-3..1e5).contains(&x.abs()) {
        format!("{x:.4}")
    } else {
        format!("{x:.4e}")
    }
}

fn fmt_rate(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// How progress shows: a bar on a terminal, else a line every max(1, N/20) steps (none with
/// --json, whose object sums the run up).
enum Progress {
    Bar(ProgressBar),
    Lines { every: u64, to: u64, since: Instant, since_step: u64 },
    Silent,
}

impl Progress {
    fn new(from: u64, to: u64, json: bool) -> Progress {
        if std::io::stderr().is_terminal() {
            let style =
                ProgressStyle::with_template("{bar:30} step {pos}/{len}  {rate} steps/s  loss {msg}  ETA {eta}")
                    .expect("the template is valid")
                    .with_key("rate", |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = w.write_str(&fmt_rate(s.per_sec()));
                    });
            let bar = ProgressBar::with_draw_target(Some(to), ProgressDrawTarget::stderr())
                .with_style(style)
                .with_position(from);
            Progress::Bar(bar)
        } else if json {
            Progress::Silent
        } else {
            Progress::Lines { every: (to / 20).max(1), to, since: Instant::now(), since_step: from }
        }
    }

    fn step(&mut self, d: &StepDone) {
        match self {
            Progress::Bar(bar) => {
                bar.set_position(d.step);
                bar.set_message(fmt_loss(d.loss));
            }
            Progress::Lines { every, to, since, since_step } => {
                if d.step.is_multiple_of(*every) || d.step == *to {
                    let rate = (d.step - *since_step) as f64 / since.elapsed().as_secs_f64().max(1e-9);
                    say!("step {}/{to} loss {} ({} steps/s)", d.step, fmt_loss(d.loss), fmt_rate(rate));
                    *since = Instant::now();
                    *since_step = d.step;
                }
            }
            Progress::Silent => {}
        }
    }

    /// A warning (the log's), around the bar.
    fn warn(&self, message: &str) {
        match self {
            Progress::Bar(bar) => bar.suspend(|| tracing::warn!("{message}")),
            Progress::Lines { .. } | Progress::Silent => tracing::warn!("{message}"),
        }
    }

    fn finish(&self, ok: bool) {
        if let Progress::Bar(bar) = self {
            if ok {
                bar.finish();
            } else {
                bar.abandon();
            }
            // The bar's last line ends without a newline; what follows starts below it.
            eprintln!();
        }
    }
}

/// What a stopped run still has to write of its log.
struct Kept {
    log: Option<TrainLog>,
    /// The last step run, and whether the log has its line.
    last: Option<(StepDone, bool)>,
}

/// Draws the loss over the steps as SVG (a log scale when the finite losses are positive and
/// span more than two decades); false, writing nothing, when no loss is finite.
fn plot_loss(path: &Path, curve: &[(u64, f64)], title: &str) -> anyhow::Result<bool> {
    use plotters::prelude::*;
    let finite: Vec<(u64, f64)> = curve.iter().copied().filter(|(_, l)| l.is_finite()).collect();
    let Some(&(x0, _)) = finite.first() else { return Ok(false) };
    // Losses near f64's largest are drawn scaled down, labelled as they are: plotters' tick
    // computation works with the range's width and multiples of it, and where those overflow
    // it never ends.
    let scale = if finite.iter().any(|p| p.1.abs() > 1e300) { 1e-10 } else { 1.0 };
    let points: Vec<(u64, f64)> = finite.iter().map(|&(x, y)| (x, y * scale)).collect();
    let x1 = points.last().map_or(x0, |p| p.0).max(x0 + 1);
    let lo = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let hi = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let log_scale = lo > 0.0 && hi / lo > 100.0;
    let pad = if hi > lo { (hi - lo) * 0.05 } else { lo.abs().max(1.0) * 0.1 };
    let mut svg = String::new();
    let draw = |svg: &mut String| -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::with_string(svg, (800, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root);
        chart.caption(title, ("sans-serif", 18)).margin(16).x_label_area_size(40).y_label_area_size(90);
        let line = LineSeries::new(points.iter().copied(), BLUE.stroke_width(2));
        let tick = |y: &f64| fmt_tick(*y / scale);
        if log_scale {
            let mut c = chart.build_cartesian_2d(x0..x1, (lo * 0.9..hi * 1.1).log_scale())?;
            c.configure_mesh().x_desc("step").y_desc("loss (log scale)").y_label_formatter(&tick).draw()?;
            c.draw_series(line)?;
        } else {
            let mut c = chart.build_cartesian_2d(x0..x1, lo - pad..hi + pad)?;
            c.configure_mesh().x_desc("step").y_desc("loss").y_label_formatter(&tick).draw()?;
            c.draw_series(line)?;
        }
        root.present()?;
        Ok(())
    };
    draw(&mut svg).map_err(|e| anyhow!("--plot: cannot draw the loss curve: {e}"))?;
    write_file(path, &svg)?;
    Ok(true)
}

/// An axis label: at most four decimals, or three significant digits in exponent form for
/// the very small and very large.
fn fmt_tick(y: f64) -> String {
    if y == 0.0 {
        return "0".to_string();
    }
    if (1e-3..1e5).contains(&y.abs()) {
        let s = format!("{y:.4}");
        return s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    let s = format!("{y:.2e}");
    match s.split_once('e') {
        Some((m, e)) => format!("{}e{e}", m.trim_end_matches('0').trim_end_matches('.')),
        None => s,
    }
}
