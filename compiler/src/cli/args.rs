//! The command line's flags: one struct per subcommand (clap).

use clap::{Parser, Subcommand};
use graphc::backend::Isa;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "graphc", version, about = "Compile dataflow-graph IR (.gir) to fused native kernels", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log more to standard error: -v the driver's stages with their times, checkpoints and
    /// the cluster's events; -vv each pass's time and other detail; -vvv everything, other
    /// crates' debug lines too. Without -v or -q, RUST_LOG (e.g. graphc=debug) decides;
    /// the default shows warnings.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Log errors only (no warnings); `check` prints nothing for valid files.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Parse, verify and infer shapes; report every error with its location. Exit 0 if the
    /// file is valid, 1 if not.
    Check(CheckArgs),
    /// Print the canonical text of a module (to stdout, or back into the file).
    Fmt(FmtArgs),
    /// Run graphs: inputs from .npy files or seeded random data, outputs summarized or written
    /// as .npy files; variables persist across --steps and in checkpoints.
    Run(RunArgs),
    /// Run a pass pipeline over a module and print the result (canonical, re-parseable IR), or
    /// with --emit its kernels' plans, Cranelift IR or machine code.
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
    /// Compile a graph's kernels ahead of time for a target: so far NVIDIA GPUs
    /// (--target nvptx64-nvidia-cuda), as MLIR or PTX.
    Compile(CompileArgs),
    /// Train: run a step graph (one with a float scalar output `loss`) for --steps steps on
    /// one session, fed shuffled batches from --data through an input queue, logging the
    /// loss; checkpoints keep the data position, so a restored run sees the same batches.
    Train(Box<TrainArgs>),
    /// Serve as a parameter server of a cluster (--cluster, or TF_CONFIG): hold this task's
    /// share of the step graph's variables, apply the workers' updates, exit when they finish.
    Serve(Box<ServeArgs>),
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Without --data, the step graph's inputs get seeded random data (--seed), the same every step, as \
with `graphc run`. On a terminal a progress bar shows steps/s, the loss and the time left; otherwise a line is \
printed every max(1, N/20) steps.

