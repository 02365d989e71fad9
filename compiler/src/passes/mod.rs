//! The pass manager and the passes. Every pass rewrites a module behind the [`Pass`]
//! interface, most of them one graph at a time; the manager runs a pipeline named by a string
//! (`canonicalize,fold,cse,dce,fuse`), verifies after every pass (always in debug builds, and
//! with `verify_each`), and can print the IR after each pass and time them. Placement and
//! partitioning (in [`crate::placement`]) work on whole modules and take the devices and the
//! cost model from a [`PassContext`].

mod canonicalize;
mod cse;
mod dce;
mod fold;
mod fuse;
mod rewrite;

use crate::placement::cluster::Cluster;
use crate::placement::cost::{CostModel, Profile};
use graphc_ir::{print_module, verify_module, Graph, Module};
use std::time::{Duration, Instant};

pub use fuse::kernel_count;

/// One rewrite of a module.
pub trait Pass {
    /// The name pipelines use.
    fn name(&self) -> &'static str;
    /// Rewrites `g` in place; returns whether anything changed. The result must verify.
    fn run(&self, g: &mut Graph) -> Result<bool, String>;
    /// Rewrites the module: each graph by [`Pass::run`], unless the pass needs the whole module.
    fn run_module(&self, m: &mut Module) -> Result<bool, String> {
        let mut changed = false;
        for g in &mut m.graphs {
            changed |= self.run(g).map_err(|e| format!("on @{}: {e}", g.name))?;
        }
        Ok(changed)
    }
}

/// What the module-level passes need: the devices to place on and measured node times.
#[derive(Clone, Debug)]
pub struct PassContext {
    pub cluster: Cluster,
    pub profile: Option<Profile>,
}

impl Default for PassContext {
    fn default() -> Self {
        PassContext { cluster: Cluster::single_cpu(), profile: None }
    }
}

/// The placement pass over [`PassContext`]'s cluster.
struct Place(PassContext);

impl Pass for Place {
    fn name(&self) -> &'static str {
        "place"
    }
    fn run(&self, _: &mut Graph) -> Result<bool, String> {
        Err("place works on whole modules".into())
    }
    fn run_module(&self, m: &mut Module) -> Result<bool, String> {
        let cost = CostModel::new(&self.0.cluster, self.0.profile.as_ref());
        crate::placement::place::place_module(m, &cost).map_err(|d| d.flat_message())
    }
}

/// The partitioning pass.
struct Partition;

impl Pass for Partition {
    fn name(&self) -> &'static str {
        "partition"
    }
    fn run(&self, _: &mut Graph) -> Result<bool, String> {
        Err("partition works on whole modules".into())
    }
    fn run_module(&self, m: &mut Module) -> Result<bool, String> {
        let parts = crate::placement::partition::partition_module(m)?;
        Ok(parts.iter().any(|p| p.parts.len() > 1))
    }
}

/// Every pass, by name, with a one-line description for `--help` and errors.
pub const PASSES: &[(&str, &str)] = &[
    ("canonicalize", "algebraic simplification (x*1, x+0, transpose/reshape chains, implicit broadcasts), softmax expansion, static shape queries"),
    ("fold", "constant folding with the reference kernels (results up to 65536 elements)"),
    ("cse", "common subexpression elimination of pure ops"),
    ("dce", "removal of pure ops whose results are unused"),
    ("fuse", "grouping of elementwise, reduction and matmul-epilogue ops into fusion regions"),
    ("place", "device placement: annotations, colocation with state, memory, then the greedy simulation (--devices)"),
    ("partition", "one graph per device, joined by send/recv pairs (after place)"),
];

/// The pipeline `graphc opt` runs when none is given.
pub const DEFAULT_PIPELINE: &str = "canonicalize,fold,cse,dce,fuse";

fn make(name: &str, ctx: &PassContext) -> Option<Box<dyn Pass>> {
    Some(match name {
        "canonicalize" => Box::new(canonicalize::Canonicalize),
        "fold" => Box::new(fold::Fold),
        "cse" => Box::new(cse::Cse),
        "dce" => Box::new(dce::Dce),
        "fuse" => Box::new(fuse::Fuse),
        "place" => Box::new(Place(ctx.clone())),
        "partition" => Box::new(Partition),
        _ => return None,
    })
}

