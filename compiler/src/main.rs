//! The `graphc` command-line tool: one subcommand per stage of the pipeline.

/// `println!` that ends the process quietly once stdout is closed (`graphc run ... | head`)
/// instead of panicking.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($t)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

/// mimalloc keeps freed memory for a moment before returning it to the OS, so the tensors of
/// one step reuse the pages of the last instead of faulting fresh ones in (tens of ms for a
/// 64 MiB tensor).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod placement_cli;
mod run;

use clap::{Parser, Subcommand, ValueEnum};
use graphc_ir::{diag::render_all, parse_module, print_module, verify_module, Diagnostic, Module, SourceFile};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "graphc", version, about = "Compile dataflow-graph IR (.gir) to fused native kernels", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Parse, verify and infer shapes; report every error with its location. Exit 0 if the
    /// file is valid, 1 if not.
    Check(CheckArgs),
    /// Print the canonical text of a module (to stdout, or back into the file).
    Fmt(FmtArgs),
    /// Run graphs: inputs from .npy files or seeded random data, outputs summarized or written
    /// as .npy files; variables persist across --steps and in checkpoints.
    Run(RunArgs),
    /// Run a pass pipeline over a module and print the result (canonical, re-parseable IR).
    Opt(OptArgs),
    /// Print a module as a Graphviz DOT graph: one cluster per graph and per fusion kernel.
    Dot(DotArgs),
    /// Import an ONNX model as graphc IR.
    Import(ImportArgs),
    /// Predict a step's time and each device's utilization from the cost model: places and
    /// partitions on --devices, then simulates the partitions (no kernel runs).
    Simulate(SimulateArgs),
    /// Measure: the time to get a graph ready to run, then the median, min and max step time
    /// over --iters steps after --warmup, and the process's peak memory.
    Bench(BenchArgs),
}

#[derive(clap::Args, Debug)]
struct BenchArgs {
    /// The .gir or .onnx file ('-' reads standard input).
    file: PathBuf,
    /// The graph to time (repeat to time several as one step); default as for `graphc run`.
    #[arg(short, long = "graph", value_name = "NAME")]
    graphs: Vec<String>,
    /// Feed input NAME from a .npy file; inputs not given get seeded random data.
    #[arg(short, long = "input", value_name = "NAME=PATH.npy")]
    inputs: Vec<String>,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// Timed steps.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[arg(long, value_enum, default_value_t = Backend::Jit)]
    backend: Backend,
    /// Seed of the random data for inputs not given with --input.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Fail a step (warm-up or timed) that runs longer than this, as for `graphc run`.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    timeout: Option<Timeout>,
    /// The most memory the session's live tensors may take together (e.g. 2GiB); default:
    /// $GRAPHC_MEMORY_LIMIT, else what the process may still allocate.
    #[arg(long, value_name = "SIZE", value_parser = graphc_runtime::budget::parse_bytes)]
    memory_limit: Option<u64>,
    #[command(flatten)]
    devices: placement_cli::DeviceArgs,
}

#[derive(clap::Args, Debug)]
struct SimulateArgs {
    /// The .gir or .onnx file ('-' reads standard input).
    file: PathBuf,
    #[command(flatten)]
    devices: placement_cli::DeviceArgs,
    /// Simulate only this graph (repeatable). Default: every graph, one after another.
    #[arg(short, long = "graph", value_name = "NAME")]
    graphs: Vec<String>,
    /// Write the predicted timeline as Chrome trace / Perfetto JSON.
    #[arg(long, value_name = "OUT.json")]
    trace: Option<PathBuf>,
    /// Simulate the module as this backend runs it: with jit, after the default pipeline (so
    /// a profile from `graphc run` matches its fused kernels).
    #[arg(long, value_enum, default_value_t = Backend::Jit)]
    backend: Backend,
}

#[derive(clap::Args, Debug)]
struct ImportArgs {
    /// The .onnx model.
    model: PathBuf,
    /// Write the IR here (atomically) instead of to standard output ('-').
    #[arg(short, long, value_name = "OUT.gir")]
    output: Option<PathBuf>,
    /// Make float initializers variables instead of constants (trainable, checkpointable).
    #[arg(long)]
    weights_as_variables: bool,
}