SIGINT (Ctrl-C) or SIGTERM stops the training after the step in flight: it saves --checkpoint (with the step and the \
data position, so --restore takes up exactly there), writes the --log's last step and a line {\"stopped_at\": STEP, \
\"signal\": ..., \"checkpoint\": PATH or null}, says the same on standard error, and exits 130 (SIGINT) or 143 \
(SIGTERM); nothing else is written (no --out-dir, no plot). A second signal ends graphc at once, with 128 + its number (a \
checkpoint being written keeps its previous contents). A cluster's worker stops the same way, the chief saving the \
cluster's checkpoint, without telling the ps tasks it is done: restarted, it takes up after its last update."
)]
pub struct TrainArgs {
    /// The .gir or .onnx file ('-' reads standard input).
    pub file: PathBuf,
    /// The step graph: it returns a float scalar `loss` and updates the variables. Default: the
    /// only graph, else the first.
    #[arg(short, long = "graph", value_name = "STEP")]
    pub graph: Option<String>,
    /// Steps to run in all; a run restored from a checkpoint at step S runs steps S+1..=N.
    #[arg(long, value_name = "N")]
    pub steps: u64,
    /// A directory of .npy arrays: NAME.npy feeds the step graph's input %NAME, one row per
    /// example (every array the same number of rows, each row an example of the input's shape
    /// after the batch dim). Each epoch shuffles the examples (from --seed and the epoch) and
    /// cuts them into batches, dropping a last partial one; a producer thread enqueues them
    /// ahead of the steps.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// The batch size, checked against the step inputs' leading dim (shapes are static, so
    /// that is the batch size).
    #[arg(long, value_name = "B", requires = "data")]
    pub batch: Option<u64>,
    /// Seed of the shuffling (or, without --data, of the random inputs). Default: the
    /// restored checkpoint's, else 0.
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Write one JSON object per step, {"step": N, "loss": X, "time_s": T} (a NaN or infinite
    /// loss as null), one a line as the steps go. A run that takes up from --restore, or a
    /// restarted worker, appends to the log.
    #[arg(long, value_name = "OUT.jsonl")]
    pub log: Option<PathBuf>,
    /// Write a --log line every K steps only (and for the last step), to keep a long run's
    /// log small.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub log_every: Option<u64>,
    /// Draw the loss curve as SVG at the end. Default with --log: the log's path with the
    /// extension .svg.
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<PathBuf>,
    /// Save every variable, the step and the data position to this safetensors file
    /// (atomically) after the last step.
    #[arg(long, value_name = "PATH")]
    pub checkpoint: Option<PathBuf>,
    /// Also save to --checkpoint every K steps, in the background; a failed save ends the run.
    #[arg(long, value_name = "K", requires = "checkpoint")]
    pub checkpoint_every: Option<u64>,
    /// Take training up from a checkpoint: its variables, step and data position (and seed);
    /// the run continues to --steps in all.
    #[arg(long, value_name = "PATH")]
    pub restore: Option<PathBuf>,
    /// Write each variable's final value to DIR/NAME.npy.
    #[arg(short, long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Print one JSON object on standard output instead of lines: the data, the steps run,
    /// the losses, the time, the files written (progress lines are left out).
    #[arg(long)]
    pub json: bool,
    /// The backend, instruction set, limits and devices, as for `graphc run`.
    #[command(flatten)]
    pub session: SessionArgs,
    /// Training across processes with parameter servers.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// A cluster's flags: with one (or with TF_CONFIG set), `graphc train` is one task of a
/// parameter-server training, as the cluster says which.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// Train across processes: this process is one task of the cluster given by `tf_config`
    /// (the TF_CONFIG environment variable, TensorFlow's JSON; the default when it is set),
    /// `slurm` (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST), `mpi` (mpirun's
    /// OMPI_COMM_WORLD_RANK or PMI_RANK, with --hosts) or a cluster FILE (TF_CONFIG's JSON,
    /// with --task). A ps task holds variables and serves until the workers finish; a worker
    /// runs the step graph.
    #[arg(long, value_name = "tf_config|slurm|mpi|FILE")]
    pub cluster: Option<String>,
    /// This task, as JOB:INDEX (ps:0, worker:1, chief:0): needed with a cluster file, and
    /// overrides the others.
    #[arg(long, value_name = "JOB:INDEX")]
    pub task: Option<String>,
    /// How the ps tasks combine the workers' updates: async (each applied as it comes), sync
    /// (averaged over every worker, applied once per round), backup:K (a round closes with
    /// the first n-K updates; the stragglers' are dropped) or ssp:S (async, with no worker
    /// more than S steps ahead of the slowest).
    #[arg(long, value_name = "MODE", default_value = "async")]
    pub sync: String,
    /// Slurm and MPI: ranks 0..P-1 are the ps tasks, the rest workers.
    #[arg(long = "ps", value_name = "P", default_value_t = 1)]
    pub ps: usize,
    /// Slurm and MPI: rank R listens at port BASE+R.
    #[arg(long, value_name = "BASE", default_value_t = 2222)]
    pub base_port: u16,
    /// MPI: the host of each rank (or one host for all); default 127.0.0.1.
    #[arg(long, value_name = "HOST,...", value_delimiter = ',')]
    pub hosts: Vec<String>,
    /// The cluster's shared token (its first line); else GRAPHC_TOKEN. Requests without it
    /// are refused.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Mutual TLS: this task's certificate chain (PEM). With --tls-key and --tls-ca, every
    /// connection is encrypted and both ends must show a certificate the CA signed.
    #[arg(long, value_name = "PEM", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// Mutual TLS: this task's private key (PEM).
    #[arg(long, value_name = "PEM", requires_all = ["tls_cert", "tls_ca"])]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: the cluster's CA certificate (PEM), which signs every task's certificate.
    #[arg(long, value_name = "PEM", requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,
    /// Where a ps task listens (default: loopback, at its port in the cluster); anything but
    /// loopback needs a token or mutual TLS.
    #[arg(long, value_name = "IP:PORT")]
    pub listen: Option<String>,
    /// The longest a task waits for another (to start, or to reach a step), in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub peer_timeout: u64,
    /// A worker sleeps this long after each step: a deliberate straggler, for measuring
    /// backup workers.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub step_delay: u64,
    /// Split a variable (with its optimizer slots) of at least this many bytes row-wise over
    /// the ps tasks, a part per slice of this size, at most one per task (TensorFlow's
    /// min-max partitioner); 0 keeps every variable whole. Every task must be given the same.
    #[arg(long, value_name = "BYTES", default_value_t = graphc_dist::split::MIN_SLICE_BYTES)]
    pub min_slice_bytes: u64,
}

impl ClusterArgs {
    /// The files these flags name, each with what it is (no output may replace them).
    pub fn files(&self) -> Vec<(&'static str, &std::path::Path)> {
        let file = self.cluster.as_deref().filter(|c| !["tf_config", "slurm", "mpi"].contains(c));
        [
            ("the --cluster file", file.map(std::path::Path::new)),
            ("the --token-file", self.token_file.as_deref()),
            ("the --tls-cert file", self.tls_cert.as_deref()),
            ("the --tls-key file", self.tls_key.as_deref()),
            ("the --tls-ca file", self.tls_ca.as_deref()),
        ]
        .into_iter()
        .filter_map(|(w, p)| Some((w, p?)))
        .collect()
    }

