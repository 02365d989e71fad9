//! The step simulator: predicts how a partitioned graph runs on a cluster from the cost model
//! alone. Each device runs its partition's nodes one at a time in their order, as the
//! runtime does; a recv waits for its send's tensor to cross the link (one transfer at a time
//! per link and direction); the step ends when the last device does.
//!
//! A `cond` or `while` that sends or receives runs node by node inside its regions, as the
//! runtime does: its partitions on other devices exchange tensors with it midway, so taking it
//! as one step would wait on transfers it makes itself. Every partition of a control node
//! takes the same path: a cond its `then` branch (the predicate is unknown here, and one
//! branch for all keeps the partitions' sends and recvs matched), a while `ASSUMED_TRIPS`
//! trips, keys qualified by the iteration as the runtime qualifies them.

use super::cost::{type_bytes, CostModel, ASSUMED_TRIPS};
use super::partition::Partitioned;
use crate::trace::{Span, TRANSFERS};
use graphc_ir::{DeviceSpec, Module, Node, Op, RegionFlow};
use std::collections::HashMap;

/// The prediction for one step.
#[derive(Clone, Debug)]
pub struct Prediction {
    /// Seconds.
    pub step_time: f64,
    /// Per device used: its name, seconds busy, nodes run.
    pub devices: Vec<(String, f64, usize)>,
    pub transfers: usize,
    pub transfer_bytes: u64,
    /// The predicted timeline.
    pub spans: Vec<Span>,
}

impl Prediction {
    /// The share of the step each device is busy.
    pub fn utilization(&self) -> Vec<(String, f64)> {
        self.devices
            .iter()
            .map(|(n, busy, _)| (n.clone(), if self.step_time > 0.0 { busy / self.step_time } else { 0.0 }))
            .collect()
    }
}

/// Simulates one step of a partitioned graph (the partitions of `parts`, found in `m`).
pub fn simulate(m: &Module, parts: &Partitioned, cost: &CostModel<'_>) -> Result<Prediction, String> {
    let cluster = cost.cluster;
    let device_index = |spec: &DeviceSpec| {
        cluster.device_of(spec).ok_or_else(|| {
            format!(
                "@{} is placed on '{spec}', which is not a device of the cluster ({})",
                parts.graph,
                cluster.listing()
            )
        })
    };
    struct Lane<'m> {
        graph: &'m graphc_ir::Graph,
        device: usize,
        steps: Vec<Step>,
        next: usize,
        clock: f64,
        busy: f64,
    }
    let mut lanes = Vec::new();
    for (name, spec) in &parts.parts {
        let g = m.graph(name).ok_or_else(|| format!("no graph @{name} in the module"))?;
        // An unpartitioned graph may have no annotation at all: it runs on the first device.
        let device = if spec.is_empty() { 0 } else { device_index(spec)? };
        let mut steps = Vec::new();
        expand(g, &g.regions[g.body].nodes, &[], &mut steps).map_err(|()| {
            format!(
                "@{name} would run more than {MAX_STEPS} nodes in the simulation (loops that send or receive, \
                 nested, each taken {ASSUMED_TRIPS} times); simulate cannot predict it"
            )
        })?;
        lanes.push(Lane { graph: g, device, steps, next: 0, clock: 0.0, busy: 0.0 });
    }
    let mut arrivals: HashMap<String, f64> = HashMap::new();
    let mut link_free: HashMap<(usize, usize), f64> = HashMap::new();
    let mut spans = Vec::new();
    let (mut transfers, mut transfer_bytes) = (0, 0u64);
    loop {
        let mut progress = false;
        for lane in &mut lanes {
            while let Some(step) = lane.steps.get(lane.next) {
                let (g, n) = (lane.graph, step.node);
                // A recv must have its tensor on the way, and graph inputs come from the host
                // (the first device).
                let mut ready = lane.clock;
                for &v in &g.nodes[n].operands {
                    if matches!(g.values[v].def, graphc_ir::ValueDef::Param(r, _) if r == g.body) {
                        ready = ready.max(cost.transfer_time(&g.values[v].ty, 0, lane.device));
                    }
                }
                let mut blocked = false;
                for k in recv_keys(g, n) {
                    match arrivals.get(&step.key(k)) {
                        Some(&t) => ready = ready.max(t),
                        None => blocked = true,
                    }
                }
                if blocked {
                    break;
                }
                let time = cost.node_time(g, n, lane.device);
                let (start, end) = (ready, ready + time);
                let nd = &g.nodes[n];
                spans.push(Span {
                    track: cluster.devices[lane.device].name.clone(),
                    name: g.describe(n).trim_matches('\'').to_string(),
                    category: nd.op.kind().name().to_string(),
                    start_us: start * 1e6,
                    dur_us: time * 1e6,
                    args: vec![("graph".into(), g.name.clone())],
                });
                if nd.op == Op::Send {
                    let key = nd.attrs.str("key").unwrap_or_default();
                    let to = nd.attrs.str("to").and_then(|s| DeviceSpec::parse(s).ok()).unwrap_or_default();
                    let dst = device_index(&to)?;
                    let bytes = type_bytes(&g.values[nd.operands[0]].ty);
                    let link = cluster.link(lane.device, dst);
                    let free = link_free.entry((lane.device, dst)).or_insert(0.0);
                    let begin = end.max(*free);
                    *free = begin + bytes as f64 / link.bandwidth;
                    let arrive = begin + link.time(bytes);
                    arrivals.insert(step.key(key), arrive);
                    transfers += 1;
                    transfer_bytes += bytes;
                    spans.push(Span {
                        track: TRANSFERS.into(),
                        name: key.split(';').next().unwrap_or(key).to_string(),
                        category: "transfer".into(),
                        start_us: begin * 1e6,
                        dur_us: (arrive - begin) * 1e6,
                        args: vec![("key".into(), key.to_string()), ("bytes".into(), bytes.to_string())],
                    });
                }
                lane.clock = end;
                lane.busy += time;
                lane.next += 1;
                progress = true;
            }
        }
        if lanes.iter().all(|l| l.next == l.steps.len()) {
            break;
        }
        if !progress {
            let waiting: Vec<String> = lanes
                .iter()
                .filter_map(|l| {
                    let n = l.steps.get(l.next)?.node;
                    Some(format!("@{} waits in {}", l.graph.name, l.graph.describe(n)))
                })
                .collect();
            return Err(format!("the partitions of @{} deadlock: {}", parts.graph, waiting.join("; ")));
        }
    }
    let end = lanes.iter().map(|l| l.clock).fold(0.0, f64::max);
    let step_time = end + cost.step_overhead(lanes.len());
    let devices = lanes
        .iter()
        .map(|l| (cluster.devices[l.device].name.clone(), l.busy, l.graph.regions[l.graph.body].nodes.len()))
        .collect();
    Ok(Prediction { step_time, devices, transfers, transfer_bytes, spans })
}