#[derive(clap::Args, Debug)]
struct OptArgs {
    /// The .gir file ('-' reads standard input).
    file: PathBuf,
    /// The passes to run, in order, comma-separated (canonicalize, fold, cse, dce, fuse, place,
    /// partition).
    #[arg(long, default_value = graphc::passes::DEFAULT_PIPELINE)]
    passes: String,
    /// Write the result here (atomically) instead of to standard output ('-').
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
    /// Verify the IR after every pass (always done in debug builds).
    #[arg(long)]
    verify_each: bool,
    /// Print the IR to standard error after every pass.
    #[arg(long)]
    print_after_all: bool,
    /// Print the IR to standard error after the named pass (repeatable).
    #[arg(long, value_name = "PASS")]
    print_after: Vec<String>,
    /// Print a table of per-pass times to standard error.
    #[arg(long)]
    time_passes: bool,
    /// Print node and kernel counts before and after to standard error.
    #[arg(long)]
    stats: bool,
    /// The devices and profile that the place pass uses.
    #[command(flatten)]
    devices: placement_cli::DeviceArgs,
}

#[derive(clap::Args, Debug)]
struct DotArgs {
    /// The .gir file ('-' reads standard input).
    file: PathBuf,
    /// Place and partition on these devices first, and draw the partitions.
    #[command(flatten)]
    devices: placement_cli::DeviceArgs,
}

/// How `graphc run` executes graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// The default pass pipeline, then elementwise kernels JIT-compiled with Cranelift (other
    /// nodes run in the interpreter).
    Jit,
    /// The reference interpreter: every op's plain kernel, one node at a time.
    Interp,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The .gir file ('-' reads standard input).
    file: PathBuf,
    /// The graph to run; repeat to run several concurrently as one step (sharing variables,
    /// queues and the send/recv rendezvous). Default: the only graph; all graphs of a
    /// partitioned module (each sends or receives); else the first.
    #[arg(short, long = "graph", value_name = "NAME")]
    graphs: Vec<String>,
    /// Feed input NAME from a .npy file; inputs not given get seeded random data.
    #[arg(short, long = "input", value_name = "NAME=PATH.npy")]
    inputs: Vec<String>,
    /// Fetch this output or named value instead of every output; only what it depends on
    /// runs (repeatable; one graph only).
    #[arg(short, long = "fetch", value_name = "NAME")]
    fetches: Vec<String>,
    /// Write each output to DIR/NAME.npy instead of printing a summary. Characters of NAME
    /// outside [A-Za-z0-9._-], and a leading '.', become '_'; names are cut at 200 bytes; two
    /// outputs that would share a file are an error (nothing is written).
    #[arg(short, long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Backend::Jit)]
    backend: Backend,
    /// Run this many steps on one session (variables carry over); outputs are the last step's.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// Save every variable to this safetensors file after the last step (atomically).
    #[arg(long, value_name = "PATH")]
    checkpoint: Option<PathBuf>,
    /// Also save to --checkpoint every N steps, in the background without pausing the steps; a
    /// failed save ends the run at the next step.
    #[arg(long, value_name = "N", requires = "checkpoint", value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: Option<u64>,
    /// A failed --checkpoint-every save is a warning and the run goes on; without it the first
    /// failure ends the run. The save after the last step must succeed either way.
    #[arg(long, requires = "checkpoint_every")]
    keep_going_on_checkpoint_error: bool,
    /// Restore every variable from this checkpoint before the first step.
    #[arg(long, value_name = "PATH")]
    restore: Option<PathBuf>,
    /// Seed of the random data for inputs not given with --input.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Fail a step that runs longer than this (a loop that never ends fails at the loop), and
    /// a blocking op (enqueue, dequeue, recv) that waits longer. 'inf', or a value too large
    /// for the clock, means no limit.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    timeout: Option<Timeout>,
    /// The most memory the session's live tensors may take together (e.g. 2GiB); default:
    /// $GRAPHC_MEMORY_LIMIT, else what the process may still allocate.
    #[arg(long, value_name = "SIZE", value_parser = graphc_runtime::budget::parse_bytes)]
    memory_limit: Option<u64>,
    /// Place and partition on these devices and run each partition on its own thread.
    #[command(flatten)]
    devices: placement_cli::DeviceArgs,
    /// Record every node's start and end and write the timeline as Chrome trace / Perfetto
    /// JSON (one track per device, one for transfers).
    #[arg(long, value_name = "OUT.json")]
    trace: Option<PathBuf>,
    /// Write each kind of node's mean time (steps after the first) as a profile for
    /// --profile.
    #[arg(long, value_name = "FILE")]
    write_profile: Option<PathBuf>,
}