    /// The training across processes these flags (or TF_CONFIG) ask for, if any.
    pub fn distributed(&self) -> anyhow::Result<Option<graphc::driver::Distributed>> {
        use graphc_dist::cluster::{Cluster, Ranks, Source};
        let source = match &self.cluster {
            Some(s) => Source::parse(s),
            None if std::env::var_os("TF_CONFIG").is_some() => Source::TfConfig,
            None => return Ok(None),
        };
        let ranks = Ranks { ps: self.ps, base_port: self.base_port, hosts: &self.hosts };
        let cluster = Cluster::load(&source, &|k| std::env::var(k).ok(), self.task.as_deref(), &ranks)
            .map_err(|e| anyhow::anyhow!(e))?;
        let sync = graphc_dist::SyncMode::parse(&self.sync).map_err(|e| anyhow::anyhow!(e))?;
        if self.peer_timeout == 0 {
            anyhow::bail!("--peer-timeout 0: give the seconds a task may wait for another (at least 1)");
        }
        Ok(Some(graphc::driver::Distributed {
            cluster,
            sync,
            auth: graphc_dist::Auth {
                token: graphc::driver::read_token(self.token_file.as_deref())?,
                tls: match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
                    (Some(c), Some(k), Some(a)) => {
                        Some(graphc_dist::Tls::load(c, k, a).map_err(|e| anyhow::anyhow!(e))?)
                    }
                    _ => None,
                },
            },
            listen: self.listen.clone(),
            peer_timeout: std::time::Duration::from_secs(self.peer_timeout),
            min_slice_bytes: self.min_slice_bytes,
        }))
    }
}

/// `graphc serve`: a ps task that only serves.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The .gir or .onnx file the workers train ('-' reads standard input).
    pub file: PathBuf,
    /// The workers' step graph (default: the only graph, else the first).
    #[arg(short, long = "graph", value_name = "STEP")]
    pub graph: Option<String>,
    /// The cluster's checkpoint index: restore this task's shard from it if it exists, and
    /// write the shards the chief asks for beside it.
    #[arg(long, value_name = "PATH")]
    pub checkpoint: Option<PathBuf>,
    /// Write a JSON line per update applied: {"update", "workers", "dropped", "time_s"}, each
    /// as it is applied. A task restored from --checkpoint appends to the log.
    #[arg(long, value_name = "OUT.jsonl")]
    pub log: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(clap::Args, Debug)]
