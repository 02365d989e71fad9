//! The placement pass: gives every top-level node a full device spec.
//!
//! 1. Constraints. A node's annotation (full or partial) admits the devices it is compatible
//!    with; the device must have a kernel for the op (and for every op in its regions, which
//!    go with it: a `cond`, `while` or `fusion` is placed as one unit).
//! 2. Colocation. A `variable` or `queue` and every node that uses its handle form one group
//!    that goes to one device, as do same-named state in different graphs of the module; the
//!    group may use only devices every member admits.
//! 3. Memory. A group needs the bytes of its variables and constants; a device whose free
//!    memory is less is not a candidate.
//! 4. The greedy simulation of the seeds: nodes in order, each unplaced group to the device
//!    where its first node would finish earliest, counting the transfers of its operands
//!    (once per tensor and destination) and what each device already has queued. A constant
//!    with no annotation goes where its first user goes, and a graph input lives where its
//!    first user runs, so neither drags work onto a device by itself.

use super::cost::{type_bytes, CostModel};
use graphc_ir::{Diagnostic, Graph, Module, Node, Op, Type, Value};
use std::collections::HashMap;

/// Places every graph of the module; returns whether any annotation changed. Errors name the
/// nodes involved and point at them.
pub fn place_module(m: &mut Module, cost: &CostModel<'_>) -> Result<bool, Diagnostic> {
    let mut state_devices: HashMap<String, usize> = HashMap::new();
    let mut changed = false;
    for g in &mut m.graphs {
        changed |= place_graph(g, cost, &mut state_devices)?;
    }
    Ok(changed)
}

/// Union-find over top-level node indices.
struct Groups {
    parent: Vec<usize>,
}

impl Groups {
    fn find(&mut self, i: usize) -> usize {
        let p = self.parent[i];
        if p == i {
            return i;
        }
        let r = self.find(p);
        self.parent[i] = r;
        r
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        // The earlier node stays the root, so a group is named by its first member.
        if ra != rb {
            self.parent[ra.max(rb)] = ra.min(rb);
        }
    }
}