/// A `--timeout`: `None` is no limit.
#[derive(Clone, Copy, Debug)]
struct Timeout(Option<std::time::Duration>);

fn parse_timeout(s: &str) -> Result<Timeout, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if v.is_nan() || v <= 0.0 {
        return Err(format!("'{s}' is not a positive number of seconds"));
    }
    // Past what a Duration holds (about 5.8e11 years) no deadline can ever be reached.
    match std::time::Duration::try_from_secs_f64(v) {
        Ok(d) if d.is_zero() => Err(format!("'{s}' seconds is less than the clock's nanosecond")),
        Ok(d) => Ok(Timeout(Some(d))),
        Err(_) => Ok(Timeout(None)),
    }
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    /// The .gir files to check ('-' reads standard input).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print nothing for valid files.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(clap::Args, Debug)]
struct FmtArgs {
    /// The .gir file to format ('-' reads standard input).
    file: PathBuf,
    /// Rewrite the file in place (atomically) instead of printing to stdout.
    #[arg(short, long, conflicts_with = "check")]
    in_place: bool,
    /// Print nothing; exit 1 if the file is not in canonical form.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(a) => check(&a),
        Command::Fmt(a) => fmt(&a),
        Command::Opt(a) => opt(&a),
        Command::Import(a) => import(&a),
        Command::Dot(a) => match load(&a.file) {
            Ok((file, m)) => dot(&a, &file, m),
            Err(_) => Ok(ExitCode::FAILURE),
        },
        Command::Bench(a) => {
            let options = run::import_options_for(&a.file, &a.inputs);
            match load_with(&a.file, &options) {
                Ok((file, m)) => run::bench(&a, &file, m),
                Err(_) => Ok(ExitCode::FAILURE),
            }
        }
        Command::Simulate(a) => match load(&a.file) {
            Ok((file, m)) => placement_cli::simulate(&a, &file, m),
            Err(_) => Ok(ExitCode::FAILURE),
        },
        Command::Run(a) => match load_with(&a.file, &run::import_options_for(&a.file, &a.inputs)) {
            Ok((file, m)) => run::run(&a, &file, m),
            Err(_) => Ok(ExitCode::FAILURE),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dot(a: &DotArgs, file: &SourceFile, m: Module) -> anyhow::Result<ExitCode> {
    let m = match &a.devices.devices {
        Some(_) => match placement_cli::place_and_partition(&a.devices, file, m)? {
            Some(placed) => placed.module,
            None => return Ok(ExitCode::FAILURE),
        },
        None => m,
    };
    say!("{}", graphc::dot::to_dot(&m));
    Ok(ExitCode::SUCCESS)
}

fn import(a: &ImportArgs) -> anyhow::Result<ExitCode> {
    let options = graphc_onnx::ImportOptions { weights_as_variables: a.weights_as_variables, ..Default::default() };
    let m = graphc_onnx::import_file(&a.model, &options).map_err(|e| anyhow::anyhow!("{e}"))?;
    write_output(a.output.as_deref(), &print_module(&m))?;
    Ok(ExitCode::SUCCESS)
}

/// Writes text to a file atomically, or to stdout for none or '-'.
fn write_output(out: Option<&Path>, text: &str) -> anyhow::Result<()> {
    match out.filter(|p| p.as_os_str() != "-") {
        Some(out) => graphc_runtime::fsutil::write_atomically(out, |f| f.write_all(text.as_bytes()))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display())),
        None => {
            say!("{}", text.trim_end_matches('\n'));
            Ok(())
        }
    }
}

/// Reads a file (or stdin for `-`), parses and verifies it; diagnostics go to stderr. An
/// `.onnx` file is imported (its text is the printed IR, for locating run-time errors).
fn load(path: &Path) -> Result<(SourceFile, Module), SourceFile> {
    load_with(path, &graphc_onnx::ImportOptions::default())
}

