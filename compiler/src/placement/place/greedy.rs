//! Phase 4 of placement, the greedy simulation of the seeds: nodes in order, each unplaced
//! group to the device where its first node would finish earliest, counting the transfers of
//! its operands (once per tensor and destination) and what each device already has queued;
//! only devices with the memory for the group's resident bytes are candidates. A constant
//! with no annotation goes where its first user goes, and a graph input lives where its first
//! user runs, so neither drags work onto a device by itself.

use super::colocation::Groups;
use super::memory::out_of_memory;
use crate::placement::cost::{type_bytes, CostModel};
use graphc_ir::{Diagnostic, Graph, Node, Op, Type, Value};
use std::collections::HashMap;

/// A device for each top-level node, by index. `fixed` pins groups to devices (where an
/// earlier graph put their state); `group_bytes` is what each group keeps resident.
pub(super) fn choose_devices(
    g: &Graph,
    top: &[Node],
    index: &HashMap<Node, usize>,
    groups: &Groups,
    group_bytes: &HashMap<usize, u64>,
    fixed: HashMap<usize, usize>,
    cost: &CostModel<'_>,
) -> Result<Vec<usize>, Diagnostic> {
    let cluster = cost.cluster;
    let ndev = cluster.devices.len();
    let mut sim = Sim {
        g,
        cost,
        ready: HashMap::new(),
        device_free: vec![0.0; ndev],
        link_free: HashMap::new(),
        home: HashMap::new(),
    };
    let mut mem_used = vec![0u64; ndev];
    let mut group_device: HashMap<usize, usize> = fixed;
    for (&root, &d) in &group_device {
        mem_used[d] += group_bytes[&root];
    }
    let mut chosen: Vec<Option<usize>> = vec![None; top.len()];
    let mut last_device: Option<usize> = None;
    for i in 0..top.len() {
        let n = top[i];
        let root = groups.of(i);
        if groups.members[&root].len() == 1 && floats(g, n) {
            continue; // placed with its first user
        }
        let d = match group_device.get(&root) {
            Some(&d) => d,
            None => {
                let need = group_bytes[&root];
                let fits: Vec<usize> = (0..ndev)
                    .filter(|&d| groups.allowed[&root][d] && mem_used[d] + need <= cluster.devices[d].memory)
                    .collect();
                if fits.is_empty() {
                    return Err(out_of_memory(
                        g,
                        top,
                        &groups.members[&root],
                        need,
                        &groups.allowed[&root],
                        &mem_used,
                        cost,
                    ));
                }
                let best = choose(&sim, n, &fits, last_device);
                group_device.insert(root, best);
                mem_used[best] += need;
                best
            }
        };
        // Floating constants among the operands go with this node.
        for &v in &g.nodes[n].operands {
            if let Some(p) = g.producer(v) {
                if let Some(&j) = index.get(&p) {
                    if chosen[j].is_none() && j < i {
                        chosen[j] = Some(d);
                        sim.commit(p, d);
                    }
                }
            }
        }
        chosen[i] = Some(d);
        sim.commit(n, d);
        last_device = Some(d);
    }
    // Constants used by no node (only by outputs) stay on the first device they may use.
    for (i, c) in chosen.iter_mut().enumerate() {
        if c.is_none() {
            let d = groups.allowed[&groups.of(i)].iter().position(|&b| b).unwrap_or(0);
            *c = Some(d);
        }
    }
    Ok(chosen.into_iter().map(|c| c.expect("every node is placed")).collect())
}

/// A constant with no annotation that only nodes use (not the graph's outputs) floats: it is
/// placed with its first user rather than on its own (when it is alone in its group).
fn floats(g: &Graph, n: Node) -> bool {
    let nd = &g.nodes[n];
    nd.op == Op::Constant
        && nd.device.is_none()
        && !g.uses(nd.results[0]).is_empty()
        && g.uses(nd.results[0]).iter().all(|u| u.user().is_some())
}

