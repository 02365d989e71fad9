//! The partitioning pass: splits each placed graph into one graph per device, `@"G@DEVICE"`
//! (DEVICE the spec's short name), joined by send/recv pairs.
//!
//! Every tensor that a node on device B reads from device A crosses once: one send on A and
//! one recv on B per tensor and destination, whatever the number of consumers on B. A control
//! dependency (`after`) across devices becomes a signal: A sends a `bool[]` constant ordered
//! after the dependency, B orders the dependent node after its recv. A graph input goes to the
//! device of its first user; an output is returned by the partition that computes it. A
//! graph whose nodes all sit on one device is left as it is.

use graphc_ir::{
    Attr, DType, DeviceSpec, Graph, Module, Node, NodeSpec, Op, Region, TensorLiteral, TensorType, Type, Value,
};
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
    // Every device a node is on, top-level or (split control flow) nested, in order of use.
    let mut devices: Vec<DeviceSpec> = Vec::new();
    for n in g.walk() {
        let Some(d) = g.nodes[n].device.clone().filter(|d| !d.is_empty()) else { continue };
        if !devices.contains(&d) {
            devices.push(d);
        }
    }
    if devices.len() <= 1 {
        return Ok(None);
    }
    for &n in top {
        device_of(g, n)?;
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
        at: Vec::new(),
        map: vec![HashMap::new(); devices.len()],
        home: HashMap::new(),
        signals: HashMap::new(),
    };
    p.at = p.graphs.iter().map(|pg| pg.body).collect();
    // An input lives where its first user runs (the first partition when nothing reads it).
    for &v in g.inputs() {
        let first = top.iter().find(|&&n| {
            let nd = &g.nodes[n];
            nd.operands.contains(&v) || nd.control_deps.contains(&v)
        });
        let d = match first {
            Some(&n) => p.device(n, 0),
            None => 0,
        };
        let name = g.values[v].name.clone().unwrap_or_else(|| v.to_string());
        let copy = p.graphs[d].add_input(&name, g.values[v].ty.clone());
        p.map[d].insert(v, copy);
        p.home.insert(v, d);
    }
    for &n in top {
        let d = p.device(n, 0);
        p.emit(n, d)?;
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
    /// Per partition, the region nodes go to now: the body, or a region of a replica of a
    /// `cond` or `while` being split.
    at: Vec<Region>,
    /// Per partition: a source value to the partition's value for it.
    map: Vec<HashMap<Value, Value>>,
    /// The partition each source value is computed in.
    home: HashMap<Value, usize>,
    /// Per (source value, destination): the received signal standing for a control edge.
    signals: HashMap<(Value, usize), Value>,
}

