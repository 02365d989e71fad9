//! A step's inputs: which graphs run, and their feeds from `.npy` files or seeded random data.

use anyhow::{anyhow, bail};
use graphc_ir::{Module, SourceFile, Type};
use graphc_runtime::limits::{check_tensor_size, default_max_tensor_bytes};
use graphc_runtime::random::random_input;
use graphc_runtime::{npy, Tensor};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// What `run` and `bench` take from the command line to build a step.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub graphs: &'a [String],
    pub flags: &'a [String],
    pub fetches: &'a [String],
    pub seed: u64,
}

/// The selected graphs and, per graph, its inputs by name; and the inputs that got random
/// data, as `NAME TYPE`.
#[derive(Debug)]
pub struct Feeds {
    pub graphs: Vec<String>,
    pub inputs: Vec<BTreeMap<String, Arc<Tensor>>>,
    pub random: Vec<String>,
}

/// Selects the graphs and makes their inputs (from .npy files or seeded random data).
pub fn make_inputs(a: &Inputs<'_>, file: &SourceFile, module: &Module) -> anyhow::Result<Feeds> {
    let graphs = select_graphs(a.graphs, file, module)?;
    let given = parse_input_flags(a.flags)?;
    check_input_names(&given, &graphs, module)?;
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

    Ok(Feeds { graphs, inputs, random })
}

/// The graphs to run: those named; else the only one; else all of a partitioned module (every
/// graph sends or receives); else the first, with a note.
pub fn select_graphs(wanted: &[String], file: &SourceFile, m: &Module) -> anyhow::Result<Vec<String>> {
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
        _ if super::place::is_partitioned(m) => Ok(all),
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

pub fn parse_input_flags(flags: &[String]) -> anyhow::Result<BTreeMap<&str, PathBuf>> {
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
