//! `graphc train`: a step graph run for --steps steps, fed by the driver's input pipeline;
//! this shows the progress (a bar on a terminal, lines otherwise), writes the JSON-lines log,
//! the loss curve (SVG), checkpoints and the final variables, and prints a summary.

use super::args::{ServeArgs, TrainArgs};
use super::output::write_file;
use anyhow::{anyhow, bail};
use graphc::driver::{
    self, import_options_for, plural, Distributed, Files, Periodic, Resume, StepDone, Steps, TrainSpec, Training,
};
use graphc_dist::{Role, Split};
use graphc_runtime::{RtValue, SessionOptions};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
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
    let (ps, addr) = d.parameter_server(index, split, checkpoint, log)?;
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
    d.serve(&ps, addr)?;
    let dropped = ps.dropped();
    say!("ps task {index}: every worker is done; {dropped} straggler update{} dropped", plural(dropped as usize));
    Ok(ExitCode::SUCCESS)
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
    // In a cluster: a ps task serves; a worker trains the step graph with its variables on
    // the ps tasks, its data shuffled with its own seed.
    let dist = a.cluster.distributed()?;
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
            let client = d.connect(w, &split)?;
            let n = d.cluster.workers().len();
            let rows = if split.partitioned.is_empty() {
                String::new()
            } else {
                let parts: Vec<String> = split.partitioned.iter().map(|(v, k)| format!("{v} in {k}")).collect();
                format!(" (split in rows: {})", parts.join(", "))
            };
            say!(
                "worker {w} of {n}: --sync {}, variables on {} ps task{}{rows}",
                d.sync,
                split.tasks.len(),
                plural(split.tasks.len())
            );
            if client.resume > 0 {
                say!("worker {w}: the ps tasks have its updates up to step {}; taking up after it", client.resume);
            }
            let seed = if a.data.is_some() { seed.wrapping_add(w as u64) } else { seed };
            let pushes: Vec<usize> = split.tasks.iter().map(|t| t.pushes.len()).collect();
            (split.worker, Some((client, pushes, w == 0)), seed)
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
        say!("{p}");
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
    if let Some((c, pushes, _)) = &client {
        Distributed::attach(&mut session, c, from, pushes.clone());
    }
    // In a cluster only the chief checkpoints: the ps tasks' variables, a shard each and an
    // index.
    let chief = match &client {
        Some((c, _, true)) => Some(c),
        _ => None,
    };
    if let Some(w) = warning {
        eprintln!("warning: {w}");
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
        say!("restored {n} variable{} from {} (step {})", plural(n), r.path.display(), r.step);
    }
    describe_data(&training, a, from, position, resume.as_ref());

    let mut log = a.log.as_deref().map(Log::create).transpose()?;
    let log_every = a.log_every.unwrap_or(1);
    let mut curve: Vec<(u64, f64)> = Vec::with_capacity((a.steps - from).min(1 << 20) as usize);
    let mut nonfinite = 0u64;
    let mut progress = Progress::new(from, a.steps);
    let periodic = match (&client, chief) {
        (None, _) => a.checkpoint.as_deref().map(Periodic::File),
        (Some(_), Some(c)) => a.checkpoint.as_deref().map(|path| Periodic::Cluster(c, path)),
        (Some(_), None) => None,
    };
    let periodic = periodic.zip(a.checkpoint_every);
    let steps = Steps { from, to: a.steps, position, periodic };
    let started = Instant::now();
    let ran = if from < a.steps {
        training.run(&session, &job, &file, &steps, |d: &StepDone| {
            if !d.loss.is_finite() {
                nonfinite += 1;
                if nonfinite == 1 {
                    progress.warn(&format!(
                        "warning: step {}: the loss is {}{}",
                        d.step,
                        d.loss,
                        if log.is_some() { "; the log has null for it" } else { "" }
                    ));
                }
            }
            if let Some(l) = log.as_mut().filter(|_| d.step.is_multiple_of(log_every) || d.step == a.steps) {
                l.write(d)?;
            }
            curve.push((d.step, d.loss));
            if a.cluster.step_delay > 0 {
                std::thread::sleep(Duration::from_millis(a.cluster.step_delay));
            }
            progress.step(d);
            Ok(())
        })
    } else {
        say!("the checkpoint is at step {from} of {}: no steps to run", a.steps);
        Ok(position)
    };
    let elapsed = started.elapsed();
    progress.finish(ran.is_ok());
    // The chief's last checkpoint, then (failed or not) the ps tasks stop waiting for this
    // worker.
    if let Some((c, _, _)) = &client {
        // A failed training's last step is no checkpoint.
        let saved = match (chief, &a.checkpoint) {
            (Some(_), Some(path)) if ran.is_ok() => c.checkpoint(path, a.steps).map(|()| {
                say!("saved the ps tasks' variables at step {}: {} and its shards", a.steps, path.display());
            }),
            _ => Ok(()),
        };
        let told = c.done();
        if ran.is_ok() {
            saved.map_err(|e| anyhow!("{e}"))?;
            told.map_err(|e| anyhow!("worker {}: {e}", c.worker))?;
            let moved = c.bytes_moved();
            say!("worker {}: {moved} bytes of tensors moved, {} per step", c.worker, moved / (a.steps - from).max(1));
        }
    }
    let logged = log.as_ref().map_or(0, |l| l.lines);
    let log_done = log.map(Log::finish).transpose();
    let end = ran?;
    log_done?;
    if nonfinite > 1 {
        eprintln!("warning: {nonfinite} steps had a NaN or infinite loss");
    }

    if let Some(path) = a.checkpoint.as_ref().filter(|_| client.is_none()) {
        training.save(&session, path, a.steps, end)?;
        let n = session.state().variables.len();
        say!("saved {n} variable{}, the step and the data position to {}", plural(n), path.display());
    }
    if let Some(path) = &a.log {
        let every = a.log_every.filter(|&k| k > 1).map(|k| format!(" (every {k} steps)")).unwrap_or_default();
        say!("log of {logged} step{}{every} -> {}", plural(logged), path.display());
    }
    if let Some(path) = &plot {
        let name = Path::new(&file.name).file_name().map_or(file.name.clone(), |n| n.to_string_lossy().into_owned());
        if plot_loss(path, &curve, &format!("{name}: loss of @{}", training.graph))? {
            say!("loss curve -> {}", path.display());
        } else {
            eprintln!("warning: no finite loss to plot; {} not written", path.display());
        }
    }
    if let Some(dir) = &a.out_dir {
        let snapshot = session.snapshot();
        let named: Vec<(String, RtValue)> =
            snapshot.into_iter().filter_map(|(n, v)| Some((n, RtValue::Tensor(v?)))).collect();
        let refs: Vec<(String, &RtValue)> = named.iter().map(|(n, v)| (n.clone(), v)).collect();
        super::run::write_outputs(dir, &refs)?;
    }
    summary(&training, from, a.steps, &curve, elapsed, &a.session.backend);
    Ok(ExitCode::SUCCESS)
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

