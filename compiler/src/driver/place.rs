//! Placement and partitioning on the devices of a spec file, through the pass manager.

use super::report::{plural, Reported};
use crate::passes::{PassContext, PassManager};
use crate::placement::cluster::Cluster;
use crate::placement::cost::Profile;
use crate::placement::partition::Partitioned;
use graphc_ir::{Module, Op, SourceFile};
use std::path::PathBuf;

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
    let started = std::time::Instant::now();
    if let Err(e) = pm.run(&mut module, &mut |_| {}) {
        if !e.diagnostics.is_empty() {
            let text: String = e.diagnostics.iter().map(|d| d.render(file)).collect();
            return Err(Reported(text).into());
        }
        // In the pass's own words, as before partitioning was a pass.
        anyhow::bail!("{}: {}", file.name, e.message);
    }
    let groups = ctx.partitions();
    let parts: usize = groups.iter().map(|g| g.parts.len()).sum();
    tracing::info!(
        "placed and partitioned on {} device(s): {parts} partition(s) in {:.3} ms",
        ctx.cluster.devices.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(Placed { module, groups, ctx })
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

/// The module placed and partitioned on `devices` when a spec is given, with a line on where
/// each of `graphs` went; without one, each of `graphs` is its own single partition.
pub fn place_graphs(
    devices: &Devices,
    file: &SourceFile,
    module: Module,
    graphs: &[String],
) -> anyhow::Result<(Module, Vec<Partitioned>, Vec<String>)> {
    if devices.spec.is_none() {
        let groups = graphs
            .iter()
            .map(|g| Partitioned { graph: g.clone(), parts: vec![(g.clone(), Default::default())] })
            .collect();
        return Ok((module, groups, Vec::new()));
    }
    let p = place_and_partition(devices.context()?, file, module)?;
    let placements = graphs
        .iter()
        .filter_map(|name| p.groups.iter().find(|g| &g.graph == name))
        .map(|group| placement_summary(&p.module, group))
        .collect();
    Ok((p.module, p.groups, placements))
}
