//! The command line of an AOT-compiled executable: `graphc run`'s interface for the graphs
//! compiled into it (`--graph`, `--input NAME=PATH.npy`, seeded random inputs, `--fetch`,
//! `--steps`, `--restore`, `--timeout`, `--memory-limit`, `--out-dir` or a summary), plus
//! `--bench N` for the median step time and `--weights` for a program whose weights are in a
//! file of their own. Feeds and outputs go through the same
//! runtime functions as `graphc run`'s, so files, lines and errors are the same.
#![allow(unsafe_code)]

use crate::bundle::Bundle;
use crate::program::Program;
use clap::Parser;
use graphc_runtime::budget::MemoryBudget;
use graphc_runtime::limits::{self, default_max_tensor_bytes};
use graphc_runtime::{feeds, outputs, RtValue, RunOutput, RunRequest, Session, SessionOptions};
use std::ffi::{c_char, c_int, CStr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A line on standard output; a closed pipe ends nothing (the step still completes).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

#[derive(Parser, Debug)]
#[command(about = "A graph compiled ahead of time by graphc: runs it as `graphc run` would.")]
struct Args {
    /// Graphs to run, as one step (default: the only graph, else the first).
    #[arg(short, long = "graph", value_name = "NAME")]
    graphs: Vec<String>,
    /// An input from a .npy file; inputs not given get seeded random data.
    #[arg(short, long = "input", value_name = "NAME=PATH.npy")]
    inputs: Vec<String>,
    /// Fetch this output or value instead of the graph's outputs (repeatable; one graph):
    /// only what it needs runs. Values the compiler fused into a kernel are not there to fetch.
    #[arg(long = "fetch", value_name = "NAME")]
    fetches: Vec<String>,
    /// Restore every variable from a checkpoint (graphc train's or run's --checkpoint) before
    /// the first step. A cluster's checkpoint (an index of shards) goes into the program with
    /// `graphc compile --restore` instead.
    #[arg(long, value_name = "CKPT")]
    restore: Option<PathBuf>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write each output to DIR/NAME.npy instead of summarizing it.
    #[arg(short, long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// Steps to run (state carries over between them).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// After the steps, time N more and print their median.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    bench: Option<u64>,
    /// The weights file of a program compiled with --weights-file (default: the file of that
    /// name beside the executable, else the path given to graphc compile).
    #[arg(long, value_name = "PATH")]
    weights: Option<PathBuf>,
    /// Fail a step that runs longer than this (a loop that never ends fails at the loop), and
    /// a blocking op that waits longer. 'inf' means no limit.
    #[arg(long, value_name = "SECS", value_parser = limits::parse_timeout)]
    timeout: Option<limits::Timeout>,
    /// The most memory the inputs and the live tensors may take (e.g. 2GiB); default:
    /// $GRAPHC_MEMORY_LIMIT, else what the process may still allocate.
    #[arg(long, value_name = "SIZE", value_parser = graphc_runtime::budget::parse_bytes)]
    memory_limit: Option<u64>,
}

/// The executable's `main`: runs the program of `bundle` as its arguments say; the exit status.
///
/// # Safety
/// `argv` must hold `argc` NUL-terminated strings (as C's `main` gets them); `bundle` must be
/// the bundle of the object linked into this program.
#[no_mangle]
pub unsafe extern "C" fn graphc_aot_main(argc: c_int, argv: *const *const c_char, bundle: *const Bundle) -> c_int {
    let args: Vec<String> = (0..argc.max(0) as usize)
        // SAFETY: the caller's contract: `argc` valid strings.
        .map(|i| unsafe { CStr::from_ptr(*argv.add(i)) }.to_string_lossy().into_owned())
        .collect();
    let code = std::panic::catch_unwind(|| {
        let args = match Args::try_parse_from(&args) {
            Ok(a) => a,
            Err(e) => {
                let _ = e.print();
                // Every error exits 1, as graphc's do.
                return if e.use_stderr() { 1 } else { 0 };
            }
        };
        // SAFETY: the caller's contract on `bundle`.
        match unsafe { run(&args, &*bundle) } {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error: {e}");
                1
            }
        }
    });
    code.unwrap_or(101)
}

