//! The partitioning pass: splits each placed graph into one graph per device, `@"G@DEVICE"`
//! (DEVICE the spec's short name), joined by send/recv pairs.
//!
//! Every tensor that a node on device B reads from device A crosses once: one send on A and
//! one recv on B per tensor and destination, whatever the number of consumers on B. A control
//! dependency (`after`) across devices becomes a signal: A sends a `bool[]` constant ordered
//! after the dependency, B orders the dependent node after its recv. A graph input goes to the
//! device of its first user; an output is returned by the partition that computes it. A
//! graph whose nodes all sit on one device is left as it is.

use graphc_ir::{Attr, DType, DeviceSpec, Graph, Module, NodeSpec, Op, TensorLiteral, TensorType, Type, Value};
use graphc_runtime::{RunRequest, Tensor};
use std::collections::HashMap;
use std::sync::Arc;

/// Which graphs a partitioned graph became, in device order.
#[derive(Clone, Debug)]
pub struct Partitioned {
    pub graph: String,
    /// The partitions' graph names and their devices.
    pub parts: Vec<(String, DeviceSpec)>,
}

impl Partitioned {
    /// The requests that run this graph's partitions as one step. Each partition gets the
    /// feeds it has inputs for and fetches the `wanted` values (output or value names) that it
    /// computes; a partition that computes none of them only serves the others. Returns the
    /// requests and, per wanted value, the index of the request that fetches it.
    pub fn requests(
        &self,
        m: &Module,
        feeds: &[(String, Arc<Tensor>)],
        wanted: &[String],
    ) -> (Vec<RunRequest>, Vec<usize>) {
        let mut requests: Vec<RunRequest> = Vec::new();
        for (part, _) in &self.parts {
            let mut req = RunRequest::supporting(part.as_str());
            if let Some(pg) = m.graph(part) {
                for &v in pg.inputs() {
                    let name = pg.values[v].name.as_deref().unwrap_or_default();
                    if let Some((n, t)) = feeds.iter().find(|(n, _)| n == name) {
                        req = req.feed(n.clone(), t.clone());
                    }
                }
            }
            requests.push(req);
        }
        let mut at = Vec::new();
        for w in wanted {
            let bare = w.trim_start_matches('%');
            // The partition returning it as an output, else the one computing a value of that
            // name (a received copy elsewhere has the same name).
            let find = |f: &dyn Fn(&Graph) -> bool| self.parts.iter().position(|(p, _)| m.graph(p).is_some_and(f));
            let i = (!w.starts_with('%'))
                .then(|| find(&|pg: &Graph| pg.outputs.iter().any(|o| o.name == bare)))
                .flatten()
                .or_else(|| find(&|pg: &Graph| computes(pg, bare)))
                .unwrap_or(0);
            requests[i].fetches.push(w.clone());
            at.push(i);
        }
        (requests, at)
    }
}

/// True when graph `g` computes a value of that name itself (not by a recv).
fn computes(g: &Graph, name: &str) -> bool {
    g.value_named(name).is_some_and(|v| g.producer(v).is_none_or(|n| g.nodes[n].op != Op::Recv))
}

