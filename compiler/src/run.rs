//! `graphc run`: feeds inputs (from .npy files, or seeded random data), runs graphs for a
//! number of steps on a session, writes or summarizes the outputs, and saves or restores
//! checkpoints.

use crate::{plural, Backend, BenchArgs, RunArgs};
use anyhow::{anyhow, bail, Context};
use graphc::placement::cost::{signature, Profile};
use graphc::placement::partition::Partitioned;
use graphc::trace;
use graphc_ir::{Diagnostic, Module, Op, SourceFile, Type};
use graphc_runtime::checkpoint::Checkpointer;
use graphc_runtime::limits::{check_tensor_size, default_max_tensor_bytes};
use graphc_runtime::random::random_input;
use graphc_runtime::{npy, RtValue, RunError, RunOutput, RunRequest, Session, SessionOptions, Tensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn run(a: &RunArgs, file: &SourceFile, module: Module) -> anyhow::Result<ExitCode> {
    let inputs = Inputs { graphs: &a.graphs, flags: &a.inputs, fetches: &a.fetches, seed: a.seed };
    let module = optimize_for(a.backend, module, &a.fetches, file)?;
    let Some(prepared) = prepare(&inputs, &a.devices, file, module)? else { return Ok(ExitCode::FAILURE) };
    let Prepared { graphs, module, job, random, placements } = prepared;
    for p in placements {
        say!("{p}");
    }
    let options = SessionOptions {
        wait_timeout: a.timeout.and_then(|t| t.0),
        step_timeout: a.timeout.and_then(|t| t.0),
        detect_deadlock: true,
        max_tensor_bytes: None,
        trace: a.trace.is_some() || a.write_profile.is_some(),
        max_trace_events: None,
        memory_limit: a.memory_limit,
    };
    let (session, _) = new_session(a.backend, module, options)?;
    if let Some(path) = &a.restore {
        let step = session.restore(path).map_err(|e| anyhow!("{e}"))?;
        let at = step.map(|s| format!(" (saved at step {s})")).unwrap_or_default();
        let n = session.state().variables.len();
        say!("restored {n} variable{} from {}{at}", plural(n), path.display());
    }
    let checkpointer = match (&a.checkpoint, a.checkpoint_every) {
        (Some(path), Some(_)) => Some(Checkpointer::start(path.clone())),
        _ => None,
    };

    let show_every = if a.steps <= 20 { 1 } else { a.steps / 10 };
    // Room for the times of a usual run up front; --steps may be any u64.
    let mut times = Vec::with_capacity(a.steps.min(1 << 16) as usize);
    let mut timeline = Timeline::new(&job, session.module());
    let mut last = Vec::new();
    for step in 1..=a.steps {
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
            let scalars = scalar_summary(&job.named_outputs(&outs));
            if !scalars.is_empty() {
                say!("step {step}: {scalars}");
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
    if let Some(c) = checkpointer {
        if !checkpoint_failures_allow_going_on(c.close().1, a, a.steps) {
            return Ok(ExitCode::FAILURE);
        }
    }
    if let Some(path) = &a.checkpoint {
        session.save(path, Some(a.steps)).map_err(|e| anyhow!("{e}"))?;
        let n = session.state().variables.len();
        say!("saved {n} variable{} to {}", plural(n), path.display());
    }
    if let Some(path) = &a.trace {
        write_file(path, &timeline.chrome_trace())?;
        say!("trace of {} step{} -> {}", a.steps, plural(a.steps as usize), path.display());
        if timeline.dropped > 0 {
            eprintln!(
                "warning: the trace is truncated: it holds the first {} spans; {} more node executions and transfers were left out",
                timeline.spans.len(),
                timeline.dropped
            );
        }
    }
    if let Some(path) = &a.write_profile {
        write_file(path, &timeline.profile.to_json())?;
        say!(
            "profile of {} node kind{} -> {}",
            timeline.profile.ops.len(),
            plural(timeline.profile.ops.len()),
            path.display()
        );
    }

    print_timing(&graphs, &last, &times, a);
    if !random.is_empty() {
        say!("random inputs (seed {}): {}", a.seed, random.join(", "));
    }
    let named = job.named_outputs(&last);
    match &a.out_dir {
        Some(dir) => write_outputs(dir, &named)?,
        None => print_outputs(&named),
    }
    Ok(ExitCode::SUCCESS)
}

/// Reports failed periodic saves: each a warning with --keep-going-on-checkpoint-error, else
/// the first ends the run (a checkpoint that silently never lands defeats its purpose).
fn checkpoint_failures_allow_going_on(failures: Vec<RunError>, a: &RunArgs, step: u64) -> bool {
    for e in failures {
        if a.keep_going_on_checkpoint_error {
            eprintln!("warning: {e}; going on (--keep-going-on-checkpoint-error)");
        } else {
            eprintln!("error: {e}; stopped after step {step} (--keep-going-on-checkpoint-error goes on)");
            return false;
        }
    }
    true
}

/// `graphc bench`: the time from a loaded module to a session ready to run (placement and
/// partitioning included, compilation once there is a compiled backend), then step times.
pub fn bench(a: &BenchArgs, file: &SourceFile, module: Module) -> anyhow::Result<ExitCode> {
    // Compile time: the pass pipeline and the session with its kernels; making the inputs
    // in between is not part of it.
    let start = Instant::now();
    let inputs = Inputs { graphs: &a.graphs, flags: &a.inputs, fetches: &[], seed: a.seed };
    let module = optimize_for(a.backend, module, &[], file)?;
    let optimized = start.elapsed();
    let Some(prepared) = prepare(&inputs, &a.devices, file, module)? else { return Ok(ExitCode::FAILURE) };
    let start = Instant::now();
    let Prepared { graphs, module, job, placements, .. } = prepared;
    if !a.json {
        for p in &placements {
            say!("{p}");
        }
    }
    let limit = a.timeout.and_then(|t| t.0);
    let options = SessionOptions {
        detect_deadlock: true,
        wait_timeout: limit,
        step_timeout: limit,
        memory_limit: a.memory_limit,
        ..Default::default()
    };
    let (session, _) = new_session(a.backend, module, options)?;
    let compile = optimized + start.elapsed();
    let mut times = Vec::with_capacity(a.iters.min(1 << 16) as usize);
    let total = a.warmup.saturating_add(a.iters);
    for i in 0..total {
        let t = Instant::now();
        let outs = match session.run_step(job.requests.clone()) {
            Ok(outs) => outs,
            Err(e) => {
                report_run_error(&e, file, i + 1, total);
                return Ok(ExitCode::FAILURE);
            }
        };
        if i >= a.warmup {
            times.push(t.elapsed());
        }
        // As a serving loop would: the results are used and dropped, their buffers reused.
        session.recycle(outs);
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (median, min, max) = (ms(times[times.len() / 2]), ms(times[0]), ms(times[times.len() - 1]));
    let mean = times.iter().map(|&d| ms(d)).sum::<f64>() / times.len() as f64;
    let rss = peak_rss_bytes();
    let names = graphs.iter().map(|g| format!("@{g}")).collect::<Vec<_>>().join(" + ");
    let backend = backend_name(a.backend);
    if a.json {
        let j = serde_json::json!({
            "file": file.name, "graphs": graphs, "backend": backend,
            "compile_ms": ms(compile), "median_ms": median, "min_ms": min, "max_ms": max, "mean_ms": mean,
            "iters": a.iters, "warmup": a.warmup, "peak_rss_bytes": rss, "placement": placements,
        });
        say!("{j}");
    } else {
        say!("{names} (backend {backend})");
        say!("  compile      {:>10.3} ms", ms(compile));
        say!("  step median  {median:>10.3} ms   ({} iterations after {} warm-up)", a.iters, a.warmup);
        say!("  step min     {min:>10.3} ms");
        say!("  step max     {max:>10.3} ms");
        match rss {
            Some(b) => say!("  peak RSS     {:>10.1} MiB", b as f64 / (1 << 20) as f64),
            None => say!("  peak RSS     unknown (no /proc/self/status)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The process's peak resident set (VmHWM), where /proc says.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Jit => "jit",
        Backend::Interp => "interp",
    }
}

/// The JIT backend compiles what the default pipeline makes of the module (fused kernels);
/// with `--fetch` it keeps the module as written, since fusion may absorb the value fetched.
pub fn optimize_for(backend: Backend, mut m: Module, fetches: &[String], file: &SourceFile) -> anyhow::Result<Module> {
    if backend == Backend::Jit && fetches.is_empty() {
        let pm = graphc::passes::PassManager::new(graphc::passes::DEFAULT_PIPELINE).map_err(|e| anyhow!(e))?;
        pm.run(&mut m, &mut |_| {}).map_err(|e| anyhow!("{}: {e}", file.name))?;
    }
    Ok(m)
}

/// A session for the backend: with the JIT, the module's kernels compiled first.
fn new_session(backend: Backend, m: Module, options: SessionOptions) -> anyhow::Result<(Session, Duration)> {
    match backend {
        Backend::Interp => Ok((Session::new(m, options).map_err(|e| anyhow!("{e}"))?, Duration::ZERO)),
        Backend::Jit => match graphc::lower::cpu::CpuKernels::compile(&m) {
            Ok(kernels) => {
                let t = kernels.compile_time;
                Ok((Session::with_compiled(m, options, kernels).map_err(|e| anyhow!("{e}"))?, t))
            }
            // A host Cranelift cannot target, or a compiler bug: the interpreter still runs it.
            Err(e) => {
                eprintln!("warning: JIT compilation failed ({e}); running on the interpreter");
                Ok((Session::new(m, options).map_err(|e| anyhow!("{e}"))?, Duration::ZERO))
            }
        },
    }
}

fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    graphc_runtime::fsutil::write_atomically(path, |f| std::io::Write::write_all(f, text.as_bytes()))
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))
}

/// The requests of one step and where each output the user sees comes from.
struct Job {
    requests: Vec<RunRequest>,
    /// Per output shown: its name, and which request's which fetch holds it.
    outputs: Vec<(String, usize, String)>,
}

impl Job {
    /// One request per partition of each selected graph. Each partition gets the inputs it
    /// has, fetches the outputs (or the `--fetch` values) it computes, and otherwise only
    /// serves the other partitions.
    fn new(
        m: &Module,
        graphs: &[String],
        groups: &[Partitioned],
        inputs: &[BTreeMap<String, Arc<Tensor>>],
        output_names: &[Vec<String>],
        fetches: &[String],
    ) -> Job {
        let mut requests = Vec::new();
        let mut outputs = Vec::new();
        let several = graphs.len() > 1;
        for (gi, name) in graphs.iter().enumerate() {
            let group = groups.iter().find(|p| &p.graph == name).expect("every selected graph has a group");
            let first = requests.len();
            let wanted: Vec<String> = if fetches.is_empty() {
                output_names[gi].clone()
            } else {
                fetches.iter().map(|f| f.trim_start_matches('%').to_string()).collect()
            };
            let feeds: Vec<(String, Arc<Tensor>)> = inputs[gi].iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let (reqs, at) = group.requests(m, &feeds, &wanted);
            for (w, i) in wanted.into_iter().zip(at) {
                let shown = if several { format!("{name}.{w}") } else { w.clone() };
                outputs.push((shown, first + i, w));
            }
            requests.extend(reqs);
        }
        Job { requests, outputs }
    }

    fn named_outputs<'o>(&self, outs: &'o [RunOutput]) -> Vec<(String, &'o RtValue)> {
        self.outputs
            .iter()
            .filter_map(|(shown, req, name)| {
                let o = outs.get(*req)?;
                let i = o.names.iter().position(|n| n == name)?;
                Some((shown.clone(), &o.values[i]))
            })
            .collect()
    }
}

/// Node timelines of every step, for `--trace`, and node times, for `--write-profile`.
struct Timeline {
    /// Per request: its graph and the track its nodes go on.
    graphs: Vec<String>,
    tracks: Vec<String>,
    origin: Option<Instant>,
    spans: Vec<trace::Span>,
    /// Spans past [`trace::MAX_SPANS`] and node executions the runtime did not record.
    dropped: u64,
    profile: Profile,
}

impl Timeline {
    fn new(job: &Job, m: &Module) -> Timeline {
        let tracks = job
            .requests
            .iter()
            .map(|r| {
                let g = m.graph(&r.graph).expect("requested graphs exist");
                let device = g.regions[g.body].nodes.first().and_then(|&n| g.nodes[n].device.clone());
                match device.filter(|d| !d.is_empty()) {
                    Some(d) if job.requests.len() > 1 => d.short_name(),
                    _ => r.graph.clone(),
                }
            })
            .collect();
        let graphs = job.requests.iter().map(|r| r.graph.clone()).collect();
        Timeline { graphs, tracks, origin: None, spans: Vec::new(), dropped: 0, profile: Profile::new() }
    }

    fn record(&mut self, m: &Module, step_start: Instant, outs: &[RunOutput], profile: bool) {
        let origin = *self.origin.get_or_insert(step_start);
        let us = |t: Instant| t.saturating_duration_since(origin).as_secs_f64() * 1e6;
        let mut sends: BTreeMap<&str, Instant> = BTreeMap::new();
        let mut recvs: Vec<(&str, Instant)> = Vec::new();
        for (i, o) in outs.iter().enumerate() {
            let g = m.graph(&self.graphs[i]).expect("the graph ran");
            self.dropped += o.events_dropped;
            for e in &o.events {
                let nd = &g.nodes[e.node];
                let secs = e.end.saturating_duration_since(e.start).as_secs_f64();
                if profile {
                    self.profile.record(signature(g, e.node), secs);
                }
                if self.spans.len() >= trace::MAX_SPANS {
                    self.dropped += 1;
                    continue;
                }
                self.spans.push(trace::Span {
                    track: self.tracks[i].clone(),
                    name: g.describe(e.node).trim_matches('\'').to_string(),
                    category: nd.op.kind().name().to_string(),
                    start_us: us(e.start),
                    dur_us: secs * 1e6,
                    args: vec![("graph".into(), g.name.clone()), ("depth".into(), e.depth.to_string())],
                });
                match (nd.op, &e.key) {
                    (Op::Send, Some(k)) => {
                        sends.insert(k, e.start);
                    }
                    (Op::Recv, Some(k)) => recvs.push((k, e.end)),
                    _ => {}
                }
            }
        }
        // A transfer runs from its send to the moment the recv has the tensor.
        for (key, arrived) in recvs {
            if let Some(&sent) = sends.get(key) {
                if self.spans.len() >= trace::MAX_SPANS {
                    self.dropped += 1;
                    continue;
                }
                let start = us(sent);
                self.spans.push(trace::Span {
                    track: trace::TRANSFERS.into(),
                    name: key.split(';').next().unwrap_or(key).to_string(),
                    category: "transfer".into(),
                    start_us: start,
                    dur_us: (us(arrived) - start).max(0.0),
                    args: vec![("key".into(), key.to_string())],
                });
            }
        }
    }

    fn chrome_trace(&self) -> String {
        let mut tracks = self.tracks.clone();
        tracks.push(trace::TRANSFERS.into());
        trace::chrome_trace(&tracks, &self.spans)
    }
}

/// What `run` and `bench` take from the command line to build a step.
pub struct Inputs<'a> {
    pub graphs: &'a [String],
    pub flags: &'a [String],
    pub fetches: &'a [String],
    pub seed: u64,
}

/// A module ready to run: placed and partitioned if asked, with the step's requests.
pub struct Prepared {
    graphs: Vec<String>,
    module: Module,
    job: Job,
    /// The inputs that got random data, as `NAME TYPE`.
    random: Vec<String>,
    /// Where each graph was placed, a line each.
    placements: Vec<String>,
}

/// Selects the graphs, makes their inputs (from .npy files or seeded random data), places and
/// partitions on `--devices`, and builds the requests of one step. `None` when placement
/// failed (its diagnostics are printed).
pub fn prepare(
    a: &Inputs<'_>,
    devices: &crate::placement_cli::DeviceArgs,
    file: &SourceFile,
    module: Module,
) -> anyhow::Result<Option<Prepared>> {
    let graphs = select_graphs(a.graphs, file, &module)?;
    let given = parse_input_flags(a.flags)?;
    check_input_names(&given, &graphs, &module)?;
    let max_bytes = default_max_tensor_bytes();
    let mut random = Vec::new();
    // Each selected graph's inputs, by name, made before partitioning moves them around.
    let mut inputs: Vec<BTreeMap<String, Arc<Tensor>>> = Vec::new();
    for name in &graphs {
        let g = module.graph(name).expect("selected graphs exist");
        let mut feeds = BTreeMap::new();
        for &v in g.inputs() {
            let input = g.values[v].name.clone().unwrap_or_default();
            let Type::Tensor(want) = &g.values[v].ty else {
                bail!("input '{input}' of @{name} is a {}; graphc run feeds only tensors", g.values[v].ty);
            };
            let t = match given.get(input.as_str()) {
                Some(path) => {
                    let t = npy::read_npy(path).map_err(|e| anyhow!("input '{input}': {e}"))?;
                    if &t.ty() != want {
                        bail!("input '{input}' of @{name}: expected {want}, got {} from {}", t.ty(), path.display());
                    }
                    t
                }
                None => {
                    check_tensor_size(want, max_bytes).map_err(|m| anyhow!("input '{input}' of @{name}: {m}"))?;
                    random.push(format!("{input} {want}"));
                    random_input(g, v, a.seed)
                        .ok_or_else(|| anyhow!("input '{input}' of @{name} is not a tensor"))?
                        .map_err(|m| anyhow!("{m}"))?
                }
            };
            feeds.insert(input, Arc::new(t));
        }
        inputs.push(feeds);
    }
    if !a.fetches.is_empty() && graphs.len() > 1 {
        bail!("--fetch works on one graph, but {} are selected", graphs.len());
    }

    let output_names: Vec<Vec<String>> = graphs
        .iter()
        .map(|g| module.graph(g).expect("selected graphs exist").outputs.iter().map(|o| o.name.clone()).collect())
        .collect();
    let mut placements = Vec::new();
    let (module, groups) = match &devices.devices {
        Some(_) => {
            let Some(p) = crate::placement_cli::place_and_partition(devices, file, module)? else {
                return Ok(None);
            };
            for name in &graphs {
                if let Some(group) = p.groups.iter().find(|g| &g.graph == name) {
                    placements.push(crate::placement_cli::placement_summary(&p.module, group));
                }
            }
            (p.module, p.groups)
        }
        None => {
            let groups = graphs
                .iter()
                .map(|g| Partitioned { graph: g.clone(), parts: vec![(g.clone(), Default::default())] })
                .collect();
            (module, groups)
        }
    };
    let job = Job::new(&module, &graphs, &groups, &inputs, &output_names, a.fetches);
    Ok(Some(Prepared { graphs, module, job, random, placements }))
}

/// For an ONNX model: the integer inputs given on the command line, which the importer may
/// need as constants (shapes, axes, slice bounds). Unreadable files are reported later, when
/// the inputs are fed.
pub fn import_options_for(model: &Path, input_flags: &[String]) -> graphc_onnx::ImportOptions {
    let mut options = graphc_onnx::ImportOptions::default();
    if !crate::is_onnx(model) {
        return options;
    }
    for flag in input_flags {
        if let Some((name, path)) = flag.split_once('=') {
            if let Ok(t) = npy::read_npy(Path::new(path)) {
                if matches!(t.dtype(), graphc_ir::DType::I32 | graphc_ir::DType::I64) && t.len() <= 1 << 16 {
                    options.known_inputs.insert(name.to_string(), t);
                }
            }
        }
    }
    options
}

/// The graphs to run: those named; else the only one; else all of a partitioned module (every
/// graph sends or receives); else the first, with a note.
fn select_graphs(wanted: &[String], file: &SourceFile, m: &Module) -> anyhow::Result<Vec<String>> {
    let all: Vec<String> = m.graphs.iter().map(|g| g.name.clone()).collect();
    let listing = || all.iter().map(|n| format!("@{n}")).collect::<Vec<_>>().join(", ");
    if !wanted.is_empty() {
        for name in wanted {
            let bare = name.trim_start_matches('@');
            if m.graph(bare).is_none() {
                let hint = graphc_ir::suggest::closest(bare, all.iter().map(String::as_str))
                    .map(|s| format!("did you mean @{s}? "))
                    .unwrap_or_default();
                bail!("{} has no graph @{bare}; {hint}its graphs are {}", file.name, listing());
            }
        }
        return Ok(wanted.iter().map(|n| n.trim_start_matches('@').to_string()).collect());
    }
    match m.graphs.as_slice() {
        [] => bail!("{} holds no graph to run", file.name),
        [g] => Ok(vec![g.name.clone()]),
        _ if crate::placement_cli::is_partitioned(m) => Ok(all),
        [g, ..] => {
            eprintln!(
                "note: {} has {} graphs ({}); running @{} (choose with --graph)",
                file.name,
                all.len(),
                listing(),
                g.name
            );
            Ok(vec![g.name.clone()])
        }
    }
}

fn parse_input_flags(flags: &[String]) -> anyhow::Result<BTreeMap<&str, PathBuf>> {
    let mut out = BTreeMap::new();
    for f in flags {
        let (name, path) = f
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
            .ok_or_else(|| anyhow!("--input '{f}' is not of the form NAME=PATH.npy"))?;
        let name = name.trim_start_matches('%');
        if out.insert(name, PathBuf::from(path)).is_some() {
            bail!("input '{name}' is given twice");
        }
    }
    Ok(out)
}

fn check_input_names(given: &BTreeMap<&str, PathBuf>, graphs: &[String], m: &Module) -> anyhow::Result<()> {
    let names: Vec<&str> = graphs
        .iter()
        .filter_map(|g| m.graph(g))
        .flat_map(|g| g.inputs().iter().filter_map(|&v| g.values[v].name.as_deref()))
        .collect();
    for &name in given.keys() {
        if !names.contains(&name) {
            let which = graphs.iter().map(|g| format!("@{g}")).collect::<Vec<_>>().join(", ");
            let hint = graphc_ir::suggest::closest(name, names.iter().copied())
                .map(|s| format!("did you mean '{s}'? "))
                .unwrap_or_default();
            let list =
                if names.is_empty() { "it has none".to_string() } else { format!("inputs are {}", names.join(", ")) };
            bail!("--input '{name}': {which} has no input of that name; {hint}{list}");
        }
    }
    Ok(())
}

fn report_run_error(e: &RunError, file: &SourceFile, step: u64, steps: u64) {
    let at = if steps > 1 { format!(" (step {step} of {steps})") } else { String::new() };
    let message = format!("{e}{at}");
    match e.span {
        Some(span) => eprint!("{}", Diagnostic::error(span, message).render(file)),
        None => eprintln!("error: {message}"),
    }
}

fn scalar_summary(named: &[(String, &RtValue)]) -> String {
    named
        .iter()
        .filter_map(|(n, v)| v.as_tensor().filter(|t| t.len() == 1).map(|t| format!("{n}={}", t.to_f64_vec()[0])))
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_timing(graphs: &[String], outs: &[RunOutput], times: &[Duration], a: &RunArgs) {
    let nodes: usize = outs.iter().map(|o| o.nodes_executed).sum();
    let names = graphs.iter().map(|g| format!("@{g}")).collect::<Vec<_>>().join(" + ");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut sorted = times.to_vec();
    sorted.sort();
    let backend = backend_name(a.backend);
    if sorted.len() == 1 {
        say!("{names}: ran {nodes} node{} in {:.3} ms (backend {backend})", plural(nodes), ms(sorted[0]));
    } else {
        say!(
            "{names}: {} steps, {nodes} node{} each; step time median {:.3} ms, min {:.3} ms, max {:.3} ms (backend {backend})",
            sorted.len(),
            plural(nodes),
            ms(sorted[sorted.len() / 2]),
            ms(sorted[0]),
            ms(sorted[sorted.len() - 1])
        );
    }
}

fn print_outputs(named: &[(String, &RtValue)]) {
    for (name, v) in named {
        match v {
            RtValue::Tensor(t) => say!("{name}: {}", t.summary(8)),
            other => say!("{name}: {}", other.ty()),
        }
    }
}

/// Writes each tensor output to DIR/FILE.npy ([`output_file_name`]). Two outputs that would
/// get the same file are refused before anything is written, rather than one silently
/// overwriting the other.
fn write_outputs(dir: &Path, named: &[(String, &RtValue)]) -> anyhow::Result<()> {
    let mut files: BTreeMap<String, &str> = BTreeMap::new();
    for (name, v) in named {
        if v.as_tensor().is_some() {
            let file = format!("{}.npy", output_file_name(name));
            if let Some(other) = files.insert(file.clone(), name) {
                bail!(
                    "outputs '{other}' and '{name}' would both be written to {}; rename one of them",
                    dir.join(file).display()
                );
            }
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create the output directory {}", dir.display()))?;
    for (name, v) in named {
        let path = dir.join(format!("{}.npy", output_file_name(name)));
        match v {
            RtValue::Tensor(t) => {
                npy::write_npy(&path, t).map_err(|e| anyhow!("output '{name}': {e}"))?;
                say!("{name}: {} -> {}", t.ty(), path.display());
            }
            other => say!("{name}: {} (not written: not a tensor)", other.ty()),
        }
    }
    Ok(())
}

/// The file name (without `.npy`) an output is written to: characters outside
/// [A-Za-z0-9._-] become '_', and so does a leading '.' (no hidden files, no `..`); an empty
/// name is `_`; names are cut at 200 bytes (a file name may have 255).
fn output_file_name(name: &str) -> String {
    let mut file: String = name
        .chars()
        .enumerate()
        .map(|(i, c)| if (c.is_ascii_alphanumeric() || "._-".contains(c)) && !(i == 0 && c == '.') { c } else { '_' })
        .collect();
    // Only ASCII is left, so any byte is a character boundary.
    file.truncate(200);
    if file.is_empty() {
        file.push('_');
    }
    file
}
