//! The driver: the one way from a file to running kernels, which every subcommand goes
//! through (the CLI parses flags and prints):
//!
//! ```text
//! load (parse or import, verify) -> optimize (the lowerings every backend runs, then the
//! backend's pipeline) -> place and partition (passes of the pass manager, on --devices) ->
//! compile (the backend) -> session (the runtime)
//! ```
//!
//! `inputs.rs` makes a step's feeds, `job.rs` its requests over the partitions, and
//! `timeline.rs` records what ran for traces and profiles.

mod inputs;
mod job;
mod load;
mod timeline;

pub use inputs::{make_inputs, parse_input_flags, select_graphs, Inputs};
pub use job::{prepare, Job, Prepared};
pub use load::{import_options_for, is_onnx, load};
pub use timeline::Timeline;

use crate::backend::{Backend, Compiled, LOWERINGS};
use crate::passes::{PassContext, PassManager};
use crate::placement::cluster::Cluster;
use crate::placement::cost::Profile;
use crate::placement::partition::Partitioned;
use graphc_ir::{Module, Op, SourceFile};
use graphc_runtime::{Session, SessionOptions};
use std::path::PathBuf;

/// An error already put into words for the user (diagnostics rendered against the source):
/// printed as it is, with no `error:` in front.
#[derive(Debug)]
pub struct Reported(pub String);

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.trim_end())
    }
}

impl std::error::Error for Reported {}

/// Where to place: a device spec file and a profile of measured node times.
#[derive(Clone, Debug, Default)]
pub struct Devices {
    /// The device spec (.toml or .json); `None`: one CPU, nothing to partition.
    pub spec: Option<PathBuf>,
    pub profile: Option<PathBuf>,
}

impl Devices {
    /// The cluster and profile the files name, for the placement passes.
    pub fn context(&self) -> anyhow::Result<PassContext> {
        let cluster = match &self.spec {
            Some(p) => Cluster::load(p).map_err(|e| anyhow::anyhow!("--devices: {e}"))?,
            None => Cluster::single_cpu(),
        };
        let profile = match &self.profile {
            Some(p) => Some(Profile::load(p).map_err(|e| anyhow::anyhow!("--profile: {e}"))?),
            None => None,
        };
        Ok(PassContext::new(cluster, profile))
    }
}

/// The module as `backend` runs it: the lowerings every backend runs, then the backend's
/// pipeline. `as_written` skips the backend's pipeline (`--fetch` of a value fusion may
/// absorb).
pub fn optimize(backend: &dyn Backend, mut m: Module, as_written: bool, file: &SourceFile) -> anyhow::Result<Module> {
    let pipeline = if as_written { "" } else { backend.pipeline() };
    for p in [LOWERINGS, pipeline] {
        if !p.is_empty() {
            let pm = PassManager::new(p).map_err(|e| anyhow::anyhow!(e))?;
            pm.run(&mut m, &mut |_| {}).map_err(|e| anyhow::anyhow!("{}: {e}", file.name))?;
        }
    }
    Ok(m)
}

/// A module after placement and partitioning.
#[derive(Debug)]
pub struct Placed {
    pub module: Module,
    /// Each original graph's partitions.
    pub groups: Vec<Partitioned>,
    pub ctx: PassContext,
}

/// Places and partitions a module on the context's devices, through the pass manager.
/// Placement's errors are [`Reported`] against the source.
pub fn place_and_partition(ctx: PassContext, file: &SourceFile, mut module: Module) -> anyhow::Result<Placed> {
    let mut pm = PassManager::with_context("place,partition", &ctx).map_err(|e| anyhow::anyhow!(e))?;
    // Partitioning's output is checked whatever the build.
    pm.verify_each = true;
    if let Err(e) = pm.run(&mut module, &mut |_| {}) {
        if !e.diagnostics.is_empty() {
            let text: String = e.diagnostics.iter().map(|d| d.render(file)).collect();
            return Err(Reported(text).into());
        }
        anyhow::bail!("{}: {e}", file.name);
    }
    let groups = ctx.partitions();
    Ok(Placed { module, groups, ctx })
}

/// True when the module holds partitions already: several graphs, each sending or receiving.
pub fn is_partitioned(m: &Module) -> bool {
    m.graphs.len() > 1
        && m.graphs.iter().all(|g| g.walk().iter().any(|&n| matches!(g.nodes[n].op, Op::Send | Op::Recv)))
}

pub fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `placed @g on 2 devices: cpu0 (5 nodes), cpu1 (4 nodes); 3 transfers`.
pub fn placement_summary(m: &Module, group: &Partitioned) -> String {
    let mut parts = Vec::new();
    let mut transfers = 0;
    for (name, spec) in &group.parts {
        let Some(g) = m.graph(name) else { continue };
        let nodes = g.regions[g.body].nodes.len();
        transfers += g.walk().iter().filter(|&&n| g.nodes[n].op == Op::Send).count();
        parts.push(format!("{} ({nodes} node{})", spec.short_name(), plural(nodes)));
    }
    format!(
        "placed @{} on {} device{}: {}; {transfers} transfer{}",
        group.graph,
        group.parts.len(),
        plural(group.parts.len()),
        parts.join(", "),
        plural(transfers)
    )
}

/// A session running `m` with `backend`'s kernels. When the backend cannot compile (a host
/// Cranelift cannot target, or a compiler bug) the interpreter runs everything, and the
/// warning says why.
pub fn session(
    backend: &dyn Backend,
    m: Module,
    options: SessionOptions,
) -> anyhow::Result<(Session, Compiled, Option<String>)> {
    let (compiled, warning) = match backend.compile(&m) {
        Ok(c) => (c, None),
        Err(e) => (
            Compiled::default(),
            Some(format!("{} compilation failed ({e}); running on the interpreter", backend.name().to_uppercase())),
        ),
    };
    let session = match &compiled.kernels {
        Some(k) => Session::with_compiled(m, options, k.clone()),
        None => Session::new(m, options),
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((session, compiled, warning))
}