/// The device for node `n` among `fits`: where it finishes earliest, unless that is away from
/// its operands (or, with none placed yet, from the node before it) and gains less than the
/// link's latency. The greedy rule alone is myopic: it sends a tiny op to an idle device to
/// save a microsecond, and the step later pays a transfer to bring the result back.
fn choose(sim: &Sim<'_, '_>, n: Node, fits: &[usize], last: Option<usize>) -> usize {
    let finish: Vec<(usize, f64, u64)> =
        fits.iter().map(|&d| (d, sim.finish(n, d), sim.resident_operand_bytes(n, d))).collect();
    let earliest = |set: &mut dyn Iterator<Item = &(usize, f64, u64)>| {
        set.min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0))).copied().expect("a candidate")
    };
    let best = earliest(&mut finish.iter());
    let most = finish.iter().map(|f| f.2).max().unwrap_or(0);
    let home = if most > 0 {
        earliest(&mut finish.iter().filter(|f| f.2 == most))
    } else {
        match last.and_then(|l| finish.iter().find(|f| f.0 == l)) {
            Some(f) => *f,
            None => best,
        }
    };
    if best.0 != home.0 && best.1 + sim.cost.cluster.link(home.0, best.0).latency < home.1 {
        best.0
    } else {
        home.0
    }
}

/// The placement-time schedule: when each value is ready on each device.
struct Sim<'g, 'c> {
    g: &'g Graph,
    cost: &'g CostModel<'c>,
    ready: HashMap<(Value, usize), f64>,
    device_free: Vec<f64>,
    link_free: HashMap<(usize, usize), f64>,
    /// The device each placed value was produced on (inputs: where their first user runs).
    home: HashMap<Value, usize>,
}

impl Sim<'_, '_> {
    /// When `v` could be on device `d`: at once if it is there; for a graph input not yet
    /// used, after a transfer from the host (the first device), where feeds come from; for a
    /// floating constant, at once; else after a transfer from its home.
    fn arrival(&self, v: Value, d: usize, data: bool) -> f64 {
        if let Some(&t) = self.ready.get(&(v, d)) {
            return t;
        }
        let Some(&s) = self.home.get(&v) else {
            let fed = matches!(self.g.values[v].def, graphc_ir::ValueDef::Param(..));
            return if fed { self.cost.transfer_time(&self.g.values[v].ty, 0, d) } else { 0.0 };
        };
        let t = self.ready[&(v, s)];
        let bytes_ty = if data { self.g.values[v].ty.clone() } else { Type::Token };
        let start = t.max(self.link_free.get(&(s, d)).copied().unwrap_or(0.0));
        start + self.cost.transfer_time(&bytes_ty, s, d).max(self.cost.cluster.link(s, d).latency)
    }

    /// When node `n` would finish on device `d`.
    fn finish(&self, n: Node, d: usize) -> f64 {
        let nd = &self.g.nodes[n];
        let inputs = nd.operands.iter().map(|&v| self.arrival(v, d, true));
        let controls = nd.control_deps.iter().map(|&v| self.arrival(v, d, false));
        let start = inputs.chain(controls).fold(self.device_free[d], f64::max);
        start + self.cost.node_time(self.g, n, d)
    }

    /// Operand bytes already on `d`.
    fn resident_operand_bytes(&self, n: Node, d: usize) -> u64 {
        self.g.nodes[n]
            .operands
            .iter()
            .filter(|&&v| self.home.get(&v) == Some(&d))
            .map(|&v| type_bytes(&self.g.values[v].ty))
            .sum()
    }

    /// Runs `n` on `d`: transfers its operands, advances the device's clock.
    fn commit(&mut self, n: Node, d: usize) {
        let g = self.g;
        let nd = &g.nodes[n];
        let mut start = self.device_free[d];
        for (v, data) in nd.operands.iter().map(|&v| (v, true)).chain(nd.control_deps.iter().map(|&v| (v, false))) {
            if !self.home.contains_key(&v) {
                // An input, or a floating constant: it lives where its first user runs.
                let t = self.arrival(v, d, data);
                self.home.insert(v, d);
                self.ready.insert((v, d), t);
            }
            let t = self.arrival(v, d, data);
            let s = self.home[&v];
            if s != d && !self.ready.contains_key(&(v, d)) {
                let ty = if data { g.values[v].ty.clone() } else { Type::Token };
                let busy = type_bytes(&ty) as f64 / self.cost.cluster.link(s, d).bandwidth;
                let link = self.link_free.entry((s, d)).or_insert(0.0);
                *link = link.max(self.ready[&(v, s)]) + busy;
                self.ready.insert((v, d), t);
            }
            start = start.max(t);
        }
        let end = start + self.cost.node_time(g, n, d);
        self.device_free[d] = end;
        for &r in &nd.results {
            self.home.insert(r, d);
            self.ready.insert((r, d), end);
        }
    }
}
