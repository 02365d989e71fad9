//! The command line's side of placement: `--devices` and `--profile` (shared by every
//! subcommand that places), placing and partitioning a loaded module with diagnostics against
//! its source, and `graphc simulate`.

use crate::{plural, SimulateArgs};
use anyhow::anyhow;
use graphc::passes::PassContext;
use graphc::placement::cluster::Cluster;
use graphc::placement::cost::{CostModel, Profile};
use graphc::placement::partition::{partition_module, Partitioned};
use graphc::placement::place::place_module;
use graphc::placement::simulate::simulate as simulate_step;
use graphc_ir::{verify_module, Module, Op, SourceFile};
use std::path::PathBuf;
use std::process::ExitCode;

/// Where to place: `--devices` and `--profile`.
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
    /// The cluster and profile the flags name.
    pub fn context(&self) -> anyhow::Result<PassContext> {
        let cluster = match &self.devices {
            Some(p) => Cluster::load(p).map_err(|e| anyhow!("--devices: {e}"))?,
            None => Cluster::single_cpu(),
        };
        let profile = match &self.profile {
            Some(p) => Some(Profile::load(p).map_err(|e| anyhow!("--profile: {e}"))?),
            None => None,
        };
        Ok(PassContext { cluster, profile })
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

/// Places and partitions a module. Placement errors are printed against the source (and
/// `None` returned); anything else is an error.
pub fn place_and_partition(args: &DeviceArgs, file: &SourceFile, mut module: Module) -> anyhow::Result<Option<Placed>> {
    let ctx = args.context()?;
    let cost = CostModel::new(&ctx.cluster, ctx.profile.as_ref());
    if let Err(d) = place_module(&mut module, &cost) {
        eprint!("{}", d.render(file));
        return Ok(None);
    }
    let groups = partition_module(&mut module).map_err(|e| anyhow!("{}: {e}", file.name))?;
    if let Some(d) = verify_module(&module).first() {
        anyhow::bail!("{}: partitioning produced invalid IR: {}", file.name, d.message);
    }
    Ok(Some(Placed { module, groups, ctx }))
}

/// True when the module holds partitions already: several graphs, each sending or receiving.
pub fn is_partitioned(m: &Module) -> bool {
    m.graphs.len() > 1
        && m.graphs.iter().all(|g| g.walk().iter().any(|&n| matches!(g.nodes[n].op, Op::Send | Op::Recv)))
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

/// `graphc simulate`: the predicted step time and device utilization of each graph.
pub fn simulate(a: &SimulateArgs, file: &SourceFile, module: Module) -> anyhow::Result<ExitCode> {
    let wanted: Vec<String> = a.graphs.iter().map(|g| g.trim_start_matches('@').to_string()).collect();
    for w in &wanted {
        if module.graph(w).is_none() {
            let names: Vec<String> = module.graphs.iter().map(|g| format!("@{}", g.name)).collect();
            anyhow::bail!("{} has no graph @{w}; its graphs are {}", file.name, names.join(", "));
        }
    }
    let module = crate::run::optimize_for(a.backend, module, &[], file)?;
    let already_partitioned = is_partitioned(&module);
    let Some(placed) = place_and_partition(&a.devices, file, module)? else { return Ok(ExitCode::FAILURE) };
    let cost = CostModel::new(&placed.ctx.cluster, placed.ctx.profile.as_ref());
    // A module of partitions already: they make one step together.
    let groups = if already_partitioned && wanted.is_empty() {
        vec![Partitioned {
            graph: placed.module.graphs.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join("+"),
            parts: placed.groups.iter().flat_map(|g| g.parts.clone()).collect(),
        }]
    } else {
        placed.groups.clone()
    };
    let source = if placed.ctx.profile.is_some() { "profile and estimates" } else { "estimates" };
    let mut spans = Vec::new();
    let mut tracks: Vec<String> = placed.ctx.cluster.devices.iter().map(|d| d.name.clone()).collect();
    tracks.push(graphc::trace::TRANSFERS.into());
    let mut offset_us = 0.0;
    for group in &groups {
        if !wanted.is_empty() && !wanted.contains(&group.graph) {
            continue;
        }
        let p = simulate_step(&placed.module, group, &cost).map_err(|e| anyhow!("{}: {e}", file.name))?;
        say!(
            "@{}: predicted step time {:.3} ms on {} device{} (from {source})",
            group.graph,
            p.step_time * 1e3,
            p.devices.len(),
            plural(p.devices.len())
        );
        say!("  {:<12} {:>10} {:>12} {:>7}", "device", "busy (ms)", "utilization", "nodes");
        for ((name, busy, nodes), (_, util)) in p.devices.iter().zip(p.utilization()) {
            say!("  {:<12} {:>10.3} {:>11.1}% {:>7}", name, busy * 1e3, util * 100.0, nodes);
        }
        say!("  transfers: {} ({} bytes)", p.transfers, p.transfer_bytes);
        // Graphs follow one another on the timeline.
        for mut s in p.spans {
            s.start_us += offset_us;
            s.args.push(("step".into(), group.graph.clone()));
            spans.push(s);
        }
        offset_us += p.step_time * 1e6;
    }
    if let Some(path) = &a.trace {
        let text = graphc::trace::chrome_trace(&tracks, &spans);
        graphc_runtime::fsutil::write_atomically(path, |f| std::io::Write::write_all(f, text.as_bytes()))
            .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
        say!("predicted timeline -> {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
