//! The passes and their registry. Every pass rewrites a module behind the [`Pass`] interface,
//! most of them one graph at a time; [`PassManager`] (in `manager.rs`) runs a pipeline named
//! by a string (`canonicalize,fold,cse,dce,fuse`). Placement and partitioning (in
//! [`crate::placement::passes`]) work on whole modules and take the devices and the cost model
//! from a [`PassContext`].

use crate::autodiff::Autodiff;

mod canonicalize;
mod cse;
mod dce;
mod fold;
mod fuse;
pub mod manager;
mod rewrite;

use crate::placement::passes::{Partition, Place};

pub use crate::placement::passes::PassContext;
pub use fuse::kernel_count;
pub use manager::{timing_table, Pass, PassError, PassManager, PrintAfter, Timing};

/// Every pass, by name, with a one-line description for `--help` and errors.
pub const PASSES: &[(&str, &str)] = &[
    ("autodiff", "reverse-mode differentiation: each grad replaced by the adjoint graph of its loss"),
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
        "autodiff" => Box::new(Autodiff(ctx.clone())),
        "canonicalize" => Box::new(canonicalize::Canonicalize),
        "fold" => Box::new(fold::Fold),
        "cse" => Box::new(cse::Cse),
        "dce" => Box::new(dce::Dce),
        "fuse" => Box::new(fuse::Fuse(ctx.backend)),
        "place" => Box::new(Place(ctx.clone())),
        "partition" => Box::new(Partition(ctx.clone())),
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

impl PassManager {
    pub fn new(pipeline: &str) -> Result<Self, String> {
        PassManager::with_context(pipeline, &PassContext::default())
    }

    /// A pipeline whose placement passes use these devices and this profile.
    pub fn with_context(pipeline: &str, ctx: &PassContext) -> Result<Self, String> {
        Ok(PassManager::of(parse_pipeline(pipeline, ctx)?))
    }
}
