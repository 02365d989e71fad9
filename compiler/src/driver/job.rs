//! A step's requests: one per partition of each selected graph, and where each output the
//! user sees comes from.

use super::inputs::{make_inputs, Feeds, Inputs};
use super::place::{place_graphs, Devices};
use crate::placement::partition::Partitioned;
use graphc_ir::{Module, SourceFile};
use graphc_runtime::{RtValue, RunOutput, RunRequest, Tensor};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The requests of one step and where each output the user sees comes from.
#[derive(Debug)]
pub struct Job {
    pub requests: Vec<RunRequest>,
    /// Per output shown: its name, and which request's which fetch holds it.
    pub outputs: Vec<(String, usize, String)>,
}

impl Job {
    /// One request per partition of each selected graph. Each partition gets the inputs it
    /// has, fetches the outputs (or the `--fetch` values) it computes, and otherwise only
    /// serves the other partitions.
    pub fn new(
        m: &Module,
        graphs: &[String],
        groups: &[Partitioned],
        inputs: &[BTreeMap<String, Arc<Tensor>>],
        output_names: &[Vec<String>],
        fetches: &[String],
    ) -> Job {
        let mut requests = Vec::new();
        let mut outputs = Vec::new();
        let several = graphs.len() > 1;
        for (gi, name) in graphs.iter().enumerate() {
            let group = groups.iter().find(|p| &p.graph == name).expect("every selected graph has a group");
            let first = requests.len();
            let wanted: Vec<String> = if fetches.is_empty() {
                output_names[gi].clone()
            } else {
                fetches.iter().map(|f| f.trim_start_matches('%').to_string()).collect()
            };
            let feeds: Vec<(String, Arc<Tensor>)> = inputs[gi].iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let (reqs, at) = group.requests(m, &feeds, &wanted);
            for (w, i) in wanted.into_iter().zip(at) {
                let shown = if several { format!("{name}.{w}") } else { w.clone() };
                outputs.push((shown, first + i, w));
            }
            requests.extend(reqs);
        }
        Job { requests, outputs }
    }

    /// The names the outputs are shown and written under.
    pub fn output_names(&self) -> impl Iterator<Item = &str> {
        self.outputs.iter().map(|(shown, _, _)| shown.as_str())
    }

    pub fn named_outputs<'o>(&self, outs: &'o [RunOutput]) -> Vec<(String, &'o RtValue)> {
        self.outputs
            .iter()
            .filter_map(|(shown, req, name)| {
                let o = outs.get(*req)?;
                let i = o.names.iter().position(|n| n == name)?;
                Some((shown.clone(), &o.values[i]))
            })
            .collect()
    }
}

/// A module ready to run: placed and partitioned if asked, with the step's requests.
#[derive(Debug)]
pub struct Prepared {
    pub graphs: Vec<String>,
    pub module: Module,
    pub job: Job,
    /// The inputs that got random data, as `NAME TYPE`.
    pub random: Vec<String>,
    /// Where each graph was placed, a line each.
    pub placements: Vec<String>,
}

/// Selects the graphs, makes their inputs (from .npy files or seeded random data), places and
/// partitions on the devices, and builds the requests of one step. A placement failure is
/// [`super::report::Reported`].
pub fn prepare(a: &Inputs<'_>, devices: &Devices, file: &SourceFile, module: Module) -> anyhow::Result<Prepared> {
    let Feeds { graphs, inputs, random } = make_inputs(a, file, &module)?;
    let output_names: Vec<Vec<String>> = graphs
        .iter()
        .map(|g| module.graph(g).expect("selected graphs exist").outputs.iter().map(|o| o.name.clone()).collect())
        .collect();
    let (module, groups, placements) = place_graphs(devices, file, module, &graphs)?;
    let job = Job::new(&module, &graphs, &groups, &inputs, &output_names, a.fetches);
    Ok(Prepared { graphs, module, job, random, placements })
}