/// Partitions every graph of the module whose nodes sit on more than one device.
pub fn partition_module(m: &mut Module) -> Result<Vec<Partitioned>, String> {
    let mut out = Vec::new();
    let mut graphs = Vec::new();
    for g in std::mem::take(&mut m.graphs) {
        match partition_graph(&g)? {
            Some(parts) => {
                out.push(Partitioned {
                    graph: g.name.clone(),
                    parts: parts.iter().map(|(p, d)| (p.name.clone(), d.clone())).collect(),
                });
                graphs.extend(parts.into_iter().map(|(p, _)| p));
            }
            None => {
                let device =
                    g.regions[g.body].nodes.first().and_then(|&n| g.nodes[n].device.clone()).unwrap_or_default();
                out.push(Partitioned { graph: g.name.clone(), parts: vec![(g.name.clone(), device)] });
                graphs.push(g);
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    for g in &graphs {
        if !seen.insert(g.name.clone()) {
            return Err(format!("partitioning makes two graphs named @{}; rename the graph", g.name));
        }
    }
    m.graphs = graphs;
    Ok(out)
}

/// The device a top-level node is on; an error for a node the placer has not seen.
fn device_of(g: &Graph, n: graphc_ir::Node) -> Result<DeviceSpec, String> {
    g.nodes[n]
        .device
        .clone()
        .filter(|d| !d.is_empty())
        .ok_or_else(|| format!("in @{}: {} has no device; run the place pass before partition", g.name, g.describe(n)))
}

fn partition_graph(g: &Graph) -> Result<Option<Vec<(Graph, DeviceSpec)>>, String> {
    let top = &g.regions[g.body].nodes;
    let mut devices: Vec<DeviceSpec> = Vec::new();
    for &n in top {
        let Some(d) = g.nodes[n].device.clone().filter(|d| !d.is_empty()) else { continue };
        if !devices.contains(&d) {
            devices.push(d);
        }
    }
    if devices.len() <= 1 {
        return Ok(None);
    }
    let dev_index = |d: &DeviceSpec| devices.iter().position(|x| x == d).expect("collected above");
    let mut node_dev = HashMap::new();
    for &n in top {
        node_dev.insert(n, dev_index(&device_of(g, n)?));
    }
    // An input lives where its first user runs (the first partition when nothing reads it).
    let mut home: HashMap<Value, usize> = HashMap::new();
    for &v in g.inputs() {
        let first = top.iter().find(|&&n| {
            let nd = &g.nodes[n];
            nd.operands.contains(&v) || nd.control_deps.contains(&v)
        });
        home.insert(v, first.map(|n| node_dev[n]).unwrap_or(0));
    }
    for &n in top {
        for &r in &g.nodes[n].results {
            home.insert(r, node_dev[&n]);
        }
    }

    let mut p = Parts {
        src: g,
        devices: &devices,
        graphs: devices
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let mut pg = Graph::new(format!("{}@{}", g.name, d.short_name()));
                pg.span = g.span;
                if i == 0 {
                    pg.comments = g.comments.clone();
                }
                pg.comments.push(format!(" @{} on {d} (partition {} of {})", g.name, i + 1, devices.len()));
                pg
            })
            .collect(),
        map: vec![HashMap::new(); devices.len()],
        home,
        signals: HashMap::new(),
    };
    for &v in g.inputs() {
        let d = p.home[&v];
        let name = g.values[v].name.clone().unwrap_or_else(|| v.to_string());
        let copy = p.graphs[d].add_input(&name, g.values[v].ty.clone());
        p.map[d].insert(v, copy);
    }
    for &n in top {
        let d = node_dev[&n];
        let nd = &g.nodes[n];
        let operands = nd.operands.iter().map(|&v| p.data(v, d)).collect::<Result<Vec<_>, _>>()?;
        let deps = nd.control_deps.iter().map(|&v| p.control(v, d)).collect::<Result<Vec<_>, _>>()?;
        let body = p.graphs[d].body;
        let results = p.graphs[d]
            .import_node(body, g, n, operands, deps)
            .map_err(|e| format!("in @{}: copying {} failed: {}", g.name, g.describe(n), e.message))?;
        p.map[d].extend(nd.results.iter().copied().zip(results));
    }
    let mut outputs: Vec<Vec<(String, Value)>> = vec![Vec::new(); devices.len()];
    for (o, &v) in g.outputs.iter().zip(g.output_values()) {
        let d = p.home[&v];
        outputs[d].push((o.name.clone(), p.map[d][&v]));
    }
    for (pg, outs) in p.graphs.iter_mut().zip(outputs) {
        pg.set_outputs(outs);
    }
    Ok(Some(p.graphs.into_iter().zip(devices.iter().cloned()).collect()))
}

/// The partitions under construction.
struct Parts<'g> {
    src: &'g Graph,
    devices: &'g [DeviceSpec],
    graphs: Vec<Graph>,
    /// Per partition: a source value to the partition's value for it.
    map: Vec<HashMap<Value, Value>>,
    /// The partition each source value is computed in.
    home: HashMap<Value, usize>,
    /// Per (source value, destination): the received signal standing for a control edge.
    signals: HashMap<(Value, usize), Value>,
}