/// One line on where the batches come from.
fn describe_data(t: &Training, a: &TrainArgs, from: u64, position: Option<driver::Position>, resume: Option<&Resume>) {
    match (&t.dataset, &a.data) {
        (Some(d), Some(dir)) => {
            let dropped = d.examples % d.batch;
            let dropped =
                if dropped > 0 { format!(", the last {dropped} of each epoch dropped") } else { String::new() };
            say!(
                "@{}: {} examples from {} in batches of {} ({} per epoch{dropped}), shuffled with seed {}; the input queue holds {} batches",
                t.graph,
                d.examples,
                dir.display(),
                d.batch,
                d.batches_per_epoch(),
                t.seed,
                driver::PREFETCH
            );
            if let (Some(r), Some(p)) = (resume, position) {
                let how = if r.data.is_some() {
                    "the checkpoint's data position"
                } else {
                    "no data position in the checkpoint: where a run from step 0 would be"
                };
                say!("taking up at step {}: epoch {}, batch {} ({how})", from + 1, p.epoch, p.batch);
            }
        }
        _ if !t.random.is_empty() => {
            say!("random inputs (seed {}, the same every step): {}", t.seed, t.random.join(", "));
        }
        _ => {}
    }
}

/// The final line: steps, final loss, speed.
fn summary(t: &Training, from: u64, to: u64, curve: &[(u64, f64)], elapsed: Duration, backend: &str) {
    let Some(&(_, last)) = curve.last() else { return };
    let n = curve.len() as u64;
    let rate = n as f64 / elapsed.as_secs_f64().max(1e-9);
    let range = if from > 0 { format!("steps {}..={to}", from + 1) } else { format!("{n} step{}", plural(n as usize)) };
    let first = curve[0].1;
    say!(
        "trained @{} for {range} in {:.3} s ({} steps/s, backend {backend}); loss {} at step {}, {} at step {to}",
        t.graph,
        elapsed.as_secs_f64(),
        fmt_rate(rate),
        fmt_loss(first),
        from + 1,
        fmt_loss(last)
    );
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

/// How progress shows: a bar on a terminal, else a line every max(1, N/20) steps.
enum Progress {
    Bar(ProgressBar),
    Lines { every: u64, to: u64, since: Instant, since_step: u64 },
}

impl Progress {
    fn new(from: u64, to: u64) -> Progress {
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
        }
    }

    /// A warning to standard error, around the bar.
    fn warn(&self, message: &str) {
        match self {
            Progress::Bar(bar) => bar.suspend(|| eprintln!("{message}")),
            Progress::Lines { .. } => eprintln!("{message}"),
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

/// The `--log` file: one JSON object a line, written as the steps go.
struct Log {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
    /// Lines written.
    lines: usize,
}

impl Log {
    fn create(path: &Path) -> anyhow::Result<Log> {
        let file = graphc_runtime::fsutil::create_regular(path)
            .map_err(|e| anyhow!("--log: cannot write {}: {e}", path.display()))?;
        Ok(Log { path: path.to_path_buf(), out: BufWriter::new(file), lines: 0 })
    }

    fn write(&mut self, d: &StepDone) -> anyhow::Result<()> {
        // serde_json writes the shortest text that reads back as the same number; an f32 loss
        // as an f32, so it reads 0.1 rather than 0.10000000149011612.
        let loss = match (d.loss.is_finite(), d.single) {
            (false, _) => Ok("null".to_string()),
            (true, true) => serde_json::to_string(&(d.loss as f32)),
            (true, false) => serde_json::to_string(&d.loss),
        }
        .map_err(|e| anyhow!("{e}"))?;
        self.lines += 1;
        writeln!(self.out, "{{\"step\": {}, \"loss\": {loss}, \"time_s\": {}}}", d.step, d.elapsed.as_secs_f64())
            .map_err(|e| anyhow!("--log: cannot write {}: {e}", self.path.display()))
    }

    fn finish(mut self) -> anyhow::Result<()> {
        self.out.flush().map_err(|e| anyhow!("--log: cannot write {}: {e}", self.path.display()))
    }
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