/// # Safety
/// `bundle` as for [`graphc_aot_main`].
unsafe fn run(a: &Args, bundle: &'static Bundle) -> Result<(), String> {
    let weights = a.weights.clone().or_else(beside_executable(bundle));
    // SAFETY: the caller's contract.
    let program = unsafe { Program::load(bundle, weights.as_deref())? };
    let m = &program.manifest;
    let (graphs, note) = feeds::select_graphs(&a.graphs, &m.source, &m.graphs, program.module.is_partitioned())?;
    if let Some(note) = note {
        eprintln!("note: {note}");
    }
    if !a.fetches.is_empty() && graphs.len() > 1 {
        return Err(format!("--fetch works on one graph, but {} are selected", graphs.len()));
    }
    let given = feeds::parse_input_flags(&a.inputs)?;
    let selected: Vec<_> = graphs.iter().map(|g| program.module.graph(g).expect("selected graphs exist")).collect();
    feeds::check_input_names(&given, &selected)?;
    let max_bytes = default_max_tensor_bytes();
    let mut room = MemoryBudget::resolve(a.memory_limit).map_err(|e| e.to_string())?.limit();
    let mut random = Vec::new();
    let mut requests = Vec::new();
    let mut shown = Vec::new();
    for g in &selected {
        let mut request = RunRequest::new(g.name.clone());
        for (name, t) in feeds::graph_feeds(g, &given, a.seed, max_bytes, &mut room, &mut random)? {
            request = request.feed(name, t);
        }
        for f in &a.fetches {
            request = request.fetch(f.clone());
            shown.push((f.trim_start_matches('%').to_string(), requests.len()));
        }
        if a.fetches.is_empty() {
            for o in &g.outputs {
                shown.push((
                    if selected.len() > 1 { format!("{}.{}", g.name, o.name) } else { o.name.clone() },
                    requests.len(),
                ));
            }
        }
        requests.push(request);
    }
    // No output may replace what the program reads: an --input file, its weights file.
    if let Some(dir) = &a.out_dir {
        let mut reads: Vec<(String, &Path)> =
            given.iter().map(|(n, p)| (format!("the --input file of '{n}'"), p.as_path())).collect();
        reads.extend(weights.as_deref().map(|w| ("the weights file".to_string(), w)));
        reads.extend(a.restore.as_deref().map(|c| ("the --restore checkpoint".to_string(), c)));
        let reads: Vec<(&str, &Path)> = reads.iter().map(|(w, p)| (w.as_str(), *p)).collect();
        let files: Vec<PathBuf> = shown.iter().map(|(n, _)| outputs::output_path(dir, n)).collect();
        let writes: Vec<(&str, &Path)> = files.iter().map(|f| ("--out-dir", f.as_path())).collect();
        graphc_runtime::fsutil::check_outputs(&reads, &writes)?;
    }
    let timeout = a.timeout.and_then(|t| t.0);
    let options = SessionOptions {
        detect_deadlock: true,
        wait_timeout: timeout,
        step_timeout: timeout,
        memory_limit: a.memory_limit,
        ..Default::default()
    };
    let session = Session::with_compiled(program.module, options, program.kernels).map_err(|e| e.to_string())?;
    if let Some(path) = &a.restore {
        let step = session.restore(path).map_err(|e| format!("--restore: {e}"))?;
        let at = step.map(|s| format!(" (saved at step {s})")).unwrap_or_default();
        let n = session.state().variables.len();
        say!("restored {n} variable{} from {}{at}", if n == 1 { "" } else { "s" }, path.display());
    }
    let show_every = if a.steps <= 20 { 1 } else { a.steps / 10 };
    let mut times = Vec::new();
    let mut last: Vec<RunOutput> = Vec::new();
    for step in 1..=a.steps {
        let start = Instant::now();
        let outs = session.run_step(requests.clone()).map_err(|e| {
            if a.steps > 1 {
                format!("{e} (step {step} of {})", a.steps)
            } else {
                e.to_string()
            }
        })?;
        times.push(start.elapsed());
        if a.steps > 1 && (step % show_every == 0 || step == a.steps) {
            let scalars = outputs::scalar_summary(&named(&shown, &outs));
            if !scalars.is_empty() {
                say!("step {step}: {scalars}");
            }
        }
        session.recycle(std::mem::replace(&mut last, outs));
    }
    let names = graphs.iter().map(|g| format!("@{g}")).collect::<Vec<_>>().join(" + ");
    let nodes: usize = last.iter().map(|o| o.nodes_executed).sum();
    say!("{names}: {}", timing(&times, nodes));
    if let Some(n) = a.bench {
        let mut bench = Vec::new();
        for _ in 0..n {
            let start = Instant::now();
            let outs = session.run_step(requests.clone()).map_err(|e| e.to_string())?;
            bench.push(start.elapsed());
            session.recycle(outs);
        }
        bench.sort();
        say!("bench: {n} steps, median {:.3} ms", ms(bench[bench.len() / 2]));
    }
    if !random.is_empty() {
        say!("random inputs (seed {}): {}", a.seed, random.join(", "));
    }
    let named = named(&shown, &last);
    let lines = match &a.out_dir {
        Some(dir) => outputs::write_outputs(dir, &named)?,
        None => outputs::output_summaries(&named),
    };
    lines.iter().for_each(|l| say!("{l}"));
    Ok(())
}

/// The shown name of each output with its value: `(name, request)` pairs in output order.
fn named<'o>(shown: &[(String, usize)], outs: &'o [RunOutput]) -> Vec<(String, &'o RtValue)> {
    let mut at = vec![0usize; outs.len()];
    shown
        .iter()
        .filter_map(|(name, r)| {
            let i = at.get_mut(*r)?;
            let v = outs.get(*r)?.values.get(*i)?;
            *i += 1;
            Some((name.clone(), v))
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// As `graphc run` words it, less the backend.
fn timing(times: &[Duration], nodes: usize) -> String {
    let mut sorted = times.to_vec();
    sorted.sort();
    let s = if nodes == 1 { "" } else { "s" };
    match sorted.as_slice() {
        [one] => format!("ran {nodes} node{s} in {:.3} ms (aot)", ms(*one)),
        _ => format!(
            "{} steps, {nodes} node{s} each; step time median {:.3} ms, min {:.3} ms, max {:.3} ms (aot)",
            sorted.len(),
            ms(sorted[sorted.len() / 2]),
            ms(sorted[0]),
            ms(sorted[sorted.len() - 1])
        ),
    }
}

/// Where the weights file is looked for first when `--weights` is not given: the file of the
/// manifest's name in the executable's directory, if there is one there.
fn beside_executable(bundle: &'static Bundle) -> impl FnOnce() -> Option<PathBuf> {
    move || {
        // The manifest is read again by `Program::load`; here only its weights file matters.
        // SAFETY: `bundle` as for `graphc_aot_main`.
        let name = unsafe { crate::program::weights_file(bundle) }?;
        let file = Path::new(&name).file_name()?.to_owned();
        let p = std::env::current_exe().ok()?.parent()?.join(file);
        p.is_file().then_some(p)
    }
}