#[command(after_help = "CPU targets (the host, or --target aarch64-unknown-linux-gnu with --emit obj): the JIT's \
kernels in an object with the module, its weights and C entry points, linked with the run-time library \
libgraphc_aot.a (GRAPHC_AOT_LIB, beside graphc, or where cargo built graphc) into an executable with `graphc run`'s interface, or a static \
library; --emit obj writes OUT.o and OUT.h. nvptx64-nvidia-cuda: the GPU kernels as MLIR or PTX.")]
pub struct CompileArgs {
    /// The .gir or .onnx file ('-' reads standard input).
    pub file: PathBuf,
    /// Where to write the result (with --emit obj, OUT.o and OUT.h; with staticlib, OUT and
    /// OUT.h).
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// The graph to compile (default: every graph, each with its own entry points; for a GPU
    /// target, the module's only graph).
    #[arg(short, long = "graph", value_name = "NAME")]
    pub graph: Option<String>,
    /// The target triple (default: the host): x86_64-unknown-linux-gnu,
    /// aarch64-unknown-linux-gnu (--emit obj only) or nvptx64-nvidia-cuda.
    #[arg(long)]
    pub target: Option<String>,
    /// What to write: exe, obj or staticlib for a CPU (default exe); mlir or ptx for a GPU
    /// (default ptx, which needs a graphc built with the llvm feature).
    #[arg(long, value_enum)]
    pub emit: Option<CompileEmit>,
    /// The CPU features the code may use: a portable baseline (x86-64-v2 on x86-64) or
    /// everything this host has.
    #[arg(long, value_enum, default_value_t = CompileCpu::Baseline)]
    pub cpu: CompileCpu,
    /// Write the weights to this file (safetensors) instead of into the object.
    #[arg(long, value_name = "PATH")]
    pub weights_file: Option<PathBuf>,
    /// Start the variables from a checkpoint (graphc train's or run's --checkpoint, or a
    /// cluster's index), by name: the program holds the trained weights as their initial
    /// values. Every variable of the module must be in it, of its type.
    #[arg(long, value_name = "CKPT")]
    pub restore: Option<PathBuf>,
    /// Fix an input's value: it becomes a constant of the file's value and leaves the
    /// program's inputs (repeatable; an ONNX model's Reshape shape or reduction axes fed as an
    /// input, say).
    #[arg(short, long = "input", value_name = "NAME=PATH.npy")]
    pub inputs: Vec<String>,
    /// The size of a symbolic dim of an ONNX model's inputs (repeatable): --shape N=1.
    #[arg(long = "shape", value_name = "DIM=SIZE")]
    pub shapes: Vec<String>,
    /// The GPU's compute capability (sm_80, sm_90, ...).
    #[arg(long, default_value = "sm_90")]
    pub gpu_arch: String,
}

/// What `graphc compile --emit` writes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompileEmit {
    Exe,
    Obj,
    Staticlib,
    Mlir,
    Ptx,
}

/// `graphc compile --cpu`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompileCpu {
    Baseline,
    Native,
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The .gir or .onnx file ('-' reads standard input).
    pub file: PathBuf,
    /// The graph to time (repeat to time several as one step); default as for `graphc run`.
    #[arg(short, long = "graph", value_name = "NAME")]
    pub graphs: Vec<String>,
    /// Feed input NAME from a .npy file; inputs not given get seeded random data.
    #[arg(short, long = "input", value_name = "NAME=PATH.npy")]
    pub inputs: Vec<String>,
    /// The size of a symbolic dim of an ONNX model's inputs (repeatable): --shape N=1.
    #[arg(long = "shape", value_name = "DIM=SIZE")]
    pub shapes: Vec<String>,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Timed steps.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub iters: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write each compiled kernel's machine code to DIR/graphc_loop_N.bin (created if need be),
    /// as `benches/jit_profile.py` reads it.
    #[arg(long, value_name = "DIR")]
    pub dump_code: Option<PathBuf>,
    /// Seed of the random data for inputs not given with --input.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// After the timing, print the per-op profile of the timed steps: each node slowest first,
    /// with its op and shapes, what ran it (a compiled kernel's tier: cranelift, llvm, gpu;
    /// cpu-runtime: a CPU kernel without generated code; a reference kernel of the
    /// interpreter; the interpreter itself; waiting: a recv, dequeue or enqueue; kept: a
    /// step-invariant value from an earlier step), its time per step and share, and the reference kernels'
    /// share (with --json, every row). The timed steps then record each node's start and end.
    #[arg(long)]
    pub ops: bool,
    /// The rows the per-op profile shows; the rest are summed as one 'others' row.
    #[arg(long, value_name = "N", default_value_t = 30, requires = "ops")]
    pub ops_top: usize,
    /// Start the steps at once, while a background tier (--backend auto's LLVM kernels) still
    /// compiles on a core the steps then share, as a session's first seconds run; by default
    /// the steps wait for it and time the kernels a running session ends up with.
    #[arg(long)]
    pub no_tier_wait: bool,
    /// The backend, instruction set, limits and devices, as for `graphc run` (a --timeout
    /// bounds warm-up and timed steps alike).
    #[command(flatten)]
    pub session: SessionArgs,
}