impl Parts<'_> {
    /// The rendezvous key of a value crossing from `s` to `d`: unique in the module.
    fn key(&self, v: Value, s: usize, d: usize, what: &str) -> String {
        let name = self.src.values[v].name.clone().unwrap_or_else(|| v.to_string());
        format!("{}/{name}{what};{}->{}", self.src.name, self.devices[s], self.devices[d])
    }

    /// `v` in partition `d`, received from its home partition the first time it is needed.
    fn data(&mut self, v: Value, d: usize) -> Result<Value, String> {
        if let Some(&x) = self.map[d].get(&v) {
            return Ok(x);
        }
        let s = self.home[&v];
        let ty = self.src.values[v].ty.clone();
        if !matches!(ty, Type::Tensor(_)) {
            let name = self.src.values[v].name.as_deref().unwrap_or("?");
            return Err(format!(
                "in @{}: %{name} ({ty}) is used on {} but made on {}; only tensors cross devices, so \
                 state handles stay with their state (is a node pinned against its variable's device?)",
                self.src.name, self.devices[d], self.devices[s]
            ));
        }
        let key = self.key(v, s, d, "");
        let sent = self.map[s][&v];
        self.transfer(sent, s, d, key, ty).map(|r| {
            if let Some(name) = &self.src.values[v].name {
                self.graphs[d].set_name(r, name);
            }
            self.map[d].insert(v, r);
            r
        })
    }

    /// A value in partition `d` to order a node after `v`: `v` itself when local, else a
    /// received signal sent once `v` is done.
    fn control(&mut self, v: Value, d: usize) -> Result<Value, String> {
        if let Some(&x) = self.map[d].get(&v) {
            return Ok(x);
        }
        if let Some(&x) = self.signals.get(&(v, d)) {
            return Ok(x);
        }
        let s = self.home[&v];
        let local = self.map[s][&v];
        let ty = TensorType::scalar(DType::Bool);
        let lit = TensorLiteral::new(ty.clone(), graphc_ir::TensorData::Bool(vec![true])).expect("a scalar literal");
        let spec = NodeSpec::new(Op::Constant, vec![])
            .attr("value", Attr::Tensor(lit))
            .after(vec![local])
            .device(self.devices[s].clone());
        let at = self.just_after(s, local);
        let body = self.graphs[s].body;
        let n = self.graphs[s].insert_node(body, at, spec).map_err(|e| e.message)?;
        let signal = self.graphs[s].nodes[n].results[0];
        let key = self.key(v, s, d, ".done");
        let r = self.transfer(signal, s, d, key, Type::Tensor(ty))?;
        self.signals.insert((v, d), r);
        Ok(r)
    }

    /// The position in partition `s`'s body right after the node computing `v` (the start
    /// for an input), where a send of `v` goes: a device runs its nodes in order, so a send
    /// placed later would hold the tensor back from devices waiting for it.
    fn just_after(&self, s: usize, v: Value) -> usize {
        let g = &self.graphs[s];
        match g.producer(v) {
            Some(n) => g.regions[g.body].nodes.iter().position(|&m| m == n).map_or(0, |i| i + 1),
            None => 0,
        }
    }

    /// A send of `sent` in partition `s` and its recv in `d`; the recv's value. The recv goes
    /// at the end of `d`'s body, just before the node that needs it.
    fn transfer(&mut self, sent: Value, s: usize, d: usize, key: String, ty: Type) -> Result<Value, String> {
        let (from, to) = (self.devices[s].to_string(), self.devices[d].to_string());
        let send = NodeSpec::new(Op::Send, vec![sent])
            .attr("key", Attr::Str(key.clone()))
            .attr("to", Attr::Str(to))
            .device(self.devices[s].clone());
        let at = self.just_after(s, sent);
        let body = self.graphs[s].body;
        self.graphs[s].insert_node(body, at, send).map_err(|e| e.message)?;
        let body = self.graphs[d].body;
        let recv = NodeSpec::new(Op::Recv, vec![])
            .attr("key", Attr::Str(key))
            .attr("from", Attr::Str(from))
            .declared(vec![ty])
            .device(self.devices[d].clone());
        Ok(self.graphs[d].add(body, recv).map_err(|e| e.message)?[0])
    }
}