/// One node a lane runs: a node without communication in its regions as a whole, with the
/// iteration numbers of the loops around it (outermost first).
struct Step {
    node: Node,
    iterations: Vec<u64>,
}

impl Step {
    /// A rendezvous key as the runtime qualifies it inside loops: `key@i.j`.
    fn key(&self, key: &str) -> String {
        if self.iterations.is_empty() {
            return key.to_string();
        }
        let path: Vec<String> = self.iterations.iter().map(u64::to_string).collect();
        format!("{key}@{}", path.join("."))
    }
}

/// The most steps a device's simulation takes: nested loops that communicate multiply.
const MAX_STEPS: usize = 1 << 20;

/// The steps a device runs for `nodes`: a node that holds sends or recvs in its regions is
/// replaced by the steps of the path it takes (see the module's header). `Err` past
/// [`MAX_STEPS`].
fn expand(g: &graphc_ir::Graph, nodes: &[Node], iterations: &[u64], out: &mut Vec<Step>) -> Result<(), ()> {
    for &n in nodes {
        if out.len() >= MAX_STEPS {
            return Err(());
        }
        let nd = &g.nodes[n];
        let communicates =
            nd.regions.iter().any(|&r| g.regions[r].nodes.iter().any(|&m| !recv_keys(g, m).is_empty() || sends(g, m)));
        if !communicates {
            out.push(Step { node: n, iterations: iterations.to_vec() });
            continue;
        }
        let region = |i: usize| g.regions[nd.regions[i]].nodes.as_slice();
        match nd.op.def().flow {
            RegionFlow::Loop => {
                let mut path = iterations.to_vec();
                path.push(0);
                for trip in 0..ASSUMED_TRIPS as u64 {
                    *path.last_mut().expect("pushed above") = trip;
                    expand(g, region(0), &path, out)?;
                    expand(g, region(1), &path, out)?;
                }
                *path.last_mut().expect("pushed above") = ASSUMED_TRIPS as u64;
                expand(g, region(0), &path, out)?;
            }
            // The path assumed: the first region.
            RegionFlow::OneOf => expand(g, region(0), iterations, out)?,
            // An op without regions does not communicate from inside one and never gets here.
            RegionFlow::Once | RegionFlow::NoRegions => {
                for &r in &nd.regions {
                    expand(g, &g.regions[r].nodes, iterations, out)?;
                }
            }
        }
    }
    Ok(())
}

/// Whether node `n` or a node in its regions sends.
fn sends(g: &graphc_ir::Graph, n: Node) -> bool {
    let nd = &g.nodes[n];
    nd.op == Op::Send || nd.regions.iter().any(|&r| g.regions[r].nodes.iter().any(|&m| sends(g, m)))
}

/// The keys of the recvs in node `n` and its regions.
fn recv_keys(g: &graphc_ir::Graph, n: Node) -> Vec<&str> {
    let mut keys = Vec::new();
    let mut stack = vec![n];
    while let Some(m) = stack.pop() {
        let nd = &g.nodes[m];
        if nd.op == Op::Recv {
            keys.extend(nd.attrs.str("key"));
        }
        stack.extend(nd.regions.iter().flat_map(|&r| g.regions[r].nodes.iter().copied()));
    }
    keys
}