fn place_graph(
    g: &mut Graph,
    cost: &CostModel<'_>,
    state_devices: &mut HashMap<String, usize>,
) -> Result<bool, Diagnostic> {
    let cluster = cost.cluster;
    let ndev = cluster.devices.len();
    let top: Vec<Node> = g.regions[g.body].nodes.clone();
    let index: HashMap<Node, usize> = top.iter().enumerate().map(|(i, &n)| (n, i)).collect();

    // 1. What each node admits.
    let mut allowed: Vec<Vec<bool>> = Vec::with_capacity(top.len());
    for &n in &top {
        allowed.push(admitted(g, n, cost)?);
    }

    // 2. Colocation groups.
    let mut groups = Groups { parent: (0..top.len()).collect() };
    let mut state_of_group: Vec<(usize, String)> = Vec::new();
    for (i, &n) in top.iter().enumerate() {
        for &r in &g.nodes[n].results {
            if !matches!(g.values[r].ty, Type::Var(_) | Type::Queue(_)) {
                continue;
            }
            for u in g.uses(r) {
                if let Some(user) = u.user() {
                    if let Some(&j) = index.get(&user) {
                        groups.union(i, j);
                    }
                }
            }
        }
        if matches!(g.nodes[n].op, Op::Variable | Op::Queue) {
            if let Some(name) = g.nodes[n].attrs.str("name") {
                state_of_group.push((i, name.to_string()));
            }
        }
    }
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in 0..top.len() {
        let r = groups.find(i);
        members.entry(r).or_default().push(i);
    }
    let mut group_allowed: HashMap<usize, Vec<bool>> = HashMap::new();
    for (&root, ms) in &members {
        let mut ok = vec![true; ndev];
        for &i in ms {
            for d in 0..ndev {
                ok[d] &= allowed[i][d];
            }
        }
        if !ok.iter().any(|&b| b) {
            return Err(colocation_conflict(g, &top, ms, cost));
        }
        group_allowed.insert(root, ok);
    }
    // Same-named state placed by an earlier graph pins the group here too.
    let mut fixed: HashMap<usize, usize> = HashMap::new();
    for (i, name) in &state_of_group {
        let root = groups.find(*i);
        if let Some(&d) = state_devices.get(name) {
            if !group_allowed[&root][d] {
                let nd = &g.nodes[top[*i]];
                return Err(Diagnostic::error(
                    nd.span,
                    format!(
                        "state '{name}' is on {} in an earlier graph, but {} here cannot go there",
                        cluster.devices[d].name,
                        g.describe(top[*i])
                    ),
                )
                .with_help("a variable or queue shared by name lives on one device; annotate its users alike"));
            }
            fixed.insert(root, d);
        }
    }

    // 3. Memory each group keeps resident.
    let mut group_bytes: HashMap<usize, u64> = HashMap::new();
    for (i, &n) in top.iter().enumerate() {
        *group_bytes.entry(groups.find(i)).or_default() += resident_bytes(g, n);
    }

    // 4. Greedy simulation.
    let mut sim = Sim {
        g: &*g,
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
        let root = groups.find(i);
        let is_floating_source = members[&root].len() == 1
            && g.nodes[n].op == Op::Constant
            && g.nodes[n].device.is_none()
            && !g.uses(g.nodes[n].results[0]).is_empty()
            && g.uses(g.nodes[n].results[0]).iter().all(|u| u.user().is_some());
        if is_floating_source {
            continue; // placed with its first user
        }
        let d = match group_device.get(&root) {
            Some(&d) => d,
            None => {
                let need = group_bytes[&root];
                let fits: Vec<usize> = (0..ndev)
                    .filter(|&d| group_allowed[&root][d] && mem_used[d] + need <= cluster.devices[d].memory)
                    .collect();
                if fits.is_empty() {
                    return Err(out_of_memory(g, &top, &members[&root], need, &group_allowed[&root], &mem_used, cost));
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
    for i in 0..top.len() {
        if chosen[i].is_none() {
            let d = group_allowed[&groups.find(i)].iter().position(|&b| b).unwrap_or(0);
            chosen[i] = Some(d);
        }
    }
    for (i, name) in &state_of_group {
        state_devices.insert(name.clone(), chosen[*i].expect("every node is placed"));
    }

    let mut changed = false;
    for (i, &n) in top.iter().enumerate() {
        let d = chosen[i].expect("every node is placed");
        let spec = cluster.devices[d].spec.clone();
        if g.nodes[n].device.as_ref() != Some(&spec) {
            g.nodes[n].device = Some(spec);
            changed = true;
        }
        changed |= resolve_nested(g, n, d, cost)?;
    }
    Ok(changed)
}

/// True for a node directly in a `cond` or `while` region that carries its own annotation:
/// it runs where that says, and partitioning splits the control flow around it.
fn splits_off(g: &Graph, m: Node) -> bool {
    let parent = g.regions[g.nodes[m].parent].parent;
    parent.is_some_and(|p| matches!(g.nodes[p].op, Op::Cond | Op::While))
        && g.nodes[m].device.as_ref().is_some_and(|s| !s.is_empty())
}

/// Gives the annotated nodes in the regions of a `cond` or `while` placed on device `d` full
/// specs: the enclosing device when the annotation admits it, else the first device it
/// admits that can run the node. Unannotated nodes run with their enclosing node.
fn resolve_nested(g: &mut Graph, n: Node, d: usize, cost: &CostModel<'_>) -> Result<bool, Diagnostic> {
    let cluster = cost.cluster;
    if !matches!(g.nodes[n].op, Op::Cond | Op::While) {
        return Ok(false);
    }
    let mut changed = false;
    let inner: Vec<Node> = g.nodes[n].regions.iter().flat_map(|&r| g.regions[r].nodes.clone()).collect();
    for m in inner {
        let mut at = d;
        if splits_off(g, m) {
            let ok = admitted(g, m, cost)?;
            at = if ok[d] { d } else { ok.iter().position(|&b| b).expect("admitted returns a device or an error") };
            let spec = cluster.devices[at].spec.clone();
            if g.nodes[m].device.as_ref() != Some(&spec) {
                g.nodes[m].device = Some(spec);
                changed = true;
            }
        }
        changed |= resolve_nested(g, m, at, cost)?;
    }
    Ok(changed)
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

/// The devices node `n` (with its regions) may run on: compatible with every annotation in
/// it, and having a kernel for every op in it.
fn admitted(g: &Graph, n: Node, cost: &CostModel<'_>) -> Result<Vec<bool>, Diagnostic> {
    let cluster = cost.cluster;
    let mut ok = vec![true; cluster.devices.len()];
    let mut stack = vec![n];
    while let Some(m) = stack.pop() {
        let nd = &g.nodes[m];
        if m != n && splits_off(g, m) {
            continue; // placed on its own by resolve_nested
        }
        stack.extend(nd.regions.iter().flat_map(|&r| g.regions[r].nodes.iter().copied()));
        if let Some(spec) = nd.device.as_ref().filter(|s| !s.is_empty()) {
            let matching: Vec<usize> = cluster.matching(spec).collect();
            if matching.is_empty() {
                return Err(Diagnostic::error(
                    nd.span,
                    format!("{} is pinned to '{spec}', which matches no device of the cluster", g.describe(m)),
                )
                .with_help(format!("the devices are {}", cluster.listing())));
            }
            let before = ok.clone();
            for (d, x) in ok.iter_mut().enumerate() {
                *x &= matching.contains(&d);
            }
            if m != n && !ok.iter().any(|&b| b) && before.iter().any(|&b| b) {
                return Err(Diagnostic::error(
                    nd.span,
                    format!(
                        "{} is pinned to '{spec}', but the {} it is inside is pinned elsewhere",
                        g.describe(m),
                        g.nodes[n].op.name()
                    ),
                )
                .with_note(g.nodes[n].span, format!("the enclosing {}", g.describe(n)))
                .with_help("a fusion runs on one device with everything in its kernel"));
            }
        }
        if !cluster.devices.iter().any(|d| d.supports(nd.op)) {
            return Err(Diagnostic::error(nd.span, format!("no device of the cluster can run {}", g.describe(m)))
                .with_help(format!(
                    "every device lists '{}' as unsupported; the devices are {}",
                    nd.op.name(),
                    cluster.listing()
                )));
        }
        for (d, x) in ok.iter_mut().enumerate() {
            *x &= cluster.devices[d].supports(nd.op);
        }
    }
    if !ok.iter().any(|&b| b) {
        // Some device matches the annotations but lacks a kernel: say which and for what.
        let nd = &g.nodes[n];
        let pinned = nd.device.as_ref().filter(|s| !s.is_empty());
        let lacking: Vec<String> = cluster
            .devices
            .iter()
            .filter(|d| pinned.is_none_or(|s| s.is_compatible_with(&d.spec)))
            .filter_map(|d| {
                let mut ops = vec![nd.op];
                let mut stack: Vec<Node> = nd.regions.iter().flat_map(|&r| g.regions[r].nodes.clone()).collect();
                while let Some(m) = stack.pop() {
                    ops.push(g.nodes[m].op);
                    stack.extend(g.nodes[m].regions.iter().flat_map(|&r| g.regions[r].nodes.iter().copied()));
                }
                let missing = ops.iter().find(|&&op| !d.supports(op))?;
                Some(format!("{} has no kernel for '{}'", d.name, missing.name()))
            })
            .collect();
        let what = match pinned {
            Some(s) => format!("{} is pinned to '{s}'", g.describe(n)),
            None => format!("{} has annotations", g.describe(n)),
        };
        return Err(Diagnostic::error(nd.span, format!("{what}, but no device there can run it")).with_help(format!(
            "{}; the devices are {}",
            lacking.join(", "),
            cluster.listing()
        )));
    }
    Ok(ok)
}

/// Bytes a node keeps on its device for as long as the session lives: variables, constants.
fn resident_bytes(g: &Graph, n: Node) -> u64 {
    let nd = &g.nodes[n];
    let own = match nd.op {
        Op::Variable => match &g.values[nd.results[0]].ty {
            Type::Var(t) => graphc_runtime::limits::tensor_bytes(t).unwrap_or(u64::MAX / 4),
            _ => 0,
        },
        Op::Constant => type_bytes(&g.values[nd.results[0]].ty),
        _ => 0,
    };
    own + nd.regions.iter().flat_map(|&r| g.regions[r].nodes.iter()).map(|&m| resident_bytes(g, m)).sum::<u64>()
}

fn colocation_conflict(g: &Graph, top: &[Node], members: &[usize], cost: &CostModel<'_>) -> Diagnostic {
    let cluster = cost.cluster;
    let state = members.iter().map(|&i| top[i]).find(|&n| matches!(g.nodes[n].op, Op::Variable | Op::Queue));
    let first = state.unwrap_or(top[members[0]]);
    let mut d = Diagnostic::error(
        g.nodes[first].span,
        format!(
            "{} and the nodes that use it must share a device, but their annotations and ops admit no common device",
            g.describe(first)
        ),
    );
    for &i in members {
        let n = top[i];
        if n == first {
            continue;
        }
        let nd = &g.nodes[n];
        let why = match &nd.device {
            Some(s) if !s.is_empty() => format!("{} is pinned to '{s}'", g.describe(n)),
            _ => {
                let can: Vec<&str> =
                    cluster.devices.iter().filter(|d| d.supports(nd.op)).map(|d| d.name.as_str()).collect();
                format!("{} can run on {}", g.describe(n), can.join(", "))
            }
        };
        d = d.with_note(nd.span, why);
    }
    let pin = g.nodes[first].device.as_ref().filter(|s| !s.is_empty());
    if let Some(s) = pin {
        d = d.with_note(g.nodes[first].span, format!("{} is pinned to '{s}'", g.describe(first)));
    }
    d.with_help("a variable or queue is colocated with every op that reads or writes it; annotate them alike")
}

fn out_of_memory(
    g: &Graph,
    top: &[Node],
    members: &[usize],
    need: u64,
    allowed: &[bool],
    used: &[u64],
    cost: &CostModel<'_>,
) -> Diagnostic {
    let cluster = cost.cluster;
    let n = members.iter().map(|&i| top[i]).find(|&n| resident_bytes(g, n) > 0).unwrap_or(top[members[0]]);
    let free: Vec<String> = (0..cluster.devices.len())
        .filter(|&d| allowed[d])
        .map(|d| {
            let dev = &cluster.devices[d];
            format!("{} has {} free of {}", dev.name, human(dev.memory.saturating_sub(used[d])), human(dev.memory))
        })
        .collect();
    let total: u64 = (0..top.len()).map(|i| resident_bytes(g, top[i])).sum();
    Diagnostic::error(
        g.nodes[n].span,
        format!(
            "{} needs {} on one device, but no device it may use has that much memory free",
            g.describe(n),
            human(need)
        ),
    )
    .with_help(format!("{}; the graph keeps {} resident in all", free.join(", "), human(total)))
}

fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
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

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn human_sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 30), "3.0 GiB");
    }
}