#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    /// The .gir or .onnx file ('-' reads standard input).
    pub file: PathBuf,
    #[command(flatten)]
    pub devices: DeviceArgs,
    /// Simulate only this graph (repeatable). Default: every graph, one after another.
    #[arg(short, long = "graph", value_name = "NAME")]
    pub graphs: Vec<String>,
    /// Write the predicted timeline as Chrome trace / Perfetto JSON.
    #[arg(long, value_name = "OUT.json")]
    pub trace: Option<PathBuf>,
    /// Simulate the module as this backend runs it: with jit, after the default pipeline (so
    /// a profile from `graphc run` matches its fused kernels).
    #[arg(long, default_value = graphc::backend::DEFAULT_BACKEND, value_parser = backends())]
    pub backend: String,
    /// Print one JSON object instead of tables: each graph's predicted step time, its
    /// devices' busy time, utilization and nodes, and its transfers.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// The .onnx model.
    pub model: PathBuf,
    /// Write the IR here (atomically) instead of to standard output ('-'), its literals of
    /// more than 1024 elements in OUT.weights.safetensors beside it, which the text names.
    #[arg(short, long, value_name = "OUT.gir")]
    pub output: Option<PathBuf>,
    /// Write every literal into the text, with no weights file beside -o (standard output
    /// always gets every literal in the text).
    #[arg(long)]
    pub inline_weights: bool,
    /// Make float initializers variables instead of constants (trainable, checkpointable).
    #[arg(long)]
    pub weights_as_variables: bool,
    /// The size of a symbolic dim of the model's inputs (repeatable): --shape N=4.
    #[arg(long = "shape", value_name = "DIM=SIZE")]
    pub shapes: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct OptArgs {
    /// The .gir file ('-' reads standard input).
    pub file: PathBuf,
    /// The passes to run, in order, comma-separated (canonicalize, fold, cse, dce, fuse, place,
    /// partition). The lowerings that are part of a module's meaning (autodiff) run first
    /// unless the list names them.
    #[arg(long, default_value = graphc::passes::DEFAULT_PIPELINE)]
    pub passes: String,
    /// Write the result here (atomically) instead of to standard output ('-'); with --emit ir
    /// its literals of more than 1024 elements go to OUT.weights.safetensors beside it (OUT
    /// less .gir), which the text names.
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// With --emit ir, write every literal into the text, with no weights file beside -o
    /// (standard output always gets every literal in the text).
    #[arg(long)]
    pub inline_weights: bool,
    /// What to print of the module after the passes: its IR; the plan of each kernel the JIT
    /// backend compiles; each kernel's Cranelift IR as generated (before Cranelift's
    /// optimizations); or each kernel's machine code as Cranelift prints it.
    #[arg(long, value_enum, default_value_t = Emit::Ir)]
    pub emit: Emit,
    /// The instructions the kernels of --emit clif and --emit asm may use, as for `graphc run`.
    #[arg(long, default_value = "native", value_parser = isas())]
    pub isa: Isa,
    /// Verify the IR after every pass (always done in debug builds).
    #[arg(long)]
    pub verify_each: bool,
    /// Print the IR to standard error after every pass.
    #[arg(long)]
    pub print_after_all: bool,
    /// Print the IR to standard error after the named pass (repeatable).
    #[arg(long, value_name = "PASS")]
    pub print_after: Vec<String>,
    /// Print a table of per-pass times to standard error.
    #[arg(long)]
    pub time_passes: bool,
    /// Print node and kernel counts before and after to standard error.
    #[arg(long)]
    pub stats: bool,
    /// The devices and profile that the place pass uses.
    #[command(flatten)]
    pub devices: DeviceArgs,
}

/// What `graphc opt --emit` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit {
    /// The module's IR (canonical, re-parseable).
    Ir,
    /// Each kernel's plan: what its loop computes, over which buffers.
    Plan,
    /// Each kernel's Cranelift IR as generated, before Cranelift's optimizations.
    Clif,
    /// Each kernel's machine code as Cranelift prints it.
    Asm,
    /// Each kernel as MLIR (scf, arith, math, vector; llvm loads and stores), the host's
    /// widest vectors (4 lanes with `--isa sse`): what the llvm backend compiles.
    Mlir,
}

