//! The placement pass: gives every top-level node a full device spec. `place_graph` runs one
//! phase after another, each in a module of its own:
//!
//! 1. Constraints (`constraints`). A node's annotation (full or partial) admits the devices it
//!    is compatible with; the device must have a kernel for the op (and for every op in its
//!    regions, which go with it: a `cond`, `while` or `fusion` is placed as one unit).
//! 2. Colocation (`colocation`). A `variable` or `queue` and every node that uses its handle
//!    form one group that goes to one device, as do same-named state in different graphs of
//!    the module; the group may use only devices every member admits.
//! 3. Memory (`memory`). A group needs the bytes of its variables and constants; a device
//!    whose free memory is less is not a candidate.
//! 4. The greedy simulation of the seeds (`greedy`): nodes in order, each unplaced group to
//!    the device where its first node would finish earliest, counting the transfers of its
//!    operands (once per tensor and destination) and what each device already has queued. A
//!    constant with no annotation goes where its first user goes, and a graph input lives
//!    where its first user runs, so neither drags work onto a device by itself.
//! 5. Annotation (`annotate`, here): each node's device is written into its annotation as a
//!    full spec, and so is the device of each annotated node inside a `cond` or `while`.

mod colocation;
mod constraints;
mod greedy;
mod memory;

use super::cost::CostModel;
use crate::backend::{default_backend, Backend};
use colocation::Groups;
use constraints::{admitted, splits_off};
use graphc_ir::{Diagnostic, Graph, Module, Node, Op};
use std::collections::HashMap;

/// Places every graph of the module for the default backend ([`place_for`]).
pub fn place_module(m: &mut Module, cost: &CostModel<'_>) -> Result<bool, Diagnostic> {
    place_for(m, cost, default_backend())
}

/// Places every graph of the module, each node on a device that `backend` accepts it on;
/// returns whether any annotation changed. Errors name the nodes involved and point at them.
pub fn place_for(m: &mut Module, cost: &CostModel<'_>, backend: &dyn Backend) -> Result<bool, Diagnostic> {
    let mut state_devices: HashMap<String, usize> = HashMap::new();
    let mut changed = false;
    for g in &mut m.graphs {
        changed |= place_graph(g, cost, backend, &mut state_devices)?;
    }
    Ok(changed)
}

/// Places one graph, phase by phase (see the module's header). `state_devices` holds the
/// device of each named variable and queue that an earlier graph placed; this graph's are
/// added.
fn place_graph(
    g: &mut Graph,
    cost: &CostModel<'_>,
    backend: &dyn Backend,
    state_devices: &mut HashMap<String, usize>,
) -> Result<bool, Diagnostic> {
    let top: Vec<Node> = g.regions[g.body].nodes.clone();
    let index: HashMap<Node, usize> = top.iter().enumerate().map(|(i, &n)| (n, i)).collect();

    // 1. What each node admits.
    let allowed = constraints::admitted_per_node(g, &top, cost, backend)?;
    // 2. Colocation groups, and those that same-named state placed by an earlier graph pins.
    let groups = Groups::colocate(g, &top, &index, &allowed, cost)?;
    let fixed = groups.pinned_by_earlier_graphs(g, &top, state_devices, cost)?;
    // 3. Memory each group keeps resident.
    let group_bytes = memory::resident_bytes_per_group(g, &top, &groups);
    // 4. Greedy simulation.
    let chosen = greedy::choose_devices(g, &top, &index, &groups, &group_bytes, fixed, cost)?;
    for (i, name) in &groups.state {
        state_devices.insert(name.clone(), chosen[*i]);
    }
    // 5. Annotations.
    annotate(g, &top, &chosen, cost, backend)
}

/// Writes device `chosen[i]` into the annotation of top-level node `top[i]`, and resolves the
/// annotated nodes inside its regions; returns whether any annotation changed.
fn annotate(
    g: &mut Graph,
    top: &[Node],
    chosen: &[usize],
    cost: &CostModel<'_>,
    backend: &dyn Backend,
) -> Result<bool, Diagnostic> {
    let cluster = cost.cluster;
    let mut changed = false;
    for (i, &n) in top.iter().enumerate() {
        let d = chosen[i];
        let spec = cluster.devices[d].spec.clone();
        if g.nodes[n].device.as_ref() != Some(&spec) {
            g.nodes[n].device = Some(spec);
            changed = true;
        }
        changed |= resolve_nested(g, n, d, cost, backend)?;
    }
    Ok(changed)
}

/// Gives the annotated nodes in the regions of a `cond` or `while` placed on device `d` full
/// specs: the enclosing device when the annotation admits it, else the first device it
/// admits that can run the node. Unannotated nodes run with their enclosing node.
fn resolve_nested(
    g: &mut Graph,
    n: Node,
    d: usize,
    cost: &CostModel<'_>,
    backend: &dyn Backend,
) -> Result<bool, Diagnostic> {
    let cluster = cost.cluster;
    if !matches!(g.nodes[n].op, Op::Cond | Op::While) {
        return Ok(false);
    }
    let mut changed = false;
    let inner: Vec<Node> = g.nodes[n].regions.iter().flat_map(|&r| g.regions[r].nodes.clone()).collect();
    for m in inner {
        let mut at = d;
        if splits_off(g, m) {
            let ok = admitted(g, m, cost, backend)?;
            at = if ok[d] { d } else { ok.iter().position(|&b| b).expect("admitted returns a device or an error") };
            let spec = cluster.devices[at].spec.clone();
            if g.nodes[m].device.as_ref() != Some(&spec) {
                g.nodes[m].device = Some(spec);
                changed = true;
            }
        }
        changed |= resolve_nested(g, m, at, cost, backend)?;
    }
    Ok(changed)
}
