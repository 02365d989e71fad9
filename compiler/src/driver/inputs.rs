//! A step's inputs: which graphs run, and their feeds from `.npy` files or seeded random data.

use anyhow::{anyhow, bail};
use graphc_ir::{Attr, Graph, Module, NodeSpec, Op, SourceFile, Type, Value};
use graphc_runtime::budget::MemoryBudget;
use graphc_runtime::limits::default_max_tensor_bytes;
use graphc_runtime::{feeds, Tensor};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What `run` and `bench` take from the command line to build a step.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub graphs: &'a [String],
    pub flags: &'a [String],
    pub fetches: &'a [String],
    pub seed: u64,
    /// `--memory-limit`, which the inputs count against before they are read.
    pub memory_limit: Option<u64>,
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
    let given = feeds::parse_input_flags(a.flags).map_err(|e| anyhow!(e))?;
    let selected: Vec<&Graph> = graphs.iter().map(|g| module.graph(g).expect("selected graphs exist")).collect();
    feeds::check_input_names(&given, &selected).map_err(|e| anyhow!(e))?;
    let max_bytes = default_max_tensor_bytes();
    let mut room = MemoryBudget::resolve(a.memory_limit).map_err(|e| anyhow!("{e}"))?.limit();
    let mut random = Vec::new();
    // Each selected graph's inputs, by name, made before partitioning moves them around.
    let inputs = selected
        .iter()
        .map(|g| feeds::graph_feeds(g, &given, a.seed, max_bytes, &mut room, &mut random).map_err(|e| anyhow!(e)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if !a.fetches.is_empty() && graphs.len() > 1 {
        bail!("--fetch works on one graph, but {} are selected", graphs.len());
    }
    Ok(Feeds { graphs, inputs, random })
}

/// The graphs to run: those named; else the only one; else all of a partitioned module (every
/// graph sends or receives); else the first, with a note.
pub fn select_graphs(wanted: &[String], file: &SourceFile, m: &Module) -> anyhow::Result<Vec<String>> {
    let all: Vec<String> = m.graphs.iter().map(|g| g.name.clone()).collect();
    let (graphs, note) = feeds::select_graphs(wanted, &file.name, &all, m.is_partitioned()).map_err(|e| anyhow!(e))?;
    if let Some(note) = note {
        eprintln!("note: {note}");
    }
    Ok(graphs)
}

/// Makes each input named in `flags` (`NAME=PATH.npy`, as `--input` takes them) a constant of
/// the file's value in every graph that has it (`graphc compile --input`): the input leaves the
/// graph's signature, and a constant of its name and value takes its place, so a program
/// compiled for one value cannot be fed another.
pub fn freeze_inputs(m: &mut Module, flags: &[String]) -> anyhow::Result<()> {
    let given = feeds::parse_input_flags(flags).map_err(|e| anyhow!(e))?;
    feeds::check_input_names(&given, &m.graphs.iter().collect::<Vec<_>>()).map_err(|e| anyhow!(e))?;
    for (name, path) in given {
        // Its type checked against every graph's input from the header, before the data is read.
        let file = graphc_runtime::npy::NpyFile::open(&path).map_err(|e| anyhow!("input '{name}': {e}"))?;
        for g in &m.graphs {
            let Some(&v) = g.inputs().iter().find(|&&v| g.values[v].name.as_deref() == Some(name)) else { continue };
            if g.values[v].ty != Type::Tensor(file.ty()) {
                bail!(
                    "input '{name}' of @{}: expected {}, got {} from {}",
                    g.name,
                    g.values[v].ty,
                    file.ty(),
                    path.display()
                );
            }
        }
        let t = file.read().map_err(|e| anyhow!("input '{name}': {e}"))?;
        for g in &mut m.graphs {
            let Some(&v) = g.inputs().iter().find(|&&v| g.values[v].name.as_deref() == Some(name)) else { continue };
            let constant = NodeSpec::new(Op::Constant, Vec::<Value>::new()).attr("value", Attr::Tensor(t.to_literal()));
            let body = g.body;
            let n = g.insert_node(body, 0, constant).map_err(|e| anyhow!("input '{name}': {e}"))?;
            let c = g.nodes[n].results[0];
            g.replace_all_uses(v, c);
            g.remove_input(v).map_err(|e| anyhow!("input '{name}': {e}"))?;
            g.set_name(c, name);
        }
    }
    Ok(())
}
