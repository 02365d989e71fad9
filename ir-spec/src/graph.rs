//! The IR in memory: a module of graphs; each graph an arena of nodes, values and regions with
//! typed ids, use lists, source spans, and the builder API that passes and front ends use.
//!
//! A graph's body is a region; its parameters are the graph inputs and what it yields are the
//! graph outputs. Nodes live in exactly one region, in order; a node holding regions (cond,
//! while, fusion) owns them. Arena slots are never reused: a removed node leaves its region's
//! list and is not seen again by walks, printing or verification.

use crate::attr::Attrs;
use crate::device::DeviceSpec;
use crate::diag::Span;
use crate::ops::{InferCtx, InferError, Op, RegionSig};
use crate::types::Type;
use cranelift_entity::{entity_impl, PrimaryMap};
use std::collections::HashMap;

/// A node: one op application.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node(u32);
entity_impl!(Node, "node");

/// An SSA value: a node result or a region parameter.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(u32);
entity_impl!(Value, "v");

/// A region: an ordered list of nodes with parameters and yielded values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Region(u32);
entity_impl!(Region, "region");

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueDef {
    /// Result `index` of a node.
    Result(Node, u32),
    /// Parameter `index` of a region (a graph input when the region is the graph's body).
    Param(Region, u32),
}

/// One use of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Use {
    /// Operand `index` of a node.
    Operand(Node, u32),
    /// Entry `index` of a node's `after(...)` list.
    Control(Node, u32),
    /// Yielded value `index` of a region (a graph output for the body).
    Yield(Region, u32),
}