impl Parts<'_> {
    /// The partition of node `n`: its own annotation, else that of the node it is in (`outer`).
    fn device(&self, n: Node, outer: usize) -> usize {
        match self.src.nodes[n].device.as_ref().filter(|d| !d.is_empty()) {
            Some(d) => self.devices.iter().position(|x| x == d).unwrap_or(outer),
            None => outer,
        }
    }

    /// The devices of the nodes directly in `n`'s regions, and of theirs when they are control
    /// flow split in turn, other than `d`.
    fn inner_devices(&self, n: Node, d: usize, out: &mut Vec<usize>) {
        for &r in &self.src.nodes[n].regions {
            for &m in &self.src.regions[r].nodes {
                let e = self.device(m, d);
                if e != d && !out.contains(&e) {
                    out.push(e);
                }
                if matches!(self.src.nodes[m].op, Op::Cond | Op::While) {
                    self.inner_devices(m, e, out);
                }
            }
        }
    }

    /// Adds node `n` to partition `d` (or, for control flow whose regions hold nodes of other
    /// devices, a replica of it to every partition involved).
    fn emit(&mut self, n: Node, d: usize) -> Result<(), String> {
        let g = self.src;
        let nd = &g.nodes[n];
        if matches!(nd.op, Op::Cond | Op::While) {
            let mut others = Vec::new();
            self.inner_devices(n, d, &mut others);
            if !others.is_empty() {
                let mut parts = vec![d];
                parts.extend(others);
                return self.split(n, d, &parts);
            }
        }
        let operands = nd.operands.iter().map(|&v| self.data(v, d)).collect::<Result<Vec<_>, _>>()?;
        let deps = nd.control_deps.iter().map(|&v| self.control(v, d)).collect::<Result<Vec<_>, _>>()?;
        let at = self.at[d];
        let results = self.graphs[d]
            .import_node(at, g, n, operands, deps)
            .map_err(|e| format!("in @{}: copying {} failed: {}", g.name, g.describe(n), e.message))?;
        for (&r, x) in nd.results.iter().zip(results) {
            self.map[d].insert(r, x);
            self.home.insert(r, d);
        }
        Ok(())
    }

    /// Splits a `cond` or `while` on device `d` whose regions hold nodes of the devices
    /// `parts` (d first): each of them runs a replica with the same control flow. A replica
    /// carries (or returns) the values its device owns: result i is owned by the device that
    /// computes what the regions yield for it (`d` for a value passed through). A `while`'s
    /// predicate is computed where the cond region puts it and sent to the other replicas each
    /// iteration; a `cond`'s predicate is sent to every replica before it starts. Inside,
    /// tensors cross between replicas by send/recv, keyed per iteration by the runtime.
    fn split(&mut self, n: Node, d: usize, parts: &[usize]) -> Result<(), String> {
        let g = self.src;
        let nd = &g.nodes[n];
        let is_while = nd.op == Op::While;
        let regions = nd.regions.clone();
        // Who owns result i: the device computing the value yielded for it (for a cond, by
        // the first region), `d` for a region parameter passed through.
        let yielder = if is_while { regions[1] } else { regions[0] };
        let owner: Vec<usize> =
            g.regions[yielder].yields.iter().map(|&v| g.producer(v).map_or(d, |m| self.device(m, d))).collect();
        let args: Vec<Value> = if is_while { nd.operands.clone() } else { nd.operands[1..].to_vec() };
        // The values each replica carries in: a while's owned loop-carried values; a cond's
        // arguments that the replica's nodes read or that its owned results pass through.
        let given: Vec<Vec<usize>> = parts
            .iter()
            .map(|&p| {
                (0..args.len())
                    .filter(|&i| {
                        if is_while {
                            owner[i] == p
                        } else {
                            regions.iter().any(|&r| self.region_reads(r, i, p, d, &owner))
                        }
                    })
                    .collect()
            })
            .collect();
        let mut inits = Vec::new();
        for (k, &p) in parts.iter().enumerate() {
            let mut ops = Vec::new();
            if !is_while {
                ops.push(self.data(nd.operands[0], p)?);
            }
            for &i in &given[k] {
                ops.push(self.data(args[i], p)?);
            }
            inits.push(ops);
        }
        let deps: Vec<Vec<Value>> = parts
            .iter()
            .map(|&p| nd.control_deps.iter().map(|&v| self.control(v, p)).collect::<Result<Vec<_>, _>>())
            .collect::<Result<_, _>>()?;
        let saved = self.at.clone();
        let mut built: Vec<Vec<Region>> = vec![Vec::new(); parts.len()];
        for (ri, &r) in regions.iter().enumerate() {
            let rd = &g.regions[r];
            for (k, &p) in parts.iter().enumerate() {
                let types: Vec<graphc_ir::Type> = given[k].iter().map(|&i| g.values[rd.params[i]].ty.clone()).collect();
                let copy = self.graphs[p].new_region(&rd.label, &types);
                let params = self.graphs[p].regions[copy].params.clone();
                for (&i, &x) in given[k].iter().zip(&params) {
                    self.map[p].insert(rd.params[i], x);
                    if let Some(name) = &g.values[rd.params[i]].name {
                        self.graphs[p].set_name(x, name);
                    }
                }
                self.at[p] = copy;
                built[k].push(copy);
            }
            for (i, &param) in rd.params.iter().enumerate() {
                // A parameter not given to its owner's replica comes from the first that has it.
                let home = given.iter().position(|gv| gv.contains(&i)).map_or(d, |k| parts[k]);
                self.home.insert(param, home);
            }
            for &m in &rd.nodes {
                let e = self.device(m, d);
                self.emit(m, e)?;
            }
            let is_pred = is_while && ri == 0;
            for (k, &p) in parts.iter().enumerate() {
                let yields = if is_pred {
                    vec![self.data(rd.yields[0], p)?]
                } else {
                    (0..rd.yields.len())
                        .filter(|&i| owner[i] == p)
                        .map(|i| self.data(rd.yields[i], p))
                        .collect::<Result<Vec<_>, _>>()?
                };
                let at = built[k][ri];
                self.graphs[p].set_yields(at, yields);
            }
        }
        self.at = saved;
        for (k, &p) in parts.iter().enumerate() {
            let spec = NodeSpec::new(nd.op, inits[k].clone())
                .after(deps[k].clone())
                .regions(built[k].clone())
                .device(self.devices[p].clone())
                .span(nd.span);
            let at = self.at[p];
            let results = self.graphs[p]
                .add(at, spec)
                .map_err(|e| format!("in @{}: splitting {} failed: {}", g.name, g.describe(n), e.message))?;
            let owned = (0..nd.results.len()).filter(|&i| owner[i] == p);
            for (i, x) in owned.zip(results) {
                let r = nd.results[i];
                self.map[p].insert(r, x);
                self.home.insert(r, p);
                if let Some(name) = &g.values[r].name {
                    self.graphs[p].set_name(x, name);
                }
            }
        }
        Ok(())
    }

    /// True when a node of partition `p` in region `r` (at any depth) reads parameter `i`, or
    /// `p` owns a result that `r` yields parameter `i` for.
    fn region_reads(&self, r: Region, i: usize, p: usize, outer: usize, owner: &[usize]) -> bool {
        let g = self.src;
        let param = g.regions[r].params[i];
        let yielded = g.regions[r].yields.iter().enumerate().any(|(j, &v)| v == param && owner.get(j) == Some(&p));
        yielded
            || g.uses(param).iter().any(|u| {
                u.user().is_some_and(|m| {
                    // The user may sit deeper, in a region of a node of this region.
                    let mut top = m;
                    while g.nodes[top].parent != r {
                        match g.regions[g.nodes[top].parent].parent {
                            Some(up) => top = up,
                            None => return false,
                        }
                    }
                    self.device(top, outer) == p
                })
            })
    }

    /// The rendezvous key of a value crossing from `s` to `d`: unique in the module.
    fn key(&self, v: Value, s: usize, d: usize, what: &str) -> String {
        let name = self.src.values[v].name.clone().unwrap_or_else(|| v.to_string());
        format!("{}/{name}{what};{}->{}", self.src.name, self.devices[s], self.devices[d])
    }

    /// `v` in its home partition `s`.
    fn local(&self, v: Value, s: usize) -> Result<Value, String> {
        self.map[s].get(&v).copied().ok_or_else(|| {
            format!("in @{}: internal error: %{} is not in partition {}", self.src.name, v, self.devices[s])
        })
    }

    /// `v` in partition `d`, received from its home partition the first time it is needed.
    fn data(&mut self, v: Value, d: usize) -> Result<Value, String> {
        if let Some(&x) = self.map[d].get(&v) {
            return Ok(x);
        }
        let s = *self.home.get(&v).ok_or_else(|| format!("in @{}: internal error: %{v} has no home", self.src.name))?;
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
        let sent = self.local(v, s)?;
        self.transfer(sent, s, d, key, ty).inspect(|&r| {
            if let Some(name) = &self.src.values[v].name {
                self.graphs[d].set_name(r, name);
            }
            self.map[d].insert(v, r);
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
        let local = self.local(v, s)?;
        let ty = TensorType::scalar(DType::Bool);
        let lit = TensorLiteral::new(ty.clone(), graphc_ir::TensorData::Bool(vec![true])).expect("a scalar literal");
        let spec = NodeSpec::new(Op::Constant, vec![])
            .attr("value", Attr::Tensor(lit))
            .after(vec![local])
            .device(self.devices[s].clone());
        let at = self.just_after(s, local);
        let region = self.at[s];
        let n = self.graphs[s].insert_node(region, at, spec).map_err(|e| e.message)?;
        let signal = self.graphs[s].nodes[n].results[0];
        let key = self.key(v, s, d, ".done");
        let r = self.transfer(signal, s, d, key, Type::Tensor(ty))?;
        self.signals.insert((v, d), r);
        Ok(r)
    }

    /// The position in partition `s`'s current region right after the node computing `v`
    /// (the start for a parameter), where a send of `v` goes: a device runs its nodes in order, so a send
    /// placed later would hold the tensor back from devices waiting for it.
    fn just_after(&self, s: usize, v: Value) -> usize {
        let g = &self.graphs[s];
        match g.producer(v) {
            Some(n) => g.regions[self.at[s]].nodes.iter().position(|&m| m == n).map_or(0, |i| i + 1),
            None => 0,
        }
    }

    /// A send of `sent` in partition `s` and its recv in `d`; the recv's value. The recv goes
    /// at the end of `d`'s current region, just before the node that needs it.
    fn transfer(&mut self, sent: Value, s: usize, d: usize, key: String, ty: Type) -> Result<Value, String> {
        let (from, to) = (self.devices[s].to_string(), self.devices[d].to_string());
        let send = NodeSpec::new(Op::Send, vec![sent])
            .attr("key", Attr::Str(key.clone()))
            .attr("to", Attr::Str(to))
            .device(self.devices[s].clone());
        let at = self.just_after(s, sent);
        let region = self.at[s];
        self.graphs[s].insert_node(region, at, send).map_err(|e| e.message)?;
        let body = self.at[d];
        let recv = NodeSpec::new(Op::Recv, vec![])
            .attr("key", Attr::Str(key))
            .attr("from", Attr::Str(from))
            .declared(vec![ty])
            .device(self.devices[d].clone());
        Ok(self.graphs[d].add(body, recv).map_err(|e| e.message)?[0])
    }
}