/// Parses `a,b,c` into passes; an unknown name is an error listing the known ones.
pub fn parse_pipeline(spec: &str, ctx: &PassContext) -> Result<Vec<Box<dyn Pass>>, String> {
    let names: Vec<&str> = spec.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if names.is_empty() {
        return Err("the pipeline names no pass".into());
    }
    names
        .iter()
        .map(|n| {
            make(n, ctx).ok_or_else(|| {
                let known: Vec<&str> = PASSES.iter().map(|(k, _)| *k).collect();
                let hint = graphc_ir::suggest::closest(n, known.iter().copied())
                    .map(|s| format!("did you mean '{s}'? "))
                    .unwrap_or_default();
                format!("unknown pass '{n}'; {hint}the passes are {}", known.join(", "))
            })
        })
        .collect()
}

/// When to print the IR.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum PrintAfter {
    #[default]
    Never,
    All,
    /// After the passes of these names.
    Some(Vec<String>),
}

/// Runs a pipeline over every graph of a module.
pub struct PassManager {
    pub passes: Vec<Box<dyn Pass>>,
    /// Verify after every pass (always on in debug builds).
    pub verify_each: bool,
    pub print_after: PrintAfter,
}

impl std::fmt::Debug for PassManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.passes.iter().map(|p| p.name()).collect();
        f.debug_struct("PassManager").field("passes", &names).field("verify_each", &self.verify_each).finish()
    }
}

/// How long one pass took over the whole module.
#[derive(Clone, Debug)]
pub struct Timing {
    pub pass: &'static str,
    pub time: Duration,
    pub changed: bool,
}

impl PassManager {
    pub fn new(pipeline: &str) -> Result<Self, String> {
        PassManager::with_context(pipeline, &PassContext::default())
    }

    /// A pipeline whose placement passes use these devices and this profile.
    pub fn with_context(pipeline: &str, ctx: &PassContext) -> Result<Self, String> {
        Ok(PassManager { passes: parse_pipeline(pipeline, ctx)?, verify_each: false, print_after: PrintAfter::Never })
    }

    /// Runs every pass on every graph, in order. `dump` receives the module text after each
    /// pass that `print_after` selects, headed by a comment naming the pass (so a dump is
    /// itself valid IR).
    pub fn run(&self, m: &mut Module, dump: &mut dyn FnMut(&str)) -> Result<Vec<Timing>, String> {
        let mut timings = Vec::new();
        for pass in &self.passes {
            let start = Instant::now();
            let changed = pass.run_module(m).map_err(|e| match e.strip_prefix("on @") {
                Some(_) => format!("pass '{}' failed {e}", pass.name()),
                None => format!("pass '{}' failed: {e}", pass.name()),
            })?;
            timings.push(Timing { pass: pass.name(), time: start.elapsed(), changed });
            if self.verify_each || cfg!(debug_assertions) {
                let diags = verify_module(m);
                if let Some(d) = diags.first() {
                    return Err(format!(
                        "pass '{}' produced invalid IR ({} problems); first: {}",
                        pass.name(),
                        diags.len(),
                        d.message
                    ));
                }
            }
            let print = match &self.print_after {
                PrintAfter::Never => false,
                PrintAfter::All => true,
                PrintAfter::Some(names) => names.iter().any(|n| n == pass.name()),
            };
            if print {
                dump(&format!("// ----- IR after {} -----\n{}", pass.name(), print_module(m)));
            }
        }
        Ok(timings)
    }
}

/// A per-pass timing table, like `mlir-opt --mlir-timing`.
pub fn timing_table(timings: &[Timing]) -> String {
    let total: Duration = timings.iter().map(|t| t.time).sum();
    let mut s = String::from("  time (ms)   share  pass\n");
    for t in timings {
        let share = if total.is_zero() { 0.0 } else { 100.0 * t.time.as_secs_f64() / total.as_secs_f64() };
        s.push_str(&format!("{:>11.3}  {:>5.1}%  {}\n", t.time.as_secs_f64() * 1e3, share, t.pass));
    }
    s.push_str(&format!("{:>11.3}  100.0%  total\n", total.as_secs_f64() * 1e3));
    s
}