impl Use {
    /// The node making the use: operands and `after` entries have one, yields do not.
    pub fn user(self) -> Option<Node> {
        match self {
            Use::Operand(n, _) | Use::Control(n, _) => Some(n),
            Use::Yield(..) => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct ValueData {
    pub ty: Type,
    /// The user's name (`%x`); unnamed values print as dense numbers.
    pub name: Option<String>,
    pub def: ValueDef,
    pub span: Span,
    uses: Vec<Use>,
}

#[derive(Clone, Debug)]
pub struct NodeData {
    pub op: Op,
    pub operands: Vec<Value>,
    pub results: Vec<Value>,
    pub attrs: Attrs,
    pub regions: Vec<Region>,
    /// Values whose producers must run before this node, though it does not read them.
    pub control_deps: Vec<Value>,
    pub device: Option<DeviceSpec>,
    pub parent: Region,
    pub span: Span,
    /// `//` comment lines written above the node, kept so `graphc fmt` does not lose them.
    pub comments: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct RegionData {
    /// The region's label in the text (`then`, `body`, ...); empty for a graph body.
    pub label: String,
    pub params: Vec<Value>,
    pub nodes: Vec<Node>,
    pub yields: Vec<Value>,
    /// The node owning the region; `None` for a graph body or a region not yet attached.
    pub parent: Option<Node>,
    pub span: Span,
    /// Comment lines written above the region's `yield` (or the graph's `return`).
    pub end_comments: Vec<String>,
}

/// A named graph output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub name: String,
    pub span: Span,
}

/// One graph (function): named inputs, a body, named outputs.
#[derive(Clone, Debug)]
pub struct Graph {
    pub name: String,
    pub span: Span,
    /// Comment lines written above the graph.
    pub comments: Vec<String>,
    pub nodes: PrimaryMap<Node, NodeData>,
    pub values: PrimaryMap<Value, ValueData>,
    pub regions: PrimaryMap<Region, RegionData>,
    pub body: Region,
    /// Names of the outputs; the values are the body's yields, in the same order.
    pub outputs: Vec<Output>,
    names: HashMap<String, Value>,
}

/// A file's worth of graphs.
#[derive(Clone, Debug, Default)]
pub struct Module {
    pub graphs: Vec<Graph>,
    /// Comment lines after the last graph.
    pub end_comments: Vec<String>,
}

impl Module {
    /// True when the module holds partitions already: several graphs, each sending or
    /// receiving, which run together as one step.
    pub fn is_partitioned(&self) -> bool {
        self.graphs.len() > 1
            && self.graphs.iter().all(|g| g.walk().iter().any(|&n| matches!(g.nodes[n].op, Op::Send | Op::Recv)))
    }

    pub fn graph(&self, name: &str) -> Option<&Graph> {
        self.graphs.iter().find(|g| g.name == name)
    }

    pub fn graph_mut(&mut self, name: &str) -> Option<&mut Graph> {
        self.graphs.iter_mut().find(|g| g.name == name)
    }
}

/// Everything needed to add a node, for [`Graph::add_node`].
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub op: Op,
    pub operands: Vec<Value>,
    pub attrs: Attrs,
    /// Regions built with [`Graph::new_region`], not yet attached to any node.
    pub regions: Vec<Region>,
    pub control_deps: Vec<Value>,
    pub device: Option<DeviceSpec>,
    /// Result types, required for ops whose type is given rather than derived (variable,
    /// queue, recv); for others, checked against the type rule when present.
    pub declared: Option<Vec<Type>>,
    pub span: Span,
}

impl NodeSpec {
    pub fn new(op: Op, operands: impl Into<Vec<Value>>) -> Self {
        NodeSpec {
            op,
            operands: operands.into(),
            attrs: Attrs::new(),
            regions: Vec::new(),
            control_deps: Vec::new(),
            device: None,
            declared: None,
            span: Span::default(),
        }
    }

    pub fn attr(mut self, name: &str, value: crate::attr::Attr) -> Self {
        self.attrs.set(name, value);
        self
    }

    pub fn declared(mut self, types: Vec<Type>) -> Self {
        self.declared = Some(types);
        self
    }

    pub fn regions(mut self, regions: Vec<Region>) -> Self {
        self.regions = regions;
        self
    }

    pub fn after(mut self, deps: Vec<Value>) -> Self {
        self.control_deps = deps;
        self
    }

    pub fn device(mut self, device: DeviceSpec) -> Self {
        self.device = Some(device);
        self
    }

    pub fn span(mut self, span: Span) -> Self {
        self.span = span;
        self
    }
}

/// True for names the printer can write bare (`%x`, `%layer1.w`); others are quoted.
pub fn is_plain_name(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

impl Graph {
    pub fn new(name: impl Into<String>) -> Self {
        let mut regions = PrimaryMap::new();
        let body = regions.push(RegionData {
            label: String::new(),
            params: Vec::new(),
            nodes: Vec::new(),
            yields: Vec::new(),
            parent: None,
            span: Span::default(),
            end_comments: Vec::new(),
        });
        Graph {
            name: name.into(),
            span: Span::default(),
            comments: Vec::new(),
            nodes: PrimaryMap::new(),
            values: PrimaryMap::new(),
            regions,
            body,
            outputs: Vec::new(),
            names: HashMap::new(),
        }
    }

    pub fn value_type(&self, v: Value) -> &Type {
        &self.values[v].ty
    }

    /// The node whose result a value is; `None` for a region parameter.
    pub fn producer(&self, v: Value) -> Option<Node> {
        match self.values[v].def {
            ValueDef::Result(n, _) => Some(n),
            ValueDef::Param(..) => None,
        }
    }

    /// Whether node `n`'s results are the same in every step once its operands are: a
    /// `constant`, or a pure op (not stateful, not control flow, not `grad`) without an
    /// `after` list and without regions other than a fusion's kernel. Sessions keep the
    /// values of such nodes whose operands all come from such nodes (computed once), and
    /// passes store those values as the kernels read them.
    pub fn is_step_invariant_op(&self, n: Node) -> bool {
        let nd = &self.nodes[n];
        nd.op == Op::Constant
            || (!nd.operands.is_empty()
                && nd.control_deps.is_empty()
                && !nd.op.is_stateful()
                && nd.op.kind() != crate::ops::OpKind::Control
                && nd.op != Op::Grad
                && (nd.regions.is_empty() || nd.op == Op::Fusion))
    }

    pub fn uses(&self, v: Value) -> &[Use] {
        &self.values[v].uses
    }

    /// The value named `name`, if any.
    pub fn value_named(&self, name: &str) -> Option<Value> {
        self.names.get(name).copied()
    }

    /// Names a value. Names are unique in a graph; a taken name gets a `_N` suffix. Returns the
    /// name given.
    pub fn set_name(&mut self, v: Value, name: &str) -> String {
        if let Some(old) = self.values[v].name.take() {
            self.names.remove(&old);
        }
        let mut chosen = name.to_string();
        let mut n = 1;
        while self.names.contains_key(&chosen) || chosen.is_empty() {
            chosen = format!("{name}_{n}");
            n += 1;
        }
        self.names.insert(chosen.clone(), v);
        self.values[v].name = Some(chosen.clone());
        chosen
    }

    fn new_value(&mut self, ty: Type, def: ValueDef, span: Span) -> Value {
        self.values.push(ValueData { ty, name: None, def, span, uses: Vec::new() })
    }

    /// Adds a graph input.
    pub fn add_input(&mut self, name: &str, ty: Type) -> Value {
        let body = self.body;
        let v = self.add_param(body, ty, Span::default());
        self.set_name(v, name);
        v
    }

    /// Removes graph input `v`, which nothing may use any more (its uses replaced first); the
    /// inputs after it move up one, and its name is free again.
    pub fn remove_input(&mut self, v: Value) -> Result<(), String> {
        if !self.values[v].uses.is_empty() {
            return Err(format!("input {} is still used", self.values[v].name.as_deref().unwrap_or("?")));
        }
        let body = self.body;
        let i = self.regions[body].params.iter().position(|&p| p == v).ok_or("not a graph input")?;
        self.regions[body].params.remove(i);
        for (k, &p) in self.regions[body].params.iter().enumerate().skip(i) {
            self.values[p].def = ValueDef::Param(body, k as u32);
        }
        if let Some(name) = self.values[v].name.take() {
            self.names.remove(&name);
        }
        Ok(())
    }

    /// The graph inputs, in order.
    pub fn inputs(&self) -> &[Value] {
        &self.regions[self.body].params
    }

    /// The graph outputs' values, in order (parallel to `outputs`).
    pub fn output_values(&self) -> &[Value] {
        &self.regions[self.body].yields
    }

    /// Creates a detached region (to be attached by [`Graph::add_node`]) with parameters of
    /// the given types.
    pub fn new_region(&mut self, label: &str, params: &[Type]) -> Region {
        let r = self.regions.push(RegionData {
            label: label.to_string(),
            params: Vec::new(),
            nodes: Vec::new(),
            yields: Vec::new(),
            parent: None,
            span: Span::default(),
            end_comments: Vec::new(),
        });
        for t in params {
            self.add_param(r, t.clone(), Span::default());
        }
        r
    }

    /// Appends a parameter to a region.
    pub fn add_param(&mut self, region: Region, ty: Type, span: Span) -> Value {
        let idx = self.regions[region].params.len() as u32;
        let v = self.new_value(ty, ValueDef::Param(region, idx), span);
        self.regions[region].params.push(v);
        v
    }

    /// Sets what a region yields (for the body: the graph outputs' values).
    pub fn set_yields(&mut self, region: Region, values: Vec<Value>) {
        for (i, &v) in self.regions[region].yields.clone().iter().enumerate() {
            self.remove_use(v, Use::Yield(region, i as u32));
        }
        for (i, &v) in values.iter().enumerate() {
            self.values[v].uses.push(Use::Yield(region, i as u32));
        }
        self.regions[region].yields = values;
    }

    /// Sets the graph outputs.
    pub fn set_outputs(&mut self, outputs: Vec<(String, Value)>) {
        let (names, values): (Vec<_>, Vec<_>) = outputs.into_iter().unzip();
        self.outputs = names.into_iter().map(|name| Output { name, span: Span::default() }).collect();
        self.set_yields(self.body, values);
    }

    fn remove_use(&mut self, v: Value, u: Use) {
        let uses = &mut self.values[v].uses;
        if let Some(i) = uses.iter().position(|&x| x == u) {
            uses.swap_remove(i);
        }
    }

    /// The signatures of regions, as the type rules see them.
    pub fn region_sig(&self, r: Region) -> RegionSig {
        let rd = &self.regions[r];
        RegionSig {
            params: rd.params.iter().map(|&v| self.values[v].ty.clone()).collect(),
            yields: rd.yields.iter().map(|&v| self.values[v].ty.clone()).collect(),
        }
    }

    /// Runs the op's type rule on the given operands, attributes and regions.
    pub fn infer(
        &self,
        op: Op,
        operands: &[Value],
        attrs: &Attrs,
        regions: &[Region],
        declared: Option<&[Type]>,
    ) -> Result<Vec<Type>, InferError> {
        let operand_types: Vec<Type> = operands.iter().map(|&v| self.values[v].ty.clone()).collect();
        let sigs: Vec<RegionSig> = regions.iter().map(|&r| self.region_sig(r)).collect();
        crate::infer::infer_checked(&InferCtx {
            op,
            def: op.def(),
            operands: &operand_types,
            attrs,
            declared,
            regions: &sigs,
        })
    }

    /// Adds a node at the end of `region`, inferring its result types; fails, adding nothing,
    /// when the type rule rejects it.
    pub fn add_node(&mut self, region: Region, spec: NodeSpec) -> Result<Node, InferError> {
        let at = self.regions[region].nodes.len();
        self.insert_node(region, at, spec)
    }

    /// Like [`Graph::add_node`], at position `index` of the region's node list.
    pub fn insert_node(&mut self, region: Region, index: usize, mut spec: NodeSpec) -> Result<Node, InferError> {
        crate::infer::normalize_attrs(spec.op, &mut spec.attrs);
        let types = self.infer(spec.op, &spec.operands, &spec.attrs, &spec.regions, spec.declared.as_deref())?;
        for (i, &v) in spec.operands.iter().enumerate() {
            self.values[v].uses.push(Use::Operand(self.nodes.next_key(), i as u32));
        }
        for (i, &v) in spec.control_deps.iter().enumerate() {
            self.values[v].uses.push(Use::Control(self.nodes.next_key(), i as u32));
        }
        for &r in &spec.regions {
            self.regions[r].parent = Some(self.nodes.next_key());
        }
        let node = self.nodes.push(NodeData {
            op: spec.op,
            operands: spec.operands,
            results: Vec::new(),
            attrs: spec.attrs,
            regions: spec.regions,
            control_deps: spec.control_deps,
            device: spec.device,
            parent: region,
            span: spec.span,
            comments: Vec::new(),
        });
        let results = types
            .into_iter()
            .enumerate()
            .map(|(i, t)| self.new_value(t, ValueDef::Result(node, i as u32), spec.span))
            .collect();
        self.nodes[node].results = results;
        self.regions[region].nodes.insert(index, node);
        Ok(node)
    }

    /// Copies node `n` of `src`, with its regions (deeply), to the end of `region` of `self`;
    /// `operands` and `control_deps` stand for the node's own in `self`. Attributes, device,
    /// span, comments and result names come along (a name taken in `self` gets a suffix).
    /// Returns the copy's results. Used to move nodes between graphs (partitioning).
    pub fn import_node(
        &mut self,
        region: Region,
        src: &Graph,
        n: Node,
        operands: Vec<Value>,
        control_deps: Vec<Value>,
    ) -> Result<Vec<Value>, InferError> {
        let nd = &src.nodes[n];
        let mut regions = Vec::with_capacity(nd.regions.len());
        for &r in &nd.regions {
            let rd = &src.regions[r];
            let types: Vec<Type> = rd.params.iter().map(|&p| src.values[p].ty.clone()).collect();
            let copy = self.new_region(&rd.label, &types);
            let mut map: HashMap<Value, Value> = HashMap::new();
            for (&from, &to) in rd.params.iter().zip(&self.regions[copy].params.clone()) {
                map.insert(from, to);
                if let Some(name) = &src.values[from].name {
                    self.set_name(to, name);
                }
            }
            for &m in &rd.nodes {
                let md = &src.nodes[m];
                let ops = md.operands.iter().map(|v| map[v]).collect();
                let deps = md.control_deps.iter().map(|v| map[v]).collect();
                let results = self.import_node(copy, src, m, ops, deps)?;
                map.extend(md.results.iter().copied().zip(results));
            }
            self.set_yields(copy, rd.yields.iter().map(|v| map[v]).collect());
            self.regions[copy].span = rd.span;
            self.regions[copy].end_comments = rd.end_comments.clone();
            regions.push(copy);
        }
        let mut spec = NodeSpec::new(nd.op, operands).after(control_deps).regions(regions).span(nd.span);
        spec.attrs = nd.attrs.clone();
        spec.device = nd.device.clone();
        spec.declared = Some(nd.results.iter().map(|&v| src.values[v].ty.clone()).collect());
        let copy = self.add_node(region, spec)?;
        self.nodes[copy].comments = nd.comments.clone();
        let results = self.nodes[copy].results.clone();
        for (&from, &to) in nd.results.iter().zip(&results) {
            if let Some(name) = &src.values[from].name {
                self.set_name(to, name);
            }
        }
        Ok(results)
    }

    /// Adds a node and returns its results: the short form for front ends and tests.
    pub fn add(&mut self, region: Region, spec: NodeSpec) -> Result<Vec<Value>, InferError> {
        let n = self.add_node(region, spec)?;
        Ok(self.nodes[n].results.clone())
    }

    /// Replaces every use of `old` (operands, control deps, yields) by `new`.
    pub fn replace_all_uses(&mut self, old: Value, new: Value) {
        if old == new {
            return;
        }
        for u in std::mem::take(&mut self.values[old].uses) {
            match u {
                Use::Operand(n, i) => self.nodes[n].operands[i as usize] = new,
                Use::Control(n, i) => self.nodes[n].control_deps[i as usize] = new,
                Use::Yield(r, i) => self.regions[r].yields[i as usize] = new,
            }
            self.values[new].uses.push(u);
        }
    }

    /// Removes a node whose results are unused, with the regions it owns.
    pub fn remove_node(&mut self, node: Node) -> Result<(), String> {
        if let Some(&v) = self.nodes[node].results.iter().find(|&&v| !self.values[v].uses.is_empty()) {
            return Err(format!("cannot remove {node}: its result {v} is still used"));
        }
        let parent = self.nodes[node].parent;
        self.regions[parent].nodes.retain(|&n| n != node);
        self.detach_uses(node);
        for v in self.nodes[node].results.clone() {
            if let Some(name) = self.values[v].name.take() {
                self.names.remove(&name);
            }
        }
        Ok(())
    }

    /// Removes many nodes at once, with the regions they own. Each node's results may be used
    /// only by nodes also being removed. Linear in the nodes removed and the uses they make
    /// (up to a sort), apart from one pass over each affected region, so passes that delete
    /// thousands of nodes stay linear.
    pub fn remove_nodes(&mut self, nodes: &[Node]) -> Result<(), String> {
        // Membership by binary search in the sorted ids: a hash set of a few hundred thousand
        // nodes missed the cache on nearly every lookup.
        let mut doomed = nodes.to_vec();
        doomed.sort_unstable();
        doomed.dedup();
        let is_doomed = |m: &Node| doomed.binary_search(m).is_ok();
        for &n in nodes {
            for &v in &self.nodes[n].results {
                if self.values[v].uses.iter().any(|u| u.user().is_none_or(|m| !is_doomed(&m))) {
                    return Err(format!("cannot remove {n}: its result {v} is still used"));
                }
            }
        }
        // Drop the uses per value in one pass each: a value used by thousands of the removed
        // nodes (a shared weight) must not cost a scan per use.
        let mut uses = Vec::new();
        for &n in nodes {
            self.uses_by(n, &mut uses);
        }
        uses.sort_unstable_by_key(|&(v, _)| v);
        for dropped in uses.chunk_by(|a, b| a.0 == b.0) {
            let list = &mut self.values[dropped[0].0].uses;
            if dropped.len() <= 8 {
                list.retain(|u| !dropped.iter().any(|(_, d)| d == u));
            } else {
                let set: std::collections::HashSet<Use> = dropped.iter().map(|&(_, u)| u).collect();
                list.retain(|u| !set.contains(u));
            }
        }
        let mut regions: Vec<Region> = Vec::new();
        let mut freed = Vec::new();
        for &n in nodes {
            regions.push(self.nodes[n].parent);
            for i in 0..self.nodes[n].results.len() {
                let v = self.nodes[n].results[i];
                if let Some(name) = self.values[v].name.take() {
                    freed.push((v, name));
                }
            }
        }
        // Names go one by one, or in one sweep of the table when they are a good part of it
        // (a lookup each missed the cache once the table held a hundred thousand names).
        if freed.len() * 4 < self.names.len() {
            for (_, name) in &freed {
                self.names.remove(name);
            }
        } else {
            let mut gone = vec![false; self.values.len()];
            for &(v, _) in &freed {
                gone[v.as_u32() as usize] = true;
            }
            self.names.retain(|_, v| !gone[v.as_u32() as usize]);
        }
        regions.sort_unstable();
        regions.dedup();
        for r in regions {
            self.regions[r].nodes.retain(|n| !is_doomed(n));
        }
        Ok(())
    }

    fn detach_uses(&mut self, node: Node) {
        let mut uses = Vec::new();
        self.uses_by(node, &mut uses);
        for (v, u) in uses {
            self.remove_use(v, u);
        }
    }

    /// Every use a node makes (operands, control deps, and inside its regions, yields too).
    fn uses_by(&self, node: Node, out: &mut Vec<(Value, Use)>) {
        let nd = &self.nodes[node];
        out.extend(nd.operands.iter().enumerate().map(|(i, &v)| (v, Use::Operand(node, i as u32))));
        out.extend(nd.control_deps.iter().enumerate().map(|(i, &v)| (v, Use::Control(node, i as u32))));
        for &r in &nd.regions {
            out.extend(self.regions[r].yields.iter().enumerate().map(|(i, &v)| (v, Use::Yield(r, i as u32))));
            for &n in &self.regions[r].nodes {
                self.uses_by(n, out);
            }
        }
    }

    /// Every live node, regions in pre-order (a node before the nodes of its regions).
    pub fn walk(&self) -> Vec<Node> {
        let mut out = Vec::new();
        self.walk_region(self.body, &mut out);
        out
    }

    fn walk_region(&self, r: Region, out: &mut Vec<Node>) {
        for &n in &self.regions[r].nodes {
            out.push(n);
            for &sub in &self.nodes[n].regions {
                self.walk_region(sub, out);
            }
        }
    }

    /// Number of live nodes, nested ones included.
    pub fn node_count(&self) -> usize {
        self.walk().len()
    }

    /// A short description of a node for messages: `%3 = add` or `add` for result-less ones.
    pub fn describe(&self, node: Node) -> String {
        let nd = &self.nodes[node];
        match nd.results.first() {
            Some(&v) => match &self.values[v].name {
                Some(name) => format!("'{} %{name}'", nd.op.name()),
                None => format!("'{}'", nd.op.name()),
            },
            None => format!("'{}'", nd.op.name()),
        }
    }
}