#[derive(clap::Args, Debug)]
pub struct DotArgs {
    /// The .gir file ('-' reads standard input).
    pub file: PathBuf,
    /// Place and partition on these devices first, and draw the partitions.
    #[command(flatten)]
    pub devices: DeviceArgs,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The .gir file ('-' reads standard input).
    pub file: PathBuf,
    /// The graph to run; repeat to run several concurrently as one step (sharing variables,
    /// queues and the send/recv rendezvous). Default: the only graph; all graphs of a
    /// partitioned module (each sends or receives); else the first.
    #[arg(short, long = "graph", value_name = "NAME")]
    pub graphs: Vec<String>,
    /// Feed input NAME from a .npy file; inputs not given get seeded random data.
    #[arg(short, long = "input", value_name = "NAME=PATH.npy")]
    pub inputs: Vec<String>,
    /// The size of a symbolic dim of an ONNX model's inputs (repeatable): --shape N=1.
    #[arg(long = "shape", value_name = "DIM=SIZE")]
    pub shapes: Vec<String>,
    /// Fetch this output or named value instead of every output; only what it depends on
    /// runs (repeatable; one graph only).
    #[arg(short, long = "fetch", value_name = "NAME")]
    pub fetches: Vec<String>,
    /// Write each output to DIR/NAME.npy instead of printing a summary. Characters of NAME
    /// outside [A-Za-z0-9._-], and a leading '.', become '_'; names are cut at 200 bytes; two
    /// outputs that would share a file are an error (nothing is written).
    #[arg(short, long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Run this many steps on one session (variables carry over); outputs are the last step's.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Save every variable to this safetensors file after the last step (atomically). With
    /// it, SIGINT or SIGTERM stops the run after the step in flight, saves the variables and
    /// the step reached here, and exits 130 or 143 (a second signal ends graphc at once).
    #[arg(long, value_name = "PATH")]
    pub checkpoint: Option<PathBuf>,
    /// Also save to --checkpoint every N steps, in the background without pausing the steps; a
    /// failed save ends the run at the next step.
    #[arg(long, value_name = "N", requires = "checkpoint", value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_every: Option<u64>,
    /// A failed --checkpoint-every save is a warning and the run goes on; without it the first
    /// failure ends the run. The save after the last step must succeed either way.
    #[arg(long, requires = "checkpoint_every")]
    pub keep_going_on_checkpoint_error: bool,
    /// Restore every variable from this checkpoint before the first step.
    #[arg(long, value_name = "PATH")]
    pub restore: Option<PathBuf>,
    /// Seed of the random data for inputs not given with --input.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The backend, instruction set, limits, and the devices to place and partition on (each
    /// partition runs on its own thread).
    #[command(flatten)]
    pub session: SessionArgs,
    /// Record every node's start and end and write the timeline as Chrome trace / Perfetto
    /// JSON (one track per device, one for transfers).
    #[arg(long, value_name = "OUT.json")]
    pub trace: Option<PathBuf>,
    /// Write each kind of node's mean time (steps after the first) as a profile for
    /// --profile.
    #[arg(long, value_name = "FILE")]
    pub write_profile: Option<PathBuf>,
    /// Print the per-op profile after the step times, as `graphc bench --ops` does (steps
    /// after the first, when there are several).
    #[arg(long)]
    pub profile_ops: bool,
    /// The rows the per-op profile shows; the rest are summed as one 'others' row.
    #[arg(long, value_name = "N", default_value_t = 30, requires = "profile_ops")]
    pub ops_top: usize,
    /// Print one JSON object instead of lines: the graphs, the step times, each output's
    /// dtype, shape and first values (or the file it went to), and the files written.
    #[arg(long)]
    pub json: bool,
}

/// The flags of every subcommand that runs a session (`run`, `bench`, `train`): the backend,
/// the instructions its kernels may use, the time and memory limits, and the devices.
#[derive(clap::Args, Debug, Clone)]
pub struct SessionArgs {
    #[arg(long, default_value = graphc::backend::DEFAULT_BACKEND, value_parser = backends())]
    pub backend: String,
    /// The instructions compiled kernels may use: native (all this host has) or sse (on x86-64,
    /// without AVX, FMA, AVX-512 and BMI, as on hosts without them).
    #[arg(long, default_value = "native", value_parser = isas())]
    pub isa: Isa,
    /// Fail a step that runs longer than this (a loop that never ends fails at the loop), and
    /// a blocking op (enqueue, dequeue, recv) that waits longer. 'inf', or a value too large
    /// for the clock, means no limit.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<Timeout>,
    /// The most memory the inputs (--input files and data sets, counted from their headers
    /// before they are read) and the session's live tensors may take together (e.g. 2GiB);
    /// default: $GRAPHC_MEMORY_LIMIT, else what the process may still allocate.
    #[arg(long, value_name = "SIZE", value_parser = graphc_runtime::budget::parse_bytes)]
    pub memory_limit: Option<u64>,
    #[command(flatten)]
    pub devices: DeviceArgs,
}