fn is_onnx(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// [`load`], importing an ONNX model with these options.
fn load_with(path: &Path, options: &graphc_onnx::ImportOptions) -> Result<(SourceFile, Module), SourceFile> {
    // A device or FIFO would be read forever (or block the open); refused before reading.
    if let Some(m) = std::fs::metadata(path).ok().filter(|_| path != Path::new("-")) {
        if !m.is_file() {
            let kind = graphc_runtime::fsutil::file_kind(m.file_type());
            eprintln!("{}: error: cannot read the file: it is {kind}, not a regular file", path.display());
            return Err(SourceFile::new(path.display().to_string(), ""));
        }
    }
    if is_onnx(path) {
        return match graphc_onnx::import_file(path, options) {
            Ok(m) => {
                let file = SourceFile::new(path.display().to_string(), print_module(&m));
                Ok((file, m))
            }
            Err(e) => {
                eprintln!("error: {e}");
                Err(SourceFile::new(path.display().to_string(), ""))
            }
        };
    }
    let (file, parsed) = if path == Path::new("-") {
        let mut bytes = Vec::new();
        let read = std::io::stdin().read_to_end(&mut bytes);
        let file = SourceFile::new("<stdin>", String::from_utf8_lossy(&bytes).into_owned());
        match (read, String::from_utf8(bytes)) {
            (Err(e), _) => (file, Err(vec![Diagnostic::error_unlocated(format!("cannot read standard input: {e}"))])),
            (Ok(_), Err(_)) => (file, Err(vec![Diagnostic::error_unlocated("standard input is not UTF-8 text")])),
            (Ok(_), Ok(text)) => {
                let r = parse_module(&text);
                (file, r)
            }
        }
    } else {
        graphc_ir::parse_file(path)
    };
    // The parser type-checks as it builds; the verifier re-checks the whole module, so a
    // disagreement between the two surfaces here rather than in a later pass.
    let parsed = parsed.and_then(|m| {
        let d = verify_module(&m);
        if d.is_empty() {
            Ok(m)
        } else {
            Err(d)
        }
    });
    match parsed {
        Ok(m) => Ok((file, m)),
        Err(diags) => {
            let n = diags.len();
            eprint!("{}", render_all(&diags, &file));
            eprintln!("{}: {n} error{}", file.name, if n == 1 { "" } else { "s" });
            Err(file)
        }
    }
}

fn check(a: &CheckArgs) -> anyhow::Result<ExitCode> {
    let mut ok = true;
    for path in &a.files {
        match load(path) {
            Ok((file, m)) => {
                if !a.quiet {
                    let nodes: usize = m.graphs.iter().map(|g| g.node_count()).sum();
                    say!(
                        "{}: ok ({} graph{}, {nodes} node{})",
                        file.name,
                        m.graphs.len(),
                        plural(m.graphs.len()),
                        plural(nodes)
                    );
                }
            }
            Err(_) => ok = false,
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn opt(a: &OptArgs) -> anyhow::Result<ExitCode> {
    use graphc::passes::{kernel_count, timing_table, PassManager, PrintAfter};
    let ctx = a.devices.context()?;
    let mut pm = PassManager::with_context(&a.passes, &ctx).map_err(|e| anyhow::anyhow!("--passes: {e}"))?;
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
    let Ok((file, mut m)) = load(&a.file) else { return Ok(ExitCode::FAILURE) };
    let count = |m: &Module| -> (usize, usize) {
        (m.graphs.iter().map(|g| g.node_count()).sum(), m.graphs.iter().map(kernel_count).sum())
    };
    let before = count(&m);
    let timings = pm.run(&mut m, &mut |text| eprint!("{text}")).map_err(|e| anyhow::anyhow!("{}: {e}", file.name))?;
    if a.time_passes {
        eprint!("{}", timing_table(&timings));
    }
    if a.stats {
        let after = count(&m);
        eprintln!("nodes: {} -> {}; kernels: {} -> {}", before.0, after.0, before.1, after.1);
    }
    write_output(a.output.as_deref(), &print_module(&m))?;
    Ok(ExitCode::SUCCESS)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn fmt(a: &FmtArgs) -> anyhow::Result<ExitCode> {
    let Ok((file, m)) = load(&a.file) else { return Ok(ExitCode::FAILURE) };
    let text = print_module(&m);
    if a.check {
        if text != file.text {
            eprintln!("{}: not in canonical form; run `graphc fmt --in-place {}`", file.name, file.name);
            return Ok(ExitCode::FAILURE);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if a.in_place && a.file != Path::new("-") {
        graphc_runtime::fsutil::write_atomically(&a.file, |f| f.write_all(text.as_bytes()))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", a.file.display()))?;
    } else {
        std::io::stdout().write_all(text.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}