impl SessionArgs {
    /// The backend `--backend` names.
    pub fn backend(&self) -> anyhow::Result<&'static dyn graphc::backend::Backend> {
        graphc::backend::backend(&self.backend).map_err(|e| anyhow::anyhow!(e))
    }

    /// The session options the flags ask for: `--timeout` bounds each step and each blocking
    /// wait, `--memory-limit` the live tensors; deadlocks are detected (a command-line run
    /// has no other thread that could come along later).
    pub fn options(&self) -> graphc_runtime::SessionOptions {
        let limit = self.timeout.and_then(|t| t.0);
        graphc_runtime::SessionOptions {
            wait_timeout: limit,
            step_timeout: limit,
            detect_deadlock: true,
            memory_limit: self.memory_limit,
            ..Default::default()
        }
    }

    pub fn compile_options(&self) -> graphc::backend::CompileOptions {
        graphc::backend::CompileOptions { isa: self.isa, ..Default::default() }
    }
}

pub use graphc_runtime::limits::{parse_timeout, Timeout};

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The .gir files to check ('-' reads standard input).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print one JSON object on standard output: {"ok": BOOL, "files": [...]}, each file's
    /// graphs and nodes, or its errors (message, line, column) and rendered diagnostics.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct FmtArgs {
    /// The .gir file to format ('-' reads standard input).
    pub file: PathBuf,
    /// Rewrite the file in place (atomically) instead of printing to stdout.
    #[arg(short, long, conflicts_with = "check")]
    pub in_place: bool,
    /// Print nothing; exit 1 if the file is not in canonical form.
    #[arg(long)]
    pub check: bool,
}

/// Where to place: `--devices` and `--profile` (shared by every subcommand that places).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DeviceArgs {
    /// Place on the devices of this spec file (.toml or .json; see ir-spec/SPEC.md §13) and
    /// partition, one graph per device. Default: one CPU, nothing to partition.
    #[arg(long, value_name = "FILE")]
    pub devices: Option<PathBuf>,
    /// Node times measured by an earlier `graphc run --write-profile`, for the cost model.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
}

impl DeviceArgs {
    pub fn devices(&self) -> graphc::driver::Devices {
        graphc::driver::Devices { spec: self.devices.clone(), profile: self.profile.clone() }
    }

    /// The files these flags read, each with what it is (no output may replace them).
    pub fn files(&self) -> Vec<(&'static str, &std::path::Path)> {
        [("the --devices spec", self.devices.as_deref()), ("the --profile file", self.profile.as_deref())]
            .into_iter()
            .filter_map(|(w, p)| Some((w, p?)))
            .collect()
    }
}

/// The backends of the registry, each with its description, as `--backend`'s values; a name
/// outside it is the registry's error (which says when the backend is not built in).
fn backends() -> BackendParser {
    BackendParser
}

#[derive(Clone)]
struct BackendParser;

impl clap::builder::TypedValueParser for BackendParser {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let name = value.to_string_lossy();
        graphc::backend::backend(&name).map(|b| b.name().to_string()).map_err(|e| {
            let flag = arg.and_then(clap::Arg::get_long).unwrap_or("backend");
            clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("--{flag} {name}: {e}\n")).with_cmd(cmd)
        })
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            graphc::backend::BACKENDS.iter().map(|b| clap::builder::PossibleValue::new(b.name()).help(b.description())),
        ))
    }
}

/// The instruction sets, as `--isa`'s values.
fn isas() -> impl clap::builder::TypedValueParser<Value = Isa> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Isa::ALL.map(Isa::name))
        .map(|s| s.parse::<Isa>().expect("the possible values are the instruction sets' names"))
}
